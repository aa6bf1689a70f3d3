/// Everything about a frame except its pixels: when it was presented, when it was captured, and its colour.
///
/// Deliberately nothing of a capture container: the rewind buffer keeps planes, timestamps and colour only.
public struct FrameInfo: Sendable, Hashable {
    /// The presentation time, from the frame itself (never a clock read while processing).
    public var pts: FrameTime
    /// `pts` in integer nanoseconds, the unit of every index and comparison in the store.
    public var ptsNanoseconds: Int64
    /// Wall-clock capture time, Unix epoch nanoseconds.
    public var wallNanoseconds: Int64
    /// The frame's colour matrix and range.
    public var color: ColorInfo

    /// The latest pts a recording puts a frame at on its stream clock: 100 years (of 365.25 days), far inside
    /// 64-bit nanoseconds (about 292 years), so that a gap's end, a recording continuing the stream, and recorder
    /// time computed from it cannot overflow. A frame past it ends its input (``FrameError/ptsOutOfRange(_:)``).
    public static let longestStreamTimeNanoseconds: Int64 = 3_155_760_000 * 1_000_000_000

    /// Makes a frame's description and computes ``ptsNanoseconds`` from `pts`.
    ///
    /// - Parameters:
    ///   - pts: the presentation time on the stream clock.
    ///   - wallNanoseconds: the wall-clock capture time, Unix epoch nanoseconds.
    ///   - color: the frame's colour matrix and range.
    /// - Throws: ``FrameError/ptsOutOfRange(_:)`` when `pts` does not fit in Int64 nanoseconds.
    public init(pts: FrameTime, wallNanoseconds: Int64, color: ColorInfo) throws(FrameError) {
        guard let ns = pts.nanoseconds else { throw .ptsOutOfRange(pts) }
        self.pts = pts
        self.ptsNanoseconds = ns
        self.wallNanoseconds = wallNanoseconds
        self.color = color
    }
}

/// What a stream is: the layout of its frames, its nominal frame duration and colour.
///
/// Written into segment headers and export headers. Frames may still arrive late, early or not at all: the nominal
/// rate is what a constant-rate export uses and what gap detection compares against.
public struct StreamDescription: Sendable, Hashable, CustomStringConvertible {
    /// The format, size and plane layout every frame of the stream has.
    public var layout: FrameLayout
    /// The nominal time between frames (e.g. 1/60 s); frame-rate changes are recorded as gaps, not here.
    public var frameDuration: FrameTime
    /// The colour matrix and range of the stream, as written into headers.
    public var color: ColorInfo
    /// Where the chroma samples sit (4:2:0 formats); ``ChromaSiting/unspecified`` when the source did not say.
    public var chromaSiting: ChromaSiting
    /// The shape of a pixel; ``PixelAspect/unknown`` when the source did not say.
    public var pixelAspect: PixelAspect

    /// Describes a stream.
    ///
    /// - Parameters:
    ///   - layout: the layout of every frame.
    ///   - frameDuration: the nominal time between frames; must be positive.
    ///   - color: the stream's colour matrix and range.
    ///   - chromaSiting: where the chroma samples sit, if the source said.
    ///   - pixelAspect: the shape of a pixel, if the source said.
    public init(
        layout: FrameLayout, frameDuration: FrameTime, color: ColorInfo, chromaSiting: ChromaSiting = .unspecified,
        pixelAspect: PixelAspect = .unknown
    ) {
        precondition(frameDuration.value > 0, "frame duration must be positive")
        self.layout = layout
        self.frameDuration = frameDuration
        self.color = color
        self.chromaSiting = chromaSiting
        self.pixelAspect = pixelAspect
    }

    /// Whether frames described by `other` belong to this stream: the same layout, frame duration and colour, and
    /// the same chroma siting and pixel aspect where both say (a store recorded by a build that kept neither, or an
    /// input that does not say, agrees with one that does).
    public func agrees(with other: StreamDescription) -> Bool {
        layout == other.layout && frameDuration == other.frameDuration && color == other.color
            && (chromaSiting == other.chromaSiting || chromaSiting == .unspecified
                || other.chromaSiting == .unspecified)
            && (pixelAspect == other.pixelAspect || !pixelAspect.isKnown || !other.pixelAspect.isKnown)
    }

    /// This description with the chroma siting and pixel aspect it does not know taken from `other` (which should
    /// ``agrees(with:)`` it).
    public func filled(from other: StreamDescription) -> StreamDescription {
        var filled = self
        if filled.chromaSiting == .unspecified { filled.chromaSiting = other.chromaSiting }
        if !filled.pixelAspect.isKnown { filled.pixelAspect = other.pixelAspect }
        return filled
    }

    /// The layout, frame duration and colour, then what is known of siting and aspect: `nv12 1920x1080 at 1/60 s/frame
    /// bt709/video (chroma left, pixels 1:1)`.
    public var description: String {
        let shape = shapeDescription
        return "\(layout) at \(frameDuration) s/frame \(color)" + (shape.isEmpty ? "" : " (\(shape))")
    }

    /// The chroma siting and pixel aspect in words, for reports: `chroma left, pixels 10:11`; empty when neither is
    /// known.
    public var shapeDescription: String {
        var parts: [String] = []
        if chromaSiting != .unspecified { parts.append("chroma \(chromaSiting.name)") }
        if pixelAspect.isKnown { parts.append("pixels \(pixelAspect)") }
        return parts.joined(separator: ", ")
    }

    /// The whole nanoseconds from one frame to the next, rounded up: with 1/30 s frames, never a nanosecond before
    /// the frame grid (19.966666666 s + 33333334 ns = 20 s), so a recording that continues a frame after another's
    /// last is found by `--from 20s`. At least 1.
    public var frameStepNanoseconds: Int64 {
        let floor = frameDuration.nanoseconds ?? 1
        return max(1, FrameTime(nanoseconds: floor) == frameDuration ? floor : floor + 1)
    }
}
