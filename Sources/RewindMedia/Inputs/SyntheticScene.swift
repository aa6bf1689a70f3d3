import RewindCore

/// The scene a synthetic camera looks at, pre-rendered in the stream's pixel format, and the per-frame drawing.
final class SyntheticScene: Sendable {
    let layout: FrameLayout
    let sceneLayout: FrameLayout
    let margin: Int
    let pixels: [UInt8]
    /// Per plane, the bytes of one pixel of the moving object (1 to 4 bytes).
    let objectPixel: [[UInt8]]
    /// Noise values in 8-bit code values, indexed with a per-row random start; empty when clean.
    let noiseTable: [Int8]
    let seed: UInt64

    init(layout: FrameLayout, margin: Int, seed: UInt64, noise: Double) {
        self.layout = layout
        self.margin = margin
        self.seed = seed
        let sceneLayout = try! FrameLayout(
            format: layout.format, width: layout.width + margin,
            height: Self.sceneHeight(layout: layout, margin: margin))
        self.sceneLayout = sceneLayout
        self.pixels = Self.renderScene(sceneLayout, seed: seed)
        let object = (y: 200, cb: 80, cr: 180)
        self.objectPixel = (0..<layout.planeCount).map { Self.pixelBytes(object, format: layout.format, plane: $0) }
        self.noiseTable = noise > 0 ? Self.makeNoiseTable(sigma: noise, seed: seed) : []
    }

    /// The most bytes a scene takes: a larger frame's view wraps around a scene shorter than the frame.
    static let maximumSceneBytes = 4 << 20

    /// The scene's height in rows: `margin` more than the frame's, or, when that scene would take more than
    /// ``maximumSceneBytes``, as many rows as fit (an even number, at least `2 × margin`); the view then wraps
    /// around vertically. Rows repeat no closer than that many rows apart, far beyond LZ4's 64 KiB window.
    static func sceneHeight(layout: FrameLayout, margin: Int) -> Int {
        let full = layout.height + margin
        let fullLayout = try! FrameLayout(format: layout.format, width: layout.width + margin, height: full)
        guard fullLayout.byteCount > maximumSceneBytes else { return full }
        let rows = Int(Double(full) * Double(maximumSceneBytes) / Double(fullLayout.byteCount)) & ~1
        return max(rows, 2 * margin)
    }

    /// Draws frame `index` (all but its mark) into `buffer`.
    func render(index: Int64, into buffer: UnsafeMutableRawBufferPointer) {
        // Slow pan: 2 pixels every 4 frames horizontally, every 8 vertically, bouncing between 0 and margin.
        let panX = 2 * Self.bounce(Int(index / 4), period: margin / 2)
        let panY = 2 * Self.bounce(Int(index / 8), period: margin / 2)
        let objectWidth = max(layout.width / 6, 2)
        let objectHeight = max(layout.height / 6, 2)
        let objectX = Self.bounce(Int(index) * 3, period: layout.width - objectWidth)
        let objectY = Self.bounce(Int(index) * 2, period: layout.height - objectHeight)
        pixels.withUnsafeBytes { source in
            for planeIndex in 0..<layout.planeCount {
                let plane = layout.plane(planeIndex)
                let scenePlane = sceneLayout.plane(planeIndex)
                let sub = planeIndex > 0 && layout.format.isChromaSubsampled ? 2 : 1
                let pixelBytes = objectPixel[planeIndex].count
                let start = scenePlane.offset + (panX / sub) * pixelBytes
                var sceneRow = (panY / sub) % scenePlane.rows
                for row in 0..<plane.rows {
                    (buffer.baseAddress! + plane.offset + row * plane.bytesPerRow).copyMemory(
                        from: source.baseAddress! + start + sceneRow * scenePlane.bytesPerRow,
                        byteCount: plane.bytesPerRow)
                    sceneRow += 1
                    if sceneRow == scenePlane.rows { sceneRow = 0 }
                }
                // The moving object: a solid rectangle.
                let pattern = objectPixel[planeIndex]
                let x0 = objectX / sub
                let x1 = min((objectX + objectWidth) / sub, plane.bytesPerRow / pixelBytes)
                let y1 = min((objectY + objectHeight) / sub, plane.rows)
                for row in (objectY / sub)..<y1 {
                    let rowStart = buffer.baseAddress! + plane.offset + row * plane.bytesPerRow
                    for x in x0..<x1 {
                        for b in 0..<pixelBytes {
                            rowStart.storeBytes(of: pattern[b], toByteOffset: x * pixelBytes + b, as: UInt8.self)
                        }
                    }
                }
            }
        }
        if !noiseTable.isEmpty { addNoise(index: index, into: buffer) }
    }

