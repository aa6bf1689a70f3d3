import RewindCore
import RewindSystem

/// Writes frames as Matroska (`.mkv`) with uncompressed video, exact per-frame timestamps and colour metadata.
///
/// Layout (EBML; sizes are 8-byte variable-length integers, "unknown" for the segment so pipes work):
///
///     EBML header            DocType "matroska", version 4
///     Segment (unknown size)
///       Info                 TimestampScale 1 (timestamps are nanoseconds), [Duration, patched on a file], apps
///       Tracks/TrackEntry    track 1, video, CodecID V_UNCOMPRESSED, DefaultDuration = frame duration in ns,
///         Video              PixelWidth, PixelHeight, [DisplayWidth, DisplayHeight, DisplayUnit 3: the
///                            display aspect of a known pixel aspect], ColourSpace (fourcc), Colour (matrix,
///                            range, primaries, transfer, [ChromaSitingHorz/Vert of a known siting])
///       Chapters             [one EditionEntry, a ChapterAtom per chapter: ChapterTimeStart = its pts in ns,
///                            ChapterDisplay with its title]
///       Cluster              one per frame: Timestamp = the frame's pts in ns
///         SimpleBlock        track 1, relative time 0, key frame, then the frame's packed planes
///       Cluster …
///
/// With a timestamp scale of 1 ns and one cluster per frame, every pts is stored exactly, whatever its spacing.
/// Several streams (``init(tracks:destination:fileSystem:)``) become one video track each (track n + 1, named after
/// the stream), their frames interleaved in the order of the timestamps the caller gives
/// (``write(_:track:timestampNanoseconds:)``: the recorder clock, so the tracks line up).
/// Fourccs: `I420` (i420), `NV12` (nv12, stored as is), `Y800` (gray8), `BGRA` (bgra), and `Y3[11][10]` for p010,
/// whose frames are written as planar 10-bit (``PlanarTenBit``, ffmpeg's `yuv420p10le`: the 10-bit values exactly,
/// through a buffer per such track, converted as each frame is written), with BitsPerChannel 10. Pts must not be
/// negative (cluster timestamps are unsigned).
public final class MatroskaWriter: Exporter {
    /// The stream given at creation (the first track's); every frame written to a track must have its layout.
    public let stream: StreamDescription
    /// Every track's stream, in track order.
    public let tracks: [StreamDescription]
    private let destination: ExportDestination
    private let output: OutputFile
    private var tally: ExportTally
    /// Each track's checks and counts (the first is ``tally``'s twin for several tracks).
    private var trackTallies: [ExportTally]
    /// The first and last cluster timestamps written.
    private var timestamps: (first: Int64, last: Int64)?
    /// Where each track's last frame ends: its timestamp plus the track's frame duration (nil before its first).
    private var trackEnds: [Int64?]
    /// Where the Duration value (8-byte float) sits, when the output is a file that can be patched.
    private var durationOffset: Int64?
    /// The per-frame cluster and block headers, rebuilt in place for each frame.
    private var frameHeader: [UInt8]
    /// For each `p010` track, the buffer its frames are converted into (``PlanarTenBit``); nil for other tracks.
    private let planarBuffers: [UnsafeMutableRawBufferPointer?]

    /// Opens the destination and writes the EBML header, segment info and track.
    ///
    /// - Parameters:
    ///   - stream: the stream every frame will belong to.
    ///   - destination: a path, or a descriptor the caller keeps.
    ///   - fileSystem: where the file's system calls go (a fault-injecting one in tests).
    ///   - chapters: chapters to write (markers), at their pts.
    /// - Throws: ``ExportError`` when the destination cannot be opened or written.
    public convenience init(
        stream: StreamDescription, destination: ExportDestination, fileSystem: any FileSystem = POSIXFileSystem(),
        chapters: [ExportChapter] = []
    ) throws(ExportError) {
        try self.init(
            tracks: [(name: nil, stream: stream)], destination: destination, fileSystem: fileSystem,
            chapters: chapters)
    }

