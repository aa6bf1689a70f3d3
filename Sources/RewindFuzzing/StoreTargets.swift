import RewindCore
import RewindSystem
import SegmentStore

extension FuzzTarget {
    /// A segment file as recovery, `verify` and salvage read it.
    ///
    /// Input: one byte (bit 0: repair the checksums first, see ``ChecksumRepair``), then the file. Holds: the
    /// header parses or is refused; the scan's records lie in order inside the file with increasing pts, a footer
    /// accepted agrees with them, records found past damage lie after it; every record accepted reads again with
    /// the raw length the header's layout gives, and decodes or is refused (never a trap or a read past its bytes).
    static let segment = FuzzTarget(
        name: "segment",
        summary: "segment files: header, scan, records past damage, footer, every frame decoded",
        seeds: StoreSeeds.segments
    ) { input, scratch throws(FuzzFailure) in
        let repair = input.byte() & 1 == 1
        var file = input.rest()
        if repair { ChecksumRepair.segment(&file) }
        let path = try scratch.write(file, as: "000001.seg")
        let reader: SegmentFileReader
        do throws(SegmentStoreError) {
            reader = try SegmentFileReader(path: path, fileSystem: POSIXFileSystem())
        } catch .io(let error) {
            throw FuzzFailure("the scratch file does not open: \(error)")
        } catch {
            return
        }
        defer { reader.close() }
        let scan: SegmentFileReader.ScanResult
        let tail: SegmentFileReader.TailScan
        do {
            scan = try reader.scan()
            tail = try reader.resynchronize(after: scan)
        } catch {
            throw FuzzFailure("reading the scratch file failed: \(error)")
        }
        let footer = try? reader.readFooter()
        guard scan.validEnd <= scan.fileSize, scan.fileSize == Int64(file.count) else {
            throw FuzzFailure("the scan ends at \(scan.validEnd) of \(scan.fileSize) bytes, the file has \(file.count)")
        }
        if scan.hasFooter, let footer, footer.map(\.offset) != scan.entries.map(\.offset) {
            throw FuzzFailure("the footer accepted does not list the records scanned")
        }
        let found =
            scan.entries.enumerated().map { ($0.offset, $0.element) }
            + tail.records.map { ($0.frameNumber, $0.entry) }
        for (earlier, later) in zip(found, found.dropFirst())
        where later.1.offset <= earlier.1.offset || later.1.ptsNanoseconds <= earlier.1.ptsNanoseconds
            || later.0 <= earlier.0
        {
            throw FuzzFailure("frame \(later.0) at byte \(later.1.offset) is not after frame \(earlier.0)")
        }
        if let first = tail.records.first, first.entry.offset <= scan.validEnd {
            throw FuzzFailure("a record found past the damage lies before it, at byte \(first.entry.offset)")
        }
        let layout = reader.header.stream.layout
        guard layout.byteCount <= FuzzTarget.largestFrame else { return }
        let decoder = FrameDecoder(layout: layout, chunkSize: reader.header.chunkSize)
        var decodedNumber: Int?
        for (number, entry) in found {
            let record: RecordHeader
            let payload: UnsafeRawBufferPointer
            do {
                (record, payload) = try reader.readRecord(at: entry.offset, frame: number)
            } catch {
                throw FuzzFailure("frame \(number) passed the scan but does not read again: \(error)")
            }
            guard record.rawLength == layout.byteCount, payload.count == record.storedLength else {
                throw FuzzFailure(
                    "frame \(number) reads as \(record.rawLength) raw bytes (\(payload.count) stored), the header's "
                        + "layout has \(layout.byteCount)")
            }
            do throws(FrameDecodeError) {
                try decoder.decode(payload, expectedCRC: record.storedCRC, hasPrevious: decodedNumber == number - 1)
                decodedNumber = number
            } catch {
                decodedNumber = nil
            }
        }
    }

    /// A frame's stored payload: its chunk table and chunks, decoded.
    ///
    /// Input: the frame's format, width, height, the chunk size, whether a previous frame is there (one byte each),
    /// then the payload, whose checksums are repaired. Holds: the payload decodes exactly when it verifies
    /// (``FrameDecoder/verify(_:plan:expectedCRC:)``), and either way without a trap or a byte read or written
    /// outside the payload and the frame.
    static let payload = FuzzTarget(
        name: "payload",
        summary: "frame payloads: chunk table, raw, LZ4 and delta chunks",
        seeds: StoreSeeds.payloads
    ) { input, _ throws(FuzzFailure) in
        let format = input.choice(PixelFormat.allCases)
        let width = input.number(in: 1...200)
        let height = input.number(in: 1...120)
        let chunkSize = input.choice([4096, 8192, 16384])
        let hasPrevious = input.byte() & 1 == 1
        var payload = input.rest()
        guard let layout = try? FrameLayout(format: format, width: width, height: height) else { return }
        let plan = ChunkPlan(layout: layout, chunkSize: chunkSize)
        let tableCRC = payload.withUnsafeMutableBytes { raw in
            raw.baseAddress.map { ChecksumRepair.table($0, count: raw.count, plan: plan) } ?? 0
        }
        let decoder = FrameDecoder(layout: layout, chunkSize: chunkSize)
        let (verified, decoded) = payload.withUnsafeBytes { bytes in
            (
                (try? FrameDecoder.verify(bytes, plan: plan, expectedCRC: tableCRC)) != nil,
                (try? decoder.decode(bytes, expectedCRC: tableCRC, hasPrevious: hasPrevious)) != nil
            )
        }
        if decoded && !verified { throw FuzzFailure("a payload that does not verify decodes") }
    }

