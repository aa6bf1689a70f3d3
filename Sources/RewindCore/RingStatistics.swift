/// How many frames were dropped, by reason.
public struct DropCounts: Sendable, Hashable {
    /// Frames dropped because there was no memory under the budget (``DropReason/memoryBudget``).
    public var memoryBudget: UInt64 = 0
    /// Frames dropped because the memory that could be freed was pinned (``DropReason/pinnedFrames``).
    public var pinnedFrames: UInt64 = 0

    /// Makes counts that are all zero.
    public init() {}

    /// All drops.
    public var total: UInt64 { memoryBudget + pinnedFrames }

    /// The count for one reason.
    public subscript(reason: DropReason) -> UInt64 {
        get {
            switch reason {
            case .memoryBudget: memoryBudget
            case .pinnedFrames: pinnedFrames
            }
        }
        set {
            switch reason {
            case .memoryBudget: memoryBudget = newValue
            case .pinnedFrames: pinnedFrames = newValue
            }
        }
    }
}

/// How many frames were rejected as bad input, by kind of ``FrameError``.
public struct RejectionCounts: Sendable, Hashable {
    /// Rejections for ``FrameError/invalidDimensions(width:height:)``.
    public var invalidDimensions: UInt64 = 0
    /// Rejections for ``FrameError/unknownFormat(_:)``.
    public var unknownFormat: UInt64 = 0
    /// Rejections for ``FrameError/nonMonotonicPTS(previousNanoseconds:nanoseconds:)``.
    public var nonMonotonicPTS: UInt64 = 0
    /// Rejections for ``FrameError/duplicatePTS(nanoseconds:)``.
    public var duplicatePTS: UInt64 = 0
    /// Rejections for ``FrameError/planeSizeMismatch(plane:expected:actual:)``.
    public var planeSizeMismatch: UInt64 = 0
    /// Rejections for ``FrameError/planeCountMismatch(expected:actual:)``.
    public var planeCountMismatch: UInt64 = 0
    /// Rejections for ``FrameError/layoutMismatch(expected:actual:)``.
    public var layoutMismatch: UInt64 = 0
    /// Rejections for ``FrameError/ptsOutOfRange(_:)``.
    public var ptsOutOfRange: UInt64 = 0

    /// Makes counts that are all zero.
    public init() {}

    /// All rejections.
    public var total: UInt64 {
        invalidDimensions + unknownFormat + nonMonotonicPTS + duplicatePTS + planeSizeMismatch
            + planeCountMismatch + layoutMismatch + ptsOutOfRange
    }

    /// The count for the kind of `error` (its associated values are ignored).
    public func count(of error: FrameError) -> UInt64 {
        switch error {
        case .invalidDimensions: invalidDimensions
        case .unknownFormat: unknownFormat
        case .nonMonotonicPTS: nonMonotonicPTS
        case .duplicatePTS: duplicatePTS
        case .planeSizeMismatch: planeSizeMismatch
        case .planeCountMismatch: planeCountMismatch
        case .layoutMismatch: layoutMismatch
        case .ptsOutOfRange: ptsOutOfRange
        }
    }

    /// Counts one rejection of the kind of `error`.
    public mutating func record(_ error: FrameError) {
        switch error {
        case .invalidDimensions: invalidDimensions += 1
        case .unknownFormat: unknownFormat += 1
        case .nonMonotonicPTS: nonMonotonicPTS += 1
        case .duplicatePTS: duplicatePTS += 1
        case .planeSizeMismatch: planeSizeMismatch += 1
        case .planeCountMismatch: planeCountMismatch += 1
        case .layoutMismatch: layoutMismatch += 1
        case .ptsOutOfRange: ptsOutOfRange += 1
        }
    }
}

/// A consistent picture of a ring store at one moment, taken under its lock.
///
/// Byte counts are of whole slabs (frame bytes rounded up to pages). Always
/// `mappedBytes == freeBytes + reservedBytes + bytesInRing + bytesOutsideRing + unmappingBytes`, and
/// `mappedBytes <= budget` except when pinned or held slabs outlive a budget cut (then nothing new is mapped until
/// they are released).
public struct RingStatistics: Sendable, Hashable {
    /// Frames in the ring.
    public var frames: Int
    /// The most frames the ring can hold.
    public var frameCapacity: Int
    /// Frames in the ring that are pinned by snapshots.
    public var pinnedFramesInRing: Int
    /// Slab bytes of the frames in the ring.
    public var bytesInRing: Int
    /// Slab bytes of frames that left the ring but are still held (by an eviction handler or by pins).
    public var bytesOutsideRing: Int
    /// The part of ``bytesOutsideRing`` that is pinned by snapshots.
    public var pinnedBytesOutsideRing: Int
    /// Slab bytes reserved for frames being filled.
    public var reservedBytes: Int
    /// Slab bytes mapped and free for reuse.
    public var freeBytes: Int
    /// Slab bytes being given back to the system.
    public var unmappingBytes: Int
    /// All slab bytes mapped by the pool.
    public var mappedBytes: Int
    /// The budget in force (lowered by memory pressure).
    public var budget: Int
    /// The slab bytes the ring keeps to because the system refused to map more (strict overcommit, a lowered
    /// `ulimit -v`), below ``budget``; nil when it has refused nothing since the budget was last set.
    public var systemLimit: Int?
    /// Slabs the system refused to map: each time, the frame took a slab as under a full budget instead.
    public var refusedMappings: UInt64
    /// The memory pressure last set with ``RingStore/setPressure(_:)``; ``MemoryPressure/normal`` until then.
    public var pressure: MemoryPressure
    /// Frames stored.
    public var appended: UInt64
    /// Frames that left the ring (window, budget, capacity or pressure) and went to the eviction handler.
    public var evicted: UInt64
    /// Frames offered but not stored, by reason.
    public var dropped: DropCounts
    /// Frames refused as bad input, by kind of ``FrameError``; the ring was left unchanged by each.
    public var rejected: RejectionCounts
    /// The pts of the oldest frame in the ring, nanoseconds on the stream clock; nil when the ring is empty.
    public var firstPTSNanoseconds: Int64?
    /// The pts of the newest frame in the ring, nanoseconds on the stream clock; nil when the ring is empty.
    public var lastPTSNanoseconds: Int64?
    /// The sequence number of the newest frame ever stored.
    public var newestSequence: UInt64?
}
