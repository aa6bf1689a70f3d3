import Dispatch
import Foundation
import RewindCore
import RewindSystem
import SegmentStore
import Synchronization

/// One stream of a ``Recorder``: its own ring (a share of the recorder's memory budget), its own backpressure, drop
/// counters and gaps, and its own segments; the recorder's one spill thread writes it together with the others.
///
/// A producer (one thread per stream) appends frames here; queries read this stream's frames from memory and disk.
/// Frames keep the pts their source gave, on the stream's own clock; the recorder maps that clock to its own at
/// the stream's first frame (``clock``), and a stream the store already holds continues after its stored frames.
public final class RecorderStream: Sendable {
    /// The stream's name in the store.
    public let name: String
    /// What every frame of the stream is.
    public let stream: StreamDescription
    /// The recorder's settings (the window applies to every stream; the budget is shared).
    public let configuration: RecorderConfiguration
    /// The ring holding the stream's window in memory. Package-only: pressure goes through
    /// ``Recorder/setPressure(_:)``, which also updates the producer's backpressure, and pins through the query
    /// methods.
    package let ring: RingStore
    /// The store frames spill to; nil with spill `off`.
    public let store: SegmentStore?
    let shared: RecorderShared
    let spill: SpillStage?
    /// How many frames at the nominal rate the window holds.
    private let framesInWindow: Int
    /// Bytes of one frame's slab (page-rounded), as the ring's pool maps it.
    let slabBytes: Int
    /// The share of the memory budget taken by this stream's spill encoder's output buffer (0 when it is not
    /// counted).
    package let encoderBytes: Int

    /// - Parameters:
    ///   - budget: the ring's share of the budget.
    ///   - ringTotal: every ring's budget together (the recorder's budget less the encoders' buffers).
    ///   - encoderBytes: the budget this stream's encoder's output buffer takes (0: not counted).
    init(
        name: String, stream: StreamDescription, budget: Int, ringTotal: Int, encoderBytes: Int,
        configuration: RecorderConfiguration, store: SegmentStore?, spill: SpillStage?, shared: RecorderShared
    ) {
        self.name = name
        self.stream = stream
        self.configuration = configuration
        self.store = store
        self.spill = spill
        self.shared = shared
        self.encoderBytes = encoderBytes
        let slabBytes = Recorder.smallestMemoryBudget(for: stream.layout)
        self.slabBytes = slabBytes
        // Critical pressure never takes the ring below one frame: with a slab it still records (write-through),
        // without one it could only drop. A minimum the configuration sets is shared like the budget.
        let total = max(1, ringTotal)
        let configuredMinimum = configuration.minimumBudget.map {
            Int((Double($0) * Double(budget) / Double(total)).rounded(.down))
        }
        let minimum = max(configuredMinimum ?? max(budget / 8, 4 * slabBytes), slabBytes)
        ring = RingStore(
            configuration: RingConfiguration(
                window: configuration.window, memoryBudget: budget, minimumBudget: min(minimum, budget),
                // Pins (the spill stage's, queries') keep a frame's bytes, not its place: a pinned frame may be
                // evicted while the pin holder still reads it, so pins never make the producer drop a frame.
                pinPolicy: .evictOldestUnpinned),
            // Letting go of an evicted frame returns its slab to the pool; the spill stage pins what it still needs.
            // One that leaves unwritten is a loss: where it lay tells the loss from a pause after it.
            onEvict: { [shared] frame in
                if frame.sequence >= shared.spillCursor.load(ordering: .acquiring) {
                    shared.lastEvictedUnwrittenPTS.store(frame.info.ptsNanoseconds, ordering: .relaxed)
                }
            })
        framesInWindow = Self.framesInWindow(stream, configuration)
        shared.ringRoom.store(room(under: .normal), ordering: .relaxed)
        shared.spillBatch.store(Self.spillBatch(room(under: .normal)), ordering: .relaxed)
    }

    /// How many frames at the nominal rate `configuration`'s window holds of `stream`.
    static func framesInWindow(_ stream: StreamDescription, _ configuration: RecorderConfiguration) -> Int {
        let nominal = stream.frameDuration.nanoseconds ?? 1
        return nominal > 0
            ? Int(min(configuration.windowNanoseconds / nominal, Int64(Int.max / 2))) : Int.max / 2
    }

    // MARK: The clock

    /// Where this stream's pts lie on the recorder clock; nil until its first frame (or, for a stream the store
    /// already holds, its stored mapping).
    public var clock: StreamClock? { shared.clock.clock }

    /// What this recording adds to the pts its source gives, nanoseconds: 0 for a stream new to the store, and
    /// for a stream the store holds, enough to continue after its stored frames (decided at the first frame; nil
    /// before it).
    public var sessionOffsetNanoseconds: Int64? { shared.clock.sessionOffset }

    /// Puts a source frame's pts on the stream clock (the first frame decides the mapping).
    @inline(__always)
    private func mapped(_ info: FrameInfo) throws(FrameError) -> FrameInfo {
        try shared.clock.map(info)
    }

