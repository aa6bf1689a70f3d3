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
    /// The narrowest frame that can carry the mark, in pixels: one pixel per bit of a 64-bit mark row.
    public static let minimumWidth = 64
    /// The shortest frame that can carry the mark, in rows: the mark takes the first two rows of plane 0.
    public static let minimumHeight = 2
    /// The longest side of a synthetic frame: the scene it pans across is ``margin`` larger, and a frame's side is
    /// at most ``FrameLayout/maximumDimension``.
    public static let maximumSide = FrameLayout.maximumDimension - margin

    /// Why a synthetic camera cannot make `width`×`height` frames, or nil when it can.
    public static func sizeProblem(width: Int, height: Int) -> String? {
        if width < minimumWidth || height < minimumHeight {
            return "synthetic frames must be at least \(minimumWidth)x\(minimumHeight)"
        }
        if width > maximumSide || height > maximumSide {
            return "synthetic frames must be at most \(maximumSide)x\(maximumSide) (the scene they pan across is "
                + "\(margin) pixels larger each way, and a side is at most \(FrameLayout.maximumDimension))"
        }
        return nil
    }

    /// The layout, nominal frame duration and colour of every frame; frame `n` has pts `n × frameDuration`.
    public let stream: StreamDescription
    /// Standard deviation of the sensor noise, in 8-bit code values; 0 for none.
    public let noise: Double
    /// Varies the scene's content and the noise; the same seed and parameters give the same bytes.
    public let seed: UInt64
    /// Wall-clock time (Unix ns) of frame 0; frame `n` is captured at this plus its pts. Unless given at creation,
    /// the time the first frame is read (``readFrame(into:)``), so a camera made before its recording starts
    /// still stamps its frames with the time they were captured.
    public private(set) var startWallNanoseconds: Int64
    private var startsAtFirstRead: Bool
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
    ///   - startWallNanoseconds: wall-clock time of frame 0, Unix ns. Defaults to the time the first frame is read
    ///     (now, for frames rendered with ``frame(at:into:)`` before that).
    ///   - frameCount: the number of frames before the end, or nil for an endless camera.
    /// - Complexity: O(width × height) once, to render the scene.
    public init(
        layout: FrameLayout, frameDuration: FrameTime, color: ColorInfo = .bt709Video, noise: Double = 0,
        seed: UInt64 = 1, startWallNanoseconds: Int64? = nil, frameCount: Int? = nil
    ) {
        if let problem = Self.sizeProblem(width: layout.width, height: layout.height) { preconditionFailure(problem) }
        precondition(noise >= 0 && noise <= 8, "noise must be 0…8 code values")
        precondition((frameCount ?? 0) >= 0, "frame count must not be negative")
        self.stream = StreamDescription(
            layout: layout, frameDuration: frameDuration, color: color, pixelAspect: .square)
        self.noise = noise
        self.seed = seed
        self.startWallNanoseconds = startWallNanoseconds ?? Y4MReader.nowNanoseconds()
        self.startsAtFirstRead = startWallNanoseconds == nil
        self.frameCount = frameCount
        self.scene = SyntheticScene(layout: layout, margin: Self.margin, seed: seed, noise: noise)
    }

    /// Renders the next frame into `buffer`.
    ///
    /// - Returns: the frame's timing and colour, or nil after `frameCount` frames.
    /// - Complexity: O(frame bytes): row copies, the checksum and, with noise, one pass over the pixels.
    public mutating func readFrame(into buffer: UnsafeMutableRawBufferPointer) throws -> FrameInfo? {
        if let frameCount, nextIndex >= Int64(frameCount) { return nil }
        if startsAtFirstRead {
            startWallNanoseconds = Y4MReader.nowNanoseconds()
            startsAtFirstRead = false
        }
        let info = try frame(at: nextIndex, into: buffer)
        nextIndex += 1
        return info
    }

    /// False after `frameCount` frames.
    public mutating func nextFrameComes() throws -> Bool { frameCount.map { nextIndex < Int64($0) } ?? true }

    /// The next frame's pts: its index times the frame duration.
    public var nextPTS: Int64? { FrameTime.frame(nextIndex, duration: stream.frameDuration)?.nanoseconds }

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
