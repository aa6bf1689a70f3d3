import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

@Suite(.timeLimit(.minutes(45))) struct SegmentSalvageTests {
    static let keyInterval = 10

    /// A store of 130 frames: segment 1 holds frames 0…99 (sealed), segment 2 frames 100…129. Returns the scan
    /// entries of segment 1 (offsets and key flags).
    static func makeStore(_ dir: TemporaryDirectory, frames: TestFrames) throws -> [SegmentFrameEntry] {
        let store = try SegmentStore.open(
            directory: dir.path,
            options: StoreOptions(
                keyInterval: keyInterval, workerCount: 2, segmentMaxDuration: .nanoseconds(frames.pts(100) - 1_000)))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<130 { try writer.append(frames.frame(i)) }
        try writer.close()
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg"])
        let reader = try SegmentFileReader(path: dir.segments + "/000001.seg", fileSystem: POSIXFileSystem())
        defer { reader.close() }
        return try reader.scan().entries
    }

    /// Flips a byte of each frame in `damaged`: inside its record header, or inside its payload.
    static func damage(_ dir: TemporaryDirectory, entries: [SegmentFrameEntry], frames damaged: [Int], inHeader: Bool)
        throws
    {
        let path = dir.segments + "/000001.seg"
        var bytes = [UInt8](FileManager.default.contents(atPath: path)!)
        for frame in damaged { bytes[Int(entries[frame].offset) + (inHeader ? 10 : 56 + 70)] ^= 0x20 }
        try writeFile(path, bytes)
    }

    /// The frames a flip in each of `damaged` loses: from it up to the next key frame.
    static func lostFrames(_ damaged: [Int], entries: [SegmentFrameEntry]) -> [Int] {
        Set(
            damaged.flatMap { frame in
                frame..<(entries.indices.first { $0 > frame && entries[$0].isKey } ?? entries.count)
            }
        ).sorted()
    }

    static func expectEveryFrameOnceExcept(_ lost: [Int], store: SegmentStore, frames: TestFrames) throws {
        let expected = (0..<130).filter { !lost.contains($0) }
        for twoThreads in [false, true] {
            let read = try readAll(store, twoThreads: twoThreads)
            #expect(read.map(\.0) == expected.map { frames.pts($0) }, "two threads: \(twoThreads)")
            #expect(
                read.map(\.1) == expected.map { frames.expectedDigest($0) }, "two threads: \(twoThreads): bit-exact")
        }
    }

    @Test(arguments: [
        ([43], false), ([43], true), ([23, 71], false), ([40], false), ([95], false), ([0], true), ([43, 46], false),
    ])
    func repairSalvagesEveryUsableFrameAfterTheDamage(damaged: [Int], inHeader: Bool) throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let entries = try Self.makeStore(dir, frames: frames)
        #expect(entries.count == 100)
        try Self.damage(dir, entries: entries, frames: damaged, inHeader: inHeader)
        let lost = Self.lostFrames(damaged, entries: entries)
        let usable = (damaged[0]..<100).count - lost.count
        let store = try SegmentStore.open(directory: dir.path)

        // The dry run names every damaged frame and says what a repair would do, changing nothing.
        let before = FileManager.default.contents(atPath: dir.segments + "/000001.seg")
        let dry = try store.verify(repair: false)
        #expect(Set(dry.damaged.map(\.frame)) == Set(damaged))
        #expect(dry.salvage.count == 1)
        #expect(dry.salvage.first?.usableFrames == usable)
        #expect(dry.salvage.first?.lostFrameCount == lost.count)
        #expect(dry.problems.contains { $0.contains("a repair would keep \(damaged[0]) frames of segment 000001.seg") })
        #expect(FileManager.default.contents(atPath: dir.segments + "/000001.seg") == before)
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg"])

        let repaired = try store.verify(repair: true)
        let salvage = try #require(repaired.salvage.first)
        #expect(salvage.keptFrames == damaged[0])
        #expect(salvage.lostFrameCount == lost.count)
        #expect(salvage.usableFrames == usable)
        #expect(salvage.salvagedFrames == usable)
        #expect(salvage.salvagedInto == (usable > 0 ? ["000003.seg"] : []))
        #expect(
            dir.segmentFiles()
                == (usable > 0 ? ["000001.seg", "000002.seg", "000003.seg"] : ["000001.seg", "000002.seg"]))
        // Each lost stretch: frame numbers and pts, and a `damaged` gap from the frame before to the frame after.
        let stretches = lost.reduce(into: [[Int]]()) { runs, frame in
            if let last = runs.last?.last, last + 1 == frame {
                runs[runs.count - 1].append(frame)
            } else {
                runs.append([frame])
            }
        }
        #expect(salvage.lost.map { Array($0.firstFrame...$0.lastFrame) } == stretches)
        #expect(salvage.lost.map(\.firstPTS) == stretches.map { frames.pts($0.first!) })
        #expect(salvage.lost.map(\.lastPTS) == stretches.map { frames.pts($0.last!) })
        let gaps = try store.gaps().filter { $0.reason == .damaged }
        #expect(
            gaps.map(\.startNanoseconds) == stretches.map { $0.first! == 0 ? frames.pts(0) : frames.pts($0.first! - 1) }
        )
        #expect(gaps.map(\.endNanoseconds) == stretches.map { frames.pts($0.last! + 1) })
        let text = repaired.repaired.joined(separator: "\n")
        #expect(text.contains("salvaged \(usable) frames after the damage in segment 000001.seg"), "\(text)")
        #expect(
            text.contains("lost \(lost.count) frames: frames \(stretches[0].first!)…\(stretches[0].last!)"), "\(text)")

        try Self.expectEveryFrameOnceExcept(lost, store: store, frames: frames)
        #expect(try store.verify(repair: false).clean)
        // A second repair finds nothing to do.
        let again = try store.verify(repair: true)
        #expect(again.salvage.isEmpty && again.damaged.isEmpty)
        try Self.expectEveryFrameOnceExcept(lost, store: store, frames: frames)
    }

    /// A repair whose salvage cannot be written (the disk full) keeps the damaged file whole, says why, and leaves
    /// a `damaged` gap where the index lets go of the frames past the damage, so nothing reads as complete that is
    /// not; with room again, the next repair salvages them all.
    @Test func repairWithoutRoomForTheSalvageSaysSoAndLeavesAGapUntilTheNextRepair() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let entries = try Self.makeStore(dir, frames: frames)
        try Self.damage(dir, entries: entries, frames: [43], inHeader: false)
        let lost = Self.lostFrames([43], entries: entries)
        let original = FileManager.default.contents(atPath: dir.segments + "/000001.seg")
        do {
            let faults = FaultInjectingFileSystem()
            let store = try SegmentStore.open(directory: dir.path, options: StoreOptions(fileSystem: faults))
            faults.setDiskFull(true)
            let report = try store.verify(repair: true)
            let problem = try #require(
                report.problems.first {
                    $0.contains("could not salvage the frames after the damage in segment 000001.seg")
                })
            #expect(
                problem.contains("the index leaves out its 57 frames from the damage on (a 'damaged' gap)"),
                "\(problem)")
            #expect(FileManager.default.contents(atPath: dir.segments + "/000001.seg") == original, "not cut")
            #expect(!report.clean)
            faults.setDiskFull(false)
            // Frames 0…42 and 100…129 read; a gap covers 43…99.
            let read = try readAll(store).map(\.0)
            #expect(read == (Array(0..<43) + Array(100..<130)).map { frames.pts($0) })
            let gaps = try store.gaps().filter { $0.reason == .damaged }
            #expect(gaps.map(\.startNanoseconds) == [frames.pts(42)])
            #expect(gaps.map(\.endNanoseconds) == [frames.pts(100)])
        }
        let store = try SegmentStore.open(directory: dir.path)
        let report = try store.verify(repair: true)
        #expect(report.salvage.first?.salvagedFrames == 50)
        try Self.expectEveryFrameOnceExcept(lost, store: store, frames: frames)
        #expect(try store.verify(repair: false).clean)
    }

    /// A salvage that stops part way (the disk full after some of its segments) reports what it stored before
    /// with the failure, keeps those frames (the `damaged` gap an earlier repair recorded over them gives them
    /// back), leaves the damaged file whole, and the next repair stores the rest without writing any frame twice.
    @Test func salvageStoppedPartWayReportsWhatItStoredAndTheNextRepairFinishesIt() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        // Salvages of 10 frames a segment: the same store twice, once to count the repair's writes.
        let options = { (faults: FaultInjectingFileSystem) in
            StoreOptions(segmentMaxDuration: .nanoseconds(frames.pts(10) - frames.pts(0)), fileSystem: faults)
        }
        var repairWrites = 0
        do {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let entries = try Self.makeStore(dir, frames: frames)
            try Self.damage(dir, entries: entries, frames: [43], inHeader: false)
            let faults = FaultInjectingFileSystem()
            let store = try SegmentStore.open(directory: dir.path, options: options(faults))
            let before = faults.writeCount
            #expect(try store.verify(repair: true).salvage.first?.salvagedFrames == 50)
            repairWrites = faults.writeCount - before
        }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let entries = try Self.makeStore(dir, frames: frames)
        try Self.damage(dir, entries: entries, frames: [43], inHeader: false)
        let lost = Self.lostFrames([43], entries: entries)
        let original = FileManager.default.contents(atPath: dir.segments + "/000001.seg")
        var stored = 0
        do {
            let faults = FaultInjectingFileSystem()
            let store = try SegmentStore.open(directory: dir.path, options: options(faults))
            // A first repair on a full disk salvages nothing and records the frames past the damage as missing.
            faults.setDiskFull(true)
            #expect(try store.verify(repair: true).salvage.first?.salvagedFrames == 0)
            faults.setDiskFull(false)
            faults.failWrite(number: faults.writeCount + repairWrites * 2 / 3, with: .error(ENOSPC))
            let report = try store.verify(repair: true)
            let salvage = try #require(report.salvage.first)
            #expect(salvage.failure?.contains("No space left on device") == true, "\(salvage)")
            #expect(salvage.salvagedFrames > 0 && salvage.salvagedFrames < 50, "\(salvage)")
            #expect(!salvage.salvagedInto.isEmpty)
            stored = salvage.salvagedFrames
            let problem = try #require(report.problems.first { $0.contains("could not salvage") })
            #expect(problem.contains("the \(stored) frames salvaged before it stopped stay stored"), "\(problem)")
            #expect(FileManager.default.contents(atPath: dir.segments + "/000001.seg") == original, "not cut")
            // The `damaged` gaps cover only what is still missing: none holds a frame the index has (the one
            // recorded at the open went on covering the frames salvaged, and clips of them said they were lost).
            let held = try readAll(store).map(\.0)
            let damaged = try store.gaps().filter { $0.reason == .damaged }
            #expect(!damaged.isEmpty)
            for gap in damaged {
                let inside = held.filter { $0 > gap.startNanoseconds && $0 < gap.endNanoseconds }
                #expect(inside.isEmpty, "\(gap) holds \(inside.count) frames the index has")
            }
        }
        let store = try SegmentStore.open(directory: dir.path)
        let report = try store.verify(repair: true)
        let salvage = try #require(report.salvage.first)
        #expect(salvage.failure == nil)
        #expect(salvage.alreadyStoredFrames == stored)
        #expect(salvage.salvagedFrames == 50 - stored)
        try Self.expectEveryFrameOnceExcept(lost, store: store, frames: frames)
        #expect(try store.verify(repair: false).clean)
    }

    /// A repair that stops after the salvaged segment is durable but before the damaged file is cut (here its
    /// rename fails) leaves every frame readable once; the next open, and the next repair, keep it that way and
    /// write nothing twice. With the index lost as well, it is rebuilt from the files with no frame twice.
    @Test(arguments: [false, true])
    func repairStoppedBeforeTheCutLosesNothingAndIsFinishedByTheNextRepair(indexLost: Bool) throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let entries = try Self.makeStore(dir, frames: frames)
        try Self.damage(dir, entries: entries, frames: [43], inHeader: false)
        let lost = Self.lostFrames([43], entries: entries)
        let original = FileManager.default.contents(atPath: dir.segments + "/000001.seg")
        do {
            let faults = FaultInjectingFileSystem()
            faults.failNextRename(of: "000001.seg")
            let store = try SegmentStore.open(directory: dir.path, options: StoreOptions(fileSystem: faults))
            let report = try store.verify(repair: true)
            #expect(report.problems.contains { $0.contains("could not seal segment 000001.seg") })
            #expect(report.salvage.first?.salvagedInto == ["000003.seg"])
            #expect(FileManager.default.contents(atPath: dir.segments + "/000001.seg") == original, "not cut")
            try Self.expectEveryFrameOnceExcept(lost, store: store, frames: frames)
        }
        if indexLost {
            for suffix in ["", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: dir.path + "/index.sqlite" + suffix)
            }
        }
        let store = try SegmentStore.open(directory: dir.path)
        try Self.expectEveryFrameOnceExcept(lost, store: store, frames: frames)
        let report = try store.verify(repair: true)
        let salvage = try #require(report.salvage.first)
        #expect(salvage.usableFrames == 50)
        #expect(salvage.alreadyStoredFrames == 50)
        #expect(salvage.salvagedFrames == 0)
        #expect(salvage.salvagedInto.isEmpty)
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg", "000003.seg"])
        try Self.expectEveryFrameOnceExcept(lost, store: store, frames: frames)
        #expect(try store.verify(repair: false).clean)
        #expect(try store.gaps().filter { $0.reason == .damaged }.count == 1)
    }
}
