import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Automatic syncs run on the writer's sync thread: appends never wait for the disk to make earlier frames durable,
/// frames count as durable (and are indexed) only once their sync returned, and a sync that fails in the background
/// loses only what was not durable.
@Suite(.timeLimit(.minutes(45))) struct SegmentBackgroundSyncTests {
    /// A store on a fault-injecting file system whose writer syncs after every frame (in the background).
    struct Fixture {
        let dir = TemporaryDirectory()
        let frames: TestFrames
        let fs = FaultInjectingFileSystem()
        let store: SegmentStore
        let writer: StreamWriter

        init(format: PixelFormat, width: Int, height: Int, workerCount: Int) throws {
            frames = try TestFrames(format: format, width: width, height: height)
            store = try SegmentStore.open(
                directory: dir.path,
                options: StoreOptions(
                    keyInterval: 4, workerCount: workerCount, syncInterval: .nanoseconds(1), fileSystem: fs))
            writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        }

        /// Appends frames `indexes`.
        func append(_ indexes: Range<Int>) throws {
            for i in indexes { try writer.append(frames.frame(i)) }
        }

        func remove() {
            frames.deallocate()
            dir.remove()
        }

        /// Expects the store to hold exactly frames `indexes`, bit-exact, and to verify clean.
        func expectStored(_ indexes: [Int], sourceLocation: SourceLocation = #_sourceLocation) throws {
            let read = try readAll(store)
            #expect(read.map(\.0) == indexes.map { frames.pts($0) }, sourceLocation: sourceLocation)
            for ((_, digest), i) in zip(read, indexes) {
                #expect(digest == frames.expectedDigest(i), sourceLocation: sourceLocation)
            }
            #expect(try store.verify(repair: false).clean, sourceLocation: sourceLocation)
        }
    }

    @Test func appendsGoOnWhileASyncWaitsForTheDisk() throws {
        let fixture = try Fixture(format: .nv12, width: 160, height: 120, workerCount: 2)
        defer { fixture.remove() }
        let (frames, fs, writer) = (fixture.frames, fixture.fs, fixture.writer)
        try fixture.append(0..<5)
        try writer.sync()
        #expect(writer.durableFrameCount == 5)
        // The disk now takes as long as it likes to make anything durable: an append that waited for it would
        // never return (the suite's time limit would end the test).
        fs.holdSyncs(true)
        let syncsBefore = fs.syncCount
        try fixture.append(5..<35)
        try waitUntil("the sync thread is waiting for the disk") { fs.heldSyncCount == 1 }
        #expect(fs.syncCount - syncsBefore == 1, "a sync still running is not doubled")
        #expect(writer.durableFrameCount == 5)
        #expect(writer.lastDurablePTS == frames.pts(4))
        // The index shows only durable frames: readers see the first five.
        #expect(try readAll(fixture.store).map(\.0) == (0..<5).map { frames.pts($0) })
        fs.holdSyncs(false)
        #expect(try writer.sync() == frames.pts(34))
        #expect(writer.durableFrameCount == 35)
        try writer.close()
        try fixture.expectStored(Array(0..<35))
    }

    @Test func aSyncThatFailsInTheBackgroundKeepsOnlyWhatWasDurable() throws {
        let fixture = try Fixture(format: .i420, width: 160, height: 120, workerCount: 2)
        defer { fixture.remove() }
        let (frames, fs, writer) = (fixture.frames, fixture.fs, fixture.writer)
        try fixture.append(0..<5)
        try writer.sync()
        // Frame 5's sync starts in the background and fails once let go; frames 6 and 7 are written meanwhile.
        fs.holdSyncs(true)
        fs.failNextSync(with: EIO)
        try fixture.append(5..<8)
        try waitUntil("the sync thread is waiting for the disk") { fs.heldSyncCount == 1 }
        fs.holdSyncs(false)
        #expect {
            try writer.sync()
        } throws: { error in
            guard case SegmentStoreError.writeFailed(let file, let durable, let pts, let cause) = error else {
                return false
            }
            return file == "000001.seg.partial" && durable == 5 && pts == frames.pts(4) && cause.code == EIO
        }
        #expect(writer.durableFrameCount == 5)
        #expect(writer.framesCutBack == 3)
        #expect(writer.lastCutBack.map { $0.firstPTS == frames.pts(5) && $0.lastPTS == frames.pts(7) } == true)
        // Writing goes on in a new segment; the failed one was cut back to its durable frames and sealed.
        try fixture.append(8..<12)
        try writer.close()
        #expect(fixture.dir.segmentFiles() == ["000001.seg", "000002.seg"])
        try fixture.expectStored(Array(0..<5) + Array(8..<12))
    }

    @Test func closingWaitsForARunningSyncAndSealsEverything() throws {
        let fixture = try Fixture(format: .gray8, width: 64, height: 48, workerCount: 1)
        defer { fixture.remove() }
        let (fs, writer) = (fixture.fs, fixture.writer)
        fs.holdSyncs(true)
        try fixture.append(0..<10)
        try waitUntil("the sync thread is waiting for the disk") { fs.heldSyncCount == 1 }
        // The disk lets the sync finish a little later, while the close is waiting for it.
        let released = Thread {
            usleep(50_000)
            fs.holdSyncs(false)
        }
        released.start()
        try writer.close()
        #expect(fs.heldSyncCount == 0)
        #expect(fixture.dir.segmentFiles() == ["000001.seg"])
        try fixture.expectStored(Array(0..<10))
    }
}