    /// Opens the destination and writes the EBML header, segment info and one video track per stream.
    ///
    /// - Parameters:
    ///   - tracks: each track's name (nil: none) and stream, in track order; 1 to 126 of them.
    ///   - destination: a path, or a descriptor the caller keeps.
    ///   - fileSystem: where the file's system calls go (a fault-injecting one in tests).
    ///   - chapters: chapters to write (markers), at their times (the timestamps the frames are written with).
    /// - Throws: ``ExportError`` when the destination cannot be opened or written.
    public init(
        tracks: [(name: String?, stream: StreamDescription)], destination: ExportDestination,
        fileSystem: any FileSystem = POSIXFileSystem(), chapters: [ExportChapter] = []
    ) throws(ExportError) {
        precondition((1...126).contains(tracks.count), "a Matroska export has 1 to 126 tracks")
        let stream = tracks[0].stream
        self.stream = stream
        self.tracks = tracks.map(\.stream)
        self.destination = destination
        self.tally = ExportTally(stream: stream)
        self.trackTallies = tracks.map { ExportTally(stream: $0.stream) }
        self.trackEnds = Array(repeating: nil, count: tracks.count)
        self.output = try OutputFile(destination, fileSystem: fileSystem)
        self.planarBuffers = tracks.map { track in
            track.stream.layout.format == .p010
                ? UnsafeMutableRawBufferPointer.allocate(byteCount: track.stream.layout.byteCount, alignment: 16) : nil
        }
        self.frameHeader = []
        frameHeader.reserveCapacity(64)
        var head = EBMLBuffer()
        head.master(0x1A45_DFA3) { e in
            e.uint(0x4286, 1)
            e.uint(0x42F7, 1)
            e.uint(0x42F2, 4)
            e.uint(0x42F3, 8)
            e.string(0x4282, "matroska")
            e.uint(0x4287, 4)
            e.uint(0x4285, 2)
        }
        head.id(0x1853_8067)
        head.bytes += [0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]  // unknown size
        var durationPosition: Int?
        let infoStart = head.bytes.count + 4 + 8  // the Info element's ID and size come first
        head.master(0x1549_A966) { e in
            e.uint(0x2A_D7B1, 1)
            if output.isRegularFile {
                e.id(0x4489)
                e.size(8)
                durationPosition = e.bytes.count
                e.bytes += [UInt8](repeating: 0, count: 8)
            }
            e.string(0x4D80, "rewind")
            e.string(0x5741, "rewind")
        }
        if let durationPosition { durationOffset = Int64(infoStart + durationPosition) }
        head.master(0x1654_AE6B) { entries in
            for (number, track) in tracks.enumerated() {
                let stream = track.stream
                let fourcc = MatroskaWriter.fourcc(stream.layout.format)
                let frameNanoseconds = MatroskaWriter.defaultDuration(stream.frameDuration)
                let color = MatroskaWriter.colour(stream)
                entries.master(0xAE) { t in
                    t.uint(0xD7, UInt64(number + 1))
                    t.uint(0x73C5, UInt64(number + 1))
                    t.uint(0x83, 1)
                    t.uint(0x9C, 0)
                    if let name = track.name { t.string(0x536E, name) }
                    t.string(0x86, "V_UNCOMPRESSED")
                    t.uint(0x23_E383, frameNanoseconds)
                    t.master(0xE0) { v in
                        v.uint(0xB0, UInt64(stream.layout.width))
                        v.uint(0xBA, UInt64(stream.layout.height))
                        if let display = MatroskaWriter.displayAspect(stream) {
                            v.uint(0x54B0, display.width)
                            v.uint(0x54BA, display.height)
                            v.uint(0x54B2, 3)
                        }
                        v.binary(0x2E_B524, Array(fourcc.utf8))
                        v.master(0x55B0) { c in
                            if stream.layout.format == .p010 { c.uint(0x55B2, 10) }
                            c.uint(0x55B1, color.matrix)
                            c.uint(0x55B9, color.range)
                            c.uint(0x55BA, color.transfer)
                            c.uint(0x55BB, color.primaries)
                            if let siting = MatroskaWriter.siting(stream) {
                                c.uint(0x55B7, siting.horizontal)
                                c.uint(0x55B8, siting.vertical)
                            }
                        }
                    }
                }
            }
        }
        if !chapters.isEmpty {
            head.master(0x1043_A770) { list in
                list.master(0x45B9) { edition in
                    for (number, chapter) in chapters.enumerated() {
                        edition.master(0xB6) { atom in
                            atom.uint(0x73C4, UInt64(number + 1))
                            atom.uint(0x91, UInt64(max(0, chapter.ptsNanoseconds)))
                            atom.master(0x80) { display in
                                display.string(0x85, chapter.title)
                                display.string(0x437C, "und")
                            }
                        }
                    }
                }
            }
        }
        try output.write(head.bytes)
    }

