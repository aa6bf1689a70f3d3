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

/// How a frame's bytes are stored. The raw value is written into every record (its `codec` byte).
///
/// A frame is cut into chunks (see ``ChunkPlan``); each chunk is stored raw, LZ4-compressed, or as the LZ4 of its
/// byte-wise difference from the same chunk of the previous frame, whichever is smallest. The record's codec
/// byte summarises the chunks: `lz4Delta` when any chunk needs the previous frame, else `lz4` when any chunk is
/// compressed, else `raw`.
public enum FrameCodec: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// Bytes as they are.
    case raw = 0
    /// LZ4 block of the bytes (acceleration 1, like `lz4 -1`).
    case lz4 = 1
    /// LZ4 block of `current &- previous`, byte by byte (wrapping), against the previous frame of the segment.
    case lz4Delta = 2

    public var description: String {
        switch self {
        case .raw: "raw"
        case .lz4: "lz4"
        case .lz4Delta: "lz4-delta"
        }
    }
}

/// Which codecs the encoder may use: the smallest per chunk, or one forced (for tests and measurements).
public enum CodecPolicy: Sendable, Hashable {
    /// Per chunk, the smallest of raw, LZ4 and LZ4 delta (delta only when the frame is not a key frame).
    case automatic
    /// Every chunk with this codec (`lz4Delta` falls back to `lz4` on key frames).
    case forced(FrameCodec)
}

/// Plain LZ4 block compression (acceleration 1, like `lz4 -1`), the reference the codec is measured against.
public enum LZ4Block {
    /// The largest compressed size of `count` bytes.
    public static func compressBound(_ count: Int) -> Int { Int(LZ4_compressBound(Int32(count))) }

    /// Compresses `source` into `destination` (at least ``compressBound(_:)`` bytes) with `LZ4_compress_fast`,
    /// acceleration 1, as one block.
    ///
    /// - Returns: the compressed size (0 when it does not fit).
    public static func compress(_ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer)
        -> Int
    {
        Int(
            LZ4_compress_fast(
                source.baseAddress!.assumingMemoryBound(to: CChar.self),
                destination.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(source.count),
                Int32(destination.count), 1))
    }
}

/// How a frame of a given layout is cut into chunks: each plane into pieces of at most `chunkSize` bytes.
///
/// Chunks never cross a plane boundary, so each is a run of rows of one plane; they are compressed independently
/// (in parallel) and verified independently. The plan is a pure function of the layout and the chunk size, both
/// of which are in the segment header, so a reader derives the same plan.
public struct ChunkPlan: Sendable, Hashable {
    /// The default chunk size: 256 KiB (4 × the LZ4 window, so cutting costs almost no compression).
    public static let defaultChunkSize = 256 * 1024

    /// Byte offset of each chunk in the frame.
    public let offsets: [Int]
    /// Byte length of each chunk.
    public let lengths: [Int]
    public let chunkSize: Int

    public init(layout: FrameLayout, chunkSize: Int = ChunkPlan.defaultChunkSize) {
        precondition(chunkSize >= 4096, "chunk size must be at least 4096 bytes")
        var offsets: [Int] = []
        var lengths: [Int] = []
        for p in 0..<layout.planeCount {
            let plane = layout.plane(p)
            let pieces = max(1, (plane.byteCount + chunkSize - 1) / chunkSize)
            // Even pieces, so the last one is not a sliver.
            let base = plane.byteCount / pieces
            var offset = plane.offset
            for i in 0..<pieces {
                let length = i == pieces - 1 ? plane.offset + plane.byteCount - offset : base
                offsets.append(offset)
                lengths.append(length)
                offset += length
            }
        }
        self.offsets = offsets
        self.lengths = lengths
        self.chunkSize = chunkSize
    }

    public var count: Int { offsets.count }

    /// Bytes of a payload's chunk table: a 4-byte count and 12 bytes per chunk.
    public var tableLength: Int { 4 + 12 * count }
}

/// Why stored bytes could not be turned back into a frame.
public enum FrameDecodeError: Error, Sendable, Hashable, CustomStringConvertible {
    case payloadTooShort(needed: Int, actual: Int)
    case chunkCountMismatch(expected: Int, actual: Int)
    case tableChecksumMismatch
    case chunkChecksumMismatch(chunk: Int)
    case chunkLengthInvalid(chunk: Int)
    case unknownChunkCodec(chunk: Int, codec: UInt8)
    case lz4Failed(chunk: Int)
    case deltaWithoutPredecessor

