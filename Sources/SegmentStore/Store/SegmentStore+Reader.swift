import RewindCore
import RewindSQLite
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension SegmentStore {
    /// Calls `body` with every stored frame whose pts is in `range`, in pts order, until it returns false.
    ///
    /// Decoding starts at the key frame at or before `range.lowerBound` (at most ``StoreOptions/keyInterval``
    /// frames decoded before the first one delivered). Every record is verified; a damaged one throws
    /// ``SegmentStoreError/damaged(file:frame:offset:detail:)`` and is never delivered. Works on open `.partial`
    /// segments too (frames are visible once synced). Memory is bounded: the decode buffers and one record buffer
    /// per decoding thread. While a segment is read it holds a shared lock, so retention skips it.
    ///
    /// - Parameters:
    ///   - streamName: the stream; nil reads every stream, one after the other, each in pts order.
    ///   - range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    ///   - buffers: where frames are decoded, owned by the caller: with n buffers, each view stays valid while
    ///     `body` receives the next n − 1 frames (and after the read, until the buffers are released), so another
    ///     thread can consume frames without copying them. Nil: one buffer of the reader's own, and each view is
    ///     valid only during its call. Must match the stream's frame size (one stream, or streams of one size).
    ///   - decodeThreads: 2 decodes consecutive frames in pairs, on the calling thread and a helper (needs at
    ///     least 3 `buffers`; a view then stays valid while `body` receives the next n − 2 frames); 1 decodes on
    ///     the calling thread only.
    ///   - pairing: with 2 `decodeThreads`, whether the next frames go in pairs, asked before each pair (nil:
    ///     always). A consumer on another thread flips it by what it waits for (see ``DecodePairing``).
    ///   - body: receives each frame; returns false to stop.
    /// - Throws: damage, I/O and index errors, and what `body` throws.
    /// - Complexity: O(log n) to the first frame, then O(bytes of the frames visited).
    public func frames(
        streamName: String? = nil, in range: Range<Int64>, into buffers: DecodeBuffers? = nil,
        decodeThreads: Int = 1, pairing: DecodePairing? = nil, _ body: (FrameView) throws -> Bool
    ) throws {
        try SegmentStoreError.translatingIndexErrors {
            let streams = try index.streams().filter { streamName == nil || $0.name == streamName }
            if let streamName, streams.isEmpty { throw SegmentStoreError.unknownStream(streamName) }
            let pairing = decodeThreads >= 2 ? pairing ?? DecodePairing(true) : nil
            for stream in streams {
                guard try frames(of: stream, in: range, into: buffers, pairing: pairing, body) else { return }
            }
        }
    }

    /// One stream's frames; returns false when `body` asked to stop.
    private func frames(
        of stream: StreamRow, in range: Range<Int64>, into buffers: DecodeBuffers?, pairing: DecodePairing?,
        _ body: (FrameView) throws -> Bool
    ) throws -> Bool {
        guard !range.isEmpty else { return true }
        // An empty range decodes nothing (not even the frames from the key frame before it).
        var any = false
        try index.frames(streamID: stream.id, in: range) { _ in
            any = true
            return false
        }
        guard any else { return true }
        let start = try index.keyFrame(streamID: stream.id, atOrBefore: range.lowerBound)?.ptsNanoseconds
        let cursor = ReadCursor(store: self, stream: stream, buffers: buffers)
        defer { cursor.close() }
        let pairing = cursor.canDecodePairs ? pairing : nil
        var keepGoing = true
        func deliver(_ row: FrameRow, _ decoded: UnsafeRawBufferPointer) throws -> Bool {
            guard row.ptsNanoseconds >= range.lowerBound else { return true }
            let info = try FrameInfo(
                pts: FrameTime(nanoseconds: row.ptsNanoseconds), wallNanoseconds: row.wallNanoseconds,
                color: stream.description.color)
            keepGoing = try body(FrameView(layout: stream.description.layout, info: info, bytes: decoded))
            return keepGoing
        }
        // In pairs: a frame waits (located) for the next one, then both are read and decoded at once.
        var waiting: ReadCursor.Located?
        try index.frames(streamID: stream.id, in: (start ?? range.lowerBound)..<range.upperBound) { row in
            if let first = waiting {
                waiting = nil
                let second = try cursor.locate(row)
                let (a, b) = try cursor.decodePair(first, second)
                return try deliver(first.row, a) && deliver(second.row, b.get())
            }
            guard let pairing, pairing.isWanted else { return try deliver(row, try cursor.decode(row)) }
            waiting = try cursor.locate(row)
            return true
        }
        if keepGoing, let last = waiting { _ = try deliver(last.row, try cursor.decode(last)) }
        return keepGoing
    }

    /// Opens a segment's file for reading whatever its current name (`.partial` or sealed), with a shared lock.
    func openSegmentReader(_ row: SegmentRow) throws -> SegmentFileReader {
        var names = [row.fileName]
        if let sequence = SegmentFormat.sequence(ofFileName: row.fileName) {
            names.append(SegmentFormat.fileName(sequence: sequence, partial: false))
            names.append(SegmentFormat.fileName(sequence: sequence, partial: true))
        }
        var notFound: SegmentStoreError?
        for name in names {
            do {
                return try SegmentFileReader(
                    path: segmentsDirectory + "/" + name, fileSystem: fileSystem, sharedLock: true)
            } catch {
                guard case .io(let cause) = error, cause.code == ENOENT else { throw error }
                notFound = notFound ?? error
            }
        }
        // Retention removes a file after its rows: only a file the index still counts frames in is missing.
        guard row.state != .deleting else { throw notFound! }
        throw SegmentStoreError.missingSegment(file: row.fileName, frames: row.frameCount)
    }
}

