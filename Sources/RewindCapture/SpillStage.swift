import Dispatch
import Foundation
import RewindCore
import RewindSystem
import SegmentStore
import Synchronization

/// The spill thread: writes the frames of every stream of a recorder to the segment store, in sequence order per
/// stream, and records what was lost.
///
/// Streams take turns: each round pins and writes at most one batch of each stream's unwritten frames, so every
/// stream gets its turn within a few frames of work and a stream whose input stalled or ended holds up no other.
/// Each ``SpillLane``'s ``StreamWriter`` is used by this thread alone while it runs; ``finish(recorderTime:)``
/// touches them only after the thread has stopped. Requests from other threads (wake-ups, index flushes, finish) go
/// through atomics and semaphores.
final class SpillStage: @unchecked Sendable {
    private let configuration: RecorderConfiguration
    /// Added before ``start()``, read only by the spill thread afterwards.
    private var lanes: [SpillLane] = []
    private let wakeup = DispatchSemaphore(value: 0)
    private let stopped = DispatchSemaphore(value: 0)
    private let finishing = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)
    private let finished = Mutex<Bool>(false)
    /// Incremented by queries that need the index to cover every written frame; the thread syncs and answers.
    private let flushRequests = Atomic<Int>(0)
    private let flushesDone = Atomic<Int>(0)
    private let finalError = Mutex<(any Error)?>(nil)
    /// Recorder time when the recording finished (for the gap of a stream whose input failed).
    private let finishTime = Mutex<Int64?>(nil)

    /// Frames pinned at once: few, so written frames are unpinned soon and the oldest frames of the ring stay
    /// evictable; fewer in a small ring (``RecorderStream/spillBatch(_:)``).
    static let batch = 8

    init(configuration: RecorderConfiguration) {
        self.configuration = configuration
    }

    /// Adds a stream; only before ``start()``.
    func addLane(_ lane: SpillLane) {
        precondition(!isRunning, "streams are added before the spill thread starts")
        lanes.append(lane)
    }

    var isRunning: Bool { running.load(ordering: .acquiring) }

    func start() {
        running.store(true, ordering: .releasing)
        let thread = Thread { [self] in
            run()
            running.store(false, ordering: .releasing)
            stopped.signal()
        }
        thread.name = "rewind-spill"
        thread.start()
    }

    func wake() { wakeup.signal() }

    /// Makes the index cover every frame written so far (a sync on the spill thread); returns when done.
    func flushIndex() {
        guard isRunning else { return }
        let ticket = flushRequests.add(1, ordering: .acquiringAndReleasing).newValue
        wakeup.signal()
        while flushesDone.load(ordering: .acquiring) < ticket && isRunning { usleep(200) }
    }

    /// Drains every accepted frame of every stream to disk, syncs and seals; idempotent.
    ///
    /// - Parameter recorderTime: recorder time now (where the gap of a stream whose input failed ends).
    func finish(recorderTime: Int64?) throws {
        let first = finished.withLock { done in
            defer { done = true }
            return !done
        }
        if first {
            finishTime.withLock { $0 = recorderTime }
            finishing.store(true, ordering: .releasing)
            wakeup.signal()
            stopped.wait()
        }
        if let failure = finalError.withLock({ $0 }) { throw RecorderError.finishFailed(cause: failure) }
    }

    // MARK: The thread

    private func run() {
        while true {
            let isFinishing = finishing.load(ordering: .acquiring)
            var wrote = false
            // One batch of each stream per round: fair, and no stream waits on another's input.
            for lane in lanes where lane.spillAvailable(all: isFinishing) { wrote = true }
            answerFlushRequests()
            if isFinishing && !wrote && lanes.allSatisfy(\.isDrained) { break }
            if !wrote { _ = wakeup.wait(timeout: .now() + .milliseconds(20)) }
        }
        let end = finishTime.withLock { $0 }
        var failure: (any Error)?
        for lane in lanes {
            if let error = lane.close(recorderTime: end) { failure = failure ?? error }
        }
        flushesDone.store(Int.max / 2, ordering: .releasing)
        if let failure { finalError.withLock { $0 = failure } }
    }

    private func answerFlushRequests() {
        let requested = flushRequests.load(ordering: .acquiring)
        guard requested > flushesDone.load(ordering: .acquiring) else { return }
        for lane in lanes { lane.sync() }
        flushesDone.store(requested, ordering: .releasing)
    }
}

