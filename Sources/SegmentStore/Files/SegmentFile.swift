import RewindCore
import RewindSQLite
import RewindSystem

/// The segment file format, version 1. All integers are little-endian; CRCs are CRC-32C (``CRC32C``).
///
/// A segment file holds the frames of one stream, in strictly increasing pts order:
///
///     +--------+----------+----------+-----+----------+--------+---------+
///     | header | record 0 | record 1 | ... | record n | footer | trailer |   sealed `NNNNNN.seg`
///     +--------+----------+----------+-----+----------+--------+---------+
///     | header | record 0 | record 1 | ... | (torn tail?)                   open `NNNNNN.seg.partial`
///
/// Header (`headerLength` = 70 + name bytes):
///
///     0   5  magic "RWSEG"
///     5   1  format version (1)
///     6   2  0x0D 0x0A (catches text-mode mangling)
///     8   4  u32 header length, including the CRC
///     12  1  pixel format (PixelFormat raw value)
///     13  1  colour matrix (ColorInfo.Matrix raw value)
///     14  1  colour range (ColorInfo.Range raw value)
///     15  1  chroma siting (ChromaSiting raw value; 0, not known, in files of builds that kept none)
///     16  4  u32 width
///     20  4  u32 height
///     24  8  i64 frame duration value
///     32  4  i32 frame duration timescale
///     36  4  u32 key interval K (a key frame at least every K frames)
///     40  4  u32 chunk size (see ChunkPlan)
///     44  2  u16 pixel aspect numerator (0: not known)
///     46  2  u16 pixel aspect denominator (0: not known)
///     48  8  u64 segment sequence number (the number in the file name)
///     56  8  i64 creation wall time, Unix ns
///     64  2  u16 stream name length n
///     66  n  stream name, UTF-8
///     66+n 4 CRC-32C of bytes 0 ..< 66+n
///
/// Record (one per frame, `recordHeaderLength` = 56 bytes, then the payload):
///
///     0   4  magic "RWFR"
///     4   4  u32 frame number in the segment (0, 1, 2, …)
///     8   8  i64 pts, ns
///     16  8  i64 wall time, Unix ns
///     24  8  u64 raw length (bytes of the decoded frame)
///     32  8  u64 stored length (bytes of payload that follow the header)
///     40  1  flags: bit 0 key frame (decodes alone)
///     41  1  codec (FrameCodec raw value: 0 raw, 1 lz4, 2 lz4 delta)
///     42  2  zero
///     44  4  stored CRC: CRC-32C of the payload's chunk table (which holds a CRC-32C of every chunk)
///     48  4  zero
///     52  4  CRC-32C of bytes 0 ..< 52
///     56  …  payload (see FrameEncoder)
///
/// Footer (written when sealed, right after the last record):
///
///     0   4  magic "RWFT"
///     4   4  zero
///     8   8  u64 frame count n
///     16  24n  per frame { u64 record offset, i64 pts ns, u8 flags, u8 codec, 6 × zero }
///     16+24n 4 CRC-32C of bytes 0 ..< 16+24n
///
/// Trailer (the last 32 bytes of a sealed file):
///
///     0   8  u64 footer offset
///     8   8  u64 footer length
///     16  4  CRC-32C of bytes 0 ..< 16
///     20  4  zero
///     24  8  magic "RWSEGEND"
///
/// A sealed file is read through its trailer and footer without any index; a torn or unsealed file is read by
/// scanning records from the header until one fails its checks.
package enum SegmentFormat {
    package static let version: UInt8 = 1
    package static let magic: [UInt8] = Array("RWSEG".utf8)
    package static let recordMagic: UInt32 = 0x5246_5752  // "RWFR" little-endian
    package static let footerMagic: UInt32 = 0x5446_5752  // "RWFT"
    package static let trailerMagic: [UInt8] = Array("RWSEGEND".utf8)
    package static let fixedHeaderLength = 70
    package static let recordHeaderLength = 56
    package static let footerEntryLength = 24
    package static let trailerLength = 32
    package static let keyFlag: UInt8 = 1
    package static let sealedSuffix = ".seg"
    package static let partialSuffix = ".seg.partial"

    /// `000042.seg` for sequence 42 (at least six digits).
    package static func fileName(sequence: UInt64, partial: Bool) -> String {
        var digits = String(sequence)
        if digits.count < 6 { digits = String(repeating: "0", count: 6 - digits.count) + digits }
        return digits + (partial ? partialSuffix : sealedSuffix)
    }

    /// The sequence number of a segment file name (`000042.seg` or `000042.seg.partial` → 42), or nil.
    package static func sequence(ofFileName name: String) -> UInt64? {
        let stem: Substring
        if name.hasSuffix(partialSuffix) {
            stem = name.dropLast(partialSuffix.count)
        } else if name.hasSuffix(sealedSuffix) {
            stem = name.dropLast(sealedSuffix.count)
        } else {
            return nil
        }
        guard !stem.isEmpty, stem.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return UInt64(stem)
    }

    /// The sequence number a segment file moved aside had (`000042.seg.unreadable`, `000042.seg.partial.unreadable-2`
    /// → 42), or nil for any other name: numbers that are not given again.
    package static func sequence(ofMovedAsideName name: String) -> UInt64? {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 3, parts[1] == "seg" else { return nil }
        let aside = parts[2] == "partial" && parts.count >= 4 ? parts[3] : parts[2]
        guard aside.hasPrefix("unreadable") else { return nil }
        return sequence(ofFileName: parts[0] + sealedSuffix)
    }
}

