import RewindCapture
import RewindCore
import RewindMedia

/// Produces synthetic camera frames and appends them by copy, like a capture callback.
public struct CameraFeed: Sendable {
    /// The camera that renders the frames.
    public let camera: SyntheticCamera
    var buffer: [UInt8]
    /// The index of the next frame.
    public var index: Int64 = 0

    /// A camera of `width`×`height` NV12 frames at `fps`.
    public init(width: Int = 160, height: Int = 96, fps: Int32 = 60) throws {
        let layout = try FrameLayout(format: .nv12, width: width, height: height)
        camera = SyntheticCamera(
            layout: layout, frameDuration: FrameTime(value: 1, timescale: fps), startWallNanoseconds: 1_000)
        buffer = [UInt8](repeating: 0, count: layout.byteCount)
    }

    /// The stream the camera describes.
    public var stream: StreamDescription { camera.stream }

    /// The pts of frame `index`, nanoseconds.
    public func pts(_ index: Int64) -> Int64 {
        FrameTime.frame(index, duration: camera.stream.frameDuration)!.nanoseconds!
    }

    /// Appends the next frame to the recorder's first stream (skipping `skip` frame times first, as a camera that
    /// slowed down).
    public mutating func appendNext(to recorder: Recorder, skip: Int64 = 0) throws -> AppendOutcome {
        try appendNext(to: recorder.streams[0], skip: skip)
    }

    /// Appends the next frame to `stream` (skipping `skip` frame times first, as a camera that slowed down).
    public mutating func appendNext(to stream: RecorderStream, skip: Int64 = 0) throws -> AppendOutcome {
        index += skip
        let layout = camera.stream.layout
        let info = try buffer.withUnsafeMutableBytes { try camera.frame(at: index, into: $0) }
        index += 1
        return try buffer.withUnsafeBytes { bytes in
            let luma = layout.plane(0)
            let chroma = layout.plane(1)
            let planes = PlaneSources(
                PlaneSource(base: bytes.baseAddress!, byteCount: luma.byteCount, bytesPerRow: luma.bytesPerRow),
                PlaneSource(
                    base: bytes.baseAddress! + chroma.offset, byteCount: chroma.byteCount,
                    bytesPerRow: chroma.bytesPerRow))
            return try stream.append(copying: planes, info: info)
        }
    }
}