/// One stream's side of the spill thread: its ring, writer and what it has written and lost. Used by the spill
/// thread alone.
final class SpillLane {
    private let ring: RingStore
    private let writer: StreamWriter
    private let shared: RecorderShared
    private let stream: StreamDescription
    private let configuration: RecorderConfiguration

    /// The last sequence number written (or lost); the next one to write is `lastSequence + 1`.
    private var lastSequence: UInt64 = 0
    /// The pts of the last frame written successfully (before the first, the store's newest frame of the stream).
    private var lastWrittenPTS: Int64?
    /// Why accepted frames are missing since the last frame written (evicted before spill, or a failed write):
    /// the reason of the gap recorded when the next frame is written. Loss outranks every other reason. Before the
    /// first frame of a stream the store already holds: ``LossReason/recorderStopped``.
    private var pendingLoss: LossReason?
    /// The pts of the first and last frames whose write failed since the last frame written: the tail of the
    /// recording is a gap up to the last one when no frame is written after them.
    private var failedPTS: (first: Int64, last: Int64)?

    init(
        ring: RingStore, writer: StreamWriter, shared: RecorderShared, stream: StreamDescription,
        configuration: RecorderConfiguration, lastStoredPTS: Int64?
    ) {
        self.ring = ring
        self.writer = writer
        self.shared = shared
        self.stream = stream
        self.configuration = configuration
        if let lastStoredPTS {
            lastWrittenPTS = lastStoredPTS
            pendingLoss = .recorderStopped
        }
    }

    /// Whether every frame the producer stored has been written (or counted lost).
    var isDrained: Bool { lastSequence >= shared.newestSequence.load(ordering: .acquiring) }

    /// Makes the index cover every frame written so far.
    func sync() {
        do {
            try writer.sync()
        } catch {
            shared.state.withLock { $0.statistics.lastError = "\(error)" }
        }
    }

    /// Pins the next unwritten frames, writes those due, releases them. Returns whether any was written.
    func spillAvailable(all: Bool) -> Bool {
        // Read before pinning: every frame up to this sequence was in the ring before the pin (the producer
        // publishes a sequence after storing its frame), so one the pin does not find has been evicted.
        let storedBeforePin = shared.newestSequence.load(ordering: .acquiring)
        let snapshot = ring.pin(
            fromSequence: lastSequence + 1, limit: shared.spillBatch.load(ordering: .relaxed))
        // Counted until released: a producer writing through waits until the spill stage holds no slab.
        let pinned = snapshot.count
        shared.spillPinnedFrames.add(pinned, ordering: .releasing)
        defer {
            snapshot.release()
            shared.spillPinnedFrames.subtract(pinned, ordering: .releasing)
        }
        guard !snapshot.isEmpty else { return skipEvicted(upTo: storedBeforePin) }
        var horizon = Int64.max
        if configuration.spill == .onEvict && !all, let newest = ring.statistics.lastPTSNanoseconds {
            horizon = newest - (configuration.onEvictLeadNanoseconds ?? configuration.windowNanoseconds / 4 * 3)
        }
        // A waiting producer needs room now: frames not due yet are written too, until few enough are left.
        let wanted = shared.unwrittenFramesWanted.load(ordering: .acquiring)
        let newest = shared.newestSequence.load(ordering: .acquiring)
        var written = 0
        for index in 0..<snapshot.count {
            let due = snapshot.withFrame(at: index) { view, sequence -> Bool in
                let isWanted = wanted >= 0 && newest >= sequence && Int(newest - sequence) + 1 > wanted
                guard view.info.ptsNanoseconds <= horizon || isWanted else { return false }
                write(view, sequence: sequence)
                return true
            }
            guard due else { break }
            written += 1
        }
        return written > 0
    }

