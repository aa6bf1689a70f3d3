import Dispatch
import Foundation
import Glibc
import RewindSystem
import Synchronization

/// What a program printed and how it ended.
public struct ToolResult: Sendable {
    /// The exit status (or the signal number, when it was killed).
    public let status: Int32
    /// Everything written to standard output.
    public let stdout: Data
    /// Everything written to standard error, as text.
    public let stderr: String

    /// Standard output as text.
    public var output: String { String(decoding: stdout, as: UTF8.self) }
}

/// Runs the real tools that tests check outputs with (`ffmpeg`, `ffprobe`, `sqlite3`, `lz4`) and any other program.
public enum ExternalTools {
    /// A tool that is not on PATH.
    public struct Missing: Error, CustomStringConvertible {
        /// The tool's name.
        public var name: String
        public var description: String {
            "\(name) is not on PATH; run 'make test', which installs ffmpeg, ffprobe, lz4 and sqlite3"
        }
    }

    /// A tool that exited with a non-zero status.
    public struct Failed: Error, CustomStringConvertible {
        /// The command line that was run.
        public var command: String
        /// Its exit status.
        public var status: Int32
        /// What it wrote to standard error.
        public var stderr: String
        public var description: String { "\(command) exited with \(status): \(stderr.suffix(2000))" }
    }

