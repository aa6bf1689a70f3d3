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
/// ``crashWriterChildProcess()`` (enabled only then), which prints `START <frame>` and then `DURABLE <pts>` after
/// each successful sync. The parent checks that each child started, reported durable frames, was still writing when
/// it was killed and died of that kill, so a child that ran nothing cannot pass for one that was killed.
@Suite(.timeLimit(.minutes(45))) struct SegmentCrashTests {
    static let childVariable = "REWIND_CRASH_CHILD_STORE"
    /// The child's chunk size: small chunks get written while the rest of the frame is still being compressed.
    static let chunkVariable = "REWIND_CRASH_CHILD_CHUNK"
    static let frameFormat = (PixelFormat.nv12, 160, 120)
    /// A child writes at most this long: if its parent dies, it does not write for ever.
    static let childLifetime: Duration = .seconds(120)

    static var childStore: String? { ProcessInfo.processInfo.environment[childVariable] }

    static func makeFrames() throws -> TestFrames {
        try TestFrames(format: frameFormat.0, width: frameFormat.1, height: frameFormat.2)
    }

    /// The child: appends frames after whatever the store already holds, syncing every few frames, until killed.
    @Test(.enabled(if: childStore != nil, "runs only as the child of killNineAtRandomMomentsLosesNothingDurable"))
    func crashWriterChildProcess() throws {
        let directory = try #require(Self.childStore)
        let frames = try Self.makeFrames()
        let store = try SegmentStore.open(
            directory: directory,
            options: StoreOptions(
                keyInterval: 5, workerCount: 2, segmentMaxDuration: .milliseconds(400),
                syncInterval: .nanoseconds(Int64.max),
                chunkSize: ProcessInfo.processInfo.environment[Self.chunkVariable].flatMap { Int($0) }
                    ?? StoreOptions.defaultChunkSize))
        let last = try store.summary().lastPTS
        var i = last.map { Int($0 / frames.stream.frameDuration.nanoseconds!) + 1 } ?? 0
        let writer = try store.makeWriter(streamName: "camera", stream: frames.stream)
        FileHandle.standardOutput.write(Data("START \(i)\n".utf8))
        let clock = ContinuousClock()
        let end = clock.now + Self.childLifetime
        while clock.now < end {
            try writer.append(frames.frame(i))
            if i % 3 == 2, let pts = try writer.sync() {
                FileHandle.standardOutput.write(Data("DURABLE \(pts)\n".utf8))
            }
            i += 1
        }
        Issue.record("the child was not killed within \(Self.childLifetime)")
    }

    /// With the default chunk size (each small frame is one record written at once) and with 4 KiB chunks (runs of
    /// chunks are written while the frame's other chunks are compressed, the header last).
    @Test(arguments: [StoreOptions.defaultChunkSize, 4096])
    func killNineAtRandomMomentsLosesNothingDurable(chunkSize: Int) throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let frames = try Self.makeFrames()
        defer { frames.deallocate() }
        let binary = ProcessInfo.processInfo.arguments[0]
        var durable: Set<Int64> = []
        var framesBefore = 0
        var rng = SystemRandomNumberGenerator()
        for round in 0..<12 {
            let child = try ExternalTools.Child(
                binary, ["--testing-library", "swift-testing", "--filter", "crashWriterChildProcess"],
                environment: ProcessInfo.processInfo.environment.merging([
                    Self.childVariable: dir.path, Self.chunkVariable: String(chunkSize),
                ]) { $1 })
            defer { if child.process.isRunning { kill(child.process.processIdentifier, SIGKILL) } }
            // Wait for the first durable frame of this round, then kill at a random moment after it.
            try waitUntil("round \(round): the child reports a durable frame or exits") {
                child.output.contains("DURABLE") || !child.process.isRunning
            }
            usleep(UInt32.random(in: 0..<150_000, using: &rng))
            try #require(
                child.process.isRunning,
                "round \(round): the child exited before it was killed: \(child.output) \(child.stderr.suffix(2000))")
            kill(child.process.processIdentifier, SIGKILL)
            let result = try child.finish(timeout: .seconds(30))
            #expect(
                child.process.terminationReason == .uncaughtSignal && result.status == SIGKILL,
                "round \(round): the child died of the kill")
            let lines = result.output.split(separator: "\n")
            #expect(
                lines.first == "START \(framesBefore)",
                "round \(round): the child started after the \(framesBefore) frames the store held: \(lines.first ?? "")"
            )
            let reported = lines.compactMap { line -> Int64? in
                guard line.hasPrefix("DURABLE ") else { return nil }
                return Int64(line.dropFirst("DURABLE ".count))
            }
            #expect(!reported.isEmpty, "round \(round): the child reported no durable frame")
            durable.formUnion(reported)

            let store = try SegmentStore.open(directory: dir.path)
            let read = try readAll(store)
            #expect(read.count > framesBefore, "round \(round): the child added frames")
            framesBefore = read.count
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
        #expect(durable.count >= 12, "every round made frames durable")
    }
}