    public var description: String {
        switch self {
        case .payloadTooShort(let needed, let actual): "stored bytes too short (\(actual) of \(needed))"
        case .chunkCountMismatch(let expected, let actual): "chunk table has \(actual) chunks, layout needs \(expected)"
        case .tableChecksumMismatch: "stored-bytes checksum mismatch (chunk table)"
        case .chunkChecksumMismatch(let chunk): "stored-bytes checksum mismatch (chunk \(chunk))"
        case .chunkLengthInvalid(let chunk): "chunk \(chunk) has an impossible length"
        case .unknownChunkCodec(let chunk, let codec): "chunk \(chunk) has unknown codec \(codec)"
        case .lz4Failed(let chunk): "chunk \(chunk) does not decompress"
        case .deltaWithoutPredecessor: "delta frame without its previous frame"
        }
    }
}

/// Byte-wise wrapping difference `out[i] = current[i] &- previous[i]`, 32 bytes at a time.
@inline(__always)
func subtractBytes(
    _ current: UnsafeRawPointer, _ previous: UnsafeRawPointer, into out: UnsafeMutableRawPointer, count: Int
) {
    var i = 0
    while i + 32 <= count {
        let a = current.loadUnaligned(fromByteOffset: i, as: SIMD32<UInt8>.self)
        let b = previous.loadUnaligned(fromByteOffset: i, as: SIMD32<UInt8>.self)
        out.storeBytes(of: a &- b, toByteOffset: i, as: SIMD32<UInt8>.self)
        i += 32
    }
    while i < count {
        out.storeBytes(
            of: current.load(fromByteOffset: i, as: UInt8.self) &- previous.load(fromByteOffset: i, as: UInt8.self),
            toByteOffset: i, as: UInt8.self)
        i += 1
    }
}

/// Byte-wise wrapping sum: `target[i] = base[i] &+ delta[i]`, 32 bytes at a time. `base` may be `target` (in
/// place): each byte is read before it is written.
@inline(__always)
func addBytes(
    _ delta: UnsafeRawPointer, _ base: UnsafeRawPointer, into target: UnsafeMutableRawPointer, count: Int
) {
    var i = 0
    while i + 32 <= count {
        let a = base.loadUnaligned(fromByteOffset: i, as: SIMD32<UInt8>.self)
        let b = delta.loadUnaligned(fromByteOffset: i, as: SIMD32<UInt8>.self)
        target.storeBytes(of: a &+ b, toByteOffset: i, as: SIMD32<UInt8>.self)
        i += 32
    }
    while i < count {
        target.storeBytes(
            of: base.load(fromByteOffset: i, as: UInt8.self) &+ delta.load(fromByteOffset: i, as: UInt8.self),
            toByteOffset: i, as: UInt8.self)
        i += 1
    }
}

/// A heap buffer with one owner, freed in `deinit`.
final class ByteBuffer {
    let base: UnsafeMutableRawPointer
    let count: Int

    init(count: Int) {
        self.count = count
        base = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 64)
    }

    deinit { base.deallocate() }

    var bytes: UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(start: base, count: count) }
}

/// One worker's scratch: LZ4 state, and buffers for a delta and for a second compression attempt.
private final class EncoderContext {
    let lz4State: ByteBuffer
    let lz4Stream: UnsafeMutablePointer<LZ4_stream_t>
    let delta: ByteBuffer
    let scratch: ByteBuffer

    init(maxChunk: Int) {
        lz4State = ByteBuffer(count: Int(LZ4_sizeofState()))
        lz4Stream = LZ4_createStream()
        delta = ByteBuffer(count: maxChunk)
        scratch = ByteBuffer(count: Int(LZ4_compressBound(Int32(maxChunk))))
    }

    deinit { LZ4_freeStream(lz4Stream) }

    /// LZ4 of `count` bytes at `source` into `destination`; 0 when it does not fit in `capacity`.
    ///
    /// With `dictionary > 0`, the `dictionary` bytes just before `source` seed the LZ4 window (a prefix
    /// dictionary), so cutting a plane into chunks costs almost nothing; the decoder has those bytes already.
    @inline(__always)
    func compress(
        _ source: UnsafeRawPointer, count: Int, dictionary: Int = 0, into destination: UnsafeMutableRawPointer,
        capacity: Int
    ) -> Int {
        guard capacity > 0 else { return 0 }
        let src = source.assumingMemoryBound(to: CChar.self)
        let dst = destination.assumingMemoryBound(to: CChar.self)
        if dictionary == 0 {
            return Int(LZ4_compress_fast_extState(lz4State.base, src, dst, Int32(count), Int32(capacity), 1))
        }
        LZ4_loadDict(lz4Stream, src - dictionary, Int32(dictionary))
        return Int(LZ4_compress_fast_continue(lz4Stream, src, dst, Int32(count), Int32(capacity), 1))
    }
}

