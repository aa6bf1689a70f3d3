import Dispatch
import Foundation
import Synchronization

/// The live events of a recorder, fanned out to every `GET /v1/events` client as Server-Sent Events.
///
/// Publishing never waits: each client has a bounded queue (``queueCapacity`` events); an event that does not fit
/// is dropped for that client and counted, and the client then receives `events_lost` with the count before the
/// next event. So a slow client never slows the recorder or other clients.
package final class EventHub: Sendable {
    /// Events a client may have queued.
    package static let queueCapacity = 256

    private let subscribers = Mutex<[ObjectIdentifier: EventSubscription]>([:])

    /// A hub with no clients.
    package init() {}

    /// Sends `value` as event `name` to every client, or to those `include` accepts.
    package func publish(
        _ name: String, _ value: some Encodable, to include: ((EventSubscription) -> Bool)? = nil
    ) {
        let message = Self.message(name, value)
        for subscriber in subscribers.withAnnotatedLock({ Array($0.values) }) where include?(subscriber) ?? true {
            subscriber.enqueue(message)
        }
    }

    /// The lowest of the clients' ``EventSubscription/sealedBefore`` ids of `stream`: the seals some client has not
    /// had an event of start after it; nil without clients.
    package func lowestSealedBefore(stream: String) -> Int64? {
        subscribers.withAnnotatedLock { $0.values.map { $0.sealedBefore[stream] ?? 0 }.min() }
    }

    /// Event `name` with `value` as its data, as Server-Sent Events lines.
    static func message(_ name: String, _ value: some Encodable) -> [UInt8] {
        Array("event: \(name)\ndata: ".utf8) + APICoding.encode(value) + Array("\n\n".utf8)
    }

    /// A new client's stream.
    ///
    /// - Parameter sealedBefore: each stream's highest sealed segment id when the client came: it gets `segment`
    ///   events of later seals only.
    package func subscribe(sealedBefore: [String: Int64] = [:]) -> EventSubscription {
        let subscription = EventSubscription(hub: self, sealedBefore: sealedBefore)
        subscribers.withAnnotatedLock { $0[ObjectIdentifier(subscription)] = subscription }
        return subscription
    }

    func remove(_ subscription: EventSubscription) {
        _ = subscribers.withAnnotatedLock { $0.removeValue(forKey: ObjectIdentifier(subscription)) }
    }

    /// Ends every client's stream (at stop).
    package func closeAll() {
        for subscriber in subscribers.withAnnotatedLock({ Array($0.values) }) { subscriber.close() }
    }

    /// Clients connected now.
    package var count: Int { subscribers.withAnnotatedLock { $0.count } }
}

/// One events client: its bounded queue, read by its connection's thread.
package final class EventSubscription: HTTPStreamBody {
    private struct Queue {
        var messages: [[UInt8]] = []
        /// Bytes of a message partly handed out.
        var pending: [UInt8] = []
        var lost = 0
        var closed = false
    }

    private let queue = Mutex(Queue())
    private let ready = DispatchSemaphore(value: 0)
    private weak let hub: EventHub?
    /// Each stream's highest sealed segment id when the client came (none: 0).
    package let sealedBefore: [String: Int64]

    init(hub: EventHub, sealedBefore: [String: Int64]) {
        self.hub = hub
        self.sealedBefore = sealedBefore
        // A first comment, so the client sees the stream open at once.
        queue.withAnnotatedLock { $0.pending = Array(": rewind events\n\n".utf8) }
    }

    func enqueue(_ message: [UInt8]) {
        let accepted = queue.withAnnotatedLock { queue in
            guard !queue.closed else { return false }
            guard queue.messages.count < EventHub.queueCapacity else {
                queue.lost += 1
                return false
            }
            queue.messages.append(message)
            return true
        }
        if accepted { ready.signal() }
    }

    /// Waits up to a second for events; with none, sends a comment line to keep the connection alive (and to notice
    /// a client that went away).
    package func read(into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        // The semaphore counts every event queued, also those read without waiting: a wake-up with nothing queued
        // is one of those, so the keep-alive waits for the second to pass, not for the first wake-up.
        let deadline = DispatchTime.now() + .seconds(1)
        while true {
            let idle = DispatchTime.now() >= deadline
            let bytes: [UInt8]? = queue.withAnnotatedLock { queue in
                if queue.pending.isEmpty {
                    if queue.lost > 0 {
                        queue.pending = Array("event: events_lost\ndata: {\"count\":\(queue.lost)}\n\n".utf8)
                        queue.lost = 0
                    } else if !queue.messages.isEmpty {
                        queue.pending = queue.messages.removeFirst()
                    } else if queue.closed {
                        return nil
                    } else if idle {
                        queue.pending = Array(": keep-alive\n\n".utf8)
                    } else {
                        return []
                    }
                }
                let count = min(buffer.count, queue.pending.count)
                let head = Array(queue.pending[..<count])
                queue.pending.removeFirst(count)
                return head
            }
            guard let bytes else { return nil }
            if !bytes.isEmpty {
                bytes.withUnsafeBytes { buffer.copyMemory(from: $0) }
                return bytes.count
            }
            _ = ready.wait(timeout: deadline)
        }
    }

    package func close() {
        queue.withAnnotatedLock { $0.closed = true }
        ready.signal()
        hub?.remove(self)
    }
}
