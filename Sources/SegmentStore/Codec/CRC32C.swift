import CCRC32C
import RewindCore
import RewindSQLite
import RewindSystem

/// CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected as 0x82F63B78), computed eight bytes at a time with the
/// slicing-by-8 tables. This is the checksum of every segment header, record header, chunk and footer.
///
/// The check value of the ASCII bytes `123456789` is `0xE3069283`.
package enum CRC32C {
    /// Eight 256-entry tables; table 0 is the classic byte-at-a-time table, table k advances a byte k places.
    private static let tables: [UInt32] = {
        var t = [UInt32](repeating: 0, count: 8 * 256)
        for i in 0..<256 {
            var crc = UInt32(i)
            for _ in 0..<8 { crc = (crc & 1) != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            t[i] = crc
        }
        for i in 0..<256 {
            for k in 1..<8 {
                let previous = t[(k - 1) * 256 + i]
                t[k * 256 + i] = (previous >> 8) ^ t[Int(previous & 0xFF)]
            }
        }
        return t
    }()

    /// The CRC-32C of `bytes`, continuing from `crc` (pass the result of a previous call to checksum a sequence
    /// of buffers as one).
    ///
    /// - Complexity: O(n).
    package static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return crc }
        if hasHardware { return ~rewind_crc32c_hardware(~crc, base, bytes.count) }
        return softwareChecksum(base, count: bytes.count, continuing: crc)
    }

    /// Whether the processor's CRC32 instruction is used (SSE4.2 on x86-64); otherwise slicing-by-8 tables.
    package static let hasHardware = rewind_crc32c_has_hardware() != 0

    /// The table-driven checksum (slicing-by-8), used where the processor has no CRC32 instruction.
    static func softwareChecksum(_ base: UnsafeRawPointer, count: Int, continuing crc: UInt32 = 0) -> UInt32 {
        tables.withUnsafeBufferPointer { table in
            let t = table.baseAddress!
            var c = ~crc
            var p = base
            var n = count
            while n >= 8 {
                let word = UInt64(littleEndian: p.loadUnaligned(as: UInt64.self))
                let lo = UInt32(truncatingIfNeeded: word) ^ c
                let hi = UInt32(truncatingIfNeeded: word >> 32)
                c =
                    t[7 * 256 + Int(lo & 0xFF)] ^ t[6 * 256 + Int((lo >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((lo >> 16) & 0xFF)] ^ t[4 * 256 + Int(lo >> 24)]
                    ^ t[3 * 256 + Int(hi & 0xFF)] ^ t[2 * 256 + Int((hi >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((hi >> 16) & 0xFF)] ^ t[Int(hi >> 24)]
                p += 8
                n -= 8
            }
            while n > 0 {
                c = (c >> 8) ^ t[Int((c ^ UInt32(p.load(as: UInt8.self))) & 0xFF)]
                p += 1
                n -= 1
            }
            return ~c
        }
    }

    /// The CRC-32C of an array of bytes.
    package static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}
