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

/// What a chunk remembers from its last comparison: how it was stored best. LZ4 with and without the prefix
/// dictionary are both codec 1 on disk (a block that uses none decodes the same with it); the dictionary costs a
/// sixth more time, so it is used only where it pays.
private enum Choice: UInt8 {
    case raw, lz4, lz4WithDictionary, delta

    /// The ways that compress, in the order a comparison tries them.
    static let compressed: [Choice] = [.delta, .lz4, .lz4WithDictionary]

    var codec: FrameCodec {
        switch self {
        case .raw: .raw
        case .lz4, .lz4WithDictionary: .lz4
        case .delta: .lz4Delta
        }
    }
}

/// A worker pool shared by the encoders of one thread's writers; its threads stop when the last encoder lets go.
private final class SharedWorkers {
    let pool: WorkerPool
    init(_ pool: WorkerPool) { self.pool = pool }
    deinit { pool.shutdown() }
}

/// Where an encoder writes a record's chunks while it is still compressing the rest of the frame (see
/// ``FrameEncoder/encode(_:key:previous:keepsCopy:compressedChunks:writingTo:)``).
package protocol RecordSink: AnyObject {
    /// Writes `pieces`, in order, at `offset` bytes from the start of the record being encoded; may change
    /// `pieces` (a short write is resumed by moving their starts). Called from the encoder's worker threads, one
    /// at a time, chunks in order.
    ///
    /// - Throws: ``FileSystemError``; the encoder then writes nothing more of the record.
    func writeRecordBytes(_ pieces: UnsafeMutableBufferPointer<iovec>, atRecordOffset offset: Int)
        throws(FileSystemError)
}

/// The chunks of the record being encoded that are done but not yet written, and which worker writes them.
///
/// The worker that finishes a chunk marks it done; if no worker is writing, it becomes the writer and writes every
/// done chunk that follows the last written one, in order, releasing the lock while it writes, until none is
/// left. So the file gets the chunks in order, one writer at a time, while the other workers compress.
private final class ChunkStream {
    let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    let done: UnsafeMutablePointer<Bool>
    /// The writer's gathered pieces.
    let pieces: UnsafeMutablePointer<iovec>
    let chunkCount: Int
    // Guarded by `lock`.
    var sink: (any RecordSink)?
    /// The first chunk not yet written, and its offset in the record.
    var next = 0
    var cursor = 0
    var writing = false
    var error: FileSystemError?

    init(chunkCount: Int) {
        self.chunkCount = chunkCount
        pthread_mutex_init(lock, nil)
        done = .allocate(capacity: chunkCount)
        done.initialize(repeating: false, count: chunkCount)
        pieces = .allocate(capacity: chunkCount)
    }

    deinit {
        pthread_mutex_destroy(lock)
        lock.deallocate()
        done.deallocate()
        pieces.deallocate()
    }

    /// Readies the stream for a record whose first chunk goes `payloadOffset` bytes into it (before the workers
    /// start: the pool's own lock orders this before their reads).
    func begin(sink: any RecordSink, payloadOffset: Int) {
        self.sink = sink
        next = 0
        cursor = payloadOffset
        writing = false
        error = nil
        done.update(repeating: false, count: chunkCount)
    }
}

/// The result of encoding one frame: the record is in ``FrameEncoder/pieces`` (header space first).
package struct EncodedFrame: Sendable, Hashable {
    package var codec: FrameCodec
    /// Whether the frame decodes on its own (no chunk is a delta).
    package var isKey: Bool
    /// Bytes of the payload (chunk table + chunks).
    package var storedLength: Int
    /// CRC-32C of the chunk table, which holds the CRC-32C of every chunk.
    package var storedCRC: UInt32
    /// Bytes of the frame stored as raw chunks.
    package var rawChunkBytes: Int
}

/// Anonymous memory mapped once, whose pages can be given back to the system (`MADV_DONTNEED`) and come back as
/// zero pages when touched again.
private final class MappedScratch {
    let base: UnsafeMutableRawPointer
    let count: Int

