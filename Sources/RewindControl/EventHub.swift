import Dispatch
import Foundation
import Synchronization

/// The live events of a recorder, fanned out to every `GET /v1/events` client as Server-Sent Events.
///
/// Publishing never waits: each client has a bounded queue (``queueCapacity`` events); an event that does not fit
/// is dropped for that client and counted, and the client then receives `events_lost` with the count before the
/// next event. So a slow client never slows the recorder or other clients.
///
/// Every event but the once-a-second `status` carries an id, `RUN-NUMBER` (`RUN` this hub's ``run``, `NUMBER`
/// counting from 1), and the hub keeps the last ``historyCapacity`` of them: a client that comes back with the id
/// of the last event it had (`Last-Event-ID`, which a browser's `EventSource` sends by itself when it reconnects)
/// gets what it missed first, and `events_lost` with the count of what is no longer kept; with an id of another run
/// (the recorder restarted) or none it could have had, `resync` says it must read the state again.
package final class EventHub: Sendable {
    /// Events a client may have queued.
    package static let queueCapacity = 256
    /// Events kept for clients that come back: as many as a new client's queue takes.
    package static let historyCapacity = queueCapacity

    /// The events kept, by number: event `n` at `messages[(n − 1) % historyCapacity]` while `n ≥ next − count`.
    private struct History {
        var next: UInt64 = 1
        var messages: [[UInt8]] = []

        /// The oldest number kept (`next` when none is).
        var oldest: UInt64 { next - UInt64(messages.count) }

        mutating func keep(_ message: [UInt8]) {
            if messages.count < EventHub.historyCapacity {
                messages.append(message)
            } else {
                messages[Int((next - 1) % UInt64(EventHub.historyCapacity))] = message
            }
            next += 1
        }

        func message(_ number: UInt64) -> [UInt8] { messages[Int((number - 1) % UInt64(EventHub.historyCapacity))] }
    }

    private let subscribers = Mutex<[ObjectIdentifier: EventSubscription]>([:])
    private let history = Mutex(History())
    /// This run's part of every event id: eight hexadecimal digits drawn when the hub is made, so an id from before
    /// a restart is not taken for one of this run's.
    package let run: String

    /// A hub with no clients.
    package init() {
        let drawn = String(UInt32.random(in: .min ... .max), radix: 16)
        run = String(repeating: "0", count: 8 - drawn.count) + drawn
    }

    /// Sends `value` as event `name` to every client, or to those `include` accepts.
    ///
    /// - Parameter kept: whether the event gets an id and is kept for clients that come back (`status`, sent once
    ///   a second and stale at once, is not).
    package func publish(
        _ name: String, _ value: some Encodable, kept: Bool = true, to include: ((EventSubscription) -> Bool)? = nil
    ) {
        let data = APICoding.encode(value)
        guard kept else {
            fanOut(Self.message(name, data: data), to: include)
            return
        }
        // Numbered, kept and queued under one lock: a client coming back meanwhile gets each event once, either
        // from the history or queued.
        history.withAnnotatedLock { history in
            let message = Self.message(name, data: data, id: "\(run)-\(history.next)")
            history.keep(message)
            fanOut(message, to: include)
        }
    }

    private func fanOut(_ message: [UInt8], to include: ((EventSubscription) -> Bool)?) {
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
        message(name, data: APICoding.encode(value))
    }

    static func message(_ name: String, data: [UInt8], id: String? = nil) -> [UInt8] {
        Array(((id.map { "id: \($0)\n" } ?? "") + "event: \(name)\ndata: ").utf8) + data + Array("\n\n".utf8)
    }

    /// A new client's stream.
    ///
    /// - Parameters:
    ///   - sealedBefore: each stream's highest sealed segment id when the client came: it gets `segment` events of
    ///     later seals only.
    ///   - lastEventID: the id of the last event a client that comes back had: it gets the kept events after it
    ///     first (and `events_lost` for those no longer kept, or `resync` for an id this run never gave).
    package func subscribe(sealedBefore: [String: Int64] = [:], lastEventID: String? = nil) -> EventSubscription {
        // A client that comes back gets every `segment` event published after its last event: a seal made before it
        // came back whose event is published after (up to a second later) is one it missed, not one from before it.
        let resuming = history.withAnnotatedLock { history in
            lastEventID.flatMap(number).map { $0 < history.next } ?? false
        }
        let published = publishedSeals.withAnnotatedLock { $0 }
        let subscription = EventSubscription(
            hub: self, sealedBefore: resuming ? sealedBefore.merging(published) { min($0, $1) } : sealedBefore)
        history.withAnnotatedLock { history in
            if let lastEventID {
                if let last = number(lastEventID), last < history.next {
                    // Missed and no longer kept: those between it and the oldest kept.
                    subscription.countLost(Int(last < history.oldest - 1 ? history.oldest - 1 - last : 0))
                    for number in max(last + 1, history.oldest)..<history.next {
                        subscription.enqueue(history.message(number))
                    }
                } else {
                    let reason = ResyncEvent(
                        lastEventID: lastEventID,
                        message:
                            "no event '\(lastEventID)' was sent by this run of the recorder (it restarted, or the id is "
                            + "not one it gives): what happened meanwhile is unknown; read /v1/status, /v1/saves and "
                            + "/v1/markers again")
                    subscription.enqueue(Self.message("resync", reason))
                }
            }
            subscribers.withAnnotatedLock { $0[ObjectIdentifier(subscription)] = subscription }
        }
        return subscription
    }

    /// Each stream's highest sealed segment id whose `segment` event was published (while clients listened): a
    /// client that comes back gets the events of later seals, however soon after it came they are published.
    private let publishedSeals = Mutex<[String: Int64]>([:])

    /// Notes that `segment` events are published for `stream`'s seals up to `id`; nil when nobody listens (its
    /// seals go unpublished until someone does).
    package func notePublishedSeals(stream: String, upTo id: Int64?) {
        publishedSeals.withAnnotatedLock { $0[stream] = id }
    }

    /// The number of an id of this run (`RUN-NUMBER`, numbered from 1, written without leading zeros; `RUN-0`, before
    /// the first, stands for none had yet); nil for any other text (`RUN-007` is no id it gives).
    private func number(_ id: String) -> UInt64? {
        guard let dash = id.lastIndex(of: "-"), id[..<dash] == run else { return nil }
        let digits = id[id.index(after: dash)...]
        guard digits == "0" || digits.first != "0", digits.allSatisfy({ $0.isASCII && $0.isNumber }) else {
            return nil
        }
        return UInt64(digits)
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

    /// Counts `count` events this client missed before it came back (told as `events_lost` first).
    func countLost(_ count: Int) {
        queue.withAnnotatedLock { $0.lost += count }
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

/// The data of `resync`: the id a client came back with, which this run of the recorder never gave.
private struct ResyncEvent: Encodable {
    var lastEventID: String
    var message: String

    enum CodingKeys: String, CodingKey {
        case message
        case lastEventID = "last_event_id"
    }
}
