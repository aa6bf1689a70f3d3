import Foundation
import RewindKit
import Testing

/// Runs the real media tools (ffmpeg, ffprobe) the tests check outputs with.
enum ExternalTools {
    struct Missing: Error, CustomStringConvertible {
        var name: String
        var description: String {
            "\(name) is not on PATH; run 'make test', which installs ffmpeg, ffprobe, lz4 and sqlite3"
        }
    }

    struct Failed: Error, CustomStringConvertible {
        var command: String
        var status: Int32
        var stderr: String
        var description: String { "\(command) exited with \(status): \(stderr.suffix(2000))" }
    }

    /// The absolute path of `name` on PATH.
    static func locate(_ name: String) throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw Missing(name: name)
    }

    /// Runs `name` with `arguments`, feeding `input` on stdin; returns stdout.
    ///
    /// - Throws: ``Missing`` when the tool is absent, ``Failed`` when it exits non-zero.
    @discardableResult
    static func run(_ name: String, _ arguments: [String], input: Data? = nil) throws -> Data {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try locate(name))
        process.arguments = arguments
        let output = try TemporaryDirectory.shared.file("out-\(UUID().uuidString)")
        let errors = try TemporaryDirectory.shared.file("err-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        defer {
            try? FileManager.default.removeItem(atPath: output)
            try? FileManager.default.removeItem(atPath: errors)
        }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        if let input {
            let inputPath = try TemporaryDirectory.shared.file("in-\(UUID().uuidString)")
            try input.write(to: URL(fileURLWithPath: inputPath))
            defer { try? FileManager.default.removeItem(atPath: inputPath) }
            process.standardInput = try FileHandle(forReadingFrom: URL(fileURLWithPath: inputPath))
            try process.run()
            process.waitUntilExit()
        } else {
            process.standardInput = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
        }
        let stdout = try Data(contentsOf: URL(fileURLWithPath: output))
        guard process.terminationStatus == 0 else {
            let stderr = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            throw Failed(
                command: ([name] + arguments).joined(separator: " "), status: process.terminationStatus,
                stderr: stderr)
        }
        return stdout
    }

    /// The per-frame MD5 lines of `path` decoded to `pixelFormat` (`ffmpeg -f framemd5`), without timestamps.
    static func frameMD5s(_ path: String, pixelFormat: String? = nil) throws -> [String] {
        var arguments = ["-hide_banner", "-loglevel", "error", "-i", path]
        if let pixelFormat { arguments += ["-pix_fmt", pixelFormat] }
        arguments += ["-fps_mode", "passthrough", "-f", "framemd5", "-"]
        let text = String(decoding: try run("ffmpeg", arguments), as: UTF8.self)
        return text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map {
            String($0.split(separator: ",").last!.trimmingCharacters(in: .whitespaces))
        }
    }

    /// `ffprobe -show_entries` values, one array per line of `csv` output.
    static func probe(_ path: String, _ arguments: [String]) throws -> [[String]] {
        let text = String(
            decoding: try run("ffprobe", ["-v", "error"] + arguments + ["-of", "csv=p=0", path]), as: UTF8.self)
        return text.split(separator: "\n").map {
            $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        }
    }

    /// Makes a YUV4MPEG2 file of `testsrc2` frames with ffmpeg.
    static func makeY4M(
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

/// One temporary directory for the test run.
final class TemporaryDirectory: Sendable {
    static let shared = TemporaryDirectory()
    let path: String

    private init() {
        path = NSTemporaryDirectory() + "rewind-media-tests-\(getpid())"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// A fresh path inside the directory.
    func file(_ name: String) throws -> String {
        "\(path)/\(UUID().uuidString.prefix(8))-\(name)"
    }
}
