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

@Suite(.timeLimit(.minutes(15))) struct FullDiskRecorderTests {
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
}
