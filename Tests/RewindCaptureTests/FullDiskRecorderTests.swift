import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite(.timeLimit(.minutes(45))) struct FullDiskRecorderTests {
    @Test func framesLostAtTheStartAndAtTheEndAreGapsToo() throws {
        var feed = try CameraFeed()
        let disk = FaultInjectingFileSystem()
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(fileSystem: disk))
        let recorder = try Recorder(
            stream: feed.stream, store: store, configuration: RecorderConfiguration(memoryBudget: 16 << 20))
        disk.setDiskFull(true)
        for _ in 0..<5 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        disk.setDiskFull(false)
        for _ in 0..<10 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        disk.setDiskFull(true)
        for _ in 0..<7 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        // The disk has room for the seal again, but no frame is written after the lost ones: the tail is a gap.
        disk.setDiskFull(false)
        let statistics = try recorder.finish()
        #expect(statistics.drops[.diskError] == 12)
        #expect(statistics.lastWriteErrno == Errno(rawValue: ENOSPC))
        #expect(statistics.framesDurable == 10)
        let gaps = try store.gaps().map { ($0.startNanoseconds, $0.endNanoseconds, $0.reason) }
        #expect(gaps.count == 2, "\(gaps)")
        #expect(gaps.first.map { $0.0 == feed.pts(0) && $0.1 == feed.pts(5) && $0.2 == .diskError } == true)
        #expect(gaps.last.map { $0.0 == feed.pts(14) && $0.1 == feed.pts(22) && $0.2 == .diskError } == true)
        #expect(try store.drops()[.diskError] == 12)
        let report = try store.verify(repair: false)
        #expect(report.clean, "\(report.problems)")
        #expect(try store.segments().map(\.fileName) == ["000001.seg"])
    }

    /// A continued recording whose first frames are lost to a full disk: the pause since the earlier recording is a
    /// `recorder stopped` gap, and the loss a `disk error` gap from its first lost frame (the whole pause was called
    /// a disk error, and a clip inside it said its frames were lost).
    @Test func aContinuedRecordingsFirstFramesLostLeaveThePauseAPause() throws {
        let directory = try TemporaryDirectory.store()
        let disk = FaultInjectingFileSystem()
        let configuration = RecorderConfiguration(memoryBudget: 16 << 20)
        do {
            var feed = try CameraFeed()
            let store = try SegmentStore.open(directory: directory, options: StoreOptions(fileSystem: disk))
            let recorder = try Recorder(stream: feed.stream, store: store, configuration: configuration)
            for _ in 0..<10 { _ = try feed.appendNext(to: recorder) }
            _ = try recorder.finish()
        }
        var feed = try CameraFeed()
        let store = try SegmentStore.open(directory: directory, options: StoreOptions(fileSystem: disk))
        let lastBefore = try #require(try store.summary().lastPTS)
        let recorder = try Recorder(stream: feed.stream, store: store, configuration: configuration)
        disk.setDiskFull(true)
        for _ in 0..<5 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        disk.setDiskFull(false)
        for _ in 0..<10 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        let statistics = try recorder.finish()
        #expect(statistics.drops[.diskError] == 5)
        let offset = try #require(recorder.streams[0].sessionOffsetNanoseconds)
        let gaps = try store.gaps().map { ($0.startNanoseconds, $0.endNanoseconds, $0.reason) }
        #expect(gaps.count == 2, "\(gaps)")
        #expect(gaps.first.map { $0 == (lastBefore, feed.pts(0) + offset, .recorderStopped) } == true, "\(gaps)")
        #expect(gaps.last.map { $0 == (feed.pts(0) + offset, feed.pts(5) + offset, .diskError) } == true, "\(gaps)")
    }
}

@Suite(.timeLimit(.minutes(45))) struct FailedSyncRecorderTests {
    /// Syncs run beside the spill: one that fails after more frames were written cuts those frames off. They are
    /// counted as disk-error drops and a gap, never reported durable, and recording goes on in a new segment.
    @Test func framesCutOffByAFailedSyncAreCountedAndAGap() throws {
        var feed = try CameraFeed()
        let disk = FaultInjectingFileSystem()
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(),
            options: StoreOptions(syncInterval: .nanoseconds(1), fileSystem: disk))
        let recorder = try Recorder(
            stream: feed.stream, store: store, configuration: RecorderConfiguration(memoryBudget: 16 << 20))
        for _ in 0..<10 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        // A paused camera's frames become durable without a next frame (the lane syncs them when idle).
        try waitUntil("the first ten frames are durable") { recorder.statistics.framesDurable == 10 }
        #expect(try store.summary().frames == 10)
        disk.holdSyncs(true)
        disk.failNextSync(with: EIO)
        for _ in 10..<15 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        try waitUntil("a sync is waiting for the disk") { disk.heldSyncCount == 1 }
        #expect(recorder.statistics.framesDurable == 10)
        disk.holdSyncs(false)
        try waitUntil("the failed sync is counted") { recorder.statistics.drops[.diskError] == 5 }
        #expect(recorder.statistics.framesDurable == 10)
        for _ in 15..<20 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        let statistics = try recorder.finish()
        #expect(statistics.framesDurable == 15)
        #expect(statistics.drops[.diskError] == 5)
        #expect(statistics.framesDurable + statistics.totalDrops == 20, "every frame is durable or counted")
        #expect(statistics.lastError?.contains("fdatasync") == true, "\(statistics.lastError ?? "")")
        let gaps = try store.gaps().map { ($0.startNanoseconds, $0.endNanoseconds, $0.reason) }
        #expect(gaps.count == 1, "\(gaps)")
        #expect(gaps.first.map { $0.0 == feed.pts(9) && $0.1 == feed.pts(15) && $0.2 == .diskError } == true)
        #expect(try store.drops()[.diskError] == 5)
        #expect(try store.segments().map(\.fileName) == ["000001.seg", "000002.seg"])
        let report = try store.verify(repair: false)
        #expect(report.clean, "\(report.problems)")
        var read: [Int64] = []
        try store.frames(in: 0..<Int64.max) { frame in
            read.append(frame.info.ptsNanoseconds)
            return true
        }
        #expect(read == (Array(0..<10) + Array(15..<20)).map { feed.pts($0) })
    }
}
