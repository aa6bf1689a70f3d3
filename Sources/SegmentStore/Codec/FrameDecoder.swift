import CLZ4
import RewindCore
import RewindSQLite
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The buffers a ``FrameDecoder`` decodes into, in turn.
///
/// With `count` buffers, a decoded frame stays intact while the next `count − 1` frames are decoded, so a consumer
/// on another thread can hold up to `count − 1` frames without copying them. Owned by whoever must keep the frames
/// alive: the buffers outlive any decoder that uses them.
///
///     decode k → buffer[k % count]; a delta frame reads the frame before it from buffer[(k − 1) % count]
public final class DecodeBuffers: @unchecked Sendable {
    /// Bytes of each buffer: one raw frame of the stream's layout.
    public let byteCount: Int
    private let buffers: [ByteBuffer]
    /// The buffer holding the last decoded frame.
    private var current = 0

    /// Allocates `count` buffers of `byteCount` bytes each.
    ///
    /// - Parameters:
    ///   - byteCount: bytes of one frame.
    ///   - count: buffers, at least 1.
    /// - Complexity: O(`byteCount × count`): the buffers are allocated now.
    public init(byteCount: Int, count: Int = 1) {
        precondition(count >= 1, "at least one decode buffer")
        self.byteCount = byteCount
        buffers = (0..<count).map { _ in ByteBuffer(count: byteCount) }
    }

    /// How many buffers there are: a decoded frame stays intact while the next `count − 1` are decoded.
    public var count: Int { buffers.count }

    /// The last decoded frame.
    var last: UnsafeMutableRawPointer { buffers[current].base }

    /// The buffer the next frame goes to (the same as ``last`` when there is one buffer).
    var next: UnsafeMutableRawPointer { next(after: 1) }

    /// The buffer the frame `steps` after the last one goes to.
    func next(after steps: Int) -> UnsafeMutableRawPointer { buffers[(current + steps) % buffers.count].base }

    /// Makes ``next`` the last decoded frame.
    func advance() { current = (current + 1) % buffers.count }
}

/// Decodes record payloads back into frames, keeping the last decoded frame for the next delta.
///
/// Not thread-safe: one owner. The decoded frame lives in ``frame`` until the next `decode` (with one buffer), or
/// until `buffers.count − 1` more frames are decoded (see ``DecodeBuffers``).
package final class FrameDecoder {
    package let layout: FrameLayout
    package let plan: ChunkPlan
    package let buffers: DecodeBuffers
    let scratch: ByteBuffer

    /// - Parameters:
    ///   - buffers: where frames are decoded; a single buffer of its own when nil.
    package init(layout: FrameLayout, chunkSize: Int = ChunkPlan.defaultChunkSize, buffers: DecodeBuffers? = nil) {
        precondition(buffers == nil || buffers!.byteCount == layout.byteCount, "decode buffers of another size")
        self.layout = layout
        self.plan = ChunkPlan(layout: layout, chunkSize: chunkSize)
        self.buffers = buffers ?? DecodeBuffers(byteCount: layout.byteCount)
        scratch = ByteBuffer(count: plan.lengths.max() ?? 1)
    }

    /// The last decoded frame.
    package var frame: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: buffers.last, count: layout.byteCount) }

    /// Checks a payload's table and every chunk checksum without decoding.
    ///
    /// - Throws: ``FrameDecodeError`` naming the first problem.
    package static func verify(_ payload: UnsafeRawBufferPointer, plan: ChunkPlan, expectedCRC: UInt32)
        throws(FrameDecodeError)
    {
        _ = try walk(payload, plan: plan, expectedCRC: expectedCRC) { _, _, _ throws(FrameDecodeError) in }
    }

    /// Calls `body(chunk, codec, storedBytes)` for each verified chunk.
    @discardableResult
    private static func walk(
        _ payload: UnsafeRawBufferPointer, plan: ChunkPlan, expectedCRC: UInt32,
        _ body: (Int, UInt8, UnsafeRawBufferPointer) throws(FrameDecodeError) -> Void
    ) throws(FrameDecodeError) -> Bool {
        guard payload.count >= plan.tableLength else {
            throw .payloadTooShort(needed: plan.tableLength, actual: payload.count)
        }
        let base = payload.baseAddress!
        let table = UnsafeRawBufferPointer(start: base, count: plan.tableLength)
        guard CRC32C.checksum(table) == expectedCRC else { throw .tableChecksumMismatch }
        let count = Int(UInt32(littleEndian: base.loadUnaligned(as: UInt32.self)))
        guard count == plan.count else { throw .chunkCountMismatch(expected: plan.count, actual: count) }
        var cursor = plan.tableLength
        for chunk in 0..<count {
            let entry = base + 4 + 12 * chunk
            let codec = UInt8(truncatingIfNeeded: UInt32(littleEndian: entry.loadUnaligned(as: UInt32.self)))
            let length = Int(UInt32(littleEndian: entry.loadUnaligned(fromByteOffset: 4, as: UInt32.self)))
            let crc = UInt32(littleEndian: entry.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
            guard codec <= 2 else { throw .unknownChunkCodec(chunk: chunk, codec: codec) }
            guard length <= payload.count - cursor else { throw .chunkLengthInvalid(chunk: chunk) }
            if codec == 0 && length != plan.lengths[chunk] { throw .chunkLengthInvalid(chunk: chunk) }
            let stored = UnsafeRawBufferPointer(start: base + cursor, count: length)
            guard CRC32C.checksum(stored) == crc else { throw .chunkChecksumMismatch(chunk: chunk) }
            try body(chunk, codec, stored)
            cursor += length
        }
        guard cursor == payload.count else { throw .payloadTooShort(needed: cursor, actual: payload.count) }
        return true
    }

    /// Verifies and decodes one payload into the next of ``buffers``, which then holds ``frame``.
    ///
    /// - Parameters:
    ///   - payload: the record's stored bytes.
    ///   - expectedCRC: the record header's stored CRC.
    ///   - hasPrevious: whether ``frame`` holds the previous frame of the same segment (needed by delta chunks).
    /// - Throws: ``FrameDecodeError``; ``frame`` still holds the frame before (decode a key frame next).
    /// - Complexity: O(frame bytes).
    package func decode(_ payload: UnsafeRawBufferPointer, expectedCRC: UInt32, hasPrevious: Bool)
        throws(FrameDecodeError)
    {
        try decode(
            payload, expectedCRC: expectedCRC, into: buffers.next,
            previous: hasPrevious ? UnsafeRawPointer(buffers.last) : nil)
        buffers.advance()
    }

    /// Verifies and decodes one payload into `target`, chunk by chunk.
    ///
    /// For two frames decoded at once on two threads (a wavefront): a delta chunk of this frame first waits until
    /// `previousProgress` (the thread decoding `previous`) has finished that chunk, and each finished chunk is
    /// published to `progress`. A failure abandons `progress`, so a waiter goes on (and its frame is discarded).
    ///
    /// - Parameters:
    ///   - previous: the previous frame of the same segment, needed by delta chunks; nil when there is none.
    ///     May be `target` itself (decoding in place).
    /// - Throws: ``FrameDecodeError``.
    func decode(
        _ payload: UnsafeRawBufferPointer, expectedCRC: UInt32, into out: UnsafeMutableRawPointer,
        previous: UnsafeRawPointer?, progress: ChunkProgress? = nil, previousProgress: ChunkProgress? = nil
    ) throws(FrameDecodeError) {
        do {
            try Self.walk(payload, plan: plan, expectedCRC: expectedCRC) {
                chunk, codec, stored throws(FrameDecodeError) in
                try decodeChunk(
                    chunk, codec: codec, stored: stored, into: out, previous: previous,
                    previousProgress: previousProgress)
                progress?.publish(chunks: chunk + 1)
            }
        } catch {
            progress?.abandon()
            throw error
        }
    }
}

