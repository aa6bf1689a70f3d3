import Foundation
import RewindCapture
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

/// One 160x96 NV12 frame of ``CameraFeed`` takes one slab of six pages.
private let slab = Recorder.smallestMemoryBudget(for: try! FrameLayout(format: .nv12, width: 160, height: 96))

/// Records `frames` frames as a file input does (waiting for room before each), failing instead of hanging when a
/// wait does not end within ten seconds.
private func recordWaiting(
    _ frames: Int, into recorder: Recorder, feed: inout CameraFeed, label: String
) throws {
    for _ in 0..<frames {
        let deadline = ContinuousClock.now + .seconds(10)
        recorder.waitForSpillRoom(until: { ContinuousClock.now > deadline })
        try #require(ContinuousClock.now <= deadline, "\(label): the producer waited 10 s for room")
        if case .dropped(let reason) = try feed.appendNext(to: recorder) {
            Issue.record("\(label): frame \(feed.index - 1) dropped (\(reason)) although the producer waited")
        }
    }
}

@Suite(.timeLimit(.minutes(45))) struct SmallRingTests {
    /// Every ring from one slab to a few frames, under every pressure level and both spill policies that write:
    /// a waiting producer writes through and keeps every frame.
    @Test(arguments: 1...6, MemoryPressure.allCases)
    func aWaitingProducerRecordsEveryFrameInARingOfAFewSlabs(slabs: Int, pressure: MemoryPressure) throws {
        for spill in [SpillPolicy.eager, .onEvict] {
            var feed = try CameraFeed()
            let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
            let recorder = try Recorder(
                stream: feed.stream, store: store,
                configuration: RecorderConfiguration(window: .seconds(60), memoryBudget: slabs * slab, spill: spill))
            let label = "\(slabs) slabs, \(pressure), \(spill)"
            try recordWaiting(5, into: recorder, feed: &feed, label: label)
            recorder.setPressure(pressure)
            #expect(recorder.framesInRing >= 1, "\(label): critical pressure keeps at least one frame")
            try recordWaiting(30, into: recorder, feed: &feed, label: label)
            recorder.setPressure(.normal)
            try recordWaiting(5, into: recorder, feed: &feed, label: label)
            let statistics = try recorder.finish()
            #expect(statistics.drops.isEmpty, "\(label): \(statistics.drops)")
            #expect(statistics.framesDurable == 40, "\(label)")
        }
    }

    /// Windows of half a frame, one and two frames, with a budget of many: the newest frame always stays, and a
    /// waiting producer writes through.
    @Test(arguments: [1, 2, 4], MemoryPressure.allCases)
    func aWaitingProducerRecordsEveryFrameInAWindowOfAFrameOrTwo(halfFrames: Int, pressure: MemoryPressure) throws {
        var feed = try CameraFeed()
        let frame = feed.pts(1) - feed.pts(0)
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(
                window: .nanoseconds(frame * Int64(halfFrames) / 2), memoryBudget: 64 * slab))
        recorder.setPressure(pressure)
        try recordWaiting(40, into: recorder, feed: &feed, label: "window of \(halfFrames) half frames, \(pressure)")
        let statistics = try recorder.finish()
        #expect(statistics.drops.isEmpty, "\(statistics.drops)")
        #expect(statistics.framesDurable == 40)
    }

    /// With no slab in the budget, waiting cannot help: the wait returns at once and the ring drops the frame on
    /// the memory budget (counted), never as spill behind.
    @Test func aBudgetWithoutASlabDropsOnArrivalWithoutWaiting() throws {
        var feed = try CameraFeed()
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let recorder = try Recorder(
            stream: feed.stream, store: store, configuration: RecorderConfiguration(memoryBudget: slab - 4096))
        #expect(recorder.framesInRing == 0)
        let started = ContinuousClock.now
        recorder.waitForSpillRoom()
        #expect(ContinuousClock.now - started < .seconds(1))
        #expect(try feed.appendNext(to: recorder) == .dropped(.memoryBudget))
        let statistics = try recorder.finish()
        #expect(statistics.drops == [.memoryBudget: 1])
    }

    /// A stop request ends the wait while the spill stage is stalled on a slow disk, within a bounded time.
    @Test func aStopRequestEndsTheWaitWhileTheSpillStageIsStalled() throws {
        var feed = try CameraFeed()
        let disk = GatedFileSystem()
        defer { disk.open() }
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(fileSystem: disk))
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(60), memoryBudget: 2 * slab))
        disk.close()
        _ = try feed.appendNext(to: recorder)
        try waitUntil("the spill stage is stalled writing the first frame") {
            disk.waitedWrites.load(ordering: .relaxed) > 0
        }
        let started = ContinuousClock.now
        recorder.waitForSpillRoom(until: { ContinuousClock.now - started > .milliseconds(100) })
        let waited = ContinuousClock.now - started
        #expect(waited >= .milliseconds(100), "the producer had no room while the only frame was unwritten")
        #expect(waited < .seconds(2), "the stop request ended the wait")
        disk.open()
        let statistics = try recorder.finish()
        #expect(statistics.framesDurable == 1)
    }
}