/// Whether a reader decoding with two threads takes the next frames in pairs (two at once, about twice the
/// frames per second for a little more work in all) or one at a time (leaving a core to whoever consumes them).
///
/// A consumer on another thread flips it by what it waits for: waiting for frames asks for pairs, a reader
/// waiting for the consumer to free a buffer asks for single frames. Safe to flip from any thread at any time;
/// the reader asks before each frame it starts.
public final class DecodePairing: Sendable {
    private let wanted: Atomic<Bool>

    /// - Parameter wanted: whether frames start out in pairs.
    public init(_ wanted: Bool) { self.wanted = Atomic(wanted) }

    /// Whether the next frames go in pairs.
    public var isWanted: Bool { wanted.load(ordering: .relaxed) }

    /// Asks for pairs (true) or single frames (false) from the next frame on.
    public func want(_ pairs: Bool) { wanted.store(pairs, ordering: .relaxed) }
}

/// Reads the records behind index rows, delta chains checked.
///
/// One frame at a time (``decode(_:)``), or two consecutive frames at once on two threads (``decodePair(_:_:)``,
/// with caller-owned decode buffers): each thread reads its own frame's record and decodes it, the second a little
/// behind the first (see ``ChunkProgress``).
final class ReadCursor {
    /// A frame located in its segment (no I/O yet), ready to read and decode.
    struct Located {
        let row: FrameRow
        let reader: SegmentFileReader
        /// Whether the frame located before it is the record just before it in the same segment.
        let followsPrevious: Bool
        let decoder: FrameDecoder

        func damaged(_ detail: String, frameNumber: Int = -1) -> SegmentStoreError {
            .damaged(file: reader.fileName, frame: frameNumber, offset: row.fileOffset, detail: detail)
        }

