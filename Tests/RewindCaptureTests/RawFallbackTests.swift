import Foundation
import RewindCore
import RewindMedia
import RewindTesting
import SegmentStore
import Synchronization
import Testing

@testable import RewindCapture

/// Holds every compression back until opened (or until its deadline, so a broken test cannot hang).
private final class CompressionGate: Sendable {
    private let isOpen = Atomic<Bool>(false)
    private let compressions = Atomic<Int>(0)

    func open() { isOpen.store(true, ordering: .releasing) }

    /// Chunks that reached the gate.
    var count: Int { compressions.load(ordering: .relaxed) }

    func pass() {
        compressions.add(1, ordering: .relaxed)
        let deadline = ContinuousClock.now + .seconds(60)
        while !isOpen.load(ordering: .acquiring) && ContinuousClock.now < deadline { usleep(200) }
    }
}

@Suite(.timeLimit(.minutes(45))) struct RawFallbackTests {
    /// A recorder of a 320×240 camera at 30 fps into a fresh store opened with `options`, its budget `slabs` frames,
    /// and the camera's feed.
    private static func smallRecorder(
        window: Duration = .seconds(60), slabs: Int = 64, spill: SpillPolicy = .eager,
        options: StoreOptions = StoreOptions()
    ) throws -> (store: SegmentStore, recorder: Recorder, feed: CameraFeed, slab: Int) {
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store(), options: options)
        let feed = try CameraFeed(width: 320, height: 240, fps: 30)
        let slab = Recorder.smallestMemoryBudget(for: feed.stream.layout)
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: window, memoryBudget: slabs * slab, spill: spill))
        return (store, recorder, feed, slab)
    }

    /// A recorder of a 320×240 camera with a 60 s window and 64 slabs, whose store's compression waits at a gate.
    private static func gatedRecorder() throws -> (CompressionGate, SegmentStore, Recorder, slab: Int) {
        let gate = CompressionGate()
        var options = StoreOptions()
        options.beforeCompressingChunk = { gate.pass() }
        let (store, recorder, _, slab) = try smallRecorder(options: options)
        return (gate, store, recorder, slab)
    }

    /// A live producer (it never waits) runs ahead of a spill stage whose compression is held back: instead of
    /// dropping frames, the spill stage stores the frames it is far behind on raw, then compresses again as it
    /// catches up. Every frame is kept, read back bit-exact, and the raw share is counted.
    @Test func aSpillStageFallingBehindALiveSourceStoresRawChunksAndDropsNothing() throws {
        let (gate, store, recorder, slab) = try Self.gatedRecorder()
        var feed = try CameraFeed(width: 320, height: 240, fps: 30)
        #expect(recorder.encoderBytes > 0, "the encoder's buffer counts in the budget")
        #expect(recorder.memoryBudget(under: .normal) == 64 * slab)
        let frames = 40
        for _ in 0..<frames {
            let outcome = try feed.appendNext(to: recorder)
            #expect(outcome != .dropped(.spillBehind), "frame \(feed.index - 1) dropped")
        }
        gate.open()
        let statistics = try recorder.finish()
        #expect(statistics.drops.isEmpty, "\(statistics.drops)")
        #expect(statistics.framesDurable == frames)
        #expect(statistics.rawChunkBytesSpilled > 0, "frames far behind are stored raw")
        #expect(statistics.rawChunkBytesSpilled < statistics.rawBytesSpilled, "frames caught up with are compressed")
        #expect(gate.count > 0)

        var verified = 0
        try store.frames(in: Int64.min..<Int64.max) { view in
            let mark = SyntheticCamera.verify(view)
            #expect(mark != nil, "frame at \(view.info.ptsNanoseconds) ns is bit-exact")
            if let mark { #expect(feed.pts(mark.index) == view.info.ptsNanoseconds) }
            verified += 1
            return true
        }
        #expect(verified == frames)
        #expect(statistics.gaps == 0)
        let summary = try store.summary()
        #expect(summary.storedBytes < summary.rawBytes)
    }

    /// Under `drop-newest`, a frame that would move the window past frames not yet written (a source that jumps
    /// ahead, such as a paced pipe whose writer bursts, or the first frame accepted after drops on
    /// arrival) is dropped as `spill behind`, instead of the accepted frames leaving the ring unwritten (`evicted
    /// before spill`: a loss of accepted frames, which a live source's exit status does not count).
    @Test func aFrameThatWouldPushUnwrittenFramesOutOfTheWindowIsDroppedInstead() throws {
        let gate = CompressionGate()
        var options = StoreOptions()
        options.beforeCompressingChunk = { gate.pass() }
        let (_, recorder, _, _) = try Self.smallRecorder(window: .seconds(1), options: options)
        var feed = try CameraFeed(width: 320, height: 240, fps: 30)
        for index in 0..<10 {
            let outcome = try feed.appendNext(to: recorder)
            #expect(outcome != .dropped(.spillBehind), "frame \(index)")
        }
        // Two seconds on: the whole window, with every frame in it unwritten, would leave.
        #expect(try feed.appendNext(to: recorder, skip: 60) == .dropped(.spillBehind))
        gate.open()
        try waitUntil("the spill stage writes the accepted frames") { recorder.unspilledFrames == 0 }
        // Everything written, the window moves on as far as the source goes.
        #expect(try feed.appendNext(to: recorder, skip: 60) != .dropped(.spillBehind))
        let statistics = try recorder.finish()
        #expect(statistics.drops[.evictedBeforeSpill] == nil, "\(statistics.drops)")
        #expect(statistics.drops[.spillBehind] == 1, "\(statistics.drops)")
        #expect(statistics.framesDurable == 11)
    }

    /// With on-evict spill the frames within the lead are unwritten by design: a live source whose spill stage keeps
    /// up with what falls due has every chunk compressed (its frames are not behind, only not due yet).
    @Test func onEvictFramesThatAreNotLateAreCompressed() throws {
        // A budget of 60 frames for a window of 30: up to three quarters of the window (22 frames, fewer when the
        // producer's margin needs the room) stay unwritten until due.
        var (_, recorder, feed, _) = try Self.smallRecorder(window: .seconds(1), slabs: 60, spill: .onEvict)
        let kept = RecorderStream.unwrittenFramesKept(room: recorder.streams[0].framesInRing, queries: 0)
        for index in 0..<90 {
            #expect(try feed.appendNext(to: recorder) != .dropped(.spillBehind), "frame \(index)")
            try waitUntil("the spill stage writes what is due") { recorder.unspilledFrames <= UInt64(kept) }
        }
        let statistics = try recorder.finish()
        #expect(statistics.totalDrops == 0, "\(statistics.drops)")
        #expect(statistics.framesDurable == 90)
        #expect(
            statistics.rawChunkBytesSpilled == 0, "\(statistics.rawChunkBytesSpilled) of \(statistics.rawBytesSpilled)")
    }

    /// A producer that waits for the spill stage (a file input) never gets its frames stored raw, also before it
    /// first had to wait: the spill stage is far behind at once (its compression held back while the first frames
    /// come), and every chunk is still compressed.
    @Test func aWaitingProducersFramesAreCompressedFromTheFirstOn() throws {
        let (gate, _, recorder, _) = try Self.gatedRecorder()
        var feed = try CameraFeed(width: 320, height: 240, fps: 30)
        let opener = Thread {
            while gate.count == 0 { usleep(200) }
            usleep(300_000)
            gate.open()
        }
        opener.start()
        for _ in 0..<40 {
            recorder.waitForSpillRoom()
            let outcome = try feed.appendNext(to: recorder)
            #expect(outcome != .dropped(.spillBehind), "frame \(feed.index - 1) dropped")
        }
        gate.open()
        let statistics = try recorder.finish()
        #expect(statistics.drops.isEmpty, "\(statistics.drops)")
        #expect(statistics.framesDurable == 40)
        #expect(statistics.rawChunkBytesSpilled == 0, "a waiting producer's frames are all compressed")
    }

    /// A live producer runs ahead of a spill stage held back by a slow disk, not by compressing: raw chunks would
    /// only give the disk more to take, so every chunk is still compressed (and nothing is dropped while the ring
    /// has room).
    @Test func aSpillStageHeldBackByASlowDiskKeepsCompressing() throws {
        let disk = FaultInjectingFileSystem()
        var (store, recorder, feed, _) = try Self.smallRecorder(options: StoreOptions(fileSystem: disk))
        // 40 ms per write: a frame's raw bytes (115 KB, 3.5 MB/s at 30 fps) would take 350 ns per byte, more than
        // the stream's real time.
        disk.setWriteDelay(.milliseconds(40))
        let frames = 40
        for _ in 0..<frames {
            let outcome = try feed.appendNext(to: recorder)
            #expect(outcome != .dropped(.spillBehind), "frame \(feed.index - 1) dropped")
        }
        let behind = recorder.unspilledFrames
        #expect(behind > 64 / 8, "the spill stage is far behind (\(behind) frames), where it used to store raw")
        let statistics = try recorder.finish()
        disk.setWriteDelay(.zero)
        #expect(statistics.drops.isEmpty, "\(statistics.drops)")
        #expect(statistics.framesDurable == frames)
        #expect(statistics.rawChunkBytesSpilled == 0, "\(statistics.rawChunkBytesSpilled) bytes stored raw")
        var verified = 0
        try store.frames(in: Int64.min..<Int64.max) { view in
            #expect(SyntheticCamera.verify(view) != nil, "frame at \(view.info.ptsNanoseconds) ns is bit-exact")
            verified += 1
            return true
        }
        #expect(verified == frames)
    }

    /// The disk's pace is judged against every stream's raw frames, since they all go through one spill thread.
    @Test func rawChunksNeedTheDiskToTakeEveryStreamsRawFrames() {
        // 1 ns per byte: 500 MB/s of raw frames take half of each second, 1000 MB/s all of it.
        #expect(SpillLane.diskTakesRawFrames(rawBytesPerSecond: 500e6, ioNanoseconds: 1e6, ioBytes: 1e6))
        #expect(!SpillLane.diskTakesRawFrames(rawBytesPerSecond: 1000e6, ioNanoseconds: 1e6, ioBytes: 1e6))
        #expect(
            !SpillLane.diskTakesRawFrames(rawBytesPerSecond: 1e6, ioNanoseconds: 0, ioBytes: 0), "nothing timed yet")
        #expect(SpillLane.diskTakesRawFrames(rawBytesPerSecond: nil, ioNanoseconds: 1e9, ioBytes: 1), "rate unknown")
        let two = SpillStage.combinedRawBytesPerSecond([500e6, 500e6])
        #expect(two == 1000e6)
        #expect(!SpillLane.diskTakesRawFrames(rawBytesPerSecond: two, ioNanoseconds: 1e6, ioBytes: 1e6))
        #expect(SpillStage.combinedRawBytesPerSecond([nil, 3e6]) == 3e6)
        #expect(SpillStage.combinedRawBytesPerSecond([nil, nil]) == nil)
    }

    /// Critical memory pressure takes the encoder's buffer: frames are then stored raw, straight from the ring, and
    /// compressed again once the pressure is gone.
    @Test func criticalPressureStoresFramesRawUntilItPasses() throws {
        var (store, recorder, feed, _) = try Self.smallRecorder()
        func record(_ count: Int) throws {
            for _ in 0..<count {
                recorder.waitForSpillRoom()
                _ = try feed.appendNext(to: recorder)
            }
            while recorder.unspilledFrames > 0 { usleep(1000) }
        }
        try record(10)
        let compressed = recorder.statistics.rawChunkBytesSpilled
        recorder.setPressure(.critical)
        #expect(recorder.memoryBudget(under: .critical) < recorder.memoryBudget(under: .normal))
        try record(10)
        let underPressure = recorder.statistics.rawChunkBytesSpilled - compressed
        recorder.setPressure(.normal)
        try record(10)
        let statistics = try recorder.finish()
        #expect(underPressure >= Int64(9 * feed.stream.layout.byteCount), "frames under critical pressure are raw")
        #expect(statistics.rawChunkBytesSpilled - compressed - underPressure < Int64(5 * feed.stream.layout.byteCount))
        #expect(statistics.drops.isEmpty, "\(statistics.drops)")
        var verified = 0
        try store.frames(in: Int64.min..<Int64.max) { view in
            #expect(SyntheticCamera.verify(view) != nil)
            verified += 1
            return true
        }
        #expect(verified == 30)
    }

    /// A camera throttled to every other frame, then every fourth, then back to full rate and throttled again:
    /// each throttled stretch is one `input interval` gap, not one per skipped frame.
    @Test func aThrottledStretchIsOneGap() throws {
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        var feed = try CameraFeed()
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(60), memoryBudget: 64 << 20))
        func record(_ count: Int, skip: Int64) throws {
            for _ in 0..<count {
                recorder.waitForSpillRoom()
                _ = try feed.appendNext(to: recorder, skip: skip)
            }
        }
        try record(5, skip: 0)
        let firstStretch = feed.pts(feed.index - 1)
        try record(10, skip: 1)
        let firstEnd = feed.pts(feed.index - 1)
        try record(5, skip: 0)
        let secondStretch = feed.pts(feed.index - 1)
        try record(5, skip: 1)
        try record(5, skip: 3)
        let secondEnd = feed.pts(feed.index - 1)
        try record(3, skip: 0)
        let statistics = try recorder.finish()
        let gaps = try store.gaps()
        #expect(gaps.map(\.reason) == [.inputInterval, .inputInterval])
        #expect(gaps.map(\.startNanoseconds) == [firstStretch, secondStretch])
        #expect(gaps.map(\.endNanoseconds) == [firstEnd, secondEnd])
        #expect(statistics.gaps == 2)
        #expect(statistics.framesDurable == 33)
    }
}
