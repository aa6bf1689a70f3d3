import Foundation
import RewindCore
import RewindTesting
import SegmentStore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `kill -9` of a writing process at random moments, then recovery: every frame the writer reported durable is
/// there and bit-exact, and nothing damaged is ever returned.
///
/// The writer is this test binary re-executed with `REWIND_CRASH_CHILD_STORE` set, running
/// ``crashWriterChildProcess()``, which prints `DURABLE <pts>` after each successful sync.
@Suite(.timeLimit(.minutes(10))) struct SegmentCrashTests {
    static let childVariable = "REWIND_CRASH_CHILD_STORE"
    static let frameFormat = (PixelFormat.nv12, 160, 120)

    static func makeFrames() throws -> TestFrames {
        try TestFrames(format: frameFormat.0, width: frameFormat.1, height: frameFormat.2)
    }

    /// The child: appends frames after whatever the store already holds, syncing every few frames, until killed.
    /// Does nothing in a normal test run.
    @Test func crashWriterChildProcess() throws {
        guard let directory = ProcessInfo.processInfo.environment[Self.childVariable] else { return }
        let frames = try Self.makeFrames()
        let store = try SegmentStore.open(
            directory: directory,
            options: StoreOptions(
                keyInterval: 5, workerCount: 2, segmentMaxDuration: 400_000_000, syncInterval: .max))
        let last = try store.summary().lastPTS
        var i = last.map { Int($0 / frames.stream.frameDuration.nanoseconds!) + 1 } ?? 0
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        while true {
            try writer.append(frames.frame(i))
            if i % 3 == 2, let pts = try writer.sync() {
                FileHandle.standardOutput.write(Data("DURABLE \(pts)\n".utf8))
            }
            i += 1
        }
    }

    @Test func killNineAtRandomMomentsLosesNothingDurable() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try Self.makeFrames()
        defer { frames.deallocate() }
        let binary = ProcessInfo.processInfo.arguments[0]
        var durable: Set<Int64> = []
        var rng = SystemRandomNumberGenerator()
        for round in 0..<12 {
            let child = Process()
            child.executableURL = URL(fileURLWithPath: binary)
            child.arguments = ["--testing-library", "swift-testing", "--filter", "crashWriterChildProcess"]
            child.environment = ProcessInfo.processInfo.environment.merging([Self.childVariable: dir.path]) { $1 }
            let pipe = Pipe()
            child.standardOutput = pipe
            child.standardError = FileHandle.nullDevice
            try child.run()
            // Wait for the first durable frame of this round, then kill at a random moment after it.
            let reader = pipe.fileHandleForReading
            var text = ""
            while !text.contains("DURABLE") && child.isRunning {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            usleep(UInt32.random(in: 0..<150_000, using: &rng))
            kill(child.processIdentifier, SIGKILL)
            child.waitUntilExit()
            text += String(decoding: reader.readDataToEndOfFile(), as: UTF8.self)
            let reported = text.split(separator: "\n").compactMap { line -> Int64? in
                guard line.hasPrefix("DURABLE ") else { return nil }
                return Int64(line.dropFirst("DURABLE ".count))
            }
            #expect(!reported.isEmpty, "round \(round): the child reported no durable frame")
            durable.formUnion(reported)

            let store = try SegmentStore.open(directory: dir.path)
            let read = try readAll(store)
            let present = Set(read.map(\.0))
            for pts in durable { #expect(present.contains(pts), "round \(round): durable pts \(pts) lost") }
            let duration = frames.stream.frameDuration.nanoseconds!
            #expect(read.map(\.0) == (0..<read.count).map { Int64($0) * duration }, "round \(round): not contiguous")
            for (pts, digest) in read {
                #expect(digest == frames.expectedDigest(Int(pts / duration)), "round \(round): pts \(pts) corrupt")
            }
            let report = try store.verify(repair: false)
            #expect(report.clean, "round \(round): \(report.damaged) \(report.problems)")
        }
    }
}
