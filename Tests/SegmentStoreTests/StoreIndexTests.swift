import Foundation
import RewindCore
import RewindMigrations
import RewindSQLite
import RewindTesting
import Testing

@testable import SegmentStore

/// Streams and frames for index tests: 1080p60 NV12, a key frame every `keyInterval` frames.
enum IndexFixtures {
    static let description = StreamDescription(
        layout: try! FrameLayout(format: .nv12, width: 1920, height: 1080),
        frameDuration: FrameTime(value: 1, timescale: 60), color: .bt709Video)

    /// The pts of frame `index` at 60 fps, nanoseconds (floor of index / 60 s).
    static func pts(_ index: Int) -> Int64 { FrameTime(value: Int64(index), timescale: 60).nanoseconds! }

    /// Frames `first ..< first + count`, all in `segmentID`.
    static func frames(count: Int, first: Int = 0, segmentID: Int64, keyInterval: Int = 30) -> [FrameRow] {
        (first..<first + count).map { index in
            FrameRow(
                ptsNanoseconds: pts(index), wallNanoseconds: 1_700_000_000_000_000_000 + pts(index),
                // Each record right after the one before, as in a segment file (56 bytes of header each).
                segmentID: segmentID, fileOffset: Int64(64 + index * 1000), storedLength: 944,
                rawLength: 3_110_400, flags: index % keyInterval == 0 ? FrameRow.keyFrameFlag : 0,
                codec: index % keyInterval == 0 ? 1 : 2)
        }
    }

    /// An index with `segments` segments of `framesPerSegment` consecutive frames each, added in batches of 60.
    static func makeIndex(
        at path: String, segments: Int, framesPerSegment: Int, keyInterval: Int = 30
    ) throws -> (StoreIndex, StreamRow, [Int64]) {
        let index = try StoreIndex(path: path)
        let stream = try index.stream(named: "camera", description: description)
        var ids: [Int64] = []
        for number in 0..<segments {
            let id = try index.insertSegment(
                streamID: stream.id, fileName: "seg-\(number).partial", formatVersion: 1,
                createdWallNanoseconds: Int64(number))
            ids.append(id)
            var added = 0
            while added < framesPerSegment {
                let count = min(60, framesPerSegment - added)
                try index.addFrames(
                    frames(
                        count: count, first: number * framesPerSegment + added, segmentID: id,
                        keyInterval: keyInterval),
                    streamID: stream.id)
                added += count
            }
        }
        return (index, stream, ids)
    }
}