    /// Adds noise to every sample. Noise is limited to ±15 code values and the scene's YUV values to 16…240, so
    /// YUV samples never clip and a plain wrapping add suffices (it vectorizes); BGRA clamps.
    private func addNoise(index: Int64, into buffer: UnsafeMutableRawBufferPointer) {
        let format = layout.format
        noiseTable.withUnsafeBufferPointer { table in
            for planeIndex in 0..<layout.planeCount {
                let plane = layout.plane(planeIndex)
                let samples = format == .p010 ? plane.bytesPerRow / 2 : plane.bytesPerRow
                precondition(samples < table.count, "rows longer than the noise table")
                for row in 0..<plane.rows {
                    var state = seed &+ UInt64(index) &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(planeIndex << 20 | row)
                    let start = Int(SyntheticScene.splitMix(&state) % UInt64(table.count - samples))
                    let noise = UnsafeBufferPointer(rebasing: table[start..<(start + samples)])
                    let rowStart = buffer.baseAddress! + plane.offset + row * plane.bytesPerRow
                    switch format {
                    case .p010:
                        let values = UnsafeMutableBufferPointer(
                            start: rowStart.assumingMemoryBound(to: UInt16.self), count: samples)
                        for x in 0..<samples { values[x] &+= UInt16(bitPattern: Int16(noise[x]) << 8) }
                    case .bgra:
                        let bytes = UnsafeMutableBufferPointer(
                            start: rowStart.assumingMemoryBound(to: UInt8.self), count: samples)
                        for x in 0..<samples where x & 3 != 3 {
                            bytes[x] = UInt8(clamping: Int(bytes[x]) + Int(noise[x]))
                        }
                    case .nv12, .i420, .gray8:
                        let bytes = UnsafeMutableBufferPointer(
                            start: rowStart.assumingMemoryBound(to: UInt8.self), count: samples)
                        for x in 0..<samples { bytes[x] &+= UInt8(bitPattern: noise[x]) }
                    }
                }
            }
        }
    }

    /// `value` folded into `0...period`, going up then down.
    static func bounce(_ value: Int, period: Int) -> Int {
        guard period > 0 else { return 0 }
        let phase = value % (2 * period)
        return phase <= period ? phase : 2 * period - phase
    }

    static func splitMix(_ state: inout UInt64) -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    private static func hash(_ x: Int, _ y: Int, _ seed: UInt64) -> UInt64 {
        var state = seed ^ (UInt64(truncatingIfNeeded: x) &* 0x9E37_79B1) ^ (UInt64(truncatingIfNeeded: y) << 32)
        return splitMix(&state)
    }

    /// Roughly Gaussian noise (sum of four uniforms) with standard deviation `sigma`, cut at ±15.
    private static func makeNoiseTable(sigma: Double, seed: UInt64) -> [Int8] {
        var state = seed ^ 0x5EED
        return (0..<65536).map { _ in
            let r = splitMix(&state)
            var sum = 0.0
            for k in 0..<4 { sum += Double((r >> (16 * UInt64(k))) & 0xFFFF) / 65535.0 - 0.5 }
            // The sum of four uniforms on ±0.5 has standard deviation √(4/12).
            return Int8(min(max(Int((sum / (4.0 / 12.0).squareRoot() * sigma).rounded()), -15), 15))
        }
    }