    /// Frames encoded by the spill's encoder and decoded again.
    ///
    /// Input: the format, width, height, chunk size, codec policy, worker count, which frames are key frames, how
    /// many chunks may be compressed, how many frames, which frames are handed their previous frame (one byte each),
    /// then pixels the frames are made of. Holds: every frame decodes bit-exact, a key frame is marked key, and
    /// (but with a forced compressing codec) a payload is never larger than the raw frame and its table.
    static let codec = FuzzTarget(
        name: "codec",
        summary: "the frame encoder: encode, decode, bit-exact",
        seeds: StoreSeeds.codec
    ) { input, _ throws(FuzzFailure) in
        let format = input.choice(PixelFormat.allCases)
        let width = input.number(in: 1...160)
        let height = input.number(in: 1...96)
        let chunkSize = input.choice([4096, 8192, 65536])
        let policy = input.choice([CodecPolicy.automatic, .forced(.raw), .forced(.lz4), .forced(.lz4Delta)])
        let workers = input.number(in: 1...2)
        let keys = input.byte()
        let compressible = input.byte()
        let count = input.number(in: 1...4)
        let handsPrevious = input.byte()
        var pixels = input.rest()
        if pixels.isEmpty { pixels = [0] }
        guard let layout = try? FrameLayout(format: format, width: width, height: height) else { return }
        let headerSpace = SegmentFormat.recordHeaderLength
        let encoder = FrameEncoder(
            layout: layout, workerCount: workers, chunkSize: chunkSize, headerSpace: headerSpace, policy: policy)
        let decoder = FrameDecoder(layout: layout, chunkSize: chunkSize)
        let largestPayload = decoder.plan.tableLength + layout.byteCount
        var previous: [UInt8]?
        for k in 0..<count {
            // Each frame the pixels from a later start: frames alike but not equal, as a camera's are.
            let frame = (0..<layout.byteCount).map { pixels[($0 + 7 * k) % pixels.count] }
            let key = k == 0 || keys & (1 << k) != 0
            let limit = compressible == .max ? Int.max : Int(compressible)
            let encoded = frame.withUnsafeBytes { bytes in
                if handsPrevious & (1 << k) != 0, let previous {
                    return previous.withUnsafeBytes {
                        encoder.encode(bytes, key: key, previous: $0.baseAddress!, compressedChunks: limit)
                    }
                }
                return encoder.encode(bytes, key: key, compressedChunks: limit)
            }
            let record = encoder.recordBytes()
            guard record.count == headerSpace + encoded.storedLength else {
                throw FuzzFailure("frame \(k): a record of \(record.count) bytes for \(encoded.storedLength) stored")
            }
            if key && !encoded.isKey { throw FuzzFailure("frame \(k) was to be a key frame and is not") }
            let growing = policy == .forced(.lz4) || policy == .forced(.lz4Delta)
            if !growing && encoded.storedLength > largestPayload {
                throw FuzzFailure("frame \(k) stored in \(encoded.storedLength) bytes, more than raw")
            }
            let problem: String? = record.withUnsafeBytes { bytes in
                do throws(FrameDecodeError) {
                    try decoder.decode(
                        UnsafeRawBufferPointer(rebasing: bytes[headerSpace...]), expectedCRC: encoded.storedCRC,
                        hasPrevious: k > 0)
                    return decoder.frame.elementsEqual(frame) ? nil : "decodes to other bytes"
                } catch {
                    return "does not decode: \(error)"
                }
            }
            if let problem { throw FuzzFailure("frame \(k) (\(encoded.codec)) \(problem)") }
            previous = frame
        }
    }

    /// The losses and markers journals, as an index rebuilt from the files reads them.
    ///
    /// Input: one byte (bit 0: the markers journal, else the losses journal; bit 1: repair the checksums first),
    /// then the file. Holds: the valid records end inside the file; every record decoded, encoded again, decodes to
    /// the same record.
    static let journal = FuzzTarget(
        name: "journal",
        summary: "the losses and markers journals",
        seeds: StoreSeeds.journals
    ) { input, _ throws(FuzzFailure) in
        let choice = input.byte()
        var file = input.rest()
        if choice & 2 != 0 { ChecksumRepair.journal(&file) }
        if choice & 1 != 0 {
            try checkJournal(MarkerJournal.Contents.self, file, encode: MarkerJournal.encode)
        } else {
            try checkJournal(LossJournal.Contents.self, file, encode: LossJournal.encode)
        }
    }

    private static func checkJournal<Contents: JournalContents>(
        _: Contents.Type, _ file: [UInt8], encode: (Contents.Record) -> [UInt8]
    ) throws(FuzzFailure) where Contents.Record: Equatable {
        let contents = Contents.parse(file)
        guard contents.validLength <= Int64(file.count) else {
            throw FuzzFailure("valid records end at byte \(contents.validLength) of \(file.count)")
        }
        var failure: FuzzFailure?
        _ = JournalFraming.scan(file, magic: Contents.magic) { payload in
            guard let record = Contents.decode(payload) else { return false }
            let again = encode(record)
            let decoded = again.withUnsafeBytes { Contents.decode(UnsafeRawBufferPointer(rebasing: $0[8...])) }
            if decoded != record {
                failure = FuzzFailure("\(record) encodes to bytes that decode to \(decoded as Any)")
            }
            return true
        }
        if let failure { throw failure }
    }
}
