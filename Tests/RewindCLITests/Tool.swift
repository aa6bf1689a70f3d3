import Foundation
import Synchronization
import Testing

/// The result of running a program to completion.
struct ToolResult {
    let status: Int32
    let stdout: Data
    let stderr: String

    var output: String { String(decoding: stdout, as: UTF8.self) }
}

/// Runs programs for end-to-end tests: the `rewind` binary built next to the test bundle, and real tools from PATH.
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

    /// The full path of `name` on PATH; a test that needs a missing tool fails, saying how to install it.
    static func path(of name: String) throws -> String {
        let folders = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        for folder in folders {
            let candidate = "\(folder)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        Issue.record(
            "\(name) is not installed: run 'make test', which installs it (apt-get install ffmpeg lz4 sqlite3)")
        throw CancellationError()
    }

    /// Runs `rewind` with `arguments`.
    @discardableResult
    static func rewind(_ arguments: [String], stdin: Data? = nil, environment: [String: String]? = nil) throws
        -> ToolResult
    {
        try run(rewindPath, arguments, stdin: stdin, environment: environment)
    }

    /// Runs `executable` with `arguments`, feeding `stdin` and collecting both outputs.
    static func run(
        _ executable: String, _ arguments: [String], stdin: Data? = nil, environment: [String: String]? = nil
    )
        throws -> ToolResult
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let output = Pipe()
        let errors = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = stdin == nil ? FileHandle.nullDevice : input
        try process.run()
        if let stdin {
            DispatchQueue.global().async {
                try? input.fileHandleForWriting.write(contentsOf: stdin)
                try? input.fileHandleForWriting.close()
            }
        }
        let errorData = Mutex(Data())
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            let data = errors.fileHandleForReading.readDataToEndOfFile()
            errorData.withLock { $0 = data }
        }
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        process.waitUntilExit()
        return ToolResult(
            status: process.terminationStatus, stdout: outputData,
            stderr: String(decoding: errorData.withLock { $0 }, as: UTF8.self))
    }

    /// A fresh, empty temporary directory.
    static func temporaryDirectory(_ label: String = "rewind") throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(label)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}
