import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import SegmentStore
import Synchronization

/// Why a clip could not be made: the range asked for, in pts nanoseconds, and what the source holds.
public enum ClipError: Error, Sendable, Hashable, CustomStringConvertible {
    /// No frame lies in `range`; `held` is the span of pts the source does hold (nil when it holds none), `lost` the
    /// gaps where frames were lost that reach into the range (``ClipSource/lostGaps(in:)``, on the same clock).
    /// Nothing was written.
    case empty(range: Range<Int64>, held: ClosedRange<Int64>?, lost: [GapRow] = [])
    /// The source (`store`, `recorder`) holds no frame at all, so there is nothing to export or resolve against.
    case noFrames(source: String)
    /// The range's end is not after its start.
    case badRange(from: Int64, to: Int64)
    /// A duration to save that is not longer than 0.
    case nonPositiveDuration(Duration)
    /// A timeline's bucket count outside `1...ClipSource.maximumBuckets`, or more buckets than its range has
    /// nanoseconds.
    case badBucketCount(Int)

    /// The error in words, times as seconds on the stream clock (the range asked for and what is held).
    public var description: String {
        switch self {
        case .empty(let range, let held, let lost):
            // A range just past what is held reads as its own time, not as the last frame's (both to the nanosecond
            // when to the millisecond they would read alike).
            // Frames were there and were lost (a damaged file, a disk error): said, so the range is not taken for one
            // the source never covered. (A range starting just after the frame a gap starts at reads apart from it.)
            let shown = Array(lost.prefix(3))
            let times = formatSecondsApart(
                [range.lowerBound, range.upperBound] + (held.map { [$0.lowerBound, $0.upperBound] } ?? [])
                    + shown.flatMap { [$0.startNanoseconds, $0.endNanoseconds] })
            let holds = held.map { _ in "the store holds \(times[2]) … \(times[3])" }
            let first = held == nil ? 2 : 4
            let gaps = shown.indices.map {
                "\(times[first + 2 * $0]) … \(times[first + 2 * $0 + 1]) (\(shown[$0].reason.rawValue))"
            }
            let why =
                gaps.isEmpty
                ? "" : "its frames were lost (\(gaps.joined(separator: ", "))\(lost.count > 3 ? ", …" : "")); "
            return "no frames in [\(times[0]), \(times[1])); " + why
                + (holds ?? "the store holds no frames") + "; nothing was written"
        case .noFrames(let source):
            return "the \(source) holds no frames yet: nothing to export"
        case .badRange(let from, let to):
            let (start, end) = formatSecondsApart(from, to)
            return "the range [\(start), \(end)) is empty: its end \(end) is not after its start \(start)"
        case .nonPositiveDuration(let duration):
            return "the duration to save (\(formatSeconds(duration.nanosecondsClamped))) must be longer than 0"
        case .badBucketCount(let count):
            return "a timeline of \(count) buckets: the count must be 1 to \(ClipSource.maximumBuckets) and at most "
                + "the range's length in nanoseconds"
        }
    }
}
