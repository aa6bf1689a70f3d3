import Glibc
import RewindCore
import RewindSystem

/// The file formats a clip can be exported to.
public enum ExportFormat: String, Sendable, Hashable, CaseIterable {
    /// YUV4MPEG2: raw planes at a constant frame rate; gaps are filled by repeating frames.
    case y4m
    /// Matroska with uncompressed video: exact per-frame timestamps and colour metadata.
    case matroska
    /// H.264 in MP4, encoded by the system's `ffmpeg`.
    case mp4

    /// The format a file name's extension names (`.y4m`, `.mkv`, `.mp4`, any case); nil for anything else.
    public init?(path: String) {
        guard let dot = path.lastIndex(of: "."), !path[dot...].contains("/") else { return nil }
        self.init(fileExtension: path[path.index(after: dot)...].lowercased())
    }

    /// The format of ``fileExtension`` `text` (`y4m`, `mkv`, `mp4`, as written); nil for anything else.
    public init?(fileExtension text: String) {
        guard let format = Self.allCases.first(where: { $0.fileExtension == text }) else { return nil }
        self = format
    }

    /// The file name extension, without the dot.
    public var fileExtension: String {
        switch self {
        case .y4m: "y4m"
        case .matroska: "mkv"
        case .mp4: "mp4"
        }
    }
}

/// Where an export goes: a file (created or truncated) or an open descriptor the caller owns.
public enum ExportDestination: Sendable, Hashable, CustomStringConvertible {
    /// A file path: the file is created, or truncated when it exists, and closed by the exporter.
    case path(String)
    /// An open descriptor written from its current position; `name` names it in errors. The caller owns it: the
    /// export never closes it, and the caller closes it after the export returns.
    case fileDescriptor(FileDescriptor, name: String)

    /// Standard output.
    public static let standardOutput = ExportDestination.fileDescriptor(.standardOutput, name: "stdout")

    /// Parses a command-line argument: `-` is standard output, anything else a path.
    public init(argument: String) {
        self = argument == "-" ? .standardOutput : .path(argument)
    }

    /// How messages name the destination: the path, or the descriptor's name (such as `stdout`).
    public var description: String {
        switch self {
        case .path(let path): path
        case .fileDescriptor(_, let name): name
        }
    }
}

/// What an export wrote.
public struct ExportSummary: Sendable, Hashable {
    /// The file format written.
    public var format: ExportFormat
    /// The file written, or nil when the destination was a descriptor.
    public var path: String?
    /// Frames the caller wrote.
    public var frames: Int
    /// Frames added to fill gaps (YUV4MPEG2 only: a repeat of the frame before the gap).
    public var filledFrames: Int
    /// Bytes written to the destination.
    public var bytes: Int64
    /// The pts of the first frame the caller wrote, nanoseconds on the stream clock; nil when there were none.
    public var firstPTSNanoseconds: Int64?
    /// The pts of the last frame the caller wrote, nanoseconds on the stream clock; nil when there were none.
    public var lastPTSNanoseconds: Int64?
    /// For a file of several named tracks (Matroska): each track's last frame's timestamp, by track name (tracks
    /// without frames absent); empty otherwise.
    public var lastTimestampByTrack: [String: Int64] = [:]

    /// Frames in the file: the caller's plus the filled ones.
    public var writtenFrames: Int { frames + filledFrames }

    /// Makes a summary from its fields; each parameter is the property of the same name.
    public init(
        format: ExportFormat, path: String?, frames: Int, filledFrames: Int, bytes: Int64,
        firstPTSNanoseconds: Int64?, lastPTSNanoseconds: Int64?
    ) {
        self.format = format
        self.path = path
        self.frames = frames
        self.filledFrames = filledFrames
        self.bytes = bytes
        self.firstPTSNanoseconds = firstPTSNanoseconds
        self.lastPTSNanoseconds = lastPTSNanoseconds
    }
}

