/// Where the chroma samples of a 4:2:0 frame sit relative to the luma samples they cover; a player that places them
/// elsewhere shifts colour edges by half a pixel. A stream attachment like ``ColorInfo``: kept from capture to
/// export. Raw values are stable: they are written into segment files (zero, "not known", in files of builds that
/// kept none).
public enum ChromaSiting: UInt8, Sendable, CaseIterable {
    /// Not known (code 0): the source did not say.
    case unspecified = 0
    /// Centred between the four luma samples (code 1): JPEG, MPEG-1, YUV4MPEG2's `C420jpeg`.
    case center = 1
    /// Level with the left luma column, between the rows (code 2): MPEG-2, H.264 and most cameras, `C420mpeg2`.
    case left = 2
    /// On the top-left luma sample (code 3): PAL DV, BT.2020 4:2:0, `C420paldv`.
    case topLeft = 3

    /// The name ffmpeg and the reports use: `unspecified`, `center`, `left` or `topleft`.
    public var name: String {
        switch self {
        case .unspecified: "unspecified"
        case .center: "center"
        case .left: "left"
        case .topLeft: "topleft"
        }
    }

    /// The siting called `name` (``name``), if any.
    public init?(name: String) {
        guard let found = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = found
    }
}

/// The shape of one pixel, width to height (`10:11` for NTSC DV, `1:1` square), as a reduced fraction of 16-bit
/// terms; `0:0` when not known. A stream attachment: kept from capture to export.
public struct PixelAspect: Sendable, Hashable, CustomStringConvertible {
    /// The width term; 0 when not known.
    public let numerator: UInt16
    /// The height term; 0 when not known.
    public let denominator: UInt16

    /// Not known (`0:0`): the source did not say.
    public static let unknown = PixelAspect(uncheckedNumerator: 0, denominator: 0)
    /// Square pixels (`1:1`).
    public static let square = PixelAspect(uncheckedNumerator: 1, denominator: 1)

    /// Makes a pixel aspect from `numerator:denominator`, reduced; `0:0` (or any zero term) is ``unknown``.
    ///
    /// - Returns: nil when a term is negative, or the reduced terms do not fit in 16 bits.
    public init?(numerator: Int, denominator: Int) {
        guard numerator >= 0, denominator >= 0 else { return nil }
        guard numerator > 0, denominator > 0 else {
            self = .unknown
            return
        }
        let divisor = greatestCommonDivisor(numerator, denominator)
        guard let n = UInt16(exactly: numerator / divisor), let d = UInt16(exactly: denominator / divisor) else {
            return nil
        }
        self.init(uncheckedNumerator: n, denominator: d)
    }

    /// Reads the two terms as stored (a segment header's), any zero term meaning ``unknown``.
    package init(stored numerator: UInt16, _ denominator: UInt16) {
        self =
            numerator == 0 || denominator == 0
            ? .unknown : PixelAspect(uncheckedNumerator: numerator, denominator: denominator)
    }

    private init(uncheckedNumerator numerator: UInt16, denominator: UInt16) {
        self.numerator = numerator
        self.denominator = denominator
    }

    /// Whether the source said what shape its pixels are.
    public var isKnown: Bool { numerator != 0 }

    /// `num:den`, such as `10:11`; nil when not known (JSON's null).
    public var ratio: String? { isKnown ? "\(numerator):\(denominator)" : nil }

    /// `num:den`, such as `10:11`; `unknown` when not known.
    public var description: String { ratio ?? "unknown" }
}
