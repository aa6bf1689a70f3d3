import CPlatform
import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import SegmentStore
import Synchronization

/// The control socket of a live recorder, `DIR/rewind.sock`: other processes ask it to save the last seconds
/// from memory, or for its status, without stopping or slowing capture.
///
/// Protocol: one request per connection, one line of JSON each way.
///
///     → {"command": "save", "last_ns": 5000000000, "path": "/abs/clip.y4m"}      path omitted: DIR/exports/
///       (optional "stream": refused unless it is the recorder's; "last_ns" omitted: the whole window)
///     → {"command": "save", "last_ns": 5000000000, "format": "y4m"} + a descriptor (SCM_RIGHTS): written there
///     ← {"ok": true, "path": …, "frames": 300, "filled_frames": 0, "bytes": …, "first_pts_ns": …, "last_pts_ns": …}
///     → {"command": "clip", "from": "12.5s", "to": "2026-11-30T14:03:09Z", "path": "/abs/clip.mkv"}  (times as
///       on the command line; the same destinations as a save)
///     → {"command": "status"}
///     ← {"ok": true, "frames_accepted": …, "frames_durable": …, "drops": {…}, "window_ns": …, "memory_frames": …,
///        "memory_bytes": …, "memory_budget_bytes": …, "memory_first_pts_ns": …, "memory_last_pts_ns": …, …}
///     ← {"ok": false, "error": "…"}                                                on any failure
///
/// Each request is served on its own thread: the range is resolved as soon as the request is read, so
/// overlapping requests each get their own file and are never merged; up to ``concurrentExports`` export at
/// once and the rest wait their turn. The producer never waits for any of them (queries pin a few frames at a
/// time). A client has ``requestTimeoutSeconds`` to send its request. ``requestSave()`` (for SIGUSR1) saves the whole window
/// into `DIR/exports/`. Call ``stop()`` before finishing the recorder: it closes the socket, removes it and waits
/// for saves in progress.
public final class RecorderControl: @unchecked Sendable {
    public static let socketName = "rewind.sock"

    public let recorder: Recorder
    public let directory: String
    public let socketPath: String
    /// The format of saves that name no path or format.
    public let defaultFormat: ExportFormat
    /// Called after each save made by ``requestSave()`` or for a client, with its result or error.
    private let onSave: @Sendable (Result<ExportSummary, any Error>) -> Void
    private let listener: Int32
    /// A pipe that wakes the accept loop: a byte "s" asks for a save of the window, "q" stops.
    private let wake: (read: Int32, write: Int32)
    private let inFlight = DispatchGroup()
    /// Exports at once; more requests wait their turn (each export holds a few frame-sized buffers).
    private let exportSlots = DispatchSemaphore(value: RecorderControl.concurrentExports)
    public static let concurrentExports = 4
    /// How long a client may take to send its request before the connection is dropped.
    public let requestTimeoutSeconds: Int
    private let finished = DispatchSemaphore(value: 0)
    private let saveCounter = Atomic<Int>(0)
    private let isStopped = Atomic<Bool>(false)

    /// Opens `DIR/rewind.sock` (replacing a stale one that nobody answers on) and starts serving.
    ///
    /// - Throws: ``ControlError`` when the socket cannot be created (e.g. a path too long for a Unix socket).
    public init(
        recorder: Recorder, directory: String, defaultFormat: ExportFormat = .matroska, requestTimeoutSeconds: Int = 5,
        onSave: @escaping @Sendable (Result<ExportSummary, any Error>) -> Void = { _ in }
    ) throws {
        self.requestTimeoutSeconds = requestTimeoutSeconds
        self.recorder = recorder
        self.directory = directory
        self.defaultFormat = defaultFormat
        self.onSave = onSave
        socketPath = directory + "/" + RecorderControl.socketName
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // A socket that answers belongs to a recorder still running (possible with spill off, which takes no lock
        // on the store); one that does not is stale and is replaced.
        let existing = rewind_unix_connect(socketPath)
        if existing >= 0 {
            close(existing)
            throw ControlError.alreadyServed(path: socketPath)
        }
        unlink(socketPath)
        let fd = rewind_unix_listen(socketPath, 16)
        guard fd >= 0 else {
            if -fd == ENAMETOOLONG { throw ControlError.socketPathTooLong(path: socketPath, limit: 107) }
            throw ControlError.socket(action: "create", path: socketPath, Errno(rawValue: -fd))
        }
        listener = fd
        var pipeFDs: [Int32] = [-1, -1]
        let piped = rewind_wake_pipe(&pipeFDs)
        guard piped == 0 else {
            close(fd)
            unlink(socketPath)
            throw ControlError.socket(action: "create a wake pipe for", path: socketPath, Errno(rawValue: -piped))
        }
        wake = (pipeFDs[0], pipeFDs[1])
        let thread = Thread { [self] in serve() }
        thread.name = "rewind-control"
        thread.start()
    }

