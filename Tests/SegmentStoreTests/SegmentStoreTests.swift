import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(45))) struct SegmentStoreTests {
    @Test func writesAndReadsBackBitExactAcrossSegments() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames()
        defer { frames.deallocate() }
        let options = StoreOptions(keyInterval: 7, workerCount: 2, segmentMaxDuration: .seconds(1))
        let store = try SegmentStore.open(directory: dir.path, options: options)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<100 { try writer.append(frames.frame(i)) }
        #expect(try writer.sync() == frames.pts(99))
        #expect(writer.durableFrameCount == 100)
        try writer.close()

        let sealed = dir.segmentFiles()
        #expect(sealed.count == 4, "30 frames per 1 s segment: \(sealed)")
        #expect(sealed.allSatisfy { $0.hasSuffix(".seg") })
        let read = try readAll(store)
        #expect(read.map(\.0) == (0..<100).map { frames.pts($0) })
        for (i, (_, digest)) in read.enumerated() { #expect(digest == frames.expectedDigest(i), "frame \(i)") }

        let summary = try store.summary()
        #expect(summary.frames == 100)
        #expect(summary.segments == 4)
        #expect(summary.rawBytes == Int64(100 * frames.layout.byteCount))
        #expect(summary.storedBytes < summary.rawBytes / 2)
    }

    /// A segment is sealed at its frame limit too, whatever its duration: the open segment's table of frames in
    /// memory stays bounded for a stream of thousands of tiny frames a second (65 536 frames by default).
    @Test func aSegmentIsSealedAtItsFrameLimit() throws {
        #expect(StoreOptions().segmentMaxFrames == 65_536)
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames()
        defer { frames.deallocate() }
        var options = StoreOptions(keyInterval: 7, workerCount: 2, segmentMaxDuration: .seconds(3600))
        options.segmentMaxFrames = 40
        let store = try SegmentStore.open(directory: dir.path, options: options)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<100 { try writer.append(frames.frame(i)) }
        try writer.close()
        #expect(dir.segmentFiles().count == 3, "40 + 40 + 20 frames: \(dir.segmentFiles())")
        let read = try readAll(store)
        #expect(read.map(\.0) == (0..<100).map { frames.pts($0) })
    }

    /// A store written with the earlier default chunk size (256 KiB) is recorded into again with today's (128 KiB):
    /// the stream continues after its last frame, each segment is read with its own header's chunk size, on one
    /// thread and on two, and verify finds nothing wrong.
    @Test func aStoreOfTheEarlierChunkSizeIsContinuedAndReadAcrossBoth() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .nv12, width: 640, height: 360)
        defer { frames.deallocate() }
        let earlier = try #require(StoreOptions.earlierDefaultChunkSizes.first)
        for (chunkSize, range) in [(earlier, 0..<40), (StoreOptions.defaultChunkSize, 40..<80)] {
            let store = try SegmentStore.open(
                directory: dir.path, options: StoreOptions(keyInterval: 7, workerCount: 2, chunkSize: chunkSize))
            let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
            for i in range { try writer.append(frames.frame(i)) }
            try writer.close()
        }
        let store = try SegmentStore.openReadOnly(directory: dir.path)
        let sizes = try dir.segmentFiles().map { name in
            let reader = try SegmentFileReader(path: dir.segments + "/" + name, fileSystem: POSIXFileSystem())
            defer { reader.close() }
            return reader.header.chunkSize
        }
        #expect(sizes == [earlier, StoreOptions.defaultChunkSize], "\(dir.segmentFiles())")
        for twoThreads in [false, true] {
            let read = try readAll(store, twoThreads: twoThreads)
            #expect(read.map(\.0) == (0..<80).map { frames.pts($0) }, "two threads \(twoThreads)")
            #expect(read.map(\.1) == (0..<80).map { frames.expectedDigest($0) }, "bit-exact, two threads \(twoThreads)")
        }
        #expect(try SegmentStore.open(directory: dir.path).verify(repair: false).clean)
    }

    /// Each frame's chunks shared out between two threads give the same frames as one thread: across segments,
    /// GOPs, odd counts and ranges starting between key frames, switching between the two while reading, and
    /// decoding in place into a single buffer. A view stays intact while the next `buffers − 1` frames are
    /// delivered.
    @Test(arguments: [CodecPolicy.automatic, .forced(.lz4Delta), .forced(.lz4)])
    func twoThreadDecodingMatchesAndViewsStayValid(policy: CodecPolicy) throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .i420, width: 640, height: 360)
        defer { frames.deallocate() }
        let options = StoreOptions(
            keyInterval: 7, workerCount: 2, segmentMaxDuration: .seconds(1), chunkSize: 16384, codecPolicy: policy)
        let store = try SegmentStore.open(directory: dir.path, options: options)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<75 { try writer.append(frames.frame(i)) }
        try writer.close()
        let expected = (0..<75).map { frames.expectedDigest($0) }
        for (from, to) in [(0, 75), (3, 50), (29, 31), (30, 31), (44, 75), (10, 11)] {
            let range = frames.pts(from)..<frames.pts(to)
            let buffers = DecodeBuffers(byteCount: frames.layout.byteCount, count: 5)
            /// Reads the range on two threads (switching by `split(index)` after each frame when given); checks
            /// that every frame is exact and stays so while the next four arrive; returns the indices delivered.
            func read(switching split: ((Int) -> Bool)?) throws -> [Int] {
                let splitting = split.map { _ in DecodeSplitting(false) }
                var held: [(index: Int, bytes: UnsafeRawBufferPointer)] = []
                var seen: [Int] = []
                try store.frames(in: range, into: buffers, decodeThreads: 2, splitting: splitting) { frame in
                    let index = Int(frame.info.ptsNanoseconds / frames.stream.frameDuration.nanoseconds!)
                    seen.append(index)
                    held.append((index, frame.bytes))
                    if held.count > 4 { held.removeFirst() }
                    for (heldIndex, bytes) in held {
                        #expect(
                            CRC32C.checksum(bytes) == expected[heldIndex], "frame \(heldIndex) held while \(index)")
                    }
                    if let split { splitting?.want(split(index)) }
                    return true
                }
                return seen
            }
            #expect(try read(switching: nil) == Array(from..<to), "range \(from)..<\(to)")
            #expect(try readAll(store, range: range, twoThreads: true).map(\.1) == Array(expected[from..<to]))
            // Switching between two threads and one while reading (as an export does, by who waits).
            #expect(
                try read(switching: { ($0 * 7 + from) % 5 < 3 }) == Array(from..<to), "range \(from)..<\(to), switching"
            )
            // Into the reader's one buffer: delta chunks decoded in place, on two threads.
            var inPlace: [UInt32] = []
            try store.frames(in: range, decodeThreads: 2) { frame in
                inPlace.append(CRC32C.checksum(frame.bytes))
                return true
            }
            #expect(inPlace == Array(expected[from..<to]), "in place, range \(from)..<\(to)")
        }
    }

    @Test func randomAccessDecodesAtMostKeyIntervalFrames() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .i420, width: 256, height: 144)
        defer { frames.deallocate() }
        let k = 10
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(keyInterval: k, workerCount: 2, codecPolicy: .forced(.lz4Delta)))
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        for i in 0..<95 { try writer.append(frames.frame(i)) }
        try writer.close()
        for n in [0, 1, 9, 10, 11, 37, 59, 94] {
            let before = store.framesDecoded
            var got: [(Int64, UInt32)] = []
            try store.frames(in: frames.pts(n)..<frames.pts(n) + 1) { frame in
                got.append((frame.info.ptsNanoseconds, CRC32C.checksum(frame.bytes)))
                return true
            }
            let decoded = store.framesDecoded - before
            #expect(got.count == 1)
            #expect(got.first?.0 == frames.pts(n))
            #expect(got.first?.1 == frames.expectedDigest(n), "frame \(n) bit-exact")
            #expect(decoded <= k, "frame \(n) decoded \(decoded) frames")
            #expect(decoded == n % k + 1)
        }
    }

    /// A stream keeps one format once it stored a frame; one that never did (an input that sent its header and
    /// nothing more) takes the format it is recorded with next.
    @Test func aStreamThatNeverStoredAFrameTakesTheNextFormat() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let first = try TestFrames(format: .gray8, width: 64, height: 64)
        defer { first.deallocate() }
        let second = try TestFrames()
        defer { second.deallocate() }
        let store = try SegmentStore.open(directory: dir.path)
        try store.makeWriter(streamName: "camera", stream: first.stream).close()
        let writer = try store.makeWriter(streamName: "camera", stream: second.stream)
        for i in 0..<3 { try writer.append(second.frame(i)) }
        try writer.close()
        #expect(try store.streams().map(\.description) == [second.stream])
        #expect(try readAll(store).count == 3)
        #expect {
            _ = try store.makeWriter(streamName: "camera", stream: first.stream)
        } throws: { error in
            "\(error)".contains("camera")
        }
    }

    @Test func refusesNonMonotonicDuplicateAndWrongLayoutFrames() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames()
        defer { frames.deallocate() }
        let store = try SegmentStore.open(directory: dir.path)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        try writer.append(frames.frame(5))
        #expect {
            try writer.append(frames.frame(5))
        } throws: { error in
            guard case SegmentStoreError.frame(.duplicatePTS) = error else { return false }
            return true
        }
        #expect {
            try writer.append(frames.frame(3))
        } throws: { error in
            guard case SegmentStoreError.frame(.nonMonotonicPTS) = error else { return false }
            return true
        }
        let other = try TestFrames(format: .gray8, width: 64, height: 64)
        defer { other.deallocate() }
        #expect {
            try writer.append(other.frame(9))
        } throws: { error in
            guard case SegmentStoreError.frame(.layoutMismatch) = error else { return false }
            return true
        }
        try writer.append(frames.frame(6))
        try writer.close()
        #expect(try readAll(store).map(\.0) == [frames.pts(5), frames.pts(6)])
    }

    @Test func secondRecorderIsRefusedButReadOnlyStoreReadsWhileWriting() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 128, height: 96)
        defer { frames.deallocate() }
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(workerCount: 2, segmentMaxDuration: .milliseconds(500)))
        #expect {
            _ = try SegmentStore.open(directory: dir.path)
        } throws: { error in
            guard case SegmentStoreError.storeLocked = error else { return false }
            return true
        }
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        let reader = try SegmentStore.openReadOnly(directory: dir.path)
        let check = TestFrames.fill
        let layout = frames.layout
        var lastSeen = -1
        for i in 0..<60 {
            try writer.append(frames.frame(i))
            if i % 6 == 5 {
                try writer.sync()
                // Another thread reads everything durable so far, from sealed and open segments.
                let result = try readConcurrently(reader)
                #expect(result.count == i + 1)
                let expected = UnsafeMutableRawBufferPointer.allocate(byteCount: layout.byteCount, alignment: 16)
                defer { expected.deallocate() }
                for (n, (pts, digest)) in result.enumerated() {
                    check(expected, n, layout)
                    #expect(pts == frames.pts(n))
                    #expect(digest == CRC32C.checksum(UnsafeRawBufferPointer(expected)))
                }
                lastSeen = result.count
            }
        }
        try writer.close()
        #expect(lastSeen == 60)
    }

    private func readConcurrently(_ store: SegmentStore) throws -> [(Int64, UInt32)] {
        let box = ResultBox()
        let thread = Thread {
            let result = Result { try readAll(store) }
            box.result.withAnnotatedLock { $0 = result }
        }
        thread.start()
        // The result is read under the lock it was written under (`isFinished` orders nothing).
        var result: Result<[(Int64, UInt32)], any Error>?
        try waitUntil("the reading thread finishes") {
            result = box.result.withAnnotatedLock { $0 }
            return result != nil
        }
        return try result!.get()
    }

    @Test func gapsAndDropsPassThrough() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try TestFrames(format: .gray8, width: 64, height: 64)
        defer { frames.deallocate() }
        let store = try SegmentStore.open(directory: dir.path)
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        try writer.recordGap(start: 100, end: 200, reason: .spillBehind)
        try writer.addDrops(reason: .spillBehind, count: 3)
        try writer.close()
        #expect(try store.gaps().map(\.reason) == [.spillBehind])
        #expect(try store.drops()[.spillBehind] == 3)
    }
}

final class ResultBox: Sendable {
    let result = Mutex<Result<[(Int64, UInt32)], any Error>?>(nil)
}
