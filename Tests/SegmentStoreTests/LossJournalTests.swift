import Foundation
import Glibc
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Synchronization
import Testing

/// `DIR/losses.journal`: gaps and drop counts, what the store lost, are still counted when the index is lost; a
/// damaged journal gives way to the index.
@Suite(.timeLimit(.minutes(45))) struct LossJournalTests {
    /// Frames 0..<30 and 40..<60 of stream `camera`, a gap over the ten missing, a stretch of throttled gaps made one
    /// row, drops of two reasons, and a gap that retention's clean-up removes.
    static func recordLosses(_ dir: TemporaryDirectory, frames: TestFrames) throws {
        let store = try SegmentStore.open(directory: dir.path)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        try writer.recordGap(start: frames.pts(-10), end: frames.pts(-5), reason: .spillBehind)
        for i in 0..<30 { try writer.append(frames.frame(i)) }
        try writer.recordGap(start: frames.pts(29), end: frames.pts(40), reason: .spillBehind)
        #expect(
            try writer.recordOrExtendGap(start: frames.pts(41), end: frames.pts(43), reason: .inputInterval) == false)
        #expect(try writer.recordOrExtendGap(start: frames.pts(43), end: frames.pts(45), reason: .inputInterval))
        for i in 40..<60 { try writer.append(frames.frame(i)) }
        try writer.addDrops(reason: .spillBehind, count: 10)
        try writer.addDrops(reason: .diskError, count: 3)
        try writer.addDrops(reason: .spillBehind, count: 2)
        try writer.close()
        let camera = try #require(try store.streams().first).id
        #expect(try store.index.removeGaps(streamID: camera, startingBefore: frames.pts(0)) == 1)
    }

    /// The store's gaps and drop counts, in words.
    static func losses(_ store: SegmentStore) throws -> [String] {
        try store.gaps().map { "gap \($0.startNanoseconds)..<\($0.endNanoseconds) \($0.reason.rawValue)" }
            + store.drops().sorted { $0.key.rawValue < $1.key.rawValue }.map { "drops \($0.key.rawValue) \($0.value)" }
    }

    static func removeIndex(_ dir: TemporaryDirectory) {
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: dir.path + "/index.sqlite" + suffix)
        }
    }

    /// A loss is made durable with the frames after it, while the writer stays open: the periodic sync of the segment
    /// syncs the losses' journal too when it has new records (the index's WAL is synced only at its checkpoints, so
    /// until then a power cut would lose the count from both). Without new records, it is not synced again.
    @Test func lossesAreSyncedWithTheSegmentsPeriodicSync() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48, fps: 30)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let fs = FaultInjectingFileSystem()
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(syncInterval: .milliseconds(100), fileSystem: fs))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        var next = 0
        func appendNext() throws {
            try writer.append(frames.frame(next))
            next += 1
        }
        for _ in 0..<10 { try appendNext() }
        let created = fs.syncCount(of: LossJournal.fileName)
        try writer.addDrops(reason: .spillBehind, count: 4)
        try waitUntil("the losses' journal is synced", interval: .milliseconds(5)) {
            try appendNext()
            return fs.syncCount(of: LossJournal.fileName) > created
        }
        let synced = fs.syncCount(of: LossJournal.fileName)
        // Three more periodic syncs of the segment, and no new loss: the journal is left alone.
        // The open segment, as the file system has it (its index row comes with the sync the writer collects).
        let segment = try #require(dir.segmentFiles().first { $0.hasSuffix(".partial") })
        let segmentSyncs = fs.syncCount(of: segment)
        try waitUntil("three more syncs of the segment", interval: .milliseconds(5)) {
            try appendNext()
            return fs.syncCount(of: segment) >= segmentSyncs + 3
        }
        #expect(fs.syncCount(of: LossJournal.fileName) == synced)
        try writer.close()
        #expect(try store.drops() == [.spillBehind: 4])
    }

    /// Announcing a loss costs the same however many came before: 20 000 announcements run on a thread of 1 MiB of
    /// stack. (Kept as a bare closure in a `Mutex`, the observer came back from each access wrapped in two more
    /// reabstraction thunks, each announcement running through all of them: 96 bytes more of stack each time in a
    /// debug build, so these would overflow it, and a recorder dropping frames for hours overflowed its spill
    /// thread's 8 MiB.)
    @Test func lossAnnouncementsRunInTheSameStackHoweverManyCameBefore() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try SegmentStore.open(directory: dir.path)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        let heard = Atomic<Int>(0)
        store.index.observeLosses { _ in heard.add(1, ordering: .relaxed) }
        let failure = Mutex<String?>(nil)
        try Self.onThread(stackBytes: 1 << 20) {
            do {
                for _ in 0..<20_000 { try writer.addDrops(reason: .spillBehind, count: 1) }
            } catch {
                failure.withAnnotatedLock { $0 = "\(error)" }
            }
        }
        #expect(failure.withAnnotatedLock { $0 } == nil)
        #expect(heard.load(ordering: .relaxed) == 20_000)
        try writer.close()
    }

    /// Runs `body` on a new thread with `stackBytes` of stack, and waits for it (the caller's thread does nothing
    /// meanwhile, so `body` may use what the caller holds).
    static func onThread(stackBytes: Int, _ body: @escaping () -> Void) throws {
        final class Work {
            let body: () -> Void
            init(_ body: @escaping () -> Void) { self.body = body }
        }
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        try #require(pthread_attr_setstacksize(&attributes, stackBytes) == 0)
        let work = Unmanaged.passRetained(Work(body))
        var thread = pthread_t()
        let made = pthread_create(
            &thread, &attributes,
            { raw in
                Unmanaged<Work>.fromOpaque(raw!).takeRetainedValue().body()
                return nil
            }, work.toOpaque())
        guard made == 0 else {
            work.release()
            throw Errno(rawValue: made)
        }
        pthread_join(thread, nil)
    }

    @Test func aRebuiltIndexGetsItsGapsAndDropCountsBack() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try Self.recordLosses(dir, frames: frames)
        let expected = [
            "gap \(frames.pts(29))..<\(frames.pts(40)) spill behind",
            "gap \(frames.pts(41))..<\(frames.pts(45)) input interval", "drops disk error 3", "drops spill behind 12",
        ]
        #expect(try Self.losses(try SegmentStore.openReadOnly(directory: dir.path)) == expected)
        Self.removeIndex(dir)
        let store = try SegmentStore.open(directory: dir.path)
        #expect(
            store.recovery.repaired.contains(
                "restored from losses.journal what the index had lost: 2 gaps and 15 dropped frames"),
            "\(store.recovery.repaired)")
        #expect(try Self.losses(store) == expected)
        #expect(try store.verify(repair: false).clean)
    }

    /// An index put back from a copy (what a `-wal` that lost its last commits leaves too): the losses recorded since
    /// come back, and a gap removed since is removed again. `verify` says so first without changing anything.
    @Test func anIndexThatLostItsLastChangesGetsItsLossesBack() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SegmentStore.open(directory: dir.path)
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<10 { try writer.append(frames.frame(i)) }
            try writer.recordGap(start: frames.pts(9), end: frames.pts(20), reason: .spillBehind)
            try writer.addDrops(reason: .spillBehind, count: 10)
            try writer.close()
        }
        try MarkerJournalTests.copyIndex(dir)
        let expected: [String]
        do {
            let store = try SegmentStore.open(directory: dir.path)
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 20..<30 { try writer.append(frames.frame(i)) }
            try writer.recordGap(start: frames.pts(29), end: frames.pts(35), reason: .diskError)
            try writer.addDrops(reason: .diskError, count: 5)
            try writer.addDrops(reason: .spillBehind, count: 1)
            try writer.close()
            let camera = try #require(try store.streams().first).id
            try store.index.removeGap(
                GapRow(
                    streamID: camera, startNanoseconds: frames.pts(9), endNanoseconds: frames.pts(20),
                    reason: .spillBehind))
            expected = try Self.losses(store)
            #expect(
                expected == [
                    "gap \(frames.pts(29))..<\(frames.pts(35)) disk error", "drops disk error 5",
                    "drops spill behind 11",
                ])
        }
        try MarkerJournalTests.copyIndex(dir, back: true)
        let dryRun = try SegmentStore.openReadOnly(directory: dir.path).verify(repair: false)
        #expect(
            dryRun.problems.contains(
                "the index lacks 1 gap and 6 dropped frames losses.journal has: 'rewind verify --repair' restores them"),
            "\(dryRun.problems)")
        #expect(
            dryRun.problems.contains(
                "the index has 1 gap losses.journal says were removed: 'rewind verify --repair' removes them"),
            "\(dryRun.problems)")
        let store = try SegmentStore.open(directory: dir.path)
        #expect(
            store.recovery.repaired.contains(
                "restored from losses.journal what the index had lost: 1 gap and 6 dropped frames"),
            "\(store.recovery.repaired)")
        #expect(
            store.recovery.repaired.contains(
                "removed 1 gap losses.journal says were removed (the index had lost the removal)"),
            "\(store.recovery.repaired)")
        #expect(try Self.losses(store) == expected)
        #expect(try store.verify(repair: false).clean)
    }

    /// A losses' journal damaged in the middle: the index's gaps and drops stand and the journal is written again;
    /// missing, it is written from the index; cut in its last record, it is cut back.
    @Test(arguments: ["damaged", "missing", "cut"])
    func aDamagedMissingOrCutJournalGivesWayToTheIndex(damage: String) throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try Self.recordLosses(dir, frames: frames)
        let expected = try Self.losses(try SegmentStore.openReadOnly(directory: dir.path))
        let path = dir.path + "/" + LossJournal.fileName
        var bytes = try #require(FileManager.default.contents(atPath: path))
        switch damage {
        case "damaged": bytes[20] ^= 0x01
        case "cut": bytes += LossJournal.encode(.gapsRemoved(stream: "camera", startingBefore: .max)).prefix(9)
        default: try FileManager.default.removeItem(atPath: path)
        }
        if damage != "missing" { try bytes.write(to: URL(fileURLWithPath: path)) }
        do {
            let store = try SegmentStore.open(directory: dir.path)
            if damage == "damaged" {
                #expect(
                    store.recovery.problems.contains(
                        "losses.journal is damaged (the record at byte 8 fails its checksum): the index's gaps and drop "
                            + "counts stand; the journal is written again from them"), "\(store.recovery.problems)")
            } else if damage == "cut" {
                #expect(
                    store.recovery.repaired.contains {
                        $0.hasPrefix("cut the unfinished last record of losses.journal")
                    })
            }
            #expect(try Self.losses(store) == expected)
            let written = try #require(try LossJournal.Contents.read(path: path, fileSystem: POSIXFileSystem()))
            #expect(written.damage == nil && !written.tornTail)
            #expect(written.drops["camera"] == [.spillBehind: 12, .diskError: 3])
            #expect(written.gaps["camera"]?.count == 2)
        }
        // A deleted index now comes back with them.
        Self.removeIndex(dir)
        #expect(try Self.losses(try SegmentStore.open(directory: dir.path)) == expected)
    }

    /// A record the journal cannot take (a full disk): the journal is removed rather than left without it, nothing
    /// more is written to it, and the next open writes it again from the index, which then survives its own loss.
    @Test func aJournalThatCannotTakeARecordIsRemovedAndWrittenAgainAtTheNextOpen() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/" + LossJournal.fileName
        let expected: [String]
        do {
            let faults = FaultInjectingFileSystem()
            let store = try SegmentStore.open(directory: dir.path, options: StoreOptions(fileSystem: faults))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<10 { try writer.append(frames.frame(i)) }
            try writer.recordGap(start: frames.pts(9), end: frames.pts(20), reason: .spillBehind)
            #expect(FileManager.default.fileExists(atPath: path))
            faults.failNextWrite(with: .error(ENOSPC))
            try writer.addDrops(reason: .spillBehind, count: 10)
            #expect(!FileManager.default.fileExists(atPath: path), "removed, not left without the drops")
            try writer.recordGap(start: frames.pts(20), end: frames.pts(25), reason: .diskError)
            try writer.close()
            #expect(!FileManager.default.fileExists(atPath: path), "nothing more written to it")
            expected = try Self.losses(store)
            #expect(expected.count == 3)
        }
        do {
            let store = try SegmentStore.open(directory: dir.path)
            #expect(store.recovery.problems.isEmpty, "\(store.recovery.problems)")
            #expect(try Self.losses(store) == expected)
        }
        Self.removeIndex(dir)
        #expect(try Self.losses(try SegmentStore.open(directory: dir.path)) == expected)
    }

    /// A stretch extended frame by frame and a counter raised again and again grow the journal by one record each,
    /// merged in place, not one per change; what it replays is still what the index holds.
    /// Drop counts that add past 64 bits (damage with intact checksums) read as the most there can be, not a trap.
    @Test func dropCountsPastSixtyFourBitsSaturate() {
        let half = Int64.max / 2 + 1
        let records: [LossJournal.Record] = [
            .dropsAdded(stream: "camera", reason: .spillBehind, count: half),
            .dropsAdded(stream: "camera", reason: .spillBehind, count: half),
            .dropsAdded(stream: "camera", reason: .memoryBudget, count: 3),
        ]
        let file = JournalFraming.header(magic: LossJournal.Contents.magic) + records.flatMap(LossJournal.encode)
        let contents = LossJournal.Contents.parse(file)
        #expect(contents.records == 3 && contents.damage == nil)
        #expect(contents.drops["camera"] == [.spillBehind: .max, .memoryBudget: 3])
        #expect(LossJournal.merged(records[0], records[1]) == nil)
    }

    /// Damage that hides where one record ends (its length changed: past the end of the file, or past any record;
    /// the journal's header changed in place) costs that record alone: the whole records after it are read from the
    /// next one found, and the damage is named. A header of a later build's version stops the reading instead.
    @Test(arguments: ["length past the end", "length past any record", "checksum", "header magic", "header version"])
    func damageThatHidesARecordsEndCostsThatRecordAlone(damage: String) {
        let records: [LossJournal.Record] = [
            .dropsAdded(stream: "camera", reason: .spillBehind, count: 1),
            .dropsAdded(stream: "camera", reason: .memoryBudget, count: 2),
            .dropsAdded(stream: "camera", reason: .diskError, count: 3),
        ]
        let whole = JournalFraming.header(magic: LossJournal.Contents.magic) + records.flatMap(LossJournal.encode)
        var file = whole
        let second = 8 + LossJournal.encode(records[0]).count
        switch damage {
        case "length past the end": file[second + 1] ^= 0xFF
        case "length past any record": file[second + 3] = 0x7F
        case "checksum": file[second + 4] ^= 0xFF
        case "header magic": file[0] ^= 0xFF
        default: file[7] = 0x40
        }
        let contents = LossJournal.Contents.parse(file)
        #expect(contents.damage != nil, "the damage is named")
        let kept = contents.drops["camera"] ?? [:]
        if damage.hasPrefix("header") {
            #expect(kept == [.spillBehind: 1, .memoryBudget: 2, .diskError: 3], "\(kept)")
        } else {
            #expect(kept == [.spillBehind: 1, .diskError: 3], "the damaged record alone is lost: \(kept)")
        }
        var newer = whole
        newer[4] = 2
        let later = LossJournal.Contents.parse(newer)
        #expect(later.damage?.contains("its version is 2") == true && later.drops.isEmpty, "\(later.damage ?? "")")
    }

    @Test func aStretchAndARisingCounterAreOneRecordEach() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let expected: [String]
        do {
            let store = try SegmentStore.open(directory: dir.path)
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<10 { try writer.append(frames.frame(i)) }
            for i in 10..<300 {
                _ = try writer.recordOrExtendGap(start: frames.pts(i), end: frames.pts(i + 1), reason: .inputInterval)
                try writer.addDrops(reason: .spillBehind, count: 2)
                if i.isMultiple(of: 100) {
                    // Another change between: the next ones start new records.
                    try writer.recordGap(start: frames.pts(400 + i), end: frames.pts(401 + i), reason: .diskError)
                }
            }
            try writer.close()
            expected = try Self.losses(store)
            #expect(
                expected.contains("gap \(frames.pts(10))..<\(frames.pts(300)) input interval")
                    && expected.contains("drops spill behind 580"), "\(expected)")
        }
        let journal = try #require(
            try LossJournal.Contents.read(path: dir.path + "/" + LossJournal.fileName, fileSystem: POSIXFileSystem()))
        #expect(journal.records < 20, "\(journal.records) records")
        Self.removeIndex(dir)
        #expect(try Self.losses(try SegmentStore.open(directory: dir.path)) == expected)
    }

    /// Replaying a journal gives what the index's statements give, for any order of changes: checked against the
    /// plain model of the `gaps` table (an array, each change a scan of it) over random runs of adds, extensions,
    /// removals and clean-ups, with repeated bounds so that changes hit the same gaps.
    @Test func replayingAJournalAgreesWithTheIndexsStatements() {
        // A seeded linear congruential generator (Knuth's MMIX constants): a failing run repeats.
        var state: UInt64 = 0x5eed
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 33
        }
        let reasons: [LossReason] = [.spillBehind, .diskError]
        for _ in 0..<200 {
            var model: [LossJournal.Gap] = []
            var bytes = Array("RWLJ".utf8) + [1, 0, 0, 0]
            for _ in 0..<Int(next() % 60) {
                let reason = reasons[Int(next() % 2)]
                let start = Int64(next() % 20)
                let end = start + Int64(next() % 5)
                let record: LossJournal.Record
                switch next() % 4 {
                case 0, 1:
                    record = .gapAdded(stream: "s", LossJournal.Gap(start: start, end: end, reason: reason))
                    model.append(LossJournal.Gap(start: start, end: end, reason: reason))
                case 2:
                    if next() % 2 == 0, !model.isEmpty {
                        let gap = model[Int(next() % UInt64(model.count))]
                        record = .gapRemoved(stream: "s", gap)
                        model.remove(at: model.firstIndex(of: gap)!)
                    } else {
                        record = .gapsRemoved(stream: "s", startingBefore: start)
                        model.removeAll { $0.start < start }
                    }
                default:
                    let newEnd = end + Int64(next() % 4)
                    record = .gapExtended(stream: "s", end: end, newEnd: newEnd, reason: reason)
                    for i in model.indices where model[i].end == end && model[i].reason == reason {
                        model[i].end = newEnd
                    }
                }
                bytes += LossJournal.encode(record)
            }
            let replayed = LossJournal.Contents.parse(bytes).gaps["s"] ?? []
            let order = { (a: LossJournal.Gap, b: LossJournal.Gap) in
                (a.start, a.end, a.reason.rawValue) < (b.start, b.end, b.reason.rawValue)
            }
            #expect(replayed.sorted(by: order) == model.sorted(by: order))
        }
    }

    /// A recording that runs for months, its gaps made and then removed with the segments retention deletes: the
    /// journal is written again with what stands whenever it has doubled since (and grown by 64 KiB), not only at the
    /// next open, and it still gives a lost index back every gap and drop count.
    @Test func aJournalOfManyRemovedGapsIsCompactedWhileTheStoreIsOpen() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/" + LossJournal.fileName
        var largest: Int64 = 0
        var expected: [String] = []
        do {
            let store = try SegmentStore.open(directory: dir.path)
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            // Frames, so that the stream outlives the index (a stream without frames is not rebuilt).
            for i in 0..<60 { try writer.append(frames.frame(i)) }
            let camera = try #require(try store.streams().first).id
            for i in 0..<4000 {
                let start = Int64(i) * 1_000_000
                try writer.recordGap(
                    start: start, end: start + 500_000, reason: i % 2 == 0 ? .spillBehind : .retention)
                if i % 7 == 0 { try writer.addDrops(reason: .diskError, count: 1) }
                // Retention's clean-up: the gaps of the oldest tenth of a second go.
                if i % 100 == 99 {
                    _ = try store.index.removeGaps(streamID: camera, startingBefore: start - 50_000_000)
                }
                let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int64)
                largest = max(largest, size)
            }
            try writer.close()
            expected = try Self.losses(store)
            // The gaps of the last 50 ms (51) and the one drop count.
            #expect(expected.count == 51 + 1, "\(expected)")
        }
        // 4000 gaps, 40 removals and the drops, written one by one, would be several hundred KiB.
        #expect(largest < 2 * 8192 + 65_536 + 512, "the journal grew to \(largest) bytes")
        let contents = try #require(try LossJournal.Contents.read(path: path, fileSystem: POSIXFileSystem()))
        #expect(contents.records < 2000, "\(contents.records)")
        Self.removeIndex(dir)
        let store = try SegmentStore.open(directory: dir.path)
        let rebuilt = try Self.losses(store)
        #expect(rebuilt == expected, "the journal alone gives every gap and drop count back: \(rebuilt)")
        #expect(try store.verify(repair: false).clean)
    }
}
