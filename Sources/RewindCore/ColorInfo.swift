/// The colour attachments that must survive from capture to export, or colours shift.
public struct ColorInfo: Sendable, Hashable, CustomStringConvertible {
    /// The YCbCr matrix (and, by convention, primaries and transfer) of the stream. Raw values are stable: they
    /// are written into segment files.
    public enum Matrix: UInt8, Sendable, CaseIterable {
        /// Not known: the source did not say (code 0); exports leave their colour tags unspecified.
        case unspecified = 0
        /// ITU-R BT.601, standard definition (code 1); exported with SMPTE 170M primaries and transfer.
        case bt601 = 1
        /// ITU-R BT.709, high definition (code 2).
        case bt709 = 2
        /// ITU-R BT.2020 non-constant luminance, ultra high definition and wide gamut (code 3).
        case bt2020 = 3

        /// The lower-case name shown in reports and descriptions (`bt709`, `unspecified`, …).
        public var name: String {
            switch self {
            case .unspecified: "unspecified"
            case .bt601: "bt601"
            case .bt709: "bt709"
            case .bt2020: "bt2020"
            }
        }
    }

    /// Whether luma spans 16–235 (video, "limited") or 0–255 (full). Raw values are stable.
    public enum Range: UInt8, Sendable, CaseIterable {
        /// Limited range (code 0): 8-bit luma 16–235 and chroma 16–240, scaled for deeper samples.
        case video = 0
        /// Full range (code 1): 8-bit luma and chroma use 0–255.
        case full = 1

        /// The lower-case name shown in reports and descriptions: `video` or `full`.
        public var name: String { self == .video ? "video" : "full" }
    }

    /// The YCbCr matrix, which also names the primaries and transfer; ignored for RGB (`bgra`) frames.
    public var matrix: Matrix
    /// The range of the sample code values.
    public var range: Range

    /// Makes colour attachments from a matrix and a range.
    ///
    /// - Parameters:
    ///   - matrix: the YCbCr matrix (and, by convention, primaries and transfer).
    ///   - range: whether samples use the limited (video) or full range of code values.
    public init(matrix: Matrix, range: Range) {
        self.matrix = matrix
        self.range = range
    }

    /// HD video: BT.709, video range.
    public static let bt709Video = ColorInfo(matrix: .bt709, range: .video)
    /// Nothing known: unspecified matrix, video range.
    public static let unspecified = ColorInfo(matrix: .unspecified, range: .video)

    /// The matrix and range names joined by a slash, such as `bt709/video`.
    public var description: String { "\(matrix.name)/\(range.name)" }
}
