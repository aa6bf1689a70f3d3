import Dispatch
import Foundation
import RewindCore
import RewindSystem
import SegmentStore
import Synchronization

/// What one stream of a recorder is: its name in the store and what its frames are.
public struct RecorderStreamSpec: Sendable, Hashable {
    /// The stream's name in the store.
    public var name: String
    /// What every frame of the stream is.
    public var stream: StreamDescription

    /// Names a stream.
    ///
    /// - Parameters:
    ///   - name: the stream's name in the store.
    ///   - stream: what every frame of the stream is.
    public init(name: String, stream: StreamDescription) {
        self.name = name
        self.stream = stream
    }
}

/// Records one or more streams into one store, on one clock, under one memory budget: a producer per stream
/// appends frames to its ring (never waiting on disk or compression), and one spill thread writes every stream to
/// the segment store; queries merge the store and the ring.
///
///     producer A ──▶ RingStore A (share of the budget) ──┐
///     producer B ──▶ RingStore B (share of the budget) ──┼─ pin(fromSequence:), a batch per stream in turn
///                                                        ▼
///                         spill thread ──▶ StreamWriter A / B (shared encoder workers) ──▶ segments + index
///                 query ◀── pin(range) + SegmentStore.frames(in:) of the stream asked for
///
/// Ownership: each stream's ring owns its frames' slabs; the spill thread pins a few unwritten frames of one stream
/// at a time (never copying them), writes them in sequence order and releases them, then turns to the next stream,
/// so a stalled or ended input never holds up the others. Backpressure is decided per stream by its producer with
/// two atomic loads, no lock and no I/O: with `dropNewest`, a frame that would leave fewer than a batch of free
/// slabs for unwritten frames is dropped on arrival; with `dropOldestUnspilled` the frame is stored and the ring lets
/// its oldest frames go, written or not. Every lost frame is counted with its reason and recorded as a gap of its
/// stream.
///
/// The memory budget (``RecorderConfiguration/memoryBudget``) is the total: the spill encoders' output buffers (one
/// per stream, about a frame each) come off it first, then each stream's ring gets a share that follows its byte
/// rate (frame bytes × frame rate), never below a floor of a few frames (``budgetShares(total:streams:window:)``);
/// pressure shrinks every share and every encoder buffer. The single-stream members (``append(copying:info:)``, ``frames(in:_:)``, …)
/// act on the first stream; ``streams`` gives each.
public final class Recorder: Sendable {
    /// Every stream, in the order given.
    public let streams: [RecorderStream]
    /// The settings the recorder was made with.
    public let configuration: RecorderConfiguration
    /// The store frames spill to; nil with spill `off`.
    public let store: SegmentStore?
    /// The recorder clock every stream is mapped to.
    let clock: RecorderClock
    private let spill: SpillStage?
    /// Changes of level through ``setPressure(_:)``.
    private let pressureChangeCount = Atomic<Int>(0)
    private let pressureLevel = Mutex(MemoryPressure.normal)
    /// The share of the memory budget taken by the spill encoders' output buffers, every stream's together (0 when
    /// they are not counted; see `Recorder+Memory.swift`).
    package let encoderBytes: Int

    /// The smallest memory budget a recorder of frames of `layout` can store a frame in: one frame rounded up to
    /// whole pages, as the ring's pool maps it. With it, a file records a frame at a time (write-through).
    ///
    /// - Parameter layout: the stream's frame layout.
    /// - Returns: bytes.
    public static func smallestMemoryBudget(for layout: FrameLayout) -> Int {
        let page = System.pageSize
        return max(1, (layout.byteCount + page - 1) / page * page)
    }

    /// The smallest memory budget a recorder of these streams can store a frame of each in: the sum of
    /// ``smallestMemoryBudget(for:)``.
    ///
    /// - Parameter layouts: the streams' frame layouts.
    /// - Returns: bytes.
    public static func smallestMemoryBudget(for layouts: [FrameLayout]) -> Int {
        layouts.reduce(0) { $0 + smallestMemoryBudget(for: $1) }
    }

