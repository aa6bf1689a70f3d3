import RewindCore

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
    /// segments too (frames are visible once synced). Memory is bounded: one decoded frame and one record buffer.
    /// While a segment is read it holds a shared lock, so retention skips it.
    ///
    /// - Parameters:
    ///   - streamName: the stream; nil reads every stream, one after the other, each in pts order.
    ///   - range: pts nanoseconds, start inclusive, end exclusive.
    ///   - buffers: where frames are decoded, owned by the caller: with n buffers, each view stays valid while
    ///     `body` receives the next n − 1 frames (and after the read, until the buffers are released), so another
    ///     thread can consume frames without copying them. Nil: one buffer of the reader's own, and each view is
    ///     valid only during its call. Must match the stream's frame size (one stream, or streams of one size).
    ///   - body: receives each frame; returns false to stop.
    /// - Throws: damage, I/O and index errors, and what `body` throws.
    /// - Complexity: O(log n) to the first frame, then O(bytes of the frames visited).
    public func frames(
        streamName: String? = nil, in range: Range<Int64>, into buffers: DecodeBuffers? = nil,
        _ body: (FrameView) throws -> Bool
    ) throws {
        let streams = try index.streams().filter { streamName == nil || $0.name == streamName }
        if let streamName, streams.isEmpty { throw SegmentStoreError.unknownStream(streamName) }
        for stream in streams {
            guard try frames(of: stream, in: range, into: buffers, body) else { return }
        }
    }

    /// One stream's frames; returns false when `body` asked to stop.
    private func frames(
        of stream: StreamRow, in range: Range<Int64>, into buffers: DecodeBuffers?,
        _ body: (FrameView) throws -> Bool
    ) throws -> Bool {
        guard !range.isEmpty else { return true }
        let start = try index.keyFrame(streamID: stream.id, atOrBefore: range.lowerBound)?.ptsNanoseconds
        let cursor = ReadCursor(store: self, stream: stream, buffers: buffers)
        defer { cursor.close() }
        var keepGoing = true
        try index.frames(streamID: stream.id, in: (start ?? range.lowerBound)..<range.upperBound) { row in
            let decoded = try cursor.decode(row)
            guard row.ptsNanoseconds >= range.lowerBound else { return true }
            let info = try FrameInfo(
                pts: FrameTime(nanoseconds: row.ptsNanoseconds), wallNanoseconds: row.wallNanoseconds,
                color: stream.description.color)
            keepGoing = try body(FrameView(layout: stream.description.layout, info: info, bytes: decoded))
            return keepGoing
        }
        return keepGoing
    }

    /// Opens a segment's file for reading whatever its current name (`.partial` or sealed), with a shared lock.
    func openSegmentReader(_ row: SegmentRow) throws -> SegmentFileReader {
        var names = [row.fileName]
        if let sequence = SegmentFormat.sequence(ofFileName: row.fileName) {
            names.append(SegmentFormat.fileName(sequence: sequence, partial: false))
            names.append(SegmentFormat.fileName(sequence: sequence, partial: true))
        }
        var lastError: SegmentStoreError?
        for name in names {
            do {
                return try SegmentFileReader(
                    path: segmentsDirectory + "/" + name, fileSystem: fileSystem, sharedLock: true)
            } catch {
                guard case .io(let cause) = error, cause.code == ENOENT else { throw error }
                lastError = error
            }
        }
        throw lastError!
    }
}

/// Reads the records behind index rows: one open segment at a time, one decoder, delta chains checked.
final class ReadCursor {
    private let store: SegmentStore
    private let stream: StreamRow
    private var reader: SegmentFileReader?
    private var readerSegment: Int64 = -1
    private var decoder: FrameDecoder?
    /// The caller's decode buffers, shared by every decoder of this cursor; nil: each decoder has its own.
    private let buffers: DecodeBuffers?
    /// The segment and record offset of the frame now in the decoder (a delta needs it to be the previous one).
    private var decodedSegment: Int64 = -1
    private var decodedEnd: Int64 = -1

    init(store: SegmentStore, stream: StreamRow, buffers: DecodeBuffers? = nil) {
        self.store = store
        self.stream = stream
        self.buffers = buffers
    }

    func close() {
        reader?.close()
        reader = nil
    }

    /// Reads, verifies and decodes the frame of `row`.
    func decode(_ row: FrameRow) throws -> UnsafeRawBufferPointer {
        if row.segmentID != readerSegment {
            reader?.close()
            reader = nil
            guard let segment = try store.index.segment(id: row.segmentID) else {
                throw StoreIndexError.unknownSegment(id: row.segmentID)
            }
            let opened = try store.openSegmentReader(segment)
            reader = opened
            readerSegment = row.segmentID
            if decoder == nil || decoder!.plan != opened.plan || decoder!.layout != opened.header.stream.layout {
                let layout = opened.header.stream.layout
                if let buffers, buffers.byteCount != layout.byteCount {
                    throw SegmentStoreError.damaged(
                        file: opened.fileName, frame: 0, offset: 0,
                        detail: "frames of \(layout.byteCount) bytes, but the stream's frames have \(buffers.byteCount)"
                    )
                }
                decoder = FrameDecoder(layout: layout, chunkSize: opened.header.chunkSize, buffers: buffers)
            }
        }
        let reader = reader!
        let decoder = decoder!
        let (record, payload) = try reader.readRecord(at: row.fileOffset, frame: nil, verifyPayload: false)
        let frameNumber = Int(record.frameNumber)
        guard record.ptsNanoseconds == row.ptsNanoseconds else {
            throw SegmentStoreError.damaged(
                file: reader.fileName, frame: frameNumber, offset: row.fileOffset,
                detail: "record pts \(record.ptsNanoseconds) ns differs from the index's \(row.ptsNanoseconds) ns")
        }
        let hasPrevious = decodedSegment == row.segmentID && decodedEnd == row.fileOffset
        decodedSegment = -1
        do {
            try decoder.decode(payload, expectedCRC: record.storedCRC, hasPrevious: hasPrevious)
        } catch {
            throw SegmentStoreError.damaged(
                file: reader.fileName, frame: frameNumber, offset: row.fileOffset, detail: error.description)
        }
        store.countDecodedFrame()
        decodedSegment = row.segmentID
        decodedEnd = row.fileOffset + Int64(SegmentFormat.recordHeaderLength + record.storedLength)
        return decoder.frame
    }
}
