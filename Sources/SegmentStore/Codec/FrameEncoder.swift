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

/// A worker pool shared by the encoders of one thread's writers; its threads stop when the last encoder lets go.
private final class SharedWorkers {
    let pool: WorkerPool
    init(_ pool: WorkerPool) { self.pool = pool }
    deinit { pool.shutdown() }
}

/// The result of encoding one frame: the record payload sits in ``FrameEncoder/record`` after the header space.
package struct EncodedFrame: Sendable, Hashable {
    package var codec: FrameCodec
    /// Whether the frame decodes on its own (no chunk is a delta).
    package var isKey: Bool
    /// Bytes of the payload (chunk table + chunks).
    package var storedLength: Int
    /// CRC-32C of the chunk table, which holds the CRC-32C of every chunk.
    package var storedCRC: UInt32
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
package final class FrameEncoder {
    package let layout: FrameLayout
    package let plan: ChunkPlan
    package var policy: CodecPolicy
    /// Bytes reserved at the start of ``record`` for the caller's record header.
    package let headerSpace: Int

    private let workers: SharedWorkers
    private var pool: WorkerPool { workers.pool }
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
    ///   - other: an encoder whose worker threads this one uses too (one thread then calls both); nil for threads
    ///     of its own. The threads stop when the last encoder using them goes.
    package init(
        layout: FrameLayout, workerCount: Int, chunkSize: Int = ChunkPlan.defaultChunkSize,
        headerSpace: Int = 0, policy: CodecPolicy = .automatic, sharingWorkersWith other: FrameEncoder? = nil
    ) {
        self.layout = layout
        self.plan = ChunkPlan(layout: layout, chunkSize: chunkSize)
        self.policy = policy
        self.headerSpace = headerSpace
        let maxChunk = plan.lengths.max() ?? 1
        let shared = other?.workers ?? SharedWorkers(WorkerPool(workerCount: max(1, min(workerCount, plan.count))))
        workers = shared
        contexts = (0..<shared.pool.workerCount).map { _ in EncoderContext(maxChunk: maxChunk) }
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
        chunkCodec.deallocate()
        chunkLength.deallocate()
        chunkCRC.deallocate()
        preferDelta.deallocate()
    }

    /// The worker threads in use.
    package var workerCount: Int { pool.workerCount }

    /// Header space followed by the payload of the last encoded frame; valid until the next `encode`.
    package var record: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(start: staging.base, count: recordLength)
    }

    /// Forgets the previous frame: the next frame is a key frame (a new segment starts).
    package func reset() {
        hasPrevious = false
    }

    /// Encodes one frame.
    ///
    /// - Parameters:
    ///   - bytes: the frame, `layout.byteCount` bytes.
    ///   - key: whether the frame must decode on its own (segment start, key interval).
    /// - Returns: the codec, key flag, payload length and payload CRC; the payload is in ``record``.
    /// - Complexity: O(frame bytes), spread over the workers.
    package func encode(_ bytes: UnsafeRawBufferPointer, key: Bool) -> EncodedFrame {
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
