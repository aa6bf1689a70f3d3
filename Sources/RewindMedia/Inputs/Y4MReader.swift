import Glibc
import RewindCore
import RewindSystem

/// Reads a YUV4MPEG2 (`.y4m`) stream from a file or a descriptor (such as stdin), one frame at a time, straight into
/// the caller's buffer.
///
/// The stream is a header line, then per frame a `FRAME` line and the raw planes:
///
///     YUV4MPEG2 W1920 H1080 F30000:1001 Ip A1:1 C420jpeg XCOLORRANGE=LIMITED\n
///     FRAME\n  <Y plane: W×H bytes> <Cb: ⌈W/2⌉×⌈H/2⌉> <Cr: ⌈W/2⌉×⌈H/2⌉>
///     FRAME\n  …
///
/// Header tags:
/// - `W`, `H` (required): the frame size.
/// - `F` (required): the frame rate `num:den`; a frame lasts `den/num` s and frame `n` has pts `n × den/num`.
/// - `C`: `420jpeg`, `420paldv`, `420mpeg2` and `420` read as ``PixelFormat/i420``, with the chroma siting they name
///   (`420jpeg` and `420` centred, `420mpeg2` left, `420paldv` top-left; ``ChromaSiting``), as ffmpeg reads them;
///   `mono` as ``PixelFormat/gray8``; `420p10` (16-bit little-endian samples, the 10-bit value in the low bits, as
///   ``Y4MWriter`` writes a `p010` stream) as ``PixelFormat/p010``: each sample moved to the high bits and the
///   chroma planes interleaved, in place; a sample above 1023 is refused. No `C` means 4:2:0 (`i420`) with the siting
///   not said (as ffmpeg reads it; the format's text says `420jpeg`). Anything else
///   (4:2:2, 4:4:4, 12-bit…) is refused.
/// - `I`: `p` (progressive) and `?` (unknown, read as progressive) are accepted; interlaced streams (`t`, `b`, `m`)
///   are refused, because frames would be stored and exported as if progressive: deinterlace first.
/// - `A`: the pixel aspect ratio (`num:den`, both positive; `A0:0` not known), kept (``PixelAspect``); one zero term, or
///   terms that do not reduce to 16 bits, are refused.
/// - `X`: `XCOLORRANGE=FULL|LIMITED` sets the colour range (default limited); `XYSCSS=` must agree with `C`;
///   other `X` tags, and unknown tags, are ignored.
///
/// YUV4MPEG2 carries no matrix: it is taken from the `matrix` argument.
///
/// A reader owns its descriptor when it opened it (from a path) and closes it when the last copy goes away. Copies
/// share one read position; use one copy at a time.
public struct Y4MReader: FrameSource {
    /// The longest header or `FRAME` line accepted.
    public static let maximumLineLength = 4096

    /// What the header says: the layout (`W`, `H`, `C`), the frame duration (`F` `num:den` gives `den/num` s) and
    /// the colour (the `matrix` given at creation, the range from `XCOLORRANGE`).
    public let stream: StreamDescription
    /// Frames returned so far; the index of the next frame.
    public private(set) var framesRead: Int64 = 0
    private let reader: BufferedFileReader
    /// Wall-clock time of frame 0: given, or read when the first frame is (nil until then).
    private var startWallNanoseconds: Int64?
    /// Where the next frame's `FRAME` line began, once ``nextFrameComes()`` has read it.
    private var pendingMarkerOffset: Int64?
    /// A `420p10` frame's Cb and Cr planes, copied out before they are interleaved in place (empty otherwise).
    private var chromaPlanes: [UInt16]

