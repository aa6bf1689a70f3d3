import Foundation
import RewindCore
import SegmentStore

/// Deterministic camera-like test frames: a gradient background, a moving textured square, and a band of
/// pseudo-random noise, so that raw, LZ4 and delta each have something to do.
struct TestFrames {
    let stream: StreamDescription
    var layout: FrameLayout { stream.layout }
    let buffer: UnsafeMutableRawBufferPointer

    init(format: PixelFormat = .nv12, width: Int = 320, height: Int = 240, fps: Int32 = 30) throws {
        let layout = try FrameLayout(format: format, width: width, height: height)
        stream = StreamDescription(
            layout: layout, frameDuration: FrameTime(value: 1, timescale: fps), color: .bt709Video)
        buffer = .allocate(byteCount: layout.byteCount, alignment: 64)
    }

    func deallocate() { buffer.deallocate() }

    /// The pts of frame `index`, ns.
    func pts(_ index: Int) -> Int64 {
        Int64(index) * stream.frameDuration.nanoseconds!
    }

    /// Fills the buffer with frame `index` and returns a view of it.
    func frame(_ index: Int, wall: Int64 = 1_700_000_000_000_000_000) -> FrameView {
        Self.fill(buffer, index: index, layout: layout)
        let info = try! FrameInfo(
            pts: FrameTime(nanoseconds: pts(index)), wallNanoseconds: wall + pts(index), color: stream.color)
        return FrameView(layout: layout, info: info, bytes: UnsafeRawBufferPointer(buffer))
    }

    static func fill(_ buffer: UnsafeMutableRawBufferPointer, index: Int, layout: FrameLayout) {
        let p = buffer.baseAddress!.assumingMemoryBound(to: UInt8.self)
        for plane in 0..<layout.planeCount {
            let pl = layout.plane(plane)
            let squareX = (index * 3) % max(1, pl.bytesPerRow / 2)
            let squareY = (index * 2) % max(1, pl.rows / 2)
            var seed = UInt32(truncatingIfNeeded: index &* 2_654_435_761 &+ plane)
            for row in 0..<pl.rows {
                let base = pl.offset + row * pl.bytesPerRow
                for column in 0..<pl.bytesPerRow {
                    var value = UInt8(truncatingIfNeeded: (row + column / 4) / 2 + plane * 40)
                    if row >= squareY && row < squareY + pl.rows / 4 && column >= squareX
                        && column < squareX + pl.bytesPerRow / 4
                    {
                        value = UInt8(truncatingIfNeeded: (row * 5) ^ (column * 3) ^ index)
                    }
                    if row % 16 == 15 {
                        seed = seed &* 1_664_525 &+ 1_013_904_223
                        value = UInt8(truncatingIfNeeded: seed >> 24)
                    }
                    p[base + column] = value
                }
            }
        }
    }

    /// A checksum of frame `index` as the generator makes it.
    func expectedDigest(_ index: Int) -> UInt32 {
        Self.fill(buffer, index: index, layout: layout)
        return CRC32C.checksum(UnsafeRawBufferPointer(buffer))
    }
}

/// Reads every frame of the store and returns (pts, CRC of bytes) pairs.
///
/// - Parameter twoThreads: share each frame's chunks out between two threads, into 5 caller-owned buffers.
func readAll(_ store: SegmentStore, range: Range<Int64> = Int64.min..<Int64.max, twoThreads: Bool = false) throws
    -> [(Int64, UInt32)]
{
    var out: [(Int64, UInt32)] = []
    // A store whose only segment lost its header has no stream: then there is nothing to read.
    guard let stream = try store.streams().first else { return [] }
    let buffers = twoThreads ? DecodeBuffers(byteCount: stream.description.layout.byteCount, count: 5) : nil
    try store.frames(in: range, into: buffers, decodeThreads: twoThreads ? 2 : 1) { frame in
        out.append((frame.info.ptsNanoseconds, CRC32C.checksum(frame.bytes)))
        return true
    }
    return out
}

/// Writes `bytes` to `path`, replacing it.
func writeFile(_ path: String, _ bytes: some Sequence<UInt8>) throws {
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}
