import CTurboJPEG
import CZlib
import RewindCore

/// A still picture of one frame, scaled and encoded as JPEG (libjpeg-turbo) or PNG (zlib): thumbnails and frame
/// views.
public struct FrameImage: Sendable, Hashable {
    /// The encodings a still picture can have.
    public enum Format: String, Sendable, Hashable, CaseIterable {
        /// JPEG: 4:2:0, quality 85 unless asked otherwise. Small and fast; lossy.
        case jpeg
        /// PNG: 8-bit RGB, lossless.
        case png

        /// The media type of the encoding (`image/jpeg`, `image/png`).
        public var mediaType: String { self == .jpeg ? "image/jpeg" : "image/png" }
    }

    /// The encoding of ``bytes``.
    public let format: Format
    /// The width in pixels.
    public let width: Int
    /// The height in pixels.
    public let height: Int
    /// The frame's pts, nanoseconds on its stream clock.
    public let ptsNanoseconds: Int64
    /// The frame's wall-clock capture time, Unix-epoch nanoseconds.
    public let wallNanoseconds: Int64
    /// The encoded file.
    public let bytes: [UInt8]

    /// Pictures `frame`, scaled to `width`, as `format`.
    ///
    /// - Parameters:
    ///   - frame: the frame.
    ///   - width: the picture's width, `1...frame.layout.width`; nil keeps the frame's.
    ///   - pixelAspect: the shape of the frame's pixels: the picture's height shows the frame at its shape
    ///     (``RGBImage``).
    ///   - format: JPEG or PNG.
    ///   - quality: JPEG quality, 1–100.
    /// - Throws: ``FrameImageError`` for a width out of range, a bad quality, or an encoder failure.
    public init(
        frame: FrameView, width: Int? = nil, pixelAspect: PixelAspect = .unknown, format: Format, quality: Int = 85
    ) throws(FrameImageError) {
        guard (1...100).contains(quality) else { throw .invalidQuality(quality) }
        let image = try RGBImage(frame: frame, width: width, pixelAspect: pixelAspect)
        self.format = format
        self.width = image.width
        self.height = image.height
        self.ptsNanoseconds = frame.info.ptsNanoseconds
        self.wallNanoseconds = frame.info.wallNanoseconds
        switch format {
        case .jpeg: bytes = try FrameImage.jpeg(image, quality: quality)
        case .png: bytes = try FrameImage.png(image)
        }
    }

    private static func jpeg(_ image: RGBImage, quality: Int) throws(FrameImageError) -> [UInt8] {
        guard let handle = tjInitCompress() else { throw .encoder("tjInitCompress failed") }
        defer { tjDestroy(handle) }
        var output: UnsafeMutablePointer<UInt8>? = nil
        var size: UInt = 0
        let status = image.pixels.withUnsafeBufferPointer { pixels in
            tjCompress2(
                handle, pixels.baseAddress, Int32(image.width), 0, Int32(image.height), Int32(TJPF_RGB.rawValue),
                &output, &size, Int32(TJSAMP_420.rawValue), Int32(quality), TJFLAG_FASTDCT)
        }
        defer { if let output { tjFree(output) } }
        guard status == 0, let output else {
            throw .encoder("libjpeg-turbo: " + String(cString: tjGetErrorStr2(handle)))
        }
        return Array(UnsafeBufferPointer(start: output, count: Int(size)))
    }

    private static func png(_ image: RGBImage) throws(FrameImageError) -> [UInt8] {
        // Each row: filter type 0 (none), then the row's RGB bytes.
        let rowBytes = image.width * 3
        var raw = [UInt8](repeating: 0, count: (rowBytes + 1) * image.height)
        raw.withUnsafeMutableBufferPointer { raw in
            image.pixels.withUnsafeBufferPointer { pixels in
                for row in 0..<image.height {
                    let target = raw.baseAddress! + row * (rowBytes + 1) + 1
                    target.update(from: pixels.baseAddress! + row * rowBytes, count: rowBytes)
                }
            }
        }
        var compressedSize = compressBound(uLong(raw.count))
        var compressed = [UInt8](repeating: 0, count: Int(compressedSize))
        let status = compressed.withUnsafeMutableBufferPointer { out in
            raw.withUnsafeBufferPointer { input in
                compress2(out.baseAddress, &compressedSize, input.baseAddress, uLong(input.count), 3)
            }
        }
        guard status == Z_OK else { throw .encoder("zlib compress2 failed (\(status))") }
        compressed.removeLast(compressed.count - Int(compressedSize))

        var file: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        var header: [UInt8] = []
        header.appendBigEndian(UInt32(image.width))
        header.appendBigEndian(UInt32(image.height))
        header += [8, 2, 0, 0, 0]  // 8 bits, RGB, deflate, adaptive filters, not interlaced
        file.appendChunk("IHDR", header)
        file.appendChunk("IDAT", compressed)
        file.appendChunk("IEND", [])
        return file
    }
}

/// A still picture that could not be made.
public enum FrameImageError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The width asked for is not in `1...frameWidth`.
    case invalidWidth(Int, frameWidth: Int)
    /// The JPEG quality is not in `1...100`.
    case invalidQuality(Int)
    /// The encoder failed, with its message.
    case encoder(String)

    /// What was wrong.
    public var description: String {
        switch self {
        case .invalidWidth(let width, let frameWidth):
            "width \(width) is not between 1 and the frame's width, \(frameWidth)"
        case .invalidQuality(let quality): "JPEG quality \(quality) is not between 1 and 100"
        case .encoder(let message): message
        }
    }
}

extension [UInt8] {
    fileprivate mutating func appendBigEndian(_ value: UInt32) {
        append(contentsOf: [
            UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8),
            UInt8(truncatingIfNeeded: value),
        ])
    }

    /// Appends a PNG chunk: length, type, data, and the CRC-32 of type and data.
    fileprivate mutating func appendChunk(_ type: String, _ data: [UInt8]) {
        appendBigEndian(UInt32(data.count))
        let typed = Array(type.utf8) + data
        append(contentsOf: typed)
        let crc = typed.withUnsafeBufferPointer { crc32(0, $0.baseAddress, uInt($0.count)) }
        appendBigEndian(UInt32(truncatingIfNeeded: crc))
    }
}
