import RewindCore
import RewindSQLite
import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Reads one segment file: its header, records by offset, its footer, or every record by scanning.
///
/// Every record is checked (header CRC, frame number, lengths, chunk-table and chunk CRCs) before its bytes are
/// handed out; a failed check throws ``SegmentStoreError/damaged(file:frame:offset:detail:)``. Not thread-safe:
/// one owner. The descriptor is closed by ``close()`` or `deinit`.
package final class SegmentFileReader {
    package let fileName: String
    package let path: String
    package let header: SegmentHeader
    package let plan: ChunkPlan
    private let fileSystem: any FileSystem
    private var fd: Int32
    private let buffer = RecordStorage()

    /// Opens and parses the header of `path`.
    ///
    /// - Parameters:
    ///   - sharedLock: take a shared `flock` so retention does not delete the file while it is read.
    ///   - assumedHeader: read the file as having this header instead of parsing its own (a repair reading a file
    ///     whose header is damaged, with the header rebuilt from the index); its records are checked as usual.
    /// - Throws: ``SegmentStoreError/io(_:)`` when it cannot be opened, ``SegmentStoreError/notASegment(file:detail:)``
    ///   when its header is bad.
    package init(
        path: String, fileSystem: any FileSystem, sharedLock: Bool = false, assumedHeader: SegmentHeader? = nil
    ) throws(SegmentStoreError) {
        self.path = path
        self.fileName = String(path.split(separator: "/").last ?? Substring(path))
        self.fileSystem = fileSystem
        do {
            fd = try fileSystem.open(path, flags: O_RDONLY, mode: 0)
        } catch {
            throw .io(error)
        }
        do {
            if sharedLock { _ = try fileSystem.flock(fd, operation: LOCK_SH, path: path) }
        } catch {
            fileSystem.close(fd)
            throw .io(error)
        }
        if let assumedHeader {
            header = assumedHeader
            plan = ChunkPlan(layout: assumedHeader.stream.layout, chunkSize: assumedHeader.chunkSize)
            return
        }
        do {
            var want = SegmentFormat.fixedHeaderLength
            while true {
                let got = try fileSystem.readAll(
                    fd, into: UnsafeMutableRawBufferPointer(start: buffer.base, count: want), offset: 0, path: path)
                do {
                    header = try SegmentHeader.parse(UnsafeRawBufferPointer(start: buffer.base, count: got))
                    break
                } catch .truncated(let needed) where needed > got && got == want && needed <= buffer.count {
                    want = needed
                } catch {
                    throw SegmentStoreError.notASegment(file: fileName, detail: error.description)
                }
            }
        } catch let error as FileSystemError {
            fileSystem.close(fd)
            throw .io(error)
        } catch let error as SegmentStoreError {
            fileSystem.close(fd)
            throw error
        } catch {
            fileSystem.close(fd)
            throw .notASegment(file: fileName, detail: "\(error)")
        }
        plan = ChunkPlan(layout: header.stream.layout, chunkSize: header.chunkSize)
    }

    deinit { close() }

    /// Closes the file (and drops its lock). Idempotent.
    package func close() {
        if fd >= 0 {
            fileSystem.close(fd)
            fd = -1
        }
    }

    /// The current size of the file.
    package func size() throws(SegmentStoreError) -> Int64 {
        do { return try fileSystem.size(fd, path: path) } catch { throw .io(error) }
    }

    /// Reads and checks the record at `offset`.
    ///
    /// - Parameters:
    ///   - offset: the record's byte offset (from the index, the footer or a scan).
    ///   - frame: the frame number expected there (for the check and for messages), or nil to accept any.
    ///   - verifyPayload: also check the chunk table and every chunk CRC.
    /// - Returns: the record header and its payload, valid until the next read.
    /// - Throws: ``SegmentStoreError/damaged(file:frame:offset:detail:)`` when anything fails a check or the record
    ///   runs past the end of the file; ``SegmentStoreError/io(_:)`` on a read error.
    package func readRecord(at offset: Int64, frame: Int?, verifyPayload: Bool = true) throws(SegmentStoreError)
        -> (RecordHeader, UnsafeRawBufferPointer)
    {
        try readRecord(at: offset, frame: frame, verifyPayload: verifyPayload, into: buffer)
    }

    /// Reads and checks the record at `offset` into `buffer` (the caller's), where it stays until `buffer` is
    /// reused, whatever this reader reads next.
    func readRecord(at offset: Int64, frame: Int?, verifyPayload: Bool = true, into buffer: RecordStorage)
        throws(SegmentStoreError) -> (RecordHeader, UnsafeRawBufferPointer)
    {
        let frameLabel = frame ?? -1
        func damaged(_ detail: String) -> SegmentStoreError {
            .damaged(file: fileName, frame: frameLabel, offset: offset, detail: detail)
        }
        let headerLength = SegmentFormat.recordHeaderLength
        let got: Int
        do {
            got = try fileSystem.readAll(
                fd, into: UnsafeMutableRawBufferPointer(start: buffer.base, count: headerLength), offset: offset,
                path: path)
        } catch { throw .io(error) }
        guard got == headerLength else {
            throw damaged("record truncated (header has \(got) of \(headerLength) bytes)")
        }
        let record = try parseHeader(UnsafeRawPointer(buffer.base), damaged)
        if let frame, Int(record.frameNumber) != frame {
            throw damaged("record says frame \(record.frameNumber), expected frame \(frame)")
        }
        guard record.rawLength == header.stream.layout.byteCount else {
            throw damaged("raw length \(record.rawLength) does not match the stream's \(header.stream.layout)")
        }
        guard record.storedLength <= plan.largestPayload else {
            throw damaged(
                "record says \(record.storedLength) stored bytes, more than a frame of this stream can take "
                    + "(\(plan.largestPayload))")
        }
        buffer.ensureCapacity(record.storedLength)
        let payloadBuffer = UnsafeMutableRawBufferPointer(start: buffer.base, count: record.storedLength)
        let payloadGot: Int
        do {
            payloadGot = try fileSystem.readAll(
                fd, into: payloadBuffer, offset: offset + Int64(headerLength), path: path)
        } catch { throw .io(error) }
        guard payloadGot == record.storedLength else {
            throw damaged("record truncated (stored bytes \(payloadGot) of \(record.storedLength))")
        }
        let payload = UnsafeRawBufferPointer(payloadBuffer)
        if verifyPayload {
            do {
                try FrameDecoder.verify(payload, plan: plan, expectedCRC: record.storedCRC)
            } catch {
                throw damaged(error.description)
            }
        }
        return (record, payload)
    }

    /// Parses a record header, a failed check becoming the damage it describes.
    private func parseHeader(_ bytes: UnsafeRawPointer, _ damaged: (String) -> SegmentStoreError)
        throws(SegmentStoreError) -> RecordHeader
    {
        do {
            return try RecordHeader.parse(bytes)
        } catch .badMagic {
            throw damaged("no record here (bad magic)")
        } catch .checksumMismatch {
            throw damaged("record header checksum mismatch")
        } catch {
            throw damaged("record header has impossible lengths")
        }
    }

    /// Reads, checks and decodes the record at `offset` a chunk at a time, straight into `out`: raw chunks are read
    /// into their place in the frame, compressed ones into `storage` (one chunk's bytes) and decoded from there,
    /// so no buffer of the record's size is needed.
    ///
    /// Every check of ``readRecord(at:frame:verifyPayload:into:)`` and of the decoder is made: the record header,
    /// the pts and stored length the index expects, the chunk table's CRC, each chunk's length and CRC (before
    /// its bytes are used), and the payload's total length.
    ///
    /// - Parameters:
    ///   - previous: the previous frame of the segment (delta chunks add to it); may be `out` itself.
    /// - Returns: the record header.
    /// - Throws: ``SegmentStoreError/damaged(file:frame:offset:detail:)``, ``SegmentStoreError/io(_:)``; `out` may
    ///   then hold part of the frame.
    func decodeRecord(
        at offset: Int64, expectedPTS: Int64, expectedStoredLength: Int, decoder: FrameDecoder,
        into out: UnsafeMutableRawPointer, previous: UnsafeRawPointer?, storage: RecordStorage
    ) throws(SegmentStoreError) -> RecordHeader {
        let headerLength = SegmentFormat.recordHeaderLength
        let tableLength = plan.tableLength
        var frameLabel = -1
        func damaged(_ detail: String) -> SegmentStoreError {
            .damaged(file: fileName, frame: frameLabel, offset: offset, detail: detail)
        }
        storage.ensureCapacity(headerLength + tableLength)
        let got: Int
        do {
            got = try fileSystem.readAll(
                fd, into: UnsafeMutableRawBufferPointer(start: storage.base, count: headerLength + tableLength),
                offset: offset, path: path)
        } catch { throw .io(error) }
        guard got >= headerLength else {
            throw damaged("record truncated (header has \(got) of \(headerLength) bytes)")
        }
        let record = try parseHeader(UnsafeRawPointer(storage.base), damaged)
        frameLabel = Int(record.frameNumber)
        guard record.rawLength == header.stream.layout.byteCount else {
            throw damaged("raw length \(record.rawLength) does not match the stream's \(header.stream.layout)")
        }
        guard record.ptsNanoseconds == expectedPTS else {
            throw damaged("record pts \(record.ptsNanoseconds) ns differs from the index's \(expectedPTS) ns")
        }
        guard record.storedLength == expectedStoredLength else {
            throw damaged("record holds \(record.storedLength) stored bytes, the index says \(expectedStoredLength)")
        }
        guard record.storedLength >= tableLength, got == headerLength + tableLength else {
            throw damaged(FrameDecodeError.payloadTooShort(needed: tableLength, actual: got - headerLength).description)
        }
        // The table, copied out of `storage` (which the chunks reuse).
        let table = UnsafeRawBufferPointer(start: storage.base + headerLength, count: tableLength)
        guard CRC32C.checksum(table) == record.storedCRC else {
            throw damaged(FrameDecodeError.tableChecksumMismatch.description)
        }
        let count = Int(UInt32(littleEndian: table.baseAddress!.loadUnaligned(as: UInt32.self)))
        guard count == plan.count else {
            throw damaged(FrameDecodeError.chunkCountMismatch(expected: plan.count, actual: count).description)
        }
        var entries = [(codec: UInt8, length: Int, crc: UInt32)]()
        entries.reserveCapacity(count)
        for chunk in 0..<count {
            let entry = table.baseAddress! + 4 + 12 * chunk
            entries.append(
                (
                    UInt8(truncatingIfNeeded: UInt32(littleEndian: entry.loadUnaligned(as: UInt32.self))),
                    Int(UInt32(littleEndian: entry.loadUnaligned(fromByteOffset: 4, as: UInt32.self))),
                    UInt32(littleEndian: entry.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
                ))
        }
        var consumed = tableLength
        for (chunk, entry) in entries.enumerated() {
            guard entry.codec <= 2 else {
                throw damaged(FrameDecodeError.unknownChunkCodec(chunk: chunk, codec: entry.codec).description)
            }
            guard entry.length <= record.storedLength - consumed, entry.length <= plan.largestStored(chunk),
                entry.codec != 0 || entry.length == plan.lengths[chunk]
            else { throw damaged(FrameDecodeError.chunkLengthInvalid(chunk: chunk).description) }
            let target =
                entry.codec == 0
                ? out + plan.offsets[chunk]
                : { () -> UnsafeMutableRawPointer in
                    storage.ensureCapacity(entry.length)
                    return storage.base
                }()
            let read: Int
            do {
                read = try fileSystem.readAll(
                    fd, into: UnsafeMutableRawBufferPointer(start: target, count: entry.length),
                    offset: offset + Int64(headerLength + consumed), path: path)
            } catch { throw .io(error) }
            guard read == entry.length else {
                throw damaged("record truncated (stored bytes \(consumed + read) of \(record.storedLength))")
            }
            let stored = UnsafeRawBufferPointer(start: target, count: entry.length)
            guard CRC32C.checksum(stored) == entry.crc else {
                throw damaged(FrameDecodeError.chunkChecksumMismatch(chunk: chunk).description)
            }
            if entry.codec != 0 {
                do {
                    try decoder.decodeChunk(chunk, codec: entry.codec, stored: stored, into: out, previous: previous)
                } catch { throw damaged(error.description) }
            }
            consumed += entry.length
        }
        guard consumed == record.storedLength else {
            throw damaged(FrameDecodeError.payloadTooShort(needed: consumed, actual: record.storedLength).description)
        }
        return record
    }

    /// What a scan found.
    package struct ScanResult: Sendable {
        /// Every valid record, in file order.
        public var entries: [SegmentFrameEntry] = []
        /// The end of the last valid record: where a torn file is cut.
        public var validEnd: Int64
        /// The file's size.
        public var fileSize: Int64
        /// Whether a valid footer and trailer follow the last record.
        public var hasFooter = false
        /// The first problem, if the scan stopped before the end of the file.
        public var damage: SegmentStoreError?
    }

    /// The records from `offset` on whose headers are whole and valid, with pts after `previousPTS` and a payload
    /// that ends within the file, read by their headers alone: what follows the index's last frame in an open
    /// segment. Stops at the first that is not (a torn tail, a footer, damage); payloads are neither read nor checked.
    ///
    /// - Complexity: one read of ``SegmentFormat/recordHeaderLength`` bytes per record.
    package func recordHeaders(from offset: Int64, after previousPTS: Int64?) throws(SegmentStoreError)
        -> [RecordHeader]
    {
        let fileSize = try size()
        var headers: [RecordHeader] = []
        var offset = offset
        var previous = previousPTS
        var bytes = [UInt8](repeating: 0, count: SegmentFormat.recordHeaderLength)
        while fileSize - offset >= Int64(SegmentFormat.recordHeaderLength) {
            var got = 0
            var failure: FileSystemError?
            bytes.withUnsafeMutableBytes { raw in
                do throws(FileSystemError) {
                    got = try fileSystem.readAll(fd, into: raw, offset: offset, path: path)
                } catch {
                    failure = error
                }
            }
            if let failure { throw .io(failure) }
            guard got == bytes.count,
                let record = bytes.withUnsafeBytes({ try? RecordHeader.parse($0.baseAddress!) }),
                record.rawLength == header.stream.layout.byteCount, record.storedLength <= plan.largestPayload,
                previous.map({ record.ptsNanoseconds > $0 }) ?? true,
                fileSize - offset - Int64(SegmentFormat.recordHeaderLength) >= Int64(record.storedLength)
            else { break }
            headers.append(record)
            previous = record.ptsNanoseconds
            offset += Int64(SegmentFormat.recordHeaderLength + record.storedLength)
        }
        return headers
    }

    /// Reads every record from the header on, checking each, until the end, the footer or the first bad record.
    ///
    /// - Parameter verifyPayload: also check chunk CRCs (a full verify); false checks headers only.
    /// - Complexity: O(file size).
    package func scan(verifyPayload: Bool = true) throws(SegmentStoreError) -> ScanResult {
        let fileSize = try size()
        var result = ScanResult(validEnd: Int64(header.length), fileSize: fileSize)
        var offset = Int64(header.length)
        var previousPTS: Int64?
        while offset < fileSize {
            let frame = result.entries.count
            // A footer where the next record would be ends the records.
            if fileSize - offset >= 4 {
                var magic: UInt32 = 0
                _ = try? withUnsafeMutableBytes(of: &magic) { raw in
                    try fileSystem.readAll(fd, into: raw, offset: offset, path: path)
                }
                if UInt32(littleEndian: magic) == SegmentFormat.footerMagic {
                    if let footer = try? readFooter(), footer.count == frame,
                        zip(footer, result.entries).allSatisfy({
                            $0.offset == $1.offset && $0.ptsNanoseconds == $1.ptsNanoseconds
                        })
                    {
                        result.hasFooter = true
                    } else {
                        result.damage = .damaged(
                            file: fileName, frame: frame, offset: offset,
                            detail: "footer does not match the records")
                    }
                    break
                }
            }
            do throws(SegmentStoreError) {
                let (record, _) = try readRecord(at: offset, frame: frame, verifyPayload: verifyPayload)
                if let previousPTS, record.ptsNanoseconds <= previousPTS {
                    throw .damaged(
                        file: fileName, frame: frame, offset: offset,
                        detail: "pts \(record.ptsNanoseconds) ns is not after the previous frame's \(previousPTS) ns")
                }
                if frame == 0 && !record.isKey {
                    throw .damaged(
                        file: fileName, frame: frame, offset: offset, detail: "first frame is not a key frame")
                }
                previousPTS = record.ptsNanoseconds
                result.entries.append(
                    SegmentFrameEntry(
                        offset: offset, ptsNanoseconds: record.ptsNanoseconds, wallNanoseconds: record.wallNanoseconds,
                        rawLength: record.rawLength, storedLength: record.storedLength, flags: record.flags,
                        codec: record.codec))
                offset += Int64(SegmentFormat.recordHeaderLength + record.storedLength)
                result.validEnd = offset
            } catch {
                result.damage = error
                break
            }
        }
        return result
    }

    /// A valid record found past damage by ``resynchronize(after:)``.
    package struct FoundRecord: Sendable, Hashable {
        /// The frame number its header carries.
        public var frameNumber: Int
        /// Where the record is (its byte offset in the file) and what its header says: pts, wall time, lengths,
        /// flags and codec.
        public var entry: SegmentFrameEntry
    }

    /// What lies past the first damaged record of a file.
    package struct TailScan: Sendable {
        /// Every valid record after the damage, in file order.
        public var records: [FoundRecord] = []
        /// Each further damaged spot, in file order.
        public var damage: [SegmentStoreError] = []
    }

    /// Finds the valid records after the damage a scan stopped at.
    ///
    /// Searches forward from the damaged record for the record magic and accepts a record there only when every
    /// check passes: header CRC, lengths, raw length, chunk table and chunk CRCs, a frame number above and a pts
    /// after the last valid record's. From an accepted record it reads on record by record (frame numbers
    /// consecutive) until the next damage, where it searches again, or the footer or the end of the file.
    ///
    /// - Parameter scan: a scan of this file that stopped at damage; nothing is searched when it did not.
    /// - Returns: the valid records and the further damaged spots, in file order.
    /// - Throws: ``SegmentStoreError/io(_:)`` on a read error.
    /// - Complexity: O(bytes after the damage), plus one record read per magic found.
    package func resynchronize(after scan: ScanResult) throws(SegmentStoreError) -> TailScan {
        var tail = TailScan()
        guard scan.damage != nil else { return tail }
        let fileSize = scan.fileSize
        var previousNumber = scan.entries.count - 1
        var previousPTS = scan.entries.last?.ptsNanoseconds
        var searchFrom = scan.validEnd + 1
        var readingAt: Int64?
        let window = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { window.deallocate() }
        func accept(_ record: RecordHeader, at offset: Int64) -> Int64 {
            tail.records.append(
                FoundRecord(
                    frameNumber: Int(record.frameNumber),
                    entry: SegmentFrameEntry(
                        offset: offset, ptsNanoseconds: record.ptsNanoseconds, wallNanoseconds: record.wallNanoseconds,
                        rawLength: record.rawLength, storedLength: record.storedLength, flags: record.flags,
                        codec: record.codec)))
            previousNumber = Int(record.frameNumber)
            previousPTS = record.ptsNanoseconds
            return offset + Int64(SegmentFormat.recordHeaderLength + record.storedLength)
        }
        while true {
            if let offset = readingAt {
                guard offset < fileSize, try !isFooter(at: offset) else { break }
                do throws(SegmentStoreError) {
                    let (record, _) = try readRecord(at: offset, frame: previousNumber + 1, verifyPayload: true)
                    if let previousPTS, record.ptsNanoseconds <= previousPTS {
                        throw .damaged(
                            file: fileName, frame: previousNumber + 1, offset: offset,
                            detail:
                                "pts \(record.ptsNanoseconds) ns is not after the previous frame's \(previousPTS) ns")
                    }
                    readingAt = accept(record, at: offset)
                } catch .io(let error) {
                    throw .io(error)
                } catch {
                    tail.damage.append(error)
                    readingAt = nil
                    searchFrom = offset + 1
                }
            } else {
                guard let candidate = try nextRecordMagic(from: searchFrom, fileSize: fileSize, window: window) else {
                    break
                }
                if let record = (try? readRecord(at: candidate, frame: nil, verifyPayload: true))?.0,
                    Int(record.frameNumber) > previousNumber,
                    previousPTS.map({ record.ptsNanoseconds > $0 }) ?? true
                {
                    readingAt = accept(record, at: candidate)
                } else {
                    searchFrom = candidate + 1
                }
            }
        }
        return tail
    }

    /// Whether the footer magic is at `offset`.
    func isFooter(at offset: Int64) throws(SegmentStoreError) -> Bool {
        var magic: UInt32 = 0
        let got: Int
        do {
            got = try withUnsafeMutableBytes(of: &magic) { raw throws(FileSystemError) in
                try fileSystem.readAll(fd, into: raw, offset: offset, path: path)
            }
        } catch { throw .io(error) }
        return got == 4 && UInt32(littleEndian: magic) == SegmentFormat.footerMagic
    }

    /// The offset of the first record magic at or after `start`, or nil.
    private func nextRecordMagic(from start: Int64, fileSize: Int64, window: UnsafeMutableRawBufferPointer)
        throws(SegmentStoreError) -> Int64?
    {
        let magicLength = 4
        var position = start
        while position + Int64(magicLength) <= fileSize {
            let want = Int(min(Int64(window.count), fileSize - position))
            let got: Int
            do {
                got = try fileSystem.readAll(
                    fd, into: UnsafeMutableRawBufferPointer(rebasing: window[0..<want]), offset: position, path: path)
            } catch { throw .io(error) }
            guard got >= magicLength else { return nil }
            let base = UnsafeRawPointer(window.baseAddress!)
            var i = 0
            while i + magicLength <= got {
                guard let hit = memchr(base + i, 0x52, got - magicLength + 1 - i) else { break }
                i = UnsafeRawPointer(hit) - base
                if base.get(UInt32.self, at: i) == SegmentFormat.recordMagic { return position + Int64(i) }
                i += 1
            }
            position += Int64(got - magicLength + 1)
        }
        return nil
    }

    /// The footer of a sealed file, or nil when the file has no valid trailer and footer.
    ///
    /// Footer entries carry offsets, pts, flags and codec; wall times and lengths come from the records.
    package func readFooter() throws(SegmentStoreError) -> [SegmentFrameEntry]? {
        let fileSize = try size()
        guard fileSize >= Int64(header.length + SegmentFormat.trailerLength) else { return nil }
        var trailer = [UInt8](repeating: 0, count: SegmentFormat.trailerLength)
        let got: Int
        do {
            got = try trailer.withUnsafeMutableBytes { raw in
                try fileSystem.readAll(fd, into: raw, offset: fileSize - Int64(SegmentFormat.trailerLength), path: path)
            }
        } catch let error as FileSystemError {
            throw .io(error)
        } catch {
            return nil
        }
        guard got == SegmentFormat.trailerLength else { return nil }
        let (footerOffset, footerLength, ok) = trailer.withUnsafeBytes { raw in
            let p = raw.baseAddress!
            let ok =
                Array(raw[24..<32]) == SegmentFormat.trailerMagic
                && raw[20..<24].allSatisfy { $0 == 0 }  // the reserved bytes: outside the CRC, so checked here
                && CRC32C.checksum(UnsafeRawBufferPointer(start: p, count: 16)) == p.get(UInt32.self, at: 16)
            // Lengths from a damaged trailer may be anything: bound them before converting.
            let offset = p.get(UInt64.self, at: 0)
            let length = p.get(UInt64.self, at: 8)
            guard offset < 1 << 62, length < 1 << 40 else { return (Int64(0), 0, false) }
            return (Int64(offset), Int(length), ok)
        }
        guard ok, footerOffset >= Int64(header.length), footerLength >= 20,
            footerOffset + Int64(footerLength) + Int64(SegmentFormat.trailerLength) == fileSize
        else { return nil }
        buffer.ensureCapacity(footerLength)
        let bytes = UnsafeMutableRawBufferPointer(start: buffer.base, count: footerLength)
        do {
            guard try fileSystem.readAll(fd, into: bytes, offset: footerOffset, path: path) == footerLength else {
                return nil
            }
        } catch { throw .io(error) }
        let p = UnsafeRawPointer(buffer.base)
        guard p.get(UInt32.self, at: 0) == SegmentFormat.footerMagic,
            CRC32C.checksum(UnsafeRawBufferPointer(start: p, count: footerLength - 4))
                == p.get(UInt32.self, at: footerLength - 4)
        else { return nil }
        let storedCount = p.get(UInt64.self, at: 8)
        guard storedCount < 1 << 32 else { return nil }
        let count = Int(storedCount)
        guard 16 + SegmentFormat.footerEntryLength * count + 4 == footerLength else { return nil }
        let rawLength = header.stream.layout.byteCount
        return (0..<count).map { i in
            let at = 16 + SegmentFormat.footerEntryLength * i
            return SegmentFrameEntry(
                offset: Int64(bitPattern: p.get(UInt64.self, at: at)), ptsNanoseconds: p.get(Int64.self, at: at + 8),
                wallNanoseconds: 0, rawLength: rawLength, storedLength: 0, flags: p.get(UInt8.self, at: at + 16),
                codec: p.get(UInt8.self, at: at + 17))
        }
    }
}

/// A growable buffer that record bytes are read into.
final class RecordStorage {
    private(set) var bytes = ByteBuffer(count: 64 * 1024)

    var base: UnsafeMutableRawPointer { bytes.base }
    var count: Int { bytes.count }

    func ensureCapacity(_ count: Int) {
        if bytes.count < count { bytes = ByteBuffer(count: max(count, bytes.count * 2)) }
    }
}