/// An export that failed: which destination, and what was wrong.
public struct ExportError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong.
    public enum Reason: Sendable, Hashable {
        /// An external program the format needs (`ffmpeg` for MP4) is not on the search path.
        case missingTool(String)
        /// The external program could not be started.
        case cannotStartTool(path: String, detail: String)
        /// The system refused the external program's process (a limit on processes or memory was reached).
        case toolRefused(ThreadStartFailed)
        /// The external program failed: its exit status, the tail of its stderr (may be empty), and the error
        /// that made us stop feeding it, if any.
        case toolFailed(tool: String, status: Int32, log: String, cause: String?)
        /// The external program failed (its exit status, the tail of its stderr) in a way that says the system refused
        /// it memory (a library it could not map, `ENOMEM`, `EAGAIN`), and it ran under this process's limit on
        /// address space, `limit` bytes (`ulimit -v`, systemd's `LimitAS=`, which it inherits): the likely cause.
        case toolShortOfAddressSpace(tool: String, status: Int32, log: String, limit: Int)
        /// A system call on the destination failed; `action` says which (`cannot create the file`, `writing`).
        case system(action: String, Errno)
        /// The format cannot carry the stream's pixel format (`y4m` and `bgra`).
        case unsupportedPixelFormat(PixelFormat, format: ExportFormat)
        /// A frame's pts is negative and the format's timestamps start at 0.
        case negativePTS(Int64)
        /// Frames of `width` x `height` exceed what the format's encoder takes on a side (`limit`: x264's 16384).
        case frameTooLarge(width: Int, height: Int, limit: Int)
        /// Two frames (or one frame and its end) `nanoseconds` apart, more than an `.mp4` sample's 32-bit duration
        /// holds at the file's clock (`longest`: 2³¹ − 1 ticks of 90 kHz, about 6 h 37 min; 2.1 s for a stream
        /// faster than 90 kHz, timed to the nanosecond). ffmpeg would squeeze the frames after it together.
        case intervalTooLongForMP4(nanoseconds: Int64, longest: Int64, after: Int64?)
        /// Filling a gap at a constant frame rate (`.y4m`) would repeat `frames` frames, `bytes` bytes, where the
        /// file system has `available` bytes free, less what is kept free for recordings.
        case gapTooLarge(frames: Int, bytes: Int64, available: Int64)
        /// An ``Interruption`` ended a wait with no end of its own: `waiting` says for what (its reader to take
        /// more bytes, ffmpeg to finish).
        case interrupted(waiting: String)
        /// The external program writing the file (ffmpeg) failed, and the file system of `directory`, where it
        /// wrote it, had `availableBytes` left: too little for the rest (ffmpeg may say so only in its log, or exit
        /// 0 with the file's index missing). `log`: the tail of its stderr (may be empty).
        case noRoom(tool: String, directory: String, availableBytes: Int64, log: String)
        /// The temporary directory (`TMPDIR`), `directory`, took no file for the external program's log: it is
        /// missing, not a directory, or not writable.
        case temporaryDirectoryUnusable(directory: String, Errno)
    }

    /// Whether the destination's file system had no room: a write found `ENOSPC`, or ffmpeg failed with (almost)
    /// none left where it wrote.
    public var isOutOfRoom: Bool {
        switch reason {
        case .noRoom: true
        case .system(_, let errno): errno == Errno(rawValue: ENOSPC)
        default: false
        }
    }

    /// The destination as messages name it: the path, or the descriptor's name (such as `stdout`).
    public var destination: String
    /// What went wrong.
    public var reason: Reason

    /// Makes an error about one destination.
    ///
    /// - Parameters:
    ///   - destination: the path, or the descriptor's name (an ``ExportDestination``'s description).
    ///   - reason: what went wrong.
    public init(destination: String, reason: Reason) {
        self.destination = destination
        self.reason = reason
    }

    /// What was wrong, without the destination.
    public var message: String {
        switch reason {
        case .missingTool(let tool):
            return "\(tool) not found on PATH"
        case .cannotStartTool(let path, let detail):
            return "cannot start \(path): \(detail)"
        case .toolRefused(let failure):
            return "\(failure)"
        case .toolFailed(let tool, let status, let log, let cause):
            // ChildProcess reports a child ended by a signal as 128 + the signal's number.
            var message =
                if (129...192).contains(status) {
                    "\(tool) was ended by signal \(status - 128) (\(String(cString: strsignal(status - 128))))"
                } else if status == 0 {
                    // It said it succeeded, but what it made is not whole (the cause says how).
                    "\(cause ?? "\(tool) did not finish its output") (\(tool) exited with status 0)"
                } else {
                    "\(tool) failed (exit status \(status))"
                }
            if !log.isEmpty { message += ":\n\(log)" }
            if let cause, log.isEmpty, status != 0 { message += " after \(cause)" }
            return message
        case .toolShortOfAddressSpace(let tool, let status, let log, let limit):
            return "\(tool) failed (exit status \(status)) for want of memory, likely because of the limit on address "
                + "space it runs under: \(limit >> 20) MiB (ulimit -v \(limit >> 10))"
                + (log.isEmpty ? "" : ":\n\(log)")
        case .system(let action, let errno):
            return "\(action): \(errno)"
        case .unsupportedPixelFormat(let pixelFormat, let format):
            switch format {
            case .y4m: return "YUV4MPEG2 has no RGB format, so \(pixelFormat) frames cannot be written to .y4m"
            case .matroska, .mp4: return "\(pixelFormat) frames cannot be written to .\(format.fileExtension)"
            }
        case .negativePTS(let pts):
            return "pts \(pts) ns is negative; Matroska timestamps start at 0"
        case .frameTooLarge(let width, let height, let limit):
            return "\(width)x\(height) frames cannot be written to .mp4: its H.264 encoder (x264) takes at most "
                + "\(limit) pixels a side"
        case .intervalTooLongForMP4(let nanoseconds, let longest, let after):
            // To the nanosecond where the two would read alike at the millisecond.
            let digits =
                String(format: "%.3f", Double(nanoseconds) / 1e9) == String(format: "%.3f", Double(longest) / 1e9)
            let seconds = { (value: Int64) in String(format: digits ? "%.9fs" : "%.3fs", Double(value) / 1e9) }
            let what =
                after.map { "frames \(seconds(nanoseconds)) apart (after pts \(seconds($0)))" }
                ?? "a frame lasting \(seconds(nanoseconds)) (its stream's frame rate)"
            return
                "\(what) cannot be timed in .mp4: a sample's duration there may be at most \(seconds(longest)) at its "
                + "clock; export .mkv, which keeps each frame's time however long"
                + (after == nil ? "" : ", or clip the parts before and after the gap")
        case .gapTooLarge(let frames, let bytes, let available):
            let fill =
                "a gap in the range would take \(frames) repeated frames (\(bytes >> 20) MiB) to fill at a constant "
                + "frame rate"
            guard available > OutputFile.keptFree else {
                // Nothing may be used: the disk has less free than an export leaves free.
                return fill + ", and its disk has \(available >> 20) MiB free, less than the "
                    + "\(OutputFile.keptFree >> 20) MiB an export leaves free for recordings"
            }
            return fill + ", more than the \((available - OutputFile.keptFree) >> 20) MiB this export may still use on "
                + "its disk (\(available >> 20) MiB free, of which \(OutputFile.keptFree >> 20) MiB stay free for "
                + "recordings)"
        case .interrupted(let waiting):
            return "interrupted while waiting for \(waiting): the export was stopped; no file was kept"
        case .temporaryDirectoryUnusable(let directory, let errno):
            return "cannot make ffmpeg's log in the temporary directory TMPDIR (\(directory)): \(errno)"
        case .noRoom(let tool, let directory, let available, let log):
            let free = available < 1 << 20 ? "\(available >> 10) KiB" : "\(available >> 20) MiB"
            return "\(tool) could not finish the file: \(directory) has no room left (\(free) free; "
                + "\(Errno(rawValue: ENOSPC)))" + (log.isEmpty ? "" : ":\n\(log)")
        }
    }

    /// The destination and the message, such as `clip.mp4: ffmpeg not found on PATH`.
    public var description: String { "\(destination): \(message)" }
}