    // MARK: Producing

    /// Appends a frame by copying caller-owned planes (one copy into a pooled slab).
    ///
    /// - Returns: the frame's sequence number, or why it was dropped (counted under that reason, and recorded as a
    ///   gap with it on disk): ``LossReason/spillBehind`` when the spill stage is too far behind (`drop-newest`),
    ///   or the ring's reason.
    /// - Throws: ``FrameError`` for bad input; counted, nothing else changes.
    public func append(copying planes: PlaneSources, info: FrameInfo) throws(FrameError) -> AppendOutcome {
        if isSpillBehind { return droppedSpillBehind() }
        let info = try mapped(info)
        if refusesAsSpillBehind(at: info.ptsNanoseconds) {
            return droppedSpillBehind(pts: info.ptsNanoseconds)
        }
        return note(try ring.append(copying: planes, layout: stream.layout, info: info), pts: info.ptsNanoseconds)
    }

    /// Counts a frame dropped on arrival because the spill stage is behind (`drop-newest`), at `pts` (stream clock)
    /// when it is known.
    private func droppedSpillBehind(pts: Int64? = nil) -> AppendOutcome {
        shared.droppedSpillBehind.add(1, ordering: .relaxed)
        shared.noteDroppedOnArrival(.spillBehind, pts: pts)
        return .dropped(.spillBehind)
    }

    /// Why ``reserve(deferringDrop:)`` found no room: counted by ``countDrop(_:of:)`` once the frame is read.
    enum DeferredDrop {
        case spillBehind
        case ring(DropReason)
    }

    /// ``reserve()`` that counts no drop when there is no room, saying why in `drop`: a producer that reserves
    /// before it reads counts the drop (``countDrop(_:of:)``) only once a whole frame came, so an input that ends,
    /// cut short or not, loses no frame it never gave.
    func reserve(deferringDrop drop: inout DeferredDrop?) -> ReservedSlab? {
        if isSpillBehind {
            drop = .spillBehind
            return nil
        }
        var reason = DropReason.memoryBudget
        let slab = ring.reserve(stream.layout, dropReason: &reason, countsDrop: false)
        if slab == nil { drop = .ring(reason) }
        return slab
    }

    /// Counts the frame `info` (as its source gave it) that ``reserve(deferringDrop:)`` found no room for, once it
    /// was read whole: under `drop`'s reason, the gap of the drops ending after it.
    func countDrop(_ drop: DeferredDrop, of info: FrameInfo) {
        countDrop(drop, pts: (try? mapped(info))?.ptsNanoseconds)
    }

    /// Counts a frame dropped for `drop`'s reason, at `pts` (stream clock) when it is known.
    private func countDrop(_ drop: DeferredDrop, pts: Int64?) {
        switch drop {
        case .spillBehind:
            _ = droppedSpillBehind(pts: pts)
        case .ring(let reason):
            ring.countDrop(reason)
            shared.noteDroppedOnArrival(reason.lossReason, pts: pts)
        }
    }

    /// Whether arriving frames are dropped when the spill stage is behind (`drop-newest`, with a spill stage).
    private var dropsNewest: Bool { spill != nil && configuration.backpressure == .dropNewest }

    /// Whether a frame at `pts` would move the ring's time window past a frame not yet written. ``isSpillBehind``
    /// counts frames; this is the window's time, which a frame moves on by more than one frame after frames dropped
    /// on arrival (a hole in pts), after a pause of the process (the record loop moves later frames on) or from a
    /// source that jumps ahead (a paced pipe whose writer bursts). Under `drop-newest` such a frame is dropped, so
    /// frames already accepted are never lost to it; a waiting producer waits instead
    /// (``nextFrameWouldExpireUnwritten``, ``waitedUntilWritten(before:)``).
    ///
    /// With on-evict, most of the window is unwritten by design, so the oldest unwritten frame decides; when it
    /// would leave, the spill stage is asked to write through the window's new start now (``writeAtOnce(through:)``:
    /// those frames are not due by the lead, which stands still while new frames are refused).
    private func wouldExpireUnwritten(at pts: Int64) -> Bool {
        guard unspilledFrames > 0 else { return false }
        let threshold = pts.subtractingReportingOverflow(configuration.windowNanoseconds)
        // Frames before the threshold leave; every unwritten frame lies after the last one written.
        guard !threshold.overflow, threshold.partialValue > shared.writtenPTS.load(ordering: .acquiring) &+ 1 else {
            return false
        }
        guard configuration.spill == .onEvict else { return true }
        guard
            let oldest = ring.firstPTSNanoseconds(fromSequence: shared.spillCursor.load(ordering: .acquiring)),
            oldest < threshold.partialValue
        else { return false }
        writeAtOnce(through: threshold.partialValue)
        return true
    }

