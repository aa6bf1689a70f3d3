import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite(.timeLimit(.minutes(45))) struct SegmentFailureTests {
    @Test func diskFullClosesTheSegmentCleanlyAndWritingResumesInANewOne() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .nv12, width: 160, height: 120)
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let store = try SegmentStore.open(
            directory: dir.path,
            options: StoreOptions(keyInterval: 5, workerCount: 2, syncInterval: .nanoseconds(1), fileSystem: fs))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<20 { try writer.append(frames.frame(i)) }
        // Syncs run beside the appends: the last ones may still be running.
        try writer.sync()
        #expect(writer.durableFrameCount == 20)
        fs.setDiskFull(true)
        #expect {
            try writer.append(frames.frame(20))
        } throws: { error in
            let message = "\(error)"
            return message.contains(
                "disk full while writing segment 000001.seg.partial: 20 of its frames are durable, the stream's up "
                    + "to pts 0.633s (")
                && !message.contains("--disk")
        }
        // Still full: no new segment can start; nothing is left behind.
        #expect(throws: SegmentStoreError.self) { try writer.append(frames.frame(21)) }
        #expect(dir.segmentFiles() == ["000001.seg.partial"], "sealing needs space too; the partial stays valid")
        fs.setDiskFull(false)
        for i in 22..<30 { try writer.append(frames.frame(i)) }
        try writer.close()
        #expect(dir.segmentFiles().allSatisfy { $0.hasSuffix(".seg") }, "\(dir.segmentFiles())")
        let read = try readAll(store)
        let expected = Array(0..<20) + Array(22..<30)
        #expect(read.map(\.0) == expected.map { frames.pts($0) })
        for ((_, digest), i) in zip(read, expected) { #expect(digest == frames.expectedDigest(i)) }
        #expect(try store.verify(repair: false).clean)
    }

    @Test func shortWriteThenErrorCutsBackToTheLastGoodRecord() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .i420, width: 160, height: 120)
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(keyInterval: 4, workerCount: 1, fileSystem: fs))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<6 { try writer.append(frames.frame(i)) }
        let next = fs.writeCount + 1
        fs.failWrite(number: next, with: .short(100))
        fs.failWrite(number: next + 1, with: .error(EIO))
        #expect {
            try writer.append(frames.frame(6))
        } throws: { error in
            guard case SegmentStoreError.writeFailed(let file, let durable, let pts, _) = error else { return false }
            return file == "000001.seg.partial" && durable == 6 && pts == frames.pts(5)
        }
        for i in 7..<10 { try writer.append(frames.frame(i)) }
        try writer.close()
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg"])
        #expect(try readAll(store).map(\.0) == ([0, 1, 2, 3, 4, 5, 7, 8, 9]).map { frames.pts($0) })
        #expect(try store.verify(repair: false).clean)
    }

    @Test func failedSyncDropsOnlyWhatWasNotDurable() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 64, height: 48)
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let store = try SegmentStore.open(
            directory: dir.path,
            options: StoreOptions(workerCount: 1, syncInterval: .nanoseconds(Int64.max), fileSystem: fs))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<5 { try writer.append(frames.frame(i)) }
        try writer.sync()
        for i in 5..<9 { try writer.append(frames.frame(i)) }
        // One failure is enough: after a failed fdatasync the writer does not trust a second one (the kernel may
        // have dropped the pages it could not write), it cuts back to what was durable.
        fs.failNextSync(with: EIO)
        #expect(throws: SegmentStoreError.self) { try writer.sync() }
        #expect(writer.durableFrameCount == 5)
        #expect(writer.lastDurablePTS == frames.pts(4))
        try writer.append(frames.frame(9))
        try writer.close()
        #expect(try readAll(store).map(\.0) == [0, 1, 2, 3, 4, 9].map { frames.pts($0) })
    }

    /// Needs root to mount a tmpfs: skipped, with that reason, for other users; a root that cannot mount fails.
    @Test(.enabled(if: getuid() == 0, "mounting a small tmpfs to fill up needs root"))
    func realFullFilesystemOnTmpfs() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.segments, withIntermediateDirectories: true)
        let mount = try ExternalTools.execute(
            "/bin/mount", ["-t", "tmpfs", "-o", "size=16m", "tmpfs", dir.segments], timeout: .seconds(30))
        try #require(mount.status == 0, "mount -t tmpfs failed as root: \(mount.stderr)")
        defer { _ = try? ExternalTools.execute("/bin/umount", [dir.segments], timeout: .seconds(30)) }
        // A filler file takes half the space; deleting it later frees the disk. Of the 8 MiB left, the writer keeps
        // the index's reserve free.
        let filler = dir.segments + "/filler"
        try writeFile(filler, [UInt8](repeating: 7, count: 8 << 20))
        let frames = try TestFrames(format: .nv12, width: 320, height: 240)
        defer { frames.deallocate() }
        let store = try SegmentStore.open(
            directory: dir.path,
            options: StoreOptions(
                keyInterval: 5, workerCount: 2, syncInterval: .nanoseconds(1), codecPolicy: .forced(.raw)))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        var i = 0
        var failure: (any Error)?
        while i < 200 {
            do {
                try writer.append(frames.frame(i))
                i += 1
            } catch {
                failure = error
                break
            }
        }
        let full = try #require(failure as? SegmentStoreError, "8 MiB must fill up")
        try #require(i > 0, "frames fit before the index's reserve: \(full)")
        guard case .diskFull(_, let durable, let pts, _) = full else {
            Issue.record("expected disk full, got \(full)")
            return
        }
        #expect(durable == i)
        #expect(pts == frames.pts(i - 1))
        #expect(
            "\(full)".contains("of its frames are durable, the stream's up to pts ") && !"\(full)".contains("--disk"))
        // In seconds, as the command line writes times (it gave raw nanoseconds).
        let milliseconds = frames.pts(i - 1) / 1_000_000
        let seconds = "\(milliseconds / 1000)." + String(String(milliseconds % 1000 + 1000).dropFirst()) + "s"
        #expect("\(full)".contains("up to pts \(seconds)") && !"\(full)".contains(" ns"), "\(full)")
        // The refusal says what it found, not a failed call: how much is free and what a frame needs.
        #expect("\(full)".contains(" KiB free, a frame needs ") && !"\(full)".contains("statvfs"), "\(full)")
        try FileManager.default.removeItem(atPath: filler)
        for j in (i + 1)..<(i + 6) { try writer.append(frames.frame(j)) }
        try writer.close()
        let read = try readAll(store)
        let expected = Array(0..<i) + Array((i + 1)..<(i + 6))
        #expect(read.map(\.0) == expected.map { frames.pts($0) })
        for ((_, digest), n) in zip(read, expected) { #expect(digest == frames.expectedDigest(n)) }
        #expect(try store.verify(repair: false).clean)
    }
}
