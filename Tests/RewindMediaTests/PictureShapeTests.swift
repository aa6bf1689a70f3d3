import Foundation
import RewindCore
import RewindMedia
import RewindSystem
import RewindTesting
import Testing

/// A stream's chroma siting and pixel aspect reach every export as ffprobe reads them.
@Suite(.timeLimit(.minutes(45))) struct PictureShapeTests {
    /// Two frames of a 96x54 synthetic stream with `siting` and `aspect`.
    func frames(_ format: PixelFormat, siting: ChromaSiting, aspect: PixelAspect) throws -> (
        StreamDescription, [(info: FrameInfo, bytes: [UInt8])]
    ) {
        let camera = SyntheticCamera(
            layout: try FrameLayout(format: format, width: 96, height: 54),
            frameDuration: FrameTime(value: 1, timescale: 25))
        var stream = camera.stream
        stream.chromaSiting = siting
        stream.pixelAspect = aspect
        let frames = try (0..<2).map { index in
            (info: try info(ns: Int64(index) * 40_000_000), bytes: try camera.frameBytes(at: Int64(index)))
        }
        return (stream, frames)
    }

    /// ffprobe's `chroma_location` and `sample_aspect_ratio` of the file at `path`.
    func probed(_ path: String) throws -> [String] {
        let rows = try ExternalTools.probe(path, ["-show_entries", "stream=chroma_location,sample_aspect_ratio"])
        return rows.first ?? []
    }

    @Test(arguments: [
        (ChromaSiting.left, "left"), (.topLeft, "topleft"), (.center, "center"),
    ])
    func everyExportSaysWhereChromaSitsAndWhatShapePixelsAre(siting: ChromaSiting, name: String) throws {
        let aspect = try #require(PixelAspect(numerator: 10, denominator: 11))
        let (stream, frames) = try frames(.nv12, siting: siting, aspect: aspect)
        let y4m = TemporaryDirectory.shared.file("shape-\(name).y4m")
        var y4mWriter = try Y4MWriter(stream: stream, destination: .path(y4m))
        try writeFrames(frames, layout: stream.layout, to: &y4mWriter)
        _ = try y4mWriter.finish()
        let mkv = TemporaryDirectory.shared.file("shape-\(name).mkv")
        var mkvWriter = try MatroskaWriter(stream: stream, destination: .path(mkv))
        try writeFrames(frames, layout: stream.layout, to: &mkvWriter)
        _ = try mkvWriter.finish()
        let mp4 = TemporaryDirectory.shared.file("shape-\(name).mp4")
        var mp4Writer = try MP4Exporter(stream: stream, destination: .path(mp4))
        try writeFrames(frames, layout: stream.layout, to: &mp4Writer)
        _ = try mp4Writer.finish()
        for path in [y4m, mkv, mp4] {
            #expect(try probed(path) == ["10:11", name], "\(path)")
        }
    }

    /// A stream that does not say leaves the exports unsaid: YUV4MPEG2 writes `C420jpeg`, its default, as ffmpeg
    /// does, and `A0:0`; Matroska writes no siting and no display size (which Matroska reads as the pixel size:
    /// square). A synthetic stream is square.
    @Test func aStreamThatDoesNotSayLeavesItUnsaid() throws {
        let (stream, frames) = try frames(.i420, siting: .unspecified, aspect: .unknown)
        let y4m = TemporaryDirectory.shared.file("shape-unsaid.y4m")
        var y4mWriter = try Y4MWriter(stream: stream, destination: .path(y4m))
        try writeFrames(frames, layout: stream.layout, to: &y4mWriter)
        _ = try y4mWriter.finish()
        let header = try String(decoding: Data(contentsOf: URL(fileURLWithPath: y4m)).prefix(80), as: UTF8.self)
        #expect(header.hasPrefix("YUV4MPEG2 W96 H54 F25:1 Ip A0:0 C420jpeg "), "\(header)")
        #expect(try probed(y4m) == ["N/A", "center"])
        let mkv = TemporaryDirectory.shared.file("shape-unsaid.mkv")
        var mkvWriter = try MatroskaWriter(stream: stream, destination: .path(mkv))
        try writeFrames(frames, layout: stream.layout, to: &mkvWriter)
        _ = try mkvWriter.finish()
        let unsaid = try probed(mkv)
        #expect(unsaid == ["1:1", "unspecified"], "\(unsaid)")
        let (square, squareFrames) = try self.frames(.i420, siting: .unspecified, aspect: .square)
        let squared = TemporaryDirectory.shared.file("shape-square.mkv")
        var squareWriter = try MatroskaWriter(stream: square, destination: .path(squared))
        try writeFrames(squareFrames, layout: square.layout, to: &squareWriter)
        _ = try squareWriter.finish()
        #expect(try probed(squared) == ["1:1", "unspecified"])
        #expect(
            SyntheticCamera(layout: square.layout, frameDuration: square.frameDuration).stream.pixelAspect == .square)
    }
}