    /// Whether a frame at `pts` is dropped on arrival because it would push out a frame not yet written
    /// (`drop-newest`), after a producer that waits for the spill stage waited in vain.
    private func refusesAsSpillBehind(at pts: Int64) -> Bool {
        dropsNewest && wouldExpireUnwritten(at: pts) && !waitedUntilWritten(before: pts)
    }

    /// For a producer that waits for the spill stage (``waitForSpillRoom(until:)``): waits while a frame at `pts`
    /// would move the window past a frame not yet written (a jump its wait before reading could not foresee).
    /// Returns whether it no longer would; false at once for a producer that does not wait, and when the spill
    /// stage stops.
    private func waitedUntilWritten(before pts: Int64) -> Bool {
        guard let spill, shared.producerWaits.load(ordering: .relaxed) else { return false }
        spill.wake()
        shared.producerWaitingNow.store(true, ordering: .relaxed)
        defer { shared.producerWaitingNow.store(false, ordering: .relaxed) }
        while spill.isRunning {
            if !wouldExpireUnwritten(at: pts) { return true }
            usleep(500)
        }
        return false
    }

    /// Reserves a pooled slab for the next frame (the zero-copy path: fill it in place, then ``commit(_:info:)``).
    ///
    /// - Returns: nil when no memory is available under the policy, or the spill stage is so far behind that the
    ///   frame must be dropped (`dropNewest`); counted as a drop either way.
    public func reserve() -> ReservedSlab? {
        var drop: DeferredDrop?
        let slab = reserve(deferringDrop: &drop)
        if let drop { countDrop(drop, pts: nil) }
        return slab
    }

    /// Whether storing one more frame could push an unwritten frame out of the ring (with `dropNewest`). The ring
    /// evicts oldest first, pinned frames included (they leave without giving their memory back), so unwritten
    /// frames are safe while they, the spill stage's margin and the frames queries hold fit in the ring.
    /// A ring too small for the margin still takes a frame when everything before it is written and unpinned
    /// (write-through, ``canWriteThrough(room:)``).
    private var isSpillBehind: Bool {
        guard dropsNewest else { return false }
        let room = framesInRing
        // With no slab in the budget the ring itself drops the frame, on memory budget.
        guard room > 0 else { return false }
        let queries = shared.queryPinnedFrames.load(ordering: .relaxed)
        guard Int(unspilledFrames) + Self.margin(room) + queries >= room else { return false }
        return !canWriteThrough(room: room)
    }

    /// Whether the next frame can be stored without pushing out anything unwritten however small the ring: every
    /// accepted frame is written, the spill stage holds no pins, and queries leave at least one slab of `room`.
    ///
    /// Then the ring evicts a written frame (or maps a free slab) for the new one: a pinned frame leaves the ring
    /// holding its slab, but with fewer pinned slabs than `room` an unpinned one is always found. This is the
    /// floor under every margin: a ring of one slab records a frame at a time.
    private func canWriteThrough(room: Int) -> Bool {
        unspilledFrames == 0 && shared.spillPinnedFrames.load(ordering: .acquiring) == 0
            && shared.queryPinnedFrames.load(ordering: .relaxed) < room
    }

    /// Free slabs kept for the spill stage's pinned batch: one more than the batch.
    private static func margin(_ framesInRing: Int) -> Int {
        spillBatch(framesInRing) + 1
    }

    /// The most frames the spill stage pins at once: ``SpillStage/batch``, or a quarter of a small ring.
    ///
    /// Written frames stay pinned until their whole batch is written, and a pinned frame's memory stays in use even
    /// after the ring evicts it; a batch no larger than the producer's margin keeps that from ever refusing a frame
    /// the producer waited room for (``waitForSpillRoom(until:)``).
    static func spillBatch(_ framesInRing: Int) -> Int {
        min(SpillStage.batch, max(1, framesInRing / 4))
    }

    /// Stores a frame filled in place in `slab`.
    public func commit(_ slab: consuming ReservedSlab, info: FrameInfo) throws(FrameError) -> AppendOutcome {
        let info = try mapped(info)
        // The slab goes back to the ring when it is dropped here.
        if refusesAsSpillBehind(at: info.ptsNanoseconds) {
            return droppedSpillBehind(pts: info.ptsNanoseconds)
        }
        return note(try ring.commit(slab, info: info), pts: info.ptsNanoseconds)
    }