    /// Appends `frame` as a cluster with its exact pts.
    ///
    /// - Throws: ``FrameError`` for a frame of another layout or out of pts order; ``ExportError`` for a negative
    ///   pts or when writing fails.
    /// - Complexity: O(frame bytes); no allocation.
    public func write(_ frame: FrameView) throws {
        try write(frame, track: 0, timestampNanoseconds: frame.info.ptsNanoseconds)
    }

    /// Appends `frame` to track `track` (from 0) as a cluster with timestamp `timestampNanoseconds`.
    ///
    /// - Parameters:
    ///   - frame: the track's next frame: its layout, pts after the track's previous frame.
    ///   - track: the track's index, as given at creation.
    ///   - timestampNanoseconds: the cluster's timestamp: not negative, and not before the previous cluster's.
    /// - Throws: ``FrameError`` for a frame of another layout or out of pts order; ``ExportError`` for a negative
    ///   or decreasing timestamp or when writing fails.
    /// - Complexity: O(frame bytes); no allocation.
    public func write(_ frame: FrameView, track: Int, timestampNanoseconds: Int64) throws {
        guard timestampNanoseconds >= 0 else {
            throw ExportError(destination: destination.description, reason: .negativePTS(timestampNanoseconds))
        }
        if track == 0 { _ = try tally.accept(frame) }
        if tracks.count > 1 { _ = try trackTallies[track].accept(frame) }
        if let last = timestamps?.last, timestampNanoseconds < last {
            throw FrameError.nonMonotonicPTS(previousNanoseconds: last, nanoseconds: timestampNanoseconds)
        }
        timestamps = (timestamps?.first ?? timestampNanoseconds, timestampNanoseconds)
        trackEnds[track] =
            timestampNanoseconds + Int64(clamping: MatroskaWriter.defaultDuration(tracks[track].frameDuration))
        let payload = UInt64(frame.bytes.count)
        let blockSize = 4 + payload  // track number, relative timestamp (2 bytes), flags
        let clusterSize = (1 + 1 + 8) + (1 + 8 + blockSize)
        frameHeader.removeAll(keepingCapacity: true)
        MatroskaWriter.append(&frameHeader, id: 0x1F43_B675)
        MatroskaWriter.append(&frameHeader, size: clusterSize)
        frameHeader.append(0xE7)
        MatroskaWriter.append(&frameHeader, size: 8, width: 1)
        MatroskaWriter.append(&frameHeader, bigEndian: UInt64(timestampNanoseconds), count: 8)
        frameHeader.append(0xA3)
        MatroskaWriter.append(&frameHeader, size: blockSize)
        frameHeader += [0x80 | UInt8(track + 1), 0x00, 0x00, 0x80]
        try output.write(frameHeader)
        if let planar = planarBuffers[track] {
            PlanarTenBit.convert(frame, into: planar.baseAddress!)
            try output.write(UnsafeRawBufferPointer(planar))
        } else {
            try output.write(frame.bytes)
        }
    }

    deinit {
        for buffer in planarBuffers { buffer?.deallocate() }
    }

    /// Patches the segment's Duration (on a regular file: from the first timestamp to where the track that ends
    /// last ends, its last frame's timestamp plus its frame duration), then flushes and closes the output; a
    /// descriptor the caller gave stays open.
    ///
    /// - Returns: what was written.
    /// - Throws: ``ExportError`` when patching, writing or closing fails.
    public func finish() throws -> ExportSummary {
        if let durationOffset, let (first, _) = timestamps, let end = trackEnds.compactMap({ $0 }).max() {
            let duration = Double(end - first)
            var bytes: [UInt8] = []
            MatroskaWriter.append(&bytes, bigEndian: duration.bitPattern, count: 8)
            try output.patch(at: durationOffset, bytes)
        }
        try output.close()
        var summary = tally.summary(
            format: .matroska, destination: destination, filledFrames: 0, bytes: output.bytesWritten)
        // First and last are the timestamps written (the clock the tracks share, for one track too: an export of
        // several streams where one has frames in the range writes recorder time, not that stream's pts).
        if let (first, last) = timestamps {
            summary.firstPTSNanoseconds = first
            summary.lastPTSNanoseconds = last
        }
        if tracks.count > 1 { summary.frames = trackTallies.reduce(0) { $0 + $1.frames } }
        return summary
    }