/// Bytes of the prefix dictionary of a plain LZ4 chunk at `offset`: up to 64 KiB of the frame before it.
@inline(__always)
func prefixDictionaryLength(offset: Int) -> Int { min(offset, 64 * 1024) }

/// The result of encoding one frame: the record payload sits in ``FrameEncoder/record`` after the header space.
public struct EncodedFrame: Sendable, Hashable {
    public var codec: FrameCodec
    /// Whether the frame decodes on its own (no chunk is a delta).
    public var isKey: Bool
    /// Bytes of the payload (chunk table + chunks).
    public var storedLength: Int
    /// CRC-32C of the chunk table, which holds the CRC-32C of every chunk.
    public var storedCRC: UInt32
}

/// Encodes the frames of one stream, in order, into record payloads, using a pool of worker threads.
///
/// Payload layout (little-endian):
///
///     +0            u32 chunk count n
///     +4            n × { u8 codec (0 raw, 1 lz4, 2 lz4 delta), u8[3] zero, u32 stored length, u32 CRC-32C }
///     +4 + 12n      chunk 0 stored bytes, chunk 1 stored bytes, …
///
/// A chunk's stored bytes are its raw bytes, an LZ4 block of them, or an LZ4 block of their wrapping difference
/// from the same bytes of the previous frame. An LZ4 (codec 1) chunk is compressed with the up to 64 KiB of the
/// frame just before it as a prefix dictionary (`LZ4_loadDict`), so chunks are decoded in order; delta chunks
/// have no dictionary. Each chunk's CRC covers its stored bytes; the record's stored CRC
/// covers the table.
///
/// Not thread-safe: one owner (the stream's writer) calls `encode`; the pool parallelises inside the call.
/// Every buffer is allocated once, in `init`.
public final class FrameEncoder {
    public let layout: FrameLayout
    public let plan: ChunkPlan
    public var policy: CodecPolicy
    /// Bytes reserved at the start of ``record`` for the caller's record header.
    public let headerSpace: Int

    private let pool: WorkerPool
    private let contexts: [EncoderContext]
    private let previous: ByteBuffer
    private let slots: ByteBuffer
    private let slotOffsets: [Int]
    private let staging: ByteBuffer
    // Per chunk, written by the worker that encodes it.
    private let chunkCodec: UnsafeMutablePointer<UInt8>
    private let chunkLength: UnsafeMutablePointer<Int>
    private let chunkCRC: UnsafeMutablePointer<UInt32>
    /// Per chunk: true when the last decision favoured the delta.
    private let preferDelta: UnsafeMutablePointer<Bool>
    private var hasPrevious = false
    private var frameNumber = 0
    private var recordLength = 0

    /// - Parameters:
    ///   - layout: the layout of every frame.
    ///   - workerCount: threads compressing (including the caller).
    ///   - chunkSize: the largest chunk, see ``ChunkPlan``.
    ///   - headerSpace: bytes to leave free before the payload in ``record``.
    public init(
        layout: FrameLayout, workerCount: Int, chunkSize: Int = ChunkPlan.defaultChunkSize,
        headerSpace: Int = 0, policy: CodecPolicy = .automatic
    ) {
        self.layout = layout
        self.plan = ChunkPlan(layout: layout, chunkSize: chunkSize)
        self.policy = policy
        self.headerSpace = headerSpace
        let maxChunk = plan.lengths.max() ?? 1
        let workers = max(1, min(workerCount, plan.count))
        pool = WorkerPool(workerCount: workers)
        contexts = (0..<workers).map { _ in EncoderContext(maxChunk: maxChunk) }
        previous = ByteBuffer(count: layout.byteCount)
        var offsets: [Int] = []
        var total = 0
        for length in plan.lengths {
            offsets.append(total)
            total += Int(LZ4_compressBound(Int32(length)))
        }
        slotOffsets = offsets
        slots = ByteBuffer(count: total)
        staging = ByteBuffer(count: headerSpace + plan.tableLength + max(total, layout.byteCount))
        chunkCodec = .allocate(capacity: plan.count)
        chunkLength = .allocate(capacity: plan.count)
        chunkCRC = .allocate(capacity: plan.count)
        preferDelta = .allocate(capacity: plan.count)
        preferDelta.initialize(repeating: true, count: plan.count)
    }

    deinit {
        pool.shutdown()
        chunkCodec.deallocate()
        chunkLength.deallocate()
        chunkCRC.deallocate()
        preferDelta.deallocate()
    }