    private func note(_ outcome: AppendOutcome, pts: Int64) -> AppendOutcome {
        switch outcome {
        case .stored(let sequence):
            let previous = shared.newestPTS.exchange(pts, ordering: .relaxed)
            if previous == .min {
                _ = shared.writtenPTS.compareExchange(
                    expected: .min, desired: pts &- 1, ordering: .releasing)
            } else {
                shared.newestStep.store(pts &- previous, ordering: .relaxed)
            }
            // After drops, mark this frame as the first after them, so its gap is recorded with their reason;
            // without a store, the gap is kept with the stream.
            if shared.arrivalDropsSinceLastStore.load(ordering: .relaxed) != 0,
                let reason = LossReason.arrivalReason(
                    of: shared.arrivalDropsSinceLastStore.exchange(0, ordering: .relaxed))
            {
                let first = shared.firstDroppedPTS.exchange(.min, ordering: .relaxed)
                if spill != nil {
                    shared.firstAfterDrops.withAnnotatedLock {
                        $0[sequence] = ArrivalDrops(reason: reason, firstPTS: first == .min ? nil : first)
                    }
                } else if previous != .min {
                    let gap = GapRow(streamID: 0, startNanoseconds: previous, endNanoseconds: pts, reason: reason)
                    shared.memoryGaps.withAnnotatedLock { gaps in
                        if gaps.count >= RecorderShared.memoryGapsKept { gaps.removeFirst() }
                        gaps.append(gap)
                    }
                    shared.state.withAnnotatedLock { $0.statistics.gaps += 1 }
                }
            }
            shared.newestSequence.store(sequence, ordering: .releasing)
            spill?.wake()
        case .dropped(let reason):
            shared.noteDroppedOnArrival(reason, pts: pts)
        }
        return outcome
    }

    /// Frames accepted but not yet written by the spill stage.
    public var unspilledFrames: UInt64 {
        guard spill != nil else { return 0 }
        let newest = shared.newestSequence.load(ordering: .acquiring)
        let cursor = shared.spillCursor.load(ordering: .acquiring)
        return newest >= cursor ? newest - cursor + 1 : 0
    }

    /// How many frames the ring can hold: the fewer of what fits in the stream's budget share now and what the
    /// window holds at the nominal rate, at least one when the share holds a frame (0 only when it holds none).
    /// The spill stage may fall behind by about this much before frames are lost.
    public var framesInRing: Int { shared.ringRoom.load(ordering: .relaxed) }

    /// The fewest of the slabs in the budget under `level`, the frames in the window and the ring's slots (small
    /// frames at a high rate fill its 16 384 slots before its bytes), but at least one when a slab fits: the newest
    /// frame stays in the ring however short the window.
    private func room(under level: MemoryPressure) -> Int {
        let slabs = ring.configuration.budget(under: level) / slabBytes
        return slabs == 0 ? 0 : max(1, min(slabs, framesInWindow, ring.configuration.maximumFrames))
    }

    /// Blocks while the spill stage is so far behind that the next frame would be dropped (for file inputs that
    /// must not lose frames; a live source should not wait), or until `shouldStop` returns true.
    ///
    /// With eager spill it also keeps room for a query's batch that has not started yet, so a query starting
    /// between this call and the append cannot make the frame drop. (With `on-evict`, most of the window is
    /// unwritten by design and no such room is kept.) When the ring is too small for that margin — a tiny budget,
    /// a window of a frame or two, critical pressure — it waits instead until every accepted frame is written and
    /// released (write-through, a frame at a time), so the producer always makes progress. While it waits, the
    /// spill stage is woken and writes every unwritten frame (with `on-evict` too).
    ///
    /// Returns at once when nothing fits in the budget at all (the frame will be dropped on arrival and counted:
    /// waiting cannot help), when spill is `off` and when the spill stage has stopped. `shouldStop` is asked about
    /// every half millisecond.
    public func waitForSpillRoom(until shouldStop: () -> Bool = { false }) {
        guard let spill, framesInRing > 0 else { return }
        // A producer that waits for the spill stage (a file input) is one from its first frame on: its frames are
        // compressed however far behind the spill stage is, not stored raw before it first had to wait.
        if !shared.producerWaits.load(ordering: .relaxed) { shared.producerWaits.store(true, ordering: .relaxed) }
        var isWaiting = false
        defer {
            if isWaiting {
                shared.unwrittenFramesWanted.store(-1, ordering: .releasing)
                shared.producerWaitingNow.store(false, ordering: .relaxed)
            }
        }
        while spill.isRunning && !shouldStop() {
            let room = framesInRing
            let allowed = unwrittenFramesAllowed(room: room)
            if (Int(unspilledFrames) <= allowed && !nextFrameWouldExpireUnwritten) || canWriteThrough(room: room) {
                return
            }
            shared.unwrittenFramesWanted.store(max(0, allowed), ordering: .releasing)
            if !isWaiting {
                isWaiting = true
                shared.producerWaitingNow.store(true, ordering: .relaxed)
                spill.wake()
            }
            usleep(500)
        }
    }

    /// Whether the ring's time window, moved on by the next frame (expected one step after the newest), could push
    /// out a frame not yet written: with eager spill, when frames come further apart than the nominal rate the
    /// room in frames assumes (a camera slowed by heat), the window is what fills first.
    private var nextFrameWouldExpireUnwritten: Bool {
        let newest = shared.newestPTS.load(ordering: .relaxed)
        guard newest != .min else { return false }
        let next = newest.addingReportingOverflow(max(0, shared.newestStep.load(ordering: .relaxed)))
        return !next.overflow && wouldExpireUnwritten(at: next.partialValue)
    }

