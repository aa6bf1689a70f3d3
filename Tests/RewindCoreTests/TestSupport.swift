import RewindTesting
import Synchronization
import Testing

@testable import RewindCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The byte at `index` of the test frame identified by `seed` (its pts): every frame's bytes differ.
@inline(__always)
func patternByte(seed: Int64, index: Int) -> UInt8 {
    let mixed = UInt64(bitPattern: seed) &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(index) &* 0x0000_0100_0000_01B3
    return UInt8(truncatingIfNeeded: mixed >> 29)
}

func fillPattern(_ buffer: UnsafeMutableRawBufferPointer, seed: Int64) {
    for index in 0..<buffer.count { buffer[index] = patternByte(seed: seed, index: index) }
}

func matchesPattern(_ buffer: UnsafeRawBufferPointer, seed: Int64) -> Bool {
    for index in 0..<buffer.count where buffer[index] != patternByte(seed: seed, index: index) { return false }
    return true
}

func makeInfo(_ nanoseconds: Int64) -> FrameInfo {
    try! FrameInfo(pts: FrameTime(nanoseconds: nanoseconds), wallNanoseconds: nanoseconds, color: .bt709Video)
}

func layout(_ format: PixelFormat, _ width: Int, _ height: Int) -> FrameLayout {
    try! FrameLayout(format: format, width: width, height: height)
}

/// Caller-owned planes for a test frame, rows padded by `padding` bytes, whose packed bytes equal the pattern.
final class SourceFrame {
    let layout: FrameLayout
    private var buffers: [UnsafeMutableRawBufferPointer] = []
    private var strides: [Int] = []

    init(layout: FrameLayout, seed: Int64, padding: Int = 0) {
        self.layout = layout
        for index in 0..<layout.planeCount {
            let plane = layout.plane(index)
            let stride = plane.bytesPerRow + padding
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: stride * plane.rows, alignment: 64)
            buffer.initializeMemory(as: UInt8.self, repeating: 0xEE)
            for row in 0..<plane.rows {
                for x in 0..<plane.bytesPerRow {
                    let packed = plane.offset + row * plane.bytesPerRow + x
                    buffer[row * stride + x] = patternByte(seed: seed, index: packed)
                }
            }
            buffers.append(buffer)
            strides.append(stride)
        }
    }

    deinit { for buffer in buffers { buffer.deallocate() } }

    func source(_ index: Int, byteCount: Int? = nil, bytesPerRow: Int? = nil) -> PlaneSource {
        PlaneSource(
            base: UnsafeRawPointer(buffers[index].baseAddress!), byteCount: byteCount ?? buffers[index].count,
            bytesPerRow: bytesPerRow ?? strides[index])
    }

    var planes: PlaneSources {
        switch layout.planeCount {
        case 1: PlaneSources(source(0))
        case 2: PlaneSources(source(0), source(1))
        default: PlaneSources(source(0), source(1), source(2))
        }
    }
}

/// Keeps an evicted frame (and so its slab) alive.
final class HeldFrame: Sendable {
    let frame: EvictedFrame
    init(_ frame: consuming EvictedFrame) { self.frame = frame }
}

/// Records what the eviction handler receives, checking each frame's bytes against its pattern.
final class EvictionLog: Sendable {
    struct Entry: Sendable, Equatable {
        var sequence: UInt64
        var pts: Int64
        var bytesMatch: Bool
    }

    private let entries = Mutex<[Entry]>([])
    private let held = Mutex<[HeldFrame]>([])
    /// When true, the handler keeps the evicted frames (their slabs stay out of the pool) until `releaseHeld`.
    let keepsFrames: Bool

    init(keepsFrames: Bool = false) { self.keepsFrames = keepsFrames }

    var handler: @Sendable (consuming EvictedFrame) -> Void {
        { [self] frame in
            let entry = frame.withView { view in
                Entry(
                    sequence: frame.sequence, pts: view.info.ptsNanoseconds,
                    bytesMatch: matchesPattern(view.bytes, seed: view.info.ptsNanoseconds))
            }
            entries.withAnnotatedLock { $0.append(entry) }
            if keepsFrames {
                let box = HeldFrame(frame)
                held.withAnnotatedLock { $0.append(box) }
            }
        }
    }

    var all: [Entry] { entries.withAnnotatedLock { $0 } }

    func releaseHeld() { held.withAnnotatedLock { $0.removeAll() } }
}

/// The resident set size of this process, from `/proc/self/statm`.
func residentBytes() -> Int {
    let descriptor = open("/proc/self/statm", O_RDONLY)
    guard descriptor >= 0 else { return -1 }
    defer { close(descriptor) }
    var buffer = [UInt8](repeating: 0, count: 256)
    let length = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
    guard length > 0 else { return -1 }
    let fields = buffer[0..<length].split(separator: UInt8(ascii: " "))
    guard fields.count >= 2, let pages = Int(String(decoding: fields[1], as: UTF8.self)) else { return -1 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// Runs `body` on a new POSIX thread; join it with ``join(_:)``.
final class TestThread: @unchecked Sendable {
    private let body: @Sendable () -> Void
    private var thread = pthread_t()

    init(_ body: @escaping @Sendable () -> Void) {
        self.body = body
        let context = Unmanaged.passRetained(self).toOpaque()
        let result = pthread_create(
            &thread, nil,
            { context in
                let box = Unmanaged<TestThread>.fromOpaque(context!).takeRetainedValue()
                box.body()
                return nil
            }, context)
        precondition(result == 0, "pthread_create failed: \(result)")
    }

    func join() { pthread_join(thread, nil) }
}

/// Checks the accounting identities of a ring's statistics.
func expectConsistent(_ stats: RingStatistics, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(
        stats.mappedBytes
            == stats.freeBytes + stats.reservedBytes + stats.bytesInRing + stats.bytesOutsideRing
            + stats.unmappingBytes, sourceLocation: sourceLocation)
    #expect(stats.pinnedBytesOutsideRing <= stats.bytesOutsideRing, sourceLocation: sourceLocation)
    #expect(stats.frames <= stats.frameCapacity, sourceLocation: sourceLocation)
    #expect(stats.pinnedFramesInRing <= stats.frames, sourceLocation: sourceLocation)
}
