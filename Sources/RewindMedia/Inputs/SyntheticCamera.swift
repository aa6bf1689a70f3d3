import RewindCore

/// A deterministic, camera-like frame source: a textured scene panning slowly, an object moving across it, optional
/// sensor noise, and a verifiable mark in every frame.
///
/// Same parameters, same bytes: frame `n` depends only on the parameters and `n`, so a test or a soak run can
/// regenerate any frame (``frame(at:into:)``) and ``verify(_:)`` can tell whether a stored frame is bit-exact.
///
/// Content. The scene is rendered once, in the stream's own pixel format, `margin` pixels larger than the frame in
/// each direction: smooth gradients, 64-pixel tiles of varying brightness and hue, striped and round details (hard
/// edges), and a fine smooth texture. A frame is a window into it, moved 2 pixels every 4 frames horizontally and
/// every 8 frames vertically (a slow pan), so most consecutive frames differ only where the object moves. Rows are
/// copied from the scene; no per-pixel arithmetic runs per frame except the optional noise.
///
/// Mark. The first two rows of plane 0 start with 64 cells of one pixel each, every cell holding one bit as the
/// darkest (bit 0: luma 16) or brightest (bit 1: luma 235) legal value, in every byte of the pixel:
///
///     row 0: | magic 0x5257 (16 bits) | frame index (48 bits) | rest of the row …
///     row 1: | checksum (64 bits)                             | rest of the row …
///            ^ 64 pixels (64 × 1, 2 or 4 bytes)                ^ checksummed
///
/// The checksum covers every byte of the frame outside these 128 cells, so any flipped bit fails verification:
/// a cell that is not exactly one of the two values, or a checksum that does not match.
public struct SyntheticCamera: FrameSource, Sendable {
    /// How far, in pixels, the view pans across the scene in each direction.
    public static let margin = 128
    /// The smallest frame that can carry the mark.
    public static let minimumWidth = 64
    public static let minimumHeight = 2

    public let stream: StreamDescription
    /// Standard deviation of the sensor noise, in 8-bit code values; 0 for none.
    public let noise: Double
    public let seed: UInt64
    /// Wall-clock time (Unix ns) of frame 0; frame `n` is captured at this plus its pts.
    public let startWallNanoseconds: Int64
    /// How many frames ``readFrame(into:)`` returns before reporting the end; nil for no end.
    public let frameCount: Int?
    /// The index of the next frame ``readFrame(into:)`` returns.
    public private(set) var nextIndex: Int64 = 0
    private let scene: SyntheticScene

    /// Makes a camera and renders its scene.
    ///
    /// - Parameters:
    ///   - layout: format and size of every frame; at least ``minimumWidth`` × ``minimumHeight``.
    ///   - frameDuration: the time between frames; frame `n` has pts `n × frameDuration`.
    ///   - color: the colour attachments every frame carries.
    ///   - noise: sensor noise standard deviation in 8-bit code values, 0…8 (0 = clean); cut at ±15.
    ///   - seed: varies the scene and the noise.
    ///   - startWallNanoseconds: wall-clock time of frame 0, Unix ns. Defaults to now.
    ///   - frameCount: the number of frames before the end, or nil for an endless camera.
    /// - Complexity: O(width × height) once, to render the scene.
    public init(
        layout: FrameLayout, frameDuration: FrameTime, color: ColorInfo = .bt709Video, noise: Double = 0,
        seed: UInt64 = 1, startWallNanoseconds: Int64? = nil, frameCount: Int? = nil
    ) {
        precondition(
            layout.width >= Self.minimumWidth && layout.height >= Self.minimumHeight,
            "synthetic frames must be at least \(Self.minimumWidth)x\(Self.minimumHeight) to carry the mark")
        precondition(noise >= 0 && noise <= 8, "noise must be 0…8 code values")
        precondition((frameCount ?? 0) >= 0, "frame count must not be negative")
        self.stream = StreamDescription(layout: layout, frameDuration: frameDuration, color: color)
        self.noise = noise
        self.seed = seed
        self.startWallNanoseconds = startWallNanoseconds ?? Y4MReader.nowNanoseconds()
        self.frameCount = frameCount
        self.scene = SyntheticScene(layout: layout, margin: Self.margin, seed: seed, noise: noise)
    }