    /// The most unwritten frames a waiting producer may leave and go on: the ring's room less the spill stage's
    /// margin, the queries' slack and the next frame. Negative when the ring is too small for those margins: then
    /// only write-through (``canWriteThrough(room:)``) lets the producer on.
    private func unwrittenFramesAllowed(room: Int) -> Int {
        let queries = shared.queryPinnedFrames.load(ordering: .relaxed)
        let slack = configuration.spill == .eager ? max(queries, Self.queryBatch(room)) : queries
        return room - Self.margin(room) - slack - 2
    }

    /// The most unwritten frames the spill stage leaves with `on-evict`, whether or not a producer waits: two
    /// frames short of what makes ``isSpillBehind`` drop new ones. Frames are otherwise written only as they near
    /// the end of the window; in a small ring the margins reach further back than that, and without this limit the
    /// producer would drop every new frame, so the newest pts, and with it what is due, would never move again.
    ///
    /// Room is kept for the pins of ``concurrentQueries`` queries (a third of the ring at most) whether or not they
    /// run: saves that start together pin their first batches at once, faster than the spill stage could write
    /// the frames that room would otherwise hold, and the producer would drop a frame meanwhile.
    package static func unwrittenFramesKept(room: Int, queries: Int) -> Int {
        let expected = min(concurrentQueries * queryBatch(room), room / 3)
        return max(0, room - margin(room) - max(queries, expected) - 2)
    }

    /// How many queries (a recorder's exports) run at once, each pinning up to ``queryBatch(_:)`` frames: with
    /// on-evict, the unwritten frames leave room for their pins.
    public static let concurrentQueries = 4

    /// Applies a pressure level to this stream's share: the ring shrinks its budget (and releases memory) at once,
    /// backpressure follows the new room, and the spill thread resizes the stream's encoder buffer before its next
    /// frame of the stream (``encoderCapacity(under:)``).
    func setPressure(_ level: MemoryPressure) {
        let room = room(under: level)
        shared.ringRoom.store(room, ordering: .relaxed)
        shared.spillBatch.store(Self.spillBatch(room), ordering: .relaxed)
        ring.setPressure(level)
        shared.encoderCapacityWanted.store(encoderCapacity(under: level), ordering: .releasing)
        spill?.wake()
    }

    /// Says that this stream's input failed and ended while the recorder goes on: the stream records an
    /// ``LossReason/inputFailed`` gap from its last frame to when the recording finishes.
    ///
    /// - Parameter error: what failed, kept for ``inputError``.
    public func noteInputFailed(_ error: any Error) {
        shared.inputFailure.withAnnotatedLock { $0 = "\(error)" }
        noteInputEnded("input failed: \(error)")
    }

    /// Writes this stream's frames up to `pts` (stream pts) to disk as soon as they come, those in memory now
    /// included, as `--spill eager` does: what a hold keeps then outlives the process however it ends. Under
    /// `on-evict` they would otherwise wait until evicted (or a clean stop). It only ever moves later; under `eager`
    /// it changes nothing.
    public func writeAtOnce(through pts: Int64) {
        var current = shared.writeAtOnceThroughPTS.load(ordering: .relaxed)
        while current < pts {
            let (exchanged, original) = shared.writeAtOnceThroughPTS.compareExchange(
                expected: current, desired: pts, ordering: .relaxed)
            if exchanged { break }
            current = original
        }
        spill?.wake()
    }

    /// Says that the input paused after its last frame until `pts` (its source's clock, moved on past earlier
    /// pauses as the record loop moves frames): no frame comes before it, and none is recorded after it (the end of
    /// the duration). The stream records an ``LossReason/inputInterval`` gap from its last frame to `pts` when the
    /// recording finishes, as a frame at `pts` would have left.
    ///
    /// - Parameter pts: source pts nanoseconds; nothing is noted before the stream's first frame.
    func noteInputPaused(untilSourcePTS pts: Int64) {
        guard let offset = shared.clock.sessionOffset else { return }
        shared.pausedUntilPTS.store(pts.addingSaturating(offset), ordering: .relaxed)
    }

    /// What ended this stream's input, when it failed (``noteInputFailed(_:)``).
    public var inputError: String? { shared.inputFailure.withAnnotatedLock { $0 } }

    /// Says that this stream's input ended, for `reason` (`end of input`, `duration reached`, or what failed),
    /// while the recorder may go on with other streams: it sends no more frames, which is not a stall.
    public func noteInputEnded(_ reason: String) {
        shared.inputEnd.withAnnotatedLock { $0 = $0 ?? reason }
    }

    /// Why this stream's input ended (``noteInputEnded(_:)``); nil while it runs.
    public var inputEnded: String? { shared.inputEnd.withAnnotatedLock { $0 } }

    // MARK: Statistics

    /// What the ring holds now: frames, bytes, pts range, budget and pinned frames.
    public var memoryStatistics: RingStatistics { ring.statistics }

