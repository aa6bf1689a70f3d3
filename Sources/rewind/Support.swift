import Foundation
import RewindKit
import Synchronization

/// A progress line on long work, shown only when stdout is a terminal (never mixed into piped output).
struct ProgressLine {
    private let isEnabled = isatty(STDOUT_FILENO) == 1 && isatty(STDERR_FILENO) == 1
    private var lastDraw = ContinuousClock.now - .seconds(1)
    private var drawn = false

    mutating func update(_ text: @autoclosure () -> String) {
        guard isEnabled else { return }
        let now = ContinuousClock.now
        guard now - lastDraw >= .milliseconds(100) else { return }
        lastDraw = now
        drawn = true
        _ = try? writeAll(Data("\r\u{1B}[K\(text())".utf8), to: STDERR_FILENO)
    }

    mutating func clear() {
        guard isEnabled && drawn else { return }
        _ = try? writeAll(Data("\r\u{1B}[K".utf8), to: STDERR_FILENO)
        drawn = false
    }
}

/// Set by SIGINT/SIGTERM: long-running commands finish cleanly when they see it.
let stopRequested = Atomic<Bool>(false)

/// When the first stop signal arrived, CLOCK_MONOTONIC nanoseconds (0: none yet).
private let firstStopSignal = Atomic<Int64>(0)

/// A second stop signal this soon after the first is the same request delivered twice, not a second request:
/// `timeout` sends its signal to the child and then to its own process group, which holds the child.
private let repeatedSignalNanoseconds: Int64 = 250_000_000

/// Whether a stop signal also requests an ``Interruption`` (commands that export, whose waits on a reader or on
/// ffmpeg then end at the first signal).
private let stopInterruptsWaits = Atomic<Bool>(false)

/// The address of the note a second stop signal prints (a C string made once), or 0.
private let secondSignalText = Atomic<UInt>(0)

/// Makes SIGINT, SIGTERM and SIGHUP request a clean stop (a second signal of any of them, a quarter of a second or
/// more after the first, ends the process at once). SIGHUP — the terminal went away, or the kernel's notice to a
/// stopped job left without its shell — is left ignored where it was (`nohup`).
///
/// - Parameter interruptsWaits: whether the first signal also ends waits with no end of their own (a pipe or FIFO
///   whose reader stopped reading, an ffmpeg that does not finish): for commands that export, which then stop and
///   keep no file. A recorder finishing its saves after a stop signal still waits for them.
/// - Parameter secondSignalNote: printed on stderr when a second signal ends the process at once (what that cost).
func installStopHandlers(interruptsWaits: Bool = false, secondSignalNote: String? = nil) {
    stopInterruptsWaits.store(interruptsWaits, ordering: .relaxed)
    if let secondSignalNote, let copy = strdup(secondSignalNote + "\n") {
        // Kept for the life of the process: the handler may run at any moment.
        secondSignalText.store(UInt(bitPattern: copy), ordering: .releasing)
    }
    let signals = [SIGINT, SIGTERM] + (System.isIgnored(signal: SIGHUP) ? [] : [SIGHUP])
    // A parent may have started us with these signals blocked (the mask is inherited): unblock them.
    var unblock = sigset_t()
    sigemptyset(&unblock)
    for signalNumber in signals { sigaddset(&unblock, signalNumber) }
    pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
    for signalNumber in signals {
        signal(signalNumber) { number in
            let now = System.monotonicNanoseconds()
            if !stopRequested.exchange(true, ordering: .relaxed) {
                firstStopSignal.store(now, ordering: .relaxed)
                if stopInterruptsWaits.load(ordering: .relaxed) { Interruption.request() }
                return
            }
            let first = firstStopSignal.load(ordering: .relaxed)
            guard first == 0 || now - first >= repeatedSignalNanoseconds else { return }
            // Children run in process groups of their own, so the signal did not reach them: they end with us.
            ChildProcess.killAll(signal: SIGKILL)
            // write(2) alone: the handler may interrupt anything.
            if let text = UnsafePointer<CChar>(bitPattern: secondSignalText.load(ordering: .acquiring)) {
                _ = write(STDERR_FILENO, text, strlen(text))
            }
            signal(number, SIG_DFL)
            raise(number)
        }
    }
}

/// Where SIGUSR1 writes its request: the wake pipe of the live recorder's control (−1: none).
private let saveSignalDescriptor = Atomic<Int32>(-1)