    /// Opens and parses the header of the stream at `path`.
    ///
    /// - Parameters:
    ///   - path: the file to read.
    ///   - matrix: the colour matrix to record (YUV4MPEG2 has none).
    ///   - startWallNanoseconds: wall-clock time of frame 0 (Unix ns); each frame's wall time is this plus its pts.
    ///     Defaults to the time the first frame is read.
    ///   - fileSystem: where the reads go (a fault-injecting one in tests).
    /// - Throws: ``InputError`` when the file cannot be opened or its header is malformed or unsupported.
    public init(
        path: String, matrix: ColorInfo.Matrix = .unspecified, startWallNanoseconds: Int64? = nil,
        fileSystem: any FileSystem = POSIXFileSystem()
    ) throws(InputError) {
        try self.init(
            reader: BufferedFileReader(path: path, fileSystem: fileSystem), matrix: matrix,
            startWallNanoseconds: startWallNanoseconds)
    }

    /// Parses the header of the stream read from `fileDescriptor`, which stays open (the caller owns it).
    ///
    /// - Parameters:
    ///   - fileDescriptor: where to read, e.g. ``FileDescriptor/standardInput``; the caller owns it and closes it
    ///     after the reader is done.
    ///   - name: how errors name the input.
    ///   - matrix: the colour matrix to record (YUV4MPEG2 has none).
    ///   - startWallNanoseconds: wall-clock time of frame 0 (Unix ns). Defaults to the time the first frame is read.
    ///   - fileSystem: where the reads go (a fault-injecting one in tests).
    /// - Throws: ``InputError`` when the header is malformed or unsupported, or reading fails.
    public init(
        fileDescriptor: FileDescriptor, name: String = "stdin", matrix: ColorInfo.Matrix = .unspecified,
        startWallNanoseconds: Int64? = nil, fileSystem: any FileSystem = POSIXFileSystem()
    ) throws(InputError) {
        let reader = BufferedFileReader(
            descriptor: fileDescriptor.rawValue, name: name, ownsDescriptor: false, fileSystem: fileSystem)
        try self.init(reader: reader, matrix: matrix, startWallNanoseconds: startWallNanoseconds)
    }

    private init(
        reader: BufferedFileReader, matrix: ColorInfo.Matrix, startWallNanoseconds: Int64?
    ) throws(InputError) {
        self.reader = reader
        let header = try Y4MHeader.read(from: reader)
        self.stream = StreamDescription(
            layout: header.layout, frameDuration: header.frameDuration,
            color: ColorInfo(matrix: matrix, range: header.range), chromaSiting: header.chromaSiting,
            pixelAspect: header.pixelAspect)
        self.startWallNanoseconds = startWallNanoseconds
        chromaPlanes =
            header.layout.format == .p010 ? Array(repeating: 0, count: header.layout.plane(1).byteCount / 2) : []
    }

    /// Reads the next frame's payload into `buffer`.
    ///
    /// - Parameter buffer: exactly `stream.layout.byteCount` bytes.
    /// - Returns: the frame's pts (`index × frameDuration`), wall time and colour; nil at a clean end of input.
    /// - Throws: ``InputError`` on a bad `FRAME` marker, a truncated frame, or a read failure.
    /// - Complexity: O(frame size); no allocation for a plain `FRAME` line.
    public mutating func readFrame(into buffer: UnsafeMutableRawBufferPointer) throws -> FrameInfo? {
        precondition(buffer.count == stream.layout.byteCount, "buffer \(buffer.count) != frame \(stream.layout)")
        guard try nextFrameComes(), let markerOffset = pendingMarkerOffset else { return nil }
        pendingMarkerOffset = nil
        return try readPayload(index: framesRead, into: buffer, markerOffset: markerOffset)
    }

    /// Reads the next frame's `FRAME` line (once): false at a clean end of the input.
    public mutating func nextFrameComes() throws -> Bool {
        if pendingMarkerOffset != nil { return true }
        let markerOffset = reader.offset
        if try !reader.consume(ifNextBytesAre: Y4MReader.plainFrameLine) {
            guard try readFrameLine(index: framesRead, markerOffset: markerOffset) else { return false }
        }
        pendingMarkerOffset = markerOffset
        return true
    }

