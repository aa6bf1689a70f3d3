import Foundation
import RewindCore
import RewindMedia
import RewindTesting
import Testing

@Suite(.timeLimit(.minutes(15))) struct MP4ExporterTests {
    func synthetic(_ format: PixelFormat, pts: [Int64], color: ColorInfo = .bt709Video)
        throws -> (StreamDescription, [(info: FrameInfo, bytes: [UInt8])])
    {
        let camera = SyntheticCamera(
            layout: try FrameLayout(format: format, width: 160, height: 90),
            frameDuration: FrameTime(value: 1, timescale: 30), color: color)
        let frames = try pts.enumerated().map { (index, ns) in
            (info: try info(ns: ns, color: color), bytes: try camera.frameBytes(at: Int64(index)))
        }
        return (camera.stream, frames)
    }

    @Test(arguments: [PixelFormat.nv12, .i420, .bgra, .gray8])
    func everyFrameIsEncodedWithItsTiming(format: PixelFormat) throws {
        _ = try ExternalTools.locate("ffmpeg")
        let step: Int64 = 33_333_333
        let pts = (0..<60).map { Int64($0) * step }
        let (stream, frames) = try synthetic(format, pts: pts)
        let output = TemporaryDirectory.shared.file("clip.mp4")
        var exporter = try makeExporter(format: .mp4, stream: stream, destination: .path(output))
        try writeFrames(frames, layout: stream.layout, to: &exporter)
        let summary = try exporter.finish()
        #expect(summary.frames == 60 && summary.bytes > 0)
        let probed = try ExternalTools.probe(
            output, ["-count_frames", "-show_entries", "stream=codec_name,pix_fmt,nb_read_frames,duration"])
        try #require(probed.count == 1)
        #expect(probed[0][0] == "h264" && probed[0][1] == "yuv420p" && probed[0][3] == "60")
        let duration = try #require(Double(probed[0][2]))
        #expect(abs(duration - 2.0) < 0.01, "duration \(duration)")
    }

    @Test func irregularTimestampsKeepEveryFrameAndColour() throws {
        // 10 frames at 30 fps, a 1 s gap, 10 more: passthrough keeps 20 frames (no duplicates to fill the gap).
        let step: Int64 = 33_333_333
        let pts = (0..<10).map { Int64($0) * step } + (0..<10).map { 1_333_333_330 + Int64($0) * step }
        let (stream, frames) = try synthetic(.nv12, pts: pts, color: ColorInfo(matrix: .bt601, range: .full))
        let output = TemporaryDirectory.shared.file("gaps.mp4")
        var exporter = try MP4Exporter(stream: stream, destination: .path(output))
        try writeFrames(frames, layout: stream.layout, to: &exporter)
        _ = try exporter.finish()
        let probed = try ExternalTools.probe(
            output, ["-count_frames", "-show_entries", "stream=nb_read_frames,color_range,color_space"])
        #expect(probed == [["pc", "smpte170m", "20"]])
        let times = try ExternalTools.probe(output, ["-show_entries", "packet=pts_time"]).compactMap { Double($0[0]) }
        let last = try #require(times.max())
        #expect(abs(last - 1.633333) < 0.002, "last pts \(last)")
    }

    /// `lossless` decodes to exactly the frames written (framemd5 against the same frames as `.y4m`, which keeps
    /// their pixels); `fast` and `balanced` are lossy but keep every frame.
    @Test(arguments: [PixelFormat.nv12, .i420])
    func losslessIsBitExactAndEveryQualityKeepsEveryFrame(format: PixelFormat) throws {
        _ = try ExternalTools.locate("ffmpeg")
        let pts = (0..<20).map { Int64($0) * 33_333_333 }
        let (stream, frames) = try synthetic(format, pts: pts)
        let reference = TemporaryDirectory.shared.file("reference-\(format).y4m")
        var y4m = try makeExporter(format: .y4m, stream: stream, destination: .path(reference))
        try writeFrames(frames, layout: stream.layout, to: &y4m)
        _ = try y4m.finish()
        let pixelFormat = "yuv420p"
        let expected = try ExternalTools.frameMD5s(reference, pixelFormat: pixelFormat)
        #expect(expected.count == 20)
        for quality in ExportQuality.allCases {
            let output = TemporaryDirectory.shared.file("\(quality)-\(format).mp4")
            var exporter = try makeExporter(format: .mp4, stream: stream, destination: .path(output), quality: quality)
            try writeFrames(frames, layout: stream.layout, to: &exporter)
            #expect(try exporter.finish().frames == 20)
            let decoded = try ExternalTools.frameMD5s(output, pixelFormat: pixelFormat)
            #expect(decoded.count == 20, "\(quality)")
            if quality == .lossless {
                #expect(decoded == expected, "lossless \(format) decodes to the frames written")
            } else {
                #expect(decoded != expected, "\(quality) is lossy (else the test would prove nothing)")
            }
        }
    }

    @Test func missingFFmpegIsAClearError() throws {
        let (stream, _) = try synthetic(.nv12, pts: [])
        #expect {
            _ = try MP4Exporter(
                stream: stream, destination: .path(TemporaryDirectory.shared.file("x.mp4")), searchPath: "")
        } throws: {
            ($0 as? ExportError)?.reason == .missingTool("ffmpeg")
                && ($0 as? ExportError)?.message == "ffmpeg not found on PATH"
        }
    }

    @Test func ffmpegFailureCarriesItsStderr() throws {
        let (stream, frames) = try synthetic(.i420, pts: [0, 33_333_333])
        let output = "/nonexistent-directory/clip.mp4"
        #expect {
            var exporter = try MP4Exporter(stream: stream, destination: .path(output))
            try writeFrames(frames, layout: stream.layout, to: &exporter)
            _ = try exporter.finish()
        } throws: { error in
            let message = (error as? ExportError)?.message ?? ""
            return message.contains("ffmpeg failed") && message.contains("No such file or directory")
        }
    }

    @Test func formatsFollowTheFileExtension() {
        #expect(ExportFormat(path: "clip.Y4M") == .y4m)
        #expect(ExportFormat(path: "/a.b/clip.mkv") == .matroska)
        #expect(ExportFormat(path: "clip.mp4") == .mp4)
        #expect(ExportFormat(path: "clip.avi") == nil)
        #expect(ExportFormat(path: "dir.mkv/clip") == nil)
        #expect(ExportDestination(argument: "-") == .standardOutput)
    }
}