extension FrameDecoder {
    /// Decodes one verified chunk (its stored bytes checked against its CRC) into its place in `out`.
    ///
    /// - Parameters:
    ///   - codec: the chunk's codec byte (0 raw, 1 LZ4, 2 LZ4 delta).
    ///   - previous: the previous frame (for a delta chunk); may be `out` itself.
    ///   - previousProgress: for a delta chunk, waited on until the thread decoding `previous` has this chunk.
    /// - Throws: ``FrameDecodeError``.
    func decodeChunk(
        _ chunk: Int, codec: UInt8, stored: UnsafeRawBufferPointer, into out: UnsafeMutableRawPointer,
        previous: UnsafeRawPointer?, previousProgress: ChunkProgress? = nil
    ) throws(FrameDecodeError) {
        let target = out + plan.offsets[chunk]
        let length = plan.lengths[chunk]
        switch codec {
        case 0:
            target.copyMemory(from: stored.baseAddress!, byteCount: length)
        case 1:
            let dictionary = prefixDictionaryLength(offset: plan.offsets[chunk])
            let n = LZ4_decompress_safe_usingDict(
                stored.baseAddress!.assumingMemoryBound(to: CChar.self),
                target.assumingMemoryBound(to: CChar.self), Int32(stored.count), Int32(length),
                (target - dictionary).assumingMemoryBound(to: CChar.self), Int32(dictionary))
            guard n == length else { throw .lz4Failed(chunk: chunk) }
        default:
            guard let previous else { throw .deltaWithoutPredecessor }
            if LZ4Block.decodesToZeros(stored, count: length) {
                // An unchanged chunk (a residual of zeros) is the previous frame's, copied without expanding zeros.
                previousProgress?.wait(forChunks: chunk + 1)
                let source = previous + plan.offsets[chunk]
                if source != UnsafeRawPointer(target) { target.copyMemory(from: source, byteCount: length) }
                return
            }
            let scratch = self.scratch.base
            let n = LZ4_decompress_safe(
                stored.baseAddress!.assumingMemoryBound(to: CChar.self),
                scratch.assumingMemoryBound(to: CChar.self), Int32(stored.count), Int32(length))
            guard n == length else { throw .lz4Failed(chunk: chunk) }
            previousProgress?.wait(forChunks: chunk + 1)
            addBytes(scratch, previous + plan.offsets[chunk], into: target, count: length)
        }
    }
}

/// How many chunks of a frame one thread has decoded, for a thread decoding the next frame at the same time.
///
/// The decoder of frame k + 1 needs chunk c of frame k only for a delta chunk c, and only after it has decompressed
/// its own residual, so the two threads run in a wavefront: the second a little behind the first.
final class ChunkProgress: @unchecked Sendable {
    private let done = Atomic<Int>(0)

    /// Starts a new frame: nothing decoded. Call before the frame's decode starts on either thread.
    func reset() { done.store(0, ordering: .releasing) }

    /// Chunks `0..<chunks` are decoded and visible.
    func publish(chunks: Int) { done.store(chunks, ordering: .releasing) }

    /// The decode failed: waiters stop waiting.
    func abandon() { done.store(Int.max, ordering: .releasing) }

    /// Waits until chunks `0..<chunks` are decoded (or the decode was abandoned): spins briefly, then yields.
    func wait(forChunks chunks: Int) {
        var spins = 0
        while done.load(ordering: .acquiring) < chunks {
            spins += 1
            if spins > 64 { sched_yield() }
        }
    }
}