        /// Reads and checks the record into `storage`. Safe on two threads at once with different storage.
        func read(into storage: RecordStorage) throws -> (RecordHeader, UnsafeRawBufferPointer) {
            let (record, payload) = try reader.readRecord(
                at: row.fileOffset, frame: nil, verifyPayload: false, into: storage)
            guard record.ptsNanoseconds == row.ptsNanoseconds else {
                throw damaged(
                    "record pts \(record.ptsNanoseconds) ns differs from the index's \(row.ptsNanoseconds) ns",
                    frameNumber: Int(record.frameNumber))
            }
            guard record.storedLength == row.storedLength else {
                throw damaged(
                    "record holds \(record.storedLength) stored bytes, the index says \(row.storedLength)",
                    frameNumber: Int(record.frameNumber))
            }
            return (record, payload)
        }
    }

    private let store: SegmentStore
    private let stream: StreamRow
    /// The reader of the segment last located in; earlier ones close when the last frame using them is done.
    private var reader: SegmentFileReader?
    private var readerSegment: Int64 = -1
    /// One decoder per decoding thread (each has its own scratch), sharing the decode buffers.
    private var decoders: [FrameDecoder] = []
    private let buffers: DecodeBuffers
    /// Where the records of the frames being decoded are read: one per frame of a pair.
    private let storage = [RecordStorage(), RecordStorage()]
    /// The segment and record end of the last located frame (a delta needs it to be the previous one).
    private var locatedSegment: Int64 = -1
    private var locatedEnd: Int64 = -1
    private var pool: WorkerPool?
    private let progress = ChunkProgress()

    /// - Parameter buffers: the caller's decode buffers (at least 3 for ``decodePair(_:_:)``); nil: one of its own.
    init(store: SegmentStore, stream: StreamRow, buffers: DecodeBuffers? = nil) {
        self.store = store
        self.stream = stream
        self.buffers = buffers ?? DecodeBuffers(byteCount: stream.description.layout.byteCount)
    }

    /// Whether ``decodePair(_:_:)`` may be used.
    var canDecodePairs: Bool { buffers.count >= 3 }

    func close() {
        reader?.close()
        reader = nil
        pool?.shutdown()
        pool = nil
    }

    /// Reads, verifies and decodes the frame of `row`.
    func decode(_ row: FrameRow) throws -> UnsafeRawBufferPointer {
        try decode(try locate(row))
    }

    /// Records of at least this many stored bytes are decoded a chunk at a time straight into the frame buffer
    /// (``SegmentFileReader/decodeRecord(at:expectedPTS:expectedStoredLength:decoder:into:previous:storage:)``),
    /// so reading a large frame needs no buffer of the record's size.
    static let chunkwiseThreshold = 1 << 20

    /// Reads, verifies and decodes a located frame into the next buffer.
    func decode(_ frame: Located) throws -> UnsafeRawBufferPointer {
        if frame.row.storedLength >= Self.chunkwiseThreshold {
            do {
                _ = try frame.reader.decodeRecord(
                    at: frame.row.fileOffset, expectedPTS: frame.row.ptsNanoseconds,
                    expectedStoredLength: frame.row.storedLength, decoder: frame.decoder, into: buffers.next,
                    previous: frame.followsPrevious ? UnsafeRawPointer(buffers.last) : nil, storage: storage[0])
            } catch {
                locatedSegment = -1
                throw error
            }
            buffers.advance()
            store.countDecodedFrame()
            return UnsafeRawBufferPointer(start: buffers.last, count: buffers.byteCount)
        }
        do {
            let (record, payload) = try frame.read(into: storage[0])
            do {
                try frame.decoder.decode(payload, expectedCRC: record.storedCRC, hasPrevious: frame.followsPrevious)
            } catch {
                throw frame.damaged(error.description, frameNumber: Int(record.frameNumber))
            }
        } catch {
            locatedSegment = -1
            throw error
        }
        store.countDecodedFrame()
        return UnsafeRawBufferPointer(start: buffers.last, count: buffers.byteCount)
    }