    /// The absolute path of `name` on PATH.
    ///
    /// - Throws: ``Missing`` when no directory on PATH holds an executable of that name.
    public static func locate(_ name: String) throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw Missing(name: name)
    }

    /// A program that did not exit in time: it was sent SIGTERM, then SIGKILL.
    public struct TimedOut: Error, CustomStringConvertible {
        /// The command line that was run.
        public var command: String
        /// How long it was given.
        public var timeout: Duration
        /// What it wrote before it was killed.
        public var stdout: Data
        public var stderr: String
        /// What its threads were doing when the time ran out (``threadReport(of:)``).
        public var threads: String = ""
        public var description: String {
            "\(command) did not exit within \(timeout) and was killed; stderr: \(stderr.suffix(2000))"
                + (threads.isEmpty ? "" : "\nits threads then:\n\(threads.suffix(12000))")
        }
    }

    /// What each thread of process `pid` is doing, for the message of a program that did not end in time: its name,
    /// state, the kernel function it sleeps in and the system call it is in (from `/proc`), and with `gdb` on PATH,
    /// every thread's backtrace (gdb stops the process for a moment while it reads them).
    public static func threadReport(of pid: Int32) -> String {
        let task = "/proc/\(pid)/task"
        let threads = ((try? FileManager.default.contentsOfDirectory(atPath: task)) ?? []).sorted {
            (Int($0) ?? 0) < (Int($1) ?? 0)
        }
        var lines: [String] = []
        for thread in threads {
            func field(_ name: String) -> String {
                (System.readText("\(task)/\(thread)/\(name)") ?? "?").trimmingCharacters(in: .whitespacesAndNewlines)
            }
            // stat: "tid (name) state …": the state is the first field after the name's closing parenthesis.
            let stat = field("stat")
            let state = stat.lastIndex(of: ")").map { String(stat[stat.index($0, offsetBy: 2)...].prefix(1)) } ?? "?"
            lines.append(
                "  \(thread) \(field("comm")) state \(state) wchan \(field("wchan")) syscall \(field("syscall"))")
        }
        if lines.isEmpty { return "  (no /proc/\(pid)/task: the process is gone)" }
        if let gdb = try? locate("gdb"),
            let traces = try? execute(
                gdb, ["-p", "\(pid)", "-batch", "-nx", "-ex", "thread apply all bt 30"], timeout: .seconds(60))
        {
            let kept = traces.output.split(separator: "\n").filter {
                $0.hasPrefix("Thread ") || $0.hasPrefix("#")
            }
            lines.append(
                kept.isEmpty ? "  gdb read no backtrace: \(traces.stderr.suffix(300))" : kept.joined(separator: "\n"))
        }
        return lines.joined(separator: "\n")
    }

    /// The default time a program may run: a liveness bound for a loaded two-core machine, not a performance limit.
    public static let defaultTimeout: Duration = .seconds(120)

    /// Runs the program at `executable` to completion, feeding `stdin` (or nothing) and collecting both outputs.
    ///
    /// A non-zero exit is not an error here: it is in the result.
    /// - Parameter timeout: How long the program may run; then it is terminated (SIGTERM, and SIGKILL five seconds
    ///   later).
    /// - Throws: ``TimedOut`` when the program had to be killed; errors starting it.
    public static func execute(
        _ executable: String, _ arguments: [String], stdin: Data? = nil, environment: [String: String]? = nil,
        timeout: Duration = defaultTimeout
    ) throws -> ToolResult {
        let child = try Child(executable, arguments, stdin: stdin, environment: environment)
        return try child.finish(timeout: timeout)
    }

    /// A program running in the background with both outputs collected, that a test can stop or await with a
    /// deadline.
    public final class Child: @unchecked Sendable {
        /// The running process (for its pid, or signals a test sends).
        public let process: Process
        /// The command line, for messages.
        public let command: String
        private let exited = DispatchSemaphore(value: 0)
        private let readers = DispatchGroup()
        private let outputData = Collected()
        private let errorData = Collected()

        /// Bytes read from a pipe so far.
        private final class Collected: Sendable {
            let bytes = Mutex(Data())
        }

        /// Starts `executable` with `arguments`, feeding `stdin` (or nothing).
        public init(
            _ executable: String, _ arguments: [String], stdin: Data? = nil, environment: [String: String]? = nil
        ) throws {
            command = ([executable] + arguments).joined(separator: " ")
            process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            if let environment { process.environment = environment }
            let output = Pipe()
            let errors = Pipe()
            let input = Pipe()
            process.standardOutput = output
            process.standardError = errors
            process.standardInput = stdin == nil ? FileHandle.nullDevice : input
            let exited = exited
            process.terminationHandler = { _ in exited.signal() }
            try process.run()
            // Each pipe gets a thread of its own: blocking reads on the shared dispatch pool would wait for a free
            // worker while other tests' long-running children hold them all.
            // Plain read(2) and write(2), retried on EINTR: Foundation's FileHandle stops the process when a signal
            // interrupts its read (another test's child exiting is enough).
            if let stdin {
                signal(SIGPIPE, SIG_IGN)  // a child that exits without reading its input must not stop the tests
                Thread {
                    let fd = input.fileHandleForWriting.fileDescriptor
                    stdin.withUnsafeBytes { bytes in
                        var done = 0
                        while done < bytes.count {
                            let n = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
                            if n < 0 && errno == EINTR { continue }
                            if n <= 0 { break }
                            done += n
                        }
                    }
                    try? input.fileHandleForWriting.close()
                }.start()
            }
            for (pipe, data) in [(output, outputData), (errors, errorData)] {
                readers.enter()
                let readers = readers
                Thread {
                    defer { readers.leave() }
                    let fd = pipe.fileHandleForReading.fileDescriptor
                    var buffer = [UInt8](repeating: 0, count: 1 << 16)
                    while true {
                        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                        if n < 0 && errno == EINTR { continue }
                        if n <= 0 { break }
                        data.bytes.withAnnotatedLock { $0.append(contentsOf: buffer[0..<n]) }
                    }
                }.start()
            }
        }

        /// Standard output so far.
        public var stdout: Data { outputData.bytes.withAnnotatedLock { $0 } }
        /// Standard output so far, as text.
        public var output: String { String(decoding: stdout, as: UTF8.self) }
        /// Standard error so far, as text.
        public var stderr: String { String(decoding: errorData.bytes.withAnnotatedLock { $0 }, as: UTF8.self) }

        /// Waits up to `timeout` for the program to exit.
        ///
        /// - Returns: whether it exited.
        public func waitForExit(timeout: Duration) -> Bool {
            guard exited.wait(timeout: .now() + timeout.seconds) == .success else { return false }
            exited.signal()  // for finish()
            return true
        }

        /// Waits up to `timeout` for the program to exit, else terminates it (SIGTERM, then SIGKILL five seconds
        /// later); then collects what it wrote.
        ///
        /// - Throws: ``TimedOut`` when it had to be killed.
        public func finish(timeout: Duration = ExternalTools.defaultTimeout) throws -> ToolResult {
            var timedOut = false
            var threads = ""
            if exited.wait(timeout: .now() + timeout.seconds) != .success {
                timedOut = true
                threads = ExternalTools.threadReport(of: process.processIdentifier)
                process.terminate()
                if exited.wait(timeout: .now() + 5) != .success {
                    kill(process.processIdentifier, SIGKILL)
                    _ = exited.wait(timeout: .now() + 30)
                }
            }
            // The pipes reach end of file when the program exits, unless a program it started still holds them.
            _ = readers.wait(timeout: .now() + (timedOut ? 5 : 30))
            exited.signal()  // for a later finish()
            if timedOut || process.isRunning {
                throw TimedOut(command: command, timeout: timeout, stdout: stdout, stderr: stderr, threads: threads)
            }
            process.waitUntilExit()  // returns at once: the status is set
            return ToolResult(status: process.terminationStatus, stdout: stdout, stderr: stderr)
        }
    }

    /// Runs `name` from PATH with `arguments`, feeding `input` on stdin; returns its standard output.
    ///
    /// - Throws: ``Missing`` when the tool is absent, ``Failed`` when it exits non-zero, ``TimedOut`` when it runs
    ///   longer than `timeout`.
    @discardableResult
    public static func run(
        _ name: String, _ arguments: [String], input: Data? = nil, timeout: Duration = defaultTimeout
    ) throws -> Data {
        let result = try execute(try locate(name), arguments, stdin: input, timeout: timeout)
        guard result.status == 0 else {
            throw Failed(
                command: ([name] + arguments).joined(separator: " "), status: result.status, stderr: result.stderr)
        }
        return result.stdout
    }

    /// The per-frame MD5 lines of `path` decoded to `pixelFormat` (`ffmpeg -f framemd5`), without timestamps.
    public static func frameMD5s(_ path: String, pixelFormat: String? = nil) throws -> [String] {
        var arguments = ["-hide_banner", "-loglevel", "error", "-i", path]
        if let pixelFormat { arguments += ["-pix_fmt", pixelFormat] }
        arguments += ["-fps_mode", "passthrough", "-f", "framemd5", "-"]
        let text = String(decoding: try run("ffmpeg", arguments), as: UTF8.self)
        return text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map {
            String($0.split(separator: ",").last!.trimmingCharacters(in: .whitespaces))
        }
    }

    /// `ffprobe -show_entries` values, one array per line of `csv` output.
    public static func probe(_ path: String, _ arguments: [String]) throws -> [[String]] {
        let text = String(
            decoding: try run("ffprobe", ["-v", "error"] + arguments + ["-of", "csv=p=0", path]), as: UTF8.self)
        return text.split(separator: "\n").map {
            $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        }
    }

    /// Makes a YUV4MPEG2 file of `testsrc2` frames with ffmpeg.
    public static func makeY4M(
        _ path: String, width: Int, height: Int, rate: String, frames: Int, pixelFormat: String = "yuv420p",
        extra: [String] = []
    ) throws {
        try run(
            "ffmpeg",
            [
                "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                "testsrc2=size=\(width)x\(height):rate=\(rate)", "-vf", "scale=\(width):\(height)",
                "-frames:v", "\(frames)", "-pix_fmt", pixelFormat,
            ] + extra + ["-f", "yuv4mpegpipe", path])
    }
}

/// The `sqlite3` shell, for reading a store's index as any other program would.
public enum SQLiteShell {
    /// The shell's path on PATH.
    ///
    /// - Throws: ``ExternalTools/Missing`` when it is not installed.
    public static func path() throws -> String { try ExternalTools.locate("sqlite3") }

    /// Runs `sqlite3` with `arguments`; a non-zero exit is in the result.
    public static func run(_ arguments: [String]) throws -> ToolResult {
        try ExternalTools.execute(try path(), arguments)
    }
}
