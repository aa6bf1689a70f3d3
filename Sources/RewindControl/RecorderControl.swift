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
/// Protocol: one request per connection, one line of JSON each way: a ``ControlRequest`` in, a ``ControlReply``
/// out (their documentation shows the lines). A save or clip may carry a descriptor (SCM_RIGHTS) to write into
/// instead of a path.
///
/// The serving is split in two. ``handle(_:descriptor:)`` (and ``handle(line:descriptor:)``, which decodes first)
/// is all of the logic: it takes a typed request and returns a typed reply, and tests call it without a socket.
/// The socket loop only frames bytes: it reads a line and any descriptor, hands them to `handle`, and writes the
/// encoded reply.
///
/// Descriptors: the control owns its listening socket and ``wakeDescriptor`` and closes them itself. A descriptor
/// a client sends is owned by the connection: it is closed once the request is handled, before the reply is
/// written, so `handle` only borrows it.
///
/// Each request is served on its own thread: the range is resolved as soon as the request is read, so
/// overlapping requests each get their own file and are never merged; up to ``concurrentExports`` export at
/// once and the rest wait their turn. The producer never waits for any of them (queries pin a few frames at a
/// time). A client has ``requestTimeoutSeconds`` to send its request. ``requestSave()`` (for SIGUSR1) saves the whole window
/// into `DIR/exports/`. Call ``stop()`` before finishing the recorder: it closes the socket, removes it and waits
/// for saves in progress.
public final class RecorderControl: @unchecked Sendable {
    /// The socket's file name inside the recorder's directory: `rewind.sock`.
    public static let socketName = "rewind.sock"

    /// The recorder served: the one saves and clips read from and status describes. Not owned: the caller
    /// finishes it, after ``stop()``.
    public let recorder: Recorder
    /// The directory that holds the socket and, under `exports/`, the saves that name no path (created if missing).
    public let directory: String
    /// The socket's path: ``directory``, then `/`, then ``socketName``.
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
    /// How many saves and clips export at once (4); further requests wait for one of them to end.
    public static let concurrentExports = 4
    /// How long a client may take to send its request before the connection is dropped.
    public let requestTimeoutSeconds: Int
    private let finished = DispatchSemaphore(value: 0)
    private let saveCounter = Atomic<Int>(0)
    private let isStopped = Atomic<Bool>(false)

    /// Opens `DIR/rewind.sock` (replacing a stale one that nobody answers on) and starts serving.
    ///
    /// - Parameters:
    ///   - recorder: the live recorder to serve; finish it only after ``stop()``.
    ///   - directory: `DIR`, where the socket and `exports/` go; created if missing.
    ///   - defaultFormat: the format of saves that name neither a path nor a format.
    ///   - requestTimeoutSeconds: how long a client may take to send its request, seconds.
    ///   - onSave: called after each save or clip (for a client or ``requestSave()``), on the thread that made
    ///     it, with what was written or why it failed.
    /// - Throws: ``ControlError`` when the socket cannot be created (e.g. a path too long for a Unix socket), or
    ///   ``ControlError/alreadyServed(path:)`` when another live recorder answers on it.
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

    /// The descriptor a signal handler writes `s` to (see ``requestSave()``). The control owns it and closes it when
    /// it is deinitialized; until then it stays open (also after ``stop()``), so a handler may write to it.
    public var wakeDescriptor: FileDescriptor { FileDescriptor(rawValue: wake.write) }

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
    public func save(
        last duration: Duration?, to destination: ExportDestination?, format: ExportFormat?,
        quality: ExportQuality? = nil
    ) throws -> ExportSummary {
        let length = duration ?? recorder.configuration.window
        guard length > .zero else { throw ClipError.nonPositiveDuration(length) }
        guard let range = try recorder.lastRange(length) else {
            throw ClipError.noFrames(source: "recorder")
        }
        return try export(range, to: destination, format: format, quality: quality)
    }

