/// The pixel layouts a frame can have. The raw value is stable: it is written into segment files.
public enum PixelFormat: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// 4:2:0 bi-planar, 8-bit: a Y plane, then one plane of interleaved Cb/Cr pairs (the native camera format).
    case nv12 = 1
    /// 4:2:0 planar, 8-bit: Y, Cb, Cr planes (`yuv420p`, what YUV4MPEG2 carries).
    case i420 = 2
    /// One plane, 4 bytes per pixel: blue, green, red, alpha.
    case bgra = 3
    /// One plane, 1 byte per pixel: luma only.
    case gray8 = 4
    /// 4:2:0 bi-planar, 16-bit little-endian samples holding 10 significant bits in their high bits.
    case p010 = 5

    /// Parses the lower-case name used on the command line and in JSON (`nv12`, `i420`, …).
    public init?(name: String) {
        guard let format = PixelFormat.allCases.first(where: { $0.name == name }) else { return nil }
        self = format
    }

    /// The lower-case name used on the command line and in JSON.
    public var name: String {
        switch self {
        case .nv12: "nv12"
        case .i420: "i420"
        case .bgra: "bgra"
        case .gray8: "gray8"
        case .p010: "p010"
        }
    }

    /// The same as ``name``: `nv12`, `i420`, `bgra`, `gray8` or `p010`.
    public var description: String { name }

    /// How many planes a frame of this format has.
    public var planeCount: Int {
        switch self {
        case .nv12, .p010: 2
        case .i420: 3
        case .bgra, .gray8: 1
        }
    }

    /// Whether chroma is subsampled by two in both directions.
    public var isChromaSubsampled: Bool {
        switch self {
        case .nv12, .i420, .p010: true
        case .bgra, .gray8: false
        }
    }
}

/// Where one plane lives inside a frame's contiguous buffer, and its shape.
///
/// Planes in a pooled buffer are tightly packed: `bytesPerRow` is the plane's row length, no padding.
public struct PlaneLayout: Sendable, Hashable {
    /// Byte offset of the plane's first row from the start of the frame buffer.
    public let offset: Int
    /// Bytes in one row, with no padding.
    public let bytesPerRow: Int
    /// Number of rows.
    public let rows: Int

    /// Bytes in the whole plane: `bytesPerRow × rows`.
    public var byteCount: Int { bytesPerRow * rows }
}

/// The geometry of a frame: format, size and the packed layout of its planes in one buffer.
///
///     offset 0                 plane(0).byteCount          byteCount
///     | plane 0 (Y or BGRA)    | plane 1 (CbCr or Cb) | plane 2 (Cr) |
///
/// Chroma planes of 4:2:0 formats have `(width + 1) / 2` samples per row and `(height + 1) / 2` rows. Each plane
/// starts where the previous one ends; in bytes per row × rows, with `cw = (width + 1) / 2` and
/// `ch = (height + 1) / 2`:
///
///     format   plane 0                  plane 1                plane 2
///     gray8    Y      width × height
///     bgra     BGRA 4·width × height
///     nv12     Y      width × height    CbCr  2·cw × ch
///     p010     Y    2·width × height    CbCr  4·cw × ch
///     i420     Y      width × height    Cb      cw × ch        Cr  cw × ch
///
/// (`CbCr` is one plane of interleaved pairs; `p010` samples are 2 bytes.)
public struct FrameLayout: Sendable, Hashable, CustomStringConvertible {
    /// The largest width or height accepted (larger than any video format in use, small enough that sizes never
    /// overflow).
    public static let maximumDimension = 1 << 15

    /// The pixel format, which fixes the number and shape of the planes.
    public let format: PixelFormat
    /// The width in pixels (luma samples), in `1...maximumDimension`.
    public let width: Int
    /// The height in pixels (luma rows), in `1...maximumDimension`.
    public let height: Int
    /// Bytes of all planes together.
    public let byteCount: Int
    private let planes: (PlaneLayout, PlaneLayout, PlaneLayout)

    /// Makes the packed layout of a `width × height` frame of `format`.
    ///
    /// - Throws: ``FrameError/invalidDimensions(width:height:)`` when a side is not in
    ///   `1...FrameLayout.maximumDimension`.
    public init(format: PixelFormat, width: Int, height: Int) throws(FrameError) {
        guard (1...Self.maximumDimension).contains(width), (1...Self.maximumDimension).contains(height) else {
            throw .invalidDimensions(width: width, height: height)
        }
        self.format = format
        self.width = width
        self.height = height
        let chromaWidth = (width + 1) / 2
        let chromaHeight = (height + 1) / 2
        let empty = PlaneLayout(offset: 0, bytesPerRow: 0, rows: 0)
        switch format {
        case .gray8:
            let y = PlaneLayout(offset: 0, bytesPerRow: width, rows: height)
            planes = (y, empty, empty)
        case .bgra:
            let p = PlaneLayout(offset: 0, bytesPerRow: width * 4, rows: height)
            planes = (p, empty, empty)
        case .nv12:
            let y = PlaneLayout(offset: 0, bytesPerRow: width, rows: height)
            let uv = PlaneLayout(offset: y.byteCount, bytesPerRow: chromaWidth * 2, rows: chromaHeight)
            planes = (y, uv, empty)
        case .p010:
            let y = PlaneLayout(offset: 0, bytesPerRow: width * 2, rows: height)
            let uv = PlaneLayout(offset: y.byteCount, bytesPerRow: chromaWidth * 4, rows: chromaHeight)
            planes = (y, uv, empty)
        case .i420:
            let y = PlaneLayout(offset: 0, bytesPerRow: width, rows: height)
            let u = PlaneLayout(offset: y.byteCount, bytesPerRow: chromaWidth, rows: chromaHeight)
            let v = PlaneLayout(offset: u.offset + u.byteCount, bytesPerRow: chromaWidth, rows: chromaHeight)
            planes = (y, u, v)
        }
        let last = format.planeCount == 1 ? planes.0 : format.planeCount == 2 ? planes.1 : planes.2
        byteCount = last.offset + last.byteCount
    }

    /// The number of planes (`format.planeCount`).
    public var planeCount: Int { format.planeCount }

    /// The layout of plane `index`, which must be below `planeCount`.
    public func plane(_ index: Int) -> PlaneLayout {
        precondition(index >= 0 && index < planeCount, "plane \(index) out of range for \(format)")
        switch index {
        case 0: return planes.0
        case 1: return planes.1
        default: return planes.2
        }
    }

    /// The format and size, such as `nv12 1920x1080`.
    public var description: String { "\(format) \(width)x\(height)" }

    /// Whether two layouts have the same format, width and height (the planes follow from those).
    public static func == (lhs: FrameLayout, rhs: FrameLayout) -> Bool {
        lhs.format == rhs.format && lhs.width == rhs.width && lhs.height == rhs.height
    }

    /// Hashes the format, width and height, the parts ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(format)
        hasher.combine(width)
        hasher.combine(height)
    }
}
