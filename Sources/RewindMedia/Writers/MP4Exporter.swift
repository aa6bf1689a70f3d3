import Foundation
import RewindCore
import RewindSystem

/// Encodes frames to H.264 in MP4 with the system's `ffmpeg`, fed a lossless Matroska stream on its stdin.
///
///     frames → MatroskaWriter → pipe → ffmpeg -f matroska -i pipe:0 -fps_mode passthrough
///                                            -c:v libx264 -pix_fmt yuv420p <quality> <colour flags> out.mp4
///
/// `<quality>` is ``ExportQuality``'s x264 preset and rate control: `fast` (the default) encodes 1080p60 faster
/// than real time on two cores, `lossless` decodes to exactly the stored pixels of 4:2:0 frames (`nv12`, `i420`)
/// and the stored luma of `gray8`.
///
/// The Matroska stream carries every frame's exact pts, and `-fps_mode passthrough` keeps one output frame per
/// input frame: none duplicated, none dropped. The stream's matrix and range become the MP4's colour tags (and,
/// for `bgra`, the RGB→YUV conversion). A `gray8` stream is fed as I420 with neutral chroma (128), so ffmpeg has
/// nothing to convert and its levels stay as stored in either range (swscale would squeeze full-range gray into
/// video range). To standard output the MP4 is fragmented (a pipe cannot be seeked back).
///
/// The Matroska stream goes to ffmpeg's stdin through the given ``FileSystem``; ffmpeg writes the MP4 itself.
/// `ffmpeg`'s stderr goes to a temporary file; when it fails, the error carries its last lines. Writing to a pipe
/// whose reader died would raise SIGPIPE, so creating an exporter sets SIGPIPE to be ignored in this process
/// (writes then fail with EPIPE, reported with ffmpeg's own error).
public final class MP4Exporter: Exporter {
    /// The stream given at creation; every frame written must have its layout.
    public let stream: StreamDescription
    private let destination: ExportDestination
    private let process: ChildProcess
    private let input: FileHandle
    private let errorLog: String
    /// Where the writes to ffmpeg's stdin go, and where the room left for its file is read.
    private let fileSystem: any FileSystem
    private var matroska: MatroskaWriter?
    private var tally: ExportTally
    /// The pts of the last frame written, to find intervals too long for a sample (``longestInterval(_:)``).
    private var previousPTS: Int64?
    /// The frame as ffmpeg gets it, when that differs from the stored one:
    /// - a stream of odd width or height is grown to even sides (H.264 4:2:0 needs them), the last column and row
    ///   repeated. ffmpeg's `pad` filter would round an odd 4:2:0 input down first and lose the last column.
    ///   Chroma planes already cover the odd pixel and are copied as they are.
    /// - `gray8` becomes I420: its luma copied (grown to even sides), both chroma planes 128, filled once.
    private let fed: (layout: FrameLayout, buffer: UnsafeMutableRawBufferPointer)?