    /// Each stream's share of a total budget: a floor of a few frames (four slabs, or the window's frames when
    /// fewer), and the rest in proportion to the streams' byte rates, so a large stream cannot starve a small one.
    ///
    /// When the total cannot hold every floor, each stream gets one slab first and the rest in proportion to what
    /// its floor lacks; below one slab each, shares follow the slab sizes.
    ///
    /// - Parameters:
    ///   - total: the recorder's budget, bytes.
    ///   - streams: the streams.
    ///   - window: the rewind window, nanoseconds.
    /// - Returns: bytes per stream, in order; they add up to at most `total`.
    /// - Complexity: O(streams).
    public static func budgetShares(total: Int, streams: [StreamDescription], window: Duration) -> [Int] {
        guard streams.count > 1 else { return streams.map { _ in total } }
        let windowNanoseconds = window.nanosecondsClamped
        let slabs = streams.map { smallestMemoryBudget(for: $0.layout) }
        let floors = zip(streams, slabs).map { stream, slab -> Int in
            let nominal = stream.frameDuration.nanoseconds ?? 1
            let framesInWindow = nominal > 0 ? Int(min(windowNanoseconds / nominal, 4)) : 4
            return slab * min(4, max(1, framesInWindow))
        }
        let floorTotal = floors.reduce(0, +)
        let slabTotal = slabs.reduce(0, +)
        // `amount` in parts by `weights`, whole: the bytes rounding leaves go one each to the largest remainders.
        func proportional(_ amount: Int, _ weights: [Double]) -> [Int] {
            let sum = weights.reduce(0, +)
            guard sum > 0 else { return weights.map { _ in 0 } }
            let exact = weights.map { Double(amount) * $0 / sum }
            var parts = exact.map { min(amount, Int($0.rounded(.down))) }
            let left = amount - parts.reduce(0, +)
            let byRemainder = exact.indices.sorted { exact[$0] - Double(parts[$0]) > exact[$1] - Double(parts[$1]) }
            for index in byRemainder.prefix(max(0, left)) { parts[index] += 1 }
            return parts
        }
        if total >= floorTotal {
            let rates = zip(streams, slabs).map { stream, slab -> Double in
                let seconds = Double(max(1, stream.frameDuration.nanoseconds ?? 1)) / 1e9
                return Double(slab) / seconds
            }
            return zip(floors, proportional(total - floorTotal, rates)).map { $0 + $1 }
        }
        if total >= slabTotal {
            let lacking = zip(floors, slabs).map { Double($0 - $1) }
            return zip(slabs, proportional(total - slabTotal, lacking)).map { $0 + $1 }
        }
        return proportional(total, slabs.map(Double.init))
    }

    /// Starts a recorder of one stream, named ``RecorderConfiguration/streamName`` (and, unless spill is `off`,
    /// its spill thread writing to `store`).
    ///
    /// - Parameters:
    ///   - stream: the stream every frame belongs to.
    ///   - store: the segment store; required unless `configuration.spill` is `.off`.
    ///   - configuration: window, budget, spill and backpressure policies.
    /// - Throws: when the store cannot make a writer for the stream (e.g. a stream of that name with another
    ///   layout exists), or the system refuses the spill thread (``ThreadStartFailed``).
    public convenience init(stream: StreamDescription, store: SegmentStore?, configuration: RecorderConfiguration)
        throws
    {
        try self.init(
            streams: [RecorderStreamSpec(name: configuration.streamName, stream: stream)], store: store,
            configuration: configuration)
    }