    /// Exports `range` (pts nanoseconds) to `destination` (`DIR/exports/save-….ext` when nil).
    ///
    /// - Throws: ``ClipError`` when the range holds no frame (nothing is written), and export errors.
    public func export(
        _ range: Range<Int64>, to destination: ExportDestination?, format: ExportFormat?,
        quality: ExportQuality? = nil
    ) throws -> ExportSummary {
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
        return try ClipSource.recorder(recorder).export(
            range: range, format: chosenFormat, to: target, quality: quality ?? .fast)
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
    private func clipRange(from: String, to: String) throws -> Range<Int64> {
        let source = ClipSource.recorder(recorder)
        func time(_ key: String, _ text: String) throws -> Int64 {
            do {
                return try source.resolve(try TimeSpec(parsing: text))
            } catch let error as ValueError {
                throw ControlError.badField(key, detail: "\(key): \(error)")
            }
        }
        let start = try time("from", from)
        let end = try time("to", to)
        guard start < end else {
            throw ClipError.badRange(from: start, to: end)
        }
        return start..<end
    }

    // MARK: - Handling

    /// Serves one decoded request: everything the control does for a client, without a socket.
    ///
    /// - Parameters:
    ///   - request: what the client asked.
    ///   - descriptor: where a save or clip writes, when the client sent one (it wins over `request.path`). Only
    ///     borrowed: the caller closes it after this returns.
    /// - Returns: what was exported, the status, or a failure with its reason code (`bad_request` for a wrong
    ///   field or stream, `bad_range`, `empty`, `failed`). Saves and clips are also reported to `onSave`.
    public func handle(_ request: ControlRequest, descriptor: FileDescriptor? = nil) -> ControlReply {
        do {
            return try respond(to: request, descriptor: descriptor)
        } catch {
            return .failure(ControlReply.Failure(error))
        }
    }

    /// Decodes one line (without its newline) and serves it; a line that is not a request gets a `bad_request`
    /// failure.
    ///
    /// - Parameter descriptor: as for ``handle(_:descriptor:)``.
    public func handle(line: some Collection<UInt8>, descriptor: FileDescriptor? = nil) -> ControlReply {
        do {
            return handle(try ControlRequest(line: line), descriptor: descriptor)
        } catch {
            return .failure(ControlReply.Failure(error))
        }
    }

    private func respond(to request: ControlRequest, descriptor: FileDescriptor?) throws -> ControlReply {
        if let stream = request.stream, stream != recorder.configuration.streamName {
            throw ControlError.wrongStream(recording: recorder.configuration.streamName, requested: stream)
        }
        let duration: Duration?
        let range: Range<Int64>?
        switch request.command {
        case .status:
            return .status(status)
        case .save(let last):
            if let last, last <= 0 {
                throw ControlError.badField("last_ns", detail: "last_ns must be a whole number of nanoseconds above 0")
            }
            duration = last.map { .nanoseconds($0) }
            range = nil
        case .clip(let from, let to):
            duration = nil
            range = try clipRange(from: from, to: to)
        }
        var destination: ExportDestination?
        if let descriptor {
            destination = .fileDescriptor(descriptor, name: "the client's descriptor")
        } else if let path = request.path {
            guard path.hasPrefix("/") else {
                throw ControlError.badField("path", detail: "path must be absolute: '\(path)'")
            }
            guard ExportFormat(path: path) != nil else {
                throw ControlError.badField("path", detail: "'\(path)' must end in .y4m, .mkv or .mp4")
            }
            destination = .path(path)
        }
        let result = Result {
            if let range {
                return try export(range, to: destination, format: request.format, quality: request.quality)
            }
            return try save(last: duration, to: destination, format: request.format, quality: request.quality)
        }
        onSave(result)
        return .exported(try result.get())
    }

    /// The recorder's counters and what its ring holds now.
    public var status: ControlReply.Status {
        let statistics = recorder.statistics
        let ring = recorder.memoryStatistics
        return ControlReply.Status(
            stream: recorder.configuration.streamName, layout: "\(recorder.stream.layout)",
            framesAccepted: statistics.framesAccepted, framesDurable: statistics.framesDurable,
            drops: statistics.drops, windowNanoseconds: recorder.configuration.windowNanoseconds,
            memoryFrames: ring.frames,
            memoryBytes: ring.mappedBytes, memoryBudgetBytes: recorder.memoryBudget(under: ring.pressure),
            memoryFirstPTSNanoseconds: ring.firstPTSNanoseconds, memoryLastPTSNanoseconds: ring.lastPTSNanoseconds,
            pressure: ring.pressure, pressureChanges: recorder.pressureChanges)
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
            serve(client: FileDescriptor(rawValue: client))
        }
        thread.name = "rewind-control-client"
        thread.start()
    }

    /// Reads one line (and any descriptor), serves it, writes one reply: the framing around ``handle(line:descriptor:)``.
    private func serve(client: FileDescriptor) {
        let reply: ControlReply
        do {
            // The descriptor that came with the line is closed when `received` ends, before the reply is written,
            // so a reader of a pipe the client passed sees its end once the reply arrives.
            let received = try ControlMessage.receive(from: client)
            reply = handle(line: received.bytes, descriptor: received.descriptor)
        } catch {
            reply = .failure(ControlReply.Failure(error))
        }
        guard let line = try? reply.encodedLine() else { return }
        try? ControlMessage.send(line, to: client)
    }
}
