import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import Testing

@testable import SegmentStore

#if canImport(Glibc)
    import Glibc
#endif

/// ENOSPC at each step of a segment's life: no dangling index row, no burned segment number, `verify` clean.
@Suite(.timeLimit(.minutes(45))) struct SegmentFullDiskTests {
    private func open(
        _ dir: TemporaryDirectory, _ fs: FaultInjectingFileSystem, minimumFree: Int? = nil,
        segmentMaxDuration: Duration = .milliseconds(100)
    ) throws -> SegmentStore {
        try SegmentStore.open(
            directory: dir.path,
            options: StoreOptions(
                keyInterval: 5, workerCount: 1, segmentMaxDuration: segmentMaxDuration, minimumFreeBytes: minimumFree,
                syncInterval: .nanoseconds(1), codecPolicy: .forced(.raw), fileSystem: fs))
    }

    /// Every index row has its file and every file its row, the numbers run 1, 2, 3… and `verify` finds nothing.
    private func expectConsistent(_ store: SegmentStore, _ dir: TemporaryDirectory) throws {
        let files = dir.segmentFiles().sorted()
        let rows = try store.segments().map(\.fileName).sorted()
        #expect(rows == files, "index rows \(rows) vs files \(files)")
        let numbers = files.compactMap { UInt64($0.prefix(6)) }
        #expect(numbers == Array(numbers.indices).map { UInt64($0 + 1) }, "burned numbers: \(files)")
        let report = try store.verify(repair: false)
        #expect(report.clean, "\(report.problems) \(report.damaged)")
    }

    @Test func enospcCreatingASegmentBurnsNoNumberAndLeavesNoRow() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .nv12, width: 160, height: 120)
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let store = try open(dir, fs)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<3 { try writer.append(frames.frame(i)) }
        try writer.close()
        let second = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 3..<6 {
            fs.failNextWrite(with: .error(ENOSPC))  // the header of the new segment
            #expect {
                try second.append(frames.frame(i))
            } throws: { error in
                guard case SegmentStoreError.diskFull(let file, 0, nil, _) = error else { return false }
                return file == "000002.seg.partial"
            }
        }
        #expect(dir.segmentFiles() == ["000001.seg"])
        try second.append(frames.frame(6))
        try second.close()
        #expect(dir.segmentFiles().sorted() == ["000001.seg", "000002.seg"])
        try expectConsistent(store, dir)
    }

    @Test func enospcOnASegmentsFirstRecordRemovesItWithoutARow() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .nv12, width: 160, height: 120)
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let store = try open(dir, fs)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        fs.failWrite(number: fs.writeCount + 2, with: .error(ENOSPC))  // header, then the first record
        #expect(throws: SegmentStoreError.self) { try writer.append(frames.frame(0)) }
        #expect(dir.segmentFiles().isEmpty)
        #expect(try store.segments().isEmpty, "a segment without frames has no row")
        try writer.append(frames.frame(1))
        try writer.close()
        #expect(dir.segmentFiles() == ["000001.seg"])
        #expect(try readAll(store).map(\.0) == [frames.pts(1)])
        try expectConsistent(store, dir)
    }

    @Test func enospcMidRecordCutsBackAndTheNextSegmentTakesTheNextNumber() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .nv12, width: 160, height: 120)
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let store = try open(dir, fs)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        try writer.append(frames.frame(0))
        fs.failNextWrite(with: .short(1000))
        fs.failWrite(number: fs.writeCount + 2, with: .error(ENOSPC))
        #expect(throws: SegmentStoreError.self) { try writer.append(frames.frame(1)) }
        for i in 2..<8 { try writer.append(frames.frame(i)) }
        try writer.close()
        #expect(try readAll(store).map(\.0) == [0, 2, 3, 4, 5, 6, 7].map { frames.pts($0) })
        try expectConsistent(store, dir)
    }

    @Test func enospcAtSealKeepsEveryDurableFrameIndexed() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .nv12, width: 160, height: 120)
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let store = try open(dir, fs)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<3 { try writer.append(frames.frame(i)) }
        fs.failNextWrite(with: .error(ENOSPC))  // the footer of segment 1, sealed before frame 3
        #expect(throws: SegmentStoreError.self) { try writer.append(frames.frame(3)) }
        for i in 4..<9 { try writer.append(frames.frame(i)) }
        try writer.close()
        #expect(try readAll(store).map(\.0) == [0, 1, 2, 4, 5, 6, 7, 8].map { frames.pts($0) })
        try expectConsistent(store, dir)
    }

    @Test func aDiskWithoutRoomForTheIndexReserveRefusesFramesWithoutWriting() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .nv12, width: 320, height: 240)
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let store = try open(dir, fs, segmentMaxDuration: .seconds(60))
        // The index's 4 MiB are not held in its reserve file (given to the index a slice at a time, as when
        // something else filled the disk): the writer leaves them free.
        while store.releaseIndexReserve() {}
        #expect(store.indexRoomToKeep == StoreOptions.indexReserveBytes)
        let frameNeed = Int64(frames.layout.byteCount + 56 + (64 << 10))
        // Room for about five frames beyond what one frame and the index's reserve need.
        fs.setCapacity(
            StoreOptions.indexReserveBytes + frameNeed + 5 * Int64(frames.layout.byteCount + 200), of: dir.segments)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        var written = 0
        var refused = 0
        for i in 0..<12 {
            let writesBefore = fs.writeCount
            do {
                try writer.append(frames.frame(i))
                written += 1
            } catch SegmentStoreError.diskFull(_, _, _, let cause) {
                #expect(cause.code == ENOSPC)
                #expect(fs.writeCount == writesBefore, "a refused frame writes nothing")
                refused += 1
            }
        }
        #expect(written >= 4 && written <= 6 && refused == 12 - written, "written \(written)")
        fs.setCapacity(nil, of: dir.segments)
        try writer.close()
        #expect(try readAll(store).map(\.0) == (0..<written).map { frames.pts($0) })
        try expectConsistent(store, dir)
    }

    @Test func minimumFreeBytesDeletesTheOldestSegmentsToKeepRecording() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .nv12, width: 320, height: 240)
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let floor = 4 * frames.layout.byteCount
        let store = try open(dir, fs, minimumFree: floor)
        let frameNeed = Int64(frames.layout.byteCount + 56 + (64 << 10))
        fs.setCapacity(
            StoreOptions.indexReserveBytes + frameNeed + Int64(floor) + 10 * Int64(frames.layout.byteCount),
            of: dir.segments)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<60 { try writer.append(frames.frame(i)) }  // none may fail
        try writer.close()
        let kept = try readAll(store)
        #expect(kept.count < 60 && kept.count >= 3, "kept \(kept.count)")
        let newest = (60 - kept.count)..<60
        #expect(kept.map(\.0) == newest.map { frames.pts($0) }, "the newest frames, without holes")
        for ((_, digest), i) in zip(kept, newest) { #expect(digest == frames.expectedDigest(i)) }
        #expect(try store.gaps().isEmpty)
        let files = dir.segmentFiles().sorted()
        let rows = try store.segments().map(\.fileName).sorted()
        #expect(rows == files)
        #expect(try store.verify(repair: false).clean)
    }

    /// Segments of a minute on a disk whose room above the floor holds 40 frames: the floor holds after every frame
    /// and the store keeps most of that room in its newest frames. (Retention found nothing sealed to delete while the
    /// open segment grew past the floor, sealed it only when the disk itself was full, then deleted it whole.)
    @Test func minimumFreeBytesHoldsWhileASegmentOfAMinuteGrows() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .nv12, width: 320, height: 240)
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let frameBytes = Int64(frames.layout.byteCount)
        let floor = 20 * frameBytes
        let store = try open(dir, fs, minimumFree: Int(floor), segmentMaxDuration: .seconds(60))
        let frameNeed = frameBytes + 56 + (64 << 10)
        fs.setCapacity(StoreOptions.indexReserveBytes + frameNeed + floor + 40 * frameBytes, of: dir.segments)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        var lowest = Int64.max
        for i in 0..<200 {
            try writer.append(frames.frame(i))
            lowest = min(lowest, try fs.availableBytes(dir.segments))
        }
        try writer.close()
        #expect(lowest >= floor, "the free space fell to \(lowest) bytes, below the floor of \(floor)")
        let kept = try readAll(store)
        #expect(kept.count >= 25, "kept \(kept.count) frames of the 40 the room holds")
        let newest = (200 - kept.count)..<200
        #expect(kept.map(\.0) == newest.map { frames.pts($0) }, "the newest frames, without holes")
        #expect(try store.segments().map(\.fileName).sorted() == dir.segmentFiles().sorted())
        #expect(try store.verify(repair: false).clean)
    }
}