/// Little-endian field access on raw bytes.
extension UnsafeMutableRawPointer {
    @inline(__always)
    package func put<T: FixedWidthInteger>(_ value: T, at offset: Int) {
        storeBytes(of: value.littleEndian, toByteOffset: offset, as: T.self)
    }
}

extension UnsafeRawPointer {
    @inline(__always)
    package func get<T: FixedWidthInteger>(_ type: T.Type, at offset: Int) -> T {
        T(littleEndian: loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}

/// The parsed header of a segment file.
package struct SegmentHeader: Sendable, Hashable {
    package var stream: StreamDescription
    package var streamName: String
    package var sequence: UInt64
    package var keyInterval: Int
    package var chunkSize: Int
    package var createdWallNanoseconds: Int64
    package var formatVersion: UInt8 = SegmentFormat.version

    package init(
        stream: StreamDescription, streamName: String, sequence: UInt64, keyInterval: Int, chunkSize: Int,
        createdWallNanoseconds: Int64
    ) {
        self.stream = stream
        self.streamName = streamName
        self.sequence = sequence
        self.keyInterval = keyInterval
        self.chunkSize = chunkSize
        self.createdWallNanoseconds = createdWallNanoseconds
    }

    /// Bytes of the encoded header.
    package var length: Int { SegmentFormat.fixedHeaderLength + streamName.utf8.count }

    /// The header's bytes, CRC included.
    package func encoded() -> [UInt8] {
        let name = Array(streamName.utf8)
        precondition(name.count <= Int(UInt16.max), "stream name too long")
        var bytes = [UInt8](repeating: 0, count: length)
        bytes.withUnsafeMutableBytes { raw in
            let p = raw.baseAddress!
            for (i, b) in SegmentFormat.magic.enumerated() { p.put(b, at: i) }
            p.put(SegmentFormat.version, at: 5)
            p.put(UInt8(0x0D), at: 6)
            p.put(UInt8(0x0A), at: 7)
            p.put(UInt32(length), at: 8)
            p.put(stream.layout.format.rawValue, at: 12)
            p.put(stream.color.matrix.rawValue, at: 13)
            p.put(stream.color.range.rawValue, at: 14)
            p.put(stream.chromaSiting.rawValue, at: 15)
            p.put(UInt32(stream.layout.width), at: 16)
            p.put(UInt32(stream.layout.height), at: 20)
            p.put(stream.frameDuration.value, at: 24)
            p.put(stream.frameDuration.timescale, at: 32)
            p.put(UInt32(keyInterval), at: 36)
            p.put(UInt32(chunkSize), at: 40)
            p.put(stream.pixelAspect.numerator, at: 44)
            p.put(stream.pixelAspect.denominator, at: 46)
            p.put(sequence, at: 48)
            p.put(createdWallNanoseconds, at: 56)
            p.put(UInt16(name.count), at: 64)
            for (i, b) in name.enumerated() { p.put(b, at: 66 + i) }
            let crc = CRC32C.checksum(UnsafeRawBufferPointer(start: p, count: 66 + name.count))
            p.put(crc, at: 66 + name.count)
        }
        return bytes
    }

    /// Why a header could not be parsed.
    package enum ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        /// Fewer bytes than the header needs; `needed` is the full length when known.
        case truncated(needed: Int)
        case notASegment
        case unsupportedVersion(UInt8)
        case checksumMismatch
        case invalidField(String)

        package var description: String {
            switch self {
            case .truncated(let needed): "the file ends inside its header (\(needed) bytes needed)"
            case .notASegment: "no segment magic at its start"
            case .unsupportedVersion(let version): "segment format version \(version), this build reads 1"
            case .checksumMismatch: "header checksum mismatch"
            case .invalidField(let field): "impossible \(field) field"
            }
        }
    }

    /// Parses a header from the first bytes of a file.
    ///
    /// - Throws: ``ParseError``; `.truncated(needed:)` asks for more bytes.
    package static func parse(_ bytes: UnsafeRawBufferPointer) throws(ParseError) -> SegmentHeader {
        guard bytes.count >= SegmentFormat.fixedHeaderLength else {
            throw .truncated(needed: SegmentFormat.fixedHeaderLength)
        }
        let p = bytes.baseAddress!
        guard Array(bytes[0..<5]) == SegmentFormat.magic, bytes[6] == 0x0D, bytes[7] == 0x0A else {
            throw .notASegment
        }
        guard bytes[5] == SegmentFormat.version else { throw .unsupportedVersion(bytes[5]) }
        let length = Int(p.get(UInt32.self, at: 8))
        let nameLength = Int(p.get(UInt16.self, at: 64))
        guard length == SegmentFormat.fixedHeaderLength + nameLength else { throw .invalidField("header length") }
        guard bytes.count >= length else { throw .truncated(needed: length) }
        let crc = CRC32C.checksum(UnsafeRawBufferPointer(start: p, count: length - 4))
        guard crc == p.get(UInt32.self, at: length - 4) else { throw .checksumMismatch }
        guard let format = PixelFormat(rawValue: p.get(UInt8.self, at: 12)) else { throw .invalidField("pixel format") }
        guard let matrix = ColorInfo.Matrix(rawValue: p.get(UInt8.self, at: 13)),
            let range = ColorInfo.Range(rawValue: p.get(UInt8.self, at: 14))
        else { throw .invalidField("colour") }
        guard let siting = ChromaSiting(rawValue: p.get(UInt8.self, at: 15)) else {
            throw .invalidField("chroma siting")
        }
        let layout: FrameLayout
        do {
            layout = try FrameLayout(
                format: format, width: Int(p.get(UInt32.self, at: 16)), height: Int(p.get(UInt32.self, at: 20)))
        } catch {
            throw .invalidField("size")
        }
        let durationValue = p.get(Int64.self, at: 24)
        let timescale = p.get(Int32.self, at: 32)
        guard durationValue > 0, timescale > 0 else { throw .invalidField("frame duration") }
        let keyInterval = Int(p.get(UInt32.self, at: 36))
        let chunkSize = Int(p.get(UInt32.self, at: 40))
        guard keyInterval >= 1, chunkSize >= 4096 else { throw .invalidField("key interval or chunk size") }
        // Not UTF-8, the name would read back longer than it is (each bad byte a 3-byte U+FFFD), and so would the
        // header (``SegmentHeader/length``), putting every record at the wrong offset.
        guard let name = String(validating: UnsafeRawBufferPointer(start: p + 66, count: nameLength), as: UTF8.self)
        else { throw .invalidField("stream name (not UTF-8)") }
        return SegmentHeader(
            stream: StreamDescription(
                layout: layout, frameDuration: FrameTime(value: durationValue, timescale: timescale),
                color: ColorInfo(matrix: matrix, range: range), chromaSiting: siting,
                pixelAspect: PixelAspect(stored: p.get(UInt16.self, at: 44), p.get(UInt16.self, at: 46))),
            streamName: name, sequence: p.get(UInt64.self, at: 48), keyInterval: keyInterval, chunkSize: chunkSize,
            createdWallNanoseconds: p.get(Int64.self, at: 56))
    }
}

/// The fixed part of one frame record.
package struct RecordHeader: Sendable, Hashable {
    package var frameNumber: UInt32
    package var ptsNanoseconds: Int64
    package var wallNanoseconds: Int64
    package var rawLength: Int
    package var storedLength: Int
    package var flags: UInt8
    package var codec: UInt8
    package var storedCRC: UInt32

    package var isKey: Bool { flags & SegmentFormat.keyFlag != 0 }

    /// Writes the header (with its CRC) into the first ``SegmentFormat/recordHeaderLength`` bytes at `p`.
    package func write(to p: UnsafeMutableRawPointer) {
        p.put(SegmentFormat.recordMagic, at: 0)
        p.put(frameNumber, at: 4)
        p.put(ptsNanoseconds, at: 8)
        p.put(wallNanoseconds, at: 16)
        p.put(UInt64(rawLength), at: 24)
        p.put(UInt64(storedLength), at: 32)
        p.put(flags, at: 40)
        p.put(codec, at: 41)
        p.put(UInt16(0), at: 42)
        p.put(storedCRC, at: 44)
        p.put(UInt32(0), at: 48)
        p.put(CRC32C.checksum(UnsafeRawBufferPointer(start: p, count: 52)), at: 52)
    }

    /// Why bytes are not a valid record header.
    package enum ParseError: Error, Sendable, Hashable {
        case badMagic
        case checksumMismatch
        case invalidLength
    }

    /// Parses and checks a record header.
    package static func parse(_ p: UnsafeRawPointer) throws(ParseError) -> RecordHeader {
        guard p.get(UInt32.self, at: 0) == SegmentFormat.recordMagic else { throw .badMagic }
        guard CRC32C.checksum(UnsafeRawBufferPointer(start: p, count: 52)) == p.get(UInt32.self, at: 52) else {
            throw .checksumMismatch
        }
        let raw = p.get(UInt64.self, at: 24)
        let stored = p.get(UInt64.self, at: 32)
        guard raw < 1 << 40, stored < 1 << 40 else { throw .invalidLength }
        return RecordHeader(
            frameNumber: p.get(UInt32.self, at: 4), ptsNanoseconds: p.get(Int64.self, at: 8),
            wallNanoseconds: p.get(Int64.self, at: 16), rawLength: Int(raw), storedLength: Int(stored),
            flags: p.get(UInt8.self, at: 40), codec: p.get(UInt8.self, at: 41), storedCRC: p.get(UInt32.self, at: 44))
    }
}

/// One entry of a sealed file's footer (and one frame found by a scan).
package struct SegmentFrameEntry: Sendable, Hashable {
    package var offset: Int64
    package var ptsNanoseconds: Int64
    package var wallNanoseconds: Int64
    package var rawLength: Int
    package var storedLength: Int
    package var flags: UInt8
    package var codec: UInt8

    package var isKey: Bool { flags & SegmentFormat.keyFlag != 0 }
    /// Bytes of the whole record (header + payload).
    package var recordLength: Int { SegmentFormat.recordHeaderLength + storedLength }
}

extension SegmentFormat {
    /// The footer and trailer bytes for `entries`, with the footer starting at `footerOffset`.
    static func footerAndTrailer(entries: [SegmentFrameEntry], footerOffset: Int64) -> [UInt8] {
        let footerLength = 16 + footerEntryLength * entries.count + 4
        var bytes = [UInt8](repeating: 0, count: footerLength + trailerLength)
        bytes.withUnsafeMutableBytes { raw in
            let p = raw.baseAddress!
            p.put(footerMagic, at: 0)
            p.put(UInt64(entries.count), at: 8)
            for (i, e) in entries.enumerated() {
                let at = 16 + footerEntryLength * i
                p.put(UInt64(e.offset), at: at)
                p.put(e.ptsNanoseconds, at: at + 8)
                p.put(e.flags, at: at + 16)
                p.put(e.codec, at: at + 17)
            }
            p.put(CRC32C.checksum(UnsafeRawBufferPointer(start: p, count: footerLength - 4)), at: footerLength - 4)
            let t = p + footerLength
            t.put(UInt64(footerOffset), at: 0)
            t.put(UInt64(footerLength), at: 8)
            t.put(CRC32C.checksum(UnsafeRawBufferPointer(start: t, count: 16)), at: 16)
            for (i, b) in trailerMagic.enumerated() { t.put(b, at: 24 + i) }
        }
        return bytes
    }
}