    /// The next frame's pts: its index times the frame duration (nil past 64 bits, which reading it refuses).
    public var nextPTS: Int64? { FrameTime.frame(framesRead, duration: stream.frameDuration)?.nanoseconds }

    /// Reads a `FRAME` line with parameters (or a bad one): the uncommon path, which allocates the line.
    ///
    /// - Returns: false at a clean end of input.
    private func readFrameLine(index: Int64, markerOffset: Int64) throws(InputError) -> Bool {
        let line: [UInt8]?
        do {
            line = try reader.readLine(maximumLength: Y4MReader.maximumLineLength)
        } catch {
            var error = error
            error.frame = index
            throw error
        }
        guard let line else { return false }
        let isMarker =
            line.starts(with: Y4MReader.frameMarker)
            && (line.count == Y4MReader.frameMarker.count || line[Y4MReader.frameMarker.count] == UInt8(ascii: " "))
        guard isMarker else {
            throw InputError(
                input: reader.name, byteOffset: markerOffset, frame: index,
                problem: .badFrameMarker(found: Y4MHeader.excerpt(line)))
        }
        return true
    }

    private mutating func readPayload(
        index: Int64, into buffer: UnsafeMutableRawBufferPointer, markerOffset: Int64
    ) throws -> FrameInfo {
        let payloadOffset = reader.offset
        let got = try reader.read(into: buffer)
        guard got == buffer.count else {
            throw InputError(
                input: reader.name, byteOffset: payloadOffset + Int64(got), frame: index,
                problem: .truncated(expectedBytes: buffer.count, gotBytes: got))
        }
        if stream.layout.format == .p010 {
            if let sample = Y4MReader.convertToP010(buffer, layout: stream.layout, chroma: &chromaPlanes) {
                throw InputError(
                    input: reader.name, byteOffset: payloadOffset + Int64(sample.offset), frame: index,
                    problem: .malformed(
                        "sample value \(sample.value) is above 1023, the largest a 10-bit sample (C420p10) may be"))
            }
        }
        guard let pts = FrameTime.frame(index, duration: stream.frameDuration) else {
            throw InputError(
                input: reader.name, byteOffset: markerOffset, frame: index,
                problem: .malformed("its pts does not fit in 64 bits"))
        }
        let info = try FrameInfo(pts: pts, wallNanoseconds: 0, color: stream.color)
        var result = info
        let start = startWallNanoseconds ?? Y4MReader.nowNanoseconds()
        startWallNanoseconds = start
        result.wallNanoseconds = start &+ info.ptsNanoseconds
        framesRead += 1
        return result
    }

    /// Turns a `420p10` payload (planes Y, Cb, Cr of little-endian samples, values 0…1023) into ``PixelFormat/p010``
    /// (the value in each sample's high 10 bits; Cb and Cr interleaved) in place; `chroma` holds the two chroma
    /// planes meanwhile.
    ///
    /// - Returns: nil, or the first sample above 1023 and its byte offset in the payload (the payload is then
    ///   partly converted).
    static func convertToP010(
        _ payload: UnsafeMutableRawBufferPointer, layout: FrameLayout, chroma: inout [UInt16]
    ) -> (value: Int, offset: Int)? {
        let lumaSamples = layout.plane(0).byteCount / 2
        let chromaSamples = layout.plane(1).byteCount / 4  // per plane
        let samples = payload.baseAddress!.assumingMemoryBound(to: UInt16.self)
        // Luma in place, eight samples at a time (little-endian samples, loaded as they are on every machine this
        // runs on); a lane holding a sample above 1023 is left to the loop after, which names the sample.
        let limit = SIMD8<UInt16>(repeating: 1023)
        var i = 0
        while i + 8 <= lumaSamples {
            let lane = UnsafeRawPointer(samples + i).loadUnaligned(as: SIMD8<UInt16>.self)
            if any(lane .> limit) { break }
            UnsafeMutableRawPointer(samples + i).storeBytes(of: lane &<< 6, as: SIMD8<UInt16>.self)
            i += 8
        }
        while i < lumaSamples {
            guard samples[i] <= 1023 else { return (Int(samples[i]), 2 * i) }
            samples[i] = samples[i] &<< 6
            i += 1
        }
        let cb = samples + lumaSamples
        return chroma.withUnsafeMutableBufferPointer { planes -> (value: Int, offset: Int)? in
            let saved = planes.baseAddress!
            saved.update(from: cb, count: 2 * chromaSamples)
            for j in 0..<(2 * chromaSamples) where saved[j] > 1023 {
                return (Int(saved[j]), 2 * (lumaSamples + j))
            }
            for j in 0..<chromaSamples {
                cb[2 * j] = saved[j] &<< 6
                cb[2 * j + 1] = saved[chromaSamples + j] &<< 6
            }
            return nil
        }
    }

