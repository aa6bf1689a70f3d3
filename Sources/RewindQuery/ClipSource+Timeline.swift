import RewindCapture
import RewindCore
import RewindMedia
import SegmentStore

/// What one stretch of a stream's time holds: how much of it is in memory and on disk, and why frames are missing.
public struct TimelineBucket: Sendable, Hashable {
    /// The bucket's start, inclusive: nanoseconds of pts on the stream clock.
    public var startNanoseconds: Int64
    /// The bucket's end, exclusive.
    public var endNanoseconds: Int64
    /// The share of the bucket's time covered by frames held in memory, 0…1.
    public var memory: Double
    /// The share of the bucket's time covered by frames on disk, 0…1.
    public var disk: Double
    /// The reasons of the gaps that overlap the bucket, each once, in order of first appearance.
    public var gaps: [LossReason]
}

extension ClipSource {
    /// The stream's coverage of `range` in `buckets` equal stretches: for each, the share held in memory and on
    /// disk, and the reasons of the gaps in it.
    ///
    /// Built from the segment rows and gap rows of the range and the ring's span, never from frame rows, so its cost
    /// grows with the buckets (and the segments and gaps), not with the frames: a segment covers the time from its
    /// first pts to one frame duration past its last, the ring likewise, less the gaps inside; a gap row (from the
    /// last frame before it to the next frame) leaves a hole from one frame duration after its start.
    ///
    /// - Parameters:
    ///   - range: pts nanoseconds on the stream clock, start inclusive, end exclusive; not empty.
    ///   - buckets: how many stretches, 1…10 000, no more than the range has nanoseconds.
    /// - Returns: `buckets` buckets covering `range` in order.
    /// - Throws: ``ClipError/badRange(from:to:)`` for an empty range, ``ClipError/badBucketCount(_:)``, store errors.
    public func timeline(range: Range<Int64>, buckets: Int) throws -> [TimelineBucket] {
        guard !range.isEmpty else { throw ClipError.badRange(from: range.lowerBound, to: range.upperBound) }
        let length = range.upperBound - range.lowerBound
        guard (1...ClipSource.maximumBuckets).contains(buckets), Int64(buckets) <= length else {
            throw ClipError.badBucketCount(buckets)
        }
        let frameDuration = max(1, stream.frameDuration.nanoseconds ?? 1)
        var gaps: [GapRow] = []
        var disk: [Range<Int64>] = []
        // Frames the ring let go of since the last sync are in no segment row yet: they would show as a hole.
        live?.flushIndex()
        if let (store, row) = try storedStream() {
            gaps = try SegmentStoreError.translatingIndexErrors {
                try store.index.gaps(streamID: row.id, overlapping: range)
            }
            let segments = try SegmentStoreError.translatingIndexErrors {
                // From a frame before the range: a segment whose last frame starts before it still covers its start.
                try store.index.segments(
                    streamID: row.id, overlapping: range.lowerBound.addingSaturating(-frameDuration)..<range.upperBound)
            }
            for segment in segments where segment.state != .deleting {
                guard let first = segment.firstPTS, let last = segment.lastPTS else { continue }
                // Pts and the duration are whole nanoseconds rounded down, so a segment's last frame may end a
                // nanosecond before the next segment's first: that is no hole.
                if let previous = disk.last, previous.upperBound < first, first - previous.upperBound <= 1 {
                    disk[disk.count - 1] = previous.lowerBound..<first
                }
                disk.append(first..<last.addingSaturating(frameDuration))
            }
        }
        var memory: [Range<Int64>] = []
        if let live {
            let statistics = live.ring.statistics
            if let first = statistics.firstPTSNanoseconds, let last = statistics.lastPTSNanoseconds {
                memory.append(first..<last.addingSaturating(frameDuration))
            }
        }
        // A gap runs from the last frame before it (which still shows for one frame duration) to the next frame.
        gaps = gaps.map { gap in
            var hole = gap
            hole.startNanoseconds = min(gap.startNanoseconds.addingSaturating(frameDuration), gap.endNanoseconds)
            return hole
        }.filter { $0.endNanoseconds > max($0.startNanoseconds, range.lowerBound) }
        let holes = Coverage(gaps.map { $0.startNanoseconds..<$0.endNanoseconds })
        let onDisk = Coverage(disk).subtracting(holes)
        let inMemory = Coverage(memory).subtracting(holes)

        var result: [TimelineBucket] = []
        result.reserveCapacity(buckets)
        var diskCursor = Coverage.Cursor()
        var memoryCursor = Coverage.Cursor()
        var gapIndex = 0
        for index in 0..<buckets {
            let start = range.lowerBound + Int64((Double(length) * Double(index) / Double(buckets)).rounded(.down))
            let end =
                index == buckets - 1
                ? range.upperBound
                : range.lowerBound + Int64((Double(length) * Double(index + 1) / Double(buckets)).rounded(.down))
            let span = Double(end - start)
            var reasons: [LossReason] = []
            // Gaps are sorted by start; skip those that ended before this bucket, collect those that overlap it.
            while gapIndex < gaps.count && gaps[gapIndex].endNanoseconds <= start { gapIndex += 1 }
            var probe = gapIndex
            while probe < gaps.count && gaps[probe].startNanoseconds < end {
                let gap = gaps[probe]
                if gap.endNanoseconds > start && !reasons.contains(gap.reason) { reasons.append(gap.reason) }
                probe += 1
            }
            result.append(
                TimelineBucket(
                    startNanoseconds: start, endNanoseconds: end,
                    memory: Double(inMemory.covered(start..<end, cursor: &memoryCursor)) / span,
                    disk: Double(onDisk.covered(start..<end, cursor: &diskCursor)) / span, gaps: reasons))
        }
        return result
    }

