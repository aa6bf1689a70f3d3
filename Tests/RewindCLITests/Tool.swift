import Foundation
import RewindTesting
import Testing

/// Runs programs for end-to-end tests: the `rewind` binary built next to the test bundle, and real tools from PATH.
///
/// Every run has a deadline (``ExternalTools/defaultTimeout`` unless given): a program that hangs is killed and the
/// test fails with ``ExternalTools/TimedOut``.
enum Tool {
    /// The `rewind` executable in the same build folder as this test binary.
    static let rewindPath: String = {
        let exe =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var folder = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // `swift test` runs `<build>/RewindPackageTests.xctest`; the tool sits beside it.
        if folder.lastPathComponent.hasSuffix(".xctest") { folder.deleteLastPathComponent() }
        return folder.appendingPathComponent("rewind").path
    }()

    /// The package's root folder: this file is `Tests/RewindCLITests/Tool.swift`.
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    /// The full path of `name` on PATH.
    ///
    /// - Throws: ``ExternalTools/Missing`` (a test that needs a missing tool fails, saying to run `make test`).
    static func path(of name: String) throws -> String { try ExternalTools.locate(name) }

    /// Runs `rewind` with `arguments`.
    @discardableResult
    static func rewind(
        _ arguments: [String], stdin: Data? = nil, environment: [String: String]? = nil,
        timeout: Duration = ExternalTools.defaultTimeout
    ) throws -> ToolResult {
        try run(rewindPath, arguments, stdin: stdin, environment: environment, timeout: timeout)
    }

    /// Runs `executable` with `arguments`, feeding `stdin` and collecting both outputs.
    ///
    /// - Throws: ``ExternalTools/TimedOut`` when it runs longer than `timeout` (it is killed).
    static func run(
        _ executable: String, _ arguments: [String], stdin: Data? = nil, environment: [String: String]? = nil,
        timeout: Duration = ExternalTools.defaultTimeout
    ) throws -> ToolResult {
        try ExternalTools.execute(executable, arguments, stdin: stdin, environment: environment, timeout: timeout)
    }

    /// The first stream of `rewind status --store STORE --json` (a running recorder's), or nil when none answers.
    static func firstStreamStatus(store: String) -> [String: Any]? {
        let status = try? rewind(["status", "--store", store, "--json"])
        let object = status.flatMap { try? JSONSerialization.jsonObject(with: $0.stdout) as? [String: Any] }
        return (object?["streams"] as? [[String: Any]])?.first
    }

    /// Runs `rewind` with `arguments` under a file size limit of `bytes`, its SIGXFSZ at the default action and
    /// unblocked (which kills a process that does not ignore it; the test runner hands its children signals blocked).
    static func rewindWithFileSizeLimit(_ bytes: Int, _ arguments: [String]) throws -> ToolResult {
        let limited =
            "import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
            + "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGXFSZ]); "
            + "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]),) * 2); os.execv(sys.argv[2], sys.argv[2:])"
        return try run("/usr/bin/python3", ["-c", limited, "\(bytes)", rewindPath] + arguments)
    }

    /// Starts `rewind` with `arguments` in the background; the caller stops it and awaits it with
    /// ``ExternalTools/Child/finish(timeout:)``.
    static func startRewind(_ arguments: [String]) throws -> ExternalTools.Child {
        try ExternalTools.Child(rewindPath, arguments)
    }

    /// Starts `rewind` with `arguments`, which write to `fifo` that nobody reads: checks that it says it waits for
    /// a reader, and that Ctrl-C then ends it (130), saying so.
    static func expectWaitForAReaderEndsOnInterrupt(_ arguments: [String], fifo: String) throws {
        _ = try expectWaitEndsOnInterrupt(
            arguments, saying: "waiting for a reader of the FIFO \(fifo)",
            then: "interrupted while waiting for a reader of \(fifo)")
    }

    /// Starts `rewind` with `arguments`, which wait for something that never comes: checks that it says `waiting`,
    /// and that Ctrl-C then ends it (130), saying `interrupted`.
    ///
    /// - Returns: what it wrote.
    @discardableResult
    static func expectWaitEndsOnInterrupt(_ arguments: [String], saying waiting: String, then interrupted: String)
        throws -> ToolResult
    {
        let unread = try startRewind(arguments)
        defer { if unread.process.isRunning { kill(unread.process.processIdentifier, SIGKILL) } }
        try waitUntil("it says it waits", timeout: .seconds(60)) { unread.stderr.contains(waiting) }
        unread.process.interrupt()
        let result = try unread.finish(timeout: .seconds(10))
        #expect(result.status == 130, "\(result.stderr)")
        #expect(result.stderr.contains(interrupted), "\(result.stderr)")
        return result
    }

    /// Waits until `recorder` (a `rewind record … --listen HOST:0`) says where it listens; its TCP port.
    static func listeningPort(of recorder: ExternalTools.Child) throws -> String {
        var port = ""
        try waitUntil("the recorder says where it listens", interval: .milliseconds(50)) {
            guard let line = recorder.stderr.split(separator: "\n").first(where: { $0.contains("serving the API on") })
            else { return false }
            port = String(line.split(separator: ":").last?.prefix { $0.isNumber } ?? "")
            return !port.isEmpty
        }
        return port
    }

    /// Waits until the recorder started on `store` serves its control socket.
    /// Waits until the recorder of `store` answers `rewind status` (its socket's file appears before it listens).
    static func waitUntilAnswering(_ store: String) throws {
        try waitUntil("the recorder answers", interval: .milliseconds(50)) {
            try Tool.rewind(["status", "--store", store]).status == 0
        }
    }

    static func waitForSocket(of store: String) throws {
        try waitUntil("the recorder serves its socket") {
            FileManager.default.fileExists(atPath: store + "/rewind.sock")
        }
    }

    /// Makes a FIFO at `path`, opens it for reading and writing (so opening it never blocks and it stays open for a
    /// reader), and writes `bytes` into it (at most what a pipe holds: more would wait for a reader).
    ///
    /// - Returns: the descriptor, for the caller to write more and to close.
    static func openFIFO(_ path: String, sending bytes: [UInt8]) throws -> Int32 {
        try #require(mkfifo(path, 0o600) == 0)
        let writer = open(path, O_RDWR)
        try #require(writer >= 0)
        try #require(write(writer, bytes, bytes.count) == bytes.count)
        return writer
    }

    /// A fresh, empty temporary directory.
    static func temporaryDirectory(_ label: String = "rewind") throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(label)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}