    /// Starts `ffmpeg`, found on `searchPath`.
    ///
    /// - Parameters:
    ///   - stream: the stream every frame will belong to.
    ///   - destination: the MP4 file, or a descriptor (a fragmented MP4 is written there).
    ///   - quality: the x264 settings (``ExportQuality``).
    ///   - searchPath: the directories to look for `ffmpeg` in, `:`-separated; defaults to `PATH`.
    ///   - fileSystem: where the writes to ffmpeg's stdin go (a fault-injecting one in tests).
    /// - Throws: ``ExportError`` when `ffmpeg` is not found or cannot be started.
    public init(
        stream: StreamDescription, destination: ExportDestination, quality: ExportQuality = .fast,
        searchPath: String? = nil, fileSystem: any FileSystem = POSIXFileSystem()
    ) throws(ExportError) {
        let path = searchPath ?? ProcessInfo.processInfo.environment["PATH"] ?? ""
        guard let ffmpeg = MP4Exporter.locate("ffmpeg", in: path) else {
            throw ExportError(destination: destination.description, reason: .missingTool("ffmpeg"))
        }
        // Refused before ffmpeg starts (it would fail after its first frame, with x264's words).
        let largest = max(stream.layout.width, stream.layout.height)
        guard largest <= MP4Exporter.largestSide else {
            throw ExportError(
                destination: destination.description,
                reason: .frameTooLarge(
                    width: stream.layout.width, height: stream.layout.height, limit: MP4Exporter.largestSide))
        }
        // A frame's own duration (its last frame's, in the file) must fit a sample too.
        if let frame = stream.frameDuration.nanoseconds, frame > MP4Exporter.longestInterval(stream) {
            throw ExportError(
                destination: destination.description,
                reason: .intervalTooLongForMP4(
                    nanoseconds: frame, longest: MP4Exporter.longestInterval(stream), after: nil))
        }
        self.stream = stream
        self.destination = destination
        self.fileSystem = fileSystem
        self.tally = ExportTally(stream: stream)
        var fedStream = stream
        let isOddSized = stream.layout.width % 2 == 1 || stream.layout.height % 2 == 1
        if isOddSized || stream.layout.format == .gray8,
            let layout = try? FrameLayout(
                format: stream.layout.format == .gray8 ? .i420 : stream.layout.format,
                width: (stream.layout.width + 1) / 2 * 2, height: (stream.layout.height + 1) / 2 * 2)
        {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: layout.byteCount, alignment: 16)
            // Planes the stored frame lacks (gray8's chroma) are neutral, and stay so: each frame fills the others.
            for index in stream.layout.planeCount..<layout.planeCount {
                let plane = layout.plane(index)
                (buffer.baseAddress! + plane.offset).initializeMemory(
                    as: UInt8.self, repeating: 128, count: plane.byteCount)
            }
            fed = (layout, buffer)
            fedStream.layout = layout
        } else {
            fed = nil
        }
        signal(SIGPIPE, SIG_IGN)

        var arguments = [
            "-hide_banner", "-loglevel", "error", "-nostats", "-f", "matroska", "-i", "pipe:0", "-map", "0:v:0",
            "-fps_mode", "passthrough", "-c:v", "libx264",
            // 10-bit stays 10-bit (x264's High 10 profile; lossless: High 4:4:4 Predictive).
            "-pix_fmt", stream.layout.format == .p010 ? "yuv420p10le" : "yuv420p",
            // Each frame at its own time: the encoder's default time base is one frame, which moves the frames
            // after a gap that is not a whole number of frames onto the first frames' grid. 90 kHz, as video has;
            // nanoseconds for a stream faster than that, whose frames 90 kHz cannot tell apart.
            "-enc_time_base", MP4Exporter.isFasterThan90kHz(stream) ? "1:1000000000" : "1:90000",
        ]
        // The stream's nominal rate for the encoder (with passthrough every frame keeps its own time): without it
        // ffmpeg takes a Matroska track of 1000 fps or more for 10⁹ fps and gives the last frame no duration, so the
        // .mp4's edit list ends before it (29 of 30 frames decode; a one-frame clip, none).
        if stream.frameDuration.value > 0 {
            arguments += ["-r", "\(stream.frameDuration.timescale)/\(stream.frameDuration.value)"]
        }
        arguments += quality.x264Arguments
        arguments += MP4Exporter.colourArguments(stream)
        errorLog = NSTemporaryDirectory() + "rewind-ffmpeg-\(getpid())-\(UUID().uuidString).log"
        let pipe = Pipe()
        // Foundation's pipe has no descriptors (-1) when the process is out of them: ffmpeg would read rewind's own
        // standard input.
        guard pipe.fileHandleForReading.fileDescriptor >= 0 else {
            throw ExportError(
                destination: destination.description,
                reason: .system(action: "cannot make a pipe to ffmpeg", Errno(rawValue: EMFILE)))
        }
        let logFD = open(errorLog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        // ffmpeg's messages go to a file in the temporary directory: one that cannot be made is said as such (it read
        // as "cannot start ffmpeg: No such file or directory"); out of descriptors is the process's limit, not the
        // directory's.
        guard logFD >= 0 else {
            let failure = Errno.current
            guard failure.rawValue != EMFILE && failure.rawValue != ENFILE else {
                throw ExportError(
                    destination: destination.description,
                    reason: .system(action: "cannot make ffmpeg's log in \(NSTemporaryDirectory())", failure))
            }
            throw ExportError(
                destination: destination.description,
                reason: .temporaryDirectoryUnusable(directory: NSTemporaryDirectory(), failure))
        }
        do {
            defer { close(logFD) }
            var output: Int32?
            switch destination {
            case .path(let file):
                arguments += ["-movflags", "+faststart", "-f", "mp4", "-y", file]
            case .fileDescriptor(let fd, _):
                arguments += ["-movflags", "frag_keyframe+empty_moov", "-f", "mp4", "pipe:1"]
                output = fd.rawValue
            }
            process = try ChildProcess(
                path: ffmpeg, arguments: arguments, standardInput: pipe.fileHandleForReading.fileDescriptor,
                standardOutput: output, standardError: logFD)
        } catch {
            try? FileManager.default.removeItem(atPath: errorLog)
            if let refused = error as? ThreadStartFailed {
                throw ExportError(destination: destination.description, reason: .toolRefused(refused))
            }
            throw ExportError(
                destination: destination.description, reason: .cannotStartTool(path: ffmpeg, detail: "\(error)"))
        }
        try? pipe.fileHandleForReading.close()
        self.input = pipe.fileHandleForWriting
        let name = "ffmpeg's stdin"
        do {
            matroska = try MatroskaWriter(
                stream: fedStream,
                destination: .fileDescriptor(FileDescriptor(rawValue: input.fileDescriptor), name: name),
                fileSystem: fileSystem)
        } catch {
            throw failure(after: error)
        }
    }

