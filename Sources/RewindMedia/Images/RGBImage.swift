import RewindCore

/// A frame as 8-bit RGB, scaled to a width: what a still picture (``FrameImage``) or a preview is made of.
///
/// Scaling averages every source sample under each output pixel (a box filter), plane by plane, before the colour
/// conversion, so a downscale costs one read of the frame and a thumbnail of a 1080p frame reads 3 MB once.
/// Colour follows the frame's matrix and range (``ColorInfo``): Y′CbCr → R′G′B′ with the matrix's coefficients
/// (BT.601, BT.709, BT.2020), video range (16–235, 16–240; 64–940, 64–960 for 10 bits) or full range. An
/// `unspecified` matrix is taken as BT.709 from 720 rows up and BT.601 below, as players do. `bgra` is copied
/// (averaged when scaled); `gray8` becomes grey with its range expanded.
public struct RGBImage: Sendable, Hashable {
    /// The width in pixels.
    public let width: Int
    /// The height in pixels.
    public let height: Int
    /// `width × height` pixels, three bytes each (R, G, B), rows packed.
    public let pixels: [UInt8]

    /// Converts `frame`, scaled to `width` pixels (the height keeps the aspect ratio, at least one row).
    ///
    /// - Parameters:
    ///   - frame: the frame to convert.
    ///   - width: the output width, `1...frame.layout.width`; nil keeps the frame's width.
    /// - Throws: ``FrameImageError/invalidWidth(_:frameWidth:)`` for a width outside that range.
    public init(frame: FrameView, width: Int? = nil) throws(FrameImageError) {
        let layout = frame.layout
        let outputWidth = width ?? layout.width
        guard (1...layout.width).contains(outputWidth) else {
            throw .invalidWidth(outputWidth, frameWidth: layout.width)
        }
        let outputHeight = max(1, (layout.height * outputWidth + layout.width / 2) / layout.width)
        self.width = outputWidth
        self.height = outputHeight
        let columns = Boxes(source: layout.width, output: outputWidth)
        let rows = Boxes(source: layout.height, output: outputHeight)
        var pixels = [UInt8](repeating: 0, count: outputWidth * outputHeight * 3)
        pixels.withUnsafeMutableBufferPointer { output in
            switch layout.format {
            case .bgra:
                RGBImage.convertBGRA(frame, columns, rows, into: output)
            case .gray8, .nv12, .i420, .p010:
                let converter = YCbCrConverter(color: frame.info.color, format: layout.format, height: layout.height)
                RGBImage.convertYCbCr(frame, columns, rows, converter, into: output)
            }
        }
        self.pixels = pixels
    }

    /// For each output position, the source samples it averages: `[start, end)`.
    struct Boxes {
        let starts: [Int]
        let ends: [Int]

        init(source: Int, output: Int) {
            var starts = [Int](repeating: 0, count: output)
            var ends = [Int](repeating: 0, count: output)
            for index in 0..<output {
                let start = index * source / output
                starts[index] = start
                ends[index] = max(start + 1, (index + 1) * source / output)
            }
            self.starts = starts
            self.ends = ends
        }

        /// The box in a plane subsampled by two: the chroma samples that cover the luma box.
        func halved(index: Int, limit: Int) -> Range<Int> {
            let start = min(starts[index] / 2, limit - 1)
            return start..<max(start + 1, min(limit, (ends[index] + 1) / 2))
        }
    }

    private static func convertBGRA(
        _ frame: FrameView, _ columns: Boxes, _ rows: Boxes, into output: UnsafeMutableBufferPointer<UInt8>
    ) {
        let plane = frame.plane(0).bindMemory(to: UInt8.self)
        let stride = frame.layout.plane(0).bytesPerRow
        var out = 0
        for row in 0..<rows.starts.count {
            for column in 0..<columns.starts.count {
                var b = 0
                var g = 0
                var r = 0
                var count = 0
                for y in rows.starts[row]..<rows.ends[row] {
                    var at = y * stride + columns.starts[column] * 4
                    for _ in columns.starts[column]..<columns.ends[column] {
                        b += Int(plane[at])
                        g += Int(plane[at + 1])
                        r += Int(plane[at + 2])
                        at += 4
                    }
                    count += columns.ends[column] - columns.starts[column]
                }
                output[out] = UInt8((r + count / 2) / count)
                output[out + 1] = UInt8((g + count / 2) / count)
                output[out + 2] = UInt8((b + count / 2) / count)
                out += 3
            }
        }
    }

    private static func convertYCbCr(
        _ frame: FrameView, _ columns: Boxes, _ rows: Boxes, _ converter: YCbCrConverter,
        into output: UnsafeMutableBufferPointer<UInt8>
    ) {
        let layout = frame.layout
        let samples = SampleReader(frame)
        let chromaWidth = (layout.width + 1) / 2
        let chromaHeight = (layout.height + 1) / 2
        var out = 0
        for row in 0..<rows.starts.count {
            let lumaRows = rows.starts[row]..<rows.ends[row]
            let chromaRows = rows.halved(index: row, limit: chromaHeight)
            for column in 0..<columns.starts.count {
                let lumaColumns = columns.starts[column]..<columns.ends[column]
                let y = samples.averageLuma(rows: lumaRows, columns: lumaColumns)
                var cb = converter.chromaCentre
                var cr = converter.chromaCentre
                if layout.format != .gray8 {
                    (cb, cr) = samples.averageChroma(
                        rows: chromaRows, columns: columns.halved(index: column, limit: chromaWidth))
                }
                converter.rgb(y: y, cb: cb, cr: cr, into: output, at: out)
                out += 3
            }
        }
    }
}

