import Foundation
import Glibc
import RewindCore
import RewindMedia
import RewindSystem
import RewindTesting
import Testing

@Suite(.timeLimit(.minutes(45))) struct MatroskaWriterTests {
    func decodeRaw(_ path: String, pixelFormat: String? = nil) throws -> [UInt8] {
        var arguments = ["-hide_banner", "-loglevel", "error", "-i", path, "-fps_mode", "passthrough"]
        if let pixelFormat { arguments += ["-pix_fmt", pixelFormat] }
        return Array(try ExternalTools.run("ffmpeg", arguments + ["-f", "rawvideo", "-"]))
    }

    func export(
        _ frames: [(info: FrameInfo, bytes: [UInt8])], stream: StreamDescription, name: String = "out.mkv"
    ) throws -> (String, ExportSummary) {
        let output = TemporaryDirectory.shared.file(name)
        var writer = try MatroskaWriter(stream: stream, destination: .path(output))
        try writeFrames(frames, layout: stream.layout, to: &writer)
        return (output, try writer.finish())
    }

    func synthetic(
        _ format: PixelFormat, pts: [Int64], color: ColorInfo = .bt709Video, width: Int = 96, height: Int = 54
    )
        throws -> (StreamDescription, [(info: FrameInfo, bytes: [UInt8])])
    {
        let camera = SyntheticCamera(
            layout: try FrameLayout(format: format, width: width, height: height),
            frameDuration: FrameTime(value: 1, timescale: 60), color: color)
        let frames = try pts.enumerated().map { (index, ns) in
            (info: try info(ns: ns, color: color), bytes: try camera.frameBytes(at: Int64(index)))
        }
        return (camera.stream, frames)
    }

    @Test(arguments: [(320, 240, "yuv420p"), (321, 241, "yuv420p"), (97, 35, "gray")])
    func roundTripKeepsEveryFrame(width: Int, height: Int, pixelFormat: String) throws {
        let source = TemporaryDirectory.shared.file("source.y4m")
        try ExternalTools.makeY4M(
            source, width: width, height: height, rate: "30000/1001", frames: 9, pixelFormat: pixelFormat)
        var reader = try Y4MReader(path: source)
        let frames = try readAllFrames(&reader)
        let (output, summary) = try export(frames, stream: reader.stream)
        #expect(summary.frames == 9 && summary.filledFrames == 0)
        #expect(try ExternalTools.frameMD5s(output) == (try ExternalTools.frameMD5s(source)))
        #expect(try decodeRaw(output) == frames.flatMap(\.bytes))
        let stream = try ExternalTools.probe(output, ["-show_entries", "stream=codec_name,width,height,pix_fmt"])
        #expect(stream == [["rawvideo", "\(width)", "\(height)", pixelFormat]])
    }

    /// The Duration of several tracks runs to where the track that ends last ends, each by its own frame duration:
    /// a 60 fps track whose last frame is at 50 ms and a 10 fps one whose only frame is at 0 end at 100 ms.
    @Test func theDurationOfSeveralTracksEndsWithTheLastToEnd() throws {
        let fast = SyntheticCamera(
            layout: try FrameLayout(format: .i420, width: 96, height: 54),
            frameDuration: FrameTime(value: 1, timescale: 60))
        let slow = SyntheticCamera(
            layout: try FrameLayout(format: .i420, width: 64, height: 48),
            frameDuration: FrameTime(value: 1, timescale: 10))
        let output = TemporaryDirectory.shared.file("two-rates.mkv")
        let writer = try MatroskaWriter(
            tracks: [(name: "fast", stream: fast.stream), (name: "slow", stream: slow.stream)],
            destination: .path(output))
        for (camera, track, pts) in [(slow, 1, Int64(0)), (fast, 0, 0), (fast, 0, 16_666_667), (fast, 0, 50_000_000)] {
            let bytes = try camera.frameBytes(at: 0)
            try bytes.withUnsafeBytes { raw in
                try writer.write(
                    FrameView(layout: camera.stream.layout, info: try info(ns: pts), bytes: raw), track: track,
                    timestampNanoseconds: pts)
            }
        }
        _ = try writer.finish()
        let duration = try ExternalTools.probe(output, ["-show_entries", "format=duration"])
        let seconds = try #require(Double(duration.first?.first ?? ""))
        #expect(abs(seconds - 0.1) < 0.000_001, "duration \(seconds)")
    }

    @Test func irregularTimestampsAreStoredExactly() throws {
        let pts: [Int64] = [
            0, 16_666_667, 33_333_333, 50_000_001, 150_000_000, 150_000_001, 1_234_567_891, 3_600_000_000_123,
        ]
        let (stream, frames) = try synthetic(.i420, pts: pts)
        let (output, summary) = try export(frames, stream: stream)
        #expect(summary.firstPTSNanoseconds == 0 && summary.lastPTSNanoseconds == 3_600_000_000_123)
        let packets = try ExternalTools.probe(output, ["-show_entries", "packet=pts"]).map { Int64($0[0]) }
        #expect(packets == pts)
        let timeBase = try ExternalTools.probe(output, ["-show_entries", "stream=time_base"])
        #expect(timeBase == [["1/1000000000"]])
        #expect(try decodeRaw(output) == frames.flatMap(\.bytes))
        let size = try FileManager.default.attributesOfItem(atPath: output)[.size] as? Int
        #expect(Int64(size ?? -1) == summary.bytes)
    }

    @Test(arguments: [
        (ColorInfo(matrix: .bt709, range: .video), "tv", "bt709"),
        (ColorInfo(matrix: .bt601, range: .full), "pc", "smpte170m"),
        (ColorInfo(matrix: .bt2020, range: .video), "tv", "bt2020nc"),
    ])
    func colourIsVisibleToFFprobe(color: ColorInfo, range: String, space: String) throws {
        let (stream, frames) = try synthetic(.i420, pts: [0, 16_666_667], color: color)
        let (output, _) = try export(frames, stream: stream)
        let probed = try ExternalTools.probe(output, ["-show_entries", "stream=color_range,color_space"])
        #expect(probed == [[range, space]])
    }

    @Test func nv12EqualsItsI420Equivalent() throws {
        let pts: [Int64] = [0, 16_666_667, 33_333_333, 100_000_000]
        let (nv12Stream, nv12Frames) = try synthetic(.nv12, pts: pts, width: 97, height: 35)
        let (nv12Path, _) = try export(nv12Frames, stream: nv12Stream, name: "nv12.mkv")
        var i420Stream = nv12Stream
        i420Stream.layout = try FrameLayout(format: .i420, width: 97, height: 35)
        let i420Frames = nv12Frames.map {
            (info: $0.info, bytes: convertNV12ToI420($0.bytes, layout: nv12Stream.layout))
        }
        let (i420Path, _) = try export(i420Frames, stream: i420Stream, name: "i420.mkv")
        #expect(try ExternalTools.probe(nv12Path, ["-show_entries", "stream=pix_fmt"]) == [["nv12"]])
        #expect(try decodeRaw(nv12Path) == nv12Frames.flatMap(\.bytes))
        #expect(
            try ExternalTools.frameMD5s(nv12Path, pixelFormat: "yuv420p") == (try ExternalTools.frameMD5s(i420Path)))
        #expect(try decodeRaw(i420Path) == i420Frames.flatMap(\.bytes))
    }

    @Test func bgraAndGrayAreStoredAsIs() throws {
        for (format, name) in [(PixelFormat.bgra, "bgra"), (.gray8, "gray")] {
            let (stream, frames) = try synthetic(format, pts: [0, 16_666_667, 40_000_000])
            let (output, _) = try export(frames, stream: stream)
            #expect(try ExternalTools.probe(output, ["-show_entries", "stream=pix_fmt"]) == [[name]])
            #expect(try decodeRaw(output) == frames.flatMap(\.bytes))
        }
    }

    @Test func writesToAPipe() throws {
        let (stream, frames) = try synthetic(.i420, pts: [0, 16_666_667, 50_000_000])
        let output = TemporaryDirectory.shared.file("piped.mkv")
        // `cat` drains the pipe into a file while the writer writes.
        let cat = Process()
        cat.executableURL = URL(fileURLWithPath: try ExternalTools.locate("cat"))
        let pipe = Pipe()
        cat.standardInput = pipe
        cat.standardOutput = try FileHandle(
            forWritingTo: URL(fileURLWithPath: output, isDirectory: false).creatingFile())
        try cat.run()
        let fd = pipe.fileHandleForWriting.fileDescriptor
        var writer = try MatroskaWriter(
            stream: stream, destination: .fileDescriptor(FileDescriptor(rawValue: fd), name: "pipe"))
        try writeFrames(frames, layout: stream.layout, to: &writer)
        let summary = try writer.finish()
        try pipe.fileHandleForWriting.close()
        try waitForExit(cat, "cat has drained the pipe")
        #expect(summary.frames == 3)
        let packets = try ExternalTools.probe(output, ["-show_entries", "packet=pts"]).map { Int64($0[0]) }
        #expect(packets == [0, 16_666_667, 50_000_000])
        #expect(try decodeRaw(output) == frames.flatMap(\.bytes))
    }

    /// `p010` is written as planar 10-bit (`Y3[11][10]`), which ffmpeg reads as `yuv420p10le`: decoded back to
    /// `p010le`, every frame is the stored one (a P010 sample's 6 low bits are 0; any that are not are dropped).
    @Test(arguments: [(96, 54), (98, 36)]) func p010IsWrittenAsPlanarTenBit(width: Int, height: Int) throws {
        let (stream, frames) = try synthetic(
            .p010, pts: [0, 16_666_667, 50_000_000], width: width, height: height)
        let (output, summary) = try export(frames, stream: stream, name: "p010.mkv")
        #expect(summary.frames == 3)
        let probed = try ExternalTools.probe(output, ["-show_entries", "stream=codec_name,width,height,pix_fmt"])
        #expect(probed == [["rawvideo", "\(width)", "\(height)", "yuv420p10le"]])
        let expected = frames.flatMap { frame in
            stride(from: 0, to: frame.bytes.count, by: 2).flatMap { [frame.bytes[$0] & 0xC0, frame.bytes[$0 + 1]] }
        }
        #expect(try decodeRaw(output, pixelFormat: "p010le") == expected)
    }

    @Test func negativePTSIsRefused() throws {
        let (stream, frames) = try synthetic(.i420, pts: [-5])
        var writer = try MatroskaWriter(stream: stream, destination: .path(TemporaryDirectory.shared.file("n.mkv")))
        #expect(throws: ExportError.self) { try writeFrames(frames, layout: stream.layout, to: &writer) }
    }
}

extension URL {
    /// Creates an empty file here and returns the URL.
    func creatingFile() -> URL {
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        return self
    }
}
