import Foundation
import Glibc
import RewindCore
import RewindMedia
import RewindSystem
import RewindTesting
import Testing

@Suite(.timeLimit(.minutes(45))) struct Y4MReaderTests {
    struct Source: Sendable, CustomStringConvertible {
        var width: Int
        var height: Int
        var rate: String
        var pixelFormat: String
        var duration: FrameTime
        var description: String { "\(width)x\(height)@\(rate) \(pixelFormat)" }
    }

    static let sources = [
        Source(
            width: 320, height: 240, rate: "30000/1001", pixelFormat: "yuv420p",
            duration: .init(value: 1001, timescale: 30000)),
        Source(width: 321, height: 241, rate: "25", pixelFormat: "yuv420p", duration: .init(value: 1, timescale: 25)),
        Source(width: 33, height: 17, rate: "60", pixelFormat: "yuv420p", duration: .init(value: 1, timescale: 60)),
        Source(width: 160, height: 91, rate: "60", pixelFormat: "gray", duration: .init(value: 1, timescale: 60)),
    ]

    @Test(arguments: sources)
    func readsWhatFFmpegWrites(source: Source) throws {
        let path = TemporaryDirectory.shared.file("source.y4m")
        try ExternalTools.makeY4M(
            path, width: source.width, height: source.height, rate: source.rate, frames: 7,
            pixelFormat: source.pixelFormat)
        var reader = try Y4MReader(path: path, startWallNanoseconds: 5_000)
        let format: PixelFormat = source.pixelFormat == "gray" ? .gray8 : .i420
        #expect(reader.stream.layout == (try FrameLayout(format: format, width: source.width, height: source.height)))
        #expect(reader.stream.frameDuration == source.duration)
        // ffmpeg writes gray as full range (XCOLORRANGE=FULL) and yuv420p as limited.
        #expect(reader.stream.color.range == (format == .gray8 ? .full : .video))
        let frames = try readAllFrames(&reader)
        #expect(frames.count == 7)
        let raw = try ExternalTools.run(
            "ffmpeg", ["-hide_banner", "-loglevel", "error", "-i", path, "-f", "rawvideo", "-"])
        #expect(Array(raw) == frames.flatMap(\.bytes))
        for (index, frame) in frames.enumerated() {
            let pts = FrameTime(value: Int64(index) * source.duration.value, timescale: source.duration.timescale)
            #expect(frame.info.pts == pts)
            #expect(frame.info.wallNanoseconds == 5_000 + pts.nanoseconds!)
        }
    }

    /// `C420p10` is read as `p010`: the bytes ffmpeg converts the same file to (`-pix_fmt p010le`); a sample above
    /// 1023 is refused, named by its byte offset. (An even width: ffmpeg's 10-bit YUV4MPEG2 of an odd width has chroma
    /// rows half a sample short, which ffmpeg alone reads back.)
    @Test func readsTenBitAsP010AndRefusesSamplesAbove1023() throws {
        let path = TemporaryDirectory.shared.file("ten.y4m")
        try ExternalTools.makeY4M(
            path, width: 36, height: 21, rate: "25", frames: 3, pixelFormat: "yuv420p10le", extra: ["-strict", "-1"])
        var reader = try Y4MReader(path: path)
        #expect(reader.stream.layout == (try FrameLayout(format: .p010, width: 36, height: 21)))
        let frames = try readAllFrames(&reader)
        #expect(frames.count == 3)
        let raw = try ExternalTools.run(
            "ffmpeg", ["-hide_banner", "-loglevel", "error", "-i", path, "-pix_fmt", "p010le", "-f", "rawvideo", "-"])
        #expect(Array(raw) == frames.flatMap(\.bytes))

        // One luma sample, then one chroma sample, of the second frame set to 1024.
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        let header = bytes.firstIndex(of: UInt8(ascii: "\n"))! + 1
        let frameBytes = 6 + reader.stream.layout.byteCount
        let secondPayload = header + frameBytes + 6
        for sample in [36 * 4 + 5, 36 * 21 + 7] {
            var bad = bytes
            bad[secondPayload + 2 * sample] = 0x00
            bad[secondPayload + 2 * sample + 1] = 0x04
            let error = try error(reading: bad, validFrames: 1, keepingBytes: false)
            #expect(error.byteOffset == Int64(secondPayload + 2 * sample), "\(error)")
            #expect(error.frame == 1)
            #expect("\(error)".contains("sample value 1024 is above 1023"), "\(error)")
        }
    }

    @Test func readsFullRangeAndFromADescriptor() throws {
        let path = TemporaryDirectory.shared.file("full.y4m")
        try ExternalTools.makeY4M(path, width: 64, height: 48, rate: "50", frames: 3, extra: ["-color_range", "pc"])
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        defer { close(fd) }
        var reader = try Y4MReader(fileDescriptor: FileDescriptor(rawValue: fd), name: "stdin", matrix: .bt601)
        #expect(reader.stream.color == ColorInfo(matrix: .bt601, range: .full))
        #expect(try readAllFrames(&reader).count == 3)
    }

    /// The error reading `bytes` as a stream, after `validFrames` good frames.
    func error(reading bytes: [UInt8], validFrames: Int = 0, keepingBytes: Bool = true) throws -> InputError {
        let path = TemporaryDirectory.shared.file("bad.y4m")
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        do {
            var reader = try Y4MReader(path: path)
            var buffer = [UInt8](repeating: 0, count: reader.stream.layout.byteCount)
            for index in 0..<validFrames {
                let info = try buffer.withUnsafeMutableBytes { try reader.readFrame(into: $0) }
                #expect(info != nil, "frame \(index) should read")
                if keepingBytes {
                    #expect(buffer.allSatisfy { $0 == UInt8(index + 1) }, "frame \(index) keeps its bytes")
                }
            }
            _ = try buffer.withUnsafeMutableBytes { try reader.readFrame(into: $0) }
        } catch let error as InputError {
            return error
        }
        Issue.record("reading did not fail")
        return InputError(input: "", byteOffset: nil, problem: .empty)
    }

    func header(_ text: String) -> [UInt8] { Array((text + "\n").utf8) }

    @Test func malformedHeadersNameTheirOffset() throws {
        let cases: [(String, Int64, String)] = [
            ("YUV4MPEG W64 H48 F25:1", 0, "must start with 'YUV4MPEG2 '"),
            ("YUV4MPEG2 H48 F25:1", 0, "no W tag"),
            ("YUV4MPEG2 W64 F25:1", 0, "no H tag"),
            ("YUV4MPEG2 W64 H48", 0, "no F tag"),
            ("YUV4MPEG2 Wabc H48 F25:1", 10, "bad width 'Wabc'"),
            ("YUV4MPEG2 W64 H0 F25:1", 14, "bad height 'H0'"),
            ("YUV4MPEG2 W64 H48 F25:0", 18, "bad frame rate 'F25:0'"),
            ("YUV4MPEG2 W64 H48 F25 ", 18, "bad frame rate 'F25'"),
            ("YUV4MPEG2 W64 H48 F25:1 Ax", 24, "bad pixel aspect ratio"),
            ("YUV4MPEG2 W64 H48 F25:1 A-1:1", 24, "bad pixel aspect ratio"),
            ("YUV4MPEG2 W64 H48 F25:1 A1:0", 24, "give A0:0 for an unknown aspect"),
            ("YUV4MPEG2 W64 H48 F25:1 A0:1", 24, "a zero term is a shape of no width or no height"),
            ("YUV4MPEG2 W+64 H48 F25:1", 10, "bad width 'W+64'"),
            ("YUV4MPEG2 W64 H48 F+25:1", 18, "bad frame rate 'F+25:1'"),
            ("YUV4MPEG2 W64 H48 F0:0", 18, "bad frame rate 'F0:0': expected F<num>:<den> with both positive"),
            ("YUV4MPEG2 W64 H48 F25:1 A65537:65536", 24, "has terms above 65535 once reduced"),
            ("YUV4MPEG2 W64 H48 F25:1 C422", 24, "unsupported colour space 'C422'"),
            ("YUV4MPEG2 W64 H48 F25:1 C444p10", 24, "supported are 420jpeg"),
            ("YUV4MPEG2 W64 H48 F25:1 It", 24, "interlaced input ('It') is not supported"),
            ("YUV4MPEG2 W64 H48 F25:1 Iz", 24, "bad interlacing"),
            ("YUV4MPEG2 W64 H48 F25:1 XCOLORRANGE=HALF", 24, "bad colour range"),
            ("YUV4MPEG2 W64 H48 F25:1 Cmono XYSCSS=420JPEG", 30, "XYSCSS=420JPEG contradicts Cmono at byte 24"),
            ("YUV4MPEG2 W64 H48 F25:1 C420jpeg XYSCSS=420JPEG\r", 47, "the header line ends in CR LF"),
            ("YUV4MPEG2 W64 H48\r", 17, "the header line ends in CR LF"),
            ("YUV4MPEG2 W64 H48 F2000000000:1", 18, "faster than one frame per nanosecond"),
            ("YUV4MPEG2 W64 H48 F1:99999999999999999999", 18, "bad frame rate 'F1:99999999999999999999': a term above"),
            ("YUV4MPEG2 W64 H48 F1:4000000000", 18, "bad frame rate 'F1:4000000000': a term above 2147483647 once"),
            ("YUV4MPEG2 W16\u{0}0 H48 F25:1", 10, "bad width 'W16\\x000'"),
            ("YUV4MPEG2 W\u{1B}[2J H48 F25:1", 10, "bad width 'W\\x1B[2J'"),
            ("YUV4MPEG2 W64 H48 C420jpeg XYSCSS=420\u{2}JPEG", 27, "XYSCSS=420\\x02JPEG contradicts C420jpeg"),
            ("YUV4MPEG2 W64 H48 C420jpeg XYSCSS=420\u{E9}", 27, "XYSCSS=420\\xC3\\xA9 contradicts C420jpeg"),
            ("YUV4MPEG2\tW64 H48 F25:1", 0, "found 'YUV4MPEG2\\x09W64 H48 F25:1'"),
            ("YUV4MPEG2 W160 W320 H48 F25:1", 15, "the header gives W twice ('W160' at byte 10, then 'W320')"),
            ("YUV4MPEG2 W64 H48 F25:1 C420jpeg Cmono", 33, "the header gives C twice"),
            (
                "YUV4MPEG2 W64 H48 F25:1 XCOLORRANGE=FULL XCOLORRANGE=LIMITED", 41,
                "the header gives XCOLORRANGE twice"
            ),
        ]
        for (text, offset, message) in cases {
            let error = try error(reading: header(text))
            #expect(error.byteOffset == offset, "\(text): \(error)")
            #expect(error.message.contains(message), "\(text): \(error)")
        }
        let empty = try error(reading: [])
        #expect(empty.byteOffset == 0 && empty.message.contains("empty"))
        let unterminated = try error(reading: Array("YUV4MPEG2 W64 H48".utf8))
        #expect(unterminated.message.contains("no terminating newline"))
        // Bytes of anything else, with no newline for longer than a header may be (`/dev/zero`): not a stream, not
        // a line too long.
        let zeros = try error(reading: [UInt8](repeating: 0, count: 10_000))
        #expect(zeros.byteOffset == 0 && zeros.message.contains("not a YUV4MPEG2 stream"), "\(zeros)")
        let magicOnly = try error(reading: Array("YUV4MPEG2 ".utf8))
        #expect(magicOnly.message.contains("the header ends after 'YUV4MPEG2 '"), "\(magicOnly)")
        // A header line too long is told the longest line, magic included, as a frame line is (it said 4086).
        let long = try error(reading: Array("YUV4MPEG2 ".utf8) + [UInt8](repeating: UInt8(ascii: "W"), count: 5000))
        #expect(long.byteOffset == 0 && long.message.contains("longer than 4096 bytes"), "\(long)")
    }

    /// The chroma siting a `C` tag names and the pixel aspect of `A` are kept, as ffmpeg reads them (no `C`, or
    /// `A0:0`, says nothing).
    @Test(arguments: [
        ("C420jpeg A1:1", ChromaSiting.center, "1:1"), ("C420 A4:3", .center, "4:3"),
        ("C420mpeg2 A20:22", .left, "10:11"),
        ("C420paldv A0:0", .topLeft, "unknown"), ("A65536:32768", .unspecified, "2:1"),
        ("Cmono", .unspecified, "unknown"),
        ("C420p10 A8:9", .unspecified, "8:9"),
    ])
    func keepsChromaSitingAndPixelAspect(tags: String, siting: ChromaSiting, aspect: String) throws {
        let path = TemporaryDirectory.shared.file(
            "shape-\(siting.name)-\(aspect.replacingOccurrences(of: ":", with: "-")).y4m")
        try Data(header("YUV4MPEG2 W4 H2 F25:1 Ip \(tags)")).write(to: URL(fileURLWithPath: path))
        let reader = try Y4MReader(path: path)
        #expect(reader.stream.chromaSiting == siting, "\(tags)")
        #expect(reader.stream.pixelAspect.description == aspect, "\(tags)")
    }

    @Test func acceptsProgressiveUnknownInterlacingAndMonoFromXYSCSS() throws {
        let path = TemporaryDirectory.shared.file("ok.y4m")
        try Data(
            header("YUV4MPEG2 W4 H2 F30000:1001 I? A0:0 XYSCSS=MONO XFOO=1 Zunknown") + Array("FRAME\n".utf8)
                + [UInt8](repeating: 9, count: 8)
        )
        .write(to: URL(fileURLWithPath: path))
        var reader = try Y4MReader(path: path)
        #expect(reader.stream.layout.format == .gray8)
        #expect(reader.stream.frameDuration == FrameTime(value: 1001, timescale: 30000))
        #expect(try readAllFrames(&reader).map(\.bytes) == [[UInt8](repeating: 9, count: 8)])
    }

    @Test func badFrameMarkerAndTruncatedFrameNameTheirOffset() throws {
        let head = header("YUV4MPEG2 W4 H2 F25:1 Cmono")  // 8-byte frames
        let frame1 = Array("FRAME\n".utf8) + [UInt8](repeating: 1, count: 8)
        let frame2 = Array("FRAME Ixyz\n".utf8) + [UInt8](repeating: 2, count: 8)
        let good = head + frame1 + frame2
        let badMarker = try error(
            reading: good + Array("FRAMX\n".utf8) + [UInt8](repeating: 3, count: 8), validFrames: 2)
        #expect(badMarker.byteOffset == Int64(good.count))
        #expect(badMarker.message.contains("bad FRAME marker before frame 2: expected 'FRAME', found 'FRAMX'"))
        let crlf = try error(reading: good + Array("FRAME\r\n".utf8) + [UInt8](repeating: 3, count: 8), validFrames: 2)
        #expect(crlf.message.contains("found 'FRAME\\x0D'"), "\(crlf)")
        let glued = try error(reading: good + Array("FRAMEX\n".utf8), validFrames: 2)
        #expect(glued.byteOffset == Int64(good.count))
        let truncated = try error(reading: good + Array("FRAME\n".utf8) + [3, 3, 3], validFrames: 2)
        let end = Int64(good.count + 6 + 3)
        #expect(truncated.byteOffset == end)
        #expect(truncated.message == "frame 2 is truncated: expected 8 bytes of payload, got 3")
        #expect(truncated.frame == 2)
        #expect(truncated.problem == .truncated(expectedBytes: 8, gotBytes: 3))
        #expect(truncated.isMalformed)
        #expect(truncated.description == "\(truncated.input): at byte \(end): \(truncated.message)")
        let cutMarker = try error(reading: good + Array("FRA".utf8), validFrames: 2)
        #expect(cutMarker.message.contains("frame 2 is truncated"))
        #expect(cutMarker.byteOffset == Int64(good.count + 3))
    }
}