    /// The ring's limits: window, this stream's share of the budget, its minimum under pressure.
    public var memoryConfiguration: RingConfiguration { ring.configuration }

    /// Whether the producer waits for the spill stage now (``waitForSpillRoom(until:)``, a file input held back by a
    /// slow disk): its input is not stalled, however long no frame comes.
    public var isWaitingForDisk: Bool { shared.producerWaitingNow.load(ordering: .relaxed) }

    /// Frames that came from the input so far, stored or dropped (and those the spill stage lost): while it grows
    /// the input sends, whether or not the frames reach the ring.
    public var framesArrived: UInt64 {
        let statistics = statistics
        return statistics.framesAccepted + UInt64(statistics.drops.values.reduce(0, +)) + statistics.rejected
    }

    /// This stream's counters so far: frames accepted, written and durable, raw bytes written, drops by reason (the
    /// ring's and the spill stage's together), rejections, gaps and the last write error.
    public var statistics: RecorderStatistics {
        let ringStatistics = ring.statistics
        var result = shared.state.withAnnotatedLock { $0.statistics }
        result.framesAccepted = ringStatistics.appended
        result.rejected = ringStatistics.rejected.total
        result.drops = shared.drops(ring: ringStatistics)
        return result
    }

    // MARK: Queries

    /// Calls `body` with every frame whose pts lies in `range` — inclusive start, exclusive end, nanoseconds — in
    /// pts order, exactly once: older frames from the segment store, the rest from the ring.
    ///
    /// With a store, the ring is pinned a batch of ``queryBatch(_:)`` frames at a time from the next pts wanted;
    /// whatever lies before the first pinned frame (older than memory, or evicted since) is read from disk first.
    /// So nothing is returned twice or skipped at the boundary, and however long the query, it holds at most a
    /// batch of the ring: the producer never drops a frame because of it. Without a store (spill `off`) memory is
    /// the only copy, and the whole range is pinned up front.
    /// - Parameters:
    ///   - range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    ///   - body: returns false to stop early. The view is only valid during the call.
    /// - Returns: how many frames came from disk and from memory.
    /// - Throws: store errors (a damaged frame is an error, never data).
    /// - Complexity: O(log n) to the first frame; memory bounded by one decoded frame plus the pinned ones.
    @discardableResult
    public func frames(in range: Range<Int64>, _ body: (FrameView) throws -> Bool) throws -> QuerySplit {
        var split = QuerySplit()
        guard !range.isEmpty else { return split }
        guard let store else {
            // Memory is the only copy: pin the whole range up front, so nothing in it can be evicted meanwhile.
            let snapshot = ring.pin(range)
            defer { snapshot.release() }
            for index in 0..<snapshot.count {
                split.fromMemory += 1
                guard try snapshot.withFrame(at: index, { view, _ in try body(view) }) else { break }
            }
            return split
        }
        // With a store, a few frames at a time are pinned, so a long query never holds the ring: the producer
        // keeps its memory, and a frame evicted before the query reaches it is read from disk instead.
        var next = range.lowerBound
        while next < range.upperBound {
            let batch = ring.pin(next..<range.upperBound, limit: Self.queryBatch(framesInRing))
            // While pinned, these frames may leave the ring without giving their memory back: the producer keeps
            // that much more room for unwritten frames (see isSpillBehind).
            shared.queryPinnedFrames.add(batch.count, ordering: .relaxed)
            defer {
                batch.release()
                shared.queryPinnedFrames.subtract(batch.count, ordering: .relaxed)
            }
            let memoryStart = batch.firstPTSNanoseconds ?? range.upperBound
            // The ring holds an unbroken run of the newest frames: when it still holds one older than the batch,
            // nothing lies between `next` and the batch anywhere, and the disk is not asked.
            let ringCoversNext = batch.firstPTSNanoseconds.map { first in
                (ring.statistics.firstPTSNanoseconds ?? first) < first
            }
            if next < memoryStart && ringCoversNext != true {
                flushIndex()
                var keepGoing = true
                try store.frames(streamName: name, in: next..<memoryStart) { view in
                    split.fromDisk += 1
                    keepGoing = try body(view)
                    return keepGoing
                }
                guard keepGoing else { return split }
                next = memoryStart
            }
            for index in 0..<batch.count {
                let keepGoing = try batch.withFrame(at: index) { view, _ in
                    next = view.info.ptsNanoseconds + 1
                    return try body(view)
                }
                split.fromMemory += 1
                if !keepGoing { return split }
            }
        }
        return split
    }

    /// Without a store (spill `off`): the stretches where frames were dropped on arrival (from the frame before
    /// them, which still shows, to the next frame), by start, the newest ``RecorderShared/memoryGapsKept``; empty
    /// with a store, whose index keeps them.
    public var memoryGaps: [GapRow] { shared.memoryGaps.withAnnotatedLock { $0 } }

