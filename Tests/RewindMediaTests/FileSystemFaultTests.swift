import Foundation
import Glibc
import RewindCore
import RewindMedia
import RewindSystem
import RewindTesting
import Testing

/// Exports and inputs make their system calls through the ``FileSystem`` seam, so injected faults reach them.
@Suite struct FileSystemFaultTests {
    /// Eight 1024×512 I420 frames: each payload is large enough (768 KiB) to go straight to the file system.
    func frames(_ format: PixelFormat = .i420) throws -> (StreamDescription, [(info: FrameInfo, bytes: [UInt8])]) {
        let camera = SyntheticCamera(
            layout: try FrameLayout(format: format, width: 1024, height: 512),
            frameDuration: FrameTime(value: 1, timescale: 25))
        let frames = try (0..<8).map { (index: Int64) in
            (info: try info(ns: index * 40_000_000), bytes: try camera.frameBytes(at: index))
        }
        return (camera.stream, frames)
    }

    @Test(arguments: [ExportFormat.y4m, .matroska])
    func aDiskThatFillsUpMidExportFailsNamingTheFileAndTheErrno(format: ExportFormat) throws {
        let (stream, frames) = try frames()
        let output = TemporaryDirectory.shared.file("full-\(format.rawValue).\(format.fileExtension)")
        let disk = FaultInjectingFileSystem()
        var exporter = try makeExporter(
            format: format, stream: stream, destination: .path(output), fileSystem: disk)
        try writeFrames(Array(frames[0..<3]), layout: stream.layout, to: &exporter)
        disk.setDiskFull(true)
        let error = #expect(throws: ExportError.self) {
            try writeFrames(Array(frames[3...]), layout: stream.layout, to: &exporter)
            _ = try exporter.finish()
        }
        #expect(error?.destination == output)
        #expect(error?.message.contains(Errno(rawValue: ENOSPC).description) == true, "\(String(describing: error))")
        #expect(disk.failedWriteCount > 0)
    }

    /// Every write is cut short, at a different length each time (including writes that resume a short one, and
    /// the Matroska duration patched at the end): the file is still the same, byte for byte.
    @Test(arguments: [(ExportFormat.y4m, true), (.y4m, false), (.matroska, true), (.matroska, false)])
    func shortWritesStillProduceABitExactFile(format: ExportFormat, toFile: Bool) throws {
        let (stream, frames) = try frames(.nv12)
        let name = "short-\(format.rawValue)-\(toFile)"
        let reference = TemporaryDirectory.shared.file("\(name)-reference.\(format.fileExtension)")
        var plain = try makeExporter(format: format, stream: stream, destination: .path(reference))
        try writeFrames(frames, layout: stream.layout, to: &plain)
        _ = try plain.finish()

        let disk = FaultInjectingFileSystem()
        for number in 1...400 { disk.failWrite(number: number, with: .short(1 + (number * 7919) % 300_000)) }
        let output = TemporaryDirectory.shared.file("\(name).\(format.fileExtension)")
        let fd = toFile ? -1 : open(output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        defer { if fd >= 0 { close(fd) } }
        var exporter = try makeExporter(
            format: format, stream: stream,
            destination: toFile ? .path(output) : .fileDescriptor(FileDescriptor(rawValue: fd), name: "descriptor"),
            fileSystem: disk)
        try writeFrames(frames, layout: stream.layout, to: &exporter)
        let summary = try exporter.finish()
        #expect(disk.failedWriteCount > 8, "writes cut short: \(disk.failedWriteCount)")

        let written = try Data(contentsOf: URL(fileURLWithPath: output))
        #expect(Int64(written.count) == summary.bytes)
        #expect(written == (try Data(contentsOf: URL(fileURLWithPath: reference))))
        let md5s = try ExternalTools.frameMD5s(output)
        #expect(md5s.count == frames.count)
        #expect(md5s == (try ExternalTools.frameMD5s(reference)))
    }

    @Test func anIOErrorReadingAY4MInputNamesTheByteOffset() throws {
        let (stream, frames) = try frames()
        let input = TemporaryDirectory.shared.file("eio-input.y4m")
        var writer = try Y4MWriter(stream: stream, destination: .path(input))
        try writeFrames(frames, layout: stream.layout, to: &writer)
        _ = try writer.finish()
        let bytes = try Data(contentsOf: URL(fileURLWithPath: input))
        let headerLength = try #require(bytes.firstIndex(of: UInt8(ascii: "\n"))) + 1
        let record = "FRAME\n".utf8.count + stream.layout.byteCount

        let disk = FaultInjectingFileSystem()
        var reader = try Y4MReader(path: input, fileSystem: disk)
        var buffer = [UInt8](repeating: 0, count: stream.layout.byteCount)
        for frame in frames[0..<2] {
            let info = try buffer.withUnsafeMutableBytes { try reader.readFrame(into: $0) }
            #expect(info != nil && buffer == frame.bytes)
        }
        // The payload of frame 1 ended with a read straight into the caller's buffer, so the reader's own buffer
        // is empty and the next read starts at frame 2.
        disk.failNextRead(with: EIO)
        let error = #expect(throws: InputError.self) {
            _ = try buffer.withUnsafeMutableBytes { try reader.readFrame(into: $0) }
        }
        #expect(error?.input == input)
        #expect(error?.byteOffset == Int64(headerLength + 2 * record))
        #expect(error?.message.contains(Errno(rawValue: EIO).description) == true, "\(String(describing: error))")
    }

    @Test func writesToADescriptorTheExporterDidNotOpenGoThroughTheSeam() throws {
        let (stream, frames) = try frames()
        let output = TemporaryDirectory.shared.file("descriptor-full.y4m")
        let fd = open(output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        try #require(fd >= 0)
        defer { close(fd) }
        let disk = FaultInjectingFileSystem()
        disk.failWrite(number: 2, with: .error(EIO))
        var writer = try Y4MWriter(
            stream: stream, destination: .fileDescriptor(FileDescriptor(rawValue: fd), name: "pipe"), fileSystem: disk)
        let error = #expect(throws: ExportError.self) {
            try writeFrames(frames, layout: stream.layout, to: &writer)
        }
        #expect(error?.destination == "pipe")
        #expect(error?.message.contains(Errno(rawValue: EIO).description) == true, "\(String(describing: error))")
    }
}