    private func write(_ view: FrameView, sequence: UInt64) {
        storeClockIfDecided()
        let pts = view.info.ptsNanoseconds
        if sequence > lastSequence + 1 {
            noteLost(Int(sequence - lastSequence - 1))
            noteLoss(.evictedBeforeSpill)
        }
        let arrivalDrops = shared.firstAfterDrops.withLock { $0.removeValue(forKey: sequence) }
        var failure: String?
        var failureErrno: Errno?
        do {
            try writer.append(view)
        } catch {
            failure = "\(error)"
            failureErrno = Self.errno(of: error)
        }
        lastSequence = sequence
        shared.spillCursor.store(sequence + 1, ordering: .releasing)
        if failure == nil {
            noteGap(before: pts, arrivalDrops: arrivalDrops)
            lastWrittenPTS = pts
            pendingLoss = nil
            failedPTS = nil
        } else {
            noteLoss(.diskError)
            failedPTS = (failedPTS?.first ?? pts, pts)
        }
        let durable = writer.durableFrameCount
        shared.state.withLock { state in
            if let failure {
                state.statistics.drops[.diskError, default: 0] += 1
                state.statistics.lastError = failure
                state.statistics.lastWriteErrno = failureErrno ?? state.statistics.lastWriteErrno
            } else {
                state.statistics.framesSpilled += 1
                state.statistics.rawBytesSpilled += Int64(view.bytes.count)
            }
            state.statistics.framesDurable = durable
        }
    }

    /// Records a gap before a frame just written at `pts` when frames are missing since the last one written:
    /// lost after they were accepted (``pendingLoss``), dropped on arrival (`arrivalDrops`, the reason of those
    /// drops), or never produced. A loss after acceptance names the gap over drops on arrival (see ``LossReason``).
    private func noteGap(before pts: Int64, arrivalDrops: LossReason?) {
        guard let lastWrittenPTS else {
            // Nothing written yet: only failed writes before this frame leave a gap, from the first of them.
            if let failedPTS, let pendingLoss { recordGap(start: failedPTS.first, end: pts, reason: pendingLoss) }
            return
        }
        let nominal = stream.frameDuration.nanoseconds ?? 0
        let reason: LossReason
        if let pendingLoss {
            reason = pendingLoss
        } else if nominal > 0 && pts - lastWrittenPTS > nominal + nominal / 2 {
            reason = arrivalDrops ?? .inputInterval
        } else {
            return
        }
        recordGap(start: lastWrittenPTS, end: pts, reason: reason)
    }

    @discardableResult
    private func recordGap(start: Int64, end: Int64, reason: LossReason) -> (any Error)? {
        do {
            try writer.recordGap(start: start, end: end, reason: reason)
            shared.state.withLock { $0.statistics.gaps += 1 }
            return nil
        } catch {
            shared.state.withLock { $0.statistics.lastError = "\(error)" }
            return error
        }
    }

    /// Records the gap left by failed writes after the last frame written (the tail of the recording), ending one
    /// frame time after the last failed frame.
    private func noteTailGap() -> (any Error)? {
        guard let failedPTS, let pendingLoss else { return nil }
        let end = failedPTS.last + max(1, stream.frameDuration.nanoseconds ?? 1)
        return recordGap(start: lastWrittenPTS ?? failedPTS.first, end: end, reason: pendingLoss)
    }

    /// The error number under a store error from a failed write, if it has one.
    private static func errno(of error: any Error) -> Errno? {
        switch error {
        case SegmentStoreError.diskFull(_, _, _, let cause), SegmentStoreError.writeFailed(_, _, _, let cause):
            Errno(rawValue: cause.code)
        default:
            nil
        }
    }

