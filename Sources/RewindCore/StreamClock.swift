/// Where one stream's pts lie on the recorder clock: the one clock every stream of a store shares.
///
/// Each stream keeps the pts its source gave (``FrameInfo/ptsNanoseconds``, the stream clock); the recorder maps
/// it to its own clock at the stream's first frame, and the store keeps that mapping with the stream, so "the
/// last 5 s" and a `--from/--to` range mean the same instants for every stream, also after a restart:
///
///     recorder time = pts + offsetNanoseconds
///     wall time     ≈ wallNanoseconds + recorder time      (the recorder clock runs with the wall clock)
///
/// `wallNanoseconds` (the wall-clock time of recorder time 0) is the same for every stream of a store. A store's
/// first stream starts with offset 0, so a store of one stream has recorder time = pts.
public struct StreamClock: Sendable, Hashable {
    /// Recorder time minus pts, nanoseconds.
    public var offsetNanoseconds: Int64
    /// The wall-clock time of recorder time 0, Unix-epoch nanoseconds (the same for every stream of a store).
    public var wallNanoseconds: Int64

    /// Makes a mapping.
    ///
    /// - Parameters:
    ///   - offsetNanoseconds: recorder time minus pts.
    ///   - wallNanoseconds: the wall-clock time of recorder time 0, Unix-epoch nanoseconds.
    public init(offsetNanoseconds: Int64, wallNanoseconds: Int64) {
        self.offsetNanoseconds = offsetNanoseconds
        self.wallNanoseconds = wallNanoseconds
    }

    /// The farthest a stream's pts may lie from recorder time, either way: twice the 100 years of stream time a
    /// recording keeps. A stored clock farther off is damaged.
    public static let farthestOffsetNanoseconds = 2 * FrameInfo.longestStreamTimeNanoseconds

    /// The identity mapping: recorder time = pts, recorder time 0 at the Unix epoch.
    public static let identity = StreamClock(offsetNanoseconds: 0, wallNanoseconds: 0)

    /// The recorder time of a pts of this stream.
    ///
    /// - Parameter pts: nanoseconds on the stream clock.
    /// - Returns: nanoseconds on the recorder clock (saturating).
    public func recorderTime(ofPTS pts: Int64) -> Int64 { pts.addingSaturating(offsetNanoseconds) }

    /// The wall-clock time at which a recorder-time range (`--from`/`--to`) finds a pts of this stream.
    ///
    /// - Parameter pts: nanoseconds on the stream clock.
    /// - Returns: Unix-epoch nanoseconds (saturating).
    public func wallNanoseconds(ofPTS pts: Int64) -> Int64 {
        recorderTime(ofPTS: pts).addingSaturating(wallNanoseconds)
    }

    /// The pts of this stream at a recorder time.
    ///
    /// - Parameter time: nanoseconds on the recorder clock.
    /// - Returns: nanoseconds on the stream clock (saturating).
    public func pts(atRecorderTime time: Int64) -> Int64 { time.subtractingSaturating(offsetNanoseconds) }

    /// A range of recorder time as a pts range of this stream.
    ///
    /// - Parameter range: nanoseconds on the recorder clock, start inclusive, end exclusive.
    /// - Returns: the same instants in pts nanoseconds on the stream clock.
    public func ptsRange(_ range: Range<Int64>) -> Range<Int64> {
        let lower = pts(atRecorderTime: range.lowerBound)
        return lower..<max(lower, pts(atRecorderTime: range.upperBound))
    }
}

extension Int64 {
    /// `self + other`, clamped to the representable range instead of trapping.
    public func addingSaturating(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }

    /// `self - other`, clamped to the representable range instead of trapping.
    public func subtractingSaturating(_ other: Int64) -> Int64 {
        let (difference, overflow) = subtractingReportingOverflow(other)
        guard overflow else { return difference }
        return other < 0 ? .max : .min
    }
}
