/// The colour attachments that must survive from capture to export, or colours shift.
public struct ColorInfo: Sendable, Hashable, CustomStringConvertible {
    /// The YCbCr matrix (and, by convention, primaries and transfer) of the stream. Raw values are stable: they
    /// are written into segment files.
    public enum Matrix: UInt8, Sendable, CaseIterable {
        case unspecified = 0
        case bt601 = 1
        case bt709 = 2
        case bt2020 = 3

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
        case video = 0
        case full = 1

        public var name: String { self == .video ? "video" : "full" }
    }

    public var matrix: Matrix
    public var range: Range

    public init(matrix: Matrix, range: Range) {
        self.matrix = matrix
        self.range = range
    }

    /// HD video: BT.709, video range.
    public static let bt709Video = ColorInfo(matrix: .bt709, range: .video)
    /// Nothing known: unspecified matrix, video range.
    public static let unspecified = ColorInfo(matrix: .unspecified, range: .video)

    public var description: String { "\(matrix.name)/\(range.name)" }
}
