/// How urgently the process must shed memory, as the operating system reports it.
public enum MemoryPressure: Sendable, Hashable, CaseIterable {
    /// The configured budget applies.
    case normal
    /// Half the configured budget applies (never below the minimum).
    case warning
    /// Only the minimum budget applies.
    case critical
}

/// What the ring does when it needs memory for a new frame but the oldest frames are pinned.
public enum PinPolicy: Sendable, Hashable {
    /// Keep the pinned frames in the ring and drop the incoming frame.
    case dropNewest
    /// Evict oldest frames even when pinned (their slabs stay alive for the pins, outside the ring) until an
    /// unpinned slab is freed; drop the incoming frame only when every frame left is pinned.
    case evictOldestUnpinned
}

/// Why a frame that was offered to the ring was not stored. Every drop is counted with its reason; outside the
/// ring it is named by its ``lossReason``.
public enum DropReason: Sendable, Hashable, CaseIterable {
    /// No memory under the budget: the frame is larger than the budget, or the slabs are held outside the ring
    /// (by eviction handlers still working on them).
    case memoryBudget
    /// The memory that could be freed is pinned by snapshots.
    case pinnedFrames
}

/// The outcome of offering a frame to the ring.
public enum AppendOutcome: Sendable, Hashable {
    /// The frame is in the ring with this sequence number (1, 2, 3, … for stored frames, without gaps).
    case stored(sequence: UInt64)
    /// The frame was not stored, for this reason; the ring is unchanged. The ring drops for
    /// ``LossReason/memoryBudget`` or ``LossReason/pinnedFrames``; a recorder also for ``LossReason/spillBehind``.
    case dropped(LossReason)
}

/// The limits of a ring store: its time window, its memory budget and what to do with pinned frames.
public struct RingConfiguration: Sendable, Hashable {
    /// The most frames a ring holds, whatever its budget: the slot table is allocated once at this size at most.
    public static let defaultMaximumFrames = 16_384

    /// How much pts the ring keeps: frames older than `newest.pts - window` leave the ring. Kept as whole
    /// nanoseconds (``Swift/Duration/nanosecondsClamped``); must not be negative.
    public var window: Duration {
        get { .nanoseconds(windowNanoseconds) }
        set { windowNanoseconds = newValue.nanosecondsClamped }
    }
    /// ``window`` in nanoseconds of pts, converted once when it is set; the ring compares pts against it.
    package private(set) var windowNanoseconds: Int64
    /// The hard limit in bytes on all slabs mapped by the ring's pool: frames in the ring, free slabs, and slabs
    /// held or pinned outside the ring.
    public var memoryBudget: Int
    /// The budget under ``MemoryPressure/critical`` pressure; ``MemoryPressure/warning`` uses
    /// `max(minimumBudget, memoryBudget / 2)`.
    public var minimumBudget: Int
    /// What to do when pinned frames stand in the way of a new one; ``PinPolicy/evictOldestUnpinned`` by default.
    public var pinPolicy: PinPolicy
    /// The most frames the ring holds at once (the slot capacity is the smaller of this and one frame per page of
    /// the budget). When full, the oldest frame is evicted, like any other eviction.
    public var maximumFrames: Int

    /// Makes a configuration.
    ///
    /// - Parameters:
    ///   - window: the rewind window, measured in pts; must not be negative.
    ///   - memoryBudget: the hard budget in bytes.
    ///   - minimumBudget: the budget under critical pressure; at most `memoryBudget`.
    ///   - pinPolicy: what to do when pinned frames stand in the way of a new one.
    ///   - maximumFrames: the cap on the slot count.
    public init(
        window: Duration, memoryBudget: Int, minimumBudget: Int, pinPolicy: PinPolicy = .evictOldestUnpinned,
        maximumFrames: Int = RingConfiguration.defaultMaximumFrames
    ) {
        self.windowNanoseconds = window.nanosecondsClamped
        self.memoryBudget = memoryBudget
        self.minimumBudget = minimumBudget
        self.pinPolicy = pinPolicy
        self.maximumFrames = maximumFrames
    }

    /// The budget that applies under `pressure`.
    public func budget(under pressure: MemoryPressure) -> Int {
        switch pressure {
        case .normal: memoryBudget
        case .warning: max(minimumBudget, memoryBudget / 2)
        case .critical: minimumBudget
        }
    }

    func validate() {
        precondition(windowNanoseconds >= 0, "ring window must not be negative, got \(window)")
        precondition(memoryBudget >= 0, "memory budget must not be negative, got \(memoryBudget)")
        precondition(
            minimumBudget >= 0 && minimumBudget <= memoryBudget,
            "minimum budget \(minimumBudget) must be in 0...memoryBudget (\(memoryBudget))")
        precondition(maximumFrames > 0, "maximumFrames must be positive, got \(maximumFrames)")
    }
}