    /// The worker threads in use.
    public var workerCount: Int { pool.workerCount }

    /// Header space followed by the payload of the last encoded frame; valid until the next `encode`.
    public var record: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(start: staging.base, count: recordLength)
    }

    /// Forgets the previous frame: the next frame is a key frame (a new segment starts).
    public func reset() {
        hasPrevious = false
    }

    /// Encodes one frame.
    ///
    /// - Parameters:
    ///   - bytes: the frame, `layout.byteCount` bytes.
    ///   - key: whether the frame must decode on its own (segment start, key interval).
    /// - Returns: the codec, key flag, payload length and payload CRC; the payload is in ``record``.
    /// - Complexity: O(frame bytes), spread over the workers.
    public func encode(_ bytes: UnsafeRawBufferPointer, key: Bool) -> EncodedFrame {
        precondition(bytes.count == layout.byteCount, "frame has \(bytes.count) bytes, layout \(layout.byteCount)")
        let mayDelta = hasPrevious && !key
        let probe = frameNumber % 8 == 0
        let source = bytes.baseAddress!
        pool.run(items: plan.count) { chunk, worker in
            encodeChunk(chunk, source: source, context: contexts[worker], mayDelta: mayDelta, probe: probe)
        }
        hasPrevious = true
        frameNumber &+= 1
        return assemble(source: source)
    }

    private func encodeChunk(
        _ chunk: Int, source: UnsafeRawPointer, context: EncoderContext, mayDelta: Bool, probe: Bool
    ) {
        let offset = plan.offsets[chunk]
        let length = plan.lengths[chunk]
        let src = source + offset
        let slot = slots.base + slotOffsets[chunk]
        let bound = Int(LZ4_compressBound(Int32(length)))
        let dictionary = prefixDictionaryLength(offset: offset)
        var codec = FrameCodec.raw
        var stored = length

        switch policy {
        case .forced(.raw):
            break
        case .forced(.lz4):
            stored = context.compress(src, count: length, dictionary: dictionary, into: slot, capacity: bound)
            codec = .lz4
        case .forced(.lz4Delta) where !mayDelta:
            stored = context.compress(src, count: length, dictionary: dictionary, into: slot, capacity: bound)
            codec = .lz4
        case .forced(.lz4Delta):
            subtractBytes(src, previous.base + offset, into: context.delta.base, count: length)
            stored = context.compress(context.delta.base, count: length, into: slot, capacity: bound)
            codec = .lz4Delta
        case .forced(_), .automatic:
            if !mayDelta {
                let n = context.compress(src, count: length, dictionary: dictionary, into: slot, capacity: length - 1)
                if n > 0 { (codec, stored) = (.lz4, n) }
            } else if preferDelta[chunk] {
                subtractBytes(src, previous.base + offset, into: context.delta.base, count: length)
                let d = context.compress(context.delta.base, count: length, into: slot, capacity: length - 1)
                if d > 0 { (codec, stored) = (.lz4Delta, d) }
                if d == 0 || d > length / 2 || probe {
                    let limit = (d > 0 ? d : length) - 1
                    let p = context.compress(
                        src, count: length, dictionary: dictionary, into: context.scratch.base, capacity: limit)
                    if p > 0 {
                        slot.copyMemory(from: context.scratch.base, byteCount: p)
                        (codec, stored) = (.lz4, p)
                    }
                }
                preferDelta[chunk] = codec == .lz4Delta
            } else {
                let p = context.compress(src, count: length, dictionary: dictionary, into: slot, capacity: length - 1)
                if p > 0 { (codec, stored) = (.lz4, p) }
                if probe {
                    subtractBytes(src, previous.base + offset, into: context.delta.base, count: length)
                    let limit = (p > 0 ? p : length) - 1
                    let d = context.compress(
                        context.delta.base, count: length, into: context.scratch.base, capacity: limit)
                    if d > 0 {
                        slot.copyMemory(from: context.scratch.base, byteCount: d)
                        (codec, stored) = (.lz4Delta, d)
                    }
                }
                preferDelta[chunk] = codec == .lz4Delta
            }
        }
        let storedBytes = UnsafeRawBufferPointer(start: codec == .raw ? src : UnsafeRawPointer(slot), count: stored)
        chunkCodec[chunk] = codec.rawValue
        chunkLength[chunk] = stored
        chunkCRC[chunk] = CRC32C.checksum(storedBytes)
        (previous.base + offset).copyMemory(from: src, byteCount: length)
    }

    private func assemble(source: UnsafeRawPointer) -> EncodedFrame {
        let table = staging.base + headerSpace
        table.storeBytes(of: UInt32(plan.count).littleEndian, as: UInt32.self)
        var cursor = plan.tableLength
        var anyDelta = false
        var anyLZ4 = false
        for chunk in 0..<plan.count {
            let entry = table + 4 + 12 * chunk
            let codec = chunkCodec[chunk]
            let length = chunkLength[chunk]
            entry.storeBytes(of: UInt32(codec).littleEndian, as: UInt32.self)
            entry.storeBytes(of: UInt32(length).littleEndian, toByteOffset: 4, as: UInt32.self)
            entry.storeBytes(of: chunkCRC[chunk].littleEndian, toByteOffset: 8, as: UInt32.self)
            let from =
                codec == FrameCodec.raw.rawValue
                ? source + plan.offsets[chunk] : UnsafeRawPointer(slots.base + slotOffsets[chunk])
            (table + cursor).copyMemory(from: from, byteCount: length)
            cursor += length
            anyDelta = anyDelta || codec == FrameCodec.lz4Delta.rawValue
            anyLZ4 = anyLZ4 || codec == FrameCodec.lz4.rawValue
        }
        recordLength = headerSpace + cursor
        let crc = CRC32C.checksum(UnsafeRawBufferPointer(start: table, count: plan.tableLength))
        let codec: FrameCodec = anyDelta ? .lz4Delta : anyLZ4 ? .lz4 : .raw
        return EncodedFrame(codec: codec, isKey: !anyDelta, storedLength: cursor, storedCRC: crc)
    }
}

