import Foundation
import RewindCore
import RewindSystem

/// Encodes frames to H.264 in MP4 with the system's `ffmpeg`, fed a lossless Matroska stream on its stdin.
///
///     frames → MatroskaWriter → pipe → ffmpeg -f matroska -i pipe:0 -fps_mode passthrough
///                                            -c:v libx264 -pix_fmt yuv420p <quality> <colour flags> out.mp4
///
/// `<quality>` is ``ExportQuality``'s x264 preset and rate control: `fast` (the default) encodes 1080p60 faster
/// than real time on two cores, `lossless` decodes to exactly the stored pixels of 4:2:0 frames (`nv12`, `i420`).
///
/// The Matroska stream carries every frame's exact pts, and `-fps_mode passthrough` keeps one output frame per
/// input frame: none duplicated, none dropped. The stream's matrix and range become the MP4's colour tags (and,
/// for `bgra`, the RGB→YUV conversion). To standard output the MP4 is fragmented (a pipe cannot be seeked back).
///
/// The Matroska stream goes to ffmpeg's stdin through the given ``FileSystem``; ffmpeg writes the MP4 itself.
/// `ffmpeg`'s stderr goes to a temporary file; when it fails, the error carries its last lines. Writing to a pipe
/// whose reader died would raise SIGPIPE, so creating an exporter sets SIGPIPE to be ignored in this process
/// (writes then fail with EPIPE, reported with ffmpeg's own error).
public final class MP4Exporter: Exporter {
    /// The stream given at creation; every frame written must have its layout.
    public let stream: StreamDescription
    private let destination: ExportDestination
    private let process: Process
    private let input: FileHandle
    private let errorLog: String
    private var matroska: MatroskaWriter?
    private var tally: ExportTally

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
        self.stream = stream
        self.destination = destination
        self.tally = ExportTally(stream: stream)
        signal(SIGPIPE, SIG_IGN)

        var arguments = [
            "-hide_banner", "-loglevel", "error", "-nostats", "-f", "matroska", "-i", "pipe:0", "-map", "0:v:0",
            "-fps_mode", "passthrough", "-c:v", "libx264", "-pix_fmt", "yuv420p",
        ]
        arguments += quality.x264Arguments
        arguments += MP4Exporter.colourArguments(stream)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ffmpeg)
        errorLog = NSTemporaryDirectory() + "rewind-ffmpeg-\(getpid())-\(UUID().uuidString).log"
        _ = FileManager.default.createFile(atPath: errorLog, contents: nil)
        let pipe = Pipe()
        do {
            switch destination {
            case .path(let file):
                arguments += ["-movflags", "+faststart", "-f", "mp4", "-y", file]
                process.standardOutput = FileHandle.nullDevice
            case .fileDescriptor(let fd, _):
                arguments += ["-movflags", "frag_keyframe+empty_moov", "-f", "mp4", "pipe:1"]
                process.standardOutput = FileHandle(fileDescriptor: fd.rawValue, closeOnDealloc: false)
            }
            process.arguments = arguments
            process.standardInput = pipe
            process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errorLog))
            try process.run()
        } catch {
            try? FileManager.default.removeItem(atPath: errorLog)
            throw ExportError(
                destination: destination.description, reason: .cannotStartTool(path: ffmpeg, detail: "\(error)"))
        }
        try? pipe.fileHandleForReading.close()
        self.process = process
        self.input = pipe.fileHandleForWriting
        let name = "ffmpeg's stdin"
        do {
            matroska = try MatroskaWriter(
                stream: stream,
                destination: .fileDescriptor(FileDescriptor(rawValue: input.fileDescriptor), name: name),
                fileSystem: fileSystem)
        } catch {
            throw failure(after: error)
        }
    }

    deinit {
        if process.isRunning { process.terminate() }
        try? FileManager.default.removeItem(atPath: errorLog)
    }

    /// Sends `frame` to ffmpeg.
    ///
    /// - Throws: ``FrameError`` for a frame of another layout or out of pts order; ``ExportError`` when ffmpeg
    ///   stopped (with its stderr).
    public func write(_ frame: FrameView) throws {
        guard let writer = matroska else {
            preconditionFailure("write after finish or after a failed write")
        }
        _ = try tally.accept(frame)
        do {
            try writer.write(frame)
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
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw failure(after: nil) }
        var bytes: Int64 = 0
        if case .path(let file) = destination {
            let attributes = try? FileManager.default.attributesOfItem(atPath: file)
            bytes = (attributes?[.size] as? NSNumber)?.int64Value ?? 0
        }
        return tally.summary(format: .mp4, destination: destination, filledFrames: 0, bytes: bytes)
    }

    /// Stops feeding ffmpeg, waits for it, and describes the failure with the tail of its stderr.
    private func failure(after error: (any Error)?) -> ExportError {
        try? input.close()
        process.waitUntilExit()
        let log = (try? String(contentsOfFile: errorLog, encoding: .utf8)) ?? ""
        let tail = log.split(separator: "\n").suffix(8).joined(separator: "\n")
        return ExportError(
            destination: destination.description,
            reason: .toolFailed(
                tool: "ffmpeg", status: process.terminationStatus, log: tail, cause: error.map { "\($0)" }))
    }

    /// The absolute path of an executable `name` in the `:`-separated `path`, or nil.
    static func locate(_ name: String, in path: String) -> String? {
        for directory in path.split(separator: ":") where !directory.isEmpty {
            let candidate = "\(directory)/\(name)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
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
        if stream.layout.width % 2 == 1 || stream.layout.height % 2 == 1 {
            // H.264 4:2:0 needs even sides: add one black column or row rather than lose pixels.
            filters.append("pad=ceil(iw/2)*2:ceil(ih/2)*2")
        }
        if !filters.isEmpty { arguments += ["-vf", filters.joined(separator: ",")] }
        return arguments
    }
}
