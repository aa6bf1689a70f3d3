import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

private func description(_ width: Int, _ height: Int, fps: Int32) throws -> StreamDescription {
    StreamDescription(
        layout: try FrameLayout(format: .nv12, width: width, height: height),
        frameDuration: FrameTime(value: 1, timescale: fps), color: ColorInfo(matrix: .bt709, range: .video))
}

@Suite(.timeLimit(.minutes(45))) struct MultiStreamRecorderTests {
    @Test func sharesFollowByteRatesAboveAFloorOfFourFramesAndNeverExceedTheTotal() throws {
        let big = try description(1920, 1080, fps: 30)
        let small = try description(320, 180, fps: 15)
        let bigSlab = Recorder.smallestMemoryBudget(for: big.layout)
        let smallSlab = Recorder.smallestMemoryBudget(for: small.layout)
        #expect(Recorder.budgetShares(total: 100 << 20, streams: [big], window: .seconds(10)) == [100 << 20])

        let total = 256 << 20
        let shares = Recorder.budgetShares(total: total, streams: [big, small], window: .seconds(10))
        #expect(shares.reduce(0, +) == total, "every byte of the budget is shared out (one was lost to rounding)")
        #expect(shares[1] >= 4 * smallSlab, "the small stream keeps its floor")
        // Above the floors, bytes per second decide: 1080p30 moves 72× the bytes of 320x180 at 15 fps.
        let rateRatio = Double(bigSlab * 30) / Double(smallSlab * 15)
        let extraRatio = Double(shares[0] - 4 * bigSlab) / Double(shares[1] - 4 * smallSlab)
        #expect(abs(extraRatio - rateRatio) / rateRatio < 0.01, "\(extraRatio) vs \(rateRatio)")

        // Below the floors: a slab each first, the rest towards the floors.
        let tight = Recorder.budgetShares(
            total: bigSlab * 2 + smallSlab * 2, streams: [big, small], window: .seconds(10))
        #expect(tight[0] >= bigSlab && tight[1] >= smallSlab, "\(tight)")
        #expect(tight.reduce(0, +) == bigSlab * 2 + smallSlab * 2)
    }

    @Test func twoStreamsFromTwoThreadsGoToOneStoreWithTheirOwnSegmentsAndClocks() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SegmentStore.open(directory: directory.path, options: StoreOptions(workerCount: 2))
        var front = SyntheticCamera(
            layout: try FrameLayout(format: .nv12, width: 320, height: 180),
            frameDuration: FrameTime(value: 1, timescale: 30), frameCount: 90)
        var rear = SyntheticCamera(
            layout: try FrameLayout(format: .nv12, width: 160, height: 96),
            frameDuration: FrameTime(value: 1, timescale: 15), frameCount: 30)
        let recorder = try Recorder(
            streams: [
                RecorderStreamSpec(name: "front", stream: front.stream),
                RecorderStreamSpec(name: "rear", stream: rear.stream),
            ], store: store,
            configuration: RecorderConfiguration(window: .seconds(2), memoryBudget: 32 << 20))
        #expect(recorder.streams.map(\.memoryConfiguration.memoryBudget).reduce(0, +) <= 32 << 20)
        let group = DispatchGroup()
        let rearStream = recorder.streams[1]
        nonisolated(unsafe) var rearCamera = rear
        DispatchQueue.global().async(group: group) { _ = try? rearStream.record(from: &rearCamera) }
        try recorder.streams[0].record(from: &front)
        #expect(group.wait(timeout: .now() + 60) == .success, "the second stream's loop ended")
        rear = rearCamera
        try recorder.finish()
        #expect(recorder.streams.map(\.statistics.framesDurable) == [90, 30])
        #expect(try store.summary(streamName: "front").frames == 90)
        #expect(try store.summary(streamName: "rear").frames == 30)
        let rows = try store.streams()
        #expect(rows.map(\.name) == ["front", "rear"])
        #expect(rows.allSatisfy { $0.clock != nil })
        #expect(rows[0].clock?.wallNanoseconds == rows[1].clock?.wallNanoseconds, "one recorder clock")
        #expect(try store.segments(streamName: "rear").allSatisfy { $0.frameCount > 0 })

        // Both streams together on the recorder clock, and every frame proven bit-exact.
        let set = try StreamSet(store: store)
        let everything = try #require(try set.span())
        for member in set.members {
            var indices: [Int64] = []
            try member.source.frames(in: member.clock.ptsRange(everything.lowerBound..<(everything.upperBound + 1))) {
                indices.append(SyntheticCamera.verify($0)?.index ?? -1)
                return true
            }
            #expect(indices == Array(0..<Int64(member.name == "front" ? 90 : 30)), "\(member.name)")
        }
    }

    /// Each stream's spill encoder has an output buffer of its own, taken off the shared budget before the rings'
    /// shares are made, so the shares keep their proportions and the whole is still the budget; critical pressure
    /// takes every stream's buffer (each stores its frames raw) and normal pressure gives them back.
    @Test func everyStreamsEncoderBufferComesOffTheBudgetAndFollowsPressure() throws {
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        var feeds = [try CameraFeed(width: 320, height: 240, fps: 30), try CameraFeed(width: 160, height: 96, fps: 15)]
        let budget = 48 << 20
        let recorder = try Recorder(
            streams: [
                RecorderStreamSpec(name: "front", stream: feeds[0].stream),
                RecorderStreamSpec(name: "rear", stream: feeds[1].stream),
            ], store: store, configuration: RecorderConfiguration(window: .seconds(60), memoryBudget: budget))
        let buffers = feeds.map { store.encoderOutputBytes(for: $0.stream.layout) }
        #expect(buffers.allSatisfy { $0 > 0 })
        #expect(recorder.streams.map(\.encoderBytes) == buffers)
        #expect(recorder.encoderBytes == buffers.reduce(0, +))
        #expect(
            recorder.streams.map(\.memoryConfiguration.memoryBudget)
                == Recorder.budgetShares(
                    total: budget - recorder.encoderBytes, streams: feeds.map(\.stream), window: .seconds(60)))
        for (stream, buffer) in zip(recorder.streams, buffers) {
            #expect(stream.memoryBudget(under: .normal) == stream.memoryConfiguration.memoryBudget + buffer)
        }
        #expect(recorder.memoryBudget(under: .normal) <= budget)
        #expect(recorder.memoryBudget(under: .normal) > budget - 16)

        func record(_ count: Int) throws {
            for _ in 0..<count {
                for (index, stream) in recorder.streams.enumerated() {
                    stream.waitForSpillRoom()
                    #expect(try feeds[index].appendNext(to: stream) != .dropped(.spillBehind))
                }
            }
            // Only once every frame is written do the counters below say what happened to these ten.
            try waitUntil("every stream's frames are written", timeout: .seconds(600)) {
                !recorder.streams.contains(where: { $0.unspilledFrames > 0 })
            }
        }
        try record(10)
        let compressed = recorder.streams.map(\.statistics.rawChunkBytesSpilled)
        recorder.setPressure(.critical)
        #expect(recorder.memoryBudget(under: .critical) < recorder.memoryBudget(under: .normal))
        try record(10)
        let underPressure = zip(recorder.streams, compressed).map { $0.statistics.rawChunkBytesSpilled - $1 }
        recorder.setPressure(.normal)
        try record(10)
        try recorder.finish()
        for (index, stream) in recorder.streams.enumerated() {
            let frameBytes = Int64(feeds[index].stream.layout.byteCount)
            let statistics = stream.statistics
            #expect(underPressure[index] >= 9 * frameBytes, "\(stream.name) is stored raw under critical pressure")
            let afterwards = statistics.rawChunkBytesSpilled - compressed[index] - underPressure[index]
            #expect(afterwards < 5 * frameBytes, "\(stream.name) is compressed again at normal pressure")
            #expect(statistics.drops.isEmpty, "\(stream.name): \(statistics.drops)")
            var verified = 0
            try store.frames(streamName: stream.name, in: Int64.min..<Int64.max) { view in
                #expect(SyntheticCamera.verify(view) != nil)
                verified += 1
                return true
            }
            #expect(verified == 30, "\(stream.name)")
        }
    }

    @Test func aSecondRecorderContinuesAStoredStreamAfterItsFramesAndAddsANewOneOnTheSameClock() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let layout = try FrameLayout(format: .nv12, width: 160, height: 96)
        let duration = FrameTime(value: 1, timescale: 30)
        do {
            let store = try SegmentStore.open(directory: directory.path)
            let recorder = try Self.recordStreamA(frames: 30, into: store, layout: layout, duration: duration)
            #expect(recorder.streams[0].sessionOffsetNanoseconds == 0, "a new stream keeps its source's pts")
        }
        let store = try SegmentStore.open(directory: directory.path)
        let lastBefore = try #require(try store.summary(streamName: "a").lastPTS)
        let recorder = try Self.recordTenFramesOfAAndB(into: store, layout: layout, duration: duration)
        let offset = try #require(recorder.streams[0].sessionOffsetNanoseconds)
        #expect(offset >= lastBefore + duration.nanoseconds!, "the new frames come after the stored ones")
        #expect(try store.summary(streamName: "a").frames == 40)
        let gaps = try store.gaps(streamName: "a")
        #expect(gaps.map(\.reason) == [.recorderStopped])
        #expect(gaps.first?.startNanoseconds == lastBefore)
        #expect(gaps.first?.endNanoseconds == offset)
        let rows = try store.streams()
        #expect(rows.map(\.name) == ["a", "b"])
        #expect(rows[0].clock?.offsetNanoseconds == 0, "the stored stream keeps its mapping")
        #expect(rows[1].clock?.wallNanoseconds == rows[0].clock?.wallNanoseconds, "one clock for the store")
        #expect(try store.verify(repair: false).clean)
    }

    /// A file recorded faster than real time (10 s of frames in a fraction of one) ends after the wall clock's
    /// recorder time: the next recording runs ahead of the wall clock from the store's end, and a new stream is
    /// placed beside the stored one it records with, not 10 s before it.
    @Test func aRecordingAfterOneFasterThanRealTimeStartsAfterItWithEveryStream() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let layout = try FrameLayout(format: .nv12, width: 160, height: 96)
        let duration = FrameTime(value: 1, timescale: 30)
        let store = try SegmentStore.open(directory: directory.path)
        try Self.recordStreamA(frames: 300, into: store, layout: layout, duration: duration)
        let storedEnd = try #require(try store.recorderTimeEnd())
        let stored = try #require(try store.streams().first)
        let lastPTS = try #require(try store.summary(streamName: "a").lastPTS)
        #expect(storedEnd == (stored.clock?.recorderTime(ofPTS: lastPTS) ?? 0) + 33_333_334)
        let recorder = try Self.recordTenFramesOfAAndB(into: store, layout: layout, duration: duration)
        #expect(recorder.clockLeadNanoseconds > 5_000_000_000, "\(recorder.clockLeadNanoseconds)")
        let starts = try recorder.streams.map { stream in
            let clock = try #require(stream.clock)
            return clock.recorderTime(ofPTS: try #require(stream.sessionOffsetNanoseconds))
        }
        #expect(starts.allSatisfy { $0 >= storedEnd }, "both after the stored frames: \(starts), \(storedEnd)")
        #expect(abs(starts[0] - starts[1]) < 1_000_000_000, "recorded together, placed together: \(starts)")
        #expect(try #require(recorder.now) >= storedEnd)
        #expect(try store.gaps(streamName: "a").map(\.reason) == [.recorderStopped])
        #expect(try store.verify(repair: false).clean)
    }

    /// Records ten frames each of streams `a` and `b` into `store` with one recorder, to the end; returns it.
    static func recordTenFramesOfAAndB(into store: SegmentStore, layout: FrameLayout, duration: FrameTime) throws
        -> Recorder
    {
        var again = SyntheticCamera(layout: layout, frameDuration: duration, frameCount: 10)
        var other = SyntheticCamera(layout: layout, frameDuration: duration, frameCount: 10)
        let recorder = try Recorder(
            streams: [
                RecorderStreamSpec(name: "a", stream: again.stream),
                RecorderStreamSpec(name: "b", stream: other.stream),
            ], store: store, configuration: RecorderConfiguration())
        try recorder.streams[0].record(from: &again)
        try recorder.streams[1].record(from: &other)
        try recorder.finish()
        return recorder
    }

    /// Records `frames` frames of a synthetic camera as stream `a` into `store`, to the end; returns the recorder.
    @discardableResult
    static func recordStreamA(frames: Int, into store: SegmentStore, layout: FrameLayout, duration: FrameTime) throws
        -> Recorder
    {
        var camera = SyntheticCamera(layout: layout, frameDuration: duration, frameCount: frames)
        let recorder = try Recorder(
            stream: camera.stream, store: store, configuration: RecorderConfiguration(streamName: "a"))
        try recorder.record(from: &camera)
        try recorder.finish()
        return recorder
    }

    /// Records ten frames more of stream `a` into the store in `directory`; returns the store and the pts of the
    /// first frame of the stream at or after `firstAfter`.
    static func recordTenFramesAgain(
        in directory: TemporaryDirectory, layout: FrameLayout, duration: FrameTime, firstAfter: Int64
    ) throws -> (SegmentStore, Int64?) {
        let store = try SegmentStore.open(directory: directory.path)
        try recordStreamA(frames: 10, into: store, layout: layout, duration: duration)
        var first: Int64?
        try store.frames(in: firstAfter..<Int64.max) { frame in
            first = frame.info.ptsNanoseconds
            return false
        }
        return (store, first)
    }

    /// A `.partial` left by a killed recorder and damaged before its end is kept whole for a repair, and its valid
    /// frames past the damage include some the index never had (written after the last sync). A recording made
    /// before the repair continues after the newest frame in the file, not among those frames: the repair's salvage
    /// then shares no pts with it, and every frame reads.
    @Test func aRecordingBeforeTheRepairOfADamagedPartialContinuesAfterItsFrames() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let killed = TemporaryDirectory()
        defer { killed.remove() }
        let layout = try FrameLayout(format: .nv12, width: 160, height: 96)
        // Half-second frames: the file's 6 s end long after the wall clock reaches when the recording below starts
        // (with 1/30 s frames, 0.4 s, it would be placed where the wall clock is on a slow enough machine).
        let duration = FrameTime(value: 1, timescale: 2)
        let camera = SyntheticCamera(layout: layout, frameDuration: duration, frameCount: 12)
        var pts: [Int64] = []
        do {
            let store = try SegmentStore.open(
                directory: killed.path, options: StoreOptions(keyInterval: 4, workerCount: 2))
            let writer = try store.makeWriter(streamName: "a", stream: camera.stream)
            var bytes = [UInt8](repeating: 0, count: layout.byteCount)
            for index in 0..<12 {
                try bytes.withUnsafeMutableBytes { buffer in
                    let info = try camera.frame(at: Int64(index), into: buffer)
                    pts.append(info.ptsNanoseconds)
                    try writer.append(FrameView(layout: layout, info: info, bytes: UnsafeRawBufferPointer(buffer)))
                }
                if index == 5 { try writer.sync() }
            }
            // The process dies here: frames 6…11 are in the file, not in the index; then frame 2 is damaged.
            try FileManager.default.createDirectory(atPath: directory.segments, withIntermediateDirectories: true)
            for name in ["index.sqlite", "index.sqlite-wal"]
            where FileManager.default.fileExists(atPath: killed.path + "/" + name) {
                try FileManager.default.copyItem(atPath: killed.path + "/" + name, toPath: directory.path + "/" + name)
            }
            let path = killed.segments + "/000001.seg.partial"
            let reader = try SegmentFileReader(path: path, fileSystem: POSIXFileSystem())
            let offset = try reader.scan().entries[2].offset
            reader.close()
            var file = [UInt8](FileManager.default.contents(atPath: path)!)
            file[Int(offset) + 56 + 40] ^= 0x5A
            try Data(file).write(to: URL(fileURLWithPath: directory.segments + "/000001.seg.partial"))
            try writer.close()
        }
        let (store, first) = try Self.recordTenFramesAgain(
            in: directory, layout: layout, duration: duration, firstAfter: pts[1] + 1)
        let step = try #require(first) - pts[11]
        #expect(
            step >= duration.nanoseconds! && step <= duration.nanoseconds! + 1,
            "the new recording starts after the file's newest frame: \(step) ns")
        let repaired = try store.verify(repair: true)
        let salvage = try #require(repaired.salvage.first)
        #expect(salvage.salvagedFrames == 8 && salvage.alreadyStoredFrames == 0, "\(repaired.repaired)")
        #expect(try store.verify(repair: false).clean)
        var read: [Int64] = []
        try store.frames(in: 0..<Int64.max) { frame in
            read.append(frame.info.ptsNanoseconds)
            return true
        }
        #expect(Array(read.prefix(10)) == [pts[0], pts[1]] + Array(pts[4...11]), "\(read)")
        #expect(read.count == 20 && read.last! > pts[11], "the ten new frames after them: \(read)")
        // The `recorder stopped` gap starts at the newest frame in the file: no gap covers a stored frame.
        let stopped = try store.gaps(streamName: "a").filter { $0.reason == .recorderStopped }
        #expect(stopped.map(\.startNanoseconds) == [pts[11]], "\(stopped)")
    }

    /// A recording that ended with a lost tail (frames lost to a full disk after its last stored frame, a gap to
    /// the end) is continued after that gap, not inside it: its frames follow the gap directly, which marks where
    /// the recording stopped, and no other gap overlaps it.
    @Test func aSecondRecorderContinuesAfterALostTailNotInsideIt() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let layout = try FrameLayout(format: .nv12, width: 160, height: 96)
        let duration = FrameTime(value: 1, timescale: 30)
        let tailEnd: Int64 = 12_000_000_000
        do {
            let store = try SegmentStore.open(directory: directory.path)
            let recorder = try Self.recordStreamA(frames: 30, into: store, layout: layout, duration: duration)
            let last = try #require(try store.summary(streamName: "a").lastPTS)
            let writer = try store.makeWriter(streamName: "a", stream: recorder.streams[0].stream)
            try writer.recordGap(start: last, end: tailEnd, reason: .diskError)
            try writer.close()
        }
        let (store, firstAfter) = try Self.recordTenFramesAgain(
            in: directory, layout: layout, duration: duration, firstAfter: 1_000_000_000)
        #expect(firstAfter == tailEnd, "the new frames start where the lost tail ends")
        let gaps = try store.gaps(streamName: "a")
        #expect(gaps.map(\.reason) == [.diskError], "\(gaps)")
        #expect(try store.summary(streamName: "a").frames == 40)
    }

    /// A recording whose newest segments retention deleted (a held marker keeps the oldest) is continued after its
    /// newest frame ever stored, not after the newest one kept: no pts is used twice, a `retention` gap covers the
    /// deleted tail, and the `recorder stopped` gap starts where the recording ended.
    @Test func aSecondRecorderContinuesAfterATailRetentionDeleted() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let layout = try FrameLayout(format: .nv12, width: 160, height: 96)
        let duration = FrameTime(value: 1, timescale: 30)
        let ended: Int64
        do {
            let store = try SegmentStore.open(
                directory: directory.path, options: StoreOptions(segmentMaxDuration: .seconds(1)))
            try Self.recordStreamA(frames: 90, into: store, layout: layout, duration: duration)
            ended = try #require(try store.summary(streamName: "a").lastPTS)
            _ = try store.addMarker(streamName: "a", at: 0, label: "keep", hold: 0..<500_000_000)
        }
        let recorded = directory.segmentFiles()
        do {
            let store = try SegmentStore.open(directory: directory.path, options: StoreOptions(diskBudget: 1))
            let report = try store.enforceRetention()
            #expect(report.deleted.count >= 2 && report.keptByHolds.count == 1, "\(report)")
            #expect(try #require(try store.summary(streamName: "a").lastPTS) < 1_000_000_000)
        }
        let (store, firstAfter) = try Self.recordTenFramesAgain(
            in: directory, layout: layout, duration: duration, firstAfter: 1_000_000_000)
        // One frame later, rounded up to the frame grid (a nanosecond at 1/30 s).
        let step = try #require(firstAfter) - ended
        #expect(
            step >= duration.nanoseconds! && step <= duration.nanoseconds! + 1,
            "the new frames follow the deleted tail's last: \(step)")
        // The deleted tail is a `retention` gap up to just past its last frame.
        let gaps = try store.gaps(streamName: "a")
        #expect(gaps.map(\.reason) == [.retention, .recorderStopped])
        #expect(gaps.first?.endNanoseconds == ended + 1, "\(gaps)")
        #expect(gaps.last?.startNanoseconds == ended, "\(gaps)")
        // The new segment gets a number no file of the store had: a tool that tracks files by name (or an events
        // client that saw the deleted ones) never sees a number twice.
        let numbers = { (names: [String]) in names.compactMap { SegmentFormat.sequence(ofFileName: $0) } }
        let new = Set(directory.segmentFiles()).subtracting(recorded)
        #expect(!new.isEmpty && numbers(Array(new)).min()! > numbers(recorded).max()!, "\(recorded) then \(new)")
    }

    @Test func aStreamThatCannotBeWrittenLeavesNoWriterOfTheOthersOpen() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SegmentStore.open(directory: directory.path)
        let small = try description(160, 96, fps: 30)
        let other = try description(320, 180, fps: 30)
        _ = try store.makeWriter(streamName: "b", stream: small).close()
        // "b" holds frames (its newest pts is set), so it keeps its format.
        try store.index.raiseNewestPTS(streamID: try #require(try store.index.stream(named: "b")).id, to: 0)
        #expect(throws: StoreIndexError.self) {
            _ = try Recorder(
                streams: [RecorderStreamSpec(name: "a", stream: small), RecorderStreamSpec(name: "b", stream: other)],
                store: store, configuration: RecorderConfiguration())
        }
        // "a" has no writer left behind: a recorder of it starts.
        let recorder = try Recorder(
            streams: [RecorderStreamSpec(name: "a", stream: small)], store: store,
            configuration: RecorderConfiguration())
        try recorder.finish()
    }
}
