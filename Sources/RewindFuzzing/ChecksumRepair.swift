import RewindCore
import SegmentStore

/// Rewrites the checksums of fuzzed bytes so that they hold, leaving every other byte as the fuzzer made it.
///
/// A fuzzer cannot guess a CRC-32C, so without this almost every mutation would stop at the first checksum: what it
/// exercises then is the code behind the checksums — parsers and decoders handed bytes whose checksums hold (a
/// faulty writer, or damage that happens to pass, one in four billion).
enum ChecksumRepair {
    /// A segment file's header, record headers, chunk tables and chunks, footer and trailer (see ``SegmentFormat``),
    /// as far as the structure can be followed.
    static func segment(_ file: inout [UInt8]) {
        file.withUnsafeMutableBytes { raw in
            let count = raw.count
            guard count >= SegmentFormat.fixedHeaderLength, let base = raw.baseAddress else { return }
            let headerLength = SegmentFormat.fixedHeaderLength + Int(UnsafeRawPointer(base).get(UInt16.self, at: 64))
            guard headerLength <= count else { return }
            seal(base, from: 0, to: headerLength - 4)
            guard let header = try? SegmentHeader.parse(UnsafeRawBufferPointer(start: base, count: headerLength))
            else { return }
            let plan = ChunkPlan(layout: header.stream.layout, chunkSize: header.chunkSize)
            var offset = headerLength
            while count - offset >= 4 {
                let magic = UnsafeRawPointer(base).get(UInt32.self, at: offset)
                if magic == SegmentFormat.footerMagic {
                    footer(base, at: offset, count: count)
                    return
                }
                guard magic == SegmentFormat.recordMagic, count - offset >= SegmentFormat.recordHeaderLength else {
                    return
                }
                let stored = UnsafeRawPointer(base).get(UInt64.self, at: offset + 32)
                let payload = offset + SegmentFormat.recordHeaderLength
                if stored <= UInt64(count - payload) {
                    let tableCRC = table(base + payload, count: Int(stored), plan: plan)
                    base.put(tableCRC, at: offset + 44)
                }
                seal(base, from: offset, to: offset + 52)
                guard stored <= UInt64(count - payload) else { return }
                offset = payload + Int(stored)
            }
        }
    }

    /// A frame payload's chunk CRCs, for `plan`.
    ///
    /// - Returns: the CRC of its chunk table (what the record header stores).
    @discardableResult
    static func table(_ payload: UnsafeMutableRawPointer, count: Int, plan: ChunkPlan) -> UInt32 {
        guard count >= plan.tableLength else {
            return CRC32C.checksum(UnsafeRawBufferPointer(start: payload, count: count))
        }
        let chunks = min(Int(UnsafeRawPointer(payload).get(UInt32.self, at: 0)), plan.count)
        var cursor = plan.tableLength
        for chunk in 0..<chunks {
            let entry = 4 + 12 * chunk
            let length = Int(UnsafeRawPointer(payload).get(UInt32.self, at: entry + 4))
            guard length <= count - cursor else { break }
            payload.put(CRC32C.checksum(UnsafeRawBufferPointer(start: payload + cursor, count: length)), at: entry + 8)
            cursor += length
        }
        return CRC32C.checksum(UnsafeRawBufferPointer(start: payload, count: plan.tableLength))
    }

    /// A footer at `offset` and the trailer at the end of the file.
    private static func footer(_ base: UnsafeMutableRawPointer, at offset: Int, count: Int) {
        guard count - offset >= 16 else { return }
        let entries = UnsafeRawPointer(base).get(UInt64.self, at: offset + 8)
        if entries < UInt64(count) {
            let length = 16 + SegmentFormat.footerEntryLength * Int(entries)
            if length + 4 <= count - offset { seal(base, from: offset, to: offset + length) }
        }
        let trailer = count - SegmentFormat.trailerLength
        if trailer >= offset { seal(base, from: trailer, to: trailer + 16) }
    }

    /// A journal's record checksums (see ``JournalFraming``).
    static func journal(_ file: inout [UInt8]) {
        file.withUnsafeMutableBytes { raw in
            guard let base = raw.baseAddress else { return }
            var offset = 8
            while raw.count - offset >= 8 {
                let length = Int(UnsafeRawPointer(base).get(UInt32.self, at: offset))
                guard length <= raw.count - offset - 8 else { return }
                base.put(
                    CRC32C.checksum(UnsafeRawBufferPointer(start: base + offset + 8, count: length)), at: offset + 4)
                offset += 8 + length
            }
        }
    }

    /// Stores the CRC-32C of bytes `start ..< end` at `end`.
    private static func seal(_ base: UnsafeMutableRawPointer, from start: Int, to end: Int) {
        base.put(CRC32C.checksum(UnsafeRawBufferPointer(start: base + start, count: end - start)), at: end)
    }
}
