import RewindCore
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The frames an in-place read delivers, told before any is decoded (see
/// ``SegmentStore/decodeInPlace(streamName:in:planarChroma:frames:piece:done:)``).
public struct InPlaceFrames: Sendable {
    /// The layout the pieces are in: the stream's, with NV12 as I420 when chroma is kept planar.
    public let layout: FrameLayout
    /// Each delivered frame's info, in pts order.
    public let infos: [FrameInfo]
}

extension SegmentStore {
    /// Whether frames of `format` can be decoded in place
    /// (``decodeInPlace(streamName:in:planarChroma:frames:piece:done:)``): `nv12`, `i420` and `gray8`.
    public static func decodesInPlace(_ format: PixelFormat) -> Bool { [.nv12, .i420, .gray8].contains(format) }

    /// Decodes the frames of `streamName` in `range`, in pts order, into one frame buffer, each frame in place over
    /// the frame before, on a thread of its own, while this thread hands each decoded chunk of a frame in the range
    /// to `piece` right behind it, to be copied out before `piece` returns.
    ///
    /// Decoding in place costs nothing for an unchanged chunk (it is already there), where decoding into rotating
    /// buffers copies it from the frame before; and the frame stays in the CPU's cache for the copy out. The two
    /// threads work a chunk apart: chunk c of frame k is decoded once chunk c of frame k − 1 is handed out, and
    /// handed out once it is decoded; runs of decoded chunks go out as one piece. Rather than wait for a chunk, this
    /// thread decodes the next one nobody took (its own decoder), so footage that is slow to decode gets both
    /// cores. A frame whose chunks depend on the ones before (LZ4 with a dictionary: key frames) is decoded in order
    /// by the reader; a frame in a segment of another chunk size waits until the frame before is all out. A thread
    /// that must wait watches for a moment, then sleeps (waking a thread is slow on a virtual machine). NV12 chroma
    /// can be kept planar (as I420): each chroma chunk is de-interleaved as it is decoded, and handed out as its Cb
    /// and Cr pieces.
    ///
    ///     reader thread: frame k, next chunk c nobody took ─ after chunk c of k − 1 is out ─▶ decoded in place
    ///     this thread:   frame k chunk c ─ decoded (or take and decode another) ─▶ piece(k, offset, bytes)
    ///
    /// Every record is verified before any of its chunks is decoded: a damaged frame hands out no piece.
    ///
    /// - Parameters:
    ///   - streamName: the stream; `nv12`, `i420` and `gray8` only.
    ///   - range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    ///   - planarChroma: deliver NV12 as I420 (each chroma chunk de-interleaved as it is decoded).
    ///   - frames: told the delivered frames before any piece.
    ///   - piece: frame number (0 = the first in the range), byte offset in the frame (in the delivered layout) and
    ///     bytes, in the order of the frames and their chunks.
    ///   - done: after each frame: how many frames, from the first, are out.
    /// - Throws: damage, I/O and index errors, and what `frames`, `piece` and `done` throw (the first one).
    public func decodeInPlace(
        streamName: String, in range: Range<Int64>, planarChroma: Bool, frames: (InPlaceFrames) throws -> Void,
        piece: (Int, Int, UnsafeRawBufferPointer) throws -> Void, done: (Int) throws -> Void
    ) throws {
        try SegmentStoreError.translatingIndexErrors {
            guard let stream = try index.streams().first(where: { $0.name == streamName }) else {
                throw SegmentStoreError.unknownStream(streamName)
            }
            let layout = stream.description.layout
            precondition(Self.decodesInPlace(layout.format), "\(layout.format) is not decoded in place")
            let delivered =
                planarChroma && layout.format == .nv12
                ? try FrameLayout(format: .i420, width: layout.width, height: layout.height) : layout
            guard !range.isEmpty else { return try frames(InPlaceFrames(layout: delivered, infos: [])) }
            var attempts = 0
            while true {
                let start = try index.keyFrame(streamID: stream.id, atOrBefore: range.lowerBound)?.ptsNanoseconds
                var rows: [FrameRow] = []
                try index.frames(streamID: stream.id, in: (start ?? range.lowerBound)..<range.upperBound) { row in
                    rows.append(row)
                    return true
                }
                let first = rows.firstIndex { $0.ptsNanoseconds >= range.lowerBound } ?? rows.count
                let infos = try rows[first...].map { row in
                    try FrameInfo(
                        pts: FrameTime(nanoseconds: row.ptsNanoseconds), wallNanoseconds: row.wallNanoseconds,
                        color: stream.description.color)
                }
                guard !infos.isEmpty else { return try frames(InPlaceFrames(layout: delivered, infos: infos)) }
                let run = InPlaceRun(
                    store: self, stream: stream, rows: rows, firstDelivered: first,
                    planarChroma: planarChroma && layout.format == .nv12)
                defer { run.close() }
                // The first segment opened (and locked: retention stops there) before the frames are told: one
                // retention deleted since its rows were read only means the range now starts later.
                do {
                    try run.openFirstSegment()
                } catch SegmentStoreError.deletedWhileRead where attempts < 16 {
                    attempts += 1
                    continue
                }
                try frames(InPlaceFrames(layout: delivered, infos: infos))
                return try run.run(piece: piece, done: done)
            }
        }
    }
}

/// One ``SegmentStore/decodeInPlace(streamName:in:planarChroma:frames:piece:done:)``: the buffer, the reader
/// thread, and the two sides' progress, each counted as `frame << 24 | chunks done`.
private final class InPlaceRun: @unchecked Sendable {
    private let store: SegmentStore
    private let rows: [FrameRow]
    private let firstDelivered: Int
    private let planarChroma: Bool
    private let layout: FrameLayout
    private let buffer: DecodeBuffers
    private let cursor: ReadCursor
    /// A record read and checked; two, used in turn (a frame's is read while the one before is still handed out).
    private final class Record {
        let storage = RecordStorage()
        var table = ChunkTable()
        var payload = UnsafeRawBufferPointer(start: nil, count: 0)
        var located: ReadCursor.Located?
        var frameNumber = 0
    }
    private let records = [Record(), Record()]
    /// Per chunk: 1 + the delivered frame whose chunk is decoded in the buffer (0: none yet).
    private let decodedFrame: UnsafeMutablePointer<Atomic<Int>>
    private let chunkCapacity: Int
    /// The next chunk of the delivered frame being decoded that nobody took, as `position(frame, chunk)`: the reader
    /// and, while it waits, this thread take chunks from it. A frame decoded in order is taken whole at once.
    private let nextChunk = Atomic<Int>(-1)
    private let handedUpTo = Atomic<Int>(0)
    /// Delivered frames handed out whole.
    private let framesOut = Atomic<Int>(0)
    /// Delivered frames whose record is posted; they live in a ring (the reader is at most a frame ahead).
    private let postedFrames = Atomic<Int>(0)
    private let posts: UnsafeMutableBufferPointer<Record?>
    /// This thread's decoder, for the chunks it takes (its own scratch).
    private var helper: FrameDecoder?
    /// The reader is done: ``failure`` says why when it failed; written before `readerDone`.
    private let readerDone = Atomic<Bool>(false)
    private var failure: (any Error)?
    private let cancelled = Atomic<Bool>(false)
    private let sleepers = Atomic<Int>(0)
    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let changed = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// How far ahead (chunks) the other side must be before a sleeping side is woken.
    static let batch = 4
    /// How long a side watches for the other before it sleeps.
    static let spinNanoseconds: UInt64 = 500_000

    init(store: SegmentStore, stream: StreamRow, rows: [FrameRow], firstDelivered: Int, planarChroma: Bool) {
        self.store = store
        self.rows = rows
        self.firstDelivered = firstDelivered
        self.planarChroma = planarChroma
        layout = stream.description.layout
        buffer = DecodeBuffers(byteCount: layout.byteCount, count: 1)
        cursor = ReadCursor(store: store, stream: stream, buffers: buffer)
        posts = .allocate(capacity: 4)
        posts.initialize(repeating: nil)
        // The most chunks a frame can have: the smallest chunk size.
        chunkCapacity = ChunkPlan(layout: layout, chunkSize: 4096).count
        decodedFrame = .allocate(capacity: chunkCapacity)
        for chunk in 0..<chunkCapacity { (decodedFrame + chunk).initialize(to: Atomic(0)) }
        pthread_mutex_init(lock, nil)
        pthread_cond_init(changed, nil)
    }

    deinit {
        posts.deinitialize()
        posts.deallocate()
        decodedFrame.deinitialize(count: chunkCapacity)
        decodedFrame.deallocate()
        pthread_mutex_destroy(lock)
        pthread_cond_destroy(changed)
        lock.deallocate()
        changed.deallocate()
    }

    func close() { cursor.close() }

    /// Opens the first frame's segment, which holds its shared lock from then on (see
    /// ``ReadCursor/openSegment(_:)``).
    func openFirstSegment() throws { try cursor.openSegment(rows[0].segmentID) }

    private static func position(_ frame: Int, _ chunks: Int) -> Int { frame << 24 | chunks }

    private final class Start {
        let run: InPlaceRun
        init(_ run: InPlaceRun) { self.run = run }
    }

    func run(piece: (Int, Int, UnsafeRawBufferPointer) throws -> Void, done: (Int) throws -> Void) throws {
        var thread = pthread_t()
        let start = Unmanaged.passRetained(Start(self))
        let rc = pthread_create(
            &thread, nil,
            { raw in
                let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
                start.run.read()
                return nil
            }, start.toOpaque())
        guard rc == 0 else {
            start.release()
            throw ThreadStartFailed(name: "rewind-export-read", errno: Errno(rawValue: rc))
        }
        defer {
            cancelled.store(true, ordering: .sequentiallyConsistent)
            broadcast()
            pthread_join(thread, nil)
        }
        try handOut(piece: piece, done: done)
    }

    // MARK: This thread: hands out each chunk once decoded

    private func handOut(piece: (Int, Int, UnsafeRawBufferPointer) throws -> Void, done: (Int) throws -> Void) throws {
        let base = UnsafeRawPointer(buffer.last)
        for frame in 0..<(rows.count - firstDelivered) {
            try waitForReader { self.postedFrames.load(ordering: .acquiring) > frame }
            let record = posts[frame % posts.count]!
            let plan = record.located!.decoder.plan
            var chunk = 0
            while chunk < plan.count {
                while !isDecoded(chunk, of: frame) {
                    // Decode a chunk nobody took rather than wait (hard-to-decode footage gets both cores).
                    if try decodeNextChunk(of: frame, record, by: nil) { continue }
                    let waited = chunk
                    try waitForReader { self.isDecoded(waited, of: frame) }
                }
                // Every chunk decoded from here on, up to a run's worth, goes out in as few pieces as they make.
                var last = chunk + 1
                while last < min(plan.count, chunk + Self.run), isDecoded(last, of: frame) { last += 1 }
                try withoutActuallyEscaping(piece) { piece in
                    var runs = Runs(frame: frame, base: base, piece: piece)
                    for next in chunk..<last {
                        let (one, other) = pieces(of: next, in: plan)
                        try runs.add(one)
                        try runs.add(other)
                    }
                    try runs.flush()
                }
                chunk = last
                handedUpTo.store(Self.position(frame, last), ordering: .sequentiallyConsistent)
                wake()
            }
            framesOut.store(frame + 1, ordering: .sequentiallyConsistent)
            wake()
            try done(frame + 1)
        }
    }

    private func isDecoded(_ chunk: Int, of frame: Int) -> Bool {
        decodedFrame[chunk].load(ordering: .acquiring) == frame + 1
    }

    /// Takes the next chunk of delivered frame `frame` that nobody took, if any, and decodes it, after `before`:
    /// with `decoder` (the reader, with the record's) or, when nil, this thread's own.
    ///
    /// - Returns: whether there was one.
    private func decodeNextChunk(
        of frame: Int, _ record: Record, by decoder: FrameDecoder?, before: (Int) throws -> Void = { _ in }
    ) throws -> Bool {
        let located = record.located!
        let count = located.decoder.plan.count
        var next = nextChunk.load(ordering: .acquiring)
        while true {
            guard next >> 24 == frame, next & (1 << 24 - 1) < count else { return false }
            let (exchanged, original) = nextChunk.compareExchange(
                expected: next, desired: next + 1, ordering: .acquiringAndReleasing)
            if exchanged { break }
            next = original
        }
        let chunk = next & (1 << 24 - 1)
        try before(chunk)
        let decoder = decoder ?? helperDecoder(like: located.decoder)
        try decode(chunk, record, with: decoder)
        decodedFrame[chunk].store(frame + 1, ordering: .sequentiallyConsistent)
        wake()
        return true
    }

    /// This thread's decoder for the plan and layout of `shared`.
    private func helperDecoder(like shared: FrameDecoder) -> FrameDecoder {
        if let helper, helper.plan == shared.plan, helper.layout == shared.layout { return helper }
        let made = FrameDecoder(layout: shared.layout, chunkSize: shared.plan.chunkSize, buffers: buffer)
        helper = made
        return made
    }

    private func decode(_ chunk: Int, _ record: Record, with decoder: FrameDecoder) throws {
        let located = record.located!
        do throws(FrameDecodeError) {
            try decoder.decodeChunkInPlace(
                chunk, codec: record.table.codecs[chunk], stored: record.table.stored(chunk, in: record.payload),
                frame: buffer.last, hasPrevious: located.followsPrevious, planarChroma: planarChroma)
        } catch {
            throw located.damaged(error.description, frameNumber: record.frameNumber)
        }
    }

    /// Chunks handed out together at most (a run of 8 chunks of 128 KiB is one `pwrite` of 1 MiB).
    static let run = 8

    /// Where chunk `chunk` of `plan` lies in the delivered frame, as (offset, count) pieces: its bytes (the second
    /// piece empty), or with planar chroma its Cb and its Cr samples (NV12 chroma bytes q..<r hold Cb samples
    /// (q+1)/2..<(r+1)/2 and Cr samples q/2..<r/2).
    private func pieces(of chunk: Int, in plan: ChunkPlan) -> ((Int, Int), (Int, Int)) {
        let start = plan.offsets[chunk]
        let end = start + plan.lengths[chunk]
        guard planarChroma, start >= layout.plane(1).offset else { return ((start, end - start), (end, 0)) }
        let chroma = layout.plane(1)
        let (q, r) = (start - chroma.offset, end - chroma.offset)
        return (
            (chroma.offset + (q + 1) / 2, (r + 1) / 2 - (q + 1) / 2),
            (chroma.offset + chroma.byteCount / 2 + q / 2, r / 2 - q / 2)
        )
    }

    /// Up to two runs of adjacent pieces of one frame (luma, or Cb and Cr), each handed out as one piece.
    private struct Runs {
        let frame: Int
        let base: UnsafeRawPointer
        let piece: (Int, Int, UnsafeRawBufferPointer) throws -> Void
        private var first = (offset: 0, count: 0)
        private var second = (offset: 0, count: 0)

        init(frame: Int, base: UnsafeRawPointer, piece: @escaping (Int, Int, UnsafeRawBufferPointer) throws -> Void) {
            self.frame = frame
            self.base = base
            self.piece = piece
        }

        mutating func add(_ next: (offset: Int, count: Int)) throws {
            guard next.count > 0 else { return }
            if first.count > 0, first.offset + first.count == next.offset {
                first.count += next.count
            } else if second.count > 0, second.offset + second.count == next.offset {
                second.count += next.count
            } else {
                // A third run: the older one goes out now.
                try out(first)
                first = second
                second = next
            }
        }

        mutating func flush() throws {
            try out(first)
            try out(second)
            first.count = 0
            second.count = 0
        }

        private func out(_ run: (offset: Int, count: Int)) throws {
            guard run.count > 0 else { return }
            try piece(frame, run.offset, UnsafeRawBufferPointer(start: base + run.offset, count: run.count))
        }
    }

    /// Waits until `condition` holds, or the reader is done (throwing its error when it failed).
    private func waitForReader(until condition: () -> Bool) throws {
        let stop = { self.readerDone.load(ordering: .acquiring) }
        wait(until: { condition() || stop() }, orSleepUntil: { condition() || stop() })
        if condition() { return }
        throw failure ?? SegmentStoreError.damaged(file: "", frame: -1, offset: 0, detail: "the reader stopped early")
    }

    // MARK: The reader thread: decodes each chunk once the chunk before it in its place is out

    private func read() {
        do {
            try decodeAll()
        } catch is Cancelled {
        } catch {
            failure = error
        }
        readerDone.store(true, ordering: .sequentiallyConsistent)
        broadcast()
    }

    private struct Cancelled: Error {}

    private func decodeAll() throws {
        var previousPlan: ChunkPlan?
        for (number, row) in rows.enumerated() {
            if cancelled.load(ordering: .acquiring) { throw Cancelled() }
            let frame = number - firstDelivered
            let record = records[number % records.count]
            if frame >= records.count {
                // The record was the frame's two before: it must be out.
                let out = frame - records.count + 1
                try waitUntil { self.framesOut.load(ordering: .acquiring) >= out }
            }
            try load(row, into: record)
            let located = record.located!
            let plan = located.decoder.plan
            defer { previousPlan = plan }
            store.countDecodedFrame()
            guard frame >= 0 else {
                // Before the range: decoded for the frames after it, never handed out.
                for chunk in 0..<plan.count { try decode(chunk, record, with: located.decoder) }
                continue
            }
            posts[frame % posts.count] = record
            postedFrames.store(frame + 1, ordering: .sequentiallyConsistent)
            let samePlaces = frame > 0 && previousPlan == plan
            if frame > 0, !samePlaces {
                // Chunks in other places: the whole frame before must be out first.
                try waitUntil { self.framesOut.load(ordering: .acquiring) >= frame }
            }
            // A frame whose LZ4 chunks use the bytes before them as dictionary is decoded in order, by this thread.
            let inOrder = record.table.needsOrder
            nextChunk.store(Self.position(frame, inOrder ? plan.count : 0), ordering: .sequentiallyConsistent)
            wake()
            if inOrder {
                for chunk in 0..<plan.count {
                    if samePlaces { try waitForHandOut(chunk, of: frame - 1, count: plan.count) }
                    try decode(chunk, record, with: located.decoder)
                    decodedFrame[chunk].store(frame + 1, ordering: .sequentiallyConsistent)
                    wake()
                }
            } else {
                // Each chunk taken waits for its place: the same chunk of the frame before handed out.
                while try decodeNextChunk(
                    of: frame, record, by: located.decoder,
                    before: { chunk in
                        if samePlaces { try self.waitForHandOut(chunk, of: frame - 1, count: plan.count) }
                    })
                {}
            }
        }
    }

    /// Waits until chunk `chunk` of delivered frame `frame` is handed out (sleeping, until a batch further or the
    /// frame's end).
    private func waitForHandOut(_ chunk: Int, of frame: Int, count: Int) throws {
        try waitForHandOut(Self.position(frame, chunk + 1), end: Self.position(frame, count))
    }

    /// Waits until `condition` holds or the consumer gave up (``Cancelled``).
    private func waitUntil(_ condition: () -> Bool) throws {
        wait(
            until: { condition() || cancelled.load(ordering: .acquiring) },
            orSleepUntil: { condition() || cancelled.load(ordering: .acquiring) })
        if cancelled.load(ordering: .acquiring) { throw Cancelled() }
    }

    /// Waits until the handing out reaches `needed` (sleeping, until a batch further, at most to `end`: the end of
    /// the frame before).
    private func waitForHandOut(_ needed: Int, end: Int) throws {
        let enough = min(needed + Self.batch, end)
        wait(
            until: { handedUpTo.load(ordering: .acquiring) >= needed || cancelled.load(ordering: .acquiring) },
            orSleepUntil: { handedUpTo.load(ordering: .acquiring) >= enough || cancelled.load(ordering: .acquiring) })
        if cancelled.load(ordering: .acquiring) { throw Cancelled() }
    }

    /// Reads the record of `row` into `record` and checks its table and every chunk.
    private func load(_ row: FrameRow, into record: Record) throws {
        let located = try cursor.locate(row)
        do {
            guard located.decoder.layout == layout else {
                throw located.damaged("a segment of \(located.decoder.layout) in a stream of \(layout)")
            }
            let (header, payload) = try located.read(into: record.storage)
            do throws(FrameDecodeError) {
                try record.table.read(payload, plan: located.decoder.plan, expectedCRC: header.storedCRC)
                for chunk in 0..<record.table.count { try record.table.check(chunk, in: payload) }
            } catch {
                throw located.damaged(error.description, frameNumber: Int(header.frameNumber))
            }
            record.payload = payload
            record.frameNumber = Int(header.frameNumber)
            record.located = located
        } catch {
            throw located.numbered(error, index: store.index)
        }
    }

    // MARK: Waiting

    /// Watches `condition` for ``spinNanoseconds``, then sleeps until `enough` holds (checked after every change
    /// either side posts).
    private func wait(until condition: () -> Bool, orSleepUntil enough: () -> Bool) {
        if watch(for: Self.spinNanoseconds, until: condition) { return }
        pthread_mutex_lock(lock)
        sleepers.wrappingAdd(1, ordering: .sequentiallyConsistent)
        while !enough() { pthread_cond_wait(changed, lock) }
        sleepers.wrappingSubtract(1, ordering: .sequentiallyConsistent)
        pthread_mutex_unlock(lock)
    }

    private func wake() {
        guard sleepers.load(ordering: .sequentiallyConsistent) > 0 else { return }
        broadcast()
    }

    private func broadcast() {
        pthread_mutex_lock(lock)
        pthread_cond_broadcast(changed)
        pthread_mutex_unlock(lock)
    }
}