/// Reads luma and chroma samples of a planar frame, whatever its sample size and chroma layout.
private struct SampleReader {
    let format: PixelFormat
    let luma: UnsafeRawBufferPointer
    let lumaStride: Int
    let chroma0: UnsafeRawBufferPointer
    let chroma1: UnsafeRawBufferPointer
    let chromaStride: Int

    init(_ frame: FrameView) {
        format = frame.layout.format
        luma = frame.plane(0)
        lumaStride = frame.layout.plane(0).bytesPerRow
        chroma0 = format.planeCount > 1 ? frame.plane(1) : frame.plane(0)
        chroma1 = format.planeCount > 2 ? frame.plane(2) : chroma0
        chromaStride = format.planeCount > 1 ? frame.layout.plane(1).bytesPerRow : 0
    }

    /// The mean luma sample of the box (10-bit values for `p010`), as a Float.
    func averageLuma(rows: Range<Int>, columns: Range<Int>) -> Float {
        var sum = 0
        if format == .p010 {
            for y in rows {
                let base = y * lumaStride
                for x in columns { sum += Int(luma.loadUnaligned(fromByteOffset: base + 2 * x, as: UInt16.self) >> 6) }
            }
        } else {
            for y in rows {
                let base = y * lumaStride
                for x in columns { sum += Int(luma[base + x]) }
            }
        }
        return Float(sum) / Float(rows.count * columns.count)
    }

    /// The mean Cb and Cr samples of the box, in chroma-plane coordinates.
    func averageChroma(rows: Range<Int>, columns: Range<Int>) -> (Float, Float) {
        var cb = 0
        var cr = 0
        for y in rows {
            let base = y * chromaStride
            switch format {
            case .nv12:
                for x in columns {
                    cb += Int(chroma0[base + 2 * x])
                    cr += Int(chroma0[base + 2 * x + 1])
                }
            case .p010:
                for x in columns {
                    cb += Int(chroma0.loadUnaligned(fromByteOffset: base + 4 * x, as: UInt16.self) >> 6)
                    cr += Int(chroma0.loadUnaligned(fromByteOffset: base + 4 * x + 2, as: UInt16.self) >> 6)
                }
            default:
                for x in columns {
                    cb += Int(chroma0[base + x])
                    cr += Int(chroma1[base + x])
                }
            }
        }
        let count = Float(rows.count * columns.count)
        return (Float(cb) / count, Float(cr) / count)
    }
}

/// Y′CbCr samples → 8-bit R′G′B′ for one matrix, range and bit depth.
struct YCbCrConverter {
    let lumaOffset: Float
    let lumaScale: Float
    let chromaCentre: Float
    let chromaScale: Float
    /// R = Y + crToR·Cr; G = Y − cbToG·Cb − crToG·Cr; B = Y + cbToB·Cb (Y in 0…1, Cb and Cr in −½…½).
    let crToR: Float
    let cbToG: Float
    let crToG: Float
    let cbToB: Float

    init(color: ColorInfo, format: PixelFormat, height: Int) {
        let (kr, kb): (Float, Float)
        switch color.matrix {
        case .bt601: (kr, kb) = (0.299, 0.114)
        case .bt709: (kr, kb) = (0.2126, 0.0722)
        case .bt2020: (kr, kb) = (0.2627, 0.0593)
        case .unspecified: (kr, kb) = height >= 720 ? (0.2126, 0.0722) : (0.299, 0.114)
        }
        let kg = 1 - kr - kb
        crToR = 2 * (1 - kr)
        cbToB = 2 * (1 - kb)
        cbToG = 2 * kb * (1 - kb) / kg
        crToG = 2 * kr * (1 - kr) / kg
        let unit: Float = format == .p010 ? 4 : 1  // 10-bit samples are the 8-bit levels times four
        chromaCentre = 128 * unit
        switch color.range {
        case .video:
            lumaOffset = 16 * unit
            lumaScale = 1 / (219 * unit)
            chromaScale = 1 / (224 * unit)
        case .full:
            lumaOffset = 0
            lumaScale = 1 / (format == .p010 ? 1023 : 255)
            chromaScale = 1 / (format == .p010 ? 1023 : 255)
        }
    }

    @inline(__always)
    func rgb(y: Float, cb: Float, cr: Float, into output: UnsafeMutableBufferPointer<UInt8>, at index: Int) {
        let luma = (y - lumaOffset) * lumaScale
        let blue = (cb - chromaCentre) * chromaScale
        let red = (cr - chromaCentre) * chromaScale
        output[index] = YCbCrConverter.byte(luma + crToR * red)
        output[index + 1] = YCbCrConverter.byte(luma - cbToG * blue - crToG * red)
        output[index + 2] = YCbCrConverter.byte(luma + cbToB * blue)
    }

    @inline(__always)
    static func byte(_ value: Float) -> UInt8 {
        UInt8(min(255, max(0, (value * 255).rounded())))
    }
}
