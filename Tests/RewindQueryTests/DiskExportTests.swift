import Foundation
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

/// An export from disk decodes on a second thread while the caller's thread writes, and converts NV12 chroma on
/// the writing thread: what reaches the `.y4m` is exactly the stored frames in I420.
@Suite(.timeLimit(.minutes(45))) struct DiskExportTests {
    /// A store of 30 tiny frames at 30 fps; with `stoppedFor`, frames 15… come that much later, the stretch between
    /// a `recorder stopped` gap (from frame 14, the kept frame before it).
    private func thirtyFrames(stoppedFor stop: Int64 = 0) throws -> ClipSource {
        let layout = try FrameLayout(format: .i420, width: 64, height: 2)
        var camera = SyntheticCamera(layout: layout, frameDuration: FrameTime(value: 1, timescale: 30), frameCount: 30)
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let writer = try store.makeWriter(streamName: "camera", stream: camera.stream)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: layout.byteCount, alignment: 64)
        defer { buffer.deallocate() }
        var lastBefore: Int64 = 0
        var index = 0
        while var info = try camera.readFrame(into: buffer) {
            if stop > 0 && index == 15 {
                try writer.recordGap(start: lastBefore, end: info.ptsNanoseconds + stop, reason: .recorderStopped)
            }
            if index >= 15 { info.ptsNanoseconds += stop } else { lastBefore = info.ptsNanoseconds }
            try writer.append(FrameView(layout: layout, info: info, bytes: UnsafeRawBufferPointer(buffer)))
            index += 1
        }
        try writer.close()
        return ClipSource.store(store, stream: try store.streams()[0])
    }

    /// An export's progress counts the frames the range can hold: the frame rate over the part of it the stream's
    /// frames span, not over a range reaching an hour before the oldest frame (it said 7 % when 89 % was written).
    @Test func theFramesARangeHoldsAtMostAreCountedWhereTheStreamHasFrames() throws {
        let source = try thirtyFrames()
        let hour: Int64 = 3_600_000_000_000
        #expect(abs(source.framesAtMost(in: -hour..<hour) - 30) < 0.01)
        #expect(abs(source.framesAtMost(in: Int64.min..<Int64.max) - 30) < 0.01)
        #expect(abs(source.framesAtMost(in: 500_000_000..<hour) - 15) < 0.01)
        #expect(source.framesAtMost(in: 2 * hour..<3 * hour) == 0)
    }

    /// A range over a stretch without frames (the recorder stopped overnight) counts none there: an export's
    /// progress reached 0.58 and jumped to 1.
    @Test func theFramesARangeHoldsAtMostLeaveOutItsGaps() throws {
        let source = try thirtyFrames(stoppedFor: 10_000_000_000)
        let hour: Int64 = 3_600_000_000_000
        // 30 frames, less the one a gap starts at by convention (the kept frame before it) at most.
        #expect(abs(source.framesAtMost(in: -hour..<hour) - 30) <= 1, "\(source.framesAtMost(in: -hour..<hour))")
    }

    /// Gaps the index cannot give (its `gaps` table renamed away by another program) leave the range's losses
    /// unknown: reading them throws the store's error, naming the index, where it said the range lost nothing. An
    /// export's progress, an estimate, does without them.
    @Test func lostGapsThatCannotBeReadThrowRatherThanSayNone() throws {
        let source = try thirtyFrames()
        guard case .store(let store, _) = source else {
            Issue.record("not a store's stream: \(source)")
            return
        }
        _ = try ExternalTools.run("sqlite3", [store.directory + "/index.sqlite", "ALTER TABLE gaps RENAME TO away"])
        let error = #expect(throws: SegmentStoreError.self) { try source.lostGaps(in: 0..<1_000_000_000) }
        #expect(error.map { "\($0)".contains("/index.sqlite") } == true, "\(String(describing: error))")
        #expect(throws: SegmentStoreError.self) { try StreamSet([source]).lostGaps(in: 0..<1_000_000_000) }
        #expect(abs(source.framesAtMost(in: 0..<1_000_000_000) - 30) < 0.01)
    }

    @Test func anNV12ExportFromDiskIsTheStoredFramesInI420() throws {
        // 1024×512: 256 KiB of chroma, where frames from memory are converted on a helper thread instead.
        let layout = try FrameLayout(format: .nv12, width: 1024, height: 512)
        var camera = SyntheticCamera(
            layout: layout, frameDuration: FrameTime(value: 1, timescale: 30), noise: 2, frameCount: 40)
        let directory = try TemporaryDirectory.store()
        let store = try SegmentStore.open(directory: directory, options: StoreOptions(keyInterval: 7))
        let writer = try store.makeWriter(streamName: "camera", stream: camera.stream)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: layout.byteCount, alignment: 64)
        defer { buffer.deallocate() }
        var expected: [[UInt8]] = []
        while let info = try camera.readFrame(into: buffer) {
            try writer.append(FrameView(layout: layout, info: info, bytes: UnsafeRawBufferPointer(buffer)))
            expected.append(Self.i420(of: UnsafeRawBufferPointer(buffer), layout: layout))
        }
        try writer.close()

        let output = directory + "/clip.y4m"
        let source = ClipSource.store(store, stream: try store.streams()[0])
        let summary = try source.export(range: 0..<Int64.max, format: .y4m, to: .path(output))
        #expect(summary.frames == 40)
        var reader = try Y4MReader(path: output)
        let read = UnsafeMutableRawBufferPointer.allocate(byteCount: reader.stream.layout.byteCount, alignment: 64)
        defer { read.deallocate() }
        var written: [[UInt8]] = []
        while try reader.readFrame(into: read) != nil { written.append(Array(read)) }
        #expect(written.count == expected.count)
        for (index, (got, want)) in zip(written, expected).enumerated() {
            #expect(got == want, "frame \(index) differs")
        }
    }

    /// A new `.y4m` from disk is decoded in place and written chunk by chunk to its place in the file: the file is
    /// byte for byte the one the same frames make when decoded one by one (into rotating buffers) and written in
    /// turn — with gaps repeated, a range from the middle of a key-frame interval, chunk edges that cut CbCr pairs,
    /// and a second segment of another chunk size.
    @Test(arguments: [PixelFormat.nv12, .i420, .gray8])
    func anInPlaceExportIsTheFileTheFramesMakeOneByOne(format: PixelFormat) throws {
        // 66×242 NV12: 7986 bytes of chroma, in chunks of 3993 bytes (the size 4096 split evenly): each chunk edge
        // falls between the Cb and the Cr of a pair.
        let layout = try FrameLayout(format: format, width: 66, height: 242)
        let duration = FrameTime(value: 1, timescale: 30)
        var camera = SyntheticCamera(layout: layout, frameDuration: duration, noise: 3, frameCount: 60)
        let directory = try TemporaryDirectory.store()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: layout.byteCount, alignment: 64)
        defer { buffer.deallocate() }
        // Frames 0–29 in chunks of 4096 bytes, 30–59 in a second segment of chunks of 8192; frames 12–14 and 41
        // never stored (gaps).
        for (part, chunkSize) in [(0..<30, 4096), (30..<60, 8192)] {
            let store = try SegmentStore.open(
                directory: directory, options: StoreOptions(keyInterval: 7, chunkSize: chunkSize))
            let writer = try store.makeWriter(streamName: "camera", stream: camera.stream)
            for index in part {
                let info = try #require(try camera.readFrame(into: buffer))
                if (12...14).contains(index) || index == 41 { continue }
                try writer.append(FrameView(layout: layout, info: info, bytes: UnsafeRawBufferPointer(buffer)))
            }
            try writer.close()
        }
        let store = try SegmentStore.open(directory: directory)
        let source = ClipSource.store(store, stream: try store.streams()[0])
        let pts = { (frame: Int64) in frame * 1_000_000_000 / 30 }
        for range in [0..<Int64.max, pts(10) + 1..<pts(52)] {
            let output = directory + "/clip.y4m"
            let reference = directory + "/reference.y4m"
            let summary = try source.export(range: range, format: .y4m, to: .path(output))
            let oneByOne = try Y4MWriter(stream: camera.stream, destination: .path(reference))
            try store.frames(streamName: "camera", in: range) { frame in
                try oneByOne.write(frame)
                return true
            }
            let expected = try oneByOne.finish()
            #expect(summary.frames == expected.frames && summary.filledFrames == expected.filledFrames)
            #expect(summary.filledFrames == 4 && summary.bytes == expected.bytes)
            #expect(FileManager.default.contentsEqual(atPath: output, andPath: reference), "\(format) \(range)")
        }
    }

    /// A damaged frame in the middle of an in-place export, and a progress callback that throws, each end the
    /// export with their error and leave no file.
    @Test func anInPlaceExportThatFailsLeavesNoFile() throws {
        let (directory, source, exports) = try Self.noisyStore(noise: 4)
        let output = exports + "/clip.y4m"

        struct Stop: Error {}
        #expect(throws: Stop.self) {
            _ = try source.export(range: 0..<Int64.max, format: .y4m, to: .path(output)) { count, _ in
                if count == 5 { throw Stop() }
            }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: exports).isEmpty)

        // A byte of a frame's stored chunks, two thirds into the only segment file (noisy frames: almost all of it
        // is chunk bytes).
        let segments = directory + "/segments"
        let file = segments + "/" + (try FileManager.default.contentsOfDirectory(atPath: segments)).first!
        let handle = try #require(FileHandle(forUpdatingAtPath: file))
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: size * 2 / 3)
        let byte = try #require(try handle.read(upToCount: 1))
        try handle.seek(toOffset: size * 2 / 3)
        try handle.write(contentsOf: Data([byte[0] ^ 0x5A]))
        try handle.close()
        #expect(throws: SegmentStoreError.self) {
            _ = try source.export(range: 0..<Int64.max, format: .y4m, to: .path(output))
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: exports).isEmpty)
    }

    /// A disk that fills up while an in-place export writes ends it with the write's error, the reader thread
    /// stopped, and no file left.
    @Test func anInPlaceExportOntoAFullDiskLeavesNoFile() throws {
        let (_, source, exports) = try Self.noisyStore(noise: 2)
        let disk = FaultInjectingFileSystem()
        var frames = 0
        let error = #expect(throws: ExportError.self) {
            _ = try source.export(
                range: 0..<Int64.max, format: .y4m, to: .path(exports + "/clip.y4m"), fileSystem: disk
            ) { count, _ in
                frames = count
                if count == 10 { disk.setDiskFull(true) }
            }
        }
        #expect(frames == 10 && error?.description.contains("No space left") == true, "\(String(describing: error))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: exports).isEmpty)
        // Full before the export: it fails before any frame.
        frames = 0
        #expect(throws: ExportError.self) {
            _ = try source.export(
                range: 0..<Int64.max, format: .y4m, to: .path(exports + "/clip.y4m"), fileSystem: disk
            ) { count, _ in frames = count }
        }
        #expect(frames == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: exports).isEmpty)
    }

    /// A store of 40 noisy 256×128 NV12 frames (a key frame every 10), the clip source of its stream, and an empty
    /// `exports` folder in it.
    static func noisyStore(noise: Double) throws -> (directory: String, source: ClipSource, exports: String) {
        let layout = try FrameLayout(format: .nv12, width: 256, height: 128)
        var camera = SyntheticCamera(
            layout: layout, frameDuration: FrameTime(value: 1, timescale: 30), noise: noise, frameCount: 40)
        let directory = try TemporaryDirectory.store()
        let store = try SegmentStore.open(directory: directory, options: StoreOptions(keyInterval: 10))
        let writer = try store.makeWriter(streamName: "camera", stream: camera.stream)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: layout.byteCount, alignment: 64)
        defer { buffer.deallocate() }
        while let info = try camera.readFrame(into: buffer) {
            try writer.append(FrameView(layout: layout, info: info, bytes: UnsafeRawBufferPointer(buffer)))
        }
        try writer.close()
        let exports = directory + "/exports"
        try FileManager.default.createDirectory(atPath: exports, withIntermediateDirectories: true)
        return (directory, ClipSource.store(store, stream: try store.streams()[0]), exports)
    }

    /// NV12 → I420: the luma as it is, then every U, then every V.
    static func i420(of bytes: UnsafeRawBufferPointer, layout: FrameLayout) -> [UInt8] {
        let luma = layout.plane(0).byteCount
        let chroma = layout.plane(1).byteCount
        var out = Array(bytes[0..<luma])
        out += stride(from: luma, to: luma + chroma, by: 2).map { bytes[$0] }
        out += stride(from: luma + 1, to: luma + chroma, by: 2).map { bytes[$0] }
        return out
    }
}
