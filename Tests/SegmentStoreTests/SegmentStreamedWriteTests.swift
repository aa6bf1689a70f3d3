import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Records whose chunks are written while the rest of the frame is still being compressed: what reaches the file,
/// and what a failed write in the middle of a record leaves behind.
@Suite(.timeLimit(.minutes(45))) struct SegmentStreamedWriteTests {
    /// 1024×1024 gray frames of noise: four chunks that do not compress, so each is written as soon as it is done.
    struct NoiseFrames {
        let stream: StreamDescription
        let buffer: UnsafeMutableRawBufferPointer

        init() throws {
            let layout = try FrameLayout(format: .gray8, width: 1024, height: 1024)
            stream = StreamDescription(
                layout: layout, frameDuration: FrameTime(value: 1, timescale: 30), color: .unspecified)
            buffer = .allocate(byteCount: layout.byteCount, alignment: 64)
        }

        func deallocate() { buffer.deallocate() }

        func pts(_ index: Int) -> Int64 { Int64(index) * stream.frameDuration.nanoseconds! }

        func fill(_ index: Int) {
            var seed = UInt64(index) &* 0x9E37_79B9_7F4A_7C15 | 1
            let words = buffer.bindMemory(to: UInt64.self)
            for i in words.indices {
                seed ^= seed << 13
                seed ^= seed >> 7
                seed ^= seed << 17
                words[i] = seed
            }
        }

        func frame(_ index: Int) -> FrameView {
            fill(index)
            let info = try! FrameInfo(pts: FrameTime(nanoseconds: pts(index)), wallNanoseconds: 0, color: .unspecified)
            return FrameView(layout: stream.layout, info: info, bytes: UnsafeRawBufferPointer(buffer))
        }

        func digest(_ index: Int) -> UInt32 {
            fill(index)
            return CRC32C.checksum(UnsafeRawBufferPointer(buffer))
        }
    }

    @Test func streamedRecordsReadBackExactly() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try NoiseFrames()
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        let store = try SegmentStore.open(
            directory: dir.path, options: StoreOptions(keyInterval: 5, workerCount: 2, fileSystem: fs))
        let writer = try store.makeWriter(streamName: "noise", stream: frames.stream)
        try writer.append(frames.frame(0))
        let before = fs.writeCount
        for i in 1..<12 { try writer.append(frames.frame(i)) }
        #expect(fs.writeCount - before > 11, "the chunks of a record that does not compress go out in several writes")
        try writer.close()
        let read = try readAll(store)
        #expect(read.map(\.0) == (0..<12).map { frames.pts($0) })
        for ((_, digest), i) in zip(read, 0..<12) { #expect(digest == frames.digest(i), "frame \(i)") }
        #expect(try store.verify(repair: false).clean)
    }

    @Test(arguments: [1, 2, 3]) func aWriteFailingInsideARecordCutsItOff(failingPiece: Int) throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try NoiseFrames()
        defer { frames.deallocate() }
        let fs = FaultInjectingFileSystem()
        // One worker finishes the chunks in order and writes each as it is done, so the record takes a known number
        // of writes (with two, chunks finished out of order go out together, and the count depends on timing).
        let store = try SegmentStore.open(
            directory: dir.path,
            options: StoreOptions(keyInterval: 5, workerCount: 1, syncInterval: .nanoseconds(1), fileSystem: fs))
        let writer = try store.makeWriter(streamName: "noise", stream: frames.stream)
        for i in 0..<6 { try writer.append(frames.frame(i)) }
        // A short write first (resumed), then an error on a later piece of the same record.
        fs.failWrite(number: fs.writeCount + 1, with: .short(4096))
        fs.failWrite(number: fs.writeCount + 1 + failingPiece, with: .error(EIO))
        #expect {
            try writer.append(frames.frame(6))
        } throws: { error in
            guard case SegmentStoreError.writeFailed(_, let durable, let pts, _) = error else { return false }
            return durable == 6 && pts == frames.pts(5)
        }
        for i in 7..<10 { try writer.append(frames.frame(i)) }
        try writer.close()
        let expected = [0, 1, 2, 3, 4, 5, 7, 8, 9]
        let read = try readAll(store)
        #expect(read.map(\.0) == expected.map { frames.pts($0) })
        for ((_, digest), i) in zip(read, expected) { #expect(digest == frames.digest(i), "frame \(i)") }
        #expect(try store.verify(repair: false).clean)
    }
}