    /// With a store, the gap the frames whose writes failed since the last frame written will leave, up to the
    /// newest of them (its `streamID` is 0); nil while writes succeed. The index holds that gap up to a second
    /// late, so a save of the newest frames asks for this one too.
    public var lossInProgress: GapRow? { shared.lossInProgress.withAnnotatedLock { $0 } }

    /// Makes the index cover every frame this recorder has written (waits for a sync on the spill thread): a read
    /// of the index alone then finds each frame the ring has let go of. Between its write and the next sync (about
    /// a second) a frame is in neither the ring nor the index.
    public func flushIndex() { spill?.flushIndex() }

    /// How many frames a query pins at a time when the frames also exist on disk: as many as the spill stage
    /// (8, or a quarter of a small ring).
    static func queryBatch(_ framesInRing: Int) -> Int { spillBatch(framesInRing) }

    /// The newest pts of the stream, in memory or on disk: nanoseconds on the stream clock; nil when nothing is
    /// recorded. The newest frame stored by this recorder counts even when the ring has let it go again (memory
    /// full of a save's pins), so the recorder clock keeps moving with the frames that arrive; before this
    /// recorder stored one (its ring is then empty too), the store's newest.
    ///
    /// - Throws: store errors.
    public func newestPTS() throws -> Int64? {
        let stored = shared.newestPTS.load(ordering: .relaxed)
        if stored != .min { return stored }
        guard let store else { return nil }
        return try store.summary(streamName: name).lastPTS
    }

    /// Recorder time at the end of the newest frame the producer stored (its pts plus a frame time); nil before
    /// the first.
    var newestFrameEnd: Int64? {
        let newest = shared.newestPTS.load(ordering: .relaxed)
        guard newest != .min, let clock = shared.clock.clock else { return nil }
        return clock.recorderTime(ofPTS: newest.addingSaturating(max(1, stream.frameDuration.nanoseconds ?? 1)))
    }

    /// The pts range of the last `duration` of the stream: `(newest − duration, newest]`.
    ///
    /// - Parameter duration: how much of the stream, measured in pts (whole nanoseconds).
    /// - Returns: pts nanoseconds on the stream clock, start inclusive, end exclusive, for ``frames(in:_:)``; nil
    ///   when nothing has been recorded.
    public func lastRange(_ duration: Duration) throws -> Range<Int64>? {
        guard let newest = try newestPTS() else { return nil }
        return Range(last: duration, endingAt: newest)
    }
}

extension LossReason {
    /// This reason's bit in ``RecorderShared/arrivalDropsSinceLastStore``: its place in ``arrivalPrecedence``.
    fileprivate var arrivalBit: UInt8 {
        guard let index = Self.arrivalPrecedence.firstIndex(of: self) else {
            preconditionFailure("\(self) is not a reason to drop a frame on arrival")
        }
        return 1 << UInt8(index)
    }

    /// The reason that names a gap left by drops on arrival with these ``arrivalBit``s: the first of
    /// ``arrivalPrecedence`` present, or nil when there are none.
    static func arrivalReason(of bits: UInt8) -> LossReason? {
        arrivalPrecedence.first { bits & $0.arrivalBit != 0 }
    }
}

/// Frames dropped on arrival before a stored frame: why (the gap before it is recorded with that reason) and the pts
/// of the first of them, when known.
struct ArrivalDrops: Sendable {
    var reason: LossReason
    var firstPTS: Int64?
}

