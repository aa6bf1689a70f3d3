import Foundation
import RewindCore
import RewindTesting
import SegmentStore
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(45))) struct SegmentRetentionTests {
    @Test func budgetDeletesOldestSealedSegmentsButNotOneBeingRead() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 128, height: 96)
        defer { frames.deallocate() }
        // First measure one segment's size with no budget.
        var segmentBytes = 0
        do {
            let probe = TemporaryDirectory()
            defer { probe.remove() }
            let store = try SegmentStore.open(
                directory: probe.path,
                options: StoreOptions(
                    workerCount: 1, segmentMaxDuration: .milliseconds(300), codecPolicy: .forced(.raw)))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<10 { try writer.append(frames.frame(i)) }
            try writer.close()
            segmentBytes =
                try FileManager.default.attributesOfItem(atPath: probe.segments + "/000001.seg")[.size]
                as! Int
        }
        let budget = segmentBytes * 7 / 2
        let store = try SegmentStore.open(
            directory: dir.path,
            options: StoreOptions(
                workerCount: 1, segmentMaxDuration: .milliseconds(300), diskBudget: budget, codecPolicy: .forced(.raw)))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<30 { try writer.append(frames.frame(i)) }
        // Segments 1 and 2 sealed (10 frames each), 3 open, within budget: nothing deleted.
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg", "000003.seg.partial"])

        // A reader streams the oldest segment while more is written and retention runs.
        var skipped: [String] = []
        var deletedWhileReading: [String] = []
        var readWhileDeleting = 0
        try store.frames(in: 0..<frames.pts(10)) { frame in
            if readWhileDeleting == 0 {
                for i in 30..<60 { try writer.append(frames.frame(i)) }
                let report = try store.enforceRetention()
                skipped = report.skippedInUse
                deletedWhileReading = report.deleted
            }
            #expect(CRC32C.checksum(frame.bytes) == frames.expectedDigest(readWhileDeleting))
            readWhileDeleting += 1
            return true
        }
        #expect(readWhileDeleting == 10, "the leased segment was read to its end")
        #expect(skipped == ["000001.seg"])
        #expect(deletedWhileReading.isEmpty, "strictly oldest first: nothing past the reader")
        #expect(dir.segmentFiles().contains("000001.seg"))
        let report = try store.enforceRetention()
        #expect(report.deleted.first == "000001.seg", "deleted once the reader is done: \(report)")
        try writer.close()
        try store.enforceRetention()
        let files = dir.segmentFiles()
        let total = try files.reduce(0) {
            $0 + (try FileManager.default.attributesOfItem(atPath: dir.segments + "/" + $1)[.size] as! Int)
        }
        #expect(total <= budget, "\(files)")
        #expect(files == ["000005.seg", "000006.seg"] || files == ["000004.seg", "000005.seg", "000006.seg"])
        let read = try readAll(store)
        #expect(read.last?.0 == frames.pts(59))
        #expect(try store.summary().segments == files.count)
        #expect(try store.verify(repair: false).clean)
    }

    /// Two streams whose writers seal at a size of their own (as a recorder's do under `--disk`): retention keeps
    /// room for their open segments to grow to it, so the files never pass the budget by more than a frame of each
    /// stream, between seals as well as just after them.
    @Test func openSegmentsGrowWithinTheBudget() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 128, height: 96)
        defer { frames.deallocate() }
        let frameBytes = frames.stream.layout.byteCount + 4096  // a record's header and padding, generously
        let budget = 40 * frames.stream.layout.byteCount
        let store = try SegmentStore.open(
            directory: dir.path,
            options: StoreOptions(workerCount: 1, diskBudget: budget, codecPolicy: .forced(.raw)))
        let limit = 8 * frames.stream.layout.byteCount
        let writers = try ["a", "b"].map {
            try store.makeWriter(streamName: $0, stream: frames.stream, segmentMaxBytes: limit)
        }
        func segmentBytes() throws -> Int {
            try dir.segmentFiles().reduce(0) {
                $0 + (try FileManager.default.attributesOfItem(atPath: dir.segments + "/" + $1)[.size] as! Int)
            }
        }
        var largest = 0
        for i in 0..<120 {
            for writer in writers {
                try writer.append(frames.frame(i))
                largest = max(largest, try segmentBytes())
            }
        }
        #expect(largest <= budget + 2 * frameBytes, "the segments took \(largest) bytes of a \(budget)-byte budget")
        #expect(dir.segmentFiles().count >= 4, "sealed segments were kept: \(dir.segmentFiles())")
        for writer in writers { try writer.close() }
        #expect(try segmentBytes() <= budget)
        #expect(try store.verify(repair: false).clean)
    }

    /// A stream of an earlier run keeps no protected newest segment: when the written stream's open segment needs
    /// room, the old stream's history goes oldest first, as any other's (its one segment stayed whole while the
    /// written stream kept only its newest segment).
    @Test func aStreamOfAnEarlierRunKeepsNoSegmentFromRetention() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 128, height: 96)
        defer { frames.deallocate() }
        let budget = 40 * frames.stream.layout.byteCount
        let options = StoreOptions(workerCount: 1, diskBudget: budget, codecPolicy: .forced(.raw))
        do {
            let earlier = try SegmentStore.open(directory: dir.path, options: options)
            let old = try earlier.makeWriter(
                streamName: "old", stream: frames.stream, segmentMaxBytes: 30 * frames.stream.layout.byteCount)
            for i in 0..<20 { try old.append(frames.frame(i)) }
            try old.close()
        }
        let store = try SegmentStore.open(directory: dir.path, options: options)
        let new = try store.makeWriter(
            streamName: "new", stream: frames.stream, segmentMaxBytes: 8 * frames.stream.layout.byteCount)
        for i in 0..<60 { try new.append(frames.frame(i)) }
        try new.close()
        #expect(try store.summary(streamName: "old").frames == 0, "the earlier run's segment went first")
        let kept = try store.summary(streamName: "new").frames
        #expect(kept >= 24, "the written stream keeps several segments: \(kept) frames")
        #expect(try store.verify(repair: false).clean)
    }

    /// Closing writers in turn (a recording that stops) deletes nothing while the files are within the budget: a
    /// writer's last seal makes its previous segment no longer its newest, and the room kept for another writer's
    /// open segment, which is about to be sealed too, took it.
    @Test func closingTheWritersKeepsTheirLastSegments() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 128, height: 96)
        defer { frames.deallocate() }
        let frameBytes = frames.stream.layout.byteCount
        // Segments sealed every four frames (133 ms at 30 fps), each with room to grow to twenty: a budget of thirty
        // frames keeps the newest sealed segment and the open one of each stream only.
        let store = try SegmentStore.open(
            directory: dir.path,
            options: StoreOptions(
                workerCount: 1, segmentMaxDuration: .milliseconds(120), diskBudget: 30 * frameBytes,
                codecPolicy: .forced(.raw)))
        let writers = try ["a", "b"].map {
            try store.makeWriter(streamName: $0, stream: frames.stream, segmentMaxBytes: 20 * frameBytes)
        }
        for i in 0..<42 { for writer in writers { try writer.append(frames.frame(i)) } }
        // Each stream's frames from its newest sealed segment on: what closing must keep.
        let kept = try ["a", "b"].map { name in
            let newest = try #require(try store.segments(streamName: name).last { $0.state == .sealed })
            return 42 - Int(try #require(newest.firstPTS) / frames.stream.frameDuration.nanoseconds!)
        }
        for writer in writers { try writer.close() }
        let after = try ["a", "b"].map { try store.summary(streamName: $0).frames }
        #expect(after == kept, "closing deleted the last sealed segments: \(kept) kept before, \(after) after")
        #expect(try store.segmentFileBytes() <= Int64(30 * frameBytes))
    }

    /// Age is taken oldest first: after the clock was set back, segments sealed under the hour ahead read as younger
    /// than those sealed since, and keep them (the later ones were deleted first, a hole in the middle of the
    /// recording with no hold to explain it).
    @Test func maxAgeAfterTheClockWasSetBackNeverDeletesTheMiddle() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 64, height: 48)
        defer { frames.deallocate() }
        let clock = ManualClock()
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(workerCount: 1, maxAge: .seconds(1800), now: clock.now))
        for (index, step) in [Duration.zero, .seconds(600), .seconds(-3600)].enumerated() {
            clock.advance(by: step)
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in (5 * index)..<(5 * index + 5) { try writer.append(frames.frame(i)) }
            try writer.close()
        }
        // Ten minutes before the first seal: the first two are "from the future", the third 40 minutes old.
        clock.advance(by: .seconds(2400))
        #expect(try store.enforceRetention().deleted.isEmpty)
        #expect(dir.segmentFiles() == ["000001.seg", "000002.seg", "000003.seg"])
        // Once the first is old enough it goes, and the second (25 minutes) keeps the third.
        clock.advance(by: .seconds(2700))
        #expect(try store.enforceRetention().deleted == ["000001.seg"])
        #expect(try readAll(store).map(\.0) == (5..<15).map { frames.pts($0) })
        clock.advance(by: .seconds(600))
        #expect(try store.enforceRetention().deleted == ["000002.seg", "000003.seg"])
    }

    /// A clock set centuries back during a recording (the two times more than 64 bits of nanoseconds apart) makes a
    /// segment very young, not a trap on the spill thread that lost the frames not yet written.
    @Test func maxAgeWithTheClockSetCenturiesBackDoesNotTrap() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 64, height: 48)
        defer { frames.deallocate() }
        let clock = ManualClock(start: Int64.max - 1_000_000_000)
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(workerCount: 1, maxAge: .seconds(60), now: clock.now))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<5 { try writer.append(frames.frame(i)) }
        try writer.close()
        clock.advance(by: .seconds(-9_000_000_000))
        clock.advance(by: .seconds(-9_000_000_000))
        #expect(try store.enforceRetention().deleted.isEmpty)
        #expect(dir.segmentFiles() == ["000001.seg"])
    }

    @Test func maxAgeDeletesSegmentsSealedLongerAgo() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 64, height: 48)
        defer { frames.deallocate() }
        let clock = ManualClock()
        do {
            let store = try SegmentStore.open(
                directory: dir.path, options: StoreOptions(workerCount: 1, now: clock.now))
            let old = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<5 { try old.append(frames.frame(i)) }
            try old.close()
            clock.advance(by: .milliseconds(400))
            let recent = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 5..<10 { try recent.append(frames.frame(i)) }
            try recent.close()
        }
        let rows = try SegmentStore.openReadOnly(directory: dir.path).index.segments()
        #expect(rows.map(\.sealedWallNanoseconds) == [clock.now() - 400_000_000, clock.now()], "sealed by the clock")
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(workerCount: 1, maxAge: .milliseconds(200), now: clock.now))
        // Segment 1 is 400 ms old, segment 2 just sealed.
        #expect(try store.enforceRetention().deleted == ["000001.seg"])
        #expect(dir.segmentFiles() == ["000002.seg"])
        #expect(try readAll(store).map(\.0) == (5..<10).map { frames.pts($0) })
        // Exactly at the limit a segment stays; a nanosecond later it goes.
        clock.advance(by: .milliseconds(200))
        #expect(try store.enforceRetention().deleted.isEmpty)
        clock.advance(by: .nanoseconds(1))
        #expect(try store.enforceRetention().deleted == ["000002.seg"])
        #expect(dir.segmentFiles().isEmpty)
    }

    /// Gaps in the history retention deleted go with it: `info` lists only gaps in the time the store still holds.
    /// With the second recording held, one pass deletes the first and the third: the gap before the held one goes,
    /// those after it stay, and a `retention` gap covers the third.
    @Test(arguments: [false, true])
    func gapsOfDeletedHistoryGoWithIt(holdingTheSecond: Bool) throws {
        try withAgedStore { frames, clock, store in
            // Three recordings of 5 frames, each with a gap before the next (frames 5…7 and 13…15 missing), and a gap
            // inside the last one.
            for (number, range) in [0..<5, 8..<13, 16..<21].enumerated() {
                let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
                for i in range { try writer.append(frames.frame(i)) }
                if number > 0 {
                    try writer.recordGap(
                        start: frames.pts(range.lowerBound - 4), end: frames.pts(range.lowerBound),
                        reason: .recorderStopped
                    )
                }
                if number == 2 {
                    try writer.recordGap(start: frames.pts(18), end: frames.pts(19), reason: .spillBehind)
                }
                try writer.close()
                clock.advance(by: .milliseconds(150))
            }
            let recorded = try store.gaps().map(\.startNanoseconds)
            #expect(recorded == [frames.pts(4), frames.pts(12), frames.pts(18)])
            if holdingTheSecond {
                let hold = store.addHold(streamName: "camera", range: frames.pts(8)..<frames.pts(13))
                defer { store.removeHold(hold) }
                clock.advance(by: .seconds(1))
                let deleted = try store.enforceRetention().deleted
                #expect(deleted == ["000001.seg", "000003.seg"])
                let left = try store.gaps().map(\.startNanoseconds)
                #expect(
                    left == [frames.pts(12), frames.pts(16), frames.pts(18)],
                    "only the gap before the oldest frame left goes; the deleted third is a `retention` gap")
                #expect(
                    try store.gaps()[1]
                        == GapRow(
                            streamID: 1, startNanoseconds: frames.pts(16), endNanoseconds: frames.pts(20) + 1,
                            reason: .retention))
                return
            }
            // The first recording is 450 ms old: it goes, and the gap after it (up to the second one's first frame).
            let first = try store.enforceRetention().deleted
            #expect(first == ["000001.seg"])
            let left = try store.gaps().map(\.startNanoseconds)
            #expect(left == [frames.pts(12), frames.pts(18)])
            // Everything goes: no gap is left.
            clock.advance(by: .seconds(1))
            let rest = try store.enforceRetention().deleted
            #expect(rest == ["000002.seg", "000003.seg"])
            let none = try store.gaps()
            #expect(none.isEmpty)
        }
    }

    /// Segments deleted behind a held one leave one `retention` gap over the hole, however many passes made it; it
    /// goes with the held segment once the hold is released and retention deletes that too.
    @Test func segmentsDeletedBehindAHoldLeaveOneRetentionGap() throws {
        try withAgedStore { frames, clock, store in
            // Four segments of 5 frames each, sealed 150 ms apart (each seal runs retention); the first is held.
            let hold = store.addHold(streamName: "camera", range: frames.pts(0)..<frames.pts(5))
            for range in [0..<5, 5..<10, 10..<15, 15..<20] {
                let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
                for i in range { try writer.append(frames.frame(i)) }
                try writer.close()
                clock.advance(by: .milliseconds(150))
            }
            let retention = { (start: Int, end: Int) in
                GapRow(
                    streamID: 1, startNanoseconds: frames.pts(start), endNanoseconds: frames.pts(end),
                    reason: .retention)
            }
            #expect(try store.enforceRetention().deleted == ["000002.seg"])
            #expect(try store.gaps() == [retention(5, 10)], "from the first frame deleted to the next one kept")
            clock.advance(by: .milliseconds(200))
            #expect(try store.enforceRetention().deleted == ["000003.seg"])
            #expect(try store.gaps() == [retention(5, 15)], "one row for the whole hole")
            #expect(try readAll(store).map(\.0) == (Array(0..<5) + Array(15..<20)).map(frames.pts))
            store.removeHold(hold)
            #expect(try store.enforceRetention().deleted == ["000001.seg"])
            #expect(try store.gaps().isEmpty, "the hole is older than the oldest frame left")
            #expect(try store.verify(repair: false).clean)
        }
    }

    /// Newest segments deleted behind a hold one pass after another, each with no frame kept after it then (the
    /// next frames were not written yet): each pass's hole ends just past its newest frame, a frame before where the
    /// next pass's starts, and the two are still one row.
    @Test func newestSegmentsDeletedPassByPassLeaveOneRetentionGap() throws {
        try withAgedStore { frames, clock, store in
            let hold = store.addHold(streamName: "camera", range: frames.pts(0)..<frames.pts(5))
            defer { store.removeHold(hold) }
            for (range, deleted) in [(0..<5, nil), (5..<10, "000002.seg"), (10..<15, "000003.seg")] {
                let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
                for i in range { try writer.append(frames.frame(i)) }
                try writer.close()
                clock.advance(by: .milliseconds(500))
                guard let deleted else { continue }
                #expect(try store.enforceRetention().deleted == [deleted])
                let expected = GapRow(
                    streamID: 1, startNanoseconds: frames.pts(5), endNanoseconds: frames.pts(range.upperBound - 1) + 1,
                    reason: .retention)
                #expect(try store.gaps() == [expected], "one row for the hole after \(deleted)")
            }
            #expect(try readAll(store).map(\.0) == (0..<5).map(frames.pts))
        }
    }

    /// Runs `body` with a store whose retention deletes segments sealed more than 400 ms ago by a manual clock, and
    /// gray 64x48 test frames.
    private func withAgedStore(_ body: (TestFrames, ManualClock, SegmentStore) throws -> Void) throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 64, height: 48)
        defer { frames.deallocate() }
        let clock = ManualClock()
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(workerCount: 1, maxAge: .milliseconds(400), now: clock.now))
        try body(frames, clock, store)
    }

    @Test func halfDoneDeleteIsFinishedByRecovery() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 64, height: 48)
        defer { frames.deallocate() }
        do {
            let store = try SegmentStore.open(
                directory: dir.path, options: StoreOptions(workerCount: 1, segmentMaxDuration: .milliseconds(100)))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<9 { try writer.append(frames.frame(i)) }
            try writer.close()
            // Crash after step 1 of a delete.
            let oldest = try #require(try store.index.segments().first)
            try store.index.markDeleting(segmentID: oldest.id)
        }
        let store = try SegmentStore.open(directory: dir.path)
        #expect(store.recovery.repaired.contains { $0.contains("finished deleting segment 000001.seg") })
        #expect(!dir.segmentFiles().contains("000001.seg"))
        #expect(try readAll(store).first?.0 == frames.pts(4), "segment 1 held frames 0…3")
    }
}