    init(count: Int) {
        self.count = max(count, 1)
        let address = mmap(nil, self.count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        precondition(address != MAP_FAILED, "could not map \(self.count) bytes for the frame encoder")
        base = address!
    }

    deinit { munmap(base, count) }

    /// Gives back the whole pages from byte `offset` on; their contents are lost.
    func release(from offset: Int) {
        let page = System.pageSize
        let start = (offset + page - 1) / page * page
        guard start < count else { return }
        _ = madvise(base + start, count - start, MADV_DONTNEED)
    }
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
/// from the same bytes of the previous frame. An LZ4 (codec 1) chunk may be compressed with the up to 64 KiB of
/// the frame just before it as a prefix dictionary (`LZ4_loadDict`), so chunks are decoded in order with it (a
/// block that uses none decodes the same); delta chunks have no dictionary. Each chunk's CRC covers its stored
/// bytes; the record's stored CRC covers the table.
///
/// Choosing a codec costs one compression per chunk: each chunk remembers which way won last time (a delta, LZ4
/// with the dictionary, LZ4 without it, or raw) and uses only that. It tries every way and keeps the smallest on
/// its first frame with a previous one, when the remembered way no longer shrinks the chunk, and at comparisons
/// spaced 8 frames apart at first, twice as far after each comparison that confirms the choice (up to 64), half
/// as far after one that changes it (staggered over the chunks). The ways differ in cost as well as size: loading
/// the dictionary adds about a sixth to LZ4's time, so it is used only where it makes the chunk smaller (it does
/// not on some content); a delta adds a subtraction pass, so it must be a 32nd smaller than LZ4 to win. A chunk
/// that does not shrink is stored raw (and not compressed again until its next comparison).
///
/// Memory. Nothing is copied into a record: the record is a list of pieces (``pieces``) written with one
/// `pwritev` — the header and chunk table, then each chunk from the frame itself (raw) or from its slot in the
/// output buffer (compressed). The previous frame, which deltas need, is the caller's (the ring still holds it);
/// only a caller that does not pass it makes the encoder keep a copy. The output buffer has a slot per chunk;
/// ``outputCapacity`` limits how much of it is used (chunks past the limit are stored raw) and gives the rest back
/// to the system, so a recorder can shrink it under memory pressure, and ``releaseMemory()`` gives it all back
/// while idle.
///
/// Not thread-safe: one owner (the stream's writer) calls `encode`; the pool parallelises inside the call.
package final class FrameEncoder {
    package let layout: FrameLayout
    package let plan: ChunkPlan
    package var policy: CodecPolicy
    /// Called before each chunk is compressed (see ``StoreOptions/beforeCompressingChunk``).
    package var beforeCompressingChunk: (@Sendable () -> Void)?
    /// Bytes reserved at the start of the record for the caller's record header.
    package let headerSpace: Int

    private let workers: SharedWorkers
    private var pool: WorkerPool { workers.pool }
    private let contexts: [EncoderContext]
    /// The previous frame, kept only for callers that do not pass it (allocated on first use).
    private var ownPrevious: ByteBuffer?
    private var hasOwnPrevious = false
    /// Header space and chunk table, then one slot per chunk.
    private let output: MappedScratch
    private let slotOffsets: [Int]
    /// The chunks in the order workers take them: longest first (ties in frame order), so that the short ones
    /// (a plane's last) fill the gaps at the end instead of leaving a worker alone with a long one.
    private let schedule: [Int]
    /// Per chunk: the most bytes its slot takes (a compression that would need more stores the chunk raw).
    private let slotLengths: [Int]
    /// Chunks whose slots lie within ``outputCapacity``.
    private var slottedChunks: Int
    private var pieceTable: UnsafeMutablePointer<iovec>
    private var pieceCount = 0
    // Per chunk, written by the worker that encodes it.
    private let chunkCodec: UnsafeMutablePointer<UInt8>
    private let chunkLength: UnsafeMutablePointer<Int>
    private let chunkCRC: UnsafeMutablePointer<UInt32>
    /// Per chunk: the codec that won the last comparison (raw value of ``FrameCodec``; none before the first).
    private let choice: UnsafeMutablePointer<UInt8>
    /// Per chunk: the frame number at which the codecs are compared again, and the gap after the last comparison.
    private let comparisonDue: UnsafeMutablePointer<Int>
    private let comparisonGap: UnsafeMutablePointer<Int>
    /// Frames between a chunk's first comparisons (and at least after a change of codec), and at most after
    /// comparisons that confirmed it.
    static let comparisonGap = 8
    static let longestComparisonGap = 64
    /// How long a worker watches for the next frame before it sleeps (see ``WorkerPool``).
    static let workerSpin: UInt64 = 200_000
    private var frameNumber = 0
    private var recordLength = 0
    /// Chunks written while encoding (``encode(_:key:previous:keepsCopy:compressedChunks:writingTo:)``).
    private let stream: ChunkStream
    private var streaming = false
    /// Bytes of the last record already written by its sink (its chunks); ``pieces`` holds the rest.
    package private(set) var streamedBytes = 0
    /// The fewest bytes of done chunks a worker writes at once (or one chunk's size, when chunks are smaller):
    /// smaller runs wait, so a well-compressed record costs one write, not one per chunk.
    static let streamThreshold = 256 << 10
    /// Bytes of output buffer in use: ``outputBytes`` at most.
    package private(set) var outputCapacity: Int

    /// - Parameters:
    ///   - layout: the layout of every frame.
    ///   - workerCount: threads compressing (including the caller).
    ///   - chunkSize: the largest chunk, see ``ChunkPlan``.
    ///   - headerSpace: bytes to leave free before the payload in the record.
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
        let shared =
            other?.workers
            ?? SharedWorkers(
                WorkerPool(workerCount: max(1, min(workerCount, plan.count)), spinNanoseconds: Self.workerSpin))
        workers = shared
        contexts = (0..<shared.pool.workerCount).map { _ in EncoderContext(maxChunk: maxChunk) }
        let slots = Self.slotLengths(plan: plan, policy: policy)
        var offsets: [Int] = []
        var total = headerSpace + plan.tableLength
        for length in slots {
            offsets.append(total)
            total += length
        }
        slotOffsets = offsets
        slotLengths = slots
        let lengths = plan.lengths
        schedule = lengths.indices.sorted { (lengths[$0], -$0) > (lengths[$1], -$1) }
        output = MappedScratch(count: total)
        outputCapacity = total
        slottedChunks = plan.count
        pieceTable = .allocate(capacity: plan.count + 1)
        stream = ChunkStream(chunkCount: plan.count)
        chunkCodec = .allocate(capacity: plan.count)
        chunkLength = .allocate(capacity: plan.count)
        chunkCRC = .allocate(capacity: plan.count)
        choice = .allocate(capacity: plan.count)
        choice.initialize(repeating: UInt8.max, count: plan.count)
        comparisonGap = .allocate(capacity: plan.count)
        comparisonGap.initialize(repeating: Self.comparisonGap, count: plan.count)
        // Staggered, so that the comparisons of one frame's chunks do not all fall on the same frame.
        comparisonDue = .allocate(capacity: plan.count)
        for chunk in 0..<plan.count { (comparisonDue + chunk).initialize(to: chunk % Self.comparisonGap) }
    }

    deinit {
        pieceTable.deallocate()
        chunkCodec.deallocate()
        chunkLength.deallocate()
        chunkCRC.deallocate()
        choice.deallocate()
        comparisonDue.deallocate()
        comparisonGap.deallocate()
    }

    /// Per chunk, the bytes its slot needs: under ``CodecPolicy/automatic`` a compressed chunk is kept only when
    /// smaller than the chunk, so the chunk's length; a forced codec may need LZ4's bound.
    private static func slotLengths(plan: ChunkPlan, policy: CodecPolicy) -> [Int] {
        plan.lengths.map { length in
            switch policy {
            case .automatic: length
            case .forced(.raw): 0
            case .forced(_): Int(LZ4_compressBound(Int32(length)))
            }
        }
    }

    /// The bytes of the output buffer at full capacity: the most a stream's encoder keeps resident.
    ///
    /// - Parameters:
    ///   - layout: the stream's layout.
    ///   - chunkSize: the store's chunk size.
    ///   - headerSpace: the record header's length.
    /// - Returns: bytes, rounded up to whole pages.
    package static func outputBytes(
        layout: FrameLayout, chunkSize: Int, headerSpace: Int, policy: CodecPolicy = .automatic
    ) -> Int {
        let plan = ChunkPlan(layout: layout, chunkSize: chunkSize)
        let total = headerSpace + plan.tableLength + slotLengths(plan: plan, policy: policy).reduce(0, +)
        let page = System.pageSize
        return (total + page - 1) / page * page
    }

    /// The bytes of the output buffer at full capacity.
    package var outputBytes: Int { output.count }

    /// Limits the output buffer to `bytes` (at least the header and chunk table): chunks whose slots lie beyond are
    /// stored raw, and the memory beyond is given back to the system now.
    package func setOutputCapacity(_ bytes: Int) {
        let limit = min(max(bytes, headerSpace + plan.tableLength), output.count)
        var slotted = 0
        while slotted < plan.count && slotOffsets[slotted] + slotLengths[slotted] <= limit { slotted += 1 }
        let shrinks = limit < outputCapacity
        outputCapacity = limit
        slottedChunks = slotted
        if shrinks { output.release(from: slotted < plan.count ? slotOffsets[slotted] : limit) }
    }

    /// Gives the output buffer's memory (and a kept copy of the previous frame) back to the system until the next
    /// frame; the next frame is then a key frame unless the caller passes the previous one.
    package func releaseMemory() {
        output.release(from: 0)
        if ownPrevious != nil {
            ownPrevious = nil
            hasOwnPrevious = false
        }
    }

    /// The worker threads in use.
    package var workerCount: Int { pool.workerCount }

    /// The last encoded record as `iovec`s for one gathered write: header space, chunk table and payload; the
    /// header space is ``headerSpace`` writable bytes at the start of the first piece. Valid until the next
    /// `encode`, and only while the frame passed to it is.
    package var pieces: UnsafeMutableBufferPointer<iovec> {
        UnsafeMutableBufferPointer(start: pieceTable, count: pieceCount)
    }

    /// The header space at the start of the record, for the caller's record header.
    package var headerBytes: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(start: output.base, count: headerSpace)
    }