    /// Renders the next frame into `buffer`.
    ///
    /// - Returns: the frame's timing and colour, or nil after `frameCount` frames.
    /// - Complexity: O(frame bytes): row copies, the checksum and, with noise, one pass over the pixels.
    public mutating func readFrame(into buffer: UnsafeMutableRawBufferPointer) throws -> FrameInfo? {
        if let frameCount, nextIndex >= Int64(frameCount) { return nil }
        let info = try frame(at: nextIndex, into: buffer)
        nextIndex += 1
        return info
    }

    /// Renders frame `index` into `buffer`: exactly the bytes ``readFrame(into:)`` produces for it.
    ///
    /// - Parameters:
    ///   - index: the frame number, `0..<2⁴⁸`.
    ///   - buffer: exactly `stream.layout.byteCount` bytes.
    /// - Returns: the frame's pts (`index × frameDuration`), wall time and colour.
    /// - Throws: ``FrameError/ptsOutOfRange(_:)`` when the pts does not fit in 64-bit nanoseconds.
    /// - Complexity: O(frame bytes).
    public func frame(at index: Int64, into buffer: UnsafeMutableRawBufferPointer) throws(FrameError) -> FrameInfo {
        precondition(buffer.count == stream.layout.byteCount, "buffer \(buffer.count) != frame \(stream.layout)")
        precondition(index >= 0 && index < 1 << 48, "frame index \(index) is outside 0..<2^48")
        guard let pts = FrameTime.frame(index, duration: stream.frameDuration) else {
            throw .ptsOutOfRange(FrameTime(value: .max, timescale: stream.frameDuration.timescale))
        }
        var info = try FrameInfo(pts: pts, wallNanoseconds: 0, color: stream.color)
        info.wallNanoseconds = startWallNanoseconds &+ info.ptsNanoseconds
        scene.render(index: index, into: buffer)
        FrameMark.write(index: index, into: buffer, layout: stream.layout)
        return info
    }

    /// Renders frame `index` into a new array (for tests and tools; the capture path uses ``frame(at:into:)``).
    public func frameBytes(at index: Int64) throws(FrameError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: stream.layout.byteCount)
        let result = bytes.withUnsafeMutableBytes { buffer in
            Result { () throws(FrameError) in try frame(at: index, into: buffer) }
        }
        _ = try result.get()
        return bytes
    }

    /// Checks a frame's mark.
    ///
    /// - Returns: the mark (the frame's index) when `frame` is bit-exact what a synthetic camera produced, nil when
    ///   the mark is missing or damaged or any byte differs.
    /// - Complexity: O(frame bytes).
    public static func verify(_ frame: FrameView) -> VerifiedMark? {
        FrameMark.read(frame.bytes, layout: frame.layout)
    }
}

