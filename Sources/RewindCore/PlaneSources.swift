/// One caller-owned plane to copy from: its first byte, its size and its row stride.
public struct PlaneSource {
    /// The first byte of the plane's first row.
    public var base: UnsafeRawPointer
    /// Bytes readable from `base`.
    public var byteCount: Int
    /// Distance in bytes between the starts of two rows; at least the plane's packed row length.
    public var bytesPerRow: Int

    /// Describes a plane in caller-owned memory; nothing is copied or checked until the frame is appended.
    ///
    /// - Parameters:
    ///   - base: the first byte of the first row; it must stay readable until the append returns.
    ///   - byteCount: bytes readable from `base`; at least `bytesPerRow × (rows − 1)` plus the packed row length.
    ///   - bytesPerRow: the row stride in bytes, padding included.
    public init(base: UnsafeRawPointer, byteCount: Int, bytesPerRow: Int) {
        self.base = base
        self.byteCount = byteCount
        self.bytesPerRow = bytesPerRow
    }
}

/// Up to three caller-owned planes of one frame, held inline (no array, no allocation).
///
/// Rows may be padded (`bytesPerRow` larger than the packed row, as capture buffers often are); the copy into a
/// pooled slab packs them. A plane may have more bytes than it needs, never fewer.
///
/// One plane, copied row by row when its stride differs from the packed row (`plane` is the layout's
/// ``PlaneLayout``):
///
///     caller's plane                                 slab, from plane.offset
///     base ─▶ | row 0               | padding |  ─▶  | row 0               |
///             | row 1               | padding |      | row 1               |
///             | …                   |                | …                   |
///             | row plane.rows − 1  |                | row plane.rows − 1  |
///              ◀ plane.bytesPerRow ▶                  ◀ plane.bytesPerRow ▶
///             ◀───────── bytesPerRow ─────────▶
///
///     bytes needed = bytesPerRow × (plane.rows − 1) + plane.bytesPerRow ≤ byteCount
///
/// The last row needs no padding after it. When `bytesPerRow` equals the packed row, the plane is copied in one
/// piece.
public struct PlaneSources {
    /// How many planes were given.
    public let count: Int
    private let planes: (PlaneSource, PlaneSource, PlaneSource)

    /// One plane (`bgra`, `gray8`).
    public init(_ plane0: PlaneSource) {
        count = 1
        planes = (plane0, plane0, plane0)
    }

    /// Two planes (`nv12`, `p010`: luma, then interleaved chroma).
    public init(_ plane0: PlaneSource, _ plane1: PlaneSource) {
        count = 2
        planes = (plane0, plane1, plane1)
    }

    /// Three planes (`i420`: Y, Cb, Cr).
    public init(_ plane0: PlaneSource, _ plane1: PlaneSource, _ plane2: PlaneSource) {
        count = 3
        planes = (plane0, plane1, plane2)
    }

    /// The plane at `index`, which must be below `count`.
    public subscript(index: Int) -> PlaneSource {
        precondition(index >= 0 && index < count, "plane \(index) out of range 0..<\(count)")
        switch index {
        case 0: return planes.0
        case 1: return planes.1
        default: return planes.2
        }
    }

    /// Checks that these planes can fill a frame of `layout`.
    ///
    /// - Throws: ``FrameError/planeCountMismatch(expected:actual:)`` when the count differs from the format's;
    ///   ``FrameError/planeSizeMismatch(plane:expected:actual:)`` when a row stride is shorter than the packed row
    ///   (expected and actual are row lengths) or a plane has too few bytes for its rows (expected and actual are
    ///   byte counts).
    public func validate(for layout: FrameLayout) throws(FrameError) {
        guard count == layout.planeCount else {
            throw .planeCountMismatch(expected: layout.planeCount, actual: count)
        }
        for index in 0..<count {
            let source = self[index]
            let plane = layout.plane(index)
            guard source.bytesPerRow >= plane.bytesPerRow else {
                throw .planeSizeMismatch(plane: index, expected: plane.bytesPerRow, actual: source.bytesPerRow)
            }
            let needed = source.bytesPerRow * (plane.rows - 1) + plane.bytesPerRow
            guard source.byteCount >= needed else {
                throw .planeSizeMismatch(plane: index, expected: needed, actual: source.byteCount)
            }
        }
    }

    /// Copies every plane, packed, into `destination` (`layout.byteCount` bytes). Planes must be valid for
    /// `layout` (see ``validate(for:)``).
    func copy(into destination: UnsafeMutableRawPointer, layout: FrameLayout) {
        for index in 0..<count {
            let source = self[index]
            let plane = layout.plane(index)
            let target = destination + plane.offset
            if source.bytesPerRow == plane.bytesPerRow {
                target.copyMemory(from: source.base, byteCount: plane.byteCount)
            } else {
                for row in 0..<plane.rows {
                    (target + row * plane.bytesPerRow).copyMemory(
                        from: source.base + row * source.bytesPerRow, byteCount: plane.bytesPerRow)
                }
            }
        }
    }
}
