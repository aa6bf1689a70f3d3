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
@Suite(.timeLimit(.minutes(15))) struct DiskExportTests {
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
