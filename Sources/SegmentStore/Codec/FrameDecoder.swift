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
    var next: UnsafeMutableRawPointer { buffers[(current + 1) % buffers.count].base }

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
    /// The interleaved bytes before a plain LZ4 chunk of NV12 chroma decoded into planar chroma (its dictionary),
    /// made when first needed.
    private(set) lazy var dictionary = ByteBuffer(count: 64 * 1024)
    /// The table of the payload being decoded.
    private(set) var table = ChunkTable()

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
        var table = ChunkTable()
        try table.read(payload, plan: plan, expectedCRC: expectedCRC)
        for chunk in 0..<table.count { try table.check(chunk, in: payload) }
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

    /// Verifies and decodes one payload into `out`, chunk by chunk.
    ///
    /// - Parameters:
    ///   - previous: the previous frame of the same segment, needed by delta chunks; nil when there is none.
    ///     May be `out` itself (decoding in place).
    /// - Throws: ``FrameDecodeError``.
    func decode(
        _ payload: UnsafeRawBufferPointer, expectedCRC: UInt32, into out: UnsafeMutableRawPointer,
        previous: UnsafeRawPointer?
    ) throws(FrameDecodeError) {
        try table.read(payload, plan: plan, expectedCRC: expectedCRC)
        try decodeInOrder(payload, into: out, previous: previous)
    }

    /// Checks and decodes every chunk of the payload whose ``table`` has been read, in order, on this thread.
    private func decodeInOrder(
        _ payload: UnsafeRawBufferPointer, into out: UnsafeMutableRawPointer, previous: UnsafeRawPointer?
    ) throws(FrameDecodeError) {
        for chunk in 0..<table.count {
            try table.check(chunk, in: payload)
            try decodeChunk(
                chunk, codec: table.codecs[chunk], stored: table.stored(chunk, in: payload), into: out,
                previous: previous)
        }
    }

    /// Reads and checks `payload`'s chunk table (see ``ChunkTable``), for ``decodeChunks(of:into:previous:pool:helpers:)``.
    ///
    /// - Throws: ``FrameDecodeError`` naming the first problem.
    func readTable(_ payload: UnsafeRawBufferPointer, expectedCRC: UInt32) throws(FrameDecodeError) {
        try table.read(payload, plan: plan, expectedCRC: expectedCRC)
    }

    /// Decodes the chunks of a payload whose ``table`` has been read, on the workers of `pool`: each worker takes
    /// the next chunk not taken, checks it and decodes it (with its own decoder of `helpers`, for its scratch).
    ///
    /// Chunks are independent but for an LZ4 chunk's prefix dictionary (the decoded bytes just before it): a
    /// payload with such a chunk is decoded in order on the calling thread.
    ///
    /// - Parameter helpers: a decoder of the same plan for each worker after the first (this one).
    /// - Throws: the problem of the lowest-numbered chunk that failed (every chunk is tried).
    func decodeChunks(
        of payload: UnsafeRawBufferPointer, into out: UnsafeMutableRawPointer, previous: UnsafeRawPointer?,
        pool: WorkerPool, helpers: [FrameDecoder]
    ) throws(FrameDecodeError) {
        if table.needsOrder { return try decodeInOrder(payload, into: out, previous: previous) }
        let table = self.table
        // Each worker's lowest failing chunk and its error, written by that worker only (on the stack: nothing is
        // allocated per frame).
        let first = withUnsafeTemporaryAllocation(of: (Int, FrameDecodeError)?.self, capacity: pool.workerCount) {
            failures in
            failures.initialize(repeating: nil)
            pool.run(items: table.count) { chunk, worker in
                let decoder = worker == 0 ? self : helpers[worker - 1]
                do throws(FrameDecodeError) {
                    try table.check(chunk, in: payload)
                    try decoder.decodeChunk(
                        chunk, codec: table.codecs[chunk], stored: table.stored(chunk, in: payload), into: out,
                        previous: previous)
                } catch {
                    if failures[worker] == nil || failures[worker]!.0 > chunk { failures[worker] = (chunk, error) }
                }
            }
            var lowest: (Int, FrameDecodeError)?
            for case let failure? in failures where lowest == nil || failure.0 < lowest!.0 { lowest = failure }
            return lowest
        }
        if let first { throw first.1 }
    }
}

