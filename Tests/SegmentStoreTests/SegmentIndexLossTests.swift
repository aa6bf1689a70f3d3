import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

/// Damage the index knows more about than the file: a segment cut short, removed, or with a damaged header, and
/// index rows that no longer match their file. Every frame the index had and the store can no longer read is
/// counted as a `damaged` gap, and nothing readable is thrown away.
@Suite(.timeLimit(.minutes(45))) struct SegmentIndexLossTests {
    /// The `damaged` gaps of the store, as `(start, end)`.
    static func damagedGaps(_ store: SegmentStore) throws -> [[Int64]] {
        try store.gaps().filter { $0.reason == .damaged }.map { [$0.startNanoseconds, $0.endNanoseconds] }
    }

    /// Records frames 0..<`count` of stream `camera` in segments of 30 frames (the last one shorter): four files.
    static func recordSegmentsOf30Frames(_ dir: TemporaryDirectory, frames: TestFrames, count: Int) throws {
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(segmentMaxDuration: .nanoseconds(frames.pts(30) - 1_000)))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<count { try writer.append(frames.frame(i)) }
        try writer.close()
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg", "000003.seg", "000004.seg"])
    }

    /// Swaps two files of `segments/` (each under the other's name).
    static func swap(_ first: String, _ second: String, in dir: TemporaryDirectory) throws {
        let manager = FileManager.default
        try manager.moveItem(atPath: dir.segments + "/" + first, toPath: dir.path + "/swap")
        try manager.moveItem(atPath: dir.segments + "/" + second, toPath: dir.segments + "/" + first)
        try manager.moveItem(atPath: dir.path + "/swap", toPath: dir.segments + "/" + second)
    }

    /// Segment 1 (frames 0…99) cut at a byte: inside a record, just after its header, or inside its header.
    @Test(arguments: ["record", "after header", "inside header"])
    func aSegmentCutShortCountsEveryFrameTheIndexHadAsLost(cut: String) throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let entries = try SegmentSalvageTests.makeStore(dir, frames: frames)
        let headerLength = SegmentFormat.fixedHeaderLength + "camera".utf8.count
        let length: Int64 =
            switch cut {
            case "record": entries[60].offset + 100
            case "after header": Int64(headerLength + 10)
            default: 50
            }
        let path = dir.segments + "/000001.seg"
        try writeFile(path, FileManager.default.contents(atPath: path)!.prefix(Int(length)))
        let kept = cut == "record" ? 60 : 0

        let store = try SegmentStore.open(directory: dir.path)
        #expect(!(try store.verify(repair: false).clean))
        let repaired = try store.verify(repair: true)
        #expect(try store.verify(repair: false).clean, "\(repaired.repaired)")
        if cut != "inside header" {
            // Opening the store let go of the rows the file no longer backs (all 100 when the first record is cut,
            // with the segment's row) and counted them; the salvage, which sees only the damaged record, says so
            // instead of counting one lost frame more.
            let salvage = try #require(repaired.repaired.first { $0.hasPrefix("salvaged 0 frames") })
            #expect(salvage.contains("the frames from \(kept) on were counted lost already"), "\(salvage)")
            #expect(!salvage.contains("lost 1 frame"), "\(salvage)")
            #expect(repaired.salvage.first?.lost.allSatisfy(\.countedBefore) == true)
            #expect(repaired.salvage.first?.lostFrameCount == 0, "counted when the store was opened")
        }
        // One gap from the last frame kept (or the first lost) to segment 2's first frame.
        #expect(try Self.damagedGaps(store) == [[frames.pts(kept == 0 ? 0 : kept - 1), frames.pts(100)]])
        let read = try readAll(store)
        let expected = Array(0..<kept) + Array(100..<130)
        #expect(read.map(\.0) == expected.map { frames.pts($0) })
        #expect(read.map(\.1) == expected.map { frames.expectedDigest($0) }, "bit-exact")
        if cut == "inside header" {
            // Nothing is deleted: the unreadable file is kept under a name the store ignores.
            #expect(dir.segmentFiles() == ["000001.seg.unreadable", "000002.seg"])
            #expect(FileManager.default.contents(atPath: path + ".unreadable")?.count == 50)
            #expect(repaired.repaired.contains { $0.contains("000001.seg.unreadable") && $0.contains("100") })
        }
    }

    /// A missing segment file is named; a repair counts its frames lost; when the file comes back, the next repair
    /// indexes its frames again and the `damaged` gap over them goes.
    @Test func aMissingSegmentIsNamedAndARepairCountsItsFramesAsLost() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        _ = try SegmentSalvageTests.makeStore(dir, frames: frames)
        try FileManager.default.moveItem(atPath: dir.segments + "/000001.seg", toPath: dir.path + "/moved.seg")
        let store = try SegmentStore.open(directory: dir.path)
        #expect {
            _ = try readAll(store)
        } throws: { error in
            guard case SegmentStoreError.missingSegment(let file, let count) = error else { return false }
            return file == "000001.seg" && count == 100 && "\(error)".contains("segments/000001.seg is missing")
        }
        let checked = try store.verify(repair: false)
        #expect(checked.problems.contains { $0.contains("000001.seg (100 frames) has no file in segments/") })
        #expect(!checked.clean)
        let repaired = try store.verify(repair: true)
        #expect(repaired.repaired.contains { $0.contains("its 100 frames are lost") })
        // Settled by the repair: nothing left for it to report as a problem (a script's `verify --repair &&` goes on).
        #expect(repaired.problems.isEmpty && repaired.clean, "\(repaired)")
        #expect(try Self.damagedGaps(store) == [[frames.pts(0), frames.pts(100)]])
        #expect(try readAll(store).map(\.0) == (100..<130).map { frames.pts($0) })

        try FileManager.default.moveItem(atPath: dir.path + "/moved.seg", toPath: dir.segments + "/000001.seg")
        let back = try store.verify(repair: true)
        #expect(back.repaired.contains { $0.contains("added 100 index rows for segment 000001.seg") }, "\(back)")
        #expect(try Self.damagedGaps(store).isEmpty)
        #expect(try readAll(store).map(\.0) == (0..<130).map { frames.pts($0) })
        #expect(try store.verify(repair: false).clean)
    }

    /// A segment file renamed to a number no segment has: a check names it as the index's segment's file, and the
    /// store's next open (a recording, a repair) names it back, every frame kept and no gap (the repair said its frames
    /// were lost, then indexed the renamed file again).
    @Test func aSegmentFileRenamedToANewNumberIsNamedBack() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try Self.recordSegmentsOf30Frames(dir, frames: frames, count: 120)
        try FileManager.default.moveItem(atPath: dir.segments + "/000002.seg", toPath: dir.segments + "/000009.seg")
        let checked = try SegmentStore.openReadOnly(directory: dir.path).verify(repair: false)
        #expect(
            checked.problems == [
                "segments/000009.seg is the file of the index's segment 000002.seg (renamed); 'rewind verify "
                    + "--repair' names it back, nothing lost"
            ], "\(checked.problems)")
        let store = try SegmentStore.open(directory: dir.path)
        #expect(
            store.recovery.repaired.contains(
                "segments/000009.seg is the file of the index's segment 000002.seg (renamed): named it back, nothing lost"
            ),
            "\(store.recovery)")
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg", "000003.seg", "000004.seg"])
        #expect(try store.gaps().isEmpty)
        let read = try readAll(store)
        #expect(read.map(\.0) == (0..<120).map { frames.pts($0) })
        #expect(read.map(\.1) == (0..<120).map { frames.expectedDigest($0) })
        #expect(try store.verify(repair: false).clean)
    }

    /// Two segment files swapped (each under the other's name): a repair indexes each file's frames at their own
    /// pts, every frame once, with no gap; nothing is taken for a recording that started its clock again.
    @Test func swappedSegmentFilesAreIndexedAtTheirOwnTimes() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try Self.recordSegmentsOf30Frames(dir, frames: frames, count: 120)
        try Self.swap("000002.seg", "000003.seg", in: dir)
        let store = try SegmentStore.open(directory: dir.path)
        let repaired = try store.verify(repair: true)
        #expect(!repaired.repaired.contains { $0.contains("moved the") }, "\(repaired.repaired)")
        let gaps = try store.gaps()
        #expect(gaps.isEmpty, "\(gaps)")
        let read = try readAll(store)
        #expect(read.map(\.0) == (0..<120).map { frames.pts($0) })
        #expect(read.map(\.1) == (0..<120).map { frames.expectedDigest($0) })
        #expect(try store.verify(repair: false).clean)
    }

    /// Segment files of different lengths swapped (30 frames under the name of one of 15, and back): a check names
    /// each as the other's file, and a repair indexes each at its own frames' times and says nothing is lost. (The
    /// longer row under the shorter file was counted lost at once — "30 frames are lost" — although the other file
    /// held every one of those frames.)
    @Test func swappedSegmentFilesOfDifferentLengthsLoseNothing() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try Self.recordSegmentsOf30Frames(dir, frames: frames, count: 105)
        try Self.swap("000001.seg", "000004.seg", in: dir)
        do {
            let readOnly = try SegmentStore.openReadOnly(directory: dir.path)
            let dry = try readOnly.verify(repair: false)
            #expect(
                dry.problems.contains {
                    $0.contains("segments/000001.seg is the file of the index's segment 000004.seg (files swapped")
                }, "\(dry.problems)")
        }
        // Opening the store for writing reindexes both (their rows' frame counts differ from the files').
        let store = try SegmentStore.open(directory: dir.path)
        #expect(!store.recovery.repaired.contains { $0.contains("lost") }, "\(store.recovery.repaired)")
        #expect(
            store.recovery.repaired.contains { $0.contains("it is the file of the index's segment 000001.seg") },
            "\(store.recovery.repaired)")
        let repaired = try store.verify(repair: true)
        #expect(!repaired.repaired.contains { $0.contains("lost") }, "\(repaired.repaired)")
        #expect(try store.gaps().isEmpty)
        let read = try readAll(store)
        #expect(read.map(\.0) == (0..<105).map { frames.pts($0) })
        #expect(read.map(\.1) == (0..<105).map { frames.expectedDigest($0) })
        #expect(try store.verify(repair: false).clean)
    }

    /// The files of two cameras of one format swapped, their frames stored raw (so every record has the same size at
    /// the same pts in both): a read of either stream refuses the other's file instead of returning its frames, a
    /// check names the swap, and a repair indexes each file under its own stream, every frame bit-exact.
    @Test func swappedFilesOfTwoStreamsOfOneSizeAreNeverReadAsEachOthers() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        func frame(_ index: Int, of stream: String) -> FrameView {
            let view = frames.frame(index + (stream == "b" ? 1000 : 0))
            var info = view.info
            info.pts = FrameTime(nanoseconds: frames.pts(index))
            info.ptsNanoseconds = frames.pts(index)
            return FrameView(layout: view.layout, info: info, bytes: view.bytes)
        }
        do {
            let store = try SegmentStore.open(
                directory: dir.path,
                options: StoreOptions(
                    segmentMaxDuration: .nanoseconds(frames.pts(30) - 1_000), codecPolicy: .forced(.raw)))
            let writers = try ["a", "b"].map { try store.makeWriter(streamName: $0, stream: frames.stream) }
            for i in 0..<60 {
                for (name, writer) in zip(["a", "b"], writers) { try writer.append(frame(i, of: name)) }
            }
            for writer in writers { try writer.close() }
        }
        let (first, second) = try {
            let store = try SegmentStore.open(directory: dir.path)
            return (
                try #require(try store.segments(streamName: "a").first?.fileName),
                try #require(try store.segments(streamName: "b").first?.fileName)
            )
        }()
        try Self.swap(first, second, in: dir)
        let store = try SegmentStore.open(directory: dir.path)
        for name in ["a", "b"] {
            #expect {
                try store.frames(streamName: name, in: Int64.min..<Int64.max) { _ in true }
            } throws: { error in
                "\(error)".contains(
                    "it holds stream '\(name == "a" ? "b" : "a")', but the index lists it under stream '\(name)'")
            }
        }
        let dry = try store.verify(repair: false)
        #expect(
            dry.problems.contains { $0.contains("segments/\(first) is the file of the index's segment \(second)") },
            "\(dry.problems)")
        _ = try store.verify(repair: true)
        #expect(try store.verify(repair: false).clean)
        for name in ["a", "b"] {
            var digests: [UInt32] = []
            try store.frames(streamName: name, in: Int64.min..<Int64.max) { view in
                digests.append(CRC32C.checksum(view.bytes))
                return true
            }
            #expect(digests == (0..<60).map { frames.expectedDigest($0 + (name == "b" ? 1000 : 0)) }, "stream \(name)")
        }
    }

    /// Streams whose capture times lie at the two ends of the 64-bit range: an index rebuilt from their files places
    /// them on the recorder clock without overflowing, and every frame reads back.
    @Test func captureTimesAtTheEndsOfTheRangeRebuildAnIndex() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SegmentStore.open(directory: dir.path)
            for (name, wall) in [("a", Int64.max - 10), ("b", Int64.min)] {
                let writer = try store.makeWriter(streamName: name, stream: frames.stream)
                for i in 0..<3 {
                    let view = frames.frame(i)
                    var info = view.info
                    info.wallNanoseconds = wall + Int64(i)
                    try writer.append(FrameView(layout: view.layout, info: info, bytes: view.bytes))
                }
                try writer.close()
            }
        }
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: dir.path + "/index.sqlite" + suffix)
        }
        let store = try SegmentStore.open(directory: dir.path)
        #expect(
            store.recovery.repaired.contains { $0.contains("the index knew none of the") }, "\(store.recovery.repaired)"
        )
        for name in ["a", "b"] {
            var count = 0
            try store.frames(streamName: name, in: Int64.min..<Int64.max) { _ in
                count += 1
                return true
            }
            #expect(count == 3, "stream \(name)")
        }
        #expect(try store.verify(repair: false).clean)
    }

    /// Segment headers keep the stream's chroma siting and pixel aspect: an index rebuilt from the files knows them,
    /// and a file whose header does not say (a build that kept neither) does not undo them.
    @Test func anIndexRebuiltFromTheFilesKnowsWhereChromaSitsAndWhatShapePixelsAre() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        var shaped = frames.stream
        shaped.chromaSiting = .topLeft
        shaped.pixelAspect = try #require(PixelAspect(numerator: 64, denominator: 45))
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SegmentStore.open(directory: dir.path)
            for (stream, range) in [(frames.stream, 0..<3), (shaped, 3..<6), (frames.stream, 6..<9)] {
                let writer = try store.makeWriter(streamName: "camera", stream: stream)
                for i in range { try writer.append(frames.frame(i)) }
                try writer.close()
            }
            #expect(try store.streams().map(\.description) == [shaped])
        }
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: dir.path + "/index.sqlite" + suffix)
        }
        let store = try SegmentStore.open(directory: dir.path)
        #expect(try store.streams().map(\.description) == [shaped])
        #expect(try readAll(store).map(\.1) == (0..<9).map { frames.expectedDigest($0) })
        #expect(try store.verify(repair: false).clean)
    }

    /// A copy of a segment file the store holds (another name, every frame at the same pts, capture time and size)
    /// is not a recording that started its clock again: a repair moves it aside as `.duplicate`, out of the index,
    /// and the stream keeps its frames once each.
    @Test func aCopyOfASegmentFileIsSetAsideNotMovedAfterTheStream() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        _ = try SegmentSalvageTests.makeStore(dir, frames: frames)
        try FileManager.default.copyItem(atPath: dir.segments + "/000001.seg", toPath: dir.segments + "/000009.seg")
        let store = try SegmentStore.open(directory: dir.path)
        let before = try readAll(store)
        let repaired = try store.verify(repair: true)
        #expect(
            repaired.repaired.contains { $0.contains("moved segments/000009.seg aside as 000009.seg.duplicate") },
            "\(repaired.repaired)")
        #expect(dir.segmentFiles().contains("000009.seg.duplicate"))
        #expect(try readAll(store).map(\.0) == before.map(\.0))
        #expect(try store.gaps().isEmpty)
        #expect(try store.verify(repair: false).clean)
    }

    /// A segment file of another recording — another store's, of a stream of the same name and format, at the same
    /// pts, its frames stored raw so that each has the size the index expects — copied over one of the store's: a
    /// read refuses its frames (captured at other times), a check names it, and a repair moves it aside as
    /// `.foreign` and counts the index's frames of it as lost (a `damaged` gap), instead of taking the other
    /// recording's frames for the store's with no gap and nothing counted.
    @Test func anotherRecordingsFileInASegmentsPlaceIsSetAsideAndItsFramesCountedLost() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let other = TemporaryDirectory()
        defer { other.remove() }
        for (directory, content, wall) in [
            (dir, 0, Int64(1_700_000_000) * 1_000_000_000), (other, 1000, Int64(1_700_000_600) * 1_000_000_000),
        ] {
            let store = try SegmentStore.open(
                directory: directory.path,
                options: StoreOptions(
                    segmentMaxDuration: .nanoseconds(frames.pts(30) - 1_000), codecPolicy: .forced(.raw)))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<90 {
                let view = frames.frame(i + content, wall: wall)
                var info = view.info
                info.pts = FrameTime(nanoseconds: frames.pts(i))
                info.ptsNanoseconds = frames.pts(i)
                info.wallNanoseconds = wall + frames.pts(i)
                try writer.append(FrameView(layout: view.layout, info: info, bytes: view.bytes))
            }
            try writer.close()
        }
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg", "000003.seg"])
        try FileManager.default.removeItem(atPath: dir.segments + "/000002.seg")
        try FileManager.default.copyItem(atPath: other.segments + "/000002.seg", toPath: dir.segments + "/000002.seg")

        let store = try SegmentStore.open(directory: dir.path)
        #expect {
            _ = try readAll(store)
        } throws: { error in
            "\(error)".contains("segment 000002.seg disagree with its file: the frame at pts \(frames.pts(30)) ns")
        }
        let dry = try store.verify(repair: false)
        #expect(
            dry.problems.contains { $0.contains("segment 000002.seg is not the file the index knew under that name") },
            "\(dry.problems)")
        let repaired = try store.verify(repair: true)
        #expect(
            repaired.repaired.contains { $0.contains("moved segments/000002.seg aside as 000002.seg.foreign") },
            "\(repaired.repaired)")
        #expect(
            repaired.repaired.contains { $0.contains("30 frames the index had in segment 000002.seg are in no file") },
            "\(repaired.repaired)")
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg.foreign", "000003.seg"])
        #expect(try Self.damagedGaps(store) == [[frames.pts(29), frames.pts(60)]])
        let kept = Array(0..<30) + Array(60..<90)
        let read = try readAll(store)
        #expect(read.map(\.0) == kept.map { frames.pts($0) })
        #expect(read.map(\.1) == kept.map { frames.expectedDigest($0) }, "bit-exact, the store's own frames")
        #expect(try store.verify(repair: false).clean)
    }

    /// Rows deleted from the index, or a row's pts, offset or capture time changed, by another program.
    @Test(arguments: [
        "DELETE FROM frames WHERE pts_ns BETWEEN %40 AND %60",
        "UPDATE frames SET pts_ns = pts_ns + 5 WHERE pts_ns = %50",
        "UPDATE frames SET file_offset = file_offset + 56 WHERE pts_ns = %50",
        "UPDATE frames SET wall_ns = wall_ns + 1 WHERE pts_ns = %50",
    ])
    func indexRowsThatDisagreeWithTheirFileAreReportedAndRebuilt(statement: String) throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        _ = try SegmentSalvageTests.makeStore(dir, frames: frames)
        let sql = statement.replacingOccurrences(of: "%40", with: "\(frames.pts(40))")
            .replacingOccurrences(of: "%60", with: "\(frames.pts(60))")
            .replacingOccurrences(of: "%50", with: "\(frames.pts(50))")
        let output = try SQLiteShell.run([dir.path + "/index.sqlite", sql])
        #expect(output.status == 0, "sqlite3 failed: \(output.stderr)")

        let store = try SegmentStore.open(directory: dir.path)
        if statement.hasPrefix("DELETE") {
            // The rows of frames 40…60 are gone from between two the file's records follow one another in: the
            // index is to blame, not the file, and no frame is left out silently.
            #expect {
                _ = try readAll(store)
            } throws: { error in
                "\(error)".contains(
                    "the index contradicts itself: segment 000001.seg has no row for the record at byte")
                    && "\(error)".contains("rows are missing")
            }
        }
        if statement.contains("wall_ns") {
            // The frame's record says another capture time: it is not the frame the row was made for.
            #expect {
                _ = try readAll(store)
            } throws: { error in
                "\(error)".contains("disagree with its file: the frame at pts \(frames.pts(50)) ns")
                    && "\(error)".contains("but the index has it captured")
                    // A nanosecond apart, the two read alike to the millisecond: how far apart is said.
                    && "\(error)".contains(" too, 1 ns later (another recording's file")
            }
        }
        let dry = try store.verify(repair: false)
        #expect(!dry.clean)
        #expect(dry.problems.contains { $0.contains("index rows of segment 000001.seg disagree with its file") })
        _ = try store.verify(repair: true)
        #expect(try store.verify(repair: false).clean)
        #expect(try Self.damagedGaps(store).isEmpty, "nothing was lost")
        let read = try readAll(store)
        #expect(read.map(\.0) == (0..<130).map { frames.pts($0) })
        #expect(read.map(\.1) == (0..<130).map { frames.expectedDigest($0) }, "bit-exact")
    }

    /// The stream's row changed by another program (its size, pixel format or frame duration) while both of its
    /// segment files say what they hold: reading names the index, not the files; the dry run says what each says;
    /// a repair sets the row from the files, and every frame reads back bit-exact.
    @Test(arguments: [
        "UPDATE streams SET width = 192", "UPDATE streams SET pixel_format = 'i420'",
        "UPDATE streams SET frame_duration_value = frame_duration_value * 2",
    ])
    func aStreamRowThatDisagreesWithEverySegmentFileIsSetFromThem(statement: String) throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        _ = try SegmentSalvageTests.makeStore(dir, frames: frames)
        let output = try SQLiteShell.run([dir.path + "/index.sqlite", statement])
        #expect(output.status == 0, "sqlite3 failed: \(output.stderr)")

        let store = try SegmentStore.open(directory: dir.path)
        #expect(try store.streams().first?.description != frames.stream)
        if statement.contains("width") {
            #expect {
                _ = try readAll(store)
            } throws: { error in
                "\(error)".contains("the index says the stream's frames have 18432")
                    && "\(error)".contains("nv12 96x64 frames of 9216 bytes")
            }
        }
        let dry = try store.verify(repair: false)
        #expect(!dry.clean)
        #expect(
            dry.problems.contains {
                $0.contains("the index says stream 'camera' holds") && $0.contains("its 2 segment files say nv12 96x64")
            }, "\(dry.problems)")
        let repaired = try store.verify(repair: true)
        #expect(repaired.repaired.contains { $0.contains("the index now says what the files do") }, "\(repaired)")
        #expect(try store.verify(repair: false).clean)
        #expect(try store.streams().first?.description == frames.stream)
        #expect(try Self.damagedGaps(store).isEmpty, "nothing was lost")
        let read = try readAll(store)
        #expect(read.map(\.1) == (0..<130).map { frames.expectedDigest($0) }, "bit-exact")
    }

    /// A flipped byte in a segment's header: the index knows its stream, so a repair writes the header again.
    @Test(arguments: [20, 40, 64])
    func aDamagedHeaderIsRebuiltFromTheIndex(byte: Int) throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        _ = try SegmentSalvageTests.makeStore(dir, frames: frames)
        let path = dir.segments + "/000001.seg"
        let original = FileManager.default.contents(atPath: path)!
        var bytes = [UInt8](original)
        bytes[byte] ^= 0x40
        try writeFile(path, bytes)

        let store = try SegmentStore.open(directory: dir.path)
        #expect(throws: SegmentStoreError.self) { _ = try readAll(store) }
        let dry = try store.verify(repair: false)
        #expect(
            dry.damaged.contains { $0.segment == "000001.seg" && $0.message.contains("rebuilds it from the index") })
        let repaired = try store.verify(repair: true)
        #expect(repaired.repaired.contains { $0.contains("rebuilt the damaged header of segment 000001.seg") })
        #expect(try store.verify(repair: false).clean)
        #expect(FileManager.default.contents(atPath: path) == original, "the header is exactly the one written")
        let read = try readAll(store)
        #expect(read.map(\.1) == (0..<130).map { frames.expectedDigest($0) }, "bit-exact")
    }

    /// A segment written with the chunk size earlier versions used by default (256 KiB), whose header's chunk size
    /// is damaged: the repair tries that size too, so frames larger than today's default chunk come back exactly.
    @Test func aDamagedHeaderOfASegmentWithTheEarlierDefaultChunkSizeIsRebuilt() throws {
        let frames = try TestFrames(format: .nv12, width: 640, height: 360)
        defer { frames.deallocate() }
        let earlier = try #require(StoreOptions.earlierDefaultChunkSizes.first)
        #expect(
            earlier != StoreOptions.defaultChunkSize && frames.layout.plane(0).byteCount > StoreOptions.defaultChunkSize
        )
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SegmentStore.open(
                directory: dir.path, options: StoreOptions(keyInterval: 10, workerCount: 2, chunkSize: earlier))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<20 { try writer.append(frames.frame(i)) }
            try writer.close()
        }
        let path = dir.segments + "/000001.seg"
        let original = [UInt8](FileManager.default.contents(atPath: path)!)
        var bytes = original
        // The chunk size field (u32 at 40): 0x40000 becomes 0, which no segment is written with.
        #expect(bytes[42] == 0x04)
        bytes[42] = 0
        try writeFile(path, bytes)

        let store = try SegmentStore.open(directory: dir.path)
        let repaired = try store.verify(repair: true)
        #expect(repaired.repaired.contains { $0.contains("rebuilt the damaged header of segment 000001.seg") })
        #expect(try store.verify(repair: false).clean)
        #expect(
            [UInt8](FileManager.default.contents(atPath: path)!) == original, "the header is exactly the one written")
        let read = try readAll(store)
        #expect(read.map(\.1) == (0..<20).map { frames.expectedDigest($0) }, "bit-exact")
    }

    /// A file named like a segment that is not one, with no frame in the index: a repair moves it aside, and its
    /// number is not given to a new segment.
    @Test func aFileThatIsNotASegmentIsMovedAsideNotDeleted() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        _ = try SegmentSalvageTests.makeStore(dir, frames: frames)
        let junk = [UInt8]((0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 7919) })
        try writeFile(dir.segments + "/000003.seg", junk)
        do {
            let store = try SegmentStore.open(directory: dir.path)
            #expect(!(try store.verify(repair: false).clean))
            _ = try store.verify(repair: true)
            #expect(try store.verify(repair: false).clean)
            #expect(FileManager.default.contents(atPath: dir.segments + "/000003.seg.unreadable") == Data(junk))
            #expect(try readAll(store).count == 130)
            #expect(try Self.damagedGaps(store).isEmpty)
        }
        let store = try SegmentStore.open(directory: dir.path)
        let writer = try store.makeWriter(streamName: "other", stream: frames.stream)
        try writer.append(frames.frame(0))
        try writer.close()
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg", "000003.seg.unreadable", "000004.seg"])
    }

    /// A `.partial` of a few KiB that is not a segment (no magic at its start; at the name length's place bytes that
    /// read as a long name) is set aside by the repair like any file that is not one, never deleted as a header a
    /// crash cut; one that holds the start of a real header, or zeros, is removed at the next open.
    @Test func aSmallPartialThatIsNotASegmentIsSetAsideNotDeleted() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        _ = try SegmentSalvageTests.makeStore(dir, frames: frames)
        let junk = [UInt8](repeating: 0xAB, count: 3000)  // name length 0xABAB: past the file's end
        try writeFile(dir.segments + "/000009.seg.partial", junk)
        let header = [UInt8](FileManager.default.contents(atPath: dir.segments + "/000001.seg")!.prefix(40))
        try writeFile(dir.segments + "/000010.seg.partial", header)
        try writeFile(dir.segments + "/000011.seg.partial", [UInt8](repeating: 0, count: 50))
        do {
            let store = try SegmentStore.open(directory: dir.path)
            #expect(store.recovery.repaired.count == 2, "\(store.recovery.repaired)")
            #expect(!store.recovery.repaired.contains { $0.contains("000009") }, "\(store.recovery.repaired)")
            let dry = try store.verify(repair: false)
            #expect(!dry.clean)
            #expect(!dry.damaged.contains { $0.message.contains("ends inside its header") }, "\(dry.damaged)")
            _ = try store.verify(repair: true)
            #expect(try store.verify(repair: false).clean)
        }
        #expect(FileManager.default.contents(atPath: dir.segments + "/000009.seg.partial.unreadable") == Data(junk))
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg", "000009.seg.partial.unreadable"])
        #expect(try readAll(try SegmentStore.open(directory: dir.path)).count == 130)
    }

    /// A `.partial` whose header's name-length field is damaged still holds frames the index acknowledged: opening
    /// the store never removes it as a file whose header was never completed, and a repair rebuilds its header.
    @Test func aPartialWithADamagedHeaderThatHoldsFramesIsKept() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        _ = try SegmentSalvageTests.makeStore(dir, frames: frames)
        // Segment 1 as a killed recorder leaves it: open, its file a `.partial` without footer use.
        let partial = dir.segments + "/000001.seg.partial"
        try FileManager.default.moveItem(atPath: dir.segments + "/000001.seg", toPath: partial)
        let output = try SQLiteShell.run([
            dir.path + "/index.sqlite",
            "UPDATE segments SET file_name = '000001.seg.partial', state = 'open' WHERE file_name = '000001.seg'",
        ])
        #expect(output.status == 0, "sqlite3 failed: \(output.stderr)")
        var bytes = [UInt8](FileManager.default.contents(atPath: partial)!)
        bytes[SegmentFormat.fixedHeaderLength - 5] = 0xFF  // the high byte of the stream name's length
        try writeFile(partial, bytes)

        let store = try SegmentStore.open(directory: dir.path)
        #expect(FileManager.default.fileExists(atPath: partial), "\(store.recovery.repaired)")
        _ = try store.verify(repair: true)
        #expect(try store.verify(repair: false).clean)
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg"])
        let read = try readAll(store)
        #expect(read.map(\.1) == (0..<130).map { frames.expectedDigest($0) }, "bit-exact")
    }
}
