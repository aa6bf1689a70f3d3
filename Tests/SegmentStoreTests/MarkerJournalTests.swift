import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `DIR/markers.journal`: markers and their holds outlive an index that loses them, and a deletion the index lost
/// happens again; a damaged or cut journal gives way to what stands.
@Suite(.timeLimit(.minutes(45))) struct MarkerJournalTests {
    static let journal = MarkerJournal.fileName

    /// A store of stream `camera` with frames 0..<60.
    static func makeStore(_ dir: TemporaryDirectory, frames: TestFrames) throws -> SegmentStore {
        let store = try SegmentStore.open(directory: dir.path)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<60 { try writer.append(frames.frame(i)) }
        try writer.close()
        return store
    }

    /// The markers of the store as `(id, label, hold)`.
    static func markers(_ store: SegmentStore) throws -> [String] {
        try store.markers().sorted { $0.id < $1.id }.map { marker in
            "\(marker.id) \(marker.label)" + (marker.hold.map { " \($0.lowerBound)..<\($0.upperBound)" } ?? "")
        }
    }

    /// Copies (or, with `back`, puts back) `index.sqlite` and its `-wal` and `-shm`.
    static func copyIndex(_ dir: TemporaryDirectory, back: Bool = false) throws {
        let manager = FileManager.default
        for suffix in ["", "-wal", "-shm"] {
            let live = dir.path + "/index.sqlite" + suffix
            let copy = dir.path + "/copy.sqlite" + suffix
            let (from, to) = back ? (copy, live) : (live, copy)
            try? manager.removeItem(atPath: to)
            if manager.fileExists(atPath: from) { try manager.copyItem(atPath: from, toPath: to) }
        }
    }

    /// A store of `count` markers ("m0"…) with the marker `removed` deleted after them, closed: the directory's
    /// journal then holds `count` additions and one removal.
    static func storeWithMarkers(_ dir: TemporaryDirectory, frames: TestFrames, count: Int, removed: Int64) throws {
        let store = try makeStore(dir, frames: frames)
        for i in 0..<count {
            _ = try store.addMarker(streamName: "camera", at: frames.pts(i), label: "m\(i)", hold: nil)
        }
        #expect(try store.removeMarker(id: removed) != nil)
    }

    /// Where each record of a journal's bytes starts, read by the lengths in their headers (after the 8-byte header).
    static func recordStarts(_ bytes: Data) -> [Int] {
        var starts: [Int] = []
        var offset = 8
        while offset + 8 <= bytes.count {
            starts.append(offset)
            offset += 8 + bytes[offset..<(offset + 4)].reversed().reduce(0) { $0 << 8 | Int($1) }
        }
        return starts
    }

    static func journalContents(_ dir: TemporaryDirectory) throws -> MarkerJournal.Contents {
        try #require(try MarkerJournal.Contents.read(path: dir.path + "/" + journal, fileSystem: POSIXFileSystem()))
    }

    /// An index put back from a copy (what a `-wal` that lost its last commits leaves too): the markers added since
    /// come back with their ids and holds, one deleted since goes again, and ids go on past every one given.
    @Test func anIndexThatLostItsLastChangesGetsThemBackFromTheJournal() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try Self.makeStore(dir, frames: frames)
            _ = try store.addMarker(streamName: "camera", at: frames.pts(5), label: "first", hold: nil)
            _ = try store.addMarker(streamName: "camera", at: frames.pts(6), label: "second", hold: nil)
        }
        try Self.copyIndex(dir)
        do {
            let store = try SegmentStore.open(directory: dir.path)
            _ = try store.addMarker(
                streamName: "camera", at: frames.pts(20), label: "held", hold: frames.pts(10)..<frames.pts(30))
            _ = try store.addMarker(streamName: "camera", at: frames.pts(21), label: "ünïcode ✓", hold: nil)
            #expect(try store.removeMarker(id: 1) != nil)
            #expect(
                try Self.markers(store) == ["2 second", "3 held \(frames.pts(10))..<\(frames.pts(30))", "4 ünïcode ✓"])
        }
        try Self.copyIndex(dir, back: true)
        let readOnly = try SegmentStore.openReadOnly(directory: dir.path)
        // Read-only, nothing is brought into step, yet the markers listed are those the next open will have: the
        // index's copy lacks 3 and 4 and still has 1.
        let expected = ["2 second", "3 held \(frames.pts(10))..<\(frames.pts(30))", "4 ünïcode ✓"]
        #expect(try Self.markers(readOnly) == expected)
        #expect(
            try readOnly.markers(streamName: "camera", in: frames.pts(20)..<frames.pts(21)).map(\.label) == ["held"])
        #expect(try readOnly.markers(touching: frames.pts(12)..<frames.pts(13)).map(\.label) == ["held"], "by its hold")
        #expect(try readOnly.markers(touching: frames.pts(5)..<frames.pts(6)).isEmpty, "1 was deleted")
        let dryRun = try readOnly.verify(repair: false)
        #expect(!dryRun.clean)
        #expect(
            dryRun.problems.contains(
                "the index lacks 2 markers markers.journal has (ids 3, 4): 'rewind verify --repair' restores them"),
            "\(dryRun.problems)")
        #expect(
            dryRun.problems.contains(
                "the index has 1 marker markers.journal says were deleted (id 1): 'rewind verify --repair' removes them"
            ),
            "\(dryRun.problems)")

        let store = try SegmentStore.open(directory: dir.path)
        #expect(
            store.recovery.repaired.contains(
                "restored 2 markers the index had lost from markers.journal (ids 3, 4), with their holds"),
            "\(store.recovery.repaired)")
        #expect(
            store.recovery.repaired.contains(
                "removed 1 marker markers.journal says were deleted (the index had lost the deletion: id 1)"),
            "\(store.recovery.repaired)")
        #expect(try Self.markers(store) == ["2 second", "3 held \(frames.pts(10))..<\(frames.pts(30))", "4 ünïcode ✓"])
        #expect(try store.verify(repair: false).clean)
        let next = try store.addMarker(streamName: "camera", at: frames.pts(40), label: "next", hold: nil)
        #expect(next.id == 5, "past every id given, though the index's copy had given only 2")
    }

    /// `verify` beside a process recording into the store leaves the journals alone (it could look between the
    /// index's change and the journal's); without one, it compares them.
    @Test func aDryRunBesideARecorderLeavesTheJournalsAlone() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let lost =
            "the index has 1 marker markers.journal says were deleted (id 1): 'rewind verify --repair' removes them"
        do {
            let store = try Self.makeStore(dir, frames: frames)
            _ = try store.addMarker(streamName: "camera", at: frames.pts(5), label: "first", hold: nil)
            let handle = try #require(FileHandle(forWritingAtPath: dir.path + "/" + Self.journal))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(MarkerJournal.encode(.removed(1))))
            try handle.close()
            #expect(try SegmentStore.openReadOnly(directory: dir.path).verify(repair: false).clean)
        }
        #expect(try SegmentStore.openReadOnly(directory: dir.path).verify(repair: false).problems == [lost])
    }

    /// A deleted index is rebuilt from the segment files; its markers and holds come back from the journal, and a
    /// deleted marker's id is not given again.
    @Test func aRebuiltIndexGetsItsMarkersAndHoldsBack() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try Self.makeStore(dir, frames: frames)
            _ = try store.addMarker(
                streamName: "camera", at: frames.pts(20), label: "held", hold: frames.pts(10)..<frames.pts(30))
            _ = try store.addMarker(streamName: "camera", at: frames.pts(22), label: "deleted", hold: nil)
            #expect(try store.removeMarker(id: 2) != nil)
        }
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: dir.path + "/index.sqlite" + suffix)
        }
        let store = try SegmentStore.open(directory: dir.path)
        #expect(
            store.recovery.repaired.contains {
                $0.hasPrefix("the index knew none of the segment files (one there; it was missing, or set aside)")
            }, "\(store.recovery.repaired)")
        #expect(
            store.recovery.repaired.contains(
                "restored 1 marker the index had lost from markers.journal (id 1), with its hold"),
            "\(store.recovery.repaired)")
        #expect(try Self.markers(store) == ["1 held \(frames.pts(10))..<\(frames.pts(30))"])
        #expect(try store.addMarker(streamName: "camera", at: frames.pts(1), label: "new", hold: nil).id == 3)
    }

    /// A rebuilt index and a journal with one record damaged inside (its length whole): every other record counts,
    /// those after the damaged one too (a later marker, a later deletion), and the repair says which change is lost.
    /// A length damaged so that it runs past the end, with whole records after it, is damage too, not a last record
    /// cut short, and is said; the records after it are read from the next whole one (they were all lost).
    @Test(arguments: [true, false])
    func aRebuiltIndexGetsEveryWholeRecordOfADamagedJournal(lengthDamaged: Bool) throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try Self.storeWithMarkers(dir, frames: frames, count: 4, removed: 1)
        let path = dir.path + "/" + Self.journal
        var bytes = try #require(FileManager.default.contents(atPath: path))
        let starts = Self.recordStarts(bytes)
        #expect(starts.count == 5, "\(starts)")
        // The second marker's record: its payload, or its length (256 bytes more, past the end of the file).
        if lengthDamaged { bytes[starts[1] + 1] ^= 0x01 } else { bytes[starts[1] + 12] ^= 0x40 }
        try bytes.write(to: URL(fileURLWithPath: path))
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: dir.path + "/index.sqlite" + suffix)
        }
        let store = try SegmentStore.open(directory: dir.path)
        let said = store.recovery.repaired.first { $0.hasPrefix("markers.journal is damaged (the record at byte ") }
        #expect(said != nil, "\(store.recovery.repaired)")
        if lengthDamaged {
            #expect(said?.contains("past the end of the file, and a whole record follows") == true, "\(said ?? "")")
        }
        // The records after the damaged one are read from the next whole one (where its length was damaged too).
        #expect(try Self.markers(store) == ["3 m2", "4 m3"], "marker 1 deleted, marker 2's record damaged")
    }

    /// A journal damaged in the middle: the index's markers stand and the journal is written again from them; one cut
    /// inside its last record (a change being written when the process stopped) is cut back.
    @Test(arguments: ["damaged", "cut", "missing", "garbage"])
    func aDamagedCutOrMissingJournalGivesWayToTheIndex(damage: String) throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try Self.makeStore(dir, frames: frames)
            for i in 0..<3 {
                _ = try store.addMarker(streamName: "camera", at: frames.pts(i), label: "m\(i)", hold: nil)
            }
        }
        let path = dir.path + "/" + Self.journal
        var bytes = try #require(FileManager.default.contents(atPath: path))
        switch damage {
        case "damaged": bytes[MarkerJournal.encode(.removed(1)).count + 20] ^= 0x40  // inside the first record
        case "cut": bytes += MarkerJournal.encode(.removed(2)).prefix(11)
        case "garbage": bytes = Data(repeating: 0x5A, count: 100)
        default: bytes = Data()
        }
        if damage == "missing" {
            try FileManager.default.removeItem(atPath: path)
        } else {
            try bytes.write(to: URL(fileURLWithPath: path))
        }
        let store = try SegmentStore.open(directory: dir.path)
        let recovery = store.recovery
        switch damage {
        case "damaged":
            #expect(
                recovery.problems.contains(
                    "markers.journal is damaged (the record at byte 8 fails its checksum): the index's 3 markers stand; "
                        + "the journal is written again from them"), "\(recovery.problems)")
        case "garbage":
            #expect(
                recovery.problems.contains {
                    $0.hasPrefix("markers.journal is damaged (it does not start with the journal's header)")
                },
                "\(recovery.problems)")
        case "cut":
            #expect(
                recovery.repaired.contains(
                    "cut the unfinished last record of markers.journal (a marker change being written when the process "
                        + "stopped)"), "\(recovery.repaired)")
            #expect(recovery.problems.isEmpty, "\(recovery.problems)")
        default:
            #expect(
                recovery.repaired.contains("wrote markers.journal from the index's 3 markers (there was no journal)"))
        }
        #expect(try Self.markers(store) == ["1 m0", "2 m1", "3 m2"], "the index's markers stand")
        let written = try Self.journalContents(dir)
        #expect(written.damage == nil && !written.tornTail)
        #expect(written.live.keys.sorted() == [1, 2, 3])
        #expect(try store.verify(repair: false).clean)
        // The journal goes on after what was written again.
        #expect(try store.removeMarker(id: 2) != nil)
        #expect(try Self.journalContents(dir).live.keys.sorted() == [1, 3])
    }

    /// A journal whose last record, a removal the index made, is cut short (a byte lost at its end, or its length
    /// damaged so that it and the record before it read as unfinished): the marker the index gave and removed
    /// stays removed, not brought back from the records before the cut.
    @Test(arguments: [true, false])
    func aRemovalTheIndexMadeIsNotUndoneByAJournalCutShort(inTheRemoval: Bool) throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try Self.storeWithMarkers(dir, frames: frames, count: 3, removed: 2)
        let path = dir.path + "/" + Self.journal
        var bytes = try #require(FileManager.default.contents(atPath: path))
        if inTheRemoval {
            bytes.removeLast()
        } else {
            // The length of the third marker's record, before the removal, says more than the file holds.
            let starts = Self.recordStarts(bytes)
            #expect(starts.count == 4, "\(starts)")
            bytes[starts[2] + 1] ^= 0x01
        }
        try bytes.write(to: URL(fileURLWithPath: path))
        let store = try SegmentStore.open(directory: dir.path)
        #expect(try Self.markers(store) == ["1 m0", "3 m2"], "\(store.recovery.repaired)")
        #expect(!store.recovery.repaired.contains { $0.hasPrefix("restored") }, "\(store.recovery.repaired)")
        #expect(try Self.journalContents(dir).live.keys.sorted() == [1, 3])
        #expect(try store.verify(repair: false).clean)
    }

    /// A journal that cannot be written: the marker is refused and not in the index (nothing acknowledged that a lost
    /// index would not bring back), and the journal is as it was; a removal stays undone.
    @Test func aJournalThatCannotBeWrittenRefusesTheChange() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do { _ = try Self.makeStore(dir, frames: frames) }
        let faults = FaultInjectingFileSystem()
        let store = try SegmentStore.open(directory: dir.path, options: StoreOptions(fileSystem: faults))
        _ = try store.addMarker(streamName: "camera", at: frames.pts(1), label: "kept", hold: nil)
        let before = try #require(FileManager.default.contents(atPath: dir.path + "/" + Self.journal))
        for fault in ["write", "sync"] {
            if fault == "write" { faults.failNextWrite(with: .error(ENOSPC)) } else { faults.failNextSync(with: EIO) }
            #expect(throws: SegmentStoreError.self) {
                try store.addMarker(streamName: "camera", at: frames.pts(2), label: "refused", hold: nil)
            }
            #expect(try Self.markers(store) == ["1 kept"], "\(fault)")
            #expect(FileManager.default.contents(atPath: dir.path + "/" + Self.journal) == before, "\(fault)")
        }
        faults.failNextSync(with: EIO)
        #expect(throws: SegmentStoreError.self) { try store.removeMarker(id: 1) }
        #expect(try Self.markers(store) == ["1 kept"])
        #expect(try store.removeMarker(id: 1) != nil)
        #expect(try Self.journalContents(dir).live.isEmpty)
    }

    /// A rebuilt index without a stream the journals name (all its segment files gone too): what they hold of it is
    /// dropped from them and said once, not reported at every open.
    @Test func whatTheJournalsHoldOfAStreamWithNoFramesLeftIsDroppedOnce() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try Self.makeStore(dir, frames: frames)
            let other = try store.makeWriter(streamName: "other", stream: frames.stream)
            for i in 0..<10 { try other.append(frames.frame(i)) }
            try other.recordGap(start: frames.pts(9), end: frames.pts(12), reason: .spillBehind)
            try other.close()
            _ = try store.addMarker(streamName: "camera", at: frames.pts(5), label: "kept", hold: nil)
            _ = try store.addMarker(
                streamName: "other", at: frames.pts(5), label: "gone", hold: frames.pts(0)..<frames.pts(9))
        }
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg"])
        try FileManager.default.removeItem(atPath: dir.segments + "/000002.seg")
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: dir.path + "/index.sqlite" + suffix)
        }
        do {
            let store = try SegmentStore.open(directory: dir.path)
            #expect(
                store.recovery.repaired.contains(
                    "marker 2 ('gone') of stream 'other' is in markers.journal, but the store has no stream 'other' (no "
                        + "frame of it is left): dropped from the journal"), "\(store.recovery.repaired)")
            #expect(
                store.recovery.repaired.contains(
                    "losses.journal has gaps or drop counts of stream 'other', but the store has no stream 'other' (no "
                        + "frame of it is left): dropped from the journal"), "\(store.recovery.repaired)")
            #expect(store.recovery.problems.isEmpty, "\(store.recovery.problems)")
            #expect(try Self.markers(store) == ["1 kept"])
        }
        #expect(try Self.journalContents(dir).live.keys.sorted() == [1])
        let again = try SegmentStore.open(directory: dir.path)
        #expect(again.recovery.repaired.isEmpty && again.recovery.problems.isEmpty, "\(again.recovery)")
        #expect(try again.verify(repair: false).clean)
        #expect(try again.addMarker(streamName: "camera", at: 0, label: "next", hold: nil).id == 3)
    }

    /// Something else where a journal belongs (a directory): the store opens and says so, markers are refused, and
    /// once it is moved away the next open writes the journal again from the index.
    @Test func aDirectoryInTheJournalsPlaceIsNamedAndMarkersRefused() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try Self.makeStore(dir, frames: frames)
            _ = try store.addMarker(streamName: "camera", at: frames.pts(5), label: "first", hold: nil)
        }
        let path = dir.path + "/" + Self.journal
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        do {
            let store = try SegmentStore.open(directory: dir.path)
            #expect(
                store.recovery.problems.contains {
                    $0.hasPrefix("markers.journal could not be brought in step with the index (")
                        && $0.contains("Is a directory")
                        && $0.hasSuffix("move away what is in its place; the next open tries again")
                }, "\(store.recovery.problems)")
            let refused = #expect(throws: SegmentStoreError.self) {
                try store.addMarker(streamName: "camera", at: frames.pts(6), label: "refused", hold: nil)
            }
            #expect(refused.map { "\($0)" }?.contains(path) == true, "\(String(describing: refused))")
            #expect(try Self.markers(store) == ["1 first"])
        }
        try FileManager.default.removeItem(atPath: path)
        let store = try SegmentStore.open(directory: dir.path)
        #expect(
            store.recovery.repaired.contains("wrote markers.journal from the index's 1 marker (there was no journal)"))
        #expect(try Self.journalContents(dir).live.keys.sorted() == [1])
    }

    /// Many markers added and removed: the journal is written again with what stands when it is opened, not left to
    /// grow with every change ever made.
    @Test func aJournalOfManyRemovedMarkersIsCompactedAtOpen() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try Self.makeStore(dir, frames: frames)
            for i in 0..<200 {
                let marker = try store.addMarker(
                    streamName: "camera", at: frames.pts(i % 60), label: "m\(i)", hold: nil)
                if i % 10 != 0 { #expect(try store.removeMarker(id: marker.id) != nil) }
            }
            #expect(try Self.journalContents(dir).records == 380)
        }
        let store = try SegmentStore.open(directory: dir.path)
        let compacted = try Self.journalContents(dir)
        #expect(compacted.records == 21, "20 markers and the highest id given")
        #expect(compacted.live.count == 20 && compacted.highestID == 200)
        #expect(try store.markers().count == 20)
        #expect(try store.addMarker(streamName: "camera", at: 0, label: "next", hold: nil).id == 201)
    }

    /// A store open for months with markers added and removed all along: the journal is written again with what
    /// stands whenever it has doubled since (and grown by 64 KiB), not only at the next open, and what it holds
    /// rebuilds the same markers.
    @Test func aJournalOfManyRemovedMarkersIsCompactedWhileTheStoreIsOpen() throws {
        let frames = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/" + Self.journal
        var largest: Int64 = 0
        var kept: [String] = []
        do {
            let store = try Self.makeStore(dir, frames: frames)
            for i in 1...3000 {
                let marker = try store.addMarker(
                    streamName: "camera", at: frames.pts(i % 60), label: "marker number \(i)", hold: nil)
                if i % 100 == 0 { continue }
                #expect(try store.removeMarker(id: marker.id) != nil)
                let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int64)
                largest = max(largest, size)
            }
            kept = try Self.markers(store)
            #expect(kept.count == 30)
        }
        // 5970 changes written one by one would be about 300 KiB; never more than twice what stands plus 64 KiB.
        #expect(largest < 2 * 2048 + 65_536 + 512, "the journal grew to \(largest) bytes")
        let contents = try Self.journalContents(dir)
        #expect(contents.live.count == 30 && contents.highestID == 3000 && contents.records < 1000)
        LossJournalTests.removeIndex(dir)
        let store = try SegmentStore.open(directory: dir.path)
        #expect(try Self.markers(store) == kept, "the journal alone rebuilds every marker")
        #expect(try store.addMarker(streamName: "camera", at: 0, label: "next", hold: nil).id == 3001)
    }
}