    /// The last encoded record (header space, then payload) gathered into one array; for tests and tools.
    package func recordBytes() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(recordLength)
        for piece in pieces {
            bytes.append(contentsOf: UnsafeRawBufferPointer(start: piece.iov_base, count: piece.iov_len))
        }
        return bytes
    }

    /// Forgets the previous frame: the next frame is a key frame (a new segment starts).
    package func reset() {
        hasOwnPrevious = false
    }

    /// Encodes one frame.
    ///
    /// - Parameters:
    ///   - bytes: the frame, `layout.byteCount` bytes; it must stay unchanged until the record is written.
    ///   - key: whether the frame must decode on its own (segment start, key interval).
    ///   - previous: the frame encoded just before this one (its bytes unchanged), when the caller still holds it.
    ///   - keepsCopy: whether to keep a copy of this frame for the next delta, for a caller that will not pass it
    ///     as `previous` (ignored when `previous` is given).
    ///   - compressedChunks: at most this many chunks (the first ones) are compressed, the rest stored raw: a
    ///     writer falling behind trades size for speed.
    /// - Returns: the codec, key flag, payload length and payload CRC; the record is in ``pieces``.
    /// - Complexity: O(frame bytes), spread over the workers.
    package func encode(
        _ bytes: UnsafeRawBufferPointer, key: Bool, previous: UnsafeRawPointer? = nil, keepsCopy: Bool = true,
        compressedChunks: Int = .max
    ) -> EncodedFrame {
        streaming = false
        return run(bytes, key: key, previous: previous, keepsCopy: keepsCopy, compressedChunks: compressedChunks)
    }

    /// Encodes one frame like ``encode(_:key:previous:keepsCopy:compressedChunks:)``, and writes its chunks to
    /// `sink` as they are done, while the other workers still compress: writing overlaps compressing. Runs of done
    /// chunks are written once they reach ``streamThreshold`` bytes; when any was, the record's payload after the
    /// chunk table is written when this returns (``streamedBytes``), and ``pieces`` holds only the header space and
    /// chunk table, which the caller writes last. Otherwise ``pieces`` is the whole record, as without a sink.
    ///
    /// - Throws: ``FileSystemError`` from the first failed write (nothing more of the record is written; the
    ///   caller cuts off what was).
    package func encode(
        _ bytes: UnsafeRawBufferPointer, key: Bool, previous: UnsafeRawPointer?, keepsCopy: Bool,
        compressedChunks: Int = .max, writingTo sink: any RecordSink
    ) throws(FileSystemError) -> EncodedFrame {
        streaming = true
        stream.begin(sink: sink, payloadOffset: headerSpace + plan.tableLength)
        defer { stream.sink = nil }
        let encoded = run(
            bytes, key: key, previous: previous, keepsCopy: keepsCopy, compressedChunks: compressedChunks)
        if let error = stream.error { throw error }
        return encoded
    }

    private func run(
        _ bytes: UnsafeRawBufferPointer, key: Bool, previous: UnsafeRawPointer?, keepsCopy: Bool,
        compressedChunks: Int
    ) -> EncodedFrame {
        precondition(bytes.count == layout.byteCount, "frame has \(bytes.count) bytes, layout \(layout.byteCount)")
        let kept: UnsafeRawPointer? = hasOwnPrevious ? ownPrevious.map { UnsafeRawPointer($0.base) } : nil
        let reference = key ? nil : previous ?? kept
        let source = bytes.baseAddress!
        let compressible = min(slottedChunks, max(0, compressedChunks))
        let frame = frameNumber
        // Without the caller's previous frame, each chunk is copied for the next delta once it is encoded.
        var copy: UnsafeMutableRawPointer?
        if previous == nil && keepsCopy {
            if ownPrevious == nil { ownPrevious = ByteBuffer(count: layout.byteCount) }
            copy = ownPrevious!.base
        }
        let streaming = self.streaming
        pool.run(items: plan.count) { item, worker in
            let chunk = schedule[item]
            encodeChunk(
                chunk, source: source, previous: reference, context: contexts[worker], compress: chunk < compressible,
                frame: frame)
            if let copy {
                (copy + plan.offsets[chunk]).copyMemory(
                    from: source + plan.offsets[chunk], byteCount: plan.lengths[chunk])
            }
            if streaming { chunkDone(chunk, source: source) }
        }
        hasOwnPrevious = copy != nil
        frameNumber &+= 1
        // Once some chunks are written, the rest follow now; a record none of whose runs was long enough is
        // written whole by the caller, in one write.
        if streaming && stream.next > 0 {
            writeDoneChunks(source: source, all: true)
            precondition(stream.next == plan.count || stream.error != nil, "chunks left unwritten")
        }
        return assemble(source: source)
    }

    /// Marks a chunk done and, unless another worker is writing, writes the done chunks that are next in order
    /// once they add up to ``streamThreshold`` bytes (a small record is written in one piece at the end).
    private func chunkDone(_ chunk: Int, source: UnsafeRawPointer) {
        pthread_mutex_lock(stream.lock)
        stream.done[chunk] = true
        pthread_mutex_unlock(stream.lock)
        writeDoneChunks(source: source, all: false)
    }

    /// Writes done chunks that are next in order, unless another worker is writing: runs of at least
    /// ``streamThreshold`` bytes, or, with `all`, every one (the caller's last step, once the workers are done).
    private func writeDoneChunks(source: UnsafeRawPointer, all: Bool) {
        let stream = self.stream
        pthread_mutex_lock(stream.lock)
        defer { pthread_mutex_unlock(stream.lock) }
        guard !stream.writing else { return }
        stream.writing = true
        defer { stream.writing = false }
        while stream.error == nil, stream.next < plan.count, stream.done[stream.next], let sink = stream.sink {
            let first = stream.next
            var end = first
            var total = 0
            while end < plan.count && stream.done[end] {
                total += chunkLength[end]
                end += 1
            }
            guard all || total >= min(Self.streamThreshold, plan.chunkSize) else { return }
            let offset = stream.cursor
            pthread_mutex_unlock(stream.lock)
            var count = 0
            for index in first..<end { addPiece(index, source: source, to: stream.pieces, count: &count, after: 0) }
            var failure: FileSystemError?
            do {
                try sink.writeRecordBytes(
                    UnsafeMutableBufferPointer(start: stream.pieces, count: count), atRecordOffset: offset)
            } catch {
                failure = error
            }
            pthread_mutex_lock(stream.lock)
            stream.next = end
            stream.cursor += total
            if let failure { stream.error = failure }
        }
    }

    private func encodeChunk(
        _ chunk: Int, source: UnsafeRawPointer, previous: UnsafeRawPointer?, context: EncoderContext,
        compress: Bool, frame: Int
    ) {
        let offset = plan.offsets[chunk]
        let length = plan.lengths[chunk]
        let src = source + offset
        let slot = output.base + slotOffsets[chunk]
        let bound = slotLengths[chunk]
        let dictionary = prefixDictionaryLength(offset: offset)
        var codec = FrameCodec.raw
        var stored = length

        func delta(into destination: UnsafeMutableRawPointer, capacity: Int) -> Int {
            subtractBytes(src, previous! + offset, into: context.delta.base, count: length)
            return context.compress(context.delta.base, count: length, into: destination, capacity: capacity)
        }
        func plain(into destination: UnsafeMutableRawPointer, capacity: Int, withDictionary: Bool = true) -> Int {
            context.compress(
                src, count: length, dictionary: withDictionary ? dictionary : 0, into: destination, capacity: capacity)
        }

        if compress, policy != .forced(.raw), let beforeCompressingChunk { beforeCompressingChunk() }
        switch policy {
        case .forced(.raw):
            break
        case _ where !compress:
            break
        case .forced(.lz4),
            .forced(.lz4Delta) where previous == nil:
            stored = plain(into: slot, capacity: bound)
            codec = .lz4
        case .forced(.lz4Delta):
            stored = delta(into: slot, capacity: bound)
            codec = .lz4Delta
        case .forced(_), .automatic:
            // Until a chunk has been compared with a previous frame at hand, every way is tried.
            let known = Choice(rawValue: choice[chunk])
            let comparing = previous != nil && (known == nil || frame >= comparisonDue[chunk])
            // A delta needs the previous frame, the dictionary a chunk after the plane's first.
            func possible(_ way: Choice) -> Bool {
                switch way {
                case .delta: previous != nil
                case .lz4WithDictionary: dictionary > 0
                case .raw, .lz4: true
                }
            }
            // The remembered way first, the others only when comparing. Where it is not possible (a key frame of a
            // chunk that deltas win), LZ4 without the dictionary stands in, like a challenger.
            var first = known ?? .delta
            if first == .raw && comparing { first = .delta }
            if !possible(first) { first = .lz4 }
            var won = Choice.raw
            func attempt(_ way: Choice, into destination: UnsafeMutableRawPointer, capacity: Int) -> Int {
                switch way {
                case .raw: 0
                case .lz4: plain(into: destination, capacity: capacity, withDictionary: false)
                case .lz4WithDictionary: plain(into: destination, capacity: capacity)
                case .delta: delta(into: destination, capacity: capacity)
                }
            }
            if first != .raw {
                let n = attempt(first, into: slot, capacity: length - 1)
                if n > 0 { (won, stored) = (first, n) }
            }
            // The remembered way failed to shrink the chunk (the content changed): the others get a try.
            if first != .raw && (comparing || won == .raw) {
                for other in Choice.compressed where other != first && possible(other) {
                    // A delta costs a subtraction pass more than LZ4: it must save a 32nd of the size to win.
                    let margin = other == .delta ? stored / 32 : won == .delta ? -(stored / 32) : 0
                    let capacity = min(stored - 1 - margin, length - 1)
                    guard capacity > 0 else { continue }
                    let n = attempt(other, into: context.scratch.base, capacity: capacity)
                    if n > 0 {
                        slot.copyMemory(from: context.scratch.base, byteCount: n)
                        (won, stored) = (other, n)
                    }
                }
            }
            codec = won.codec
            // A key frame says nothing about deltas: only frames that could use one change the choice. A comparison
            // that confirms the choice waits twice as long for the next one (up to 64 frames); a change, half as
            // long (at least 8 frames).
            if previous != nil {
                if comparing {
                    let confirmed = known == won
                    comparisonGap[chunk] =
                        confirmed
                        ? min(comparisonGap[chunk] * 2, Self.longestComparisonGap)
                        : max(comparisonGap[chunk] / 2, Self.comparisonGap)
                    comparisonDue[chunk] = frame + comparisonGap[chunk]
                }
                choice[chunk] = won.rawValue
            }
        }
        let storedBytes = UnsafeRawBufferPointer(start: codec == .raw ? src : UnsafeRawPointer(slot), count: stored)
        chunkCodec[chunk] = codec.rawValue
        chunkLength[chunk] = stored
        chunkCRC[chunk] = CRC32C.checksum(storedBytes)
    }

    /// Adds a chunk's stored bytes — from the frame when it is raw, else from its slot — as the next of `count`
    /// pieces at `pieces`. A raw chunk right after a raw one is one run of the frame: it extends that piece, unless
    /// the piece is one of the first `fixed` (the header's).
    private func addPiece(
        _ chunk: Int, source: UnsafeRawPointer, to pieces: UnsafeMutablePointer<iovec>, count: inout Int,
        after fixed: Int
    ) {
        let raw = chunkCodec[chunk] == FrameCodec.raw.rawValue
        let length = chunkLength[chunk]
        guard length > 0 else { return }
        let from = raw ? source + plan.offsets[chunk] : UnsafeRawPointer(output.base + slotOffsets[chunk])
        if count > fixed, raw, chunkCodec[chunk - 1] == FrameCodec.raw.rawValue,
            let base = pieces[count - 1].iov_base, UnsafeRawPointer(base) + pieces[count - 1].iov_len == from
        {
            pieces[count - 1].iov_len += length
        } else {
            pieces[count] = iovec(iov_base: UnsafeMutableRawPointer(mutating: from), iov_len: length)
            count += 1
        }
    }

    private func assemble(source: UnsafeRawPointer) -> EncodedFrame {
        let table = output.base + headerSpace
        table.storeBytes(of: UInt32(plan.count).littleEndian, as: UInt32.self)
        pieceTable[0] = iovec(iov_base: output.base, iov_len: headerSpace + plan.tableLength)
        pieceCount = 1
        var cursor = plan.tableLength
        var anyDelta = false
        var anyLZ4 = false
        var rawBytes = 0
        for chunk in 0..<plan.count {
            let entry = table + 4 + 12 * chunk
            let codec = chunkCodec[chunk]
            let length = chunkLength[chunk]
            entry.storeBytes(of: UInt32(codec).littleEndian, as: UInt32.self)
            entry.storeBytes(of: UInt32(length).littleEndian, toByteOffset: 4, as: UInt32.self)
            entry.storeBytes(of: chunkCRC[chunk].littleEndian, toByteOffset: 8, as: UInt32.self)
            if codec == FrameCodec.raw.rawValue { rawBytes += length }
            addPiece(chunk, source: source, to: pieceTable, count: &pieceCount, after: 1)
            cursor += length
            anyDelta = anyDelta || codec == FrameCodec.lz4Delta.rawValue
            anyLZ4 = anyLZ4 || codec == FrameCodec.lz4.rawValue
        }
        recordLength = headerSpace + cursor
        streamedBytes = 0
        if streaming && stream.next > 0 {
            streamedBytes = cursor - plan.tableLength
            pieceCount = 1
        }
        let crc = CRC32C.checksum(UnsafeRawBufferPointer(start: table, count: plan.tableLength))
        let codec: FrameCodec = anyDelta ? .lz4Delta : anyLZ4 ? .lz4 : .raw
        return EncodedFrame(
            codec: codec, isKey: !anyDelta, storedLength: cursor, storedCRC: crc, rawChunkBytes: rawBytes)
    }
}