    deinit {
        stop()
        close(wake.read)
        close(wake.write)
    }

    /// Asks for a save of the whole window into `DIR/exports/`, from any thread or a signal handler: it only
    /// writes one byte to a pipe.
    public func requestSave() {
        var byte = UInt8(ascii: "s")
        _ = write(wake.write, &byte, 1)
    }

    /// The descriptor a signal handler writes `s` to (see ``requestSave()``).
    public var wakeDescriptor: Int32 { wake.write }

    /// Stops accepting requests, removes the socket, and waits for the saves in progress. Idempotent.
    public func stop() {
        guard !isStopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        var byte = UInt8(ascii: "q")
        _ = write(wake.write, &byte, 1)
        finished.wait()
        inFlight.wait()
    }

    /// Saves the last `duration` (the window when nil) to `destination` (`DIR/exports/save-….ext` when nil).
    ///
    /// - Throws: ``ClipError`` when nothing is recorded yet, and export errors.
    public func save(last duration: Int64?, to destination: ExportDestination?, format: ExportFormat?) throws
        -> ExportSummary
    {
        let length = duration ?? recorder.configuration.windowNanoseconds
        guard length > 0 else { throw ClipError.nonPositiveDuration(length) }
        guard let range = try recorder.lastRange(.nanoseconds(length)) else {
            throw ClipError.noFrames(source: "recorder")
        }
        return try export(range, to: destination, format: format)
    }

    /// Exports `range` (pts nanoseconds) to `destination` (`DIR/exports/save-….ext` when nil).
    ///
    /// - Throws: ``ClipError`` when the range holds no frame (nothing is written), and export errors.
    public func export(_ range: Range<Int64>, to destination: ExportDestination?, format: ExportFormat?) throws
        -> ExportSummary
    {
        exportSlots.wait()
        defer { exportSlots.signal() }
        var chosenFormat = format ?? defaultFormat
        let target: ExportDestination
        if let destination {
            if case .path(let path) = destination, let named = ExportFormat(path: path) { chosenFormat = named }
            target = destination
        } else {
            // An empty range names no file (and makes no folder).
            try ClipSource.recorder(recorder).requireFrames(in: range)
            target = .path(try newExportPath(format: chosenFormat))
        }
        return try ClipSource.recorder(recorder).export(range: range, format: chosenFormat, to: target)
    }

    /// `DIR/exports/save-<UTC time>-<n>.<ext>`, unique within this process.
    private func newExportPath(format: ExportFormat) throws -> String {
        let exports = directory + "/exports"
        try FileManager.default.createDirectory(atPath: exports, withIntermediateDirectories: true)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss.SSS'Z'"
        let number = saveCounter.wrappingAdd(1, ordering: .relaxed).newValue
        return exports + "/save-\(formatter.string(from: Date()))-\(number).\(format.fileExtension)"
    }

    /// The range of a clip request: `from` and `to` as on the command line (`12.5s`, `1500ms`, ISO-8601 wall time),
    /// resolved against this recorder (memory and disk).
    private func clipRange(_ request: [String: Any]) throws -> Range<Int64> {
        let source = ClipSource.recorder(recorder)
        func time(_ key: String) throws -> Int64 {
            guard let text = request[key] as? String else {
                throw ControlError.badField(
                    key, detail: "a clip needs '\(key)': a time such as 12.5s, 1500ms or 2026-11-30T14:03:05Z")
            }
            do {
                return try source.resolve(try TimeSpec(parsing: text))
            } catch let error as ValueError {
                throw ControlError.badField(key, detail: "\(key): \(error)")
            }
        }
        let from = try time("from")
        let to = try time("to")
        guard from < to else {
            throw ClipError.badRange(from: from, to: to)
        }
        return from..<to
    }

    // MARK: - Serving

    private func serve() {
        defer {
            close(listener)
            unlink(socketPath)
            finished.signal()
        }
        var fds = [
            pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
        ]
        while true {
            fds[0].revents = 0
            fds[1].revents = 0
            let ready = System.retryingInterrupts { poll(&fds, 2, -1) }
            guard ready > 0 else { return }
            if fds[1].revents != 0 {
                var bytes = [UInt8](repeating: 0, count: 64)
                let count = read(wake.read, &bytes, bytes.count)
                if count > 0 {
                    if bytes[0..<count].contains(UInt8(ascii: "q")) { return }
                    if bytes[0..<count].contains(UInt8(ascii: "s")) { startWindowSave() }
                }
            }
            if fds[0].revents != 0 {
                let client = rewind_accept(listener)
                if client >= 0 { startClient(client) }
            }
        }
    }

