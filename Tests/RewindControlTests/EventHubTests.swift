import Foundation
import RewindControl
import Testing

/// The event fan-out: a client that does not read loses events, never slows the publisher, and is told how many.
@Suite(.timeLimit(.minutes(45))) struct EventHubTests {
    /// Everything the subscription hands out until it has given `count` events (comments skipped), or until it
    /// has sent three keep-alives in a row (three seconds without an event: fewer came than expected).
    func readEvents(_ subscription: EventSubscription, count: Int) -> [String] {
        var events: [String] = []
        var pending = ""
        var buffer = [UInt8](repeating: 0, count: 4096)
        var idle = 0
        while events.count < count && idle < 3 {
            guard let read = buffer.withUnsafeMutableBytes({ subscription.read(into: $0) }) else { break }
            pending += String(decoding: buffer[0..<read], as: UTF8.self)
            while let end = pending.range(of: "\n\n") {
                let block = String(pending[..<end.lowerBound])
                pending.removeSubrange(..<end.upperBound)
                if block.hasPrefix(": keep-alive") {
                    idle += 1
                } else if !block.hasPrefix(":") {
                    events.append(block)
                    idle = 0
                }
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
        #expect(events[1] == "id: \(hub.run)-1\nevent: save\ndata: {\"n\":0}")
        #expect(
            events.last
                == "id: \(hub.run)-\(EventHub.queueCapacity)\nevent: save\ndata: {\"n\":\(EventHub.queueCapacity - 1)}")
        // Caught up, it receives new events again.
        hub.publish("marker", ["n": 1])
        #expect(
            readEvents(slow, count: 1) == [
                "id: \(hub.run)-\(EventHub.queueCapacity + 11)\nevent: marker\ndata: {\"n\":1}"
            ])
        // Closing ends the stream after what is queued.
        hub.publish("stopping", ["status": "stopping"])
        hub.closeAll()
        #expect(readEvents(slow, count: 1).first?.contains("\nevent: stopping\n") == true)
        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(buffer.withUnsafeMutableBytes { slow.read(into: $0) } == nil)
        #expect(hub.count == 0)
    }

    /// A client that comes back with the id of the last event it had gets what it missed first, in order, each
    /// once; the `status` snapshots carry no id and are not kept.
    @Test func aClientThatComesBackGetsWhatItMissed() {
        let hub = EventHub()
        #expect(hub.run.count == 8 && hub.run.allSatisfy(\.isHexDigit), "\(hub.run)")
        let first = hub.subscribe()
        for number in 0..<3 { hub.publish("save", ["n": number]) }
        hub.publish("status", ["s": 1], kept: false)
        let seen = readEvents(first, count: 4)
        #expect(seen.first == "id: \(hub.run)-1\nevent: save\ndata: {\"n\":0}")
        #expect(seen.last == "event: status\ndata: {\"s\":1}")
        first.close()
        hub.publish("marker", ["n": 3])
        let back = hub.subscribe(lastEventID: "\(hub.run)-1")
        hub.publish("marker", ["n": 4])
        #expect(
            readEvents(back, count: 4) == [
                "id: \(hub.run)-2\nevent: save\ndata: {\"n\":1}", "id: \(hub.run)-3\nevent: save\ndata: {\"n\":2}",
                "id: \(hub.run)-4\nevent: marker\ndata: {\"n\":3}", "id: \(hub.run)-5\nevent: marker\ndata: {\"n\":4}",
            ])
        // Up to date: nothing again.
        let current = hub.subscribe(lastEventID: "\(hub.run)-5")
        hub.publish("marker", ["n": 5])
        #expect(readEvents(current, count: 1) == ["id: \(hub.run)-6\nevent: marker\ndata: {\"n\":5}"])
        // An id of another run, one this run has not given yet, or no id at all: resync, then only new events.
        for id in [
            "0badc0de-3", "\(hub.run)-99", "\(hub.run)-", "\(hub.run)-+1", "\(hub.run)-01", "\(hub.run)-00", "garbage",
            "",
        ] {
            let lost = hub.subscribe(lastEventID: id)
            hub.publish("marker", ["n": 6])
            let events = readEvents(lost, count: 2)
            #expect(events.first?.hasPrefix("event: resync\ndata: {\"last_event_id\":") == true, "\(id): \(events)")
            #expect(events.last?.hasSuffix("event: marker\ndata: {\"n\":6}") == true, "\(id): \(events)")
        }
    }

    /// A client that comes back gets the `segment` events of every seal whose event was not yet published when it
    /// came (a seal is published up to a second after it happens): its mark is the highest seal published, not
    /// the highest made, which would filter out a seal made before it came back but published after. A new client
    /// gets the seals after it came.
    @Test func aClientBackGetsTheSealsPublishedAfterItCame() {
        let hub = EventHub()
        hub.publish("save", ["n": 1])
        hub.notePublishedSeals(stream: "a", upTo: 5)
        let back = hub.subscribe(sealedBefore: ["a": 7, "b": 3], lastEventID: "\(hub.run)-1")
        #expect(back.sealedBefore == ["a": 5, "b": 3])
        let new = hub.subscribe(sealedBefore: ["a": 7, "b": 3])
        #expect(new.sealedBefore == ["a": 7, "b": 3])
        // Nobody listened meanwhile: nothing was published, and the seals as they are now stand.
        hub.notePublishedSeals(stream: "a", upTo: nil)
        #expect(hub.subscribe(sealedBefore: ["a": 7], lastEventID: "\(hub.run)-1").sealedBefore == ["a": 7])
        for subscription in [back, new] { subscription.close() }
    }

    /// Further behind than the hub keeps: `events_lost` with the exact count of those no longer kept, then every
    /// one kept.
    @Test func aClientBackFromFarBehindIsToldWhatIsNoLongerKept() {
        let hub = EventHub()
        for number in 0..<(EventHub.historyCapacity + 10) { hub.publish("save", ["n": number]) }
        for (last, lost) in [(0, 10), (4, 6), (10, 0)] {
            let back = hub.subscribe(lastEventID: "\(hub.run)-\(last)")
            let events = readEvents(back, count: EventHub.historyCapacity + (lost > 0 ? 1 : 0))
            #expect(events.count == EventHub.historyCapacity + (lost > 0 ? 1 : 0), "\(last): \(events.count) events")
            if lost > 0 { #expect(events.first == "event: events_lost\ndata: {\"count\":\(lost)}", "\(last)") }
            #expect(events.dropFirst(lost > 0 ? 1 : 0).first == "id: \(hub.run)-11\nevent: save\ndata: {\"n\":10}")
            #expect(
                events.last
                    == "id: \(hub.run)-\(EventHub.historyCapacity + 10)\nevent: save\ndata: {\"n\":\(EventHub.historyCapacity + 9)}"
            )
            back.close()
        }
    }
}
