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

    /// A failed export of several streams to a file each names the requested file of the stream it failed in, not
    /// the temporary name that file was written under, and leaves none of the files.
    @Test func aFailedExportOfAFilePerStreamNamesTheRequestedFile() throws {
        var feeds = [try CameraFeed(), try CameraFeed()]
        let recorder = try Recorder(
            streams: [
                RecorderStreamSpec(name: "front", stream: feeds[0].stream),
                RecorderStreamSpec(name: "rear", stream: feeds[1].stream),
            ], store: nil,
            configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 64 << 20, spill: .off))
        for _ in 0..<60 {
            for index in feeds.indices { _ = try feeds[index].appendNext(to: recorder.streams[index]) }
        }
        let directory = TemporaryDirectory.shared.file("several-full")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let output = directory + "/clip.y4m"
        let disk = FaultInjectingFileSystem()
        let error = #expect(throws: ExportError.self) {
            _ = try StreamSet(recorder: recorder).export(
                range: 0..<(1 << 40), format: .y4m, to: .path(output), fileSystem: disk
            ) { count in
                if count == 80 { disk.setDiskFull(true) }
            }
        }
        #expect(error?.destination == StreamSet.fileName(for: output, stream: "rear"), "\(String(describing: error))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty)
    }

    /// A failed export to an existing file leaves that file as it was: the export wrote a temporary file beside
    /// it, which is removed.
    @Test func aFailedExportKeepsTheFileItWouldHaveReplaced() throws {
        let recorder = try recorderHolding(frames: 60)
        let directory = TemporaryDirectory.shared.file("staged-failure")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let output = directory + "/clip.mkv"
        let before = Array("an earlier clip".utf8)
        _ = FileManager.default.createFile(atPath: output, contents: Data(before))
        let disk = FaultInjectingFileSystem()
        #expect(throws: ExportError.self) {
            _ = try ClipSource.recorder(recorder).export(
                range: 0..<Int64.max, format: .matroska, to: .path(output), fileSystem: disk
            ) { count, _ in
                if count == 30 { disk.setDiskFull(true) }
            }
        }
        #expect(FileManager.default.contents(atPath: output) == Data(before), "the earlier file was changed")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["clip.mkv"])
    }

    /// While an export runs, the requested name does not exist yet (or holds the earlier file); the finished file
    /// appears under it at once, and the summary names it.
    @Test(arguments: ExportFormat.allCases)
    func aFinishedExportAppearsUnderItsNameOnly(format: ExportFormat) throws {
        let recorder = try recorderHolding(frames: 30)
        let directory = TemporaryDirectory.shared.file("staged-\(format.fileExtension)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let output = directory + "/clip.\(format.fileExtension)"
        var seenDuringExport: [String] = []
        let summary = try ClipSource.recorder(recorder).export(
            range: 0..<Int64.max, format: format, to: .path(output)
        ) { count, _ in
            if count == 10 {
                seenDuringExport = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            }
        }
        #expect(summary.path == output)
        // ffmpeg creates its output only once it has read enough frames; the other writers at once.
        let expected = format == .mp4 ? 0...1 : 1...1
        #expect(expected.contains(seenDuringExport.count), "\(seenDuringExport)")
        #expect(seenDuringExport.allSatisfy { $0.hasPrefix(".clip.\(format.fileExtension).partial-") })
        #expect(!seenDuringExport.contains("clip.\(format.fileExtension)"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["clip.\(format.fileExtension)"])
        if format != .mp4 {
            let size = try FileManager.default.attributesOfItem(atPath: output)[.size] as? NSNumber
            #expect(size?.int64Value == summary.bytes)
        }
    }

    /// A destination that is not a regular file is written in place, never replaced.
    @Test func anExportToADeviceWritesIntoIt() throws {
        let recorder = try recorderHolding(frames: 10)
        let summary = try ClipSource.recorder(recorder).export(
            range: 0..<Int64.max, format: .y4m, to: .path("/dev/null"))
        #expect(summary.frames == 10)
        var info = stat()
        #expect(stat("/dev/null", &info) == 0 && (info.st_mode & S_IFMT) == S_IFCHR, "/dev/null was replaced")
    }

    private func recorderHolding(frames: Int) throws -> Recorder {
        var feed = try CameraFeed()
        let recorder = try Recorder(
            stream: feed.stream, store: nil,
            configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 64 << 20, spill: .off))
        for _ in 0..<frames { _ = try feed.appendNext(to: recorder) }
        return recorder
    }
}