    static func fourcc(_ format: PixelFormat) -> String {
        switch format {
        case .i420: "I420"
        case .nv12: "NV12"
        case .gray8: "Y800"
        case .bgra: "BGRA"
        case .p010: "Y3\u{0B}\u{0A}"
        }
    }

    /// The frame duration in whole nanoseconds (rounded), as Matroska's DefaultDuration wants.
    static func defaultDuration(_ duration: FrameTime) -> UInt64 {
        let ns = Int128(duration.value) * Int128(FrameTime.nanosecondsPerSecond)
        return UInt64((ns + Int128(duration.timescale) / 2) / Int128(duration.timescale))
    }

    /// The display aspect ratio (reduced) of a stream whose pixel aspect is known: its size with each pixel's shape.
    static func displayAspect(_ stream: StreamDescription) -> (width: UInt64, height: UInt64)? {
        let aspect = stream.pixelAspect
        guard aspect.isKnown else { return nil }
        let width = UInt64(stream.layout.width) * UInt64(aspect.numerator)
        let height = UInt64(stream.layout.height) * UInt64(aspect.denominator)
        let divisor = greatestCommonDivisor(width, height)
        return (width / divisor, height / divisor)
    }

    /// Matroska's ChromaSitingHorz and ChromaSitingVert (1 collocated with the left column or top row, 2 half-way)
    /// for a 4:2:0 stream whose chroma siting is known.
    static func siting(_ stream: StreamDescription) -> (horizontal: UInt64, vertical: UInt64)? {
        guard stream.layout.format != .bgra, stream.layout.format != .gray8 else { return nil }
        switch stream.chromaSiting {
        case .unspecified: return nil
        case .center: return (2, 2)
        case .left: return (1, 2)
        case .topLeft: return (1, 1)
        }
    }

    /// Matroska's Colour values (ISO/IEC 23091-4 code points) for the stream.
    static func colour(_ stream: StreamDescription) -> (
        matrix: UInt64, range: UInt64, transfer: UInt64, primaries: UInt64
    ) {
        if stream.layout.format == .bgra { return (0, 2, 2, 2) }  // RGB: identity matrix, full range
        let range: UInt64 = stream.color.range == .full ? 2 : 1
        switch stream.color.matrix {
        case .bt709: return (1, range, 1, 1)
        case .bt601: return (6, range, 6, 6)
        case .bt2020: return (9, range, 14, 9)
        case .unspecified: return (2, range, 2, 2)
        }
    }

    static func append(_ bytes: inout [UInt8], id: UInt32) {
        let count = id > 0xFF_FFFF ? 4 : id > 0xFFFF ? 3 : id > 0xFF ? 2 : 1
        append(&bytes, bigEndian: UInt64(id), count: count)
    }

    /// Appends a size as an EBML variable-length integer of `width` bytes (8 by default).
    static func append(_ bytes: inout [UInt8], size: UInt64, width: Int = 8) {
        precondition(size < (1 << (7 * UInt64(width))) - 1, "EBML size \(size) does not fit in \(width) bytes")
        append(&bytes, bigEndian: size | (1 << (7 * UInt64(width))), count: width)
    }

    static func append(_ bytes: inout [UInt8], bigEndian value: UInt64, count: Int) {
        for k in stride(from: count - 1, through: 0, by: -1) {
            bytes.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(k))))
        }
    }
}

/// Builds EBML elements in memory (headers only; frames are written straight to the output).
struct EBMLBuffer {
    var bytes: [UInt8] = []

    mutating func id(_ id: UInt32) { MatroskaWriter.append(&bytes, id: id) }

    mutating func size(_ size: UInt64) { MatroskaWriter.append(&bytes, size: size) }

    mutating func uint(_ id: UInt32, _ value: UInt64) {
        self.id(id)
        let count = max(1, (64 - value.leadingZeroBitCount + 7) / 8)
        MatroskaWriter.append(&bytes, size: UInt64(count), width: 1)
        MatroskaWriter.append(&bytes, bigEndian: value, count: count)
    }

    mutating func string(_ id: UInt32, _ value: String) { binary(id, Array(value.utf8)) }

    mutating func binary(_ id: UInt32, _ value: [UInt8]) {
        self.id(id)
        size(UInt64(value.count))
        bytes += value
    }

    /// Appends a master element whose children `body` writes.
    mutating func master(_ id: UInt32, _ body: (inout EBMLBuffer) -> Void) {
        var child = EBMLBuffer()
        body(&child)
        self.id(id)
        size(UInt64(child.bytes.count))
        bytes += child.bytes
    }
}