    deinit {
        // An export dropped before it finished: ffmpeg, blocked reading its input, is killed (by `ChildProcess`),
        // and its partial file goes with the staged export.
        try? input.close()
        try? FileManager.default.removeItem(atPath: errorLog)
        fed?.buffer.deallocate()
    }

    /// `frame` as ffmpeg gets it (``fed``): each stored plane's rows copied into the fed layout, a row's missing
    /// last sample and a plane's missing last row repeated from the one before; planes the stored frame lacks keep
    /// their neutral value.
    private func fedFrame(_ frame: FrameView, _ fed: (layout: FrameLayout, buffer: UnsafeMutableRawBufferPointer))
        -> FrameView
    {
        let source = frame.bytes.baseAddress!
        let target = fed.buffer.baseAddress!
        for index in 0..<stream.layout.planeCount {
            let from = stream.layout.plane(index)
            let to = fed.layout.plane(index)
            let extra = to.bytesPerRow - from.bytesPerRow
            for row in 0..<to.rows {
                let line = source + from.offset + min(row, from.rows - 1) * from.bytesPerRow
                let out = target + to.offset + row * to.bytesPerRow
                out.copyMemory(from: line, byteCount: from.bytesPerRow)
                if extra > 0 {
                    (out + from.bytesPerRow).copyMemory(from: line + from.bytesPerRow - extra, byteCount: extra)
                }
            }
        }
        return FrameView(layout: fed.layout, info: frame.info, bytes: UnsafeRawBufferPointer(fed.buffer))
    }

    /// Sends `frame` to ffmpeg.
    ///
    /// - Throws: ``FrameError`` for a frame of another layout or out of pts order; ``ExportError`` when ffmpeg
    ///   stopped (with its stderr).
    public func write(_ frame: FrameView) throws {
        guard let writer = matroska else {
            preconditionFailure("write after finish or after a failed write")
        }
        let pts = frame.info.ptsNanoseconds
        if let previous = previousPTS, pts > previous, pts - previous > Self.longestInterval(stream) {
            // Refused before ffmpeg gets it (it would squeeze this frame and those after onto the previous one's
            // time, and exit 0); the staged file goes.
            matroska = nil
            try? input.close()
            _ = process.waitForExitUnlessInterrupted()
            throw ExportError(
                destination: destination.description,
                reason: .intervalTooLongForMP4(
                    nanoseconds: pts - previous, longest: Self.longestInterval(stream), after: previous))
        }
        _ = try tally.accept(frame)
        previousPTS = pts
        do {
            try writer.write(fed.map { fedFrame(frame, $0) } ?? frame)
        } catch let error as ExportError {
            matroska = nil
            throw failure(after: error)
        }
    }

