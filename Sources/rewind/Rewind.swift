import Foundation
import RewindKit
import RewindSoak
import Synchronization

/// Exit statuses, following `sysexits.h` where one fits. ``CommandFailure`` picks one for each error.
enum ExitStatus {
    static let success: Int32 = 0
    /// A failure of the work itself (I/O, damaged store, failed export).
    static let failure: Int32 = 1
    /// `EX_USAGE`: the command line was wrong.
    static let usage: Int32 = 64
    /// `EX_DATAERR`: the input data was malformed (a bad header, a truncated frame).
    static let dataError: Int32 = 65
    /// `EX_NOINPUT`: an input file does not exist or cannot be opened.
    static let noInput: Int32 = 66
    /// `EX_UNAVAILABLE`: a needed tool or service is missing.
    static let unavailable: Int32 = 69
    /// `EX_OSERR`: the system refused a thread (a limit on threads or memory was reached).
    static let systemLimit: Int32 = 71
    /// Stopped by SIGINT or SIGTERM before finishing (the status of a death by SIGINT, 128 + 2).
    static let interrupted: Int32 = 130
    /// A write to a pipe whose reader went away (the status of a death by SIGPIPE, 128 + 13).
    static let brokenPipe: Int32 = 141
}

/// A subcommand: its option table and what it runs.
struct Command: Sendable {
    let spec: CommandSpec
    let run: @Sendable (ParsedArguments) throws -> Int32
}

@main
enum Rewind {
    static let commands: [Command] = [
        demoCommand, recordCommand, saveCommand, clipCommand, statusCommand, eventsCommand, markCommand,
        markersCommand, unmarkCommand, infoCommand, verifyCommand, soakCommand, benchCommand,
    ]

    static var overview: String {
        var lines = [
            "rewind \(rewindVersion): a rewind buffer of raw video frames with a durable, queryable frame store",
            "",
            "usage: rewind <command> [options]      rewind <command> --help for a command's options",
            "",
            "commands:",
        ]
        for command in commands {
            let padding = String(repeating: " ", count: max(2, 10 - command.spec.name.count))
            lines.append("  \(command.spec.name)\(padding)\(command.spec.summary)")
        }
        return lines.joined(separator: "\n")
    }

    /// `rewind COMMAND` once the command is known, for messages after it returned.
    private static let runningCommand = Mutex("rewind")

    static func main() {
        // A recorder must stay within its memory budget: freed query and export buffers go back to the system.
        ResidentMemory.limitHeapRetention()
        // Address space that follows the memory used, so that `ulimit -v` can be checked against a budget.
        ResidentMemory.limitMallocArenas(to: min(max(System.onlineProcessorCount, 2), 4))
        keepStandardDescriptorsTaken()
        // A write past the file size limit (`ulimit -f`, systemd's LimitFSIZE) then fails with EFBIG, reported like
        // a full disk, instead of killing the process in the middle of a segment or an export.
        signal(SIGXFSZ, SIG_IGN)
        // A low soft limit on open files (the hard one allowing more) costs nothing to lift.
        System.raiseOpenFileLimit(to: 1024)
        if let (position, shown) = argumentNotUTF8() {
            printError(
                "rewind: argument \(position) ('\(shown)') is not valid UTF-8: rewind reads paths, names and labels as "
                    + "UTF-8, and these bytes would name another file; rename it, or give a UTF-8 path")
            exit(ExitStatus.usage)
        }
        var status = run(Array(CommandLine.arguments.dropFirst()))
        // Output that could not be written (a full disk, a closed stdout) fails the command, as in coreutils.
        if let failure = System.flushStandardOutput() {
            let name = runningCommand.withAnnotatedLock { $0 }
            if failure == EPIPE {
                // SIGPIPE ignored: the reader went away, as unbuffered output (``writeAll(_:to:)``) says it.
                printError("\(name): stdout: the reader closed the pipe")
                if status == ExitStatus.success { status = ExitStatus.brokenPipe }
            } else {
                printError("\(name): stdout: writing failed: \(String(cString: strerror(failure)))")
                if status == ExitStatus.success { status = ExitStatus.failure }
            }
        }
        exit(status)
    }

