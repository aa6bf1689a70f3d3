import Foundation
import RewindCore
import RewindMedia

/// Reads every frame of a source into memory (tests only).
func readAllFrames<Source: FrameSource>(_ source: inout Source) throws -> [(info: FrameInfo, bytes: [UInt8])] {
    var frames: [(info: FrameInfo, bytes: [UInt8])] = []
    var buffer = [UInt8](repeating: 0, count: source.stream.layout.byteCount)
    while let info = try buffer.withUnsafeMutableBytes({ try source.readFrame(into: $0) }) {
        frames.append((info, buffer))
    }
    return frames
}

/// Writes each frame with its pts to `sink` (tests only).
func writeFrames<Sink: FrameSink>(
    _ frames: [(info: FrameInfo, bytes: [UInt8])], layout: FrameLayout, to sink: inout Sink
) throws {
    for frame in frames {
        try frame.bytes.withUnsafeBytes { try sink.write(FrameView(layout: layout, info: frame.info, bytes: $0)) }
    }
}

/// A frame's info at `ptsNanoseconds`.
func info(ns ptsNanoseconds: Int64, color: ColorInfo = .bt709Video) throws -> FrameInfo {
    try FrameInfo(pts: FrameTime(nanoseconds: ptsNanoseconds), wallNanoseconds: ptsNanoseconds, color: color)
}

/// The I420 equivalent of an NV12 frame (chroma de-interleaved).
func convertNV12ToI420(_ bytes: [UInt8], layout: FrameLayout) -> [UInt8] {
    let lumaCount = layout.plane(0).byteCount
    let chroma = bytes[lumaCount...]
    let u = stride(from: chroma.startIndex, to: chroma.endIndex, by: 2).map { bytes[$0] }
    let v = stride(from: chroma.startIndex + 1, to: chroma.endIndex, by: 2).map { bytes[$0] }
    return Array(bytes[0..<lumaCount]) + u + v
}
