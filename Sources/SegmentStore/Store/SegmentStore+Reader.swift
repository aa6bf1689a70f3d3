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
    ///   - decodeThreads: 2 shares out each frame's chunks between the calling thread and a helper; 1 decodes on
    ///     the calling thread only.
    ///   - splitting: with 2 `decodeThreads`, whether the next frame is shared out, asked before each frame (nil:
    ///     always). A consumer on another thread flips it by what it waits for (see ``DecodeSplitting``).
    ///   - body: receives each frame; returns false to stop.
    /// - Throws: damage, I/O and index errors, and what `body` throws.
    /// - Complexity: O(log n) to the first frame, then O(bytes of the frames visited).
    public func frames(
        streamName: String? = nil, in range: Range<Int64>, into buffers: DecodeBuffers? = nil,
        decodeThreads: Int = 1, splitting: DecodeSplitting? = nil, _ body: (FrameView) throws -> Bool
    ) throws {
        try SegmentStoreError.translatingIndexErrors {
            let streams = try index.streams().filter { streamName == nil || $0.name == streamName }
            if let streamName, streams.isEmpty { throw SegmentStoreError.unknownStream(streamName) }
            let splitting = decodeThreads >= 2 ? splitting ?? DecodeSplitting(true) : nil
            for stream in streams {
                guard try frames(of: stream, in: range, into: buffers, splitting: splitting, body) else { return }
            }
        }
    }

    /// One stream's frames; returns false when `body` asked to stop.
    ///
    /// A segment retention deleted before any frame was delivered (a recorder in another process keeping its
    /// `--disk`, between this read finding the segment's rows and opening its file) only means the range now starts
    /// later: the read starts again from what the index holds now. Once frames were delivered, it is
    /// ``SegmentStoreError/deletedWhileRead(file:)``. (While a segment is read its shared lock stops retention
    /// there, held or not, and the next is opened before it is let go, so that is only a deletion that did not ask
    /// for the lock: another program's.)
    private func frames(
        of stream: StreamRow, in range: Range<Int64>, into buffers: DecodeBuffers?, splitting: DecodeSplitting?,
        _ body: (FrameView) throws -> Bool
    ) throws -> Bool {
        var delivered = false
        var attempts = 0
        while true {
            do {
                return try framesOnce(of: stream, in: range, into: buffers, splitting: splitting) { frame in
                    delivered = true
                    return try body(frame)
                }
            } catch SegmentStoreError.deletedWhileRead where !delivered && attempts < 16 {
                attempts += 1
            }
        }
    }

    private func framesOnce(
        of stream: StreamRow, in range: Range<Int64>, into buffers: DecodeBuffers?, splitting: DecodeSplitting?,
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
        var keepGoing = true
        func deliver(_ row: FrameRow, _ decoded: UnsafeRawBufferPointer) throws -> Bool {
            guard row.ptsNanoseconds >= range.lowerBound else { return true }
            let info = try FrameInfo(
                pts: FrameTime(nanoseconds: row.ptsNanoseconds), wallNanoseconds: row.wallNanoseconds,
                color: stream.description.color)
            keepGoing = try body(FrameView(layout: stream.description.layout, info: info, bytes: decoded))
            return keepGoing
        }
        try index.frames(streamID: stream.id, in: (start ?? range.lowerBound)..<range.upperBound) { row in
            guard let splitting, splitting.isWanted else { return try deliver(row, try cursor.decode(row)) }
            return try deliver(row, try cursor.decodeOnTwoThreads(try cursor.locate(row)))
        }
        return keepGoing
    }

    /// Whether opening `segment`'s file failed (`failure`) because retention deleted it since its row was read: the
    /// file is gone, and its row is too or is being deleted, with no frame row left.
    func retentionDeleted(_ segment: SegmentRow, failure: any Error) -> Bool {
        switch failure {
        case SegmentStoreError.missingSegment: break
        case SegmentStoreError.io(let cause) where cause.code == ENOENT: break
        default: return false
        }
        // Retention marks the row deleting and deletes its frame rows in one step, before the file goes: rows left
        // under it are the index contradicting itself, not retention.
        do {
            guard try index.segment(id: segment.id).map({ $0.state == .deleting }) ?? true else { return false }
            return try index.frames(ofSegment: segment.id).isEmpty
        } catch {
            return false  // the index cannot say: the open's own failure stands
        }
    }

    /// Opens a segment's file for reading whatever its current name (`.partial` or sealed), with a shared lock.
    func openSegmentReader(_ row: SegmentRow) throws -> SegmentFileReader {
        // A name of segments/ the store gave (`000002.seg`), never a path that leads elsewhere.
        guard let sequence = SegmentFormat.sequence(ofFileName: row.fileName) else {
            throw StoreIndexError.invalidSegmentRow(id: row.id, detail: "file name '\(row.fileName)' is no segment's")
        }
        let names = [
            row.fileName, SegmentFormat.fileName(sequence: sequence, partial: false),
            SegmentFormat.fileName(sequence: sequence, partial: true),
        ]
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

/// Whether a reader decoding with two threads shares out the next frame's chunks between them (about twice the
/// frames per second for a little more work in all) or decodes it on one (leaving a core to whoever consumes them).
///
/// A consumer on another thread flips it by what it waits for: waiting for frames asks for two threads, a reader
/// waiting for the consumer to free a buffer asks for one. Safe to flip from any thread at any time; the reader
/// asks before each frame it starts.
public final class DecodeSplitting: Sendable {
    private let wanted: Atomic<Bool>

    /// - Parameter wanted: whether frames start out shared between two threads.
    public init(_ wanted: Bool) { self.wanted = Atomic(wanted) }

    /// Whether the next frame is shared between two threads.
    public var isWanted: Bool { wanted.load(ordering: .relaxed) }

    /// Asks for two threads (true) or one (false) from the next frame on.
    public func want(_ twoThreads: Bool) { wanted.store(twoThreads, ordering: .relaxed) }
}

/// Reads the records behind index rows, delta chains checked.
///
/// Each frame on the calling thread (``decode(_:)``), or shared out chunk by chunk between it and a helper
/// (``decodeOnTwoThreads(_:)``).
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

        /// `error` with the frame's number in its segment where the record could not say it (a damaged record
        /// header, a file cut short): its position among the segment's index rows, when they follow each other
        /// record after record from the file's first one (so the position is the number).
        func numbered(_ error: any Error, index: StoreIndex) -> any Error {
            guard case SegmentStoreError.damaged(let file, -1, let offset, let detail) = error,
                let rows = try? index.frames(ofSegment: row.segmentID)
            else { return error }
            var end = Int64(reader.header.length)
            for (number, other) in rows.enumerated() {
                guard other.fileOffset == end else { return error }
                if other.fileOffset == offset {
                    return SegmentStoreError.damaged(file: file, frame: number, offset: offset, detail: detail)
                }
                end += Int64(SegmentFormat.recordHeaderLength + other.storedLength)
            }
            return error
        }

        /// Reads and checks the record into `storage`.
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
            try checkCaptureTime(record)
            return (record, payload)
        }

        /// Refuses a record captured at another time than its row says: the frame of another recording (a file of
        /// another store put in this one's place), however well its pts and size fit.
        func checkCaptureTime(_ record: RecordHeader) throws {
            guard record.wallNanoseconds != row.wallNanoseconds else { return }
            let captured = SegmentStore.utcText(record.wallNanoseconds)
            var indexed = SegmentStore.utcText(row.wallNanoseconds)
            if indexed == captured {
                // Within a millisecond the two read alike: how far apart they are, to the nanosecond.
                let apart = row.wallNanoseconds.subtractingSaturating(record.wallNanoseconds)
                indexed += " too, \(apart.magnitude) ns \(apart > 0 ? "later" : "earlier")"
            }
            throw SegmentStoreError.indexDisagrees(
                file: reader.fileName,
                detail: "the frame at pts \(row.ptsNanoseconds) ns (byte \(row.fileOffset)) was captured \(captured), "
                    + "but the index has it captured \(indexed) (another recording's file in its place, or rows "
                    + "changed by another program)")
        }
    }

    private let store: SegmentStore
    private let stream: StreamRow
    /// The reader of the segment last located in; earlier ones close when the last frame using them is done.
    private var reader: SegmentFileReader?
    private var readerSegment: Int64 = -1
    /// The decoder of the segment last located in (remade when a segment's layout or chunk size differs).
    private var decoder: FrameDecoder?
    private let buffers: DecodeBuffers
    /// Where the record of the frame being decoded is read.
    private let storage = RecordStorage()
    /// The segment and record end of the last located frame (a delta needs it to be the previous one).
    private var locatedSegment: Int64 = -1
    private var locatedEnd: Int64 = -1
    /// The helper thread and the helper's decoder of ``decodeOnTwoThreads(_:)``, made when first needed.
    private var pool: WorkerPool?
    private var helpers: [FrameDecoder] = []

    /// - Parameter buffers: the caller's decode buffers; nil: one of its own.
    init(store: SegmentStore, stream: StreamRow, buffers: DecodeBuffers? = nil) {
        self.store = store
        self.stream = stream
        self.buffers = buffers ?? DecodeBuffers(byteCount: stream.description.layout.byteCount)
    }

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
                let record = try frame.reader.decodeRecord(
                    at: frame.row.fileOffset, expectedPTS: frame.row.ptsNanoseconds,
                    expectedStoredLength: frame.row.storedLength, decoder: frame.decoder, into: buffers.next,
                    previous: frame.followsPrevious ? UnsafeRawPointer(buffers.last) : nil, storage: storage)
                try frame.checkCaptureTime(record)
            } catch {
                locatedSegment = -1
                throw frame.numbered(error, index: store.index)
            }
            buffers.advance()
            store.countDecodedFrame()
            return UnsafeRawBufferPointer(start: buffers.last, count: buffers.byteCount)
        }
        do {
            let (record, payload) = try frame.read(into: storage)
            do {
                try frame.decoder.decode(payload, expectedCRC: record.storedCRC, hasPrevious: frame.followsPrevious)
            } catch {
                throw frame.damaged(error.description, frameNumber: Int(record.frameNumber))
            }
        } catch {
            locatedSegment = -1
            throw frame.numbered(error, index: store.index)
        }
        store.countDecodedFrame()
        return UnsafeRawBufferPointer(start: buffers.last, count: buffers.byteCount)
    }

    /// Reads a located frame and decodes it into the next buffer on two threads, this one and a helper: each
    /// takes the next chunk not yet taken (see ``FrameDecoder/decodeChunks(of:into:previous:pool:helpers:)``).
    func decodeOnTwoThreads(_ frame: Located) throws -> UnsafeRawBufferPointer {
        if pool == nil { pool = WorkerPool(workerCount: 2) }
        let decoder = frame.decoder
        if helpers.isEmpty || helpers[0].plan != decoder.plan || helpers[0].layout != decoder.layout {
            helpers = [FrameDecoder(layout: decoder.layout, chunkSize: decoder.plan.chunkSize, buffers: buffers)]
        }
        do {
            let (record, payload) = try frame.read(into: storage)
            do throws(FrameDecodeError) {
                try decoder.readTable(payload, expectedCRC: record.storedCRC)
                try decoder.decodeChunks(
                    of: payload, into: buffers.next,
                    previous: frame.followsPrevious ? UnsafeRawPointer(buffers.last) : nil, pool: pool!,
                    helpers: helpers)
            } catch {
                throw frame.damaged(error.description, frameNumber: Int(record.frameNumber))
            }
        } catch {
            locatedSegment = -1
            throw frame.numbered(error, index: store.index)
        }
        buffers.advance()
        store.countDecodedFrame()
        return UnsafeRawBufferPointer(start: buffers.last, count: buffers.byteCount)
    }

    /// Opens segment `id`'s file (with its shared lock) as the one frames are located in, after checking that its
    /// header names this stream and its frames have the stream's size.
    ///
    /// - Throws: ``SegmentStoreError/deletedWhileRead(file:)`` when retention deleted it since its rows were read;
    ///   the file's and the index's errors.
    func openSegment(_ id: Int64) throws {
        // The segment read so far stays open (and locked) until the next one is: retention, oldest first, stops
        // at it and never deletes the next one in between.
        guard let segment = try store.index.segment(id: id) else {
            // Retention deletes a segment's rows with it: a frame row left without its segment is the index
            // contradicting itself.
            guard try store.index.frames(ofSegment: id).isEmpty else {
                throw StoreIndexError.unknownSegment(id: id)
            }
            throw SegmentStoreError.deletedWhileRead(file: "of id \(id)")
        }
        let opened: SegmentFileReader
        do {
            opened = try store.openSegmentReader(segment)
        } catch let error where store.retentionDeleted(segment, failure: error) {
            throw SegmentStoreError.deletedWhileRead(file: segment.fileName)
        }
        // Not closed here: a frame located in it may still be read; it closes when the last one is done.
        reader = nil
        // Another stream's file under this one's name (files swapped or copied in): its frames are not this
        // stream's, whatever their sizes.
        guard opened.header.streamName == stream.name else {
            throw SegmentStoreError.indexDisagrees(
                file: opened.fileName,
                detail: "it holds stream '\(opened.header.streamName)', but the index lists it under stream "
                    + "'\(stream.name)' (segment files swapped or copied in)")
        }
        reader = opened
        readerSegment = id
        let layout = opened.header.stream.layout
        if decoder == nil || decoder!.plan != opened.plan || decoder!.layout != layout {
            guard buffers.byteCount == layout.byteCount else {
                // The file's own header is checksummed: it is the index's stream row that says otherwise.
                throw SegmentStoreError.indexDisagrees(
                    file: opened.fileName,
                    detail: "it holds \(layout) frames of \(layout.byteCount) bytes, but the index says the "
                        + "stream's frames have \(buffers.byteCount)")
            }
            decoder = FrameDecoder(layout: layout, chunkSize: opened.header.chunkSize, buffers: buffers)
        }
    }

    /// Finds the segment of `row` (opening its file if needed) and whether it follows the frame located before.
    func locate(_ row: FrameRow) throws -> Located {
        if row.segmentID != readerSegment { try openSegment(row.segmentID) }
        let followsPrevious = locatedSegment == row.segmentID && locatedEnd == row.fileOffset
        // A delta frame whose previous record has no row before it: the index lost rows, not the file its frames.
        if row.flags & FrameRow.keyFrameFlag == 0, !followsPrevious, locatedSegment == row.segmentID {
            locatedSegment = -1
            throw SegmentStoreError.indexDisagrees(
                file: reader?.fileName ?? "\(row.segmentID)",
                detail: "no row for the frame before the delta frame at byte \(row.fileOffset) (rows deleted or "
                    + "changed by another program)")
        }
        // A row's place in its file comes from the index, whatever another program wrote there: one beyond any file
        // is the index disagreeing with it, never arithmetic that overflows.
        let (end, overflow) = row.fileOffset.addingReportingOverflow(
            Int64(SegmentFormat.recordHeaderLength).addingSaturating(Int64(row.storedLength)))
        guard row.fileOffset >= 0, row.storedLength >= 0, !overflow else {
            locatedSegment = -1
            throw SegmentStoreError.indexDisagrees(
                file: reader?.fileName ?? "\(row.segmentID)",
                detail: "a row places the frame at pts \(row.ptsNanoseconds) ns at byte \(row.fileOffset) with "
                    + "\(row.storedLength) stored bytes, beyond any file")
        }
        locatedSegment = row.segmentID
        locatedEnd = end
        return Located(row: row, reader: reader!, followsPrevious: followsPrevious, decoder: decoder!)
    }
}
