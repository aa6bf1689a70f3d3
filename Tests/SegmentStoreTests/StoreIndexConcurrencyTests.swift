import Dispatch
import Foundation
import RewindSystem
import RewindTesting
import Synchronization
import Testing

@testable import SegmentStore

@Suite(.timeLimit(.minutes(45))) struct StoreIndexConcurrencyTests {
    /// Other processes (`sqlite3` shells, opened afresh in a loop and one kept open) and a read-only connection in
    /// this process read while this process records batches, seals segments and checkpoints: no reader may see
    /// "database is locked", and each reader's frame count only grows.
    @Test
    func readersInOtherProcessesNeverSeeALockedDatabase() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let index = try StoreIndex(path: directory.indexPath)
        let stream = try index.stream(named: "camera", description: IndexFixtures.description)
        let stopFile = directory.path + "/stop"
        let query = "SELECT count(*) FROM frames WHERE stream_id = 1 AND pts_ns >= 0;"

        // A shell loop that opens the database afresh for every query, alternately read-write and read-only.
        // (One short-lived shell at a time: a read-write connection briefly takes the PENDING lock when it closes,
        // to see whether it is the last one and should checkpoint, and a second shell opening at that instant
        // without a busy timeout would see "database is locked" from it, whatever the writer does.)
        let loop = """
            while :; do
                for flags in '' '-readonly'; do
                    \(try SQLiteShell.path()) $flags '\(directory.indexPath)' '\(query)' \
                        >> '\(directory.path)/out-0' 2>> '\(directory.path)/err-0'
                done
                [ -e '\(stopFile)' ] && break
            done
            """
        let shell = Process()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = ["-c", loop]
        try shell.run()
        // One shell that keeps its connection open and repeats the query from its input.
        let longLived = Process()
        longLived.executableURL = URL(fileURLWithPath: try SQLiteShell.path())
        longLived.arguments = [directory.indexPath]
        let input = Pipe()
        for name in ["out-1", "err-1"] {
            #expect(FileManager.default.createFile(atPath: "\(directory.path)/\(name)", contents: nil))
        }
        longLived.standardInput = input
        longLived.standardOutput = FileHandle(forWritingAtPath: "\(directory.path)/out-1")
        longLived.standardError = FileHandle(forWritingAtPath: "\(directory.path)/err-1")
        try longLived.run()

        // A read-only connection in this process, on another thread.
        let reader = try StoreIndex(path: directory.indexPath, readOnly: true)
        let done = Atomic(false)
        let readerFailures = Mutex<[String]>([])
        let readerCounts = Mutex<[Int]>([])
        let firstRead = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        // Its own thread, not a pool's: other tests may keep every pool thread busy.
        let thread = Thread {
            repeat {
                do {
                    var count = 0
                    try reader.frames(streamID: stream.id, in: 0..<Int64.max) { _ in
                        count += 1
                        return true
                    }
                    _ = try reader.summary()
                    readerCounts.withAnnotatedLock { $0.append(count) }
                } catch {
                    readerFailures.withAnnotatedLock { $0.append("\(error)") }
                }
                if readerCounts.withAnnotatedLock({ $0.count }) + readerFailures.withAnnotatedLock({ $0.count }) == 1 {
                    firstRead.signal()
                }
            } while !done.load(ordering: .acquiring)
            finished.signal()
        }
        thread.start()
        try wait(for: firstRead, until: "the in-process reader has read once")

        // The writer: 600 batches of 60 frames (10 minutes of 60 fps), a segment sealed every 30 batches.
        var segment = try index.insertSegment(
            streamID: stream.id, fileName: "seg-0.partial", formatVersion: 1, createdWallNanoseconds: 0)
        for batch in 0..<600 {
            try index.addFrames(
                IndexFixtures.frames(count: 60, first: batch * 60, segmentID: segment), streamID: stream.id)
            if batch % 10 == 9 { try input.fileHandleForWriting.write(contentsOf: Data((query + "\n").utf8)) }
            if batch % 30 == 29 {
                try index.sealSegment(id: segment, fileName: "seg-\(batch / 30).rws")
                try index.checkpoint()
                segment = try index.insertSegment(
                    streamID: stream.id, fileName: "seg-\(batch / 30 + 1).partial", formatVersion: 1,
                    createdWallNanoseconds: 0)
            }
        }
        #expect(FileManager.default.createFile(atPath: stopFile, contents: nil))
        done.store(true, ordering: .releasing)
        try wait(for: finished, until: "the in-process reader stops")
        try waitForExit(shell, "the sqlite3 shell loop sees the stop file and exits")
        try input.fileHandleForWriting.write(contentsOf: Data((query + "\n").utf8))
        try input.fileHandleForWriting.close()
        try waitForExit(longLived, "the long-lived sqlite3 shell exits at the end of its input")

        #expect(
            readerFailures.withAnnotatedLock { $0 }.isEmpty,
            "in-process reader: \(readerFailures.withAnnotatedLock { $0 })")
        let inProcess = readerCounts.withAnnotatedLock { $0 }
        #expect(!inProcess.isEmpty)
        #expect(inProcess == inProcess.sorted(), "a reader saw the frame count shrink")

        var outputs: [[Int]] = []
        for number in 0..<2 {
            let err = System.readText("\(directory.path)/err-\(number)") ?? ""
            #expect(err.isEmpty, "sqlite3 shell \(number) reported: \(err)")
            let out = try String(contentsOfFile: "\(directory.path)/out-\(number)", encoding: .utf8)
            outputs.append(out.split(separator: "\n").compactMap { Int($0) })
        }
        for counts in outputs {
            #expect(!counts.isEmpty)
            #expect(counts == counts.sorted(), "a reader saw the frame count shrink: \(counts)")
            #expect(counts.allSatisfy { (0...36_000).contains($0) })
        }
        #expect(outputs[1].last == 36_000, "the last query after the writer finished sees every frame")
        let during =
            outputs.flatMap { $0 }.filter { $0 > 0 && $0 < 36_000 }.count
            + inProcess.filter {
                $0 > 0 && $0 < 36_000
            }.count
        print(
            "concurrent readers: \(outputs.map(\.count)) shell reads, \(inProcess.count) in-process reads, "
                + "\(during) of them while recording")
    }
}