/// Makes SIGUSR1 save the recorder's whole window into `DIR/exports/` (the handler only writes a byte to a pipe).
func installSaveSignal(_ control: RecorderControl) {
    saveSignalDescriptor.store(control.wakeDescriptor.rawValue, ordering: .releasing)
    // Writes to a client's pipe that closed must fail with EPIPE, not end the recorder.
    signal(SIGPIPE, SIG_IGN)
    var unblock = sigset_t()
    sigemptyset(&unblock)
    sigaddset(&unblock, SIGUSR1)
    pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
    signal(SIGUSR1) { _ in
        let fd = saveSignalDescriptor.load(ordering: .acquiring)
        guard fd >= 0 else { return }
        var byte = UInt8(ascii: "s")
        _ = write(fd, &byte, 1)
    }
}

/// SIGUSR1 is ignored again (the recorder is finishing).
func removeSaveSignal() {
    signal(SIGUSR1, SIG_IGN)
    saveSignalDescriptor.store(-1, ordering: .releasing)
}

/// Prints `object` as pretty, key-sorted JSON on stdout (a path's slashes as they are, as `status --json` writes
/// them).
func printJSON(_ object: Any) throws {
    let data = try JSONSerialization.data(
        withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
    try writeAll(data + Data("\n".utf8), to: STDOUT_FILENO)
}

/// `path` made absolute against the working directory, without its `.` components and repeated slashes, and
/// otherwise as given: a `..` is not taken away by its spelling (the open resolves it after the links before it),
/// as a live recorder is sent an `-o`.
func absolutePath(_ path: String) -> String {
    let full = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    return "/" + full.split(separator: "/").filter { $0 != "." }.joined(separator: "/")
}

/// Refuses a `--store` that exists but is not a directory (a file given by mistake), before any work starts.
///
/// - Throws: ``UsageError`` naming what the path is.
func checkStoreDirectory(_ path: String) throws {
    guard !path.isEmpty else { throw UsageError("--store needs a directory, e.g. --store cam") }
    if let full = tooLongStorePath(path) {
        throw UsageError(
            "--store: the store's full path is \(full.utf8.count) bytes long, and SQLite opens its index only within "
                + "512 bytes of path: a store directory's full path may be at most "
                + "\(SegmentStore.longestDirectoryPath) bytes; give a shorter one", showsHelp: false)
    }
    var link = stat()
    guard lstat(path, &link) == 0 else { return }
    var target = stat()
    guard stat(path, &target) == 0 else {
        if errno == ELOOP {
            throw UsageError(
                "--store: '\(path)' is a loop of symbolic links, which leads to no directory; give another --store",
                showsHelp: false)
        }
        // The end of a chain of links: the path that does not exist.
        var destination = path
        for _ in 0..<40 {
            guard let next = try? FileManager.default.destinationOfSymbolicLink(atPath: destination) else { break }
            destination =
                next.hasPrefix("/")
                ? next : URL(fileURLWithPath: destination).deletingLastPathComponent().path + "/" + next
        }
        throw UsageError(
            "--store: '\(path)' is a symbolic link to '\(destination)', which does not exist; make that directory "
                + "or give another --store", showsHelp: false)
    }
    let type = target.st_mode & S_IFMT
    guard type == S_IFDIR else {
        let kind =
            switch type {
            case S_IFREG: "a file"
            case S_IFCHR, S_IFBLK: "a device"
            case S_IFIFO: "a FIFO"
            case S_IFSOCK: "a socket"
            default: "neither a file nor a directory"
            }
        throw UsageError(
            "--store: '\(path)' is \(kind), not a store directory; give the directory that holds index.sqlite",
            showsHelp: false)
    }
    try checkStoreEntries(path)
}

/// Refuses a store whose own entries are of the wrong kind (the index a directory, `segments` a file, a link to
/// nothing), naming the entry and what to do: SQLite and the segment reader would otherwise fail with the system's
/// words alone (`disk I/O error`, `Not a directory`), or a read see no segment file at all.
private func checkStoreEntries(_ directory: String) throws {
    let entries: [(name: String, isDirectory: Bool, keeps: String)] = [
        ("index.sqlite", false, "its index"), ("index.sqlite-wal", false, "its index's write-ahead log"),
        ("index.sqlite-shm", false, "its index's shared memory"), ("segments", true, "its segment files"),
        ("index.reserve", false, "the room its index keeps on a full disk"),
        ("markers.journal", false, "its markers' journal"), ("losses.journal", false, "its losses' journal"),
    ]
    for entry in entries {
        let path = directory + "/" + entry.name
        var link = stat()
        guard lstat(path, &link) == 0 else { continue }
        var target = stat()
        let kind: String
        if stat(path, &target) != 0 {
            kind =
                "a symbolic link to nothing ('\((try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "?")')"
        } else {
            let isDirectory = target.st_mode & S_IFMT == S_IFDIR
            let isFile = target.st_mode & S_IFMT == S_IFREG
            if entry.isDirectory ? isDirectory : isFile { continue }
            kind = isDirectory ? "a directory" : isFile ? "a file" : "neither a file nor a directory"
        }
        let repair =
            entry.name.hasPrefix("index.sqlite")
            ? "; 'rewind verify --repair' then rebuilds the index from the segment files" : ""
        throw CommandError(
            "'\(path)' is \(kind), where the store keeps \(entry.keeps) (\(entry.isDirectory ? "a directory" : "a file")): "
                + "move it away\(repair)")
    }
}

/// `path` in full (absolute, links followed) when it is longer than a store's directory may be
/// (``SegmentStore/longestDirectoryPath``: SQLite opens the index only within 512 bytes); nil when it is not.
func tooLongStorePath(_ path: String) -> String? {
    let full = URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path
    return full.utf8.count > SegmentStore.longestDirectoryPath ? full : nil
}

/// Makes the directories above a new store that are missing (as `mkdir -p` of its parent).
///
/// - Throws: ``CommandError`` naming the first that could not be made, and why.
func makeStoreParents(_ directory: String) throws {
    if let failure = System.makeParentDirectories(of: directory) {
        throw CommandError("--store: cannot make \(failure.path), a directory above the store: \(failure.error)")
    }
}

/// Whether a recorder records into `directory`: it holds the store's lock, or (`--spill off`) answers on its socket.
func recorderIsRunning(on directory: String) -> Bool {
    SegmentStore.isOpenForRecording(directory: directory) || (try? ControlClient(directory: directory).status()) != nil
}

/// Refuses an `-o` that would overwrite the store's own files (through a symbolic link too): anything in
/// `segments/`, the index and its WAL files, the control socket, the token.
///
/// - Throws: ``UsageError`` naming the file it resolves to.
func checkOutputOutsideStore(_ output: String, store: String) throws {
    guard output != "-" else { return }
    // `--stream all` to .y4m or .mp4 writes a file per stream, named after the stream: each is checked.
    var files = [output]
    var streams: [String] = []
    if let format = ExportFormat(path: output), format != .matroska,
        let names = try? SegmentStore.openReadOnly(directory: store).streams().map(\.name)
    {
        streams = names
        files += names.map { StreamSet.fileName(for: output, stream: $0) }
    }
    for file in files {
        if let problem = StagedExport.lengthProblem(file) {
            throw UsageError("-o: '\(file)': \(problem)", showsHelp: false)
        }
        guard let resolved = StagedExport.storeFile(writtenBy: file, store: store) else { continue }
        throw UsageError(
            "-o: '\(file)' would write \(resolved), inside the store where only rewind writes; write the export "
                + "elsewhere, e.g. "
                + (placeBeside(store, for: output, streams: streams).map { "-o \($0)" } ?? "outside \(store)"),
            showsHelp: false)
    }
}

/// A new file beside the store for an export refused inside it (a directory that exists: the store's `exports/` is
/// made by live saves and the demo only): `-o`'s own name there, or `clip.EXT`; nil when neither is free, or the
/// directory cannot be written.
///
/// - Parameter streams: the store's streams, whose files (`NAME.STREAM.EXT`) an export of `all` writes too.
private func placeBeside(_ store: String, for output: String, streams: [String]) -> String? {
    let parent = URL(fileURLWithPath: store).standardizedFileURL.deletingLastPathComponent()
    guard access(parent.path, W_OK | X_OK) == 0 else { return nil }
    let named = URL(fileURLWithPath: output)
    let names = [named.lastPathComponent, "clip." + named.pathExtension]
    func isFree(_ path: String) -> Bool {
        !FileManager.default.fileExists(atPath: path)
            && (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) == nil
            && StagedExport.lengthProblem(path) == nil
    }
    return names.map { parent.appendingPathComponent($0).path }.first { path in
        isFree(path) && streams.allSatisfy { isFree(StreamSet.fileName(for: path, stream: $0)) }
    }
}

/// The capture time of the earliest first frame of the store's streams, as a time of day on the command line is
/// read against it (its date, the zone's offset then); nil without a store or frames.
func firstWallNanoseconds(ofStore directory: String) -> Int64? {
    guard let store = try? SegmentStore.openReadOnly(directory: directory), let rows = try? store.streams() else {
        return nil
    }
    return rows.compactMap { row -> Int64? in
        guard let clock = try? store.clock(of: row), let first = try? store.summary(streamName: row.name).firstPTS
        else { return nil }
        return clock.wallNanoseconds(ofPTS: first)
    }.min()
}

/// Refuses a directory that holds no store (neither `index.sqlite` nor `segments/`), so a command that only reads
/// or edits a store never creates one.
///
/// - Throws: ``CommandError`` saying what was expected.
func requireStore(_ directory: String) throws {
    guard
        FileManager.default.fileExists(atPath: directory + "/index.sqlite")
            || FileManager.default.fileExists(atPath: directory + "/segments")
    else {
        // A recorder with spill off serves its API here and keeps no store: one more recorder would be refused.
        if FileManager.default.fileExists(atPath: directory + "/" + RecorderControl.socketName),
            (try? ControlClient(directory: directory).status()) != nil
        {
            throw CommandError(
                "no store at '\(directory)': the recorder serving there records without one (--spill off), keeping "
                    + "its frames in memory only; 'rewind status --store \(directory)' shows it, and 'rewind save' "
                    + "saves from it")
        }
        throw CommandError(
            "no store at '\(directory)': expected \(directory)/index.sqlite; record one with "
                + "'rewind record --store \(directory)'")
    }
}

/// Opens the store at `directory` for reading, with a clear error when there is none.
func openStoreForReading(_ directory: String) throws -> SegmentStore {
    try requireStore(directory)
    return try SegmentStore.openReadOnly(directory: directory)
}

/// The streams a command works on: one, or every stream of the store (`--stream all`).
enum StreamSelection {
    case one(StreamRow)
    case all([StreamRow])

    /// How many streams an export of `all` asks for; nil for one stream.
    var streamCount: Int? {
        if case .all(let rows) = self { rows.count } else { nil }
    }

    /// The names of the streams selected.
    var names: [String] {
        switch self {
        case .one(let row): [row.name]
        case .all(let rows): rows.map(\.name)
        }
    }

    /// The value to send a live recorder as the request's stream.
    var requestName: String {
        switch self {
        case .one(let row): row.name
        case .all: "all"
        }
    }
}

/// Picks the streams a command works on: the one named, all of them (`all`), or the only one; with several and
/// none named, or an unknown name, a usage error that lists them.
func selectStreams(in store: SegmentStore, named name: String?) throws -> StreamSelection {
    let streams = try store.streams()
    let names = streams.map(\.name).joined(separator: ", ")
    guard !streams.isEmpty else { throw CommandError("the store holds no streams yet: record first") }
    if name == "all" { return streams.count == 1 ? .one(streams[0]) : .all(streams) }
    if let name {
        guard let row = streams.first(where: { $0.name == name }) else {
            throw UsageError("--stream: no stream '\(name)' in the store; it has: \(names) (or --stream all)")
        }
        return .one(row)
    }
    guard streams.count == 1 else {
        throw UsageError("the store has several streams (\(names)): choose one with --stream NAME, or --stream all")
    }
    return .one(streams[0])
}

/// Picks the stream a command works on: the one named, or the only one (`all` is refused).
func selectStream(in store: SegmentStore, named name: String?) throws -> StreamRow {
    switch try selectStreams(in: store, named: name) {
    case .one(let row): return row
    case .all: throw UsageError("--stream all is not possible here: choose one stream with --stream NAME")
    }
}

/// A failure with a message for the user (exit status 1 unless stated).
struct CommandError: Error, CustomStringConvertible {
    let description: String
    let status: Int32

    init(_ description: String, status: Int32 = ExitStatus.failure) {
        self.description = description
        self.status = status
    }
}

/// "wrote N frames (…) to F, pts A … B": where an export went, what the file holds (repeats included), and what
/// was filled.
func describe(_ summary: ExportSummary, destination: String) -> String {
    var text = "wrote \(count(summary.writtenFrames, "frame"))"
    if summary.filledFrames > 0 {
        text += " (\(summary.frames) stored + \(summary.filledFrames) repeated to fill gaps at a constant frame rate)"
    }
    text += " (\(formatBytes(summary.bytes))) to \(destination)"
    if let first = summary.firstPTSNanoseconds, let last = summary.lastPTSNanoseconds {
        // To the nanosecond where to the millisecond the two would read alike (frames less than 1 ms apart).
        let (from, to) = formatSecondsApart(first, last)
        text += ", pts \(from) … \(to)"
    }
    return text
}

/// A stream's nominal rate for text output: `at 29.970 fps`, or slower than a frame a second, the time between
/// frames (`one frame every 2.000s`; 0.000 fps would read as a stream without a rate).
///
/// - Parameter frameDuration: the exact nominal frame duration (value / timescale seconds).
func rateText(frameDuration: FrameTime) -> String {
    let fps = Double(frameDuration.timescale) / Double(frameDuration.value)
    if fps < 1, let step = frameDuration.nanoseconds { return "one frame every \(formatSeconds(step))" }
    return "at \(String(format: "%.3f", fps)) fps"
}

/// "1 segment", "2 segments": a count with its noun in the right number.
func count(_ value: Int, _ noun: String) -> String {
    "\(value) \(noun)\(value == 1 ? "" : "s")"
}

/// Writes `data` to `path` whole, staged as exports are (``StagedExport``): a FIFO or device (or a link to one) in
/// place (a FIFO once a reader comes, interruptibly); anything else, through its links, under a temporary name
/// beside it renamed over it once complete, so a failure leaves what was there (a file replaced keeps its
/// permissions).
///
/// - Parameters:
///   - command: the command, for the message that it waits for a FIFO's reader.
///   - what: what is written (`the report`), for messages.
/// - Throws: ``CommandError`` naming `path` and why.
func writeWhole(_ data: Data, to path: String, command: String, what: String) throws {
    let failure = { (error: any Error) in CommandError("cannot write \(what) to \(path): \(error)") }
    let staged: StagedExport
    do {
        staged = try StagedExport(.path(path), fileSystem: POSIXFileSystem())
    } catch {
        throw failure(error)
    }
    guard staged.finalPath != nil, case .path(let temporary) = staged.writtenDestination else {
        let fd = try openForWriting(path, command: command, what: what)
        defer { close(fd) }
        do { try writeAll(data, to: fd) } catch { throw failure(error) }
        return
    }
    do {
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o666)
        guard fd >= 0 else { throw Errno.current }
        defer { close(fd) }
        try writeAll(data, to: fd)
        try staged.moveIntoPlace()
    } catch {
        throw failure(staged.abandon(after: error))
    }
}