/// A read-only reader (`rewind clip` beside a recorder in another process) while that process's retention deletes
/// segments: never an error that calls the store damaged.
@Suite(.timeLimit(.minutes(45))) struct RetentionWhileReadingTests {
    /// Runs `body` with test frames, the reader's file system (`faults`) and two stores of one fresh directory
    /// (removed afterwards) holding five sealed segments of ten raw frames each: `writer`, opened for writing with a
    /// disk budget of `keptSegments` segments (retention then runs only when asked), and `reader`, read-only through
    /// `faults`.
    private static func withStores(
        keptSegments: Int,
        _ body: (TestFrames, _ faults: FaultInjectingFileSystem, _ writer: SegmentStore, _ reader: SegmentStore)
            throws -> Void
    ) throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 128, height: 96)
        defer { frames.deallocate() }
        let options = StoreOptions(
            workerCount: 1, segmentMaxDuration: .milliseconds(300), codecPolicy: .forced(.raw))
        do {
            let store = try SegmentStore.open(directory: dir.path, options: options)
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<50 { try writer.append(frames.frame(i)) }
            try writer.close()
        }
        #expect(dir.segmentFiles().count == 5)
        let segmentBytes = try FileManager.default.attributesOfItem(atPath: dir.segments + "/000001.seg")[.size] as! Int
        var budgeted = options
        budgeted.diskBudget = segmentBytes * keptSegments + segmentBytes / 2
        let faults = FaultInjectingFileSystem()
        try body(
            frames, faults, try SegmentStore.open(directory: dir.path, options: budgeted),
            try SegmentStore.openReadOnly(directory: dir.path, fileSystem: faults))
    }

    /// The frames of a read, by number, each checked bit for bit.
    private static func read(_ store: SegmentStore, frames: TestFrames, numbers: inout [Int]) throws {
        try store.frames(in: 0..<frames.pts(50)) { frame in
            let number = Int(frame.info.ptsNanoseconds / frames.pts(1))
            #expect(CRC32C.checksum(frame.bytes) == frames.expectedDigest(number))
            numbers.append(number)
            return true
        }
    }

    /// Retention deletes the first segment between the reader finding its rows and opening its file: the range
    /// only starts later, as for a read begun a moment after.
    @Test func aSegmentDeletedBeforeAnyFrameWasReadMovesTheStart() throws {
        try Self.withStores(keptSegments: 4) { frames, faults, writer, reader in
            let deleted = Mutex<[String]>([])
            faults.beforeNextOpen(of: "000001.seg") {
                let report = try? writer.enforceRetention()
                deleted.withAnnotatedLock { $0 = report?.deleted ?? ["(retention failed)"] }
            }
            var numbers: [Int] = []
            try Self.read(reader, frames: frames, numbers: &numbers)
            #expect(deleted.withAnnotatedLock { $0 } == ["000001.seg"])
            #expect(numbers == Array(10..<50))
        }
    }

    /// The same for a read in place (exports to `.y4m`): the frames it tells before decoding are those it delivers.
    @Test func aSegmentDeletedBeforeAnInPlaceReadOpensItMovesTheStart() throws {
        try Self.withStores(keptSegments: 4) { frames, faults, writer, reader in
            faults.beforeNextOpen(of: "000001.seg") { _ = try? writer.enforceRetention() }
            var told: [Int] = []
            var done = 0
            try reader.decodeInPlace(
                streamName: "camera", in: 0..<frames.pts(50), planarChroma: false,
                frames: { told = $0.infos.map { Int($0.ptsNanoseconds / frames.pts(1)) } }, piece: { _, _, _ in },
                done: { done = $0 })
            #expect(told == Array(10..<50))
            #expect(done == 40)
        }
    }

    /// While a segment is read, the next one is opened before it is let go: retention, oldest first, stops at the
    /// one being read and deletes nothing the read has still to come to.
    @Test func theSegmentBeingReadKeepsRetentionFromTheNext() throws {
        try Self.withStores(keptSegments: 0) { frames, faults, writer, reader in
            let report = Mutex<RetentionReport?>(nil)
            faults.beforeNextOpen(of: "000003.seg") { report.withAnnotatedLock { $0 = try? writer.enforceRetention() } }
            var numbers: [Int] = []
            try Self.read(reader, frames: frames, numbers: &numbers)
            #expect(numbers == Array(0..<50))
            let pass = try #require(report.withAnnotatedLock { $0 })
            #expect(pass.deleted == ["000001.seg"] && pass.skippedInUse == ["000002.seg"], "\(pass)")
        }
    }

    /// A segment a marker holds is kept by retention, which deletes newer ones in its place; while it is read, its
    /// lock stops the pass before the next one as any segment's would (the reader opens that one next).
    @Test func aHeldSegmentBeingReadKeepsRetentionFromTheNext() throws {
        try Self.withStores(keptSegments: 0) { frames, faults, writer, reader in
            _ = try writer.addMarker(
                streamName: "camera", at: frames.pts(15), label: "held", hold: frames.pts(10)..<frames.pts(20))
            let report = Mutex<RetentionReport?>(nil)
            faults.beforeNextOpen(of: "000003.seg") { report.withAnnotatedLock { $0 = try? writer.enforceRetention() } }
            var numbers: [Int] = []
            try Self.read(reader, frames: frames, numbers: &numbers)
            #expect(numbers == Array(0..<50))
            let pass = try #require(report.withAnnotatedLock { $0 })
            #expect(pass.deleted == ["000001.seg"] && pass.skippedInUse == ["000002.seg"], "\(pass)")
            // Once the read is done, the next pass deletes past the held segment.
            let after = try writer.enforceRetention()
            #expect(after.deleted == ["000003.seg", "000004.seg", "000005.seg"], "\(after)")
            #expect(after.keptByHolds == ["000002.seg"] && after.skippedInUse.isEmpty, "\(after)")
            #expect(try writer.verify(repair: false).clean)
        }
    }

    /// A held segment no one reads does not stop the pass: the segments after it go as before.
    @Test func aHeldSegmentNoOneReadsLetsRetentionPass() throws {
        try Self.withStores(keptSegments: 0) { frames, faults, writer, reader in
            _ = try writer.addMarker(
                streamName: "camera", at: frames.pts(15), label: "held", hold: frames.pts(10)..<frames.pts(20))
            let pass = try writer.enforceRetention()
            #expect(pass.deleted == ["000001.seg", "000003.seg", "000004.seg", "000005.seg"], "\(pass)")
            #expect(pass.keptByHolds == ["000002.seg"] && pass.skippedInUse.isEmpty, "\(pass)")
            var numbers: [Int] = []
            try Self.read(reader, frames: frames, numbers: &numbers)
            #expect(numbers == Array(10..<20))
        }
    }

    /// A segment deleted by something that does not ask for its lock (an index edited by another program, a build
    /// before readers' locks stopped retention) after frames were delivered: the read stops with `deletedWhileRead`
    /// (no damage, no repair), after the frames before it, each bit-exact.
    @Test func aSegmentDeletedAfterFramesWereReadStopsTheReadSayingSo() throws {
        try Self.withStores(keptSegments: 5) { frames, faults, writer, reader in
            faults.beforeNextOpen(of: "000003.seg") {
                guard let row = try? writer.index.segments().first(where: { $0.fileName == "000003.seg" }) else {
                    return
                }
                try? writer.index.markDeleting(segmentID: row.id)
                unlink(writer.directory + "/segments/000003.seg")
                try? writer.index.removeSegment(id: row.id)
            }
            var numbers: [Int] = []
            do {
                try Self.read(reader, frames: frames, numbers: &numbers)
                Issue.record("the read went on past a deleted segment")
            } catch SegmentStoreError.deletedWhileRead(let file) {
                #expect(file == "000003.seg" || file.hasPrefix("of id"), "\(file)")
            }
            #expect(numbers == Array(0..<20))
        }
    }
}
