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
    /// The smallest batch with which the previous frame is pinned again as the delta reference: in smaller rings
    /// one more pinned frame would take room the producer needs, and each batch's first frame is a key frame.
    static let batchWithReference = 4
    /// How long a stream goes without a frame to write before its encoder's buffers are given back and the frames
    /// written since its last automatic sync are synced.
    static let idleBeforeRelease: UInt64 = 1_000_000_000
    /// How often each lane brings the store's drop counters up to date while recording (nanoseconds).
    static let dropsStoreInterval: UInt64 = 1_000_000_000

    init(configuration: RecorderConfiguration) {
        self.configuration = configuration
    }

    /// Adds a stream; only before ``start()``.
    func addLane(_ lane: SpillLane) {
        precondition(!isRunning, "streams are added before the spill thread starts")
        lanes.append(lane)
        // Every stream's chunks go through this one thread: a lane judges the disk's pace against them all.
        let total = Self.combinedRawBytesPerSecond(lanes.map(\.rawBytesPerSecond))
        for each in lanes { each.spillRawBytesPerSecond = total }
    }

    /// The raw bytes per second of all the streams whose rates are known; nil when none is.
    static func combinedRawBytesPerSecond(_ rates: [Double?]) -> Double? {
        let known = rates.compactMap { $0 }
        return known.isEmpty ? nil : known.reduce(0, +)
    }

    var isRunning: Bool { running.load(ordering: .acquiring) }

    /// Starts the spill thread.
    ///
    /// - Throws: ``ThreadStartFailed`` when the system refuses it; ``finish(recorderTime:)`` then returns at once.
    func start() throws(ThreadStartFailed) {
        running.store(true, ordering: .releasing)
        do {
            try Threads.start(named: "rewind-spill") { [self] in
                run()
                running.store(false, ordering: .releasing)
                stopped.signal()
            }
        } catch {
            running.store(false, ordering: .releasing)
            finished.withAnnotatedLock { $0 = true }
            throw error
        }
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
        let first = finished.withAnnotatedLock { done in
            defer { done = true }
            return !done
        }
        if first {
            finishTime.withAnnotatedLock { $0 = recorderTime }
            finishing.store(true, ordering: .releasing)
            wakeup.signal()
            stopped.wait()
        }
        if let failure = finalError.withAnnotatedLock({ $0 }) { throw RecorderError.finishFailed(cause: failure) }
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
        let end = finishTime.withAnnotatedLock { $0 }
        var failure: (any Error)?
        for lane in lanes {
            if let error = lane.close(recorderTime: end) { failure = failure ?? error }
        }
        flushesDone.store(Int.max / 2, ordering: .releasing)
        if let failure { finalError.withAnnotatedLock { $0 = failure } }
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
///
/// The stream's encoder keeps no copy of the previous frame: the lane pins the last frame it wrote again with the
/// next batch, as the delta reference. Its output buffer follows the stream's memory pressure
/// (``RecorderShared/encoderCapacityWanted``) and is given back after a second without frames; when a live source
/// gets ahead by more than an eighth of the ring (with on-evict, beyond the frames kept unwritten until due), a
/// growing share of each frame's chunks is stored raw, as long as
/// the disk takes raw frames fast enough (when it is the slower side, raw chunks would only slow it down more).
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
    /// Whether ``RecorderShared/lossInProgress`` holds a gap (cleared once a frame is written again).
    private var publishedLossInProgress = false
    /// The end of the gap row recorded so far for the failed writes since the last frame written (every second while
    /// they last, so a recorder killed meanwhile leaves their gap): the final gap moves this row's end.
    private var provisionalGapEnd: Int64?
    /// The end of the `input interval` gap recorded before the last frame written, when there was one: the next
    /// interval starting there extends it.
    private var inputIntervalGapEnd: Int64?
    /// The pts of the stream's newest frame in the store before this recording (where its frames continue).
    private let storedPTSBefore: Int64?
    /// The end of the stream's newest gap of lost frames in the store before this recording: where a continuation
    /// after a lost tail (``storedPTSBefore`` the last lost frame, not a stored one) starts its first gap, so that gap
    /// does not overlap the lost tail's.
    private let storedGapsEnd: Int64?
    /// ``StreamWriter/framesCutBack`` as last counted.
    private var framesCutBackCounted = 0
    /// The sequence number of the last frame written successfully: pinned again with the next batch, it is the
    /// encoder's reference for deltas, so the encoder keeps no copy of its own.
    private var lastWrittenSequence: UInt64 = 0
    /// The encoder's output buffer size last applied (see ``RecorderShared/encoderCapacityWanted``).
    private var encoderCapacity: Int
    /// When the lane last had a frame to write (monotonic nanoseconds), and whether the encoder's memory has been
    /// given back since.
    private var lastBusy = DispatchTime.now().uptimeNanoseconds
    private var releasedWhileIdle = false
    /// The drop counters as far as the store has them (each reason's count when last written), and when they were
    /// last brought up to date (monotonic nanoseconds): every second while recording, so a recorder that is killed
    /// loses at most the last second's counts.
    private var storedDrops: [LossReason: Int] = [:]
    private var dropsStoredAt: UInt64 = 0
    /// Bytes of one frame's slab, to count how many frames the ring's budget holds.
    private let slabBytes: Int
    /// Time the segment files took (writes, writeback, syncs) and bytes written, each a running sum that decays by
    /// ``ioMemory`` per frame: their ratio is the recent nanoseconds per byte, a sync's wait spread over the bytes
    /// it flushed. Zero until a frame's bytes were timed.
    private var recentIONanoseconds = 0.0
    private var recentIOBytes = 0.0
    /// Raw bytes per second of the stream at its nominal frame rate; nil when the rate is unknown.
    let rawBytesPerSecond: Double?
    /// Raw bytes per second of every stream the spill thread writes (set as lanes are added); nil when unknown.
    var spillRawBytesPerSecond: Double?

    init(
        ring: RingStore, writer: StreamWriter, shared: RecorderShared, stream: StreamDescription,
        configuration: RecorderConfiguration, lastStoredPTS: Int64?, storedGapsEnd: Int64? = nil
    ) {
        self.ring = ring
        self.writer = writer
        self.shared = shared
        self.stream = stream
        self.configuration = configuration
        encoderCapacity = writer.encoderOutputBytes
        slabBytes = Recorder.smallestMemoryBudget(for: stream.layout)
        rawBytesPerSecond = stream.frameDuration.nanoseconds.flatMap { duration in
            duration > 0 ? Double(stream.layout.byteCount) * 1e9 / Double(duration) : nil
        }
        spillRawBytesPerSecond = rawBytesPerSecond
        storedPTSBefore = lastStoredPTS
        self.storedGapsEnd = storedGapsEnd
        if let lastStoredPTS {
            lastWrittenPTS = lastStoredPTS
            pendingLoss = .recorderStopped
        }
    }

    /// Whether every frame the producer stored has been written (or counted lost).
    var isDrained: Bool { lastSequence >= shared.newestSequence.load(ordering: .acquiring) }

    /// Makes the index cover every frame written so far.
    func sync() {
        noteSynced { try writer.sync() }
    }

    /// Pins the next unwritten frames, writes those due, releases them. Returns whether any was written.
    func spillAvailable(all: Bool) -> Bool {
        let wrote = spillBatch(all: all)
        if !wrote { collectFinishedSync() }
        let now = DispatchTime.now().uptimeNanoseconds
        if now - dropsStoredAt >= SpillStage.dropsStoreInterval {
            dropsStoredAt = now
            // A failure (the index cannot grow) is left to the close, which tries again and reports it.
            try? storeDrops()
            noteProvisionalGap()
        }
        if wrote {
            lastBusy = now
            releasedWhileIdle = false
        } else if !releasedWhileIdle && now - lastBusy >= SpillStage.idleBeforeRelease {
            writer.releaseEncoderMemory()
            // The frames since the last automatic sync become durable now rather than with the next frame.
            writer.startSyncIfNeeded()
            releasedWhileIdle = true
        }
        return wrote
    }

    private func spillBatch(all: Bool) -> Bool {
        // Read before pinning: every frame up to this sequence was in the ring before the pin (the producer
        // publishes a sequence after storing its frame), so one the pin does not find has been evicted.
        let storedBeforePin = shared.newestSequence.load(ordering: .acquiring)
        // Applied after that read: a frame stored after a pressure change is written at the capacity it asks for.
        applyEncoderCapacity()
        let batch = shared.spillBatch.load(ordering: .relaxed)
        // The last frame written comes along (when the ring still has it) as the delta reference of the first.
        let withReference =
            batch >= SpillStage.batchWithReference && lastSequence > 0 && lastWrittenSequence == lastSequence
        let snapshot = ring.pin(
            fromSequence: withReference ? lastSequence : lastSequence + 1, limit: batch + (withReference ? 1 : 0))
        // Counted until released: a producer writing through waits until the spill stage holds no slab.
        let pinned = snapshot.count
        shared.spillPinnedFrames.add(pinned, ordering: .releasing)
        defer {
            snapshot.release()
            shared.spillPinnedFrames.subtract(pinned, ordering: .releasing)
        }
        // The first frame after the last one written (the reference, when pinned, comes before it).
        var firstNew: UInt64?
        for index in 0..<snapshot.count {
            firstNew = snapshot.withFrame(at: index) { _, sequence in sequence > lastSequence ? sequence : nil }
            if firstNew != nil { break }
        }
        guard let firstNew else { return skipEvicted(upTo: storedBeforePin) }
        // Frames between the last one written and the first the pin found left the ring unwritten (a jump in pts
        // moved the window past them, or a pressure cut): counted now, not when the next frame is written, which
        // with on-evict may not be due for a while — and a producer waiting for room counts them as still to write.
        if firstNew > lastSequence + 1 { _ = skipEvicted(upTo: firstNew - 1) }
        var horizon = Int64.max
        if configuration.spill == .onEvict && !all, let newest = ring.statistics.lastPTSNanoseconds {
            // Held frames are due at once: a hold keeps them on disk, which they reach only when written.
            horizon = max(
                newest - configuration.onEvictLeadOrDefaultNanoseconds,
                shared.writeAtOnceThroughPTS.load(ordering: .relaxed))
        }
        // A waiting producer needs room now: frames not due yet are written too, until few enough are left. With
        // on-evict, so are frames beyond what the producer takes without dropping new ones as spill behind.
        var wanted = shared.unwrittenFramesWanted.load(ordering: .acquiring)
        let room = framesInBudget()
        // With on-evict, the frames within the lead stay unwritten by design: only those past it are behind, out of
        // the room the ring has beyond them (else every frame would look late, and be stored raw).
        var deliberate = 0
        if configuration.spill == .onEvict {
            let kept = RecorderStream.unwrittenFramesKept(
                room: shared.ringRoom.load(ordering: .relaxed),
                queries: shared.queryPinnedFrames.load(ordering: .relaxed))
            wanted = wanted < 0 ? kept : min(wanted, kept)
            if let frameNanoseconds = stream.frameDuration.nanoseconds, frameNanoseconds > 0 {
                let lead = configuration.onEvictLeadOrDefaultNanoseconds
                deliberate = min(Int(lead / frameNanoseconds), kept, room - 1)
            }
        }
        let newest = shared.newestSequence.load(ordering: .acquiring)
        var written = 0
        // Valid while the snapshot pins it.
        var reference: FrameView?
        for index in 0..<snapshot.count {
            let due = snapshot.withFrame(at: index) { view, sequence -> Bool in
                if sequence <= lastSequence {
                    reference = view
                    return true
                }
                // A frame in the ring whose sequence is not published yet is left for the next batch: the producer
                // notes what was dropped before it (``RecorderShared/firstAfterDrops``) before it publishes.
                guard sequence <= storedBeforePin else { return false }
                let isWanted = wanted >= 0 && newest >= sequence && Int(newest - sequence) + 1 > wanted
                guard view.info.ptsNanoseconds <= horizon || isWanted else { return false }
                let behind = newest >= sequence ? Int(newest - sequence) : 0
                write(
                    view, sequence: sequence, reference: reference,
                    compressedChunks: compressedChunks(
                        behind: max(0, behind - deliberate), room: max(1, room - deliberate)))
                reference = lastWrittenSequence == sequence ? view : nil
                written += 1
                return true
            }
            guard due else { break }
        }
        return written > 0
    }

    /// With no frame to write, makes the frames of an automatic sync that has finished durable and indexed (a
    /// paused camera's last second does not wait for its next frame), and counts what a failed one cut off.
    private func collectFinishedSync() {
        noteSynced { try writer.collectFinishedSync() }
    }

    /// Makes or collects a sync (`body`), then counts what a failed one cut off and publishes the durable count.
    private func noteSynced(_ body: () throws -> Void) {
        var failure: (any Error)?
        do {
            try body()
        } catch {
            failure = error
        }
        noteCutBack()
        publishLossInProgress()
        let durable = writer.durableFrameCount
        shared.state.withAnnotatedLock { state in
            if let failure { state.statistics.lastError = "\(failure)" }
            state.statistics.framesDurable = durable
        }
    }

    /// Counts the frames a failed sync cut off after they were written as lost to a disk error: the next frame
    /// written (or the end of the recording) records the gap from the last durable frame.
    private func noteCutBack() {
        let cut = writer.framesCutBack - framesCutBackCounted
        guard cut > 0, let frames = writer.lastCutBack else { return }
        framesCutBackCounted = writer.framesCutBack
        noteLoss(.diskError)
        lastWrittenPTS = writer.lastDurablePTS ?? storedPTSBefore
        failedPTS = failedPTS.map { (min($0.first, frames.firstPTS), max($0.last, frames.lastPTS)) } ?? frames
        shared.state.withAnnotatedLock { $0.statistics.drops[.diskError, default: 0] += cut }
    }

    /// How many frames the ring's current budget holds (at least one).
    private func framesInBudget() -> Int {
        max(1, ring.statistics.budget / slabBytes)
    }

    /// How many chunks of a frame to compress when the lane is `behind` frames behind the stream's newest: all
    /// while it keeps up; fewer, down to none, as unwritten frames fill from an eighth to a quarter of a ring of
    /// `room` frames, so a live source is not dropped when compressing cannot keep up (raw chunks cost only their
    /// write). A producer that waits for the spill stage (a file) is never hurried: its frames are all compressed.
    private func compressedChunks(behind: Int, room: Int) -> Int {
        guard !shared.producerWaits.load(ordering: .relaxed) else { return .max }
        let low = room / 8
        let high = max(low + 1, room / 4)
        guard behind > low, diskTakesRawFrames else { return .max }
        guard behind < high else { return 0 }
        return writer.chunkCount * (high - behind) / (high - low)
    }

    /// Whether the files take bytes fast enough for raw chunks to help: a second of every stream's raw frames
    /// written in at most ``rawWriteShare`` of a second, at the pace recent frames were written. When the disk (or
    /// the page cache, throttled while the disk writes back) is the slower side, raw chunks would only add to what
    /// it must take, and the lane falls further behind: so it keeps compressing every chunk.
    private var diskTakesRawFrames: Bool {
        Self.diskTakesRawFrames(
            rawBytesPerSecond: spillRawBytesPerSecond, ioNanoseconds: recentIONanoseconds, ioBytes: recentIOBytes)
    }

    /// Whether `rawBytesPerSecond` can be written in at most ``rawWriteShare`` of a second at the pace of
    /// `ioNanoseconds` for `ioBytes`. True when the rate is unknown; false before any byte was timed (the first
    /// frame is compressed and timed).
    static func diskTakesRawFrames(rawBytesPerSecond: Double?, ioNanoseconds: Double, ioBytes: Double) -> Bool {
        guard let rawBytesPerSecond else { return true }
        guard ioBytes > 0 else { return false }
        return ioNanoseconds / ioBytes * rawBytesPerSecond <= 1e9 * rawWriteShare
    }

    /// The largest share of real time that writing the stream's frames raw may take.
    static let rawWriteShare = 0.6
    /// How much of the recent writing each frame keeps: about the last 32 frames count.
    static let ioMemory = 31.0 / 32.0

    /// Folds one frame's writing (`bytes` in `nanoseconds` of system calls) into the recent pace.
    private func noteWriting(bytes: Int64, nanoseconds: Int64) {
        recentIONanoseconds = recentIONanoseconds * Self.ioMemory + Double(nanoseconds)
        recentIOBytes = recentIOBytes * Self.ioMemory + Double(bytes)
    }

    /// Applies the encoder capacity the stream's memory pressure asks for.
    private func applyEncoderCapacity() {
        let wanted = min(shared.encoderCapacityWanted.load(ordering: .acquiring), writer.encoderOutputBytes)
        guard wanted != encoderCapacity else { return }
        writer.setEncoderOutputCapacity(wanted)
        encoderCapacity = wanted
    }

    private func write(_ view: FrameView, sequence: UInt64, reference: FrameView?, compressedChunks: Int) {
        storeClockIfDecided()
        let pts = view.info.ptsNanoseconds
        if sequence > lastSequence + 1 {
            noteLost(Int(sequence - lastSequence - 1))
            noteLoss(.evictedBeforeSpill)
        }
        let arrivalDrops = shared.firstAfterDrops.withAnnotatedLock { $0.removeValue(forKey: sequence) }
        var failure: String?
        var failureErrno: Errno?
        let ioBefore = (nanoseconds: writer.ioTimer.nanoseconds, bytes: writer.ioTimer.bytes)
        do {
            try writer.append(view, previous: reference, compressedChunks: compressedChunks)
            lastWrittenSequence = sequence
            noteWriting(
                bytes: writer.ioTimer.bytes - ioBefore.bytes,
                nanoseconds: writer.ioTimer.nanoseconds - ioBefore.nanoseconds)
        } catch {
            failure = "\(error)"
            failureErrno = Self.errno(of: error)
        }
        lastSequence = sequence
        if failure == nil {
            noteGap(before: pts, arrivalDrops: arrivalDrops)
            lastWrittenPTS = pts
            shared.writtenPTS.store(pts, ordering: .releasing)
            pendingLoss = nil
            failedPTS = nil
            provisionalGapEnd = nil
        } else {
            if pendingLoss == .recorderStopped, failedPTS == nil, let lastWrittenPTS, lastWrittenPTS < pts {
                // The first frame of a continued recording lost: the pause since the earlier recording is no loss.
                // Its gap ends here, and the loss's starts at this frame (the pause was called a disk error, and a
                // clip inside it said its frames were lost).
                recordGap(start: lastWrittenPTS, end: pts, reason: .recorderStopped)
                self.lastWrittenPTS = nil
            }
            noteLoss(.diskError)
            failedPTS = (failedPTS?.first ?? pts, pts)
        }
        noteCutBack()
        publishLossInProgress()
        let durable = writer.durableFrameCount
        let rawChunkBytes = writer.rawChunkBytes
        shared.state.withAnnotatedLock { state in
            if let failure {
                state.statistics.drops[.diskError, default: 0] += 1
                state.statistics.lastError = failure
                state.statistics.lastWriteErrno = failureErrno ?? state.statistics.lastWriteErrno
            } else {
                state.statistics.framesSpilled += 1
                state.statistics.rawBytesSpilled += Int64(view.bytes.count)
                state.statistics.rawChunkBytesSpilled = rawChunkBytes
            }
            state.statistics.framesDurable = durable
        }
        // Published last: whoever sees the frame written also sees it counted.
        shared.spillCursor.store(sequence + 1, ordering: .releasing)
    }

    /// Records a gap before a frame just written at `pts` when frames are missing since the last one written:
    /// lost after they were accepted (``pendingLoss``), dropped on arrival (`arrivalDrops`, the reason of those
    /// drops), or never produced. A loss after acceptance names the gap over drops on arrival (see ``LossReason``).
    ///
    /// Drops that began only after a pause (the first dropped frame more than a frame and a half after the last one
    /// written, the frames moved on past it) leave the pause an `input interval` and the loss from the first drop.
    private func noteGap(before pts: Int64, arrivalDrops drops: ArrivalDrops?) {
        let arrivalDrops = drops?.reason
        guard let lastWrittenPTS else {
            // Nothing written yet: only failed writes before this frame leave a gap, from the first of them.
            if let failedPTS, let pendingLoss { recordLossGap(start: failedPTS.first, end: pts, reason: pendingLoss) }
            return
        }
        let nominal = stream.frameDuration.nanoseconds ?? 0
        let reason: LossReason
        // Read only for such a loss: a value left by a frame the spill stage had pinned, and wrote, lies at or
        // before the last frame written and is passed over.
        if pendingLoss == .evictedBeforeSpill, nominal > 0,
            case let evicted = shared.lastEvictedUnwrittenPTS.exchange(.min, ordering: .relaxed),
            evicted > lastWrittenPTS, evicted < pts, pts - evicted > nominal + nominal / 2
        {
            // Frames left unwritten, then a pause (frames moved on past it): the loss ends at the last of them.
            recordLossGap(start: lastWrittenPTS, end: evicted + 1, reason: .evictedBeforeSpill)
            recordGap(start: evicted + 1, end: pts, reason: .inputInterval)
            inputIntervalGapEnd = nil
            return
        }
        if let pendingLoss {
            reason = pendingLoss
        } else if nominal > 0 && pts - lastWrittenPTS > nominal + nominal / 2 {
            reason = arrivalDrops ?? .inputInterval
            if let arrivalDrops, let first = drops?.firstPTS, first < pts,
                first - lastWrittenPTS > nominal + nominal / 2
            {
                recordGap(start: lastWrittenPTS, end: first, reason: .inputInterval)
                recordGap(start: first, end: pts, reason: arrivalDrops)
                inputIntervalGapEnd = nil
                return
            }
        } else {
            inputIntervalGapEnd = nil
            return
        }
        // A source at a lower frame rate (a thermal-throttled camera) leaves an interval after every frame: the
        // intervals that follow each other are one gap, extended frame by frame.
        let extendsStretch = reason == .inputInterval && inputIntervalGapEnd == lastWrittenPTS
        if reason == pendingLoss {
            recordLossGap(start: lastWrittenPTS, end: pts, reason: reason)
        } else {
            recordGap(start: lastWrittenPTS, end: pts, reason: reason, extendingPrevious: extendsStretch)
        }
        inputIntervalGapEnd = reason == .inputInterval ? pts : nil
    }

    @discardableResult
    private func recordGap(start: Int64, end: Int64, reason: LossReason, extendingPrevious: Bool = false)
        -> (any Error)?
    {
        // Not back into the stored gaps of lost frames before this recording (a continuation after a lost tail,
        // whose gap ends a frame after its last lost frame): nothing to record when they cover it all (frames that
        // follow the tail's gap directly, which already marks where the recording stopped).
        let start = max(start, storedGapsEnd ?? start)
        guard start < end else { return nil }
        do {
            if extendingPrevious {
                let extended = try writer.recordOrExtendGap(start: start, end: end, reason: reason)
                shared.state.withAnnotatedLock {
                    if extended { $0.statistics.gapExtensions += 1 } else { $0.statistics.gaps += 1 }
                }
            } else {
                try writer.recordGap(start: start, end: end, reason: reason)
                shared.state.withAnnotatedLock { $0.statistics.gaps += 1 }
            }
            return nil
        } catch {
            shared.state.withAnnotatedLock { $0.statistics.lastError = "\(error)" }
            return error
        }
    }

    /// The gap the failed writes since the last frame written leave: from that frame (or the first failed one) to one
    /// frame time after the last failed one, with the pending loss's reason; nil while writes succeed.
    private var failedWritesGap: GapRow? {
        guard let failedPTS, let pendingLoss else { return nil }
        return GapRow(
            streamID: 0, startNanoseconds: lastWrittenPTS ?? failedPTS.first,
            endNanoseconds: failedPTS.last + max(1, stream.frameDuration.nanoseconds ?? 1), reason: pendingLoss)
    }

    /// Publishes ``failedWritesGap`` (``RecorderShared/lossInProgress``), or clears it once a frame is written; no
    /// lock while writes succeed.
    private func publishLossInProgress() {
        let gap = failedWritesGap
        guard gap != nil || publishedLossInProgress else { return }
        publishedLossInProgress = gap != nil
        shared.lossInProgress.withAnnotatedLock { $0 = gap }
    }

    /// Records ``failedWritesGap``, the gap left by failed writes after the last frame written (the tail of the
    /// recording).
    private func noteTailGap() -> (any Error)? {
        guard let gap = failedWritesGap else { return nil }
        return recordLossGap(start: gap.startNanoseconds, end: gap.endNanoseconds, reason: gap.reason)
    }

    /// While writes keep failing, records their gap so far (as ``noteTailGap()`` would) once a second, so that a
    /// recorder killed during a full disk leaves the stretch in the index; a failure is left for the final gap.
    private func noteProvisionalGap() {
        guard let gap = failedWritesGap, gap.endNanoseconds != provisionalGapEnd else { return }
        _ = recordLossGap(start: gap.startNanoseconds, end: gap.endNanoseconds, reason: gap.reason)
    }

    /// Records the gap of the losses since the last frame written, or moves the end of the row recorded for them so
    /// far (``provisionalGapEnd``): one row per stretch.
    @discardableResult
    private func recordLossGap(start: Int64, end: Int64, reason: LossReason) -> (any Error)? {
        if let recorded = provisionalGapEnd {
            do {
                if try writer.extendGap(endingAt: recorded, to: end, reason: reason) {
                    provisionalGapEnd = end
                    shared.state.withAnnotatedLock { $0.statistics.gapExtensions += 1 }
                    return nil
                }
            } catch {
                shared.state.withAnnotatedLock { $0.statistics.lastError = "\(error)" }
                return error
            }
        }
        let error = recordGap(start: start, end: end, reason: reason)
        if error == nil { provisionalGapEnd = end }
        return error
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
        shared.state.withAnnotatedLock { $0.statistics.drops[.evictedBeforeSpill, default: 0] += count }
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
        noteCutBack()
        if let error = noteTailGap() { failure = failure ?? error }
        // Frames dropped after the last one written keep their own reason up to the last one offered; a failed
        // input's gap follows them.
        let drops = noteTrailingDropsGap(recorderTime: recorderTime)
        if let error = drops.error { failure = failure ?? error }
        if shared.inputFailure.withAnnotatedLock({ $0 }) != nil {
            if let error = noteInputFailedGap(from: drops.end, recorderTime: recorderTime) {
                failure = failure ?? error
            }
        }
        if let error = notePauseAtTheEndGap(from: drops.end) { failure = failure ?? error }
        let newest = shared.newestSequence.load(ordering: .acquiring)
        if newest > lastSequence { noteLost(Int(newest - lastSequence)) }
        do {
            try storeDrops()
        } catch {
            failure = failure ?? error
        }
        let durable = writer.durableFrameCount
        shared.state.withAnnotatedLock { $0.statistics.framesDurable = durable }
        writer.checkpointAfterClose()
        return failure
    }

    /// Adds to the store's drop counters what they grew by since they were last written.
    private func storeDrops() throws {
        for (reason, count) in shared.drops(ring: ring.statistics) {
            let growth = count - storedDrops[reason, default: 0]
            guard growth > 0 else { continue }
            try writer.addDrops(reason: reason, count: growth)
            storedDrops[reason] = count
        }
    }

    /// Records the gap of a stream whose input failed: from its last frame (or the end of the drops after it,
    /// `from`) to the end of the recording (at least one frame time).
    private func noteInputFailedGap(from: Int64?, recorderTime: Int64?) -> (any Error)? {
        recordGapToEnd(reason: .inputFailed, recorderTime: recorderTime, from: from).error
    }

    /// Records the `input interval` gap of a pause after the last frame that ran past the end of the recording
    /// (``RecorderShared/pausedUntilPTS``): from the last frame written (or the end of the drops after it, `from`)
    /// to where the pause ended, as a frame there would have recorded it (more than a frame and a half after it).
    private func notePauseAtTheEndGap(from: Int64?) -> (any Error)? {
        let end = shared.pausedUntilPTS.exchange(.min, ordering: .relaxed)
        let nominal = stream.frameDuration.nanoseconds ?? 0
        guard end != .min, let written = lastWrittenPTS, nominal > 0 else { return nil }
        let start = max(written, from ?? written)
        guard end > start, end &- start > nominal + nominal / 2 else { return nil }
        return recordGap(
            start: start, end: end, reason: .inputInterval, extendingPrevious: inputIntervalGapEnd == start)
    }

    /// Records the gap of frames dropped on arrival after the last frame stored (no later frame came to record it
    /// before): from the last frame written to one frame after the newest one dropped (the frames that were
    /// offered) when its pts is known, else to the end of the recording, with the drops' reason.
    ///
    /// - Returns: where the gap ends (nil when there was none), and the error of recording it.
    private func noteTrailingDropsGap(recorderTime: Int64?) -> (end: Int64?, error: (any Error)?) {
        let bits = shared.arrivalDropsSinceLastStore.exchange(0, ordering: .relaxed)
        guard let reason = LossReason.arrivalReason(of: bits) else { return (nil, nil) }
        let lastDropped = shared.lastDroppedPTS.load(ordering: .relaxed)
        return recordGapToEnd(
            reason: reason, recorderTime: recorderTime, lastLost: lastDropped == .min ? nil : lastDropped)
    }

    /// Records a gap from the last frame written (or `from`, when later) to one frame after `lastLost`, or else to
    /// the end of the recording (at least one frame time).
    ///
    /// - Returns: where the gap ends, and the error of recording it.
    private func recordGapToEnd(reason: LossReason, recorderTime: Int64?, lastLost: Int64? = nil, from: Int64? = nil)
        -> (end: Int64?, error: (any Error)?)
    {
        guard let written = lastWrittenPTS else { return (nil, nil) }
        let start = max(written, from ?? written)
        // A frame's duration rounded up: the next frame's pts, not a nanosecond short of it (30000/1001 fps).
        let frame = max(1, stream.frameDuration.nanosecondsRoundedUp ?? 1)
        var end = start.addingSaturating(frame)
        if let lastLost {
            end = max(end, lastLost.addingSaturating(frame))
        } else if let recorderTime, let clock = shared.clock.clock {
            end = max(end, clock.pts(atRecorderTime: recorderTime))
        }
        return (end, recordGap(start: start, end: end, reason: reason))
    }

    /// Stores the stream's clock mapping once its first frame decided it (before that frame is written).
    private func storeClockIfDecided() {
        guard let clock = shared.clock.takeClockToStore() else { return }
        do {
            try writer.store.setClock(clock, streamName: writer.stream.name)
        } catch {
            shared.state.withAnnotatedLock { $0.statistics.lastError = "\(error)" }
        }
    }
}