/// A sink that writes frames of one stream to a file and reports what it wrote.
///
/// Frames must match the stream's layout and come in increasing pts order. Call ``finish()`` once, after the last
/// frame: it flushes and closes the output. An exporter dropped without `finish()` closes its file, and what it
/// holds may be incomplete.
public protocol Exporter: FrameSink {
    /// The stream the exporter was created for.
    var stream: StreamDescription { get }
    /// Flushes and closes the output.
    ///
    /// - Returns: what was written.
    /// - Throws: ``ExportError`` when writing or the encoder fails.
    mutating func finish() throws -> ExportSummary
}

/// A named moment of an export (a marker): Matroska writes it as a chapter; the other formats have none.
public struct ExportChapter: Sendable, Hashable {
    /// Its time, pts nanoseconds on the stream clock.
    public var ptsNanoseconds: Int64
    /// Its title.
    public var title: String

    /// Makes a chapter.
    public init(ptsNanoseconds: Int64, title: String) {
        self.ptsNanoseconds = ptsNanoseconds
        self.title = title
    }
}

/// Makes the exporter for `format`.
///
/// - Parameters:
///   - format: the file format.
///   - stream: the stream every frame will belong to.
///   - destination: a path, or a descriptor (`-` on the command line is standard output).
///   - quality: how `mp4` is encoded (ignored by the uncompressed formats).
///   - fileSystem: where the exporter's writes go (a fault-injecting one in tests).
///   - chapters: markers to write as chapters (Matroska only).
///   - framesFromDecoder: the frames come from a decoder on another thread (an export from disk): `.y4m` then
///     converts NV12 chroma on the writing thread (see ``Y4MWriter/init(stream:destination:fileSystem:convertsOnHelper:)``).
/// - Returns: a ``Y4MWriter``, ``MatroskaWriter`` or ``MP4Exporter``.
/// - Throws: ``ExportError`` when the destination cannot be opened, the format cannot carry the stream's pixel
///   format, or (`mp4`) `ffmpeg` is not available.
public func makeExporter(
    format: ExportFormat, stream: StreamDescription, destination: ExportDestination, quality: ExportQuality = .fast,
    fileSystem: any FileSystem = POSIXFileSystem(), chapters: [ExportChapter] = [], framesFromDecoder: Bool = false
) throws(ExportError) -> any Exporter {
    switch format {
    case .y4m:
        try Y4MWriter(
            stream: stream, destination: destination, fileSystem: fileSystem, convertsOnHelper: !framesFromDecoder)
    case .matroska:
        try MatroskaWriter(stream: stream, destination: destination, fileSystem: fileSystem, chapters: chapters)
    case .mp4: try MP4Exporter(stream: stream, destination: destination, quality: quality, fileSystem: fileSystem)
    }
}