@Suite struct StoreIndexTests {
    @Test func streamIsCreatedOnceAndADifferentDescriptionIsRefused() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let index = try StoreIndex(path: directory.indexPath)
        let first = try index.stream(named: "camera", description: IndexFixtures.description)
        // The same description with an equal frame duration at another timescale is the same stream.
        var same = IndexFixtures.description
        same.frameDuration = FrameTime(value: 2, timescale: 120)
        #expect(try index.stream(named: "camera", description: same) == first)
        var other = IndexFixtures.description
        other.color = ColorInfo(matrix: .bt601, range: .full)
        // Once it has stored a frame (its newest pts set), another description is refused.
        try index.raiseNewestPTS(streamID: first.id, to: 0)
        let error = try #require(throws: StoreIndexError.self) {
            _ = try index.stream(named: "camera", description: other)
        }
        #expect(error.description.contains("stream 'camera' is stored as nv12 1920x1080"))
        let second = try index.stream(named: "screen", description: other)
        #expect(try index.streams() == [first, second])
        #expect(second.description.color == ColorInfo(matrix: .bt601, range: .full))
    }

    /// A stream that does not know its chroma siting or pixel aspect takes them from the first recording that says;
    /// once known, a recording that says otherwise is refused, and one that does not say agrees.
    @Test func chromaSitingAndPixelAspectAreFilledInOnceAndThenKept() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let index = try StoreIndex(path: directory.indexPath)
        let plain = try index.stream(named: "camera", description: IndexFixtures.description)
        try index.raiseNewestPTS(streamID: plain.id, to: 0)
        #expect(plain.description.chromaSiting == .unspecified && !plain.description.pixelAspect.isKnown)
        var shaped = IndexFixtures.description
        shaped.chromaSiting = .left
        shaped.pixelAspect = try #require(PixelAspect(numerator: 20, denominator: 22))
        let filled = try index.stream(named: "camera", description: shaped)
        #expect(filled.id == plain.id && filled.description == shaped)
        #expect(filled.description.pixelAspect.description == "10:11")
        #expect(try index.streams() == [filled])
        // An input that does not say agrees with what is known, and changes nothing.
        #expect(try index.stream(named: "camera", description: IndexFixtures.description) == filled)
        var other = shaped
        other.chromaSiting = .topLeft
        let error = try #require(throws: StoreIndexError.self) {
            _ = try index.stream(named: "camera", description: other)
        }
        #expect(error.description.contains("(chroma left, pixels 10:11), not"), "\(error)")
        #expect(error.description.contains("(chroma topleft, pixels 10:11)"), "\(error)")
        other = shaped
        other.pixelAspect = .square
        #expect(throws: StoreIndexError.self) { _ = try index.stream(named: "camera", description: other) }
        // What the columns hold is what a sqlite3 user reads.
        let stored = try index.database.withConnection { connection in
            try connection.scalarInt64(
                "SELECT count(*) FROM streams WHERE chroma_siting = 'left' AND pixel_aspect_num = 10 "
                    + "AND pixel_aspect_den = 11")
        }
        #expect(stored == 1)
    }

    /// An index of a build that kept no siting or aspect (schema 6) reads, read-only, as not knowing them; opened for
    /// writing it is migrated and keeps every stream.
    @Test func anIndexWithoutStreamShapeReadsAsNotKnowingIt() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let old = try StoreIndex(path: directory.indexPath, migrations: Array(Migration.all.prefix(6)))
            try old.database.withConnection { connection in
                try connection.execute(
                    "INSERT INTO streams (id, name, pixel_format, width, height, frame_duration_value, "
                        + "frame_duration_timescale, color_matrix, color_range, created_wall_ns) "
                        + "VALUES (1, 'camera', 'nv12', 1920, 1080, 1, 30, 'bt709', 'video', 1)")
            }
        }
        let reader = try StoreIndex(path: directory.indexPath, readOnly: true)
        let read = try #require(try reader.stream(named: "camera"))
        #expect(read.description.chromaSiting == .unspecified && read.description.pixelAspect == .unknown)
        #expect(try reader.streams() == [read])
        let writer = try StoreIndex(path: directory.indexPath)
        #expect(try writer.streams() == [read])
        #expect(try MigrationRunner().appliedMigrations(writer.database).last?.version == 7)
    }

    @Test func rangeQueryAcrossSegmentsHasInclusiveStartAndExclusiveEnd() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (index, stream, ids) = try IndexFixtures.makeIndex(
            at: directory.indexPath, segments: 5, framesPerSegment: 1000)
        let all = (0..<5000).map(IndexFixtures.pts)
        func query(_ range: Range<Int64>) throws -> [Int64] {
            var seen: [Int64] = []
            try index.frames(streamID: stream.id, in: range) { row in
                seen.append(row.ptsNanoseconds)
                return true
            }
            return seen
        }
        // Exactly on frame times: start included, end excluded; across segment boundaries (frame 1000, 2000…).
        #expect(try query(all[990]..<all[2010]) == Array(all[990..<2010]))
        #expect(try query(all[0]..<all[4999]) == Array(all[0..<4999]))
        #expect(try query(all[4999]..<Int64.max) == [all[4999]])
        #expect(try query((all[10] + 1)..<(all[11] + 1)) == [all[11]])
        #expect(try query(all[10]..<all[10]).isEmpty)
        #expect(try query(Int64.min..<all[0]).isEmpty)
        // Every returned row is the stored one, with its segment.
        var rows: [FrameRow] = []
        try index.frames(streamID: stream.id, in: all[999]..<all[1001]) { row in
            rows.append(row)
            return true
        }
        #expect(rows.map(\.segmentID) == [ids[0], ids[1]])
        #expect(rows[1] == IndexFixtures.frames(count: 1, first: 1000, segmentID: ids[1])[0])
        // Stopping early: body returning false ends the iteration, also past the first page.
        var visited = 0
        try index.frames(streamID: stream.id, in: Int64.min..<Int64.max) { _ in
            visited += 1
            return visited < 700
        }
        #expect(visited == 700)
        // Another stream sees none of them.
        var other = IndexFixtures.description
        other.color = .unspecified
        let screen = try index.stream(named: "screen", description: other)
        #expect(try query(Int64.min..<Int64.max).count == 5000)
        var screenRows = 0
        try index.frames(streamID: screen.id, in: Int64.min..<Int64.max) { _ in
            screenRows += 1
            return true
        }
        #expect(screenRows == 0)
    }

    @Test func keyFrameAtOrBefore() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (index, stream, _) = try IndexFixtures.makeIndex(
            at: directory.indexPath, segments: 3, framesPerSegment: 100, keyInterval: 45)
        for frame in [0, 1, 44, 45, 46, 89, 90, 99, 100, 134, 135, 299] {
            let key = try #require(try index.keyFrame(streamID: stream.id, atOrBefore: IndexFixtures.pts(frame)))
            #expect(key.ptsNanoseconds == IndexFixtures.pts(frame / 45 * 45), "frame \(frame)")
            #expect(key.isKeyFrame)
        }
        // Between frames: the key frame of the frame before.
        let between = try index.keyFrame(streamID: stream.id, atOrBefore: IndexFixtures.pts(46) - 1)
        #expect(between?.ptsNanoseconds == IndexFixtures.pts(45))
        #expect(try index.keyFrame(streamID: stream.id, atOrBefore: -1) == nil)
        #expect(
            try index.keyFrame(streamID: stream.id, atOrBefore: Int64.max)?.ptsNanoseconds == IndexFixtures.pts(270))
    }

    @Test func keyFrameIsNilWhenNoKeyFramePrecedes() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let index = try StoreIndex(path: directory.indexPath)
        let stream = try index.stream(named: "camera", description: IndexFixtures.description)
        let segment = try index.insertSegment(
            streamID: stream.id, fileName: "s.partial", formatVersion: 1, createdWallNanoseconds: 0)
        try index.addFrames(IndexFixtures.frames(count: 10, first: 1, segmentID: segment), streamID: stream.id)
        #expect(try index.keyFrame(streamID: stream.id, atOrBefore: IndexFixtures.pts(5)) == nil)
        try index.addFrames(IndexFixtures.frames(count: 50, first: 11, segmentID: segment), streamID: stream.id)
        #expect(
            try index.keyFrame(streamID: stream.id, atOrBefore: IndexFixtures.pts(40))?.ptsNanoseconds
                == IndexFixtures.pts(30))
    }

    @Test func keyFramesStayRightWhenSegmentsArriveOutOfOrderOrAreTruncated() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let index = try StoreIndex(path: directory.indexPath)
        let stream = try index.stream(named: "camera", description: IndexFixtures.description)
        let later = try index.insertSegment(
            streamID: stream.id, fileName: "later.partial", formatVersion: 1, createdWallNanoseconds: 0)
        let earlier = try index.insertSegment(
            streamID: stream.id, fileName: "earlier.partial", formatVersion: 1, createdWallNanoseconds: 0)
        // Frames 105..<200 first (keys at 120, 150, 180), then 0..<105 (keys at 0, 30, 60, 90).
        try index.addFrames(IndexFixtures.frames(count: 95, first: 105, segmentID: later), streamID: stream.id)
        #expect(try index.keyFrame(streamID: stream.id, atOrBefore: IndexFixtures.pts(110)) == nil)
        try index.addFrames(IndexFixtures.frames(count: 105, segmentID: earlier), streamID: stream.id)
        func key(_ frame: Int) throws -> Int64? {
            try index.keyFrame(streamID: stream.id, atOrBefore: IndexFixtures.pts(frame))?.ptsNanoseconds
        }
        #expect(try key(110) == IndexFixtures.pts(90))
        #expect(try key(119) == IndexFixtures.pts(90))
        #expect(try key(125) == IndexFixtures.pts(120))
        // Truncating the earlier segment to frames < 80 removes key frame 90: frames 105..<120 fall back to 60.
        try index.removeFrames(ofSegment: earlier, atOrAfter: IndexFixtures.pts(80))
        #expect(try key(110) == IndexFixtures.pts(60))
        #expect(try key(150) == IndexFixtures.pts(150))
    }

    @Test func addFramesMaintainsSegmentCountersAndRefusesBadBatches() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (index, stream, ids) = try IndexFixtures.makeIndex(
            at: directory.indexPath, segments: 2, framesPerSegment: 150)
        let segment = try #require(try index.segment(id: ids[1]))
        let frames = IndexFixtures.frames(count: 150, first: 150, segmentID: ids[1])
        #expect(segment.state == .open)
        #expect(segment.fileName == "seg-1.partial")
        #expect(segment.frameCount == 150)
        #expect(segment.firstPTS == IndexFixtures.pts(150) && segment.lastPTS == IndexFixtures.pts(299))
        #expect(segment.rawBytes == frames.reduce(0) { $0 + Int64($1.rawLength) })
        #expect(segment.storedBytes == frames.reduce(0) { $0 + Int64($1.storedLength) })
        #expect(try index.segment(fileName: "seg-0.partial")?.id == ids[0])
        #expect(try index.segment(fileName: "nope") == nil)

        let reversed = Array(IndexFixtures.frames(count: 2, first: 400, segmentID: ids[1]).reversed())
        #expect(throws: StoreIndexError.self) { try index.addFrames(reversed, streamID: stream.id) }
        let duplicate = IndexFixtures.frames(count: 2, first: 299, segmentID: ids[1])
        let error = try #require(throws: StoreIndexError.self) {
            try index.addFrames(duplicate, streamID: stream.id)
        }
        guard case .duplicatePTS(_, let pts) = error else {
            Issue.record("expected duplicatePTS, got \(error)")
            return
        }
        #expect(pts == IndexFixtures.pts(299))
        #expect(throws: StoreIndexError.self) {
            try index.addFrames(IndexFixtures.frames(count: 1, first: 500, segmentID: 999), streamID: stream.id)
        }
        // Nothing of the refused batches was stored.
        #expect(try index.segment(id: ids[1])?.frameCount == 150)
        #expect(try index.summary().frames == 300)
    }

    @Test func sealMarkDeletingAndRemove() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (index, stream, ids) = try IndexFixtures.makeIndex(
            at: directory.indexPath, segments: 3, framesPerSegment: 100)
        try index.sealSegment(id: ids[0], fileName: "seg-0.rws", sealedWallNanoseconds: 42)
        let sealed = try #require(try index.segment(id: ids[0]))
        #expect(sealed.state == .sealed && sealed.fileName == "seg-0.rws" && sealed.sealedWallNanoseconds == 42)
        #expect(try index.segment(fileName: "seg-0.partial") == nil)
        // Sealed segments take no more frames.
        #expect(throws: StoreIndexError.self) {
            try index.addFrames(IndexFixtures.frames(count: 1, first: 1000, segmentID: ids[0]), streamID: stream.id)
        }
        try index.sealSegment(id: ids[1], fileName: "seg-1.rws")
        #expect(try index.segment(id: ids[1])?.sealedWallNanoseconds ?? 0 > 1_600_000_000_000_000_000)

        try index.markDeleting(segmentID: ids[0])
        #expect(try index.segment(id: ids[0])?.state == .deleting)
        var first: Int64?
        try index.frames(streamID: stream.id, in: Int64.min..<Int64.max) { row in
            first = row.ptsNanoseconds
            return false
        }
        #expect(first == IndexFixtures.pts(100), "a deleting segment's frames are no longer returned")
        let summary = try index.summary(streamID: stream.id)
        #expect(summary.segments == 2 && summary.frames == 200 && summary.firstPTS == IndexFixtures.pts(100))

        try index.removeSegment(id: ids[0])
        try index.removeSegment(id: ids[2])
        #expect(try index.segment(id: ids[0]) == nil)
        #expect(try index.segments().map(\.id) == [ids[1]])
        var count = 0
        try index.frames(streamID: stream.id, in: Int64.min..<Int64.max) { _ in
            count += 1
            return true
        }
        #expect(count == 100)
        #expect(throws: StoreIndexError.self) { try index.removeSegment(id: ids[0]) }
        #expect(throws: StoreIndexError.self) { try index.sealSegment(id: 12345, fileName: "x") }
        #expect(throws: StoreIndexError.self) { try index.markDeleting(segmentID: 12345) }
    }

    @Test func segmentsAreOrderedAndOverlapQueriesFindTheRightOnes() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (index, stream, ids) = try IndexFixtures.makeIndex(
            at: directory.indexPath, segments: 4, framesPerSegment: 60)
        let empty = try index.insertSegment(
            streamID: stream.id, fileName: "empty.partial", formatVersion: 1, createdWallNanoseconds: 9)
        #expect(try index.segments(streamID: stream.id).map(\.id) == [empty] + ids)
        func overlapping(_ from: Int, _ to: Int) throws -> [Int64] {
            try index.segments(
                streamID: stream.id, overlapping: IndexFixtures.pts(from)..<IndexFixtures.pts(to)
            ).map(\.id)
        }
        #expect(try overlapping(0, 1) == [ids[0]])
        #expect(try overlapping(59, 60) == [ids[0]])
        #expect(try overlapping(59, 61) == [ids[0], ids[1]])
        #expect(try overlapping(70, 200) == [ids[1], ids[2], ids[3]])
        #expect(try overlapping(239, 1000) == [ids[3]])
        #expect(try overlapping(240, 1000).isEmpty)
    }

    @Test func gapsDropsAndSummary() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (index, stream, _) = try IndexFixtures.makeIndex(
            at: directory.indexPath, segments: 2, framesPerSegment: 90)
        var other = IndexFixtures.description
        other.frameDuration = FrameTime(value: 1, timescale: 30)
        let screen = try index.stream(named: "screen", description: other)
        let gapB = GapRow(streamID: stream.id, startNanoseconds: 500, endNanoseconds: 900, reason: .spillBehind)
        let gapA = GapRow(streamID: stream.id, startNanoseconds: 100, endNanoseconds: 200, reason: .inputInterval)
        let gapC = GapRow(streamID: screen.id, startNanoseconds: 0, endNanoseconds: 0, reason: .spillBehind)
        try index.recordGap(gapB)
        try index.recordGap(gapA)
        try index.recordGap(gapC)
        #expect(try index.gaps(streamID: stream.id) == [gapA, gapB])
        #expect(try index.gaps() == [gapA, gapB, gapC])
        #expect(throws: SQLiteError.self) {
            try index.recordGap(GapRow(streamID: stream.id, startNanoseconds: 5, endNanoseconds: 4, reason: .damaged))
        }

        try index.addDrops(streamID: stream.id, reason: .spillBehind, count: 3)
        try index.addDrops(streamID: stream.id, reason: .spillBehind, count: 4)
        try index.addDrops(streamID: stream.id, reason: .memoryBudget, count: 1)
        try index.addDrops(streamID: screen.id, reason: .spillBehind, count: 10)
        #expect(try index.drops(streamID: stream.id) == [.spillBehind: 7, .memoryBudget: 1])
        #expect(try index.drops() == [.spillBehind: 17, .memoryBudget: 1])
        #expect(try index.drops(streamID: 99) == [:])

        let frames = IndexFixtures.frames(count: 180, segmentID: 0)
        let summary = try index.summary()
        #expect(summary.frames == 180 && summary.segments == 2)
        #expect(summary.firstPTS == 0 && summary.lastPTS == IndexFixtures.pts(179))
        #expect(summary.rawBytes == 180 * 3_110_400)
        #expect(summary.storedBytes == frames.reduce(0) { $0 + Int64($1.storedLength) })
        #expect(
            try index.summary(streamID: screen.id)
                == IndexSummary(frames: 0, firstPTS: nil, lastPTS: nil, rawBytes: 0, storedBytes: 0, segments: 0))
        try index.checkpoint()
    }

    @Test func recoveryHelpersListAndTruncateASegmentsFrames() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (index, stream, ids) = try IndexFixtures.makeIndex(
            at: directory.indexPath, segments: 3, framesPerSegment: 100)
        // makeIndex adds batches of 60 whose offsets start again at 64: compare all but the offsets.
        func withoutOffsets(_ rows: [FrameRow]) -> [FrameRow] { rows.map { $0.with(fileOffset: 0) } }
        let expected = IndexFixtures.frames(count: 100, first: 100, segmentID: ids[1])
        #expect(withoutOffsets(try index.frames(ofSegment: ids[1])) == withoutOffsets(expected))
        #expect(try index.frames(ofSegment: 999).isEmpty)

        #expect(try index.removeFrames(ofSegment: ids[1], atOrAfter: IndexFixtures.pts(160)) == 40)
        let truncated = try #require(try index.segment(id: ids[1]))
        let kept = Array(expected.prefix(60))
        #expect(truncated.frameCount == 60)
        #expect(truncated.firstPTS == IndexFixtures.pts(100) && truncated.lastPTS == IndexFixtures.pts(159))
        #expect(truncated.rawBytes == kept.reduce(0) { $0 + Int64($1.rawLength) })
        #expect(truncated.storedBytes == kept.reduce(0) { $0 + Int64($1.storedLength) })
        #expect(withoutOffsets(try index.frames(ofSegment: ids[1])) == withoutOffsets(kept))
        #expect(try index.summary(streamID: stream.id).frames == 260)
        // Adding the lost frames back continues from the recounted state.
        try index.addFrames(
            IndexFixtures.frames(count: 40, first: 160, segmentID: ids[1]), streamID: stream.id)
        #expect(try index.segment(id: ids[1])?.frameCount == 100)
        #expect(try index.segment(id: ids[1])?.lastPTS == IndexFixtures.pts(199))

        #expect(try index.removeFrames(ofSegment: ids[2], atOrAfter: Int64.min) == 100)
        let emptied = try #require(try index.segment(id: ids[2]))
        #expect(emptied.frameCount == 0 && emptied.firstPTS == nil && emptied.lastPTS == nil && emptied.rawBytes == 0)
        #expect(throws: StoreIndexError.self) { try index.removeFrames(ofSegment: 999, atOrAfter: 0) }
    }

    @Test func segmentNamesAndStatesAreChecked() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (index, stream, ids) = try IndexFixtures.makeIndex(
            at: directory.indexPath, segments: 2, framesPerSegment: 10)
        func expectError(_ expected: String, _ body: () throws -> Void) {
            do {
                try body()
                Issue.record("expected \(expected)")
            } catch let error as StoreIndexError {
                #expect("\(error)".contains(expected), "\(error)")
            } catch {
                Issue.record("expected a StoreIndexError, got \(error)")
            }
        }
        expectError("already named 'seg-0.partial'") {
            _ = try index.insertSegment(
                streamID: stream.id, fileName: "seg-0.partial", formatVersion: 1, createdWallNanoseconds: 0)
        }
        expectError("no stream 77") {
            _ = try index.insertSegment(
                streamID: 77, fileName: "x.partial", formatVersion: 1, createdWallNanoseconds: 0)
        }
        expectError("already named 'seg-0.partial'") { try index.sealSegment(id: ids[1], fileName: "seg-0.partial") }
        try index.markDeleting(segmentID: ids[1])
        expectError("being deleted") { try index.sealSegment(id: ids[1], fileName: "seg-1.rws") }
        expectError("no segment 999") { try index.sealSegment(id: 999, fileName: "seg-999.rws") }
        // Sealing twice only renames.
        try index.sealSegment(id: ids[0], fileName: "seg-0.rws")
        try index.sealSegment(id: ids[0], fileName: "seg-0b.rws")
        #expect(try index.segment(id: ids[0])?.fileName == "seg-0b.rws")
        #expect(try index.segment(id: ids[0])?.state == .sealed)
    }

    @Test func storeInfoAndStreamLookupWorkReadOnly() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let writer = try StoreIndex(path: directory.indexPath)
        #expect(try writer.info("store_id") == nil)
        try writer.setInfo("store_id", to: "a")
        try writer.setInfo("store_id", to: "b")
        let stream = try writer.stream(named: "camera", description: IndexFixtures.description)
        let reader = try StoreIndex(path: directory.indexPath, readOnly: true)
        #expect(try reader.info("store_id") == "b")
        #expect(try reader.stream(named: "camera") == stream)
        #expect(try reader.stream(named: "camera", description: IndexFixtures.description) == stream)
        #expect(try reader.stream(named: "screen") == nil)
    }

    @Test func readOnlyIndexSeesCommittedRows() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (writer, stream, _) = try IndexFixtures.makeIndex(
            at: directory.indexPath, segments: 1, framesPerSegment: 30)
        let reader = try StoreIndex(path: directory.indexPath, readOnly: true)
        #expect(try reader.summary().frames == 30)
        let segment = try writer.insertSegment(
            streamID: stream.id, fileName: "b.partial", formatVersion: 1, createdWallNanoseconds: 0)
        try writer.addFrames(IndexFixtures.frames(count: 30, first: 30, segmentID: segment), streamID: stream.id)
        #expect(try reader.summary().frames == 60)
        #expect(try reader.streams().map(\.name) == ["camera"])
    }
}

extension FrameRow {
    func with(fileOffset: Int64) -> FrameRow {
        var copy = self
        copy.fileOffset = fileOffset
        return copy
    }
}