/// The buffers a ``FrameDecoder`` decodes into, in turn.
///
/// With `count` buffers, a decoded frame stays intact while the next `count − 1` frames are decoded, so a consumer
/// on another thread can hold up to `count − 1` frames without copying them. Owned by whoever must keep the frames
/// alive: the buffers outlive any decoder that uses them.
///
///     decode k → buffer[k % count]; a delta frame reads the frame before it from buffer[(k − 1) % count]
public final class DecodeBuffers: @unchecked Sendable {
    public let byteCount: Int
    private let buffers: [ByteBuffer]
    /// The buffer holding the last decoded frame.
    private var current = 0

    /// - Parameters:
    ///   - byteCount: bytes of one frame.
    ///   - count: buffers, at least 1.
    public init(byteCount: Int, count: Int = 1) {
        precondition(count >= 1, "at least one decode buffer")
        self.byteCount = byteCount
        buffers = (0..<count).map { _ in ByteBuffer(count: byteCount) }
    }

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
public final class FrameDecoder {
    public let layout: FrameLayout
    public let plan: ChunkPlan
    public let buffers: DecodeBuffers
    private let scratch: ByteBuffer

    /// - Parameters:
    ///   - buffers: where frames are decoded; a single buffer of its own when nil.
    public init(layout: FrameLayout, chunkSize: Int = ChunkPlan.defaultChunkSize, buffers: DecodeBuffers? = nil) {
        precondition(buffers == nil || buffers!.byteCount == layout.byteCount, "decode buffers of another size")
        self.layout = layout
        self.plan = ChunkPlan(layout: layout, chunkSize: chunkSize)
        self.buffers = buffers ?? DecodeBuffers(byteCount: layout.byteCount)
        scratch = ByteBuffer(count: plan.lengths.max() ?? 1)
    }

    /// The last decoded frame.
    public var frame: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: buffers.last, count: layout.byteCount) }

    /// Checks a payload's table and every chunk checksum without decoding.
    ///
    /// - Throws: ``FrameDecodeError`` naming the first problem.
    public static func verify(_ payload: UnsafeRawBufferPointer, plan: ChunkPlan, expectedCRC: UInt32)
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
    public func decode(_ payload: UnsafeRawBufferPointer, expectedCRC: UInt32, hasPrevious: Bool)
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
        let plan = self.plan
        let scratch = self.scratch.base
        do {
            try Self.walk(payload, plan: plan, expectedCRC: expectedCRC) {
                chunk, codec, stored throws(FrameDecodeError) in
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
                    let n = LZ4_decompress_safe(
                        stored.baseAddress!.assumingMemoryBound(to: CChar.self),
                        scratch.assumingMemoryBound(to: CChar.self), Int32(stored.count), Int32(length))
                    guard n == length else { throw .lz4Failed(chunk: chunk) }
                    previousProgress?.wait(forChunks: chunk + 1)
                    addBytes(scratch, previous + plan.offsets[chunk], into: target, count: length)
                }
                progress?.publish(chunks: chunk + 1)
            }
        } catch {
            progress?.abandon()
            throw error
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
