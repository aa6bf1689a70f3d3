import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore
import Synchronization
import Testing

/// A file system whose writes wait while a gate is closed: a spill stage stalled on a slow disk.
///
/// A write waits at most two minutes, then goes ahead: a test that fails before it opens the gate cannot leave the
/// spill thread, and the recorder's `finish()`, waiting for ever.
final class GatedFileSystem: FileSystem {
    private let base = POSIXFileSystem()
    private let isOpen = Atomic<Bool>(true)
    /// Writes that found the gate closed and waited.
    let waitedWrites = Atomic<Int>(0)

    func close() { isOpen.store(false, ordering: .releasing) }
    func open() { isOpen.store(true, ordering: .releasing) }

    private func waitForGate() {
        guard !isOpen.load(ordering: .acquiring) else { return }
        waitedWrites.add(1, ordering: .relaxed)
        try? waitUntil("the test opens the gate", timeout: .seconds(120)) { isOpen.load(ordering: .acquiring) }
    }

    func open(_ path: String, flags: Int32, mode: mode_t) throws(FileSystemError) -> Int32 {
        try base.open(path, flags: flags, mode: mode)
    }
    func close(_ fd: Int32) { base.close(fd) }
    func close(_ fd: Int32, path: String) throws(FileSystemError) { try base.close(fd, path: path) }
    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, offset: Int64, path: String) throws(FileSystemError)
        -> Int
    {
        waitForGate()
        return try base.pwrite(fd, bytes, offset: offset, path: path)
    }
    func writev(_ fd: Int32, _ buffers: UnsafeBufferPointer<iovec>, offset: Int64?, path: String)
        throws(FileSystemError) -> Int
    {
        waitForGate()
        return try base.writev(fd, buffers, offset: offset, path: path)
    }
    func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, path: String) throws(FileSystemError) -> Int {
        try base.read(fd, into: buffer, path: path)
    }
    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, offset: Int64, path: String)
        throws(FileSystemError) -> Int
    {
        try base.pread(fd, into: buffer, offset: offset, path: path)
    }
    func fsync(_ fd: Int32, path: String) throws(FileSystemError) { try base.fsync(fd, path: path) }
    func fdatasync(_ fd: Int32, path: String) throws(FileSystemError) { try base.fdatasync(fd, path: path) }
    func ftruncate(_ fd: Int32, length: Int64, path: String) throws(FileSystemError) {
        try base.ftruncate(fd, length: length, path: path)
    }
    func reserve(_ fd: Int32, offset: Int64, length: Int64, path: String) throws(FileSystemError) -> Bool {
        try base.reserve(fd, offset: offset, length: length, path: path)
    }
    func size(_ fd: Int32, path: String) throws(FileSystemError) -> Int64 { try base.size(fd, path: path) }
    func isRegularFile(_ fd: Int32, path: String) throws(FileSystemError) -> Bool {
        try base.isRegularFile(fd, path: path)
    }
    func rename(_ from: String, to: String) throws(FileSystemError) { try base.rename(from, to: to) }
    func unlink(_ path: String) throws(FileSystemError) { try base.unlink(path) }
    func makeDirectory(_ path: String, mode: mode_t) throws(FileSystemError) {
        try base.makeDirectory(path, mode: mode)
    }
    func contentsOfDirectory(_ path: String) throws(FileSystemError) -> [String] {
        try base.contentsOfDirectory(path)
    }
    func flock(_ fd: Int32, operation: Int32, path: String) throws(FileSystemError) -> Bool {
        try base.flock(fd, operation: operation, path: path)
    }
    func availableBytes(_ path: String) throws(FileSystemError) -> Int64 { try base.availableBytes(path) }
    func fileExists(_ path: String) -> Bool { base.fileExists(path) }
}

/// Frame indexes (from the synthetic mark) of every frame a query returns; records an issue for any frame that is
/// not bit-exact.
func verifiedIndexes(_ recorder: Recorder, _ range: Range<Int64>) throws -> (indexes: [Int64], split: QuerySplit) {
    var indexes: [Int64] = []
    let split = try recorder.frames(in: range) { view in
        guard let mark = SyntheticCamera.verify(view) else {
            Issue.record("frame at \(view.info.ptsNanoseconds) ns is not bit-exact")
            return false
        }
        indexes.append(mark.index)
        return true
    }
    return (indexes, split)
}

/// Waits until the spill stage has written every frame the recorder accepted.
func waitUntilSpilled(_ recorder: Recorder, file: String = #fileID, line: Int = #line) throws {
    try waitUntil("the spill stage has written every accepted frame", file: file, line: line) {
        recorder.unspilledFrames == 0
    }
}