    private func startWindowSave() {
        inFlight.enter()
        let thread = Thread { [self] in
            defer { inFlight.leave() }
            onSave(Result { try save(last: nil, to: nil, format: nil) })
        }
        thread.name = "rewind-save"
        thread.start()
    }

    private func startClient(_ client: Int32) {
        // A client that connects and says nothing must not hold the recorder's shutdown.
        var timeout = timeval(tv_sec: requestTimeoutSeconds, tv_usec: 0)
        _ = setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        inFlight.enter()
        let thread = Thread { [self] in
            defer {
                close(client)
                inFlight.leave()
            }
            handle(client)
        }
        thread.name = "rewind-control-client"
        thread.start()
    }

    /// Reads one request, serves it, writes one reply.
    private func handle(_ client: Int32) {
        var passed: Int32 = -1
        defer { if passed >= 0 { close(passed) } }
        let reply: [String: Any]
        do {
            let (request, descriptor) = try ControlMessage.receive(from: client)
            passed = descriptor
            reply = try respond(to: request, descriptor: descriptor)
        } catch {
            reply = ["ok": false, "error": "\(error)", "reason": ControlError.refusal(for: error).rawValue]
        }
        try? ControlMessage.send(reply, to: client)
    }

    private func respond(to request: [String: Any], descriptor: Int32) throws -> [String: Any] {
        switch request["command"] as? String {
        case let command where command == "save" || command == "clip":
            if let stream = request["stream"] as? String, stream != recorder.configuration.streamName {
                throw ControlError.wrongStream(recording: recorder.configuration.streamName, requested: stream)
            }
            var duration: Int64?
            var range: Range<Int64>?
            if command == "save", let value = request["last_ns"] {
                guard let number = value as? NSNumber, number.int64Value > 0 else {
                    throw ControlError.badField(
                        "last_ns", detail: "last_ns must be a whole number of nanoseconds above 0")
                }
                duration = number.int64Value
            } else if command == "clip" {
                range = try clipRange(request)
            }
            var format: ExportFormat?
            if let name = request["format"] as? String {
                guard let named = ExportFormat(path: "x." + name) else {
                    throw ControlError.badField("format", detail: "unknown format '\(name)': y4m, mkv or mp4")
                }
                format = named
            }
            var destination: ExportDestination?
            if descriptor >= 0 {
                destination = .fileDescriptor(descriptor, name: "the client's descriptor")
            } else if let path = request["path"] as? String {
                guard path.hasPrefix("/") else {
                    throw ControlError.badField("path", detail: "path must be absolute: '\(path)'")
                }
                guard ExportFormat(path: path) != nil else {
                    throw ControlError.badField("path", detail: "'\(path)' must end in .y4m, .mkv or .mp4")
                }
                destination = .path(path)
            }
            let result = Result {
                if let range { return try export(range, to: destination, format: format) }
                return try save(last: duration, to: destination, format: format)
            }
            onSave(result)
            let summary = try result.get()
            var reply: [String: Any] = [
                "ok": true, "frames": summary.frames, "filled_frames": summary.filledFrames, "bytes": summary.bytes,
                "format": summary.format.fileExtension,
            ]
            reply["path"] = summary.path ?? NSNull()
            reply["first_pts_ns"] = summary.firstPTSNanoseconds ?? NSNull()
            reply["last_pts_ns"] = summary.lastPTSNanoseconds ?? NSNull()
            return reply
        case "status":
            let statistics = recorder.statistics
            let ring = recorder.ring.statistics
            var reply: [String: Any] = [
                "ok": true, "frames_accepted": statistics.framesAccepted, "frames_durable": statistics.framesDurable,
                "drops": statistics.drops.keyedByRawValue, "window_ns": recorder.configuration.windowNanoseconds,
                "memory_frames": ring.frames, "memory_bytes": ring.mappedBytes, "memory_budget_bytes": ring.budget,
                "stream": recorder.configuration.streamName, "layout": "\(recorder.stream.layout)",
            ]
            reply["memory_first_pts_ns"] = ring.firstPTSNanoseconds ?? NSNull()
            reply["memory_last_pts_ns"] = ring.lastPTSNanoseconds ?? NSNull()
            return reply
        case let other:
            throw ControlError.unknownCommand(other)
        }
    }
}