/// Why a recorder could not start or finish cleanly.
public enum RecorderError: Error, Sendable, CustomStringConvertible {
    /// The final sync, seal or drop counters failed; `cause` is the store's error (a ``SegmentStoreError`` such as
    /// `diskFull`, or a ``StoreIndexError``). Frames durable before it stay.
    case finishFailed(cause: any Error)

    /// The system clock reads `seconds` since 1970, outside ``System/recordableWallSeconds``: wall times would not
    /// fit the 64-bit nanoseconds the store keeps (a clock reset before 1970, or set centuries ahead).
    case wallClockOutOfRange(seconds: Int64)

    /// The failure in words, with the store's error after it (`could not finish writing: …`).
    public var description: String {
        switch self {
        case .finishFailed(let cause): "could not finish writing: \(cause)"
        case .wallClockOutOfRange(let seconds):
            "the system clock reads \(SegmentStore.utcText(seconds: seconds) ?? "\(seconds) s after 1970"), outside the "
                + "years 1970 to 2199 a recording's wall times can be kept for"
        }
    }

    /// Throws ``wallClockOutOfRange(seconds:)`` when the system clock reads a time a recording cannot keep: every
    /// recorder checks it, and the commands before they make anything on disk.
    public static func checkWallClock() throws(RecorderError) {
        let wall = System.wallClockSeconds()
        guard System.recordableWallSeconds.contains(wall) else { throw .wallClockOutOfRange(seconds: wall) }
    }
}