    /// The first argument whose bytes are not UTF-8 (Swift's `CommandLine.arguments` replaces them, so such a path
    /// would silently name another file): its position and its bytes, those outside printable ASCII as `\xNN`.
    private static func argumentNotUTF8() -> (position: Int, shown: String)? {
        for position in 1..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[position] else { continue }
            let bytes = UnsafeRawBufferPointer(start: raw, count: strlen(raw))
            guard String(validating: bytes, as: UTF8.self) == nil else { continue }
            let shown = bytes.map { byte in
                (0x20..<0x7f).contains(byte) ? String(UnicodeScalar(byte)) : String(format: "\\x%02X", byte)
            }
            return (position, shown.joined())
        }
        return nil
    }

    /// A standard descriptor the process started without (`>&-`) would be taken by the next file opened (the
    /// index, a segment), and output meant for it written there. Each closed one is given /dev/null opened the
    /// wrong way round, so that using it fails instead (reported) and no file lands on it.
    private static func keepStandardDescriptorsTaken() {
        for descriptor in [STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO] where fcntl(descriptor, F_GETFD) < 0 {
            let opened = open("/dev/null", descriptor == STDIN_FILENO ? O_WRONLY : O_RDONLY)
            if opened >= 0 && opened != descriptor {
                dup2(opened, descriptor)
                close(opened)
            }
        }
    }

    static func run(_ arguments: [String]) -> Int32 {
        guard let first = arguments.first else {
            printError(overview)
            return ExitStatus.usage
        }
        switch first {
        case _ where ["help", "--help", "-h"].contains(first) && arguments.count > 1:
            // `rewind help info` (or `rewind --help info`) is `rewind info --help`; `rewind help help` the overview.
            guard arguments.count == 2 else {
                printError("rewind help: unexpected argument '\(arguments[2])': name one command\n\n\(overview)")
                return ExitStatus.usage
            }
            if ["help", "--help", "-h"].contains(arguments[1]) {
                print(overview)
                return ExitStatus.success
            }
            guard let command = commands.first(where: { $0.spec.name == arguments[1] }) else {
                printError("rewind: unknown command '\(arguments[1])'\n\n\(overview)")
                return ExitStatus.usage
            }
            print(command.spec.help)
            return ExitStatus.success
        case "--help", "-h", "help":
            print(overview)
            return ExitStatus.success
        case "--version":
            guard arguments.count == 1 else {
                printError("rewind --version: unexpected argument '\(arguments[1])': --version takes none")
                return ExitStatus.usage
            }
            print("rewind \(rewindVersion)")
            return ExitStatus.success
        default:
            break
        }
        guard let command = commands.first(where: { $0.spec.name == first }) else {
            printError("rewind: unknown command '\(first)'\n\n\(overview)")
            return ExitStatus.usage
        }
        runningCommand.withAnnotatedLock { $0 = "rewind \(command.spec.name)" }
        var storeDirectory: String?
        var started = false
        do {
            let parsed = try command.spec.parse(Array(arguments.dropFirst()))
            storeDirectory = parsed.string("store")
            if parsed.wantsHelp {
                print(command.spec.help)
                return ExitStatus.success
            }
            if let store = parsed.string("store") { try checkStoreDirectory(store) }
            started = true
            return try command.run(parsed)
        } catch {
            var failure = CommandFailure(error, command: command.spec.name)
            // `verify --json` prints a document whatever happens, a command line it refused too (the command itself
            // prints one for what fails once it runs).
            if !started, command.spec.name == "verify", arguments.contains("--json") {
                try? printJSON(verifyFailureDocument(failure.message))
            }
            // A range or save the store has no frames for, while segments/ holds files the index lost: say so.
            if failure.advice == nil, ["clip", "save"].contains(command.spec.name), let storeDirectory {
                failure.advice = outOfStepAdvice(storeDirectory)
            }
            printError(failure.text(command: command.spec.name, help: command.spec.help))
            return failure.status
        }
    }
}

/// Writes a line to standard error (a standard error that cannot be written is not an error of its own).
func printError(_ text: String) {
    _ = try? writeAll(Data((text + "\n").utf8), to: STDERR_FILENO)
}

/// Writes all of `data` to `descriptor`, retrying interrupted and short writes.
///
/// - Throws: ``CommandError`` naming the stream (`stdout: writing failed: No space left on device`).
func writeAll(_ data: Data, to descriptor: Int32, name given: String? = nil) throws {
    try data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) in
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                // A pipe made non-blocking (``copy``) that is full: wait for its reader, or for an interruption.
                if errno == EAGAIN {
                    guard Interruption.waitUntilWritable(descriptor) else {
                        throw CommandError(
                            "interrupted while waiting for the reader of the output", status: ExitStatus.interrupted)
                    }
                    continue
                }
                let name =
                    given
                    ?? (descriptor == STDOUT_FILENO ? "stdout" : descriptor == STDERR_FILENO ? "stderr" : "output")
                if errno == EPIPE {
                    throw CommandError("\(name): the reader closed the pipe", status: ExitStatus.brokenPipe)
                }
                throw CommandError(
                    "\(name): writing failed: \(String(cString: strerror(errno)))"
                        + (errno == ENOSPC ? "; free some space or write elsewhere" : ""))
            }
            offset += written
        }
    }
}

/// A command that this build does not provide yet: says so and fails.
func unavailable(_ name: String) -> @Sendable (ParsedArguments) throws -> Int32 {
    { _ in
        printError("rewind \(name): not available in this build")
        return ExitStatus.unavailable
    }
}