    /// Reads and decodes two consecutive located frames at once, `first` on this thread and `second` on a helper,
    /// into the next two buffers.
    ///
    /// - Returns: the two frames; the second as a failure when only it could not be read or decoded (the first is
    ///   still good).
    /// - Throws: when the first frame could not be read or decoded.
    func decodePair(_ first: Located, _ second: Located) throws
        -> (UnsafeRawBufferPointer, Result<UnsafeRawBufferPointer, any Error>)
    {
        precondition(canDecodePairs, "decoding pairs needs at least 3 decode buffers")
        if pool == nil { pool = WorkerPool(workerCount: 2) }
        // Each thread needs a decoder of its own (for its scratch); frames of one segment share decoders[0].
        var secondDecoder = second.decoder
        if secondDecoder === first.decoder {
            if decoders.count < 2 {
                decoders.append(
                    FrameDecoder(layout: decoders[0].layout, chunkSize: decoders[0].plan.chunkSize, buffers: buffers))
            }
            secondDecoder = decoders[1]
        }
        let frames = [(first, first.decoder), (second, secondDecoder)]
        let targets = [buffers.next, buffers.next(after: 2)]
        let previous = [
            first.followsPrevious ? UnsafeRawPointer(buffers.last) : nil,
            second.followsPrevious ? UnsafeRawPointer(targets[0]) : nil,
        ]
        // Each written by its own item's thread only; read after `run` returns.
        var firstError: (any Error)?
        var secondError: (any Error)?
        progress.reset()
        let progress = self.progress
        let storage = self.storage
        pool!.run(items: 2) { item, _ in
            let (frame, decoder) = frames[item]
            do {
                let (record, payload) = try frame.read(into: storage[item])
                do throws(FrameDecodeError) {
                    try decoder.decode(
                        payload, expectedCRC: record.storedCRC, into: targets[item], previous: previous[item],
                        progress: item == 0 ? progress : nil, previousProgress: item == 1 ? progress : nil)
                } catch {
                    throw frame.damaged(error.description, frameNumber: Int(record.frameNumber))
                }
            } catch {
                // The second frame's thread must not wait for chunks that will never come.
                if item == 0 {
                    progress.abandon()
                    firstError = error
                } else {
                    secondError = error
                }
            }
        }
        if let firstError {
            locatedSegment = -1
            throw firstError
        }
        buffers.advance()
        store.countDecodedFrame()
        let firstFrame = UnsafeRawBufferPointer(start: targets[0], count: buffers.byteCount)
        if let secondError {
            locatedSegment = -1
            return (firstFrame, .failure(secondError))
        }
        buffers.advance()
        store.countDecodedFrame()
        return (firstFrame, .success(UnsafeRawBufferPointer(start: targets[1], count: buffers.byteCount)))
    }

    /// Finds the segment of `row` (opening its file if needed) and whether it follows the frame located before.
    func locate(_ row: FrameRow) throws -> Located {
        if row.segmentID != readerSegment {
            // Not closed here: a frame located in it may still be read; it closes when the last one is done.
            reader = nil
            guard let segment = try store.index.segment(id: row.segmentID) else {
                throw StoreIndexError.unknownSegment(id: row.segmentID)
            }
            let opened = try store.openSegmentReader(segment)
            reader = opened
            readerSegment = row.segmentID
            let layout = opened.header.stream.layout
            if decoders.isEmpty || decoders[0].plan != opened.plan || decoders[0].layout != layout {
                guard buffers.byteCount == layout.byteCount else {
                    throw SegmentStoreError.damaged(
                        file: opened.fileName, frame: 0, offset: 0,
                        detail: "frames of \(layout.byteCount) bytes, but the stream's frames have \(buffers.byteCount)"
                    )
                }
                decoders = [FrameDecoder(layout: layout, chunkSize: opened.header.chunkSize, buffers: buffers)]
            }
        }
        let followsPrevious = locatedSegment == row.segmentID && locatedEnd == row.fileOffset
        locatedSegment = row.segmentID
        locatedEnd = row.fileOffset + Int64(SegmentFormat.recordHeaderLength + row.storedLength)
        return Located(row: row, reader: reader!, followsPrevious: followsPrevious, decoder: decoders[0])
    }
}