    /// Starts a recorder of several streams in one store, on one clock, under one memory budget (and, unless spill
    /// is `off`, one spill thread writing them all to `store`).
    ///
    /// A stream the store already holds continues its timeline: its first frame is placed after its stored frames
    /// (and after any gap that ends later, such as a lost tail) on the store's recorder clock, with a
    /// ``LossReason/recorderStopped`` gap between.
    ///
    /// - Parameters:
    ///   - streams: the streams, with unique names; at least one.
    ///   - store: the segment store; required unless `configuration.spill` is `.off`.
    ///   - configuration: window (for every stream), total budget, spill and backpressure policies;
    ///     ``RecorderConfiguration/streamName`` is not used.
    /// - Throws: when the store cannot make a writer for a stream (e.g. a stream of that name with another layout
    ///   exists: ``StoreIndexError/streamDescriptionMismatch(name:stored:requested:)``), or cannot read its index;
    ///   ``ThreadStartFailed`` when the system refuses the spill thread;
    ///   ``RecorderError/wallClockOutOfRange(seconds:)`` when the system clock reads before 1970 or after 2199.
    public init(streams specs: [RecorderStreamSpec], store: SegmentStore?, configuration: RecorderConfiguration) throws
    {
        precondition(!specs.isEmpty, "a recorder needs at least one stream")
        precondition(Set(specs.map(\.name)).count == specs.count, "stream names must be unique")
        precondition(configuration.spill == .off || store != nil, "spill \(configuration.spill) needs a store")
        try RecorderError.checkWallClock()
        self.configuration = configuration
        let store = configuration.spill == .off ? nil : store
        self.store = store
        let rows = try store?.streams() ?? []
        clock = RecorderClock(
            epochWallNanoseconds: try store?.recorderClockWall(), storedEnd: try store?.recorderTimeEnd())
        // Each stream's spill encoder keeps an output buffer of about one frame; it counts in the budget, taken
        // from the rings' total before that is shared between the streams (see `Recorder+Memory.swift`).
        let encoderShares = Self.encoderShares(of: configuration, store: store, streams: specs.map(\.stream))
        encoderBytes = encoderShares.reduce(0, +)
        let ringTotal = configuration.memoryBudget - encoderBytes
        let shares = Self.budgetShares(total: ringTotal, streams: specs.map(\.stream), window: configuration.window)
        let spill = store.map { _ in SpillStage(configuration: configuration) }
        self.spill = spill
        // Each stream's segments are sealed at its share of a disk budget, by raw bytes per second: they span about
        // as long, so retention leaves every stream about the same history.
        let rates = specs.map { Double($0.stream.layout.byteCount) / $0.stream.frameDuration.seconds }
        let totalRate = rates.reduce(0, +)
        var made: [RecorderStream] = []
        var firstWriter: StreamWriter?
        var writers: [StreamWriter] = []
        // A stream that cannot be written leaves no writer of the others open.
        var isComplete = false
        defer { if !isComplete { for writer in writers { try? writer.close() } } }
        for (index, (spec, share)) in zip(specs, shares).enumerated() {
            let row = rows.first { $0.name == spec.name }
            // What the store knows of the stream's chroma siting and pixel aspect and the input does not say holds
            // for the frames in memory too (live exports say what exports from the disk say).
            var stream = spec.stream
            if let row, stream.agrees(with: row.description) { stream = stream.filled(from: row.description) }
            var storedClock: StreamClock?
            var lastStoredPTS: Int64?
            var storedGapsEnd: Int64?
            var heldUntil: Int64?
            // A continuation starts a frame after the last stored one, on the frame grid.
            let step = spec.stream.frameStepNanoseconds
            if let store, let row {
                heldUntil = try store.markers(streamName: row.name).compactMap(\.hold?.upperBound).max()
                storedClock = try store.clock(of: row)
                lastStoredPTS = try store.continuesAfter(row, frameStep: step)
                storedGapsEnd = try store.gaps(streamName: row.name).filter(\.reason.isLoss).map(\.endNanoseconds).max()
            }
            let shared = RecorderShared(
                clock: StreamClockMapping(
                    recorderClock: clock, storedClock: storedClock, lastStoredPTS: lastStoredPTS, frameDuration: step))
            // Markers' holds of what this recording makes: written at once (see `RecorderStream.writeAtOnce`).
            if let heldUntil { shared.writeAtOnceThroughPTS.store(heldUntil - 1, ordering: .relaxed) }
            let recorderStream = RecorderStream(
                name: spec.name, stream: stream, budget: share, ringTotal: ringTotal,
                encoderBytes: encoderShares[index], configuration: configuration, store: store, spill: spill,
                shared: shared)
            if let store, let spill {
                // One thread writes every stream, one frame at a time: the writers share the encoder's workers.
                let writer = try store.makeWriter(
                    streamName: spec.name, stream: stream, sharingWorkersWith: firstWriter,
                    segmentMaxBytes: store.options.segmentMaxBytes(forShareOfBudget: rates[index] / totalRate))
                firstWriter = firstWriter ?? writer
                writers.append(writer)
                spill.addLane(
                    SpillLane(
                        ring: recorderStream.ring, writer: writer, shared: shared, stream: stream,
                        configuration: configuration, lastStoredPTS: lastStoredPTS, storedGapsEnd: storedGapsEnd))
            }
            made.append(recorderStream)
        }
        self.streams = made
        try spill?.start()
        isComplete = true
    }

    deinit {
        _ = try? finish()
    }

    /// The stream called `name`, if the recorder records one.
    ///
    /// - Parameter name: the stream's name in the store.
    public func stream(named name: String) -> RecorderStream? {
        streams.first { $0.name == name }
    }

    /// Recorder time now: nanoseconds on the clock every stream is mapped to (``StreamClock``); nil before the first
    /// frame of a store that has no recorder clock yet.
    public var now: Int64? { clock.now }

    /// How far ahead of the wall clock this recording runs, nanoseconds: 0, unless the store's recordings end after
    /// now on the wall clock (a file recorded faster than real time), when every stream is placed after them.
    public var clockLeadNanoseconds: Int64 { clock.lead }

    // MARK: The first stream

    /// The first stream's description (for a recorder of one stream, the stream every frame belongs to).
    public var stream: StreamDescription { streams[0].stream }

    /// The first stream's ring. Package-only: pressure must go through ``setPressure(_:)``.
    package var ring: RingStore { streams[0].ring }

    /// Appends a frame of the first stream: ``RecorderStream/append(copying:info:)``.
    ///
    /// - Throws: ``FrameError`` for bad input; counted, nothing else changes.
    public func append(copying planes: PlaneSources, info: FrameInfo) throws(FrameError) -> AppendOutcome {
        try streams[0].append(copying: planes, info: info)
    }

