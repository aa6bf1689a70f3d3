/// Bad input about frames: thrown, counted by whoever receives it, and never leaves a store half-changed.
public enum FrameError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A frame's width or height, in pixels, is outside `1...FrameLayout.maximumDimension`.
    case invalidDimensions(width: Int, height: Int)
    /// A pixel format name (as given on the command line or in JSON) that ``PixelFormat/init(name:)`` does not
    /// know.
    case unknownFormat(String)
    /// A frame's pts is before the previous one's; both are nanoseconds of pts on the stream clock.
    case nonMonotonicPTS(previousNanoseconds: Int64, nanoseconds: Int64)
    /// A frame's pts, in nanoseconds on the stream clock, equals the previous one's.
    case duplicatePTS(nanoseconds: Int64)
    /// A plane (0-based index) has too few bytes, or too short a row stride, for the frame's layout; `expected`
    /// and `actual` are both byte counts or both row lengths in bytes.
    case planeSizeMismatch(plane: Int, expected: Int, actual: Int)
    /// The caller passed the wrong number of planes for the format.
    case planeCountMismatch(expected: Int, actual: Int)
    /// The frame's layout differs from the one its stream was opened with.
    case layoutMismatch(expected: FrameLayout, actual: FrameLayout)
    /// A pts that does not fit in 64-bit nanoseconds (beyond about ±292 years), or that a recording would put
    /// beyond ``FrameInfo/longestStreamTimeNanoseconds`` (100 years) on its stream clock.
    case ptsOutOfRange(FrameTime)

    /// A one-line message for people: what was wrong, with the values involved.
    public var description: String {
        switch self {
        case .invalidDimensions(let w, let h):
            "invalid frame size \(w)x\(h): each side must be 1…\(FrameLayout.maximumDimension)"
        case .unknownFormat(let name):
            "unknown pixel format '\(name)'; use one of "
                + PixelFormat.allCases.map(\.name).joined(separator: ", ")
        case .nonMonotonicPTS(let previous, let ns):
            "pts \(ns) ns goes backwards (previous frame was at \(previous) ns); frames must arrive in pts order"
        case .duplicatePTS(let ns):
            "duplicate pts \(ns) ns: a frame with this timestamp was already accepted"
        case .planeSizeMismatch(let plane, let expected, let actual):
            "plane \(plane) has \(actual) bytes but the layout needs \(expected)"
        case .planeCountMismatch(let expected, let actual):
            "got \(actual) planes but the format has \(expected)"
        case .layoutMismatch(let expected, let actual):
            "frame is \(actual) but the stream is \(expected)"
        case .ptsOutOfRange(let pts):
            "a frame at pts \(pts.value / Int64(pts.timescale))s (\(Int(pts.seconds / 31_557_600)) years) is beyond the "
                + "100 years of stream time a recording keeps"
        }
    }
}
