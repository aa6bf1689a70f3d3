import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

@Suite(.timeLimit(.minutes(45))) struct SegmentRecoveryTests {
    /// Writes `count` frames into one segment of a new store and returns the `.partial` bytes after a sync (the
    /// writer is left open, as if the process died) and the sealed bytes after close.
    static func makeSegment(count: Int, frames: TestFrames) throws -> (partial: [UInt8], sealed: [UInt8]) {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(keyInterval: 4, workerCount: 2))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<count { try writer.append(frames.frame(i)) }
        try writer.sync()
        let partial = [UInt8](FileManager.default.contents(atPath: dir.segments + "/000001.seg.partial")!)
        try writer.close()
        let sealed = [UInt8](FileManager.default.contents(atPath: dir.segments + "/000001.seg")!)
        return (partial, sealed)
    }

    /// Record offsets of a segment's frames (from a scan of its bytes).
    static func recordOffsets(_ bytes: [UInt8]) throws -> [Int64] {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.segments, withIntermediateDirectories: true)
        let path = dir.segments + "/000001.seg.partial"
        try writeFile(path, bytes)
        let reader = try SegmentFileReader(path: path, fileSystem: POSIXFileSystem())
        return try reader.scan().entries.map(\.offset)
    }

    @Test func partialKilledBeforeItsHeaderWasCompleteIsRemovedButADamagedHeaderIsKept() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let (partial, _) = try Self.makeSegment(count: 3, frames: frames)
        for cut in [0, 10, 65, 69, partial.count > 80 ? 75 : 69] {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            try FileManager.default.createDirectory(atPath: dir.segments, withIntermediateDirectories: true)
            try writeFile(dir.segments + "/000007.seg.partial", partial.prefix(cut))
            // A complete-length header with a flipped bit may front real frames: never removed.
            var damaged = partial
            damaged[20] ^= 0x40
            try writeFile(dir.segments + "/000008.seg.partial", damaged)
            let store = try SegmentStore.open(directory: dir.path)
            #expect(store.recovery.repaired.contains { $0.contains("000007.seg.partial") }, "cut at \(cut)")
            #expect(dir.segmentFiles() == ["000008.seg.partial"], "cut at \(cut)")
            let report = try store.verify(repair: false)
            #expect(report.damaged.map(\.segment) == ["000008.seg.partial"])
        }
    }

    @Test func tornPartialIsCutAtLastValidRecordAndIndexRebuilt() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let (partial, _) = try Self.makeSegment(count: 12, frames: frames)
        let offsets = try Self.recordOffsets(partial)
        #expect(offsets.count == 12)
        let ends = offsets.dropFirst().map { $0 } + [Int64(partial.count)]
        var cuts = Set(stride(from: 0, to: partial.count + 1, by: max(1, partial.count / 60)))
        for end in ends { cuts.formUnion([Int(end) - 1, Int(end), Int(end) + 1]) }
        for cut in cuts.sorted() where cut >= 0 && cut <= partial.count {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            try FileManager.default.createDirectory(atPath: dir.segments, withIntermediateDirectories: true)
            try writeFile(dir.segments + "/000001.seg.partial", partial.prefix(cut))
            let complete = ends.filter { $0 <= Int64(cut) }.count
            let store = try SegmentStore.open(directory: dir.path)
            let read = try readAll(store)
            #expect(read.count == complete, "cut at \(cut)")
            for (i, (pts, digest)) in read.enumerated() {
                #expect(pts == frames.pts(i))
                #expect(digest == frames.expectedDigest(i), "cut at \(cut): frame \(i) not bit-exact")
            }
            if cut >= 70 + 6 {  // a whole header: the file is sealed
                #expect(dir.segmentFiles() == ["000001.seg"], "cut at \(cut)")
                #expect(try store.verify(repair: false).clean, "cut at \(cut)")
            } else {
                // A header cut short holds no frame: recovery removes the file and the store is clean.
                #expect(dir.segmentFiles().isEmpty, "cut at \(cut): a torn header is removed")
                #expect(try store.verify(repair: false).clean, "cut at \(cut)")
            }
        }
    }

    /// A `.partial` damaged in the middle (a flipped byte in frame 5, valid frames after it) was not torn by a crash:
    /// opening the store keeps it whole, and a repair salvages the frames from the next key frame on (8…11), losing
    /// only 5…7.
    @Test func aPartialDamagedBeforeItsEndIsKeptForTheRepairToSalvage() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let (partial, _) = try Self.makeSegment(count: 12, frames: frames)
        let offsets = try Self.recordOffsets(partial)
        var damaged = partial
        damaged[Int(offsets[5]) + 56 + 40] ^= 0x5A
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.segments, withIntermediateDirectories: true)
        let path = dir.segments + "/000001.seg.partial"
        try writeFile(path, damaged)

        let store = try SegmentStore.open(directory: dir.path, options: StoreOptions(keyInterval: 4, workerCount: 2))
        #expect(FileManager.default.contents(atPath: path).map { [UInt8]($0) } == damaged, "kept whole at open")
        #expect(store.recovery.problems.contains { $0.contains("damaged before its end") }, "\(store.recovery)")
        let repaired = try store.verify(repair: true)
        #expect(repaired.salvage.first?.salvagedFrames == 4, "\(repaired.repaired)")
        #expect(try store.verify(repair: false).clean)
        let expected = Array(0..<5) + Array(8..<12)
        let read = try readAll(store)
        #expect(read.map(\.0) == expected.map { frames.pts($0) })
        #expect(read.map(\.1) == expected.map { frames.expectedDigest($0) }, "bit-exact")
    }

    /// A store as a killed writer leaves it: 12 frames (key frames every 4) appended to segment 1, synced after
    /// frame `syncedThrough` (the index holds frames up to it, the file all 12), the index and the `.partial` copied
    /// into a new directory with `damage` done to the file's bytes (its record offsets given).
    static func killedWriterStore(
        frames: TestFrames, syncedThrough: Int = 11, damage: (inout [UInt8], [Int64]) -> Void
    ) throws -> TemporaryDirectory {
        let original = TemporaryDirectory()
        defer { original.remove() }
        let copy = TemporaryDirectory()
        let store = try SegmentStore.open(
            directory: original.path, options: StoreOptions(keyInterval: 4, workerCount: 2))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<12 {
            try writer.append(frames.frame(i))
            if i == syncedThrough { try writer.sync() }
        }
        // The process dies here: its files as they are now.
        try FileManager.default.createDirectory(atPath: copy.segments, withIntermediateDirectories: true)
        for name in ["index.sqlite", "index.sqlite-wal"]
        where FileManager.default.fileExists(atPath: original.path + "/" + name) {
            try FileManager.default.copyItem(atPath: original.path + "/" + name, toPath: copy.path + "/" + name)
        }
        var bytes = [UInt8](FileManager.default.contents(atPath: original.segments + "/000001.seg.partial")!)
        damage(&bytes, try recordOffsets(bytes))
        try writeFile(copy.segments + "/000001.seg.partial", bytes)
        try writer.close()
        return copy
    }

    /// The same with the index of the killed writer (it had all 12 frames): opening lets go of the rows from the
    /// damage on and records them as a `damaged` gap, saying they wait for a repair rather than that they are lost,
    /// and retention leaves the file alone; the repair salvages from the next key frame on, counts the frames really
    /// lost once (also one alone, before a key frame), and the gap shrinks to them. With a frame of a later recording
    /// far after the file's (`later`), the gap of frames lost at the file's end stops one frame after them instead
    /// of running to it.
    @Test(arguments: [(5, false), (0, false), (3, false), (9, true)])
    func aSalvageShrinksTheDamagedGapRecordedAtOpenToTheFramesLost(damagedFrame: Int, later: Bool) throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let copy = try Self.killedWriterStore(frames: frames) { bytes, offsets in
            bytes[Int(offsets[damagedFrame]) + 56 + 40] ^= 0x5A
        }
        defer { copy.remove() }
        func plural(_ count: Int) -> String { "\(count) frame" + (count == 1 ? "" : "s") }
        do {
            let store = try SegmentStore.open(
                directory: copy.path, options: StoreOptions(keyInterval: 4, workerCount: 2, diskBudget: 1))
            let letGo = 12 - damagedFrame
            let opened = store.recovery.repaired.joined(separator: "\n")
            #expect(
                opened.contains(
                    "its file \(damagedFrame) valid ones before the damage: the index leaves out the \(plural(letGo)) "
                        + "from the damage on"), "\(opened)")
            #expect(!opened.contains("lost"), "\(opened)")
            if damagedFrame > 0 {
                #expect(
                    opened.contains(
                        "rebuilt the index rows of segment 000001.seg.partial from its file: \(plural(damagedFrame))"))
            }
            // Retention (a budget of one byte) cannot tell what the file holds until the repair: it stays.
            #expect(try store.enforceRetention().deleted.isEmpty)
            #expect(copy.segmentFiles() == ["000001.seg.partial"])
        }
        let store = try SegmentStore.open(directory: copy.path, options: StoreOptions(keyInterval: 4, workerCount: 2))
        if later {
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            try writer.append(frames.frame(300))
            try writer.close()
        }
        let repaired = try store.verify(repair: true)
        #expect(try store.verify(repair: false).clean)
        let lost = damagedFrame..<min(12, (damagedFrame / 4 + 1) * 4)
        let salvage = try #require(repaired.salvage.first)
        #expect(salvage.lostFrameCount == lost.count, "\(repaired.repaired)")
        #expect(salvage.salvagedFrames == 12 - lost.upperBound)
        #expect(repaired.repaired.contains { $0.contains("lost \(plural(lost.count))") }, "\(repaired.repaired)")
        let gaps = try store.gaps(streamName: "camera")
        #expect(gaps.map(\.reason) == [.damaged], "\(gaps)")
        #expect(
            gaps.first.map { [$0.startNanoseconds, $0.endNanoseconds] }
                == [frames.pts(max(0, lost.lowerBound - 1)), frames.pts(lost.upperBound)], "\(gaps)")
        let kept = Array(0..<lost.lowerBound) + Array(lost.upperBound..<12) + (later ? [300] : [])
        #expect(try readAll(store).map(\.0) == kept.map { frames.pts($0) })
    }

    /// A `.partial` of a killed writer whose header is damaged, holding frames past the index's last (written after
    /// the last sync): opening the store keeps it and raises the stream's newest pts to its newest frame, so a new
    /// recording goes after them; the repair rebuilds the header and indexes all twelve.
    @Test func aPartialWithADamagedHeaderRaisesTheNewestPTSToItsFrames() throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let copy = try Self.killedWriterStore(frames: frames, syncedThrough: 5) { bytes, _ in
            bytes[SegmentFormat.fixedHeaderLength - 5] = 0xFF  // the high byte of the stream name's length
        }
        defer { copy.remove() }
        let store = try SegmentStore.open(directory: copy.path, options: StoreOptions(keyInterval: 4, workerCount: 2))
        #expect(copy.segmentFiles() == ["000001.seg.partial"], "\(store.recovery)")
        let stream = try #require(try store.index.stream(named: "camera"))
        #expect(try store.index.newestIndexedPTS(streamID: stream.id) == frames.pts(11))
        _ = try store.verify(repair: true)
        #expect(try store.verify(repair: false).clean)
        #expect(try readAll(store).map(\.0) == (0..<12).map { frames.pts($0) })
    }

    @Test func bitFlipsAreReportedPreciselyAndNeverReturnedAsFrames() throws {
        let frames = try TestFrames(format: .i420, width: 96, height: 64)
        defer { frames.deallocate() }
        let (_, sealed) = try Self.makeSegment(count: 10, frames: frames)
        let offsets = try Self.recordOffsets(sealed)
        var rng = SystemRandomNumberGenerator()
        // Every byte of the trailer (including its reserved zero bytes), then random positions anywhere.
        let trailer = Array((sealed.count - 32)..<sealed.count)
        for trial in 0..<(40 + trailer.count) {
            let position =
                trial == 0
                ? 80 : trial <= trailer.count ? trailer[trial - 1] : Int.random(in: 0..<sealed.count, using: &rng)
            var damaged = sealed
            damaged[position] ^= UInt8(1 << Int.random(in: 0..<8, using: &rng))
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            try FileManager.default.createDirectory(atPath: dir.segments, withIntermediateDirectories: true)
            try writeFile(dir.segments + "/000001.seg", damaged)
            let store = try SegmentStore.open(directory: dir.path)
            // Whatever is returned is bit-exact; frames at and after the damage are not returned, whether frames are
            // decoded on one thread or two.
            let read = try readAll(store)
            let readOnTwo = try readAll(store, twoThreads: true)
            #expect(readOnTwo.map(\.0) == read.map(\.0) && readOnTwo.map(\.1) == read.map(\.1))
            for (i, (pts, digest)) in read.enumerated() {
                #expect(pts == frames.pts(i))
                #expect(digest == frames.expectedDigest(i), "flip at \(position): frame \(i) corrupt")
            }
            let report = try store.verify(repair: false)
            #expect(!report.clean, "flip at \(position) not found")
            guard let damage = report.damaged.first else {
                Issue.record("flip at \(position): no damage reported: \(report.problems)")
                continue
            }
            #expect(damage.segment == "000001.seg")
            if let frame = offsets.lastIndex(where: { $0 <= Int64(position) }), position < Int(sealed.count - 32),
                position >= Int(offsets[0]), read.count < 10
            {
                #expect(damage.frame == frame, "flip at \(position): \(damage.message)")
                #expect(damage.offset == offsets[frame], "flip at \(position): \(damage.message)")
                #expect(damage.message.contains("000001.seg is damaged at byte \(offsets[frame]) (frame \(frame))"))
                #expect(read.count == frame)
            } else if position < Int(offsets[0]) {
                #expect(damage.frame == -1, "header damage: \(damage.message)")
            }
        }
    }

    /// Read on one thread, and with each frame's chunks shared out between two.
    @Test(arguments: [(5, false), (5, true), (6, true)])
    func damagedFrameFromIndexIsAnErrorNamingFileFrameAndOffset(damagedFrame: Int, twoThreads: Bool) throws {
        let frames = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SegmentStore.open(directory: dir.path, options: StoreOptions(workerCount: 1))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<8 { try writer.append(frames.frame(i)) }
            try writer.close()
        }
        let path = dir.segments + "/000001.seg"
        var bytes = [UInt8](FileManager.default.contents(atPath: path)!)
        let offsets = try Self.recordOffsets(bytes)
        let target = Int(offsets[damagedFrame]) + 56 + 70  // inside the frame's payload
        bytes[target] ^= 0xFF
        try writeFile(path, bytes)
        let store = try SegmentStore.open(directory: dir.path)
        var delivered: [Int64] = []
        var digests: [UInt32] = []
        let buffers = twoThreads ? DecodeBuffers(byteCount: frames.layout.byteCount, count: 5) : nil
        #expect {
            try store.frames(in: 0..<Int64.max, into: buffers, decodeThreads: twoThreads ? 2 : 1) { frame in
                delivered.append(frame.info.ptsNanoseconds)
                digests.append(CRC32C.checksum(frame.bytes))
                return true
            }
        } throws: { error in
            "\(error)".contains(
                "segment 000001.seg is damaged at byte \(offsets[damagedFrame]) (frame \(damagedFrame))")
                && !"\(error)".contains("rewind ")
        }
        // Every frame before the damaged one is delivered, bit-exact; none after.
        #expect(delivered == (0..<damagedFrame).map { frames.pts($0) })
        #expect(digests == (0..<damagedFrame).map { frames.expectedDigest($0) })
        let report = try store.verify(repair: false)
        #expect(report.damaged.map(\.frame) == [damagedFrame])
        let repaired = try store.verify(repair: true)
        #expect(!repaired.repaired.isEmpty)
        #expect(try readAll(store, twoThreads: twoThreads).count == damagedFrame)
        #expect(try store.verify(repair: false).clean)
    }

    /// A frame of many chunks damaged in two of them: its chunks shared out between two threads, the error names
    /// the first damaged chunk, as on one thread, and every frame before it is delivered intact.
    @Test(arguments: [CodecPolicy.forced(.lz4Delta), .forced(.raw)])
    func twoDamagedChunksNameTheFirstOnOneThreadOrTwo(policy: CodecPolicy) throws {
        let frames = try TestFrames(format: .i420, width: 640, height: 360)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SegmentStore.open(
                directory: dir.path, options: StoreOptions(workerCount: 1, chunkSize: 16384, codecPolicy: policy))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<8 { try writer.append(frames.frame(i)) }
            try writer.close()
        }
        let path = dir.segments + "/000001.seg"
        var bytes = [UInt8](FileManager.default.contents(atPath: path)!)
        let offsets = try Self.recordOffsets(bytes)
        // Frame 5's payload: a u32 chunk count, 12 bytes per chunk (codec, stored length, CRC), then the chunks.
        let payload = Int(offsets[5]) + 56
        let count = Int(bytes[payload]) | Int(bytes[payload + 1]) << 8
        #expect(count > 16, "many chunks")
        var start = payload + 4 + 12 * count
        var chunkStarts: [Int] = []
        for chunk in 0..<count {
            chunkStarts.append(start)
            let entry = payload + 4 + 12 * chunk + 4
            start += Int(bytes[entry]) | Int(bytes[entry + 1]) << 8 | Int(bytes[entry + 2]) << 16
        }
        bytes[chunkStarts[4] + 1] ^= 0x10
        bytes[chunkStarts[count - 2] + 1] ^= 0x10
        try writeFile(path, bytes)
        let store = try SegmentStore.open(directory: dir.path)
        for threads in [1, 2] {
            var delivered: [UInt32] = []
            #expect {
                try store.frames(in: 0..<Int64.max, decodeThreads: threads) { frame in
                    delivered.append(CRC32C.checksum(frame.bytes))
                    return true
                }
            } throws: { error in
                "\(error)".contains("damaged at byte \(offsets[5]) (frame 5)") && "\(error)".contains("(chunk 4)")
            }
            #expect(delivered == (0..<5).map { frames.expectedDigest($0) }, "\(threads) threads")
        }
    }

    /// A record whose own header is damaged, or a file cut short inside a record, cannot say which frame it held:
    /// a read names it from the index (its position among the segment's rows), on one thread or two, for records
    /// read whole and records read a chunk at a time.
    @Test(arguments: [(false, 96), (true, 96), (false, 1280), (true, 1280)])
    func damageThatHidesTheFrameNumberIsNamedFromTheIndex(truncate: Bool, width: Int) throws {
        let frames = try TestFrames(format: .nv12, width: width, height: width * 9 / 16)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SegmentStore.open(directory: dir.path, options: StoreOptions(codecPolicy: .forced(.raw)))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<8 { try writer.append(frames.frame(i)) }
            try writer.close()
        }
        let path = dir.segments + "/000001.seg"
        var bytes = [UInt8](FileManager.default.contents(atPath: path)!)
        let offsets = try Self.recordOffsets(bytes)
        if truncate {
            bytes.removeSubrange((Int(offsets[5]) + 20)...)
        } else {
            bytes[Int(offsets[5]) + 10] ^= 0x20
        }
        try writeFile(path, bytes)
        let store = try SegmentStore.openReadOnly(directory: dir.path)
        for threads in [1, 2] {
            #expect {
                try store.frames(in: 0..<Int64.max, decodeThreads: threads) { _ in true }
            } throws: { error in
                "\(error)".contains("000001.seg is damaged at byte \(offsets[5]) (frame 5): ")
            }
        }
    }

    /// A segment file of another store copied into `segments/`, its stream of the same name but another format:
    /// opening for recording goes on without it, naming the file and what to do; checks and repairs say the same
    /// and leave it where it is, and the store's own frames are all still read.
    @Test func aSegmentOfAnotherStoresFormatIsLeftOutAndNamed() throws {
        let own = try TestFrames(format: .nv12, width: 96, height: 64)
        defer { own.deallocate() }
        let other = try TestFrames(format: .nv12, width: 64, height: 48)
        defer { other.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SegmentStore.open(directory: dir.path)
            let writer = try store.makeWriter(streamName: "camera", stream: own.stream)
            for i in 0..<6 { try writer.append(own.frame(i)) }
            try writer.close()
        }
        let (_, foreign) = try Self.makeSegment(count: 5, frames: other)
        try writeFile(dir.segments + "/000007.seg", foreign)
        let store = try SegmentStore.open(directory: dir.path)
        let expected = "segment 000007.seg holds stream 'camera' as nv12 64x48"
        #expect(store.recovery.problems.contains { $0.hasPrefix(expected) && $0.contains("is not this store's") })
        for repair in [false, true] {
            let report = try store.verify(repair: repair)
            #expect(report.problems.contains { $0.hasPrefix(expected) }, "repair \(repair): \(report.problems)")
        }
        #expect(FileManager.default.fileExists(atPath: dir.segments + "/000007.seg"), "left where it is")
        #expect(try readAll(store).map(\.1) == (0..<6).map { own.expectedDigest($0) })
        // Recording goes on beside it, into a segment of its own.
        let writer = try store.makeWriter(streamName: "camera", stream: own.stream)
        try writer.append(own.frame(6))
        try writer.close()
        #expect(try readAll(store).count == 7)
    }

    @Test(arguments: ["missing", "empty"])
    func missingOrEmptyIndexNeverDeletesAndIsRebuilt(kind: String) throws {
        let frames = try TestFrames(format: .gray8, width: 80, height: 60)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SegmentStore.open(
                directory: dir.path, options: StoreOptions(workerCount: 2, segmentMaxDuration: .milliseconds(300)))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<40 { try writer.append(frames.frame(i)) }
            try writer.sync()  // the last segment stays a .partial: a crash
            _ = writer
        }
        let before = dir.segmentFiles()
        #expect(before.count >= 4)
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: dir.path + "/index.sqlite" + suffix)
        }
        if kind == "empty" { try writeFile(dir.path + "/index.sqlite", [UInt8]()) }
        let store = try SegmentStore.open(directory: dir.path)
        let after = dir.segmentFiles()
        #expect(after.count == before.count, "no file deleted")
        #expect(after.allSatisfy { $0.hasSuffix(".seg") })
        let read = try readAll(store)
        #expect(read.map(\.0) == (0..<40).map { frames.pts($0) })
        for (i, (_, digest)) in read.enumerated() { #expect(digest == frames.expectedDigest(i)) }
        #expect(try store.streams().map(\.name) == ["camera"])
        #expect(try store.verify(repair: false).clean)
        // Retention with no budget deletes nothing either.
        #expect(try store.enforceRetention().deleted.isEmpty)
    }

    @Test func rowsWithoutFilesAreReportedNotInvented() throws {
        let frames = try TestFrames(format: .gray8, width: 80, height: 60)
        defer { frames.deallocate() }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SegmentStore.open(
                directory: dir.path, options: StoreOptions(workerCount: 1, segmentMaxDuration: .milliseconds(300)))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in 0..<20 { try writer.append(frames.frame(i)) }
            try writer.close()
        }
        try FileManager.default.removeItem(atPath: dir.segments + "/000001.seg")
        let store = try SegmentStore.open(directory: dir.path)
        #expect(store.recovery.problems.contains { $0.contains("000001.seg") && $0.contains("has no file") })
        let dry = try store.verify(repair: false)
        #expect(!dry.clean)
        let fixed = try store.verify(repair: true)
        #expect(fixed.repaired.contains { $0.contains("000001.seg") })
        #expect(try store.verify(repair: false).clean)
        let read = try readAll(store)
        #expect(read.first?.0 == frames.pts(10), "the first segment held frames 0…9")
        #expect(read.last?.0 == frames.pts(19))
    }
}
