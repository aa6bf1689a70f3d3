import RewindCore
import RewindSystem
import SegmentStore

/// When frames go from the ring to the segment store.
public enum SpillPolicy: String, Sendable, CaseIterable {
    /// Every frame is compressed and written shortly after it arrives; the ring is the raw hot window. Shedding
    /// memory is instant (frames are already durable) and a crash loses at most the last moments. The default.
    case eager
    /// Only frames about to leave the window are written.
    case onEvict = "on-evict"
    /// Nothing is written: memory only.
    case off
}

/// What the recorder does when the spill stage falls behind and memory is full of frames not yet written.
public enum BackpressurePolicy: String, Sendable, CaseIterable {
    /// Discard the incoming frame, like a camera that drops late frames: what is buffered reaches disk.
    case dropNewest = "drop-newest"
    /// Keep the incoming frame and let the oldest unwritten frame go: the ring stays current (live preview).
    case dropOldestUnspilled = "drop-oldest-unspilled"
}

/// The settings of a ``Recorder``.
public struct RecorderConfiguration: Sendable {
    /// The stream's name in the store (several streams can share one store).
    public var streamName: String
    /// The rewind window kept in memory, measured in pts (whole nanoseconds: ``Swift/Duration/nanosecondsClamped``).
    public var window: Duration {
        get { .nanoseconds(windowNanoseconds) }
        set { windowNanoseconds = newValue.nanosecondsClamped }
    }
    /// ``window`` in nanoseconds, converted once when it is set.
    package private(set) var windowNanoseconds: Int64
    /// The hard memory budget of the ring, bytes.
    public var memoryBudget: Int
    /// The budget under critical memory pressure, bytes (default: an eighth of the budget, at least 4 frames).
    public var minimumBudget: Int?
    /// When frames go from the ring to the segment store (``SpillPolicy/eager`` by default; ``SpillPolicy/off``
    /// keeps memory only, with no store).
    public var spill: SpillPolicy
    /// What to drop when the spill stage falls behind and memory is full of frames not yet written
    /// (``BackpressurePolicy/dropNewest`` by default).
    public var backpressure: BackpressurePolicy
    /// With `onEvict`, frames are written once they are this much older than the newest frame (default: 3/4 of
    /// the window), so they reach disk before the window lets them go. Measured in pts, whole nanoseconds.
    public var onEvictLead: Duration? {
        get { onEvictLeadNanoseconds.map { .nanoseconds($0) } }
        set { onEvictLeadNanoseconds = newValue?.nanosecondsClamped }
    }
    /// ``onEvictLead`` in nanoseconds, converted once when it is set.
    package private(set) var onEvictLeadNanoseconds: Int64?
    /// The lead on-evict spill keeps frames unwritten for: ``onEvictLead``, or 3/4 of the window.
    package var onEvictLeadOrDefaultNanoseconds: Int64 { onEvictLeadNanoseconds ?? windowNanoseconds / 4 * 3 }

    /// Makes a configuration.
    ///
    /// - Parameters:
    ///   - streamName: the stream's name in the store.
    ///   - window: the rewind window kept in memory (10 seconds by default).
    ///   - memoryBudget: the ring's hard memory budget, bytes.
    ///   - minimumBudget: the budget under critical memory pressure, bytes.
    ///   - spill: when frames go to the store.
    ///   - backpressure: what to drop when the spill stage falls behind.
    ///   - onEvictLead: with `onEvict`, how far behind the newest frame a frame is written.
    public init(
        streamName: String = "camera", window: Duration = .seconds(10), memoryBudget: Int = 512 << 20,
        minimumBudget: Int? = nil, spill: SpillPolicy = .eager, backpressure: BackpressurePolicy = .dropNewest,
        onEvictLead: Duration? = nil
    ) {
        self.streamName = streamName
        self.windowNanoseconds = window.nanosecondsClamped
        self.memoryBudget = memoryBudget
        self.minimumBudget = minimumBudget
        self.spill = spill
        self.backpressure = backpressure
        self.onEvictLeadNanoseconds = onEvictLead?.nanosecondsClamped
    }
}

/// What a recorder did, for its exit line and `--json`.
public struct RecorderStatistics: Sendable, Hashable {
    /// Frames accepted into the ring.
    public var framesAccepted: UInt64 = 0
    /// Frames written to the segment store (appended to the writer).
    public var framesSpilled: UInt64 = 0
    /// Frames durable on disk (synced).
    public var framesDurable: Int = 0
    /// Raw (uncompressed) frame bytes of the frames written to the segment store, before compression.
    public var rawBytesSpilled: Int64 = 0
    /// Of ``rawBytesSpilled``, the bytes stored as raw chunks: incompressible, stored raw while the spill stage
    /// was falling behind a live source, or while memory pressure took the encoder's buffer.
    public var rawChunkBytesSpilled: Int64 = 0
    /// Frames lost, by reason (``LossReason/memoryBudget``, ``LossReason/spillBehind``, ``LossReason/diskError``,
    /// …).
    public var drops: [LossReason: Int] = [:]
    /// Frames refused as bad input.
    public var rejected: UInt64 = 0
    /// Gaps recorded (intervals with missing frames).
    public var gaps: Int = 0
    /// How often a gap recorded before had its end moved later (a stretch of losses or of input intervals that went
    /// on): with ``gaps``, every change to the stream's gap rows.
    public var gapExtensions: Int = 0
    /// The last write error, if any (the recorder keeps going after it).
    public var lastError: String?
    /// The error number of the last failed segment write (`ENOSPC` when the disk was full), if any.
    public var lastWriteErrno: Errno?

    /// Frames lost for any reason: the sum of ``drops``.
    ///
    /// - Complexity: O(number of reasons in ``drops``).
    public var totalDrops: Int { drops.values.reduce(0, +) }
}
