import Foundation
import Glibc
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import Testing

/// ``ClipSource/export(range:format:to:fileSystem:progress:)`` writes through the seam it is given.
@Suite struct ClipExportFaultTests {
    @Test(arguments: [ExportFormat.y4m, .matroska])
    func aDiskThatFillsUpMidExportLeavesNoPartialFile(format: ExportFormat) throws {
        var feed = try CameraFeed()
        let recorder = try Recorder(
            stream: feed.stream, store: nil,
            configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 64 << 20, spill: .off))
        for _ in 0..<150 { _ = try feed.appendNext(to: recorder) }
        let output = TemporaryDirectory.shared.file("clip-full.\(format.fileExtension)")
        let disk = FaultInjectingFileSystem()
        let error = #expect(throws: ExportError.self) {
            // 23 KiB frames through a 1 MiB buffer: the first writes reach the file before the disk fills up.
            _ = try ClipSource.recorder(recorder).export(
                range: 0..<Int64.max, format: format, to: .path(output), fileSystem: disk
            ) { count, _ in
                if count == 100 { disk.setDiskFull(true) }
            }
        }
        #expect(error?.destination == output)
        #expect(error?.message.contains(Errno(rawValue: ENOSPC).description) == true, "\(String(describing: error))")
        #expect(disk.writeCount > disk.failedWriteCount, "no write succeeded before the disk filled up")
        #expect(disk.failedWriteCount > 0)
        #expect(!FileManager.default.fileExists(atPath: output), "a partial \(output) was left behind")
    }
}