/// A payload's chunk table, read and checked: each chunk's codec, place in the payload and CRC.
///
///     payload: | u32 count | count × { u32 codec, u32 stored length, u32 CRC-32C } | chunk 0 | chunk 1 | …
///
/// Reused from frame to frame (its arrays keep their capacity), so reading a table allocates nothing.
struct ChunkTable: Sendable {
    private(set) var codecs: [UInt8] = []
    private(set) var starts: [Int] = []
    private(set) var lengths: [Int] = []
    private(set) var crcs: [UInt32] = []
    /// Whether an LZ4 chunk uses the bytes decoded before it as its dictionary, so chunks must go in order.
    private(set) var needsOrder = false

    var count: Int { codecs.count }

    /// Reads `payload`'s table: checks its CRC, the chunk count, each codec and stored length.
    ///
    /// - Throws: ``FrameDecodeError`` naming the first problem.
    mutating func read(_ payload: UnsafeRawBufferPointer, plan: ChunkPlan, expectedCRC: UInt32)
        throws(FrameDecodeError)
    {
        codecs.removeAll(keepingCapacity: true)
        starts.removeAll(keepingCapacity: true)
        lengths.removeAll(keepingCapacity: true)
        crcs.removeAll(keepingCapacity: true)
        needsOrder = false
        guard payload.count >= plan.tableLength else {
            throw .payloadTooShort(needed: plan.tableLength, actual: payload.count)
        }
        let base = payload.baseAddress!
        guard CRC32C.checksum(UnsafeRawBufferPointer(start: base, count: plan.tableLength)) == expectedCRC else {
            throw .tableChecksumMismatch
        }
        let count = Int(UInt32(littleEndian: base.loadUnaligned(as: UInt32.self)))
        guard count == plan.count else { throw .chunkCountMismatch(expected: plan.count, actual: count) }
        var cursor = plan.tableLength
        for chunk in 0..<count {
            let entry = base + 4 + 12 * chunk
            let codec = UInt8(truncatingIfNeeded: UInt32(littleEndian: entry.loadUnaligned(as: UInt32.self)))
            let length = Int(UInt32(littleEndian: entry.loadUnaligned(fromByteOffset: 4, as: UInt32.self)))
            guard codec <= 2 else { throw .unknownChunkCodec(chunk: chunk, codec: codec) }
            guard length <= payload.count - cursor, length <= plan.largestStored(chunk) else {
                throw .chunkLengthInvalid(chunk: chunk)
            }
            if codec == 0 && length != plan.lengths[chunk] { throw .chunkLengthInvalid(chunk: chunk) }
            if codec == 1 && prefixDictionaryLength(offset: plan.offsets[chunk]) > 0 { needsOrder = true }
            codecs.append(codec)
            starts.append(cursor)
            lengths.append(length)
            crcs.append(UInt32(littleEndian: entry.loadUnaligned(fromByteOffset: 8, as: UInt32.self)))
            cursor += length
        }
        guard cursor == payload.count else { throw .payloadTooShort(needed: cursor, actual: payload.count) }
    }

    /// Chunk `chunk`'s stored bytes in `payload`.
    func stored(_ chunk: Int, in payload: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: payload.baseAddress! + starts[chunk], count: lengths[chunk])
    }

    /// Checks chunk `chunk`'s stored bytes against its CRC.
    ///
    /// - Throws: ``FrameDecodeError/chunkChecksumMismatch(chunk:)``.
    func check(_ chunk: Int, in payload: UnsafeRawBufferPointer) throws(FrameDecodeError) {
        guard CRC32C.checksum(stored(chunk, in: payload)) == crcs[chunk] else {
            throw .chunkChecksumMismatch(chunk: chunk)
        }
    }
}

