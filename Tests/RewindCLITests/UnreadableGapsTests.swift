import Foundation
import Glibc
import RewindTesting
import Testing

/// A save or clip whose range's gaps cannot be read (the index's `gaps` table gone, as sqlite3 leaves it renamed)
/// keeps the file it wrote, whole, and says its losses are unknown, with why and exit 1: never that nothing was lost.
@Suite(.timeLimit(.minutes(45))) struct UnreadableGapsTests {
    /// The stderr line of a command whose range's gaps could not be read: the index named, and SQLite's reason.
    func expectUnknownLosses(_ result: ToolResult, command: String, store: String) {
        #expect(result.status == 1, "\(result.stderr)")
        #expect(
            result.stderr.contains(
                "rewind \(command): could not read the range's gaps (database \(store)/index.sqlite"),
            "\(result.stderr)")
        #expect(result.stderr.contains("no such table: gaps"), "\(result.stderr)")
        #expect(
            result.stderr.contains("frames it lost, if any, are not listed; what was written is kept"),
            "\(result.stderr)")
        #expect(!result.output.contains("the range has"), "\(result.output)")
        // What to do, from the disk (the index error's advice) and through a recorder alike.
        #expect(result.stderr.contains("'rewind verify"), "\(result.stderr)")
    }

    /// A `--json` document whose losses are unknown: done, no `lost` (an empty one would say none), and
    /// `lost_unknown` giving the store's error.
    func unknownLossesDocument(_ result: ToolResult) throws -> [String: Any] {
        let object = try #require(
            try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any], "\(result.output)")
        #expect(object["state"] as? String == "done", "\(object)")
        #expect(object["lost"] == nil, "\(object)")
        let reason = try #require(object["lost_unknown"] as? String, "\(object)")
        #expect(reason.contains("index.sqlite") && reason.contains("no such table: gaps"), "\(reason)")
        return object
    }

    /// Renames the store's `gaps` table away (`back`: to its name again), waiting out a recorder's lock.
    func moveGapsTable(of store: String, back: Bool = false) throws {
        let (from, to) = back ? ("gaps_away", "gaps") : ("gaps", "gaps_away")
        _ = try runChecked(
            "sqlite3", [store + "/index.sqlite", ".timeout 10000", "ALTER TABLE \(from) RENAME TO \(to)"])
    }

    /// From the disk, one stream and every stream, text and `--json`, a clip and a save of the last seconds: each
    /// file is written with the frames a clip of the same range made while the gaps could be read, and each command
    /// says its losses are unknown and exits 1 (the range does hold a gap: it said nothing of it, exit 0).
    @Test func anExportFromTheDiskWhoseGapsCannotBeReadSaysItsLossesAreUnknown() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorded = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:160x90@30", "--input", "b=synthetic:160x90@30",
            "--duration", "2s",
        ])
        try #require(recorded.status == 0, "\(recorded.stderr)")
        _ = try runChecked(
            "sqlite3",
            [
                store + "/index.sqlite",
                "INSERT INTO gaps (stream_id, start_ns, end_ns, reason) VALUES (1, 500000000, 800000000, 'damaged')",
            ])
        func file(_ name: String) -> String { directory.appendingPathComponent(name).path }
        let range = ["--from", "1s", "--to", "2s"]
        let reference = try Tool.rewind(
            ["clip", "--store", store, "--stream", "a", "--from", "0s", "--to", "1s"]
                + ["-o", file("reference.mkv")])
        #expect(reference.status == 0, "\(reference.stderr)")
        #expect(reference.output.contains("the range has 1 gap where frames were lost"), "\(reference.output)")
        let referenceAll = try Tool.rewind(
            ["clip", "--store", store, "--stream", "all"] + range + ["-o", file("reference-all.mkv")])
        #expect(referenceAll.status == 0, "\(referenceAll.stderr)")
        let expected = try ExternalTools.frameMD5s(file("reference.mkv"))
        try #require(expected.count == 30)
        try moveGapsTable(of: store)

        let clip = try Tool.rewind(
            ["clip", "--store", store, "--stream", "a", "--from", "0s", "--to", "1s", "-o", file("clip.mkv")])
        expectUnknownLosses(clip, command: "clip", store: store)
        #expect(clip.output.contains("wrote 30 frames"), "\(clip.output)")
        #expect(try ExternalTools.frameMD5s(file("clip.mkv")) == expected)

        let json = try Tool.rewind(
            ["clip", "--store", store, "--stream", "a", "--from", "0s", "--to", "1s", "--json", "-o", file("clip.y4m")])
        expectUnknownLosses(json, command: "clip", store: store)
        #expect(try unknownLossesDocument(json)["frames"] as? Int == 30)
        // .y4m holds I420: both decoded to it.
        #expect(
            try ExternalTools.frameMD5s(file("clip.y4m"), pixelFormat: "yuv420p")
                == ExternalTools.frameMD5s(file("reference.mkv"), pixelFormat: "yuv420p"))

        // Every stream: one .mkv, and a .y4m each.
        let all = try Tool.rewind(["clip", "--store", store, "--stream", "all"] + range + ["-o", file("all.mkv")])
        expectUnknownLosses(all, command: "clip", store: store)
        #expect(try ExternalTools.frameMD5s(file("all.mkv")) == ExternalTools.frameMD5s(file("reference-all.mkv")))
        let allJSON = try Tool.rewind(
            ["clip", "--store", store, "--stream", "all"] + range + ["--json", "-o", file("all.y4m")])
        expectUnknownLosses(allJSON, command: "clip", store: store)
        #expect(try unknownLossesDocument(allJSON)["frames"] as? Int == 60)

        // A save of the last second, from the disk alike.
        let save = try Tool.rewind(
            ["save", "--store", store, "--stream", "a", "--last", "1s", "--json", "-o", file("save.mkv")])
        expectUnknownLosses(save, command: "save", store: store)
        #expect(try unknownLossesDocument(save)["frames"] as? Int == 30)
    }

    /// Through a live recorder: a client's save (text and `--json`, the API's save object) and a SIGUSR1 save, whose
    /// log is its only report, say the losses are unknown; the file holds what a clip of the range from the disk
    /// holds once the gaps can be read again.
    @Test func aLiveSaveWhoseGapsCannotBeReadSaysItsLossesAreUnknown() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x90@30", "--realtime", "--window", "60s",
        ])
        let process = recorder.process
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        try Tool.waitUntilAnswering(store)
        try waitUntil("the recorder holds a second and a half", interval: .milliseconds(50)) {
            ((Tool.firstStreamStatus(store: store)?["memory_frames"] as? Int) ?? 0) >= 45
        }
        try moveGapsTable(of: store)

        let saved = directory.appendingPathComponent("live.mkv").path
        let save = try Tool.rewind(["save", "--store", store, "--last", "1s", "--json", "-o", saved])
        expectUnknownLosses(save, command: "save", store: store)
        let object = try unknownLossesDocument(save)
        #expect(object["source"] as? String == "recorder", "\(object)")
        let text = try Tool.rewind(
            ["save", "--store", store, "--last", "1s", "-o", directory.appendingPathComponent("text.mkv").path])
        expectUnknownLosses(text, command: "save", store: store)
        #expect(text.output.contains("saved by the live recorder"), "\(text.output)")

        kill(process.processIdentifier, SIGUSR1)
        let exports = store + "/exports"
        try waitUntil("SIGUSR1 wrote its file into \(exports)") {
            ((try? FileManager.default.contentsOfDirectory(atPath: exports)) ?? []).contains { $0.hasSuffix(".mkv") }
        }
        try waitUntil("the recorder logged three saves") {
            recorder.stderr.components(separatedBy: "could not read the range's gaps (").count == 4
        }
        try moveGapsTable(of: store, back: true)
        process.interrupt()
        let finished = try recorder.finish(timeout: .seconds(60))
        #expect(finished.status == 0, "\(finished.stderr)")
        #expect(
            finished.stderr.contains("\n  could not read the range's gaps (database \(store)/index.sqlite"),
            "\(finished.stderr)")
        #expect(finished.stderr.contains("frames it lost, if any, are not listed"), "\(finished.stderr)")

        // The file is whole: the frames of its range as the disk holds them.
        let from = try #require(object["from_ns"] as? Int)
        let to = try #require(object["to_ns"] as? Int)
        let fromDisk = directory.appendingPathComponent("disk.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "\(from)ns", "--to", "\(to)ns", "-o", fromDisk])
        #expect(clip.status == 0, "\(clip.stderr)")
        let frames = try ExternalTools.frameMD5s(saved)
        #expect(frames.count == 30)
        #expect(try frames == ExternalTools.frameMD5s(fromDisk))
    }
}
