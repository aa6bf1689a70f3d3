import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindTesting
import SegmentStore
import Testing

/// Timelines (coverage per bucket from segment and gap rows), stepping frame by frame, and pictures of frames, across
/// memory and disk.
@Suite(.timeLimit(.minutes(45))) struct TimelineAndPictureTests {
    /// 300 frames at 60 fps with 30 frame times skipped after frame 99; the ring keeps them all, and disk everything
    /// up to frame index 279 at least (the newest few may still wait in the spill stage's batch).
    func recorded() throws -> (Recorder, CameraFeed) {
        var feed = try CameraFeed()
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 64 << 20, spill: .eager))
        for index in 0..<300 {
            recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: recorder, skip: index == 100 ? 30 : 0)
        }
        try waitUntil("the index holds frame index 279") {
            (try store.summary().lastPTS ?? -1) >= feed.pts(279)
        }
        return (recorder, feed)
    }

    /// A ring of three frames and frames fed faster than the index is synced: each frame that left the ring is found
    /// at once, by a check of its range alone and by the timeline (between its write and the next sync, about a second,
    /// it was in neither the ring nor the index, and a live clip of it said "no frames").
    @Test func framesJustLeftASmallRingAreFoundAtOnce() throws {
        var feed = try CameraFeed()
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store())
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .milliseconds(50), memoryBudget: 16 << 20, spill: .eager))
        defer { _ = try? recorder.finish() }
        for _ in 0..<150 {
            recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: recorder)
        }
        let source = ClipSource.recorder(recorder)
        let inRing = recorder.streams[0].ring.statistics.firstPTSNanoseconds ?? .max
        let left = (0..<150).map { feed.pts(Int64($0)) }.filter { $0 < inRing }
        #expect(left.count >= 140, "the ring holds a few frames only")
        let missing = try left.filter { try !source.hasFrames(in: $0..<($0 + 1)) }
        #expect(missing.isEmpty, "\(missing.count) frames outside the ring not found: \(missing.prefix(5))")
        let buckets = try source.timeline(range: 0..<feed.pts(150), buckets: 15)
        #expect(buckets.allSatisfy { $0.memory + $0.disk >= 0.999 }, "no hole: \(buckets)")
    }

    /// Without a store no index keeps gaps: the recorder keeps each stretch of frames dropped on arrival itself, so
    /// an export of a range holding one says so (it said nothing, exit 0, a frame the status counted lost missing).
    @Test func aStorelessRecorderKeepsTheGapsOfItsDrops() throws {
        var feed = try CameraFeed()
        let recorder = try Recorder(
            stream: feed.stream, store: nil,
            configuration: RecorderConfiguration(
                window: .seconds(10), memoryBudget: 4 * Recorder.smallestMemoryBudget(for: feed.stream.layout),
                spill: .off))
        defer { _ = try? recorder.finish() }
        for _ in 0..<4 {
            let outcome = try feed.appendNext(to: recorder)
            guard case .stored = outcome else {
                Issue.record("frame not stored: \(outcome)")
                return
            }
        }
        let pins = recorder.streams[0].ring.pin(0..<Int64.max)
        #expect(try feed.appendNext(to: recorder) == .dropped(.pinnedFrames))
        #expect(try feed.appendNext(to: recorder) == .dropped(.pinnedFrames))
        pins.release()
        _ = try feed.appendNext(to: recorder)
        let gaps = try ClipSource.recorder(recorder).lostGaps(in: 0..<feed.pts(10))
        #expect(gaps.map(\.startNanoseconds) == [feed.pts(3)] && gaps.map(\.endNanoseconds) == [feed.pts(6)], "\(gaps)")
        #expect(gaps.map(\.reason) == [.pinnedFrames])
        #expect(try ClipSource.recorder(recorder).lostGaps(in: feed.pts(6)..<feed.pts(10)).isEmpty)
    }

    /// Frames a live recorder could not write (a full disk) are exported from its memory while it holds them: a gap
    /// of them lost only what left memory before its oldest frame (an export said frames were lost when the file
    /// held every one).
    @Test func framesADiskErrorLeftInMemoryAreNotLost() throws {
        var feed = try CameraFeed()
        let disk = FaultInjectingFileSystem()
        let store = try SegmentStore.open(
            directory: try TemporaryDirectory.store(), options: StoreOptions(fileSystem: disk))
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(
                window: .nanoseconds(feed.pts(8)), memoryBudget: 16 << 20, spill: .eager))
        defer { _ = try? recorder.finish() }
        func append(_ count: Int) throws {
            for _ in 0..<count {
                recorder.waitForSpillRoom()
                _ = try feed.appendNext(to: recorder)
            }
            try waitUntil("the spill stage took every frame") { recorder.unspilledFrames == 0 }
        }
        try append(5)
        disk.setDiskFull(true)
        try append(3)
        disk.setDiskFull(false)
        // The next frame written records the gap [pts(4), pts(8)): frames 5…7 lost to the disk, all in memory.
        try append(1)
        try waitUntil("the disk error's gap is recorded") { (try? store.gaps().isEmpty) == false }
        let source = ClipSource.recorder(recorder)
        let recorded = try store.gaps()
        #expect(recorded.map(\.endNanoseconds) == [feed.pts(8)], "\(recorded)")
        #expect(try source.lostGaps(in: 0..<feed.pts(9)).isEmpty, "\(recorded)")
        // Later frames push frames 4…5 out of memory, one at a time: frame 5, never written, is lost; those still
        // in memory are not.
        var oldest: Int64 = 0
        while oldest <= feed.pts(5) {
            try append(1)
            oldest = try #require(recorder.streams[0].ring.statistics.firstPTSNanoseconds)
        }
        try #require(oldest <= feed.pts(7), "the ring still holds frame 7: \(oldest)")
        let gaps = try source.lostGaps(in: 0..<feed.pts(feed.index))
        #expect(gaps.map(\.startNanoseconds) == [feed.pts(4)] && gaps.map(\.endNanoseconds) == [oldest], "\(gaps)")
        #expect(gaps.map(\.reason) == [.diskError])
        // From the disk alone the gap is whole.
        let stored = try #require(try store.streams().first)
        #expect(
            try ClipSource.store(store, stream: stored).lostGaps(in: 0..<feed.pts(feed.index)).map(\.endNanoseconds)
                == [
                    feed.pts(8)
                ])
    }

    @Test func bucketsShowMemoryDiskAndGaps() throws {
        let (recorder, feed) = try recorded()
        defer { _ = try? recorder.finish() }
        let source = ClipSource.recorder(recorder)
        let end = feed.pts(330)
        // 33 buckets of 10 frame times each.
        let buckets = try source.timeline(range: 0..<end, buckets: 33)
        #expect(buckets.count == 33)
        #expect(buckets.first?.startNanoseconds == 0 && buckets.last?.endNanoseconds == end)
        #expect(zip(buckets, buckets.dropFirst()).allSatisfy { $0.endNanoseconds == $1.startNanoseconds })
        // Frames 0…99 are in memory and on disk.
        for bucket in buckets[0..<10] {
            #expect(abs(bucket.disk - 1) < 0.001 && abs(bucket.memory - 1) < 0.001, "\(bucket)")
            #expect(bucket.gaps.isEmpty, "\(bucket)")
        }
        // Frame times 100…129 were skipped: a gap, on neither.
        for bucket in buckets[10..<13] {
            #expect(bucket.disk == 0 && bucket.memory == 0, "\(bucket)")
            #expect(bucket.gaps == [.inputInterval], "\(bucket)")
        }
        // Frame indexes 130…279 are on disk; all are in memory.
        for bucket in buckets[13..<28] { #expect(abs(bucket.disk - 1) < 0.001, "\(bucket)") }
        for bucket in buckets[13...] { #expect(abs(bucket.memory - 1) < 0.001, "\(bucket)") }
        // A bucket half in the gap: half covered.
        let straddling = try source.timeline(range: feed.pts(90)..<feed.pts(110), buckets: 1)
        #expect(abs(straddling[0].memory - 0.5) < 0.001 && straddling[0].gaps == [.inputInterval], "\(straddling)")

        #expect(throws: ClipError.badBucketCount(0)) { try source.timeline(range: 0..<end, buckets: 0) }
        #expect(throws: ClipError.badBucketCount(20_000)) { try source.timeline(range: 0..<end, buckets: 20_000) }
        #expect(throws: ClipError.badRange(from: 5, to: 5)) { try source.timeline(range: 5..<5, buckets: 1) }
        #expect(throws: ClipError.badBucketCount(10)) { try source.timeline(range: 0..<5, buckets: 10) }
    }

    /// A segment's last frame covers its whole frame time: a range that starts inside it is on disk, and buckets
    /// across segment boundaries are wholly covered (no nanosecond between one segment and the next).
    @Test func segmentBoundariesAreCoveredExactly() throws {
        var feed = try CameraFeed()
        var options = StoreOptions()
        options.segmentMaxDuration = .milliseconds(500)
        let store = try SegmentStore.open(directory: try TemporaryDirectory.store(), options: options)
        let recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 64 << 20, spill: .eager))
        for _ in 0..<150 {
            recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: recorder)
        }
        _ = try recorder.finish()
        let source = ClipSource.store(store, stream: try store.streams()[0])
        let sealed = try store.segments().filter { $0.state == .sealed }
        try #require(sealed.count >= 3)
        let boundary = try #require(sealed[0].lastPTS)
        let inside = try source.timeline(range: (boundary + 1)..<(boundary + 2), buckets: 1)
        #expect(inside[0].disk == 1, "the first segment's last frame covers \(boundary + 1): \(inside)")
        let across = try source.timeline(range: 0..<feed.pts(140), buckets: 14)
        for bucket in across { #expect(bucket.disk == 1, "\(bucket)") }
    }

    @Test func steppingCrossesDiskMemoryAndGaps() throws {
        let (recorder, feed) = try recorded()
        defer { _ = try? recorder.finish() }
        let source = ClipSource.recorder(recorder)
        #expect(try source.framePTS(.atOrBefore, feed.pts(5)) == feed.pts(5))
        #expect(try source.framePTS(.atOrBefore, feed.pts(5) + 1) == feed.pts(5))
        #expect(try source.framePTS(.before, feed.pts(5)) == feed.pts(4))
        #expect(try source.framePTS(.after, feed.pts(5)) == feed.pts(6))
        #expect(try source.framePTS(.before, 0) == nil)
        #expect(try source.framePTS(.atOrBefore, -1) == nil)
        // Across the skipped stretch: frame 99, then frame index 130.
        #expect(try source.framePTS(.after, feed.pts(99)) == feed.pts(130))
        #expect(try source.framePTS(.atOrBefore, feed.pts(120)) == feed.pts(99))
        #expect(try source.framePTS(.before, feed.pts(130)) == feed.pts(99))
        // At the live end.
        #expect(try source.framePTS(.after, feed.pts(329)) == nil)
        #expect(try source.framePTS(.atOrBefore, .max) == feed.pts(329))
        // Stepping every frame forward from the first visits all 300, in order.
        var visited = 0
        var at: Int64? = 0
        while let pts = at {
            visited += 1
            at = try source.framePTS(.after, pts)
        }
        #expect(visited == 300)
    }

    @Test func picturesFromMemoryAndDiskAreTheFramesThemselves() throws {
        let (recorder, feed) = try recorded()
        defer { _ = try? recorder.finish() }
        let source = ClipSource.recorder(recorder)
        for index: Int64 in [3, 99, 131, 329] {
            // Half way to the next frame still shows this one.
            let picture = try #require(try source.picture(at: feed.pts(index) + 5_000_000, width: 80, format: .jpeg))
            #expect(picture.ptsNanoseconds == feed.pts(index))
            let bytes = try feed.camera.frameBytes(at: index)
            let info = try FrameInfo(
                pts: FrameTime.frame(index, duration: feed.stream.frameDuration)!, wallNanoseconds: 0,
                color: feed.stream.color)
            let expected = try bytes.withUnsafeBytes {
                try FrameImage(
                    frame: FrameView(layout: feed.stream.layout, info: info, bytes: $0), width: 80, format: .jpeg)
            }
            #expect(picture.bytes == expected.bytes, "frame \(index)")
        }
        #expect(try source.picture(at: -1, width: nil, format: .png) == nil)
        #expect(throws: FrameImageError.self) { try source.picture(at: feed.pts(3), width: 10_000, format: .png) }
        // The same from the store alone, after the recorder finished.
        _ = try recorder.finish()
        let store = try #require(recorder.store)
        let row = try #require(try store.streams().first)
        let stored = ClipSource.store(store, stream: row)
        let fromDisk = try #require(try stored.picture(at: feed.pts(329), width: nil, format: .png))
        #expect(fromDisk.ptsNanoseconds == feed.pts(329) && fromDisk.width == 160 && fromDisk.height == 96)
        let onlyDisk = try stored.timeline(range: 0..<feed.pts(330), buckets: 33)
        #expect(onlyDisk.allSatisfy { $0.memory == 0 })
        #expect(onlyDisk.enumerated().allSatisfy { (10..<13).contains($0.offset) == ($0.element.disk == 0) })
        #expect(abs(onlyDisk[32].disk - 1) < 0.001)
        #expect(try stored.framePTS(.after, feed.pts(99)) == feed.pts(130))
    }
}
