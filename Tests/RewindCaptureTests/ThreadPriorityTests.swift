import Foundation
import Glibc
import RewindSystem
import Synchronization
import Testing

/// Exports a recorder writes run on ``Threads/Priority/background`` threads: ten nice steps below the process, so
/// the producer and the spill thread run first on a busy machine; the threads they start (an export's reader, a
/// `.y4m` writer's helpers) and the programs (ffmpeg) inherit it.
@Suite(.timeLimit(.minutes(45))) struct ThreadPriorityTests {
    /// The nice value of the calling thread (Linux keeps one per thread): field 19 of `/proc/thread-self/stat`.
    static func threadNice() -> Int32 {
        guard let stat = try? String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return -100 }
        // Fields from the third (the state) on, after the name in parentheses.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 16 ? Int32(fields[16]) ?? -100 : -100
    }

    /// Runs `body` on a thread started at `priority` and returns what it gave, waiting at most 30 s.
    static func onThread(
        priority: Threads.Priority, _ body: @escaping @Sendable () -> Int32
    ) throws -> Int32? {
        let result = Mutex<Int32?>(nil)
        let done = DispatchSemaphore(value: 0)
        try Threads.start(named: "rewind-test", priority: priority) {
            result.withAnnotatedLock { $0 = body() }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 30) == .success, "the thread ran")
        return result.withAnnotatedLock { $0 }
    }

    @Test func aBackgroundThreadAndWhatItStartsRunTenNiceStepsLower() throws {
        let own = Self.threadNice()
        let expected = min(19, own + Threads.backgroundNiceIncrement)
        #expect(try Self.onThread(priority: .normal) { Self.threadNice() } == own)
        #expect(try Self.onThread(priority: .background) { Self.threadNice() } == expected)
        // A thread the background thread starts inherits its priority, and so does a program it starts.
        let inherited = try Self.onThread(priority: .background) {
            (try? Self.onThread(priority: .normal) { Self.threadNice() }).flatMap { $0 } ?? -100
        }
        #expect(inherited == expected)
        let program = try Self.onThread(priority: .background) {
            let result = try? ExternalNice.run()
            return result ?? -100
        }
        #expect(program == expected, "a child process started by a background thread inherits its nice value")
    }
}

/// `nice` with no arguments prints the nice value it runs at: the one it inherited.
enum ExternalNice {
    static func run() throws -> Int32? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/nice")
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Int32(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