    /// The scene's colour at pixel (x, y) of a `width × height` scene, limited-range YCbCr.
    private static func sample(_ x: Int, _ y: Int, width: Int, height: Int, seed: UInt64) -> (y: Int, cb: Int, cr: Int)
    {
        let tile = hash(x >> 6, y >> 6, seed)
        var luma = 60 + x * 100 / width + y * 40 / height
        var cb = 128 + x * 60 / width - 30 + Int(tile >> 16 & 31) - 16
        let cr = 128 + y * 60 / height - 30 + Int(tile >> 21 & 31) - 16
        luma += Int(tile & 63) - 32
        switch tile >> 8 & 3 {
        case 0:
            luma += ((x + y) >> 3) & 1 == 0 ? 36 : -12  // diagonal stripes
        case 1:
            let dx = (x & 63) - 32
            let dy = (y & 63) - 32
            if dx * dx + dy * dy < 22 * 22 {  // a disc
                luma += 45
                cb -= 20
            }
        default:
            break
        }
        // Fine smooth texture: bilinear interpolation of random values on an 8-pixel lattice.
        let cx = x >> 3
        let cy = y >> 3
        let fx = x & 7
        let fy = y & 7
        let v00 = Int(hash(cx, cy, ~seed) & 31)
        let v10 = Int(hash(cx + 1, cy, ~seed) & 31)
        let v01 = Int(hash(cx, cy + 1, ~seed) & 31)
        let v11 = Int(hash(cx + 1, cy + 1, ~seed) & 31)
        let top = v00 * (8 - fx) + v10 * fx
        let bottom = v01 * (8 - fx) + v11 * fx
        luma += (top * (8 - fy) + bottom * fy) / 64 - 16
        return (min(max(luma, 16), 235), min(max(cb, 16), 240), min(max(cr, 16), 240))
    }

    /// The bytes of one pixel of plane `plane` of `format` for colour `c`.
    static func pixelBytes(_ c: (y: Int, cb: Int, cr: Int), format: PixelFormat, plane: Int) -> [UInt8] {
        switch (format, plane) {
        case (.gray8, _), (.nv12, 0), (.i420, 0): return [UInt8(c.y)]
        case (.i420, 1): return [UInt8(c.cb)]
        case (.i420, _): return [UInt8(c.cr)]
        case (.nv12, _): return [UInt8(c.cb), UInt8(c.cr)]
        case (.p010, 0):
            let y = UInt16(c.y) << 8
            return [UInt8(y & 0xFF), UInt8(y >> 8)]
        case (.p010, _):
            let cb = UInt16(c.cb) << 8
            let cr = UInt16(c.cr) << 8
            return [UInt8(cb & 0xFF), UInt8(cb >> 8), UInt8(cr & 0xFF), UInt8(cr >> 8)]
        case (.bgra, _):
            // BT.709 limited range to full-range RGB, 10-bit fixed point.
            let y = 1192 * (c.y - 16)
            let r = (y + 1836 * (c.cr - 128)) >> 10
            let g = (y - 218 * (c.cb - 128) - 546 * (c.cr - 128)) >> 10
            let b = (y + 2163 * (c.cb - 128)) >> 10
            return [UInt8(clamping: b), UInt8(clamping: g), UInt8(clamping: r), 255]
        }
    }

    private static func renderScene(_ layout: FrameLayout, seed: UInt64) -> [UInt8] {
        var pixels = [UInt8](repeating: 0, count: layout.byteCount)
        let width = layout.width
        let height = layout.height
        for planeIndex in 0..<layout.planeCount {
            let plane = layout.plane(planeIndex)
            let sub = planeIndex > 0 && layout.format.isChromaSubsampled ? 2 : 1
            let pixelCount = pixelBytes((16, 128, 128), format: layout.format, plane: planeIndex).count
            for row in 0..<plane.rows {
                for x in 0..<(plane.bytesPerRow / pixelCount) {
                    let c = sample(x * sub, row * sub, width: width, height: height, seed: seed)
                    let bytes = pixelBytes(c, format: layout.format, plane: planeIndex)
                    let at = plane.offset + row * plane.bytesPerRow + x * pixelCount
                    for k in 0..<pixelCount { pixels[at + k] = bytes[k] }
                }
            }
        }
        return pixels
    }
}
