import Foundation
import RewindCore
import RewindMedia
import RewindTesting
import Testing

@Suite(.timeLimit(.minutes(45))) struct MP4ExporterTests {
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

    /// At 1000 fps and more every frame decodes, the last one too, and a clip of one frame holds it (ffmpeg took
    /// such a Matroska track for 10⁹ fps and left the last frame out of the .mp4's edit list).
    @Test(arguments: [1000, 2000, 100_000]) func everyFrameOfAFastStreamDecodes(fps: Int32) throws {
        _ = try ExternalTools.locate("ffmpeg")
        let camera = SyntheticCamera(
            layout: try FrameLayout(format: .i420, width: 160, height: 90),
            frameDuration: FrameTime(value: 1, timescale: fps))
        let step = 1_000_000_000 / Int64(fps)
        for count in [30, 1] {
            let frames = try (0..<count).map { index in
                (info: try info(ns: Int64(index) * step), bytes: try camera.frameBytes(at: Int64(index)))
            }
            let output = TemporaryDirectory.shared.file("fast-\(fps)-\(count).mp4")
            var exporter = try makeExporter(
                format: .mp4, stream: camera.stream, destination: .path(output), quality: .lossless)
            try writeFrames(frames, layout: camera.stream.layout, to: &exporter)
            #expect(try exporter.finish().frames == count)
            #expect(try ExternalTools.frameMD5s(output, pixelFormat: "yuv420p").count == count, "\(fps) fps")
            // Each at its own time, also faster than a 90 kHz clock ticks.
            let times = try ExternalTools.probe(output, ["-show_entries", "packet=pts_time"])
                .compactMap { Double($0[0]) }.sorted()
            #expect(abs((times.last ?? -1) - Double(count - 1) / Double(fps)) < 1e-7, "\(fps) fps: \(times.suffix(3))")
        }
    }

    @Test func irregularTimestampsKeepEveryFrameAndColour() throws {
        // 10 frames at 30 fps, a gap of about 1 s, 10 more off the first ones' frame grid (a recording started
        // again): passthrough keeps 20 frames (no duplicates to fill the gap), each at its own time.
        let step: Int64 = 33_333_333
        let pts = (0..<10).map { Int64($0) * step } + (0..<10).map { 1_349_303_000 + Int64($0) * step }
        let (stream, frames) = try synthetic(.nv12, pts: pts, color: ColorInfo(matrix: .bt601, range: .full))
        let output = TemporaryDirectory.shared.file("gaps.mp4")
        var exporter = try MP4Exporter(stream: stream, destination: .path(output))
        try writeFrames(frames, layout: stream.layout, to: &exporter)
        _ = try exporter.finish()
        let probed = try ExternalTools.probe(
            output, ["-count_frames", "-show_entries", "stream=nb_read_frames,color_range,color_space"])
        #expect(probed == [["pc", "smpte170m", "20"]])
        let times = try ExternalTools.probe(output, ["-show_entries", "packet=pts_time"]).compactMap { Double($0[0]) }
            .sorted()
        #expect(times.count == 20)
        // Not moved to the nominal frame grid: every frame within 20 µs of its own time (a 90 kHz time base).
        for (time, expected) in zip(times, pts) {
            #expect(abs(time - Double(expected) / 1e9) < 0.00002, "pts \(time) for \(expected) ns")
        }
    }

    /// A gap of six hours keeps its frames' times; one longer than an `.mp4` sample's duration holds at 90 kHz
    /// (2³¹ ticks, about 6 h 37 min), which ffmpeg would squeeze onto the frame before it with exit 0, is refused
    /// naming the interval. A stream faster than 90 kHz is timed to the nanosecond: its limit is 2.1 s.
    @Test func anIntervalTooLongForAnMP4SampleIsRefused() throws {
        _ = try ExternalTools.locate("ffmpeg")
        let hours = { (count: Int64) in count * 3_600_000_000_000 }
        let (stream, six) = try synthetic(.i420, pts: [0, 33_333_333, hours(6), hours(6) + 33_333_333])
        let kept = TemporaryDirectory.shared.file("six-hours.mp4")
        var exporter = try MP4Exporter(stream: stream, destination: .path(kept))
        try writeFrames(six, layout: stream.layout, to: &exporter)
        _ = try exporter.finish()
        let times = try ExternalTools.probe(kept, ["-show_entries", "packet=pts_time"]).compactMap { Double($0[0]) }
        #expect(times.sorted().last.map { abs($0 - 21600.0333) < 0.001 } == true, "\(times)")

        let (_, seven) = try synthetic(.i420, pts: [0, 33_333_333, hours(7)])
        var refused = try MP4Exporter(
            stream: stream, destination: .path(TemporaryDirectory.shared.file("seven-hours.mp4")))
        #expect {
            try writeFrames(seven, layout: stream.layout, to: &refused)
        } throws: { error in
            guard let error = error as? ExportError, case .intervalTooLongForMP4(_, _, let after) = error.reason
            else { return false }
            return after == 33_333_333 && "\(error)".contains("at most 23860.929s")
                && "\(error)".contains("export .mkv")
        }

        let fast = SyntheticCamera(
            layout: try FrameLayout(format: .i420, width: 160, height: 90),
            frameDuration: FrameTime(value: 1, timescale: 100_000))
        var fastRefused = try MP4Exporter(
            stream: fast.stream, destination: .path(TemporaryDirectory.shared.file("fast-gap.mp4")))
        let gapped = try [0, 3_000_000_000].enumerated().map { index, ns in
            (info: try info(ns: Int64(ns)), bytes: try fast.frameBytes(at: Int64(index)))
        }
        #expect(throws: ExportError.self) { try writeFrames(gapped, layout: fast.stream.layout, to: &fastRefused) }
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

    /// A `gray8` stream keeps its levels in either range (ffmpeg's `-pix_fmt gray` writes `Cmono XCOLORRANGE=FULL`,
    /// which swscale would squeeze into video range): `lossless` decodes to exactly the stored luma (framemd5 of
    /// the Y plane, cropped to the stored size for an odd one), and every quality keeps the darkest and brightest
    /// levels within a few steps.
    @Test(arguments: [(320, 240, "pc"), (97, 35, "pc"), (320, 240, "tv")])
    func grayKeepsItsLevelsAtEveryQuality(width: Int, height: Int, range: String) throws {
        _ = try ExternalTools.locate("ffmpeg")
        let source = TemporaryDirectory.shared.file("gray-\(width)-\(range).y4m")
        try ExternalTools.makeY4M(
            source, width: width, height: height, rate: "30", frames: 10, pixelFormat: "gray",
            extra: ["-color_range", range])
        var reader = try Y4MReader(path: source)
        #expect(reader.stream.color.range == (range == "pc" ? .full : .video))
        let frames = try readAllFrames(&reader)
        let luma = frames.flatMap(\.bytes)
        let expected = try ExternalTools.frameMD5s(source)
        try #require(expected.count == 10)
        for quality in ExportQuality.allCases {
            let output = TemporaryDirectory.shared.file("gray-\(width)-\(range)-\(quality).mp4")
            var exporter = try MP4Exporter(stream: reader.stream, destination: .path(output), quality: quality)
            try writeFrames(frames, layout: reader.stream.layout, to: &exporter)
            #expect(try exporter.finish().frames == 10)
            // Video range may go untagged (x264 writes no range flag when it is the default).
            let tag = try ExternalTools.probe(output, ["-show_entries", "stream=color_range"])
            #expect(range == "pc" ? tag == [["pc"]] : tag == [["tv"]] || tag == [["unknown"]], "\(tag)")
            let planeY = ["-vf", "extractplanes=y,crop=\(width):\(height):0:0"]
            let decoded = [UInt8](
                try ExternalTools.run(
                    "ffmpeg", ["-hide_banner", "-loglevel", "error", "-i", output] + planeY + ["-f", "rawvideo", "-"]))
            try #require(decoded.count == luma.count, "\(quality)")
            // Dark and bright levels (1st and 99th percentiles, robust to the codec's ringing at edges) stay where
            // they were; a squeeze into video range would move them by 10 steps or more.
            let (stored, out) = (Self.percentiles(luma), Self.percentiles(decoded))
            #expect(zip(stored, out).allSatisfy { abs($0 - $1) <= 2 }, "\(quality): 1st, 99th \(out), stored \(stored)")
            if quality == .lossless {
                let md5s = try ExternalTools.run(
                    "ffmpeg",
                    ["-hide_banner", "-loglevel", "error", "-i", output] + planeY + ["-f", "framemd5", "-"])
                let lines = String(decoding: md5s, as: UTF8.self).split(separator: "\n").filter { !$0.hasPrefix("#") }
                #expect(
                    lines.map { String($0.split(separator: ",").last!.trimmingCharacters(in: .whitespaces)) }
                        == expected)
            }
        }
    }

    /// The 1st and 99th percentiles of `samples`.
    static func percentiles(_ samples: [UInt8]) -> [Int] {
        let sorted = samples.sorted()
        return [Int(sorted[sorted.count / 100]), Int(sorted[sorted.count * 99 / 100])]
    }

    /// H.264 4:2:0 needs even sides: a 161x91 stream comes out 162x92, and `lossless` keeps every stored pixel,
    /// the last column and row included (the added ones repeat them).
    @Test(arguments: [PixelFormat.nv12, .i420])
    func oddSizesKeepEveryPixel(format: PixelFormat) throws {
        _ = try ExternalTools.locate("ffmpeg")
        let layout = try FrameLayout(format: format, width: 161, height: 91)
        let camera = SyntheticCamera(layout: layout, frameDuration: FrameTime(value: 1, timescale: 30))
        let frames = try (0..<5).map { index in
            (info: try info(ns: Int64(index) * 33_333_333, color: .bt709Video), bytes: try camera.frameBytes(at: index))
        }
        let output = TemporaryDirectory.shared.file("odd-\(format).mp4")
        var exporter = try MP4Exporter(stream: camera.stream, destination: .path(output), quality: .lossless)
        try writeFrames(frames, layout: layout, to: &exporter)
        _ = try exporter.finish()
        #expect(try ExternalTools.probe(output, ["-show_entries", "stream=width,height"]) == [["162", "92"]])
        let decoded = [UInt8](
            try ExternalTools.run(
                "ffmpeg",
                ["-hide_banner", "-loglevel", "error", "-i", output, "-f", "rawvideo", "-pix_fmt", "yuv420p", "-"]))
        let (width, height, chromaWidth, chromaHeight) = (162, 92, 81, 46)
        let frameBytes = width * height + 2 * chromaWidth * chromaHeight
        try #require(decoded.count == 5 * frameBytes)
        for (index, frame) in frames.enumerated() {
            let out = Array(decoded[index * frameBytes..<(index + 1) * frameBytes])
            for row in 0..<92 {
                let source = min(row, 90) * 161
                #expect(Array(out[row * width..<row * width + 161]) == Array(frame.bytes[source..<source + 161]))
                #expect(out[row * width + 161] == frame.bytes[source + 160], "the added column repeats the last")
            }
            // Chroma already covers the odd pixel: 81x46 samples, exactly the stored ones.
            let chroma = layout.plane(0).byteCount
            let samples = chromaWidth * chromaHeight
            for plane in 0..<2 {
                let decodedPlane = Array(out[width * height + plane * samples..<width * height + (plane + 1) * samples])
                let stored: [UInt8] =
                    format == .i420
                    ? Array(frame.bytes[chroma + plane * samples..<chroma + (plane + 1) * samples])
                    : stride(from: chroma + plane, to: chroma + 2 * samples, by: 2).map { frame.bytes[$0] }
                #expect(decodedPlane == stored, "frame \(index) chroma plane \(plane)")
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

    /// A side over x264's 16384 pixels is refused before ffmpeg starts, naming the size and the limit (ffmpeg
    /// failed after the first frame, with x264's words); 16384 itself is encoded.
    @Test func framesWiderThanTheEncoderTakesAreRefusedUpFront() throws {
        for (width, height) in [(16385, 2), (2, 16385)] {
            var stream = try synthetic(.i420, pts: []).0
            stream.layout = try FrameLayout(format: .i420, width: width, height: height)
            #expect {
                _ = try MP4Exporter(stream: stream, destination: .path(TemporaryDirectory.shared.file("wide.mp4")))
            } throws: {
                ($0 as? ExportError)?.reason == .frameTooLarge(width: width, height: height, limit: 16384)
                    && "\($0)".contains("\(width)x\(height) frames cannot be written to .mp4")
            }
        }
        _ = try ExternalTools.locate("ffmpeg")
        let camera = SyntheticCamera(
            layout: try FrameLayout(format: .i420, width: 16384, height: 2),
            frameDuration: FrameTime(value: 1, timescale: 30), color: .bt709Video)
        let output = TemporaryDirectory.shared.file("widest.mp4")
        var exporter = try MP4Exporter(stream: camera.stream, destination: .path(output))
        try writeFrames(
            [(info: try info(ns: 0, color: .bt709Video), bytes: try camera.frameBytes(at: 0))],
            layout: camera.stream.layout,
            to: &exporter)
        #expect(try exporter.finish().frames == 1)
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
