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

    /// Converts `frame`, scaled to `width` pixels; the height makes the picture the shape the frame is shown at
    /// (its pixels square in the picture: `pixelAspect` applied, at most 4 times the height square pixels would
    /// give; at least one row).
    ///
    /// - Parameters:
    ///   - frame: the frame to convert.
    ///   - width: the output width, `1...frame.layout.width`; nil keeps the frame's width.
    ///   - pixelAspect: the shape of the frame's pixels; not known is taken as square.
    /// - Throws: ``FrameImageError/invalidWidth(_:frameWidth:)`` for a width outside that range.
    public init(frame: FrameView, width: Int? = nil, pixelAspect: PixelAspect = .unknown) throws(FrameImageError) {
        let layout = frame.layout
        let outputWidth = width ?? layout.width
        guard (1...layout.width).contains(outputWidth) else {
            throw .invalidWidth(outputWidth, frameWidth: layout.width)
        }
        let (numerator, denominator) =
            pixelAspect.isKnown ? (Int(pixelAspect.numerator), Int(pixelAspect.denominator)) : (1, 1)
        // The rows over the columns as the frame is shown: height × den over width × num, rounded.
        let shown = layout.width * numerator
        let square = max(1, (layout.height * outputWidth + layout.width / 2) / layout.width)
        let outputHeight = min(4 * square, max(1, (layout.height * outputWidth * denominator + shown / 2) / shown))
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

        private init(starts: [Int], ends: [Int]) {
            self.starts = starts
            self.ends = ends
        }

        /// The boxes in a plane subsampled by two (`limit` samples): the chroma samples that cover each luma box.
        func halved(limit: Int) -> Boxes {
            var starts = self.starts
            var ends = self.ends
            for index in starts.indices {
                let start = min(self.starts[index] / 2, limit - 1)
                starts[index] = start
                ends[index] = max(start + 1, min(limit, (self.ends[index] + 1) / 2))
            }
            return Boxes(starts: starts, ends: ends)
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
        let count = columns.starts.count * rows.starts.count
        let tenBit = layout.format == .p010
        var luma = [Float](repeating: 0, count: count)
        var cb = [Float](repeating: converter.chromaCentre, count: count)
        var cr = [Float](repeating: converter.chromaCentre, count: count)
        luma.withUnsafeMutableBufferPointer { luma in
            averagePlane(
                frame.plane(0), stride: layout.plane(0).bytesPerRow, step: tenBit ? 2 : 1, offset: 0, tenBit: tenBit,
                columns, rows, into: luma)
        }
        if layout.format != .gray8 {
            let chromaColumns = columns.halved(limit: (layout.width + 1) / 2)
            let chromaRows = rows.halved(limit: (layout.height + 1) / 2)
            let stride = layout.plane(1).bytesPerRow
            // Cb's plane, Cr's plane, the bytes from one sample to the next, and Cb's and Cr's first byte in a row.
            let (cbPlane, crPlane, step, cbOffset, crOffset): (Int, Int, Int, Int, Int) =
                switch layout.format {
                case .nv12: (1, 1, 2, 0, 1)
                case .p010: (1, 1, 4, 0, 2)
                default: (1, 2, 1, 0, 0)
                }
            cb.withUnsafeMutableBufferPointer { cb in
                averagePlane(
                    frame.plane(cbPlane), stride: stride, step: step, offset: cbOffset, tenBit: tenBit, chromaColumns,
                    chromaRows, into: cb)
            }
            cr.withUnsafeMutableBufferPointer { cr in
                averagePlane(
                    frame.plane(crPlane), stride: stride, step: step, offset: crOffset, tenBit: tenBit, chromaColumns,
                    chromaRows, into: cr)
            }
        }
        for index in 0..<count {
            converter.rgb(y: luma[index], cb: cb[index], cr: cr[index], into: output, at: index * 3)
        }
    }

    /// Averages one component of a plane over each output pixel's box: sums along each source row per output column
    /// (one sequential pass over the rows the output row covers), then divides.
    ///
    /// - Parameters:
    ///   - step: bytes from one sample of the component to the next in a row.
    ///   - offset: the component's first byte within a row.
    ///   - tenBit: samples are little-endian 16-bit words holding 10 bits at the top (`p010`).
    private static func averagePlane(
        _ plane: UnsafeRawBufferPointer, stride: Int, step: Int, offset: Int, tenBit: Bool, _ columns: Boxes,
        _ rows: Boxes, into output: UnsafeMutableBufferPointer<Float>
    ) {
        let width = columns.starts.count
        guard let base = plane.baseAddress else { return }
        var sums = [Int](repeating: 0, count: width)
        columns.starts.withUnsafeBufferPointer { starts in
            columns.ends.withUnsafeBufferPointer { ends in
                sums.withUnsafeMutableBufferPointer { sums in
                    for outputRow in 0..<rows.starts.count {
                        for column in 0..<width { sums[column] = 0 }
                        for sourceRow in rows.starts[outputRow]..<rows.ends[outputRow] {
                            let row = base + sourceRow * stride + offset
                            if tenBit {
                                for column in 0..<width {
                                    var sum = 0
                                    var x = starts[column]
                                    while x < ends[column] {
                                        sum += Int(row.loadUnaligned(fromByteOffset: x * step, as: UInt16.self) >> 6)
                                        x += 1
                                    }
                                    sums[column] += sum
                                }
                            } else {
                                let bytes = row.assumingMemoryBound(to: UInt8.self)
                                for column in 0..<width {
                                    var sum = 0
                                    var x = starts[column]
                                    while x < ends[column] {
                                        sum += Int(bytes[x * step])
                                        x += 1
                                    }
                                    sums[column] += sum
                                }
                            }
                        }
                        let height = rows.ends[outputRow] - rows.starts[outputRow]
                        let outputBase = outputRow * width
                        for column in 0..<width {
                            output[outputBase + column] =
                                Float(sums[column]) / Float(height * (ends[column] - starts[column]))
                        }
                    }
                }
            }
        }
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