    /// Accounts for unwritten frames that all left the ring before the spill stage reached them (a pressure cut can
    /// evict every one of them at once): they are counted as lost and the cursor moves past them, so a producer
    /// waiting for them to be written goes on, and the gap is recorded before the next frame written.
    ///
    /// - Returns: whether any frame was skipped.
    private func skipEvicted(upTo stored: UInt64) -> Bool {
        guard stored > lastSequence else { return false }
        noteLost(Int(stored - lastSequence))
        noteLoss(.evictedBeforeSpill)
        lastSequence = stored
        shared.spillCursor.store(stored + 1, ordering: .releasing)
        return true
    }

    /// Notes a loss of accepted frames since the last frame written: the first such loss names the gap, over a
    /// reason that is no loss (``LossReason/recorderStopped`` before a continued stream's first frame).
    private func noteLoss(_ reason: LossReason) {
        if pendingLoss?.isLoss != true { pendingLoss = reason }
    }

    /// Counts frames that left the ring before they were written.
    private func noteLost(_ count: Int) {
        shared.state.withLock { $0.statistics.drops[.evictedBeforeSpill, default: 0] += count }
    }

    /// Final sync and seal, the gap of a failed input, and the drop counters written to the store.
    ///
    /// - Parameter recorderTime: recorder time at the end of the recording.
    /// - Returns: the first error, if any.
    func close(recorderTime: Int64?) -> (any Error)? {
        var failure: (any Error)?
        storeClockIfDecided()
        do {
            try writer.sync()
        } catch {
            failure = error
        }
        do {
            try writer.close()
        } catch {
            failure = failure ?? error
        }
        if let error = noteTailGap() { failure = failure ?? error }
        if shared.inputFailure.withLock({ $0 }) != nil, let error = noteInputFailedGap(recorderTime: recorderTime) {
            failure = failure ?? error
        }
        let newest = shared.newestSequence.load(ordering: .acquiring)
        if newest > lastSequence { noteLost(Int(newest - lastSequence)) }
        let drops = shared.drops(ring: ring.statistics)
        for (reason, count) in drops where count > 0 {
            do {
                try writer.addDrops(reason: reason, count: count)
            } catch {
                failure = failure ?? error
            }
        }
        let durable = writer.durableFrameCount
        shared.state.withLock { $0.statistics.framesDurable = durable }
        return failure
    }

    /// Records the gap of a stream whose input failed: from its last frame to the end of the recording (at least
    /// one frame time).
    private func noteInputFailedGap(recorderTime: Int64?) -> (any Error)? {
        guard let start = lastWrittenPTS else { return nil }
        let frame = max(1, stream.frameDuration.nanoseconds ?? 1)
        var end = start + frame
        if let recorderTime, let clock = shared.clock.clock {
            end = max(end, clock.pts(atRecorderTime: recorderTime))
        }
        return recordGap(start: start, end: end, reason: .inputFailed)
    }

    /// Stores the stream's clock mapping once its first frame decided it (before that frame is written).
    private func storeClockIfDecided() {
        guard let clock = shared.clock.takeClockToStore() else { return }
        do {
            try writer.store.setClock(clock, streamName: writer.stream.name)
        } catch {
            shared.state.withLock { $0.statistics.lastError = "\(error)" }
        }
    }
}

/// Why a recorder could not finish cleanly.
public enum RecorderError: Error, Sendable, CustomStringConvertible {
    /// The final sync, seal or drop counters failed; `cause` is the store's error (a ``SegmentStoreError`` such as
    /// `diskFull`, or a ``StoreIndexError``). Frames durable before it stay.
    case finishFailed(cause: any Error)

    /// The failure in words, with the store's error after it (`could not finish writing: …`).
    public var description: String {
        switch self {
        case .finishFailed(let cause): "could not finish writing: \(cause)"
        }
    }
}