    private static let frameMarker = Array("FRAME".utf8)
    private static let plainFrameLine = Array("FRAME\n".utf8)

    static func nowNanoseconds() -> Int64 { System.wallClockNanoseconds() }
}

/// The parsed header line of a YUV4MPEG2 stream.
struct Y4MHeader {
    var layout: FrameLayout
    var frameDuration: FrameTime
    var range: ColorInfo.Range
    var chromaSiting: ChromaSiting
    var pixelAspect: PixelAspect

    private static let magic = Array("YUV4MPEG2 ".utf8)
    static let supportedColorSpaces =
        "420jpeg, 420paldv, 420mpeg2, 420 (read as i420), 420p10 (read as p010) and mono (read as gray8)"

    /// Reads and validates the header line.
    static func read(from reader: BufferedFileReader) throws(InputError) -> Y4MHeader {
        let start = reader.offset
        func fail(_ offset: Int, _ problem: InputError.Problem) -> InputError {
            InputError(input: reader.name, byteOffset: start + Int64(offset), problem: problem)
        }
        func fail(_ offset: Int, _ message: String) -> InputError { fail(offset, .malformed(message)) }
        // The magic first: an input of anything else (`/dev/zero`, a binary file) is named as not a stream, not
        // as a line too long.
        guard try reader.consume(ifNextBytesAre: magic) else {
            let start = UnsafeMutableRawBufferPointer.allocate(byteCount: 25, alignment: 1)
            defer { start.deallocate() }
            let count = try reader.read(into: start)
            guard count > 0 else { throw fail(0, .empty) }
            let found = Array(start.prefix(count)).prefix { $0 != UInt8(ascii: "\n") }
            throw fail(
                0, "not a YUV4MPEG2 stream: the header must start with 'YUV4MPEG2 ', found '\(excerpt(Array(found)))'")
        }
        let rest: [UInt8]?
        do {
            rest = try reader.readLine(maximumLength: Y4MReader.maximumLineLength - magic.count)
        } catch  where error.problem == .lineTooLong(maximumLength: Y4MReader.maximumLineLength - magic.count) {
            // Told of the whole line, magic included, as a frame line is.
            throw fail(0, .lineTooLong(maximumLength: Y4MReader.maximumLineLength))
        }
        guard let rest else {
            throw fail(magic.count, .malformed("the header ends after 'YUV4MPEG2 ' without a newline"))
        }
        let line = magic + rest
        // A line ended in CR LF: every tag's value would end in a CR the messages below could not explain.
        if line.last == UInt8(ascii: "\r") {
            throw fail(
                line.count - 1,
                "the header line ends in CR LF ('\\r\\n'): YUV4MPEG2 lines end in LF alone; convert the file's line "
                    + "endings, or write it again with the tool that made it")
        }
        var width: Int?
        var height: Int?
        var rate: (numerator: Int, denominator: Int)?
        var format: PixelFormat?
        var formatOffset = 0
        var formatTag = ""
        var subsampling: (value: String, offset: Int, token: String)?
        var range = ColorInfo.Range.video
        var siting = ChromaSiting.unspecified
        var aspect = PixelAspect.unknown

        var seen: [String: (token: String, offset: Int)] = [:]
        var position = magic.count
        while position < line.count {
            guard line[position] != UInt8(ascii: " ") else {
                position += 1
                continue
            }
            let tokenStart = position
            while position < line.count && line[position] != UInt8(ascii: " ") { position += 1 }
            let tag = line[tokenStart]
            let value = String(decoding: line[(tokenStart + 1)..<position], as: UTF8.self)
            // As messages show it: a control byte in a header (a NUL, an escape) must not reach the terminal.
            let token = Y4MHeader.shown(line[tokenStart..<position])
            // Each tag once: a second one would silently win over the first.
            let isX = tag == UInt8(ascii: "X")
            let name = isX ? String(value.prefix { $0 != "=" }) : String(UnicodeScalar(tag))
            if "WHFIAC".utf8.contains(tag) || (isX && (value.hasPrefix("COLORRANGE=") || value.hasPrefix("YSCSS="))) {
                if let earlier = seen[name] {
                    throw fail(
                        tokenStart,
                        "the header gives \(isX ? "X\(name)" : name) twice ('\(earlier.token)' at "
                            + "byte \(earlier.offset), then '\(token)'): give each tag once")
                }
                seen[name] = (token, Int(start) + tokenStart)
            }
            switch tag {
            case UInt8(ascii: "W"), UInt8(ascii: "H"):
                guard let number = wholeNumber(value), (1...FrameLayout.maximumDimension).contains(number) else {
                    throw fail(
                        tokenStart,
                        "bad \(tag == UInt8(ascii: "W") ? "width" : "height") '\(token)': expected a whole number "
                            + "from 1 to \(FrameLayout.maximumDimension)")
                }
                if tag == UInt8(ascii: "W") { width = number } else { height = number }
            case UInt8(ascii: "F"):
                let terms = value.split(separator: ":", omittingEmptySubsequences: false)
                let ratio = parseRatio(value)
                // Digits that overflow are a ratio of terms too large, not a malformed one.
                let tooLarge =
                    ratio == nil && terms.count == 2
                    && terms.allSatisfy { !$0.isEmpty && $0.allSatisfy { $0.isASCII && $0.isNumber } }
                guard let ratio, ratio.0 > 0, ratio.1 > 0 else {
                    let problem = tooLarge ? "a term above \(Int32.max)" : "expected F<num>:<den> with both positive"
                    throw fail(tokenStart, "bad frame rate '\(token)': \(problem)")
                }
                let divisor = greatestCommonDivisor(ratio.0, ratio.1)
                let reduced = (ratio.0 / divisor, ratio.1 / divisor)
                guard reduced.0 <= Int(Int32.max), reduced.1 <= Int(Int32.max) else {
                    throw fail(
                        tokenStart,
                        "bad frame rate '\(token)': a term above \(Int32.max) once reduced (num and den must fit in 31 "
                            + "bits)")
                }
                // Timestamps are whole nanoseconds: a frame must last at least one.
                guard reduced.1 * 1_000_000_000 >= reduced.0 else {
                    throw fail(
                        tokenStart,
                        "frame rate '\(token)' is faster than one frame per nanosecond: frames would share a pts")
                }
                rate = reduced
            case UInt8(ascii: "I"):
                switch value {
                case "p", "?": break
                case "t", "b", "m":
                    throw fail(tokenStart, .interlaced(token))
                default:
                    throw fail(tokenStart, "bad interlacing '\(token)': expected Ip, It, Ib, Im or I?")
                }
            case UInt8(ascii: "A"):
                guard let ratio = parseRatio(value) else {
                    throw fail(tokenStart, "bad pixel aspect ratio '\(token)': expected A<num>:<den>, e.g. A1:1")
                }
                guard (ratio.0 == 0) == (ratio.1 == 0) else {
                    throw fail(
                        tokenStart,
                        "bad pixel aspect ratio '\(token)': a zero term is a shape of no width or no height; give "
                            + "A0:0 for an unknown aspect, or a ratio of two positive terms, e.g. A1:1")
                }
                guard let shape = PixelAspect(numerator: ratio.0, denominator: ratio.1) else {
                    throw fail(
                        tokenStart,
                        "pixel aspect ratio '\(token)' has terms above 65535 once reduced: give a ratio of smaller "
                            + "terms, e.g. A10:11")
                }
                aspect = shape
            case UInt8(ascii: "C"):
                formatTag = value
                formatOffset = tokenStart
                switch value {
                case "420jpeg", "420":
                    (format, siting) = (.i420, .center)
                case "420mpeg2":
                    (format, siting) = (.i420, .left)
                case "420paldv":
                    (format, siting) = (.i420, .topLeft)
                case "420p10": format = .p010
                case "mono": format = .gray8
                default:
                    throw fail(tokenStart, .unsupportedColorSpace(token))
                }
            case UInt8(ascii: "X"):
                if value.hasPrefix("COLORRANGE=") {
                    switch value.dropFirst("COLORRANGE=".count) {
                    case "FULL": range = .full
                    case "LIMITED": range = .video
                    default:
                        throw fail(tokenStart, "bad colour range '\(token)': expected XCOLORRANGE=FULL or LIMITED")
                    }
                } else if value.hasPrefix("YSCSS=") {
                    subsampling = (String(value.dropFirst("YSCSS=".count)), tokenStart, token)
                }
            default:
                break
            }
        }
        if let subsampling {
            let implied: PixelFormat?
            switch subsampling.value {
            case "420JPEG", "420PALDV", "420MPEG2", "420": implied = .i420
            case "420P10": implied = .p010
            case "MONO": implied = .gray8
            default: implied = nil
            }
            if format == nil, let implied {
                format = implied
            } else if implied == nil || implied != (format ?? .i420) {
                let against = formatTag.isEmpty ? "the default C420jpeg" : "C\(formatTag) at byte \(formatOffset)"
                throw fail(
                    subsampling.offset,
                    "\(subsampling.token) contradicts \(against); supported are \(supportedColorSpaces)")
            }
        }
        guard let width else { throw fail(0, "header has no W tag (frame width): W, H and F are required") }
        guard let height else { throw fail(0, "header has no H tag (frame height): W, H and F are required") }
        guard let rate else { throw fail(0, "header has no F tag (frame rate): W, H and F are required") }
        let layout: FrameLayout
        do {
            layout = try FrameLayout(format: format ?? .i420, width: width, height: height)
        } catch {
            throw fail(0, error.description)
        }
        let duration = FrameTime(value: Int64(rate.denominator), timescale: Int32(rate.numerator))
        return Y4MHeader(
            layout: layout, frameDuration: duration, range: range, chromaSiting: siting, pixelAspect: aspect)
    }

    /// Parses `num:den`, each a whole number in decimal digits alone.
    private static func parseRatio(_ text: String) -> (Int, Int)? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let a = wholeNumber(parts[0]), let b = wholeNumber(parts[1]) else { return nil }
        return (a, b)
    }

    /// Decimal digits alone (no sign, no space) as a number; nil for anything else, or one above `Int.max`.
    private static func wholeNumber(_ text: some StringProtocol) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
            return nil
        }
        return Int(text)
    }

    /// `bytes` as a message may show them: printable ASCII as it is, every other byte as `\xNN`.
    static func shown(_ bytes: ArraySlice<UInt8>) -> String {
        bytes.map { (0x20..<0x7F).contains($0) ? String(UnicodeScalar($0)) : "\\x" + hex($0) }.joined()
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 15)]])
    }

    /// The first bytes of `line` as a message may show them (``shown(_:)``).
    static func excerpt(_ line: [UInt8]) -> String {
        shown(line.prefix(24)) + (line.count > 24 ? "…" : "")
    }
}