/// What ``SyntheticCamera/verify(_:)`` read from an intact frame.
public struct VerifiedMark: Sendable, Hashable {
    /// The frame's index in its camera's sequence.
    public var index: Int64
    /// The checksum of the frame's pixels outside the mark.
    public var checksum: UInt64
}

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
            format: layout.format, width: layout.width + margin, height: layout.height + margin)
        self.sceneLayout = sceneLayout
        self.pixels = Self.renderScene(sceneLayout, seed: seed)
        let object = (y: 200, cb: 80, cr: 180)
        self.objectPixel = (0..<layout.planeCount).map { Self.pixelBytes(object, format: layout.format, plane: $0) }
        self.noiseTable = noise > 0 ? Self.makeNoiseTable(sigma: noise, seed: seed) : []
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
                let start = scenePlane.offset + (panY / sub) * scenePlane.bytesPerRow + (panX / sub) * pixelBytes
                for row in 0..<plane.rows {
                    (buffer.baseAddress! + plane.offset + row * plane.bytesPerRow).copyMemory(
                        from: source.baseAddress! + start + row * scenePlane.bytesPerRow, byteCount: plane.bytesPerRow)
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

/// The verifiable mark of a synthetic frame: 128 one-pixel cells in the first two rows of plane 0.
enum FrameMark {
    static let cells = 64
    static let magic: UInt64 = 0x5257

    /// Bytes per pixel of plane 0.
    static func pixelBytes(_ format: PixelFormat) -> Int {
        switch format {
        case .nv12, .i420, .gray8: 1
        case .p010: 2
        case .bgra: 4
        }
    }

    /// The bytes of one cell holding `bit`.
    @inline(__always)
    static func cell(_ bit: Bool, format: PixelFormat, byte: Int) -> UInt8 {
        switch format {
        case .p010: byte == 0 ? 0 : (bit ? 235 : 16)
        case .bgra: byte == 3 ? 255 : (bit ? 235 : 16)
        case .nv12, .i420, .gray8: bit ? 235 : 16
        }
    }

    static func write(index: Int64, into buffer: UnsafeMutableRawBufferPointer, layout: FrameLayout) {
        let rowBytes = layout.plane(0).bytesPerRow
        let unit = pixelBytes(layout.format)
        let word0 = magic << 48 | UInt64(index)
        let checksum = Self.checksum(UnsafeRawBufferPointer(buffer), layout: layout)
        for (row, word) in [(0, word0), (1, checksum)] {
            for bitIndex in 0..<cells {
                let bit = (word >> UInt64(63 - bitIndex)) & 1 == 1
                for b in 0..<unit {
                    buffer[row * rowBytes + bitIndex * unit + b] = cell(bit, format: layout.format, byte: b)
                }
            }
        }
    }

    static func read(_ bytes: UnsafeRawBufferPointer, layout: FrameLayout) -> VerifiedMark? {
        guard layout.width >= cells, layout.height >= 2, bytes.count == layout.byteCount else { return nil }
        let rowBytes = layout.plane(0).bytesPerRow
        let unit = pixelBytes(layout.format)
        var words: [UInt64] = [0, 0]
        for row in 0..<2 {
            var word: UInt64 = 0
            for bitIndex in 0..<cells {
                let at = row * rowBytes + bitIndex * unit
                let bit = bytes[at + unit - (layout.format == .bgra ? 2 : 1)] >= 128
                for b in 0..<unit where bytes[at + b] != cell(bit, format: layout.format, byte: b) { return nil }
                word = word << 1 | (bit ? 1 : 0)
            }
            words[row] = word
        }
        guard words[0] >> 48 == magic else { return nil }
        guard checksum(bytes, layout: layout) == words[1] else { return nil }
        return VerifiedMark(index: Int64(words[0] & 0xFFFF_FFFF_FFFF), checksum: words[1])
    }

    /// The checksum of every byte outside the mark cells.
    ///
    /// Each step `h = rotl((h ^ word) × odd, 29)` is a bijection of `h` for a fixed word and of the word for a fixed
    /// `h`, so changing any single word (any flipped bit) always changes the result.
    static func checksum(_ bytes: UnsafeRawBufferPointer, layout: FrameLayout) -> UInt64 {
        let rowBytes = layout.plane(0).bytesPerRow
        let markBytes = cells * pixelBytes(layout.format)
        var lanes: (UInt64, UInt64, UInt64, UInt64) = (1, 2, 3, 4)
        update(&lanes, UnsafeRawBufferPointer(rebasing: bytes[markBytes..<rowBytes]))
        update(&lanes, UnsafeRawBufferPointer(rebasing: bytes[(rowBytes + markBytes)..<(2 * rowBytes)]))
        update(&lanes, UnsafeRawBufferPointer(rebasing: bytes[(2 * rowBytes)...]))
        var h = lanes.0
        for lane in [lanes.1, lanes.2, lanes.3] { h = step(h, lane) }
        return h
    }

    @inline(__always)
    private static func step(_ h: UInt64, _ word: UInt64) -> UInt64 {
        let x = (h ^ word) &* 0x9E37_79B9_7F4A_7C15
        return x << 29 | x >> 35
    }

    /// Folds `bytes` into four independent lanes, 32 bytes at a time, then the tail into lane 0.
    private static func update(_ lanes: inout (UInt64, UInt64, UInt64, UInt64), _ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        var (a, b, c, d) = lanes
        var at = 0
        while at + 32 <= bytes.count {
            a = step(a, base.loadUnaligned(fromByteOffset: at, as: UInt64.self))
            b = step(b, base.loadUnaligned(fromByteOffset: at + 8, as: UInt64.self))
            c = step(c, base.loadUnaligned(fromByteOffset: at + 16, as: UInt64.self))
            d = step(d, base.loadUnaligned(fromByteOffset: at + 24, as: UInt64.self))
            at += 32
        }
        while at < bytes.count {
            var word: UInt64 = 0
            let take = min(8, bytes.count - at)
            for k in 0..<take { word |= UInt64(base.load(fromByteOffset: at + k, as: UInt8.self)) << UInt64(8 * k) }
            // The tail length goes into the word's top byte only when the word is short, so lengths stay distinct.
            a = step(a, take == 8 ? word : word | UInt64(take) << 56)
            at += take
        }
        lanes = (a, b, c, d)
    }
}