    /// Closes ffmpeg's input and waits for it to finish the file.
    ///
    /// - Throws: ``ExportError`` with ffmpeg's stderr when it fails.
    public func finish() throws -> ExportSummary {
        guard let writer = matroska else { preconditionFailure("finish after finish or after a failed write") }
        matroska = nil
        do {
            _ = try writer.finish()
        } catch {
            throw failure(after: error)
        }
        try? input.close()
        // ffmpeg finishes the file (seconds at a slow preset); an interruption kills it instead.
        guard let status = process.waitForExitUnlessInterrupted() else {
            throw ExportError(destination: destination.description, reason: .interrupted(waiting: "ffmpeg to finish"))
        }
        guard status == 0 else { throw failure(after: nil) }
        var bytes: Int64 = 0
        if case .path(let file) = destination {
            // ffmpeg exits 0 when the MP4's trailer (its index, `moov`) could not be written, on a full disk say.
            if let problem = Self.incompleteMP4(file) { throw failure(after: IncompleteOutput(problem: problem)) }
            let attributes = try? FileManager.default.attributesOfItem(atPath: file)
            bytes = (attributes?[.size] as? NSNumber)?.int64Value ?? 0
        }
        return tally.summary(format: .mp4, destination: destination, filledFrames: 0, bytes: bytes)
    }

    /// Stops feeding ffmpeg, waits for it, and describes the failure with the tail of its stderr.
    private func failure(after error: (any Error)?) -> ExportError {
        try? input.close()
        // Interrupted: ffmpeg is killed, not waited for (it may be the reader that stopped reading).
        guard let status = process.waitForExitUnlessInterrupted() else {
            if let interrupted = error as? ExportError, case .interrupted = interrupted.reason { return interrupted }
            return ExportError(destination: destination.description, reason: .interrupted(waiting: "ffmpeg to finish"))
        }
        let log = System.readText(errorLog) ?? ""
        let tail = log.split(separator: "\n").suffix(8).joined(separator: "\n")
        // A file system with (almost) nothing left, read while the partial file still holds its room: the failure
        // is the lack of room, whatever ffmpeg said about it (its log may be on that full disk too, and empty).
        if case .path(let file) = destination {
            let directory = URL(fileURLWithPath: file).deletingLastPathComponent().path
            if let available = try? fileSystem.availableBytes(directory), available < Self.leastRoom {
                return ExportError(
                    destination: destination.description,
                    reason: .noRoom(tool: "ffmpeg", directory: directory, availableBytes: available, log: tail))
            }
        }
        // Under a limit on address space (which ffmpeg inherits), a failure that says memory was refused: the limit.
        if let limit = System.addressSpaceLimit, Self.saysMemoryWasRefused(status: status, log: log) {
            return ExportError(
                destination: destination.description,
                reason: .toolShortOfAddressSpace(tool: "ffmpeg", status: status, log: tail, limit: limit))
        }
        return ExportError(
            destination: destination.description,
            reason: .toolFailed(
                tool: "ffmpeg", status: status, log: tail, cause: error.map { "\($0)" }))
    }

    /// Whether ffmpeg, ended with `status` and having written `log`, says the system refused it memory: the dynamic
    /// loader could not map a library (`failed to map segment`, or exit 127 loading one), a call failed with
    /// `ENOMEM` or `EAGAIN` (what a refused allocation or thread reads as in its log), x264 says a `malloc` failed,
    /// or the encoder could not be opened (x264's parameters are fixed here and the frame size checked first: what
    /// is left is its allocations, which it does not name at `-loglevel error`).
    static func saysMemoryWasRefused(status: Int32, log: String) -> Bool {
        let signs = [
            "failed to map segment", String(cString: strerror(ENOMEM)), String(cString: strerror(EAGAIN)),
            "malloc of size", "Error while opening encoder",
        ]
        return signs.contains { log.contains($0) }
            || (status == 127 && log.contains("error while loading shared libraries"))
    }

    /// Less room than this left where ffmpeg writes the file, when it fails, is taken for the cause (a ``ExportError/
    /// Reason/noRoom(tool:directory:availableBytes:log:)``): its writes — 32 KiB at a time, then the index, a few MiB
    /// for an hour of frames, and with `+faststart` the index again at the front — found no room.
    static let leastRoom: Int64 = 4 << 20

