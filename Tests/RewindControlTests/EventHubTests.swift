import Foundation
import RewindControl
import Testing

/// The event fan-out: a client that does not read loses events, never slows the publisher, and is told how many.
@Suite(.timeLimit(.minutes(15))) struct EventHubTests {
    /// Everything the subscription hands out until it has given `count` events (comments skipped).
    func readEvents(_ subscription: EventSubscription, count: Int) -> [String] {
        var events: [String] = []
        var pending = ""
        var buffer = [UInt8](repeating: 0, count: 4096)
        while events.count < count {
            guard let read = buffer.withUnsafeMutableBytes({ subscription.read(into: $0) }) else { break }
            pending += String(decoding: buffer[0..<read], as: UTF8.self)
            while let end = pending.range(of: "\n\n") {
                let block = String(pending[..<end.lowerBound])
                pending.removeSubrange(..<end.upperBound)
                if !block.hasPrefix(":") { events.append(block) }
            }
        }
        return events
    }

    /// After a burst of events read without waiting, an idle client gets a keep-alive comment a second apart, not
    /// one per event of the burst back to back.
    @Test func keepAlivesStayASecondApartAfterABurst() {
        let hub = EventHub()
        let client = hub.subscribe()
        for number in 0..<20 { hub.publish("save", ["n": number]) }
        #expect(readEvents(client, count: 20).count == 20)
        var buffer = [UInt8](repeating: 0, count: 4096)
        let start = ContinuousClock.now
        var comments = 0
        while comments < 2 {
            guard let read = buffer.withUnsafeMutableBytes({ client.read(into: $0) }) else { break }
            if String(decoding: buffer[0..<read], as: UTF8.self).hasPrefix(": keep-alive") { comments += 1 }
        }
        #expect(comments == 2)
        // At least a second for the two (the first may come up to a second early, as the opening comment's).
        #expect(ContinuousClock.now - start >= .milliseconds(900), "keep-alives came back to back")
    }

    @Test func aClientThatFallsBehindIsToldHowManyEventsItLost() {
        let hub = EventHub()
        let slow = hub.subscribe()
        for number in 0..<(EventHub.queueCapacity + 10) { hub.publish("save", ["n": number]) }
        let events = readEvents(slow, count: EventHub.queueCapacity + 1)
        #expect(events.count == EventHub.queueCapacity + 1)
        #expect(events.first == "event: events_lost\ndata: {\"count\":10}")
        #expect(events[1] == "event: save\ndata: {\"n\":0}")
        #expect(events.last == "event: save\ndata: {\"n\":\(EventHub.queueCapacity - 1)}")
        // Caught up, it receives new events again.
        hub.publish("marker", ["n": 1])
        #expect(readEvents(slow, count: 1) == ["event: marker\ndata: {\"n\":1}"])
        // Closing ends the stream after what is queued.
        hub.publish("stopping", ["status": "stopping"])
        hub.closeAll()
        #expect(readEvents(slow, count: 1).first?.hasPrefix("event: stopping") == true)
        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(buffer.withUnsafeMutableBytes { slow.read(into: $0) } == nil)
        #expect(hub.count == 0)
    }
}