/// Asks the store's recorder something a command can do without (nil when none answers, or the request fails: the
/// command then goes by the store), except that a recorder that stopped answering (SIGSTOP, Ctrl-Z) ends the command
/// with ``ControlError/noAnswer(request:seconds:)``: asking it again for the command's own request would wait as long.
func askRecorder<Answer>(_ request: () throws -> Answer?) throws -> Answer? {
    do {
        return try request()
    } catch let error as ControlError {
        if case .noAnswer = error { throw error }
        return nil
    } catch {
        return nil
    }
}

/// Runs a request made of the command's flags: a field the recorder refuses is named as the flag it came from
/// (`--hold-before: …`, not the API's `hold.before: …`).
///
/// - Parameter flags: the flag of each field of the request, by the field's name in the API.
func namingFlags<Answer>(_ flags: [String: String], _ request: () throws -> Answer) throws -> Answer {
    do {
        return try request()
    } catch ControlError.refused(var error) where error.code == .badRequest {
        if let (field, flag) = flags.first(where: { error.message.hasPrefix($0.key + ": ") }) {
            error.message = flag + error.message.dropFirst(field.count)
        }
        throw ControlError.refused(error)
    }
}

/// Address space a recording or soak needs beyond its `--memory` budget: libraries, thread stacks (8 MiB each),
/// malloc's arenas (64 MiB each, at most four). Measured: three streams with two saves exporting and six API
/// clients took 180 MiB beside a 512 MiB budget.
let addressSpaceOverhead = 512 << 20

