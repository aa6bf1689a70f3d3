import Synchronization

/// A pinned, unchanging set of frames taken from a ring, in pts order.
///
/// While the snapshot lives, its frames' slabs are never reused, whatever the producer does; frames that leave
/// the ring meanwhile keep their slabs (counted against the budget, outside the ring) until the snapshot is
/// released. Release it as soon as its frames are read: ``release()``, or by letting it go.
///
/// Reading (``withFrame(at:_:)``) is safe from any thread until ``release()``; reading after releasing is a
/// programming error and traps.
public final class RingSnapshot: Sendable {
    private let store: RingStore
    private let frames: [Slot]
    private let isReleased = Atomic<Bool>(false)

    init(store: RingStore, frames: [Slot]) {
        self.store = store
        self.frames = frames
    }

    deinit { release() }

    /// The number of frames.
    public var count: Int { frames.count }
    /// Whether the snapshot holds no frame (none matched, or the ring was empty).
    public var isEmpty: Bool { frames.isEmpty }

    /// The pts of the first frame, nanoseconds on the stream clock, or nil when empty.
    public var firstPTSNanoseconds: Int64? { frames.first?.info.ptsNanoseconds }
    /// The pts of the last frame, nanoseconds on the stream clock, or nil when empty.
    public var lastPTSNanoseconds: Int64? { frames.last?.info.ptsNanoseconds }
    /// The sequence numbers of the frames, first to last (consecutive).
    public var sequences: ClosedRange<UInt64>? {
        guard let first = frames.first, let last = frames.last else { return nil }
        return first.sequence...last.sequence
    }

    /// Calls `body` with a view of frame `index` (0 = oldest) and its sequence number; the view must not escape.
    public func withFrame<Result, Failure: Error>(
        at index: Int, _ body: (FrameView, UInt64) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        precondition(!isReleased.load(ordering: .acquiring), "reading a released ring snapshot")
        precondition(index >= 0 && index < frames.count, "snapshot index \(index) out of range 0..<\(frames.count)")
        let slot = frames[index]
        return try body(slot.view, slot.sequence)
    }

    /// Unpins the frames. Idempotent; the snapshot must not be read afterwards.
    ///
    /// - Complexity: O(count).
    public func release() {
        guard isReleased.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        store.unpin(frames)
    }
}

extension RingStore {
    /// Pins the frames whose pts lies in `range`.
    ///
    /// - Parameters:
    ///   - range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    ///   - limit: the most frames to pin (the oldest ones first).
    /// - Returns: the pinned frames in pts order (possibly none).
    /// - Complexity: O(log frames + pinned frames), under the lock.
    public func pin(_ range: Range<Int64>, limit: Int = .max) -> RingSnapshot {
        precondition(limit >= 0, "pin limit must not be negative")
        let frames = pinSlots { slots in
            let lower = slots.partitioningIndex { $0.info.ptsNanoseconds < range.lowerBound }
            let upper = slots.partitioningIndex { $0.info.ptsNanoseconds < range.upperBound }
            return lower..<max(lower, min(upper, lower + min(limit, slots.count)))
        }
        return RingSnapshot(store: self, frames: frames)
    }

    /// Pins the frames whose sequence number is at least `sequence` (all frames stored since a point).
    ///
    /// - Parameters:
    ///   - sequence: the first sequence number wanted.
    ///   - limit: the most frames to pin (the oldest ones first).
    /// - Returns: the pinned frames in order (none when `sequence` is past the newest).
    /// - Complexity: O(pinned frames), under the lock.
    public func pin(fromSequence sequence: UInt64, limit: Int = .max) -> RingSnapshot {
        precondition(limit >= 0, "pin limit must not be negative")
        let frames = pinSlots { slots in
            let skip = slots.framesBefore(sequence: sequence)
            return skip..<(skip + min(limit, slots.count - skip))
        }
        return RingSnapshot(store: self, frames: frames)
    }
}