/// The index (from the synthetic mark's frame numbering) of the oldest frame in the ring.
func oldestIndexInRing(_ recorder: Recorder, _ feed: CameraFeed) throws -> Int64 {
    let first = try #require(recorder.ring.statistics.firstPTSNanoseconds, "the ring is empty")
    return try #require((0..<feed.index).first { feed.pts($0) == first }, "no frame has pts \(first)")
}

@Suite(.timeLimit(.minutes(45))) struct RecorderTests {
    @Test func queriesMergeDiskAndMemoryExactlyOnceWhileRecording() throws {
        var feed = try CameraFeed()
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(segmentMaxDuration: .milliseconds(500)))
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(1), memoryBudget: 64 << 20))
        for _ in 0..<600 {
            recorder.waitForSpillRoom()
            let outcome = try feed.appendNext(to: recorder)
            #expect(outcome == .stored(sequence: UInt64(feed.index)))
        }

        // Ring: the last second; disk: everything. A range across the boundary comes from both, once each: what
        // the ring still holds from memory, the rest from disk.
        try waitUntilSpilled(recorder)
        let oldestInRing = try oldestIndexInRing(recorder, feed)
        #expect((539...540).contains(oldestInRing), "the ring holds the last second (60 frames at 60 fps)")
        let (indexes, split) = try verifiedIndexes(recorder, feed.pts(7)..<feed.pts(590))
        #expect(indexes == Array(7..<590))
        #expect(split.fromDisk == Int(oldestInRing - 7) && split.fromMemory == Int(590 - oldestInRing), "\(split)")

        // A range held in memory decodes nothing from disk, even when it starts between two frames.
        let decodedBefore = store.framesDecoded
        let (inMemory, memorySplit) = try verifiedIndexes(recorder, (feed.pts(560) - 1000)..<feed.pts(600))
        #expect(inMemory == Array(560..<600) && memorySplit.fromDisk == 0)
        #expect(store.framesDecoded == decodedBefore, "a query held in memory decoded frames from disk")

        // Keep recording on another thread while querying ranges that cross the moving boundary.
        let produced = DispatchSemaphore(value: 0)
        let producer = Thread { [feed] in
            var feed = feed
            for _ in 0..<600 {
                recorder.waitForSpillRoom()
                _ = try? feed.appendNext(to: recorder)
            }
            produced.signal()
        }
        producer.start()
        var checks = 0
        while checks < 40 {
            let newest = recorder.ring.statistics.newestSequence.map { Int64($0) } ?? 0
            let start = max(0, newest - 90 - Int64(checks % 7))
            let end = newest - Int64(checks % 5)
            let (got, _) = try verifiedIndexes(recorder, feed.pts(start)..<feed.pts(end))
            #expect(got == Array(start..<end), "range [\(start), \(end)) frames")
            checks += 1
        }
        try wait(for: produced, until: "the producer thread has appended 600 more frames")
        let statistics = try recorder.finish()
        #expect(statistics.framesAccepted == 1200)
        #expect(statistics.framesDurable == 1200)
        #expect(statistics.totalDrops == 0)
        let (all, _) = try verifiedIndexes(recorder, 0..<feed.pts(1200))
        #expect(all == Array(0..<1200))
    }

    /// A query slower than the camera, over everything in memory: it pins a few frames at a time, reads what the
    /// ring evicted meanwhile from disk, and the producer never drops a frame because of it.
    ///
    /// The camera is driven by the query itself, so the interleaving is the same on every run: for each frame the
    /// query delivers, two new frames arrive (a live camera: it never waits for room), and the spill stage writes
    /// them before the query goes on. The ring holds 64 frames; the query pins 8 at a time.
    @Test func aSlowQueryOverTheWholeRingNeverMakesTheProducerDrop() throws {
        var feed = try CameraFeed()
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let slab = (feed.stream.layout.byteCount + 4095) / 4096 * 4096
        // The spill encoder's output buffer counts in the budget too.
        let encoder = store.encoderOutputBytes(for: feed.stream.layout)
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 64 * slab + encoder))
        #expect(recorder.encoderBytes == encoder)
        for _ in 0..<100 {
            recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: recorder)
        }
        try waitUntilSpilled(recorder)
        // Frames 0…35 are on disk only, 36…99 in the ring too.
        #expect(recorder.ring.statistics.frames == 64)
        #expect(try oldestIndexInRing(recorder, feed) == 36)
        var indexes: [Int64] = []
        var outcomes: [AppendOutcome] = []
        let split = try recorder.frames(in: 0..<feed.pts(100)) { view in
            if let mark = SyntheticCamera.verify(view) { indexes.append(mark.index) }
            if outcomes.count < 150 {
                for _ in 0..<2 { outcomes.append(try feed.appendNext(to: recorder)) }
                try waitUntilSpilled(recorder)
            }
            return true
        }
        let statistics = try recorder.finish()
        #expect(indexes == Array(0..<100))
        #expect(outcomes.count == 150)
        #expect(outcomes.allSatisfy { if case .stored = $0 { true } else { false } }, "\(outcomes)")
        // 36 frames from disk; by then the 72 new frames have pushed 36…43 out (they stay readable, pinned) and
        // all the rest of 44…99, so everything after the first batch comes from disk too.
        #expect(split.fromDisk == 92 && split.fromMemory == 8, "\(split)")
        #expect(statistics.totalDrops == 0, "\(statistics.drops)")
        #expect(statistics.framesDurable == 250)
    }

    @Test func lastRangeIsTheNewestFramesOnly() throws {
        var feed = try CameraFeed()
        let recorder = try Recorder(
            stream: feed.stream, store: nil,
            configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 64 << 20, spill: .off))
        for _ in 0..<400 { _ = try feed.appendNext(to: recorder) }
        let range = try #require(try recorder.lastRange(.seconds(5)))
        let (indexes, split) = try verifiedIndexes(recorder, range)
        #expect(indexes == Array(100..<400))
        #expect(split.fromDisk == 0)
    }

    /// Frames dropped on arrival at the very end, with no frame stored after them, still get their gap when the
    /// recorder finishes: from the last frame written, with their reason.
    @Test func dropsAtTheEndOfARecordingGetTheirGap() throws {
        var feed = try CameraFeed()
        let disk = GatedFileSystem()
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(fileSystem: disk))
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(60), memoryBudget: 40 * 16 * 4096))
        disk.close()
        defer { disk.open() }
        var stored = 0
        for _ in 0..<300 where try feed.appendNext(to: recorder) != .dropped(.spillBehind) { stored += 1 }
        #expect(stored < 300)
        disk.open()
        let statistics = try recorder.finish()
        #expect(statistics.framesDurable == stored)
        let gaps = try store.gaps()
        #expect(gaps.count == 1, "\(gaps)")
        #expect(gaps.first?.reason == .spillBehind)
        #expect(gaps.first?.startNanoseconds == feed.pts(Int64(stored - 1)))
    }

    @Test func dropNewestBackpressureNeverBlocksTheProducerAndCountsEveryDrop() throws {
        var feed = try CameraFeed()
        let disk = GatedFileSystem()
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(fileSystem: disk))
        let budget = 40 * 16 * 4096  // about 40 frames of 160x96 NV12 (one 24 KiB slab each)
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(60), memoryBudget: budget))
        disk.close()
        defer { disk.open() }
        var stored = 0
        var dropped = 0
        for _ in 0..<300 {
            switch try feed.appendNext(to: recorder) {
            case .stored: stored += 1
            case .dropped: dropped += 1
            }
        }
        // Every append returned while the disk was stalled: the producer never waited on it (the spill stage did).
        try waitUntil("the spill stage reached the stalled disk") { disk.waitedWrites.load(ordering: .relaxed) > 0 }
        #expect(stored + dropped == 300)
        #expect(dropped > 200)
        #expect(recorder.statistics.drops[.spillBehind] == dropped)
        // After the stall: a frame resumes the stream, and the gap is on record.
        disk.open()
        try waitUntilSpilled(recorder)
        _ = try feed.appendNext(to: recorder)
        let statistics = try recorder.finish()
        #expect(statistics.framesDurable == stored + 1, "every accepted frame is durable")
        let gaps = try store.gaps()
        #expect(gaps.contains { $0.reason == .spillBehind })
        #expect(try store.drops()[.spillBehind] == dropped)
        let (indexes, _) = try verifiedIndexes(recorder, 0..<Int64.max)
        #expect(indexes.count == stored + 1)
        #expect(indexes.first == 0)
    }

    /// The drop counters reach the store while the recorder runs (every second), not only when it stops: a
    /// recorder killed later loses at most the last second's counts. Stopping adds only what is new.
    @Test(.timeLimit(.minutes(45)))
    func dropCountersReachTheStoreWhileRecording() throws {
        var feed = try CameraFeed()
        let disk = GatedFileSystem()
        let directory = try TemporaryDirectory.store()
        let store = try SegmentStore.open(directory: directory, options: StoreOptions(fileSystem: disk))
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(60), memoryBudget: 40 * 6 * 4096))
        disk.close()
        var dropped = 0
        for _ in 0..<100 {
            if case .dropped = try feed.appendNext(to: recorder) { dropped += 1 }
        }
        try #require(dropped > 0, "a stalled disk and a 40-frame ring make the recorder drop")
        disk.open()
        recorder.waitForSpillRoom()
        try waitUntil("the drop counters reached the store", timeout: .seconds(30)) {
            (try? SegmentStore.openReadOnly(directory: directory).drops()) == [.spillBehind: dropped]
        }
        try recorder.finish()
        #expect(try store.drops() == [.spillBehind: dropped], "counted once")
    }

    @Test(.timeLimit(.minutes(45)))
    func aFrameDroppedBecauseTheSpillIsBehindSaysSoInItsOutcomeCounterAndGap() throws {
        var feed = try CameraFeed()
        let disk = GatedFileSystem()
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(fileSystem: disk))
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(60), memoryBudget: 40 * 6 * 4096))
        // The disk stalls: the spill stage falls behind and, with drop-newest, frames are refused on arrival.
        disk.close()
        var droppedFrames: [Int64] = []
        var storedCount = 0
        for _ in 0..<100 {
            switch try feed.appendNext(to: recorder) {
            case .stored: storedCount += 1
            case .dropped(let reason):
                #expect(reason == .spillBehind, "frame \(feed.index - 1)")
                droppedFrames.append(feed.index - 1)
            }
        }
        #expect(!droppedFrames.isEmpty, "a stalled disk and a 40-frame ring make the recorder drop")
        #expect(recorder.statistics.drops == [.spillBehind: droppedFrames.count])
        // The disk recovers; waiting for room (as a file input does) lets the next frame in, after the hole.
        disk.open()
        recorder.waitForSpillRoom()
        #expect(try feed.appendNext(to: recorder) == .stored(sequence: UInt64(storedCount + 1)))
        let statistics = try recorder.finish()
        #expect(statistics.drops == [.spillBehind: droppedFrames.count])
        #expect(try store.drops() == [.spillBehind: droppedFrames.count])
        let gaps = try store.gaps()
        #expect(!gaps.isEmpty && gaps.allSatisfy { $0.reason == .spillBehind }, "\(gaps)")
        for frame in droppedFrames {
            let pts = feed.pts(frame)
            #expect(gaps.contains { $0.startNanoseconds < pts && pts < $0.endNanoseconds }, "frame \(frame) in a gap")
        }
    }

    @Test func dropOldestUnspilledKeepsTheNewestFramesAndCountsTheLostOnes() throws {
        var feed = try CameraFeed()
        let disk = GatedFileSystem()
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(fileSystem: disk))
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(
                window: .seconds(60), memoryBudget: 40 * 16 * 4096, backpressure: .dropOldestUnspilled))
        // The first frame is written before the disk stalls, so the loss that follows lies between two written
        // frames and is recorded as a gap however the spill thread is scheduled.
        #expect(try feed.appendNext(to: recorder) == .stored(sequence: 1))
        try waitUntilSpilled(recorder)
        disk.close()
        defer { disk.open() }
        for _ in 1..<300 { #expect(try feed.appendNext(to: recorder) != .dropped(.memoryBudget)) }
        disk.open()
        let statistics = try recorder.finish()
        let lost = statistics.drops[.evictedBeforeSpill] ?? 0
        #expect(lost > 150)
        #expect(statistics.framesDurable + lost + (statistics.drops[.pinnedFrames] ?? 0) == 300)
        let (indexes, _) = try verifiedIndexes(recorder, 0..<Int64.max)
        #expect(indexes.count == statistics.framesDurable)
        #expect(indexes.last == 299, "the newest frame reached disk")
        #expect(try store.gaps().contains { $0.reason == .evictedBeforeSpill })
    }

    @Test func criticalPressureShedsMemoryAtOnceAndNothingAcceptedIsLost() throws {
        var feed = try CameraFeed(width: 320, height: 240)
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let frameBytes = 320 * 240 * 3 / 2
        let minimum = 8 * frameBytes
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(
                window: .seconds(60), memoryBudget: 200 * frameBytes, minimumBudget: minimum))
        for _ in 0..<300 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        let before = recorder.ring.statistics.mappedBytes
        recorder.setPressure(.critical)
        let after = recorder.ring.statistics
        #expect(before > 100 * frameBytes)
        #expect(after.mappedBytes <= minimum, "mapped \(after.mappedBytes) > minimum \(minimum)")
        // Recording goes on within the reduced budget (as a file input: waiting for the disk, never dropping).
        for _ in 0..<100 {
            recorder.waitForSpillRoom()
            let outcome = try feed.appendNext(to: recorder)
            if case .dropped(let reason) = outcome { Issue.record("frame \(feed.index - 1) dropped: \(reason)") }
            #expect(recorder.ring.statistics.mappedBytes <= minimum)
        }
        recorder.setPressure(.normal)
        for _ in 0..<100 { _ = try feed.appendNext(to: recorder) }
        let statistics = try recorder.finish()
        let (indexes, _) = try verifiedIndexes(recorder, 0..<Int64.max)
        #expect(indexes.count == statistics.framesDurable)
        #expect(500 == statistics.framesDurable + statistics.totalDrops, "every frame offered is durable or counted")
    }

    @Test func badFramesAreRejectedAndCountedWithoutDisturbingTheRecording() throws {
        var feed = try CameraFeed()
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let recorder = try Recorder(
            stream: feed.stream, store: store, configuration: RecorderConfiguration(memoryBudget: 16 << 20))
        for _ in 0..<10 { _ = try feed.appendNext(to: recorder) }
        feed.index -= 3  // repeats an earlier pts
        #expect(throws: FrameError.self) { try feed.appendNext(to: recorder) }
        feed.index += 2
        for _ in 0..<10 { _ = try feed.appendNext(to: recorder) }
        let statistics = try recorder.finish()
        #expect(statistics.rejected == 1)
        #expect(statistics.framesDurable == 20)
    }

    @Test func onEvictSpillWritesFramesOnlyAsTheyNearTheEndOfTheWindow() throws {
        var feed = try CameraFeed()
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(4), memoryBudget: 64 << 20, spill: .onEvict))
        for _ in 0..<300 {
            recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: recorder)
        }
        // Frames 0…119 are at least 3/4 of the window (180 frames at 60 fps) older than frame 299: the spill stage
        // writes exactly those, and keeps the 180 newer ones in memory only (a ring of 241 frames leaves room for
        // them beside its margins and the pins of four saves).
        try #require(RecorderStream.unwrittenFramesKept(room: recorder.streams[0].framesInRing, queries: 0) >= 180)
        try waitUntil("the spill stage has written the 120 frames due") { recorder.statistics.framesSpilled >= 120 }
        #expect(recorder.statistics.framesSpilled == 120, "frames younger than 3/4 of the window are not written yet")
        #expect(recorder.unspilledFrames == 180)
        let statistics = try recorder.finish()
        #expect(statistics.framesDurable == 300)
        #expect(statistics.totalDrops == 0)
        let (indexes, _) = try verifiedIndexes(recorder, 0..<Int64.max)
        #expect(indexes == Array(0..<300))
    }

    /// A live source (nothing waits for the spill stage) with on-evict spill and a ring of a second: the spill stage
    /// writes frames before they near the end of the window as far as the producer needs, so no frame is dropped as
    /// spill behind (without it, the newest pts stopped moving once new frames were refused, and nothing became due).
    @Test func onEvictSpillWithASmallRingKeepsRoomForALiveSource() throws {
        var feed = try CameraFeed(width: 160, height: 96, fps: 30)
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(1), memoryBudget: 64 << 20, spill: .onEvict))
        let stream = recorder.streams[0]
        let kept = RecorderStream.unwrittenFramesKept(room: stream.framesInRing, queries: 0)
        #expect(kept > 0 && kept < stream.framesInRing * 3 / 4, "the margins reach further back than the window's end")
        for index in 0..<100 {
            #expect(try feed.appendNext(to: recorder) != .dropped(.spillBehind), "frame \(index)")
            try waitUntil("the spill stage leaves at most \(kept) frames unwritten") {
                recorder.unspilledFrames <= UInt64(kept)
            }
        }
        let statistics = try recorder.finish()
        #expect(statistics.totalDrops == 0, "\(statistics.drops)")
        #expect(statistics.framesDurable == 100)
    }

    /// With on-evict, a jump in pts further than the window would push the frames kept unwritten out of the ring: a
    /// producer that waits for room (a file input) waits at the frame after the jump until the spill stage has
    /// written them, so nothing it gave is lost. (It once waited for them forever, then lost and counted them.)
    @Test func onEvictFramesAJumpInPTSWouldPushOutAreWrittenBeforeAWaitingProducerGoesOn() throws {
        var feed = try CameraFeed(width: 64, height: 16, fps: 30)
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        // 64 slabs and a window of 128 frames: the spill stage keeps the newest frames unwritten (those within the
        // lead, up to what the room allows); a producer waits past about 50 unwritten.
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(
                window: .nanoseconds(feed.stream.frameStepNanoseconds * 128), memoryBudget: 64 * 4096,
                spill: .onEvict))
        let kept = RecorderStream.unwrittenFramesKept(room: recorder.framesInRing, queries: 0)
        let before = kept - 2
        for _ in 0..<before {
            recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: recorder)
        }
        #expect(recorder.unspilledFrames > 0, "frames within the lead are kept unwritten")
        let deadline = ContinuousClock.now + .seconds(30)
        var appended = 0
        feed.index += 200
        for _ in 0..<100 {
            recorder.waitForSpillRoom(until: { ContinuousClock.now > deadline })
            try #require(
                ContinuousClock.now < deadline, "the producer waited for room for 30 s after \(appended) frames")
            if case .stored = try feed.appendNext(to: recorder) { appended += 1 }
        }
        let statistics = try recorder.finish()
        #expect(appended == 100)
        #expect(statistics.totalDrops == 0, "\(statistics.drops)")
        #expect(statistics.framesDurable == before + 100, "\(statistics)")
    }

    /// With on-evict and a live source (nothing waits), a frame whose pts jumps past the window (after a pause of
    /// the process) while frames before it are kept unwritten is dropped as spill behind, not let push them out:
    /// the spill stage writes them at once and the frames after are taken again. (They were lost as "evicted before
    /// spill"; comparing with the last frame written, as eager does, refused every frame after the jump.)
    @Test func onEvictFramesBeforeAJumpFromALiveSourceAreWrittenNotPushedOut() throws {
        var feed = try CameraFeed(width: 64, height: 16, fps: 30)
        let (store, recorder) = try Self.onEvictRecorderOfASecond(feed, backpressure: .dropNewest)
        for _ in 0..<20 { #expect(try feed.appendNext(to: recorder) != .dropped(.spillBehind)) }
        let unwritten = recorder.unspilledFrames
        #expect(unwritten > 5, "frames within the lead are kept unwritten: \(unwritten)")
        feed.index += 100
        var stored = 0
        var dropped = 0
        let deadline = ContinuousClock.now + .seconds(30)
        // After the jump, frames at a camera's pace: the spill stage keeps up with them.
        while stored < 40 && ContinuousClock.now < deadline {
            if case .stored = try feed.appendNext(to: recorder) {
                stored += 1
                try Self.waitForOnEvictToKeepUp(recorder)
            } else {
                dropped += 1
                usleep(1000)
            }
        }
        #expect(stored == 40, "frames after the jump are taken again once those before it are written")
        #expect(dropped > 0, "the frame after the jump waited for nothing")
        let statistics = try recorder.finish()
        #expect(statistics.drops[.evictedBeforeSpill] == nil, "\(statistics.drops)")
        #expect(statistics.drops[.spillBehind] == dropped, "\(statistics.drops)")
        #expect(statistics.framesDurable == 20 + 40, "\(statistics)")
        // The pause is no loss: an input interval up to the first frame dropped, the drops a gap of their own.
        let pts = Self.ptsAt30
        let gaps = try store.gaps(streamName: recorder.streams[0].name)
        #expect(
            gaps.map { [$0.startNanoseconds, $0.endNanoseconds] } == [
                [pts(19), pts(120)], [pts(120), pts(120 + dropped)],
            ]
                && gaps.map(\.reason) == [.inputInterval, .spillBehind], "\(gaps), \(dropped) dropped")
    }

    /// Under `drop-oldest-unspilled`, frames a jump after a pause pushes out unwritten are a loss up to the last of
    /// them, and the pause after it an input interval (the whole pause read as frames lost).
    @Test func framesEvictedUnwrittenBeforeAPauseAreALossOnlyUpToTheLastOfThem() throws {
        var feed = try CameraFeed(width: 64, height: 16, fps: 30)
        let (store, recorder) = try Self.onEvictRecorderOfASecond(feed, backpressure: .dropOldestUnspilled)
        // At a camera's pace: the spill stage writes the frames due as they come.
        for _ in 0..<40 {
            _ = try feed.appendNext(to: recorder)
            try Self.waitForOnEvictToKeepUp(recorder)
        }
        feed.index += 100
        for _ in 0..<10 { #expect(try feed.appendNext(to: recorder) != .dropped(.spillBehind)) }
        let statistics = try recorder.finish()
        let lost = statistics.drops[.evictedBeforeSpill] ?? 0
        #expect(lost > 0, "frames kept unwritten before the jump: \(statistics.drops)")
        let pts = Self.ptsAt30
        // The frames 40 - lost … 39 were lost, after frame 39 - lost, the last written before them.
        let gaps = try store.gaps(streamName: recorder.streams[0].name)
        #expect(
            gaps.map { [$0.startNanoseconds, $0.endNanoseconds] }
                == [[pts(39 - lost), pts(39) + 1], [pts(39) + 1, pts(140)]]
                && gaps.map(\.reason) == [.evictedBeforeSpill, .inputInterval], "\(gaps), \(lost) lost")
    }

    /// An on-evict recorder of `feed` (30 fps) with a window of a second, into a new store.
    static func onEvictRecorderOfASecond(_ feed: CameraFeed, backpressure: BackpressurePolicy) throws -> (
        SegmentStore, Recorder
    ) {
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(
                window: .nanoseconds(feed.stream.frameStepNanoseconds * 30), memoryBudget: 16 << 20,
                spill: .onEvict, backpressure: backpressure))
        return (store, recorder)
    }

    /// Waits until on-evict's spill stage leaves no more frames unwritten than it keeps on purpose: a producer at a
    /// camera's pace.
    static func waitForOnEvictToKeepUp(_ recorder: Recorder) throws {
        let kept = RecorderStream.unwrittenFramesKept(room: recorder.framesInRing, queries: 0)
        try waitUntil("the spill stage leaves at most \(kept) frames unwritten") {
            recorder.unspilledFrames <= UInt64(kept)
        }
    }

    /// The pts of frame `frame` of a 30 fps ``CameraFeed``.
    static func ptsAt30(_ frame: Int) -> Int64 { Int64(frame) * 1_000_000_000 / 30 }

    /// With on-evict, the frames kept unwritten leave room for the pins of as many queries as a recorder's control
    /// runs at once: four saves that start together do not make the producer drop a frame as spill behind (they
    /// did, before the spill stage could write the frames their pins needed room from).
    @Test func onEvictSpillKeepsRoomForSavesThatStartTogether() throws {
        var feed = try CameraFeed(width: 160, height: 96, fps: 30)
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(4), memoryBudget: 64 << 20, spill: .onEvict))
        let stream = recorder.streams[0]
        let kept = RecorderStream.unwrittenFramesKept(room: stream.framesInRing, queries: 0)
        for _ in 0..<150 {
            #expect(try feed.appendNext(to: recorder) != .dropped(.spillBehind))
            try waitUntil("the spill stage leaves at most \(kept) frames unwritten") {
                recorder.unspilledFrames <= UInt64(kept)
            }
        }
        // Four queries of the last three seconds, each holding its batch of pins a while per frame.
        let newest = try #require(try stream.newestPTS())
        let group = DispatchGroup()
        let started = Atomic<Int>(0)
        for _ in 0..<RecorderStream.concurrentQueries {
            DispatchQueue.global().async(group: group) {
                var first = true
                _ = try? stream.frames(in: (newest - 3_000_000_000)..<(newest + 1)) { _ in
                    if first {
                        // Every query holds its first batch before any goes on.
                        first = false
                        started.add(1, ordering: .relaxed)
                        while started.load(ordering: .relaxed) < RecorderStream.concurrentQueries {
                            Thread.sleep(forTimeInterval: 0.001)
                        }
                    }
                    Thread.sleep(forTimeInterval: 0.01)
                    return true
                }
            }
        }
        try waitUntil("every query holds pins") { started.load(ordering: .relaxed) >= RecorderStream.concurrentQueries }
        var dropped = 0
        for _ in 0..<30 {
            if try feed.appendNext(to: recorder) == .dropped(.spillBehind) { dropped += 1 }
            Thread.sleep(forTimeInterval: 0.005)
        }
        #expect(group.wait(timeout: .now() + 60) == .success)
        #expect(dropped == 0, "frames dropped as spill behind while the queries ran")
        let statistics = try recorder.finish()
        #expect(statistics.totalDrops == 0, "\(statistics.drops)")
        #expect(statistics.framesDurable == 180)
    }

    @Test func aFullDiskLeavesAGapWithItsReasonAndRecordingResumes() throws {
        var feed = try CameraFeed()
        let disk = FaultInjectingFileSystem()
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(fileSystem: disk))
        let recorder = try Recorder(
            stream: feed.stream, store: store, configuration: RecorderConfiguration(memoryBudget: 16 << 20))
        for _ in 0..<10 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        disk.setDiskFull(true)
        for _ in 0..<5 { _ = try feed.appendNext(to: recorder) }
        try waitUntilSpilled(recorder)
        disk.setDiskFull(false)
        for _ in 0..<10 { _ = try feed.appendNext(to: recorder) }
        let statistics = try recorder.finish()
        #expect(statistics.drops[.diskError] == 5)
        #expect(statistics.framesDurable == 20)
        #expect(try store.drops()[.diskError] == 5)
        let gaps = try store.gaps()
        #expect(gaps.count == 1)
        #expect(gaps.first?.startNanoseconds == feed.pts(9))
        #expect(gaps.first?.endNanoseconds == feed.pts(15))
        #expect(gaps.first?.reason == .diskError)
        var onDisk: [Int64] = []
        try store.frames(in: 0..<Int64.max) { view in
            guard let mark = SyntheticCamera.verify(view) else {
                Issue.record("frame at \(view.info.ptsNanoseconds) ns is not bit-exact")
                return false
            }
            onDisk.append(mark.index)
            return true
        }
        #expect(onDisk == Array(0..<10) + Array(15..<25))
    }

    @Test func aSlowDiskDelaysWritesWithoutLosingFrames() throws {
        var feed = try CameraFeed()
        let disk = FaultInjectingFileSystem()
        disk.setWriteDelay(.milliseconds(2))
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(fileSystem: disk))
        let recorder = try Recorder(
            stream: feed.stream, store: store, configuration: RecorderConfiguration(memoryBudget: 16 << 20))
        for _ in 0..<20 {
            recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: recorder)
        }
        disk.setWriteDelay(.zero)
        let statistics = try recorder.finish()
        #expect(statistics.framesDurable == 20)
        #expect(statistics.totalDrops == 0)
        #expect(disk.failedWriteCount == 0)
    }

    @Test func aWaitingProducerNeverDropsFramesBehindTheSpillBatchOfASmallRing() throws {
        var feed = try CameraFeed()
        let disk = GatedFileSystem()
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(fileSystem: disk))
        let slab = 6 * 4096  // 160x96 NV12 takes one 24 KiB slab
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(
                window: .seconds(60), memoryBudget: 40 * slab, minimumBudget: 10 * slab))
        // Each round, the spill stage is stalled with a batch pinned and frames waiting behind it when the budget
        // is cut to ten frames (a ring smaller than four batches); then the producer records as a file input does.
        defer { disk.open() }
        for _ in 0..<5 {
            try waitUntilSpilled(recorder)
            disk.close()
            for _ in 0..<30 { _ = try feed.appendNext(to: recorder) }
            recorder.setPressure(.critical)
            #expect(recorder.framesInRing == 10)
            disk.open()
            for _ in 0..<100 {
                recorder.waitForSpillRoom()
                if case .dropped(let reason) = try feed.appendNext(to: recorder) {
                    Issue.record("frame \(feed.index - 1) dropped (\(reason)) although the producer waited for room")
                }
            }
            recorder.setPressure(.normal)
        }
        let statistics = try recorder.finish()
        // Only frames the cuts evicted before they were written are lost.
        #expect(Array(statistics.drops.keys) == [.evictedBeforeSpill], "\(statistics.drops)")
        #expect(statistics.framesDurable + statistics.totalDrops == 650)
    }

    @Test func inputIntervalGapsAreRecorded() throws {
        var feed = try CameraFeed()
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let recorder = try Recorder(
            stream: feed.stream, store: store, configuration: RecorderConfiguration(memoryBudget: 16 << 20))
        for _ in 0..<10 { _ = try feed.appendNext(to: recorder) }
        _ = try feed.appendNext(to: recorder, skip: 5)  // the camera skipped 5 frames (thermal slow-down)
        for _ in 0..<10 { _ = try feed.appendNext(to: recorder) }
        try recorder.finish()
        let gaps = try store.gaps()
        #expect(gaps.count == 1)
        #expect(gaps.first?.startNanoseconds == feed.pts(9))
        #expect(gaps.first?.endNanoseconds == feed.pts(15))
        #expect(gaps.first?.reason == .inputInterval)
    }
}
