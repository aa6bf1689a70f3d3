import Foundation
import RewindCore
import RewindMedia
import RewindTesting
import Testing

/// Still pictures of frames: colour conversion by matrix and range for every pixel format, scaling, and files that
/// ffmpeg decodes to the same pixels.
@Suite(.timeLimit(.minutes(45))) struct FrameImageTests {
    /// One frame of `format` whose every pixel has the given Y′CbCr samples (8-bit levels; ×4 for `p010`).
    func flatFrame(_ format: PixelFormat, y: Int, cb: Int, cr: Int, color: ColorInfo, width: Int = 64, height: Int = 32)
        throws -> (FrameLayout, FrameInfo, [UInt8])
    {
        let layout = try FrameLayout(format: format, width: width, height: height)
        var bytes = [UInt8](repeating: 0, count: layout.byteCount)
        let luma = layout.plane(0)
        func put16(_ value: Int, at offset: Int) {
            bytes[offset] = UInt8((value << 6) & 0xFF)
            bytes[offset + 1] = UInt8((value << 6) >> 8)
        }
        for offset in stride(from: luma.offset, to: luma.offset + luma.byteCount, by: format == .p010 ? 2 : 1) {
            if format == .p010 { put16(y * 4, at: offset) } else { bytes[offset] = UInt8(y) }
        }
        switch format {
        case .nv12:
            let plane = layout.plane(1)
            for offset in stride(from: plane.offset, to: plane.offset + plane.byteCount, by: 2) {
                bytes[offset] = UInt8(cb)
                bytes[offset + 1] = UInt8(cr)
            }
        case .p010:
            let plane = layout.plane(1)
            for offset in stride(from: plane.offset, to: plane.offset + plane.byteCount, by: 4) {
                put16(cb * 4, at: offset)
                put16(cr * 4, at: offset + 2)
            }
        case .i420:
            let u = layout.plane(1)
            let v = layout.plane(2)
            for offset in u.offset..<u.offset + u.byteCount { bytes[offset] = UInt8(cb) }
            for offset in v.offset..<v.offset + v.byteCount { bytes[offset] = UInt8(cr) }
        default:
            break
        }
        let info = try FrameInfo(pts: FrameTime(value: 1, timescale: 30), wallNanoseconds: 0, color: color)
        return (layout, info, bytes)
    }

    func rgb(_ frame: (FrameLayout, FrameInfo, [UInt8]), width: Int? = nil) throws -> RGBImage {
        try frame.2.withUnsafeBytes { bytes in
            try RGBImage(frame: FrameView(layout: frame.0, info: frame.1, bytes: bytes), width: width)
        }
    }

    func expectPixels(_ image: RGBImage, near expected: (Int, Int, Int), tolerance: Int = 2) {
        let first = (Int(image.pixels[0]), Int(image.pixels[1]), Int(image.pixels[2]))
        #expect(abs(first.0 - expected.0) <= tolerance, "R \(first) vs \(expected)")
        #expect(abs(first.1 - expected.1) <= tolerance, "G \(first) vs \(expected)")
        #expect(abs(first.2 - expected.2) <= tolerance, "B \(first) vs \(expected)")
        let uniform = stride(from: 0, to: image.pixels.count, by: 3).allSatisfy {
            image.pixels[$0] == image.pixels[0] && image.pixels[$0 + 1] == image.pixels[1]
                && image.pixels[$0 + 2] == image.pixels[2]
        }
        #expect(uniform, "a flat frame gave pixels of different colours")
    }

    /// Pure red, as each matrix and range writes it, comes back red; white, black and grey likewise.
    @Test(arguments: [PixelFormat.nv12, .i420, .p010])
    func matrixAndRangeAreHonoured(format: PixelFormat) throws {
        // BT.709 video range: red is Y 63, Cb 102, Cr 240.
        expectPixels(try rgb(flatFrame(format, y: 63, cb: 102, cr: 240, color: .bt709Video)), near: (255, 0, 0))
        // BT.601 video range: red is Y 82, Cb 90, Cr 240.
        let bt601 = ColorInfo(matrix: .bt601, range: .video)
        expectPixels(try rgb(flatFrame(format, y: 82, cb: 90, cr: 240, color: bt601)), near: (255, 0, 0))
        // The same samples read as BT.601 are not red under BT.709: the matrix matters.
        let wrong = try rgb(flatFrame(format, y: 82, cb: 90, cr: 240, color: .bt709Video))
        #expect(abs(Int(wrong.pixels[1]) - 0) > 10, "BT.601 red read as BT.709 should not be pure red")
        // BT.709 full range: red is Y 54, Cb 99, Cr 255.
        let full = ColorInfo(matrix: .bt709, range: .full)
        expectPixels(try rgb(flatFrame(format, y: 54, cb: 99, cr: 255, color: full)), near: (255, 0, 0), tolerance: 3)
        // Video-range white and black are 235 and 16; full-range ones 255 and 0.
        expectPixels(try rgb(flatFrame(format, y: 235, cb: 128, cr: 128, color: .bt709Video)), near: (255, 255, 255))
        expectPixels(try rgb(flatFrame(format, y: 16, cb: 128, cr: 128, color: .bt709Video)), near: (0, 0, 0))
        expectPixels(try rgb(flatFrame(format, y: 128, cb: 128, cr: 128, color: full)), near: (128, 128, 128))
        // BT.2020 video range: green is Y 164.5, Cb 47.3, Cr 25.0.
        let bt2020 = ColorInfo(matrix: .bt2020, range: .video)
        expectPixels(try rgb(flatFrame(format, y: 165, cb: 47, cr: 25, color: bt2020)), near: (0, 255, 0), tolerance: 4)
    }

    @Test func grayAndBGRA() throws {
        expectPixels(try rgb(flatFrame(.gray8, y: 235, cb: 0, cr: 0, color: .bt709Video)), near: (255, 255, 255))
        expectPixels(try rgb(flatFrame(.gray8, y: 126, cb: 0, cr: 0, color: .bt709Video)), near: (128, 128, 128))
        expectPixels(
            try rgb(flatFrame(.gray8, y: 200, cb: 0, cr: 0, color: ColorInfo(matrix: .bt709, range: .full))),
            near: (200, 200, 200), tolerance: 0)
        let layout = try FrameLayout(format: .bgra, width: 8, height: 4)
        var bytes = [UInt8](repeating: 0, count: layout.byteCount)
        for pixel in 0..<32 { bytes[pixel * 4..<pixel * 4 + 4] = [10, 20, 30, 255] }
        let info = try FrameInfo(pts: FrameTime(value: 0, timescale: 30), wallNanoseconds: 0, color: .unspecified)
        expectPixels(try rgb((layout, info, bytes), width: 4), near: (30, 20, 10), tolerance: 0)
    }

    /// Scaling averages the samples under each output pixel and keeps the aspect ratio.
    @Test func scalingAveragesAndKeepsTheAspectRatio() throws {
        let layout = try FrameLayout(format: .gray8, width: 4, height: 2)
        // Columns 0–1 black (0), 2–3 white (255), full range: half width averages each pair.
        let bytes: [UInt8] = [0, 0, 255, 255, 0, 0, 255, 255]
        let info = try FrameInfo(
            pts: FrameTime(value: 0, timescale: 30), wallNanoseconds: 0, color: ColorInfo(matrix: .bt709, range: .full))
        let half = try rgb((layout, info, bytes), width: 2)
        #expect(half.width == 2 && half.height == 1)
        #expect(half.pixels == [0, 0, 0, 255, 255, 255])
        let one = try rgb((layout, info, bytes), width: 1)
        #expect(one.pixels == [128, 128, 128])
        #expect(throws: FrameImageError.invalidWidth(5, frameWidth: 4)) { try rgb((layout, info, bytes), width: 5) }
        #expect(throws: FrameImageError.invalidWidth(0, frameWidth: 4)) { try rgb((layout, info, bytes), width: 0) }
    }

    /// A picture shows the frame at its shape: the stream's pixel aspect sets its height (720x480 at 10:11 is
    /// 720x528, at 40:33 720x396; at half width half that), an unknown aspect is square, and an absurd one is held
    /// to 4 times the square height.
    @Test func thePixelAspectSetsThePicturesHeight() throws {
        let layout = try FrameLayout(format: .gray8, width: 720, height: 480)
        let bytes = [UInt8](repeating: 128, count: layout.byteCount)
        let info = try FrameInfo(pts: FrameTime(value: 0, timescale: 30), wallNanoseconds: 0, color: .bt709Video)
        func size(_ aspect: PixelAspect, width: Int? = nil) throws -> [Int] {
            let image = try bytes.withUnsafeBytes {
                try RGBImage(frame: FrameView(layout: layout, info: info, bytes: $0), width: width, pixelAspect: aspect)
            }
            #expect(image.pixels.count == image.width * image.height * 3)
            return [image.width, image.height]
        }
        #expect(try size(try #require(PixelAspect(numerator: 10, denominator: 11))) == [720, 528])
        #expect(try size(try #require(PixelAspect(numerator: 40, denominator: 33))) == [720, 396])
        #expect(try size(try #require(PixelAspect(numerator: 10, denominator: 11)), width: 360) == [360, 264])
        #expect(try size(.unknown) == [720, 480] && size(.square, width: 360) == [360, 240])
        #expect(try size(try #require(PixelAspect(numerator: 1, denominator: 65535))) == [720, 1920])
        #expect(try size(try #require(PixelAspect(numerator: 65535, denominator: 1))) == [720, 1])
        let picture = try bytes.withUnsafeBytes {
            try FrameImage(
                frame: FrameView(layout: layout, info: info, bytes: $0), width: 320,
                pixelAspect: try #require(PixelAspect(numerator: 10, denominator: 11)), format: .png)
        }
        #expect(picture.width == 320 && picture.height == 235)
    }

    /// A synthetic camera frame converted here and by ffmpeg (swscale, exact rounding) agrees pixel by pixel, and
    /// the PNG and JPEG files decode to it (exactly, and closely).
    @Test(arguments: [PixelFormat.nv12, .i420])
    func picturesAgreeWithFFmpeg(format: PixelFormat) throws {
        let layout = try FrameLayout(format: format, width: 640, height: 360)
        let camera = SyntheticCamera(layout: layout, frameDuration: FrameTime(value: 1, timescale: 30))
        let bytes = try camera.frameBytes(at: 7)
        let info = try FrameInfo(pts: FrameTime(value: 7, timescale: 30), wallNanoseconds: 0, color: .bt709Video)
        let directory = try TemporaryDirectory.shared.directory("frame-image-\(format)")
        let raw = directory + "/frame.yuv"
        try Data(bytes).write(to: URL(fileURLWithPath: raw))
        let reference = try ExternalTools.run(
            "ffmpeg",
            [
                "-hide_banner", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt",
                format == .nv12 ? "nv12" : "yuv420p",
                "-s", "640x360", "-color_range", "tv", "-colorspace", "bt709", "-i", raw, "-sws_flags",
                "bilinear+accurate_rnd+full_chroma_int", "-pix_fmt", "rgb24", "-f", "rawvideo", "-",
            ])
        let ours = try bytes.withUnsafeBytes { try RGBImage(frame: FrameView(layout: layout, info: info, bytes: $0)) }
        #expect(reference.count == ours.pixels.count)
        let meanDifference = zip(reference, ours.pixels).reduce(0) { $0 + abs(Int($1.0) - Int($1.1)) }
        #expect(Double(meanDifference) / Double(ours.pixels.count) < 2.5, "mean difference \(meanDifference)")

        for pictureFormat in FrameImage.Format.allCases {
            let picture = try bytes.withUnsafeBytes {
                try FrameImage(
                    frame: FrameView(layout: layout, info: info, bytes: $0), width: 320, format: pictureFormat)
            }
            #expect(picture.width == 320 && picture.height == 180 && picture.ptsNanoseconds == info.ptsNanoseconds)
            let file = directory + "/picture.\(pictureFormat.rawValue)"
            try Data(picture.bytes).write(to: URL(fileURLWithPath: file))
            let decoded = try ExternalTools.run(
                "ffmpeg",
                ["-hide_banner", "-loglevel", "error", "-i", file, "-pix_fmt", "rgb24", "-f", "rawvideo", "-"])
            let scaled = try bytes.withUnsafeBytes {
                try RGBImage(frame: FrameView(layout: layout, info: info, bytes: $0), width: 320)
            }
            #expect(decoded.count == scaled.pixels.count, "\(pictureFormat)")
            if pictureFormat == .png {
                #expect(Array(decoded) == scaled.pixels, "PNG is lossless")
            } else {
                let difference = zip(decoded, scaled.pixels).reduce(0) { $0 + abs(Int($1.0) - Int($1.1)) }
                #expect(Double(difference) / Double(scaled.pixels.count) < 6, "JPEG mean difference \(difference)")
            }
        }
    }

    @Test func badQualityIsRefused() throws {
        let frame = try flatFrame(.gray8, y: 16, cb: 0, cr: 0, color: .bt709Video)
        #expect(throws: FrameImageError.invalidQuality(0)) {
            try frame.2.withUnsafeBytes {
                try FrameImage(frame: FrameView(layout: frame.0, info: frame.1, bytes: $0), format: .jpeg, quality: 0)
            }
        }
    }
}
