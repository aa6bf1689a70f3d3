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

/// Plain LZ4 block compression (acceleration 1, like `lz4 -1`), the reference the codec is measured against.
package enum LZ4Block {
    /// The largest compressed size of `count` bytes.
    package static func compressBound(_ count: Int) -> Int { Int(LZ4_compressBound(Int32(count))) }

    /// Compresses `source` into `destination` (at least ``compressBound(_:)`` bytes) with `LZ4_compress_fast`,
    /// acceleration 1, as one block.
    ///
    /// - Returns: the compressed size (0 when it does not fit).
    package static func compress(_ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer)
        -> Int
    {
        Int(
            LZ4_compress_fast(
                source.baseAddress!.assumingMemoryBound(to: CChar.self),
                destination.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(source.count),
                Int32(destination.count), 1))
    }
}

extension LZ4Block {
    /// Whether the LZ4 block `stored`, decoded without a dictionary, is exactly `count` zero bytes: every literal is
    /// zero (so every match copies zeros), every match reaches only bytes already decoded, the block ends with its
    /// literals, and the lengths add up to `count`. Reads only the block's tokens and literals, about a thousandth
    /// of the work of decoding an unchanged 256 KiB chunk's residual (runs of zeros are slow to expand).
    ///
    /// Stricter than the decoder: a block it rejects may still decode (then to something else, or to zeros the slow
    /// way), but a block it accepts decodes to `count` zeros.
    ///
    /// - Complexity: O(`stored.count`).
    package static func decodesToZeros(_ stored: UnsafeRawBufferPointer, count: Int) -> Bool {
        guard let base = stored.baseAddress, count > 0 else { return false }
        let end = stored.count
        var input = 0
        var output = 0
        /// Reads a length's extension bytes (each 255 adds and continues), or nil past the end.
        func extended(_ length: Int) -> Int? {
            var length = length
            while true {
                guard input < end else { return nil }
                let byte = Int(base.load(fromByteOffset: input, as: UInt8.self))
                input += 1
                length += byte
                if byte != 255 { return length }
                if length > count { return nil }
            }
        }
        while input < end {
            let token = Int(base.load(fromByteOffset: input, as: UInt8.self))
            input += 1
            var literals = token >> 4
            if literals == 15 {
                guard let length = extended(literals) else { return false }
                literals = length
            }
            guard literals <= end - input, literals <= count - output else { return false }
            guard allZero(base + input, literals) else { return false }
            input += literals
            output += literals
            // The last sequence holds literals only.
            if input == end { return output == count }
            guard end - input >= 2 else { return false }
            let offset =
                Int(base.load(fromByteOffset: input, as: UInt8.self))
                | Int(base.load(fromByteOffset: input + 1, as: UInt8.self)) << 8
            input += 2
            guard offset >= 1, offset <= output else { return false }
            var match = token & 15
            if match == 15 {
                guard let length = extended(match) else { return false }
                match = length
            }
            match += 4
            // A block's last match starts at least 12 bytes before its end, and its last 5 bytes are literals.
            guard output <= count - 12, match <= count - 5 - output else { return false }
            output += match
        }
        return false
    }

    /// Whether the `count` bytes at `start` are all zero.
    @inline(__always)
    private static func allZero(_ start: UnsafeRawPointer, _ count: Int) -> Bool {
        var i = 0
        while i + 8 <= count {
            if start.loadUnaligned(fromByteOffset: i, as: UInt64.self) != 0 { return false }
            i += 8
        }
        while i < count {
            if start.load(fromByteOffset: i, as: UInt8.self) != 0 { return false }
            i += 1
        }
        return true
    }
}

/// Bytes of the prefix dictionary of a plain LZ4 chunk at `offset`: up to 64 KiB of the frame before it.
@inline(__always)
func prefixDictionaryLength(offset: Int) -> Int { min(offset, 64 * 1024) }
