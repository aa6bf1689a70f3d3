import Foundation
import Glibc
import RewindCore
import RewindMedia
import RewindSystem
import RewindTesting
import Testing

@Suite(.timeLimit(.minutes(45))) struct Y4MWriterTests {
    @Test(arguments: [(320, 240, "yuv420p"), (321, 241, "yuv420p"), (97, 35, "gray")])
    func roundTripKeepsEveryFrame(width: Int, height: Int, pixelFormat: String) throws {
        let source = TemporaryDirectory.shared.file("source.y4m")
        try ExternalTools.makeY4M(
            source, width: width, height: height, rate: "30000/1001", frames: 9, pixelFormat: pixelFormat)
        var reader = try Y4MReader(path: source)
        let frames = try readAllFrames(&reader)
        let output = TemporaryDirectory.shared.file("out.y4m")
        var writer = try Y4MWriter(stream: reader.stream, destination: .path(output))
        try writeFrames(frames, layout: reader.stream.layout, to: &writer)
        let summary = try writer.finish()
        #expect(summary.frames == 9 && summary.filledFrames == 0 && summary.path == output)
        #expect(summary.firstPTSNanoseconds == 0)
        #expect(summary.lastPTSNanoseconds == frames[8].info.ptsNanoseconds)
        let size = try FileManager.default.attributesOfItem(atPath: output)[.size] as? Int
        #expect(Int64(size ?? -1) == summary.bytes)
        #expect(try ExternalTools.frameMD5s(output) == (try ExternalTools.frameMD5s(source)))
        let rate = try ExternalTools.probe(output, ["-show_entries", "stream=r_frame_rate"])
        #expect(rate == [["30000/1001"]])
    }

    func syntheticFrames(
        _ format: PixelFormat, pts: [Int64], color: ColorInfo = .bt709Video, width: Int = 96, height: Int = 54,
        frameDuration: FrameTime = FrameTime(value: 1, timescale: 25)
    ) throws -> (StreamDescription, [(info: FrameInfo, bytes: [UInt8])]) {
        let camera = SyntheticCamera(
            layout: try FrameLayout(format: format, width: width, height: height),
            frameDuration: frameDuration,
            color: color)
        let frames = try pts.enumerated().map { (index, ns) in
            (info: try info(ns: ns, color: color), bytes: try camera.frameBytes(at: Int64(index)))
        }
        return (camera.stream, frames)
    }

    @Test(arguments: [true, false])
    func gapsAreFilledByRepeatingThePreviousFrame(toFile: Bool) throws {
        let step: Int64 = 40_000_000  // 25 fps
        // A 3-frame gap (2 filled), a 1.4-frame step (none filled), a 2.6-frame step (2 filled).
        let pts = [0, step, 2 * step, 5 * step, 5 * step + 56_000_000, 5 * step + 56_000_000 + 104_000_000]
        let (stream, frames) = try syntheticFrames(.i420, pts: pts)
        let output = TemporaryDirectory.shared.file("gaps.y4m")
        var summary: ExportSummary
        if toFile {
            var writer = try Y4MWriter(stream: stream, destination: .path(output))
            try writeFrames(frames, layout: stream.layout, to: &writer)
            summary = try writer.finish()
        } else {
            // A write-only descriptor cannot be read back: the writer keeps a copy instead.
            let fd = open(output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            try #require(fd >= 0)
            var writer = try Y4MWriter(
                stream: stream, destination: .fileDescriptor(FileDescriptor(rawValue: fd), name: "pipe"))
            try writeFrames(frames, layout: stream.layout, to: &writer)
            summary = try writer.finish()
            close(fd)
            #expect(summary.path == nil)
        }
        #expect(summary.frames == 6)
        #expect(summary.filledFrames == 4)
        #expect(summary.writtenFrames == 10)
        var reader = try Y4MReader(path: output)
        let written = try readAllFrames(&reader).map(\.bytes)
        let expected = [0, 1, 2, 2, 2, 3, 4, 4, 4, 5].map { frames[$0].bytes }
        #expect(written == expected)
        let count = try ExternalTools.probe(output, ["-count_frames", "-show_entries", "stream=nb_read_frames"])
        #expect(count == [["10"]])
    }

    /// Many gaps do not add up: ten recordings of 15 frames at 30 fps, each starting 10.4 frame times after the
    /// last frame of the one before (a pause of about 0.3 s, wherever the clock is when recording starts again).
    /// Every frame lands on the slot its pts rounds to on the grid from the first frame; rounding each gap on its own
    /// (10.4 → 10) put the last frame 4 slots (133 ms) early.
    @Test func manyGapsKeepEveryFrameOnItsSlot() throws {
        let duration = FrameTime(value: 1, timescale: 30)
        var pts: [Int64] = []
        var start: Int64 = 0
        for _ in 0..<10 {
            pts += (0..<15).map { start + Int64($0) * 1_000_000_000 / 30 }
            start = pts.last! + 1_000_000_000 / 30 + 300_000_000 + 13_333_333
        }
        let (stream, frames) = try syntheticFrames(.i420, pts: pts, frameDuration: duration)
        let output = TemporaryDirectory.shared.file("many-gaps.y4m")
        var writer = try Y4MWriter(stream: stream, destination: .path(output))
        try writeFrames(frames, layout: stream.layout, to: &writer)
        let summary = try writer.finish()
        var reader = try Y4MReader(path: output)
        let written = try readAllFrames(&reader).map(\.bytes)
        let slots = pts.map { Int((Double($0) * 30 / 1e9).rounded()) }
        #expect(summary.frames == 150 && summary.writtenFrames == written.count)
        #expect(written.count == slots.last! + 1, "the last frame on its slot: \(written.count - 1) for \(slots.last!)")
        #expect(summary.filledFrames == written.count - 150)
        let misplaced = slots.indices.filter { slots[$0] >= written.count || written[slots[$0]] != frames[$0].bytes }
        #expect(misplaced.isEmpty, "frames not at the slot of their pts: \(misplaced)")
        // Every slot holds the last frame whose slot is at or before it.
        let wrong = written.indices.filter { slot in written[slot] != frames[slots.lastIndex { $0 <= slot }!].bytes }
        #expect(wrong.isEmpty, "slots not repeating the frame before them: \(wrong)")
    }

    /// Frames closer than a frame time are never dropped or reordered: one whose slot is taken goes to the next free
    /// slot, and the frames after it return to their own as soon as those are free.
    /// A gap whose repeated frames would not fit on the disk (keeping 256 MiB free for recordings) is refused
    /// before any is written, naming the repeats, the room and what to do; one that fits is filled.
    @Test func aGapTooLargeForTheDiskIsRefusedBeforeItIsFilled() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true)
        let faults = FaultInjectingFileSystem()
        faults.setCapacity((256 << 20) + (1 << 20), of: directory.path)
        let second: Int64 = 1_000_000_000
        // 96x54 i420 at 25 fps: 7,782 bytes a frame with its line; a 10 s gap is 249 repeats (1.9 MB), a 1 s gap 24.
        for (gap, fits) in [(Int64(1), true), (10, false)] {
            let (stream, frames) = try syntheticFrames(.i420, pts: [0, 40_000_000, gap * second + 40_000_000])
            let output = directory.path + "/gap-\(gap).y4m"
            var writer = try Y4MWriter(stream: stream, destination: .path(output), fileSystem: faults)
            if fits {
                try writeFrames(frames, layout: stream.layout, to: &writer)
                #expect(try writer.finish().filledFrames == 24)
                continue
            }
            #expect {
                try writeFrames(frames, layout: stream.layout, to: &writer)
            } throws: { error in
                guard let error = error as? ExportError, case .gapTooLarge(let count, _, _) = error.reason else {
                    return false
                }
                return count == 249 && "\(error)".contains("249 repeated frames")
            }
        }
    }

    @Test func aFrameOnATakenSlotGoesToTheNextOne() throws {
        let step: Int64 = 40_000_000  // 25 fps
        // Slots 0, 1, 1 (taken: written at 2), 2 (taken: at 3), 5 (one repeat at 4), 5.5 → 5 (taken: at 6), 7.
        let pts = [0, 24_000_000, 52_000_000, 88_000_000, 5 * step, 5 * step + 20_000_000, 7 * step]
        let (stream, frames) = try syntheticFrames(.i420, pts: pts)
        let output = TemporaryDirectory.shared.file("taken.y4m")
        var writer = try Y4MWriter(stream: stream, destination: .path(output))
        try writeFrames(frames, layout: stream.layout, to: &writer)
        let summary = try writer.finish()
        #expect(summary.frames == 7 && summary.filledFrames == 1)
        var reader = try Y4MReader(path: output)
        #expect(try readAllFrames(&reader).map(\.bytes) == [0, 1, 2, 3, 3, 4, 5, 6].map { frames[$0].bytes })
    }

    /// Small frames convert inline; frames with 256 KiB of chroma or more convert on a helper thread while the
    /// luma is written, unless the writer is told to convert on its own thread (frames from a decoder). Both to a
    /// file and to a descriptor (which keeps a copy for gap filling).
    @Test(arguments: [
        (96, 54, true, true), (1024, 512, true, true), (1024, 512, false, true), (1024, 512, true, false),
    ])
    func nv12IsWrittenAsItsI420Equivalent(width: Int, height: Int, toFile: Bool, onHelper: Bool) throws {
        let (stream, frames) = try syntheticFrames(
            .nv12, pts: [0, 40_000_000, 80_000_000, 200_000_000], width: width, height: height)
        let output = TemporaryDirectory.shared.file("nv12-\(width)-\(toFile)-\(onHelper).y4m")
        let fd = toFile ? -1 : open(output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        defer { if fd >= 0 { close(fd) } }
        var writer = try Y4MWriter(
            stream: stream,
            destination: toFile ? .path(output) : .fileDescriptor(FileDescriptor(rawValue: fd), name: "pipe"),
            convertsOnHelper: onHelper)
        try writeFrames(frames, layout: stream.layout, to: &writer)
        let summary = try writer.finish()
        #expect(summary.filledFrames == 2)
        // Disk blocks reserved ahead of the writes are released: the file holds no more than its bytes.
        var status = stat()
        try #require(stat(output, &status) == 0)
        #expect(Int64(status.st_size) == summary.bytes)
        #expect(Int64(status.st_blocks) * 512 <= summary.bytes + 64 * 1024)
        let raw = try ExternalTools.run(
            "ffmpeg", ["-hide_banner", "-loglevel", "error", "-i", output, "-f", "rawvideo", "-"])
        let i420 = frames.map { convertNV12ToI420($0.bytes, layout: stream.layout) }
        #expect(Array(raw) == (i420[0..<3] + [i420[2], i420[2], i420[3]]).flatMap { $0 })
        var reader = try Y4MReader(path: output)
        #expect(try readAllFrames(&reader).map(\.bytes) == [i420[0], i420[1], i420[2], i420[2], i420[2], i420[3]])
    }

    @Test func p010IsWrittenAsTenBitLowBits() throws {
        let (stream, frames) = try syntheticFrames(.p010, pts: [0, 40_000_000])
        let output = TemporaryDirectory.shared.file("p010.y4m")
        var writer = try Y4MWriter(stream: stream, destination: .path(output))
        try writeFrames(frames, layout: stream.layout, to: &writer)
        _ = try writer.finish()
        let header = try String(decoding: Data(contentsOf: URL(fileURLWithPath: output)).prefix(80), as: UTF8.self)
        #expect(header.contains("C420p10"))
        let raw = try ExternalTools.run(
            "ffmpeg",
            ["-hide_banner", "-loglevel", "error", "-i", output, "-f", "rawvideo", "-pix_fmt", "yuv420p10le", "-"])
        var expected: [UInt8] = []
        for frame in frames {
            let samples = stride(from: 0, to: frame.bytes.count, by: 2).map {
                (UInt16(frame.bytes[$0]) | UInt16(frame.bytes[$0 + 1]) << 8) >> 6
            }
            let luma = stream.layout.plane(0).byteCount / 2
            let chroma = samples[luma...]
            let planar =
                Array(samples[0..<luma])
                + stride(from: chroma.startIndex, to: chroma.endIndex, by: 2).map { samples[$0] }
                + stride(from: chroma.startIndex + 1, to: chroma.endIndex, by: 2).map { samples[$0] }
            expected += planar.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }
        }
        #expect(Array(raw) == expected)
    }

    @Test func colourRangeIsInTheHeader() throws {
        let (stream, frames) = try syntheticFrames(.i420, pts: [0], color: ColorInfo(matrix: .bt601, range: .full))
        let output = TemporaryDirectory.shared.file("full.y4m")
        var writer = try Y4MWriter(stream: stream, destination: .path(output))
        try writeFrames(frames, layout: stream.layout, to: &writer)
        _ = try writer.finish()
        #expect(try ExternalTools.probe(output, ["-show_entries", "stream=color_range"]) == [["pc"]])
    }

    @Test func bgraIsRefusedAndBadFramesThrow() throws {
        let bgra = StreamDescription(
            layout: try FrameLayout(format: .bgra, width: 64, height: 2),
            frameDuration: FrameTime(value: 1, timescale: 30),
            color: .bt709Video)
        #expect {
            _ = try Y4MWriter(stream: bgra, destination: .path(TemporaryDirectory.shared.file("x.y4m")))
        } throws: { ($0 as? ExportError)?.message.contains("YUV4MPEG2 has no RGB format") == true }

        let (stream, frames) = try syntheticFrames(.i420, pts: [40_000_000, 0])
        var writer = try Y4MWriter(stream: stream, destination: .path(TemporaryDirectory.shared.file("order.y4m")))
        #expect(throws: FrameError.nonMonotonicPTS(previousNanoseconds: 40_000_000, nanoseconds: 0)) {
            try writeFrames(frames, layout: stream.layout, to: &writer)
        }
    }
}
