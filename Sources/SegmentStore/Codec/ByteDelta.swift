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

/// Puts bytes `start..<start + count` of an NV12 chroma plane (CbCr pairs), given in `source`, into their places in
/// the planar Cb and Cr planes `u` and `v` (byte j goes to `u[j / 2]` when j is even, `v[j / 2]` when odd), or adds
/// them there (wrapping) when `adding`. `start` and `count` may be odd: a pair may be cut by a chunk's edge.
@inline(__always)
func scatterChroma(
    _ source: UnsafeRawPointer, start: Int, count: Int, u: UnsafeMutableRawPointer, v: UnsafeMutableRawPointer,
    adding: Bool
) {
    guard count > 0 else { return }
    func put(_ byte: UInt8, at j: Int) {
        let plane = j & 1 == 0 ? u : v
        let old = adding ? plane.load(fromByteOffset: j >> 1, as: UInt8.self) : 0
        plane.storeBytes(of: old &+ byte, toByteOffset: j >> 1, as: UInt8.self)
    }
    var read = 0
    if start & 1 == 1 {
        put(source.load(as: UInt8.self), at: start)
        read = 1
    }
    // Whole pairs from here: pair i of the rest is Cb and Cr of sample `first + i`.
    let first = (start + read) >> 1
    let pairs = (count - read) >> 1
    var i = 0
    while i + 16 <= pairs {
        let words = source.loadUnaligned(fromByteOffset: read + 2 * i, as: SIMD16<UInt16>.self)
        var cb = SIMD16<UInt8>(truncatingIfNeeded: words)
        var cr = SIMD16<UInt8>(truncatingIfNeeded: words &>> 8)
        if adding {
            cb &+= u.loadUnaligned(fromByteOffset: first + i, as: SIMD16<UInt8>.self)
            cr &+= v.loadUnaligned(fromByteOffset: first + i, as: SIMD16<UInt8>.self)
        }
        u.storeBytes(of: cb, toByteOffset: first + i, as: SIMD16<UInt8>.self)
        v.storeBytes(of: cr, toByteOffset: first + i, as: SIMD16<UInt8>.self)
        i += 16
    }
    while i < pairs {
        put(source.load(fromByteOffset: read + 2 * i, as: UInt8.self), at: 2 * (first + i))
        put(source.load(fromByteOffset: read + 2 * i + 1, as: UInt8.self), at: 2 * (first + i) + 1)
        i += 1
    }
    if (count - read) & 1 == 1 { put(source.load(fromByteOffset: count - 1, as: UInt8.self), at: start + count - 1) }
}

/// The reverse of ``scatterChroma(_:start:count:u:v:adding:)`` without adding: bytes `start..<start + count` of
/// the NV12 chroma plane that the planar `u` and `v` hold, interleaved into `target`.
func gatherChroma(
    start: Int, count: Int, u: UnsafeRawPointer, v: UnsafeRawPointer, into target: UnsafeMutableRawPointer
) {
    for k in 0..<count {
        let j = start + k
        let plane = j & 1 == 0 ? u : v
        target.storeBytes(of: plane.load(fromByteOffset: j >> 1, as: UInt8.self), toByteOffset: k, as: UInt8.self)
    }
}