    /// The most buckets one timeline may have.
    public static let maximumBuckets = 10_000

    /// The store and stream row this source reads from disk, if any.
    func storedStream() throws -> (SegmentStore, StreamRow)? {
        switch self {
        case .recorder, .recorderStream, .pinned:
            guard let live, let store = live.store,
                let row = try store.streams().first(where: { $0.name == live.name })
            else { return nil }
            return (store, row)
        case .store(let store, let row):
            return (store, row)
        }
    }
}

/// A union of time ranges as sorted, disjoint ranges.
struct Coverage {
    private(set) var ranges: [Range<Int64>]

    init(_ ranges: [Range<Int64>]) {
        var merged: [Range<Int64>] = []
        for range in ranges.filter({ !$0.isEmpty }).sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, range.lowerBound <= last.upperBound {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        self.ranges = merged
    }

    /// This coverage less `other`'s.
    func subtracting(_ other: Coverage) -> Coverage {
        var result: [Range<Int64>] = []
        var cut = 0
        for range in ranges {
            var start = range.lowerBound
            while cut < other.ranges.count && other.ranges[cut].upperBound <= start { cut += 1 }
            var probe = cut
            while probe < other.ranges.count && other.ranges[probe].lowerBound < range.upperBound {
                let hole = other.ranges[probe]
                if hole.lowerBound > start { result.append(start..<hole.lowerBound) }
                start = max(start, hole.upperBound)
                probe += 1
            }
            if start < range.upperBound { result.append(start..<range.upperBound) }
        }
        return Coverage(result)
    }

    /// Where the previous query of increasing windows left off.
    struct Cursor { var index = 0 }

    /// How many nanoseconds of `window` are covered; windows must be asked for in increasing order with one cursor.
    func covered(_ window: Range<Int64>, cursor: inout Cursor) -> Int64 {
        while cursor.index < ranges.count && ranges[cursor.index].upperBound <= window.lowerBound { cursor.index += 1 }
        var total: Int64 = 0
        var probe = cursor.index
        while probe < ranges.count && ranges[probe].lowerBound < window.upperBound {
            let range = ranges[probe]
            total += min(range.upperBound, window.upperBound) - max(range.lowerBound, window.lowerBound)
            probe += 1
        }
        return total
    }
}
