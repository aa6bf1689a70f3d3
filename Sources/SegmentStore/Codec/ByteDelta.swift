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

/// Byte-wise wrapping difference `out[i] = current[i] &- previous[i]`, 32 bytes at a time.
@inline(__always)
func subtractBytes(
    _ current: UnsafeRawPointer, _ previous: UnsafeRawPointer, into out: UnsafeMutableRawPointer, count: Int
) {
    var i = 0
    while i + 32 <= count {
        let a = current.loadUnaligned(fromByteOffset: i, as: SIMD32<UInt8>.self)
        let b = previous.loadUnaligned(fromByteOffset: i, as: SIMD32<UInt8>.self)
        out.storeBytes(of: a &- b, toByteOffset: i, as: SIMD32<UInt8>.self)
        i += 32
    }
    while i < count {
        out.storeBytes(
            of: current.load(fromByteOffset: i, as: UInt8.self) &- previous.load(fromByteOffset: i, as: UInt8.self),
            toByteOffset: i, as: UInt8.self)
        i += 1
    }
}

/// Byte-wise wrapping sum: `target[i] = base[i] &+ delta[i]`, 32 bytes at a time. `base` may be `target` (in
/// place): each byte is read before it is written.
@inline(__always)
func addBytes(
    _ delta: UnsafeRawPointer, _ base: UnsafeRawPointer, into target: UnsafeMutableRawPointer, count: Int
) {
    var i = 0
    while i + 32 <= count {
        let a = base.loadUnaligned(fromByteOffset: i, as: SIMD32<UInt8>.self)
        let b = delta.loadUnaligned(fromByteOffset: i, as: SIMD32<UInt8>.self)
        target.storeBytes(of: a &+ b, toByteOffset: i, as: SIMD32<UInt8>.self)
        i += 32
    }
    while i < count {
        target.storeBytes(
            of: base.load(fromByteOffset: i, as: UInt8.self) &+ delta.load(fromByteOffset: i, as: UInt8.self),
            toByteOffset: i, as: UInt8.self)
        i += 1
    }
}

/// A heap buffer with one owner, freed in `deinit`.
final class ByteBuffer {
    let base: UnsafeMutableRawPointer
    let count: Int

    init(count: Int) {
        self.count = count
        base = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 64)
    }

    deinit { base.deallocate() }

    var bytes: UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(start: base, count: count) }
}