    /// What ffmpeg left unfinished in the MP4 at `path`: its top-level boxes must fill the file exactly and include
    /// `ftyp`, `mdat` and `moov` (the index a player needs); nil when they do.
    static func incompleteMP4(_ path: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return "it cannot be read back" }
        defer { try? handle.close() }
        guard let size = try? handle.seekToEnd() else { return "it cannot be read back" }
        var offset: UInt64 = 0
        var found: Set<String> = []
        while offset < size {
            guard (try? handle.seek(toOffset: offset)) != nil, let head = try? handle.read(upToCount: 16),
                head.count >= 8
            else { return "it ends inside a box header at byte \(offset)" }
            let bytes = [UInt8](head)
            var length = bytes[0..<4].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let type = String(decoding: bytes[4..<8], as: UTF8.self)
            if length == 1 {
                guard bytes.count == 16 else { return "it ends inside the '\(type)' box's header" }
                length = bytes[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            } else if length == 0 {
                length = size - offset
            }
            guard length >= 8, length <= size - offset else {
                return "its '\(type)' box at byte \(offset) runs past the file's end (\(size) bytes)"
            }
            found.insert(type)
            offset += length
        }
        let missing = ["ftyp", "mdat", "moov"].filter { !found.contains($0) }
        return missing.isEmpty ? nil : "it has no '\(missing.joined(separator: "', '"))' box (ffmpeg did not finish it)"
    }

    /// Why a finished MP4 is not whole.
    struct IncompleteOutput: Error, CustomStringConvertible {
        var problem: String
        var description: String { "the MP4 ffmpeg wrote is incomplete: \(problem)" }
    }

    /// The absolute path of an executable `name` in the `:`-separated `path`, or nil.
    static func locate(_ name: String, in path: String) -> String? {
        for directory in path.split(separator: ":") where !directory.isEmpty {
            let candidate = "\(directory)/\(name)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    /// The most pixels x264 takes on a side (an odd side is fed grown by one: 16383 is the largest odd one).
    static let largestSide = 16384

    /// The longest time between two frames an `.mp4` sample's duration (32 bits, of which ffmpeg takes 31) holds at
    /// the file's clock: 2³¹ − 1 ticks of 90 kHz (about 6 h 37 min), or of a nanosecond for a stream faster than
    /// that (about 2.1 s).
    static func longestInterval(_ stream: StreamDescription) -> Int64 {
        let ticks = Int64(Int32.max) - 1  // one tick for ffmpeg's rounding to its clock
        return isFasterThan90kHz(stream) ? ticks : ticks * 1_000_000_000 / 90_000
    }

    /// Whether the stream's frames come faster than 90 000 a second: closer than a 90 kHz clock can tell apart.
    static func isFasterThan90kHz(_ stream: StreamDescription) -> Bool {
        let duration = stream.frameDuration
        return duration.value > 0 && Int64(duration.timescale) > 90_000 * duration.value
    }

    /// ffmpeg's colour flags for the stream's matrix and range.
    static func colourArguments(_ stream: StreamDescription) -> [String] {
        let range = stream.color.range == .full ? "pc" : "tv"
        let tags: (matrix: String, primaries: String, transfer: String)?
        switch stream.color.matrix {
        case .bt709: tags = ("bt709", "bt709", "bt709")
        case .bt601: tags = ("smpte170m", "smpte170m", "smpte170m")
        case .bt2020: tags = ("bt2020nc", "bt2020", "bt2020-10")
        case .unspecified: tags = nil
        }
        var arguments = ["-color_range", range]
        if let tags {
            arguments += ["-colorspace", tags.matrix, "-color_primaries", tags.primaries, "-color_trc", tags.transfer]
        }
        var filters: [String] = []
        if stream.layout.format == .bgra {
            // RGB input: convert with the tagged matrix and range, not swscale's default.
            let matrix = tags.map { $0.matrix == "smpte170m" ? "bt601" : $0.matrix == "bt2020nc" ? "bt2020" : "bt709" }
            filters.append("scale=out_color_matrix=\(matrix ?? "bt709"):out_range=\(range)")
        }
        if !filters.isEmpty { arguments += ["-vf", filters.joined(separator: ",")] }
        return arguments
    }
}