/// How a compressed export (`.mp4`) trades encoding time for size and fidelity; `.y4m` and `.mkv` are always
/// uncompressed and exact. The raw value is the name the command line and the control protocol use.
public enum ExportQuality: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// x264's `ultrafast` preset at CRF 20: encodes a 1080p60 clip faster than it plays; the default for saves.
    case fast
    /// x264's `medium` preset at CRF 20: smaller files, several times slower than `fast`.
    case balanced
    /// x264 lossless (`-qp 0`, `ultrafast`): decodes to exactly the stored pixels of 4:2:0 frames (`nv12`,
    /// `i420`) and to the stored luma of `gray8` (its chroma neutral); `bgra` is converted to 4:2:0 first.
    case lossless

    /// The name: `fast`, `balanced` or `lossless`.
    public var description: String { rawValue }

    /// The x264 options for this quality.
    var x264Arguments: [String] {
        switch self {
        case .fast: ["-preset", "ultrafast", "-crf", "20"]
        case .balanced: ["-preset", "medium", "-crf", "20"]
        case .lossless: ["-preset", "ultrafast", "-qp", "0"]
        }
    }
}

/// The checks and counts every exporter shares: layout, pts order, first and last pts.
struct ExportTally {
    let stream: StreamDescription
    private(set) var frames = 0
    private(set) var firstPTSNanoseconds: Int64?
    private(set) var lastPTSNanoseconds: Int64?