extension FrameDecoder {
    /// Decodes one verified chunk (its stored bytes checked against its CRC) into its place in `out`.
    ///
    /// - Parameters:
    ///   - codec: the chunk's codec byte (0 raw, 1 LZ4, 2 LZ4 delta).
    ///   - previous: the previous frame (for a delta chunk); may be `out` itself.
    /// - Throws: ``FrameDecodeError``.
    func decodeChunk(
        _ chunk: Int, codec: UInt8, stored: UnsafeRawBufferPointer, into out: UnsafeMutableRawPointer,
        previous: UnsafeRawPointer?
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
                let source = previous + plan.offsets[chunk]
                if source != UnsafeRawPointer(target) { target.copyMemory(from: source, byteCount: length) }
                return
            }
            let scratch = self.scratch.base
            let n = LZ4_decompress_safe(
                stored.baseAddress!.assumingMemoryBound(to: CChar.self),
                scratch.assumingMemoryBound(to: CChar.self), Int32(stored.count), Int32(length))
            guard n == length else { throw .lz4Failed(chunk: chunk) }
            addBytes(scratch, previous + plan.offsets[chunk], into: target, count: length)
        }
    }
}

extension FrameDecoder {
    /// Decodes one verified chunk in place into `frame`, which holds the frame before it (when `hasPrevious`): the
    /// chunks of a frame go in order, so a plain LZ4 chunk's dictionary (the bytes before it) is this frame's.
    ///
    /// With `planarChroma` (NV12 only), `frame` keeps the chroma as the planar Cb and Cr planes of I420 at the
    /// place of NV12's interleaved plane (the same bytes in all): each chroma chunk is de-interleaved as it is
    /// decoded, a delta added to the planar bytes it belongs to.
    ///
    /// - Throws: ``FrameDecodeError``.
    func decodeChunkInPlace(
        _ chunk: Int, codec: UInt8, stored: UnsafeRawBufferPointer, frame: UnsafeMutableRawPointer,
        hasPrevious: Bool, planarChroma: Bool
    ) throws(FrameDecodeError) {
        let offset = plan.offsets[chunk]
        guard planarChroma, layout.format == .nv12, offset >= layout.plane(1).offset else {
            return try decodeChunk(
                chunk, codec: codec, stored: stored, into: frame, previous: hasPrevious ? UnsafeRawPointer(frame) : nil)
        }
        let chroma = layout.plane(1)
        let u = frame + chroma.offset
        let v = u + chroma.byteCount / 2
        let start = offset - chroma.offset
        let length = plan.lengths[chunk]
        switch codec {
        case 0:
            scatterChroma(stored.baseAddress!, start: start, count: length, u: u, v: v, adding: false)
        case 1:
            // The dictionary is the NV12 frame's bytes before the chunk: luma as it is, chroma interleaved again.
            let count = prefixDictionaryLength(offset: offset)
            let dictionary = self.dictionary.base
            let lumaPart = max(0, min(count, chroma.offset - (offset - count)))
            dictionary.copyMemory(from: frame + offset - count, byteCount: lumaPart)
            gatherChroma(
                start: max(0, start - count), count: count - lumaPart, u: u, v: v, into: dictionary + lumaPart)
            let n = LZ4_decompress_safe_usingDict(
                stored.baseAddress!.assumingMemoryBound(to: CChar.self),
                scratch.base.assumingMemoryBound(to: CChar.self), Int32(stored.count), Int32(length),
                dictionary.assumingMemoryBound(to: CChar.self), Int32(count))
            guard n == length else { throw .lz4Failed(chunk: chunk) }
            scatterChroma(scratch.base, start: start, count: length, u: u, v: v, adding: false)
        default:
            guard hasPrevious else { throw .deltaWithoutPredecessor }
            // An unchanged chunk (a residual of zeros) is already in place.
            if LZ4Block.decodesToZeros(stored, count: length) { return }
            let n = LZ4_decompress_safe(
                stored.baseAddress!.assumingMemoryBound(to: CChar.self),
                scratch.base.assumingMemoryBound(to: CChar.self), Int32(stored.count), Int32(length))
            guard n == length else { throw .lz4Failed(chunk: chunk) }
            scatterChroma(scratch.base, start: start, count: length, u: u, v: v, adding: true)
        }
    }
}
