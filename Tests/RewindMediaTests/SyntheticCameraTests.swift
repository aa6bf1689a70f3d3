import Foundation
import RewindCore
import RewindMedia
import Testing

@Suite struct SyntheticCameraTests {
    static let formats = PixelFormat.allCases
    let duration = FrameTime(value: 1, timescale: 60)

    func camera(_ format: PixelFormat, width: Int = 160, height: Int = 90, noise: Double = 0, seed: UInt64 = 1)
        throws -> SyntheticCamera
    {
        SyntheticCamera(
            layout: try FrameLayout(format: format, width: width, height: height), frameDuration: duration,
            noise: noise, seed: seed, startWallNanoseconds: 1_000)
    }

    @Test(arguments: formats)
    func sameParametersGiveSameBytes(format: PixelFormat) throws {
        var a = try camera(format, noise: 2)
        var b = try camera(format, noise: 2)
        let other = try camera(format, noise: 2, seed: 7)
        var bufferA = [UInt8](repeating: 0, count: a.stream.layout.byteCount)
        var bufferB = bufferA
        for index in 0..<5 {
            let infoA = try bufferA.withUnsafeMutableBytes { try a.readFrame(into: $0) }
            let infoB = try bufferB.withUnsafeMutableBytes { try b.readFrame(into: $0) }
            #expect(bufferA == bufferB)
            #expect(infoA == infoB)
            #expect(infoA?.pts == FrameTime(value: Int64(index), timescale: 60))
            #expect(infoA?.wallNanoseconds == 1_000 + Int64(index) * 1_000_000_000 / 60)
            #expect(try a.frameBytes(at: Int64(index)) == bufferA)
            #expect(try other.frameBytes(at: Int64(index)) != bufferA)
        }
    }

    @Test(arguments: formats)
    func markVerifiesAndAnyFlippedBitFails(format: PixelFormat) throws {
        let camera = try camera(format, width: 97, height: 35, noise: 1.5)
        let layout = camera.stream.layout
        var bytes = try camera.frameBytes(at: 1234)
        let info = try FrameInfo(pts: FrameTime(value: 0, timescale: 60), wallNanoseconds: 0, color: .bt709Video)
        let mark = bytes.withUnsafeBytes { SyntheticCamera.verify(FrameView(layout: layout, info: info, bytes: $0)) }
        #expect(mark?.index == 1234)
        // Every byte of the mark, and a spread of bytes over every plane, with each of their bits.
        var positions = Array(0..<(2 * layout.plane(0).bytesPerRow))
        positions += stride(from: 0, to: layout.byteCount, by: 13)
        positions.append(layout.byteCount - 1)
        var undetected: [Int] = []
        for position in positions {
            for bit in 0..<8 {
                bytes[position] ^= 1 << bit
                let flipped = bytes.withUnsafeBytes {
                    SyntheticCamera.verify(FrameView(layout: layout, info: info, bytes: $0))
                }
                if flipped != nil { undetected.append(position * 8 + bit) }
                bytes[position] ^= 1 << bit
            }
        }
        #expect(undetected.isEmpty, "flipped bits not detected: \(undetected.prefix(10))")
    }

    @Test func anUnmarkedFrameDoesNotVerify() throws {
        let layout = try FrameLayout(format: .nv12, width: 128, height: 64)
        let info = try FrameInfo(pts: FrameTime(value: 0, timescale: 60), wallNanoseconds: 0, color: .bt709Video)
        let zeros = [UInt8](repeating: 0, count: layout.byteCount)
        #expect(
            zeros.withUnsafeBytes { SyntheticCamera.verify(FrameView(layout: layout, info: info, bytes: $0)) } == nil)
    }

    @Test func consecutiveFramesAreSimilarAndDistantOnesAreNot() throws {
        let camera = try camera(.i420, width: 320, height: 180)
        func meanAbsoluteDifference(_ a: Int64, _ b: Int64) throws -> Double {
            let x = try camera.frameBytes(at: a)
            let y = try camera.frameBytes(at: b)
            let lumaCount = 320 * 180
            var total = 0
            for i in 0..<lumaCount { total += abs(Int(x[i]) - Int(y[i])) }
            return Double(total) / Double(lumaCount)
        }
        var near = 0.0
        var far = 0.0
        for start in stride(from: Int64(0), to: 200, by: 20) {
            near += try meanAbsoluteDifference(start, start + 1)
            far += try meanAbsoluteDifference(start, start + 97)
        }
        #expect(near * 4 < far, "consecutive \(near / 10), distant \(far / 10)")
        // Not flat, not noise: the scene has structure (many distinct luma values, mostly small neighbour steps).
        let frame = try camera.frameBytes(at: 0)
        #expect(Set(frame[0..<(320 * 180)]).count > 100)
    }

    @Test func endsAfterFrameCount() throws {
        var camera = SyntheticCamera(
            layout: try FrameLayout(format: .gray8, width: 64, height: 2), frameDuration: duration, frameCount: 3)
        var buffer = [UInt8](repeating: 0, count: 128)
        var count = 0
        while try buffer.withUnsafeMutableBytes({ try camera.readFrame(into: $0) }) != nil { count += 1 }
        #expect(count == 3)
    }
}