    /// Reserves a slab for the first stream's next frame: ``RecorderStream/reserve()``.
    public func reserve() -> ReservedSlab? { streams[0].reserve() }

    /// Stores a frame of the first stream filled in place: ``RecorderStream/commit(_:info:)``.
    ///
    /// - Throws: ``FrameError`` for bad input.
    public func commit(_ slab: consuming ReservedSlab, info: FrameInfo) throws(FrameError) -> AppendOutcome {
        try streams[0].commit(slab, info: info)
    }

    /// Frames of the first stream accepted but not yet written by the spill stage.
    public var unspilledFrames: UInt64 { streams[0].unspilledFrames }

    /// How many frames the first stream's ring can hold: ``RecorderStream/framesInRing``.
    public var framesInRing: Int { streams[0].framesInRing }

    /// Waits for room for the first stream's next frame: ``RecorderStream/waitForSpillRoom(until:)``.
    public func waitForSpillRoom(until shouldStop: () -> Bool = { false }) {
        streams[0].waitForSpillRoom(until: shouldStop)
    }

    /// Sets the memory pressure level: every stream's ring shrinks its share of the budget (and releases memory) at
    /// once. Pressure must be set here, not on a ring directly, so backpressure follows the new budget.
    public func setPressure(_ level: MemoryPressure) {
        let changed = pressureLevel.withAnnotatedLock { current in
            defer { current = level }
            return current != level
        }
        if changed { pressureChangeCount.add(1, ordering: .relaxed) }
        for stream in streams { stream.setPressure(level) }
    }

    /// How many times ``setPressure(_:)`` changed the level.
    public var pressureChanges: Int { pressureChangeCount.load(ordering: .relaxed) }

    // MARK: Finishing

    /// Stops the spill stage after it has written every accepted frame of every stream, makes them durable and
    /// seals the open segments. Idempotent.
    ///
    /// - Returns: what the recorder did for the first stream (``RecorderStream/statistics`` has each).
    /// - Throws: the last disk error, if a final sync or seal failed (frames already durable stay so).
    @discardableResult
    public func finish() throws -> RecorderStatistics {
        if let spill { try spill.finish(recorderTime: recordingEnd) }
        return statistics
    }

    /// Where the recording ends, in recorder time: now, or the end of the newest frame of any stream when that
    /// lies later (inputs read faster than real time, whose frames' times run ahead of the clock). A stream whose
    /// input failed has its gap run to here, as long as the others recorded; nil before the first frame of a store
    /// that has no recorder clock yet.
    public var recordingEnd: Int64? {
        streams.reduce(clock.now) { end, stream in
            guard let newest = stream.newestFrameEnd else { return end }
            return max(end ?? newest, newest)
        }
    }

    /// What the first stream's ring holds now: frames, bytes, pts range, budget and pinned frames.
    public var memoryStatistics: RingStatistics { streams[0].memoryStatistics }

    /// The first stream's ring limits: window, its share of the budget, minimum under pressure.
    public var memoryConfiguration: RingConfiguration { streams[0].memoryConfiguration }

    /// The first stream's counters so far: ``RecorderStream/statistics``.
    public var statistics: RecorderStatistics { streams[0].statistics }

    // MARK: Queries

    /// Calls `body` with every frame of the first stream whose pts lies in `range`:
    /// ``RecorderStream/frames(in:_:)``.
    ///
    /// - Parameters:
    ///   - range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    ///   - body: returns false to stop early. The view is only valid during the call.
    /// - Returns: how many frames came from disk and from memory.
    /// - Throws: store errors (a damaged frame is an error, never data).
    /// - Complexity: O(log n) to the first frame; memory bounded by one decoded frame plus the pinned ones.
    @discardableResult
    public func frames(in range: Range<Int64>, _ body: (FrameView) throws -> Bool) throws -> QuerySplit {
        try streams[0].frames(in: range, body)
    }

    /// The pts range of the last `duration` of the first stream: `(newest − duration, newest]`.
    ///
    /// - Parameter duration: how much of the stream, measured in pts (whole nanoseconds).
    /// - Returns: pts nanoseconds on the stream clock, start inclusive, end exclusive; nil when nothing has been
    ///   recorded.
    public func lastRange(_ duration: Duration) throws -> Range<Int64>? {
        try streams[0].lastRange(duration)
    }
}

/// Where a query's frames came from.
public struct QuerySplit: Sendable, Hashable {
    /// Frames read and decoded from the segment store: older than the ring, or evicted before the query reached
    /// them.
    public var fromDisk = 0
    /// Frames read in place from the ring (pinned while read).
    public var fromMemory = 0
    /// Frames passed to the query's body, from both sources; each frame is counted once.
    public var total: Int { fromDisk + fromMemory }
}
