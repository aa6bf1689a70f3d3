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

/// Bytes of the prefix dictionary of a plain LZ4 chunk at `offset`: up to 64 KiB of the frame before it.
@inline(__always)
func prefixDictionaryLength(offset: Int) -> Int { min(offset, 64 * 1024) }