/// Refuses a `--memory` budget that does not fit with ``addressSpaceOverhead`` under the process's limit on address
/// space (`ulimit -v`): mappings the rings need would be refused as the recording goes (every frame then dropped),
/// or an allocation of the Swift runtime, which ends the process with a crash report.
///
/// - Parameter fixed: the budget is the command's own (the demo's ring), not a `--memory` to give less of.
func checkAddressSpaceFits(memoryBudget: Int, command: String, fixed: Bool = false) throws {
    guard let limit = System.addressSpaceLimit, memoryBudget > limit - addressSpaceOverhead else { return }
    let advice =
        limit > addressSpaceOverhead + (1 << 20) && !fixed
        ? "give at most --memory \((limit - addressSpaceOverhead) >> 20)MiB, or raise the limit" : "raise the limit"
    throw CommandError(
        (fixed ? "its ring of \(formatBytes(Int64(memoryBudget)))" : "--memory \(formatBytes(Int64(memoryBudget)))")
            + " does not fit in the \(formatBytes(Int64(limit))) of address "
            + "space this process may use (ulimit -v, systemd's LimitAS=), with about "
            + "\(formatBytes(Int64(addressSpaceOverhead))) for \(command) itself (libraries, thread stacks, heaps); "
            + "\(advice) (ulimit -v unlimited)", status: ExitStatus.systemLimit)
}