/// State shared by one stream's producer, queries and the spill thread.
final class RecorderShared: Sendable {
    /// The next sequence number the spill stage will write; frames below it are written (or lost).
    let spillCursor = Atomic<UInt64>(1)
    /// The newest sequence number the producer stored.
    let newestSequence = Atomic<UInt64>(0)
    /// The pts of the newest frame the producer stored (``Int64/min`` before the first), and how far after the one
    /// before it came: the next frame's pts is expected that far after it (the ring's time window then evicts what
    /// lies more than a window before it).
    let newestPTS = Atomic<Int64>(.min)
    let newestStep = Atomic<Int64>(0)
    /// The pts of the last frame the spill stage wrote, or just before the first frame this run stored: every
    /// unwritten frame lies after it.
    let writtenPTS = Atomic<Int64>(.min)
    /// ``RecorderStream/framesInRing`` under the current pressure; updated by ``RecorderStream/setPressure(_:)`` so
    /// the producer reads one atomic.
    let ringRoom = Atomic<Int>(0)
    /// Frames pinned by queries right now (a batch each).
    let queryPinnedFrames = Atomic<Int>(0)
    /// Frames the spill stage has pinned right now: raised after it pins a batch, lowered after it releases it.
    let spillPinnedFrames = Atomic<Int>(0)
    /// While a producer waits for room (``RecorderStream/waitForSpillRoom(until:)``), how many unwritten frames it
    /// can go on with (0 when writing through); −1 when none waits. The spill stage then writes frames that are not
    /// due yet (`on-evict`) until no more than that are left.
    let unwrittenFramesWanted = Atomic<Int>(-1)
    /// With `on-evict`, frames up to this pts are written as soon as they come, as with `eager`: a hold covers them
    /// (``RecorderStream/writeAtOnce(through:)``), and frames only in memory would not outlive the process.
    /// ``Int64/min``: none.
    let writeAtOnceThroughPTS = Atomic<Int64>(.min)
    /// Whether a producer has waited for the spill stage (a file input): its frames are never stored raw to keep up.
    let producerWaits = Atomic<Bool>(false)
    /// Whether the producer is waiting for the spill stage now (``RecorderStream/isWaitingForDisk``).
    let producerWaitingNow = Atomic<Bool>(false)
    /// The encoder's output buffer in bytes wanted for the current memory pressure (``Int/max``: all of it); the
    /// spill thread applies it before the stream's next frame.
    let encoderCapacityWanted = Atomic<Int>(.max)
    /// The most frames the spill stage pins at once, for the ring's room under the current pressure.
    let spillBatch = Atomic<Int>(SpillStage.batch)
    /// Frames dropped on arrival because the spill stage was too far behind (`dropNewest`).
    let droppedSpillBehind = Atomic<Int>(0)
    /// The reasons of the frames dropped on arrival since the last stored frame, one bit each
    /// (``LossReason/arrivalBit``); set by the producer when it drops a frame, cleared by the next stored frame.
    let arrivalDropsSinceLastStore = Atomic<UInt8>(0)
    /// The pts (stream clock) of the newest frame dropped on arrival, `.min` before any: where a gap of drops after
    /// the last stored frame ends (one frame after it), not the recorder's clock when it stops.
    let lastDroppedPTS = Atomic<Int64>(.min)
    /// Frames stored right after drops on arrival, by sequence number, with the reason of the gap before them
    /// (touched only when frames are dropped).
    let firstAfterDrops = Mutex<[UInt64: ArrivalDrops]>([:])
    /// The pts (stream clock) of the first frame dropped on arrival since the last stored frame, `.min` when none
    /// was or it is not known: where the loss begins when frames came after a pause (the pause before it is none).
    let firstDroppedPTS = Atomic<Int64>(.min)
    /// The pts (stream clock) of the newest frame that left the ring unwritten, `.min` before any: the loss it
    /// leaves ends there, and a pause after it is none.
    let lastEvictedUnwrittenPTS = Atomic<Int64>(.min)
    /// With a store, the stretch of frames whose writes failed since the last frame written, as its gap will be
    /// recorded (nil while writes succeed): the index has that gap's row moved on only once a second.
    let lossInProgress = Mutex<GapRow?>(nil)
    /// Without a store (spill `off`), the stretches where frames were dropped on arrival, newest last (at most
    /// ``memoryGapsKept``): no index keeps them, and an export of a range holding one says so all the same.
    let memoryGaps = Mutex<[GapRow]>([])
    /// The most gaps a storeless stream keeps (the oldest go first; the ring holds far fewer stretches).
    static let memoryGapsKept = 1024
    /// Where (stream clock) the pause after the stream's last frame ended, `.min` when none did: the end of the
    /// duration, when the input paused past it (``RecorderStream/noteInputPaused(untilSourcePTS:)``). The spill
    /// stage records the stretch from the last frame as an `input interval` gap when it closes.
    let pausedUntilPTS = Atomic<Int64>(.min)
    /// What ended the stream's input, when it failed while the recorder went on.
    let inputFailure = Mutex<String?>(nil)
    /// Why the stream's input ended (it sends no more frames), once it has.
    let inputEnd = Mutex<String?>(nil)
    /// How this stream's source pts become stream pts and recorder time.
    let clock: StreamClockMapping
    let state = Mutex(SharedState())

    init(clock: StreamClockMapping) {
        self.clock = clock
    }

    struct SharedState {
        var statistics = RecorderStatistics()
    }

    /// Notes a frame dropped on arrival, so the gap before the next stored frame names `reason`, and one after the
    /// last stored frame ends past it (`pts`, stream clock, when it is known).
    func noteDroppedOnArrival(_ reason: LossReason, pts: Int64? = nil) {
        let (before, _) = arrivalDropsSinceLastStore.bitwiseOr(reason.arrivalBit, ordering: .relaxed)
        if before == 0 { firstDroppedPTS.store(pts ?? .min, ordering: .relaxed) }
        if let pts { lastDroppedPTS.store(pts, ordering: .relaxed) }
    }

    /// Every frame lost so far, by reason: dropped by the ring, dropped on arrival, and lost after acceptance.
    func drops(ring: RingStatistics) -> [LossReason: Int] {
        var drops = state.withAnnotatedLock { $0.statistics.drops }
        for reason in DropReason.allCases where ring.dropped[reason] > 0 {
            drops[reason.lossReason, default: 0] += Int(ring.dropped[reason])
        }
        let behind = droppedSpillBehind.load(ordering: .relaxed)
        if behind > 0 { drops[.spillBehind, default: 0] += behind }
        return drops
    }
}