    init(stream: StreamDescription) { self.stream = stream }

    /// Checks `frame` against the stream and the previous frame, and counts it.
    ///
    /// - Returns: the previous frame's pts, if any.
    /// - Throws: ``FrameError`` on a layout mismatch or a pts not after the previous one.
    mutating func accept(_ frame: FrameView) throws(FrameError) -> Int64? {
        guard frame.layout == stream.layout else {
            throw .layoutMismatch(expected: stream.layout, actual: frame.layout)
        }
        return try accept(ptsNanoseconds: frame.info.ptsNanoseconds)
    }

    /// Checks a frame at `pts` against the previous frame, and counts it.
    ///
    /// - Returns: the previous frame's pts, nil for the first frame.
    mutating func accept(ptsNanoseconds pts: Int64) throws(FrameError) -> Int64? {
        let previous = lastPTSNanoseconds
        if let previous {
            if pts == previous { throw .duplicatePTS(nanoseconds: pts) }
            if pts < previous { throw .nonMonotonicPTS(previousNanoseconds: previous, nanoseconds: pts) }
        }
        if firstPTSNanoseconds == nil { firstPTSNanoseconds = pts }
        lastPTSNanoseconds = pts
        frames += 1
        return previous
    }

    func summary(format: ExportFormat, destination: ExportDestination, filledFrames: Int, bytes: Int64)
        -> ExportSummary
    {
        var path: String? = nil
        if case .path(let p) = destination { path = p }
        return ExportSummary(
            format: format, path: path, frames: frames, filledFrames: filledFrames, bytes: bytes,
            firstPTSNanoseconds: firstPTSNanoseconds, lastPTSNanoseconds: lastPTSNanoseconds)
    }
}

/// A `p010` frame as planar 10-bit 4:2:0 (`yuv420p10le`, YUV4MPEG2's `C420p10`, Matroska's `Y3[11][10]`): 16-bit
/// little-endian samples holding the 10-bit value in their low bits, the Y plane, then Cb, then Cr. As many bytes as
/// the `p010` frame.
enum PlanarTenBit {
    /// Writes `frame` (a `p010` frame) as planar 10-bit into `out` (the frame's byte count).
    static func convert(_ frame: FrameView, into out: UnsafeMutableRawPointer) {
        let lumaSamples = frame.layout.plane(0).byteCount / 2
        let chroma = frame.layout.plane(1).byteCount / 4
        let samples = out.assumingMemoryBound(to: UInt16.self)
        frame.plane(0).withMemoryRebound(to: UInt16.self) { y in
            for i in 0..<lumaSamples { samples[i] = (UInt16(littleEndian: y[i]) >> 6).littleEndian }
        }
        frame.plane(1).withMemoryRebound(to: UInt16.self) { uv in
            let u = samples + lumaSamples
            let v = u + chroma
            for i in 0..<chroma {
                u[i] = (UInt16(littleEndian: uv[2 * i]) >> 6).littleEndian
                v[i] = (UInt16(littleEndian: uv[2 * i + 1]) >> 6).littleEndian
            }
        }
    }
}
