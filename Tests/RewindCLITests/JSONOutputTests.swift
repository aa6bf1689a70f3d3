import Foundation
import Glibc
import RewindTesting
import Testing

/// `save --json`, `clip --json`, `mark --json` and `unmark --json`: one document on stdout, whose values are what was
/// written and what the store holds, from a live recorder and from the disk; nothing on stdout when they fail.
@Suite(.timeLimit(.minutes(45))) struct JSONOutputTests {
    /// The one JSON object on the whole of `result`'s stdout.
    func document(_ result: ToolResult) throws -> [String: Any] {
        try #require(result.status == 0, "\(result.stderr)")
        return try #require(
            try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any], "\(result.output)")
    }

    /// `rewind ARGUMENTS` run in `directory` (for an `-o` relative to it).
    func rewind(in directory: String, _ arguments: [String]) throws -> ToolResult {
        try Tool.run(
            "/bin/bash", ["-c", "cd \"$1\" && shift && exec \"$0\" \"$@\"", Tool.rewindPath, directory] + arguments)
    }

    /// The ids of the store's markers, as `rewind markers --json` lists them.
    func markerIDs(_ store: String) throws -> [Int] {
        let listed = try document(try Tool.rewind(["markers", "--store", store, "--json"]))
        return (listed["markers"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? Int }
    }

    /// Checks a save or clip document's files against the disk: each exists where it says, absolute, and their frames
    /// (decoded by ffmpeg, every track of each) are its `frames`.
    func expectFilesHoldTheFrames(_ object: [String: Any]) throws {
        let files = try #require(object["files"] as? [String], "\(object)")
        try #require(!files.isEmpty, "\(object)")
        var decoded = 0
        for file in files {
            #expect(file.hasPrefix("/") && FileManager.default.fileExists(atPath: file), "\(file)")
            let tracks = try ExternalTools.probe(file, ["-count_frames", "-show_entries", "stream=nb_read_frames"])
            decoded +=
                tracks.count == 1
                ? try ExternalTools.frameMD5s(file).count
                : tracks.compactMap { Int($0[0]) }
                    .reduce(0, +)
        }
        #expect(object["frames"] as? Int == decoded, "\(object)")
        let named = (object["stream_files"] as? [[String: String]] ?? []).compactMap { $0["file"] }
        #expect(Set(named) == Set(files), "\(object)")
    }

    /// `--json` with `-o -` would put the document among the frames: refused (64) naming both, nothing written.
    func expectJSONToStandardOutputRefused(store: String) throws {
        for arguments in [
            ["save", "--store", store, "--last", "1s", "-o", "-", "--json"],
            ["clip", "--store", store, "--from", "0s", "--to", "1s", "--json", "-o", "-"],
        ] {
            let refused = try Tool.rewind(arguments)
            #expect(refused.status == 64, "\(arguments): \(refused.stderr)")
            #expect(refused.stdout.isEmpty, "\(arguments)")
            #expect(refused.stderr.contains("--json") && refused.stderr.contains("-o -"), "\(refused.stderr)")
        }
    }

    @Test func saveClipAndUnmarkFromTheDisk() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "3s",
        ])
        try #require(record.status == 0, "\(record.stderr)")

        // The last second (30 frames ending at 2.967 s), to a path relative to where the command runs.
        let save = try document(
            try rewind(in: directory.path, ["save", "--store", store, "--last", "1s", "-o", "./last.y4m", "--json"]))
        #expect(save["files"] as? [String] == [directory.path + "/last.y4m"], "\(save)")
        try expectFilesHoldTheFrames(save)
        #expect(save["frames"] as? Int == 30 && save["repeated_frames"] as? Int == 0, "\(save)")
        #expect(save["source"] as? String == "disk" && save["id"] is NSNull, "\(save)")
        #expect(save["state"] as? String == "done" && save["format"] as? String == "y4m", "\(save)")
        #expect(save["stream"] as? String == "camera", "\(save)")
        #expect(
            save["stream_files"] as? [[String: String]] == [["stream": "camera", "file": directory.path + "/last.y4m"]])
        let info = try document(try Tool.rewind(["info", "--store", store, "--json"]))
        #expect(save["last_pts_ns"] as? Int == info["last_pts_ns"] as? Int, "\(save)")
        #expect((save["bytes"] as? Int ?? 0) > 0, "\(save)")

        let clipPath = directory.appendingPathComponent("second.mkv").path
        let clip = try document(
            try Tool.rewind(["clip", "--store", store, "--from", "1s", "--to", "2s", "-o", clipPath, "--json"]))
        try expectFilesHoldTheFrames(clip)
        #expect(clip["frames"] as? Int == 30, "\(clip)")
        #expect(clip["from_ns"] as? Int == 1_000_000_000 && clip["to_ns"] as? Int == 2_000_000_000, "\(clip)")
        #expect(clip["first_pts_ns"] as? Int == 1_000_000_000, "\(clip)")
        #expect(clip["lost"] as? [Any] != nil && (clip["lost"] as? [Any])?.isEmpty == true, "\(clip)")
        #expect(clip["without_frames"] as? [String] == [], "\(clip)")

        // A range without frames writes nothing and prints nothing on stdout.
        let empty = try Tool.rewind([
            "clip", "--store", store, "--from", "100s", "--to", "200s", "-o", clipPath + ".x.mkv", "--json",
        ])
        #expect(empty.status != 0 && empty.stdout.isEmpty, "\(empty.output) \(empty.stderr)")
        #expect(!FileManager.default.fileExists(atPath: clipPath + ".x.mkv"))
        // So does an unmark of no marker, on the store itself.
        let unknown = try Tool.rewind(["unmark", "--store", store, "--json", "7"])
        #expect(unknown.status == 1 && unknown.stdout.isEmpty, "\(unknown.output) \(unknown.stderr)")
        try expectJSONToStandardOutputRefused(store: store)

        // Several streams: a file each, named with its stream, or one .mkv with a track each.
        let streams = directory.appendingPathComponent("streams").path
        let both = try Tool.rewind([
            "record", "--store", streams, "--input", "a=synthetic:160x120@30", "--input", "b=synthetic:160x120@30",
            "--duration", "2s",
        ])
        try #require(both.status == 0, "\(both.stderr)")
        let perStream = directory.appendingPathComponent("each.y4m").path
        let each = try document(
            try Tool.rewind([
                "clip", "--store", streams, "--stream", "all", "--from", "0s", "--to", "1s", "-o", perStream, "--json",
            ]))
        try expectFilesHoldTheFrames(each)
        #expect(each["stream"] as? String == "all" && each["without_frames"] as? [String] == [], "\(each)")
        #expect(
            each["stream_files"] as? [[String: String]] == [
                ["stream": "a", "file": directory.path + "/each.a.y4m"],
                ["stream": "b", "file": directory.path + "/each.b.y4m"],
            ], "\(each)")
        let tracks = directory.appendingPathComponent("tracks.mkv").path
        let together = try document(
            try Tool.rewind(["save", "--store", streams, "--stream", "all", "--last", "1s", "-o", tracks, "--json"]))
        try expectFilesHoldTheFrames(together)
        #expect(together["tracks"] as? [String] == ["a", "b"], "\(together)")
        #expect(
            together["stream_files"] as? [[String: String]] == [
                ["stream": "a", "file": tracks], ["stream": "b", "file": tracks],
            ], "\(together)")
    }

    @Test func saveClipMarkAndUnmarkThroughALiveRecorder() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try waitUntil("the recorder holds 2 s", timeout: .seconds(120), interval: .milliseconds(50)) {
            (Tool.firstStreamStatus(store: store)?["memory_frames"] as? Int ?? 0) >= 60
        }

        // Without -o: the recorder's file in DIR/exports/, and the save the recorder knows by that id.
        let save = try document(try Tool.rewind(["save", "--store", store, "--last", "1s", "--json"]))
        try expectFilesHoldTheFrames(save)
        #expect(save["source"] as? String == "recorder" && save["state"] as? String == "done", "\(save)")
        #expect(save["format"] as? String == "mkv" && save["stream"] as? String == "camera", "\(save)")
        let files = save["files"] as? [String] ?? []
        #expect(files.count == 1 && files.allSatisfy { $0.hasPrefix(store + "/exports/save-") }, "\(save)")
        let id = try #require(save["id"] as? Int, "\(save)")
        let asked = try Tool.run(
            try Tool.path(of: "curl"), ["-sf", "--unix-socket", store + "/rewind.sock", "http://rewind/v1/saves/\(id)"])
        let known = try #require(
            try JSONSerialization.jsonObject(with: asked.stdout) as? [String: Any], "\(asked.output)")
        #expect(known["files"] as? [String] == files && known["frames"] as? Int == save["frames"] as? Int, "\(known)")

        // A relative -o, made absolute; a clip through the recorder too.
        let relative = try document(
            try rewind(in: directory.path, ["save", "--store", store, "--last", "500ms", "-o", "half.y4m", "--json"]))
        #expect(relative["files"] as? [String] == [directory.path + "/half.y4m"], "\(relative)")
        try expectFilesHoldTheFrames(relative)
        #expect(relative["source"] as? String == "recorder" && relative["id"] as? Int != id, "\(relative)")
        let clipPath = directory.appendingPathComponent("first.mkv").path
        let clip = try document(
            try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", clipPath, "--json"]))
        try expectFilesHoldTheFrames(clip)
        #expect(clip["frames"] as? Int == 30 && clip["source"] as? String == "recorder", "\(clip)")
        #expect(clip["from_ns"] as? Int == 0 && clip["to_ns"] as? Int == 1_000_000_000, "\(clip)")
        #expect(clip["stream_files"] as? [[String: String]] == [["stream": "camera", "file": clipPath]], "\(clip)")
        try expectJSONToStandardOutputRefused(store: store)

        // A marker's id is the one the store lists; unmarking it removes it, and says which it removed.
        let marked = try document(
            try Tool.rewind(["mark", "--store", store, "--label", "door", "--at", "500ms", "--hold", "100ms", "--json"])
        )
        let marker = try #require((marked["markers"] as? [[String: Any]])?.first, "\(marked)")
        let markerID = try #require(marker["id"] as? Int, "\(marked)")
        #expect(marker["label"] as? String == "door" && marker["at_ns"] as? Int == 500_000_000, "\(marker)")
        #expect(marker["hold_from_ns"] as? Int == 400_000_000 && marker["stream"] as? String == "camera")
        #expect(try markerIDs(store) == [markerID])
        let kept = try document(try Tool.rewind(["mark", "--store", store, "--label", "kept", "--json"]))
        let keptID = try #require((kept["markers"] as? [[String: Any]])?.first?["id"] as? Int, "\(kept)")
        let removed = try document(try Tool.rewind(["unmark", "--store", store, "--json", "\(markerID)"]))
        #expect(removed["id"] as? Int == markerID && removed["label"] as? String == "door", "\(removed)")
        #expect(try markerIDs(store) == [keptID])
        // Refused or failing: nothing on stdout.
        for arguments in [
            ["mark", "--store", store, "--label", " ", "--json"],
            ["unmark", "--store", store, "--json", "\(markerID)"],
        ] {
            let failed = try Tool.rewind(arguments)
            #expect(failed.status != 0 && failed.stdout.isEmpty, "\(arguments): \(failed.output) \(failed.stderr)")
        }

        // Stopped: the store's marker is removed from the disk, and a save without a recorder fails with nothing on
        // stdout.
        recorder.process.interrupt()
        let stopped = try recorder.finish(timeout: .seconds(60))
        #expect(stopped.status == 0, "\(stopped.stderr)")
        let gone = try document(try Tool.rewind(["unmark", "--store", store, "--json", "\(keptID)"]))
        #expect(gone["id"] as? Int == keptID && gone["label"] as? String == "kept", "\(gone)")
        #expect(try markerIDs(store).isEmpty)
        let unsaved = try Tool.rewind(["save", "--store", store, "--last", "1s", "--json"])
        #expect(unsaved.status == 69 && unsaved.stdout.isEmpty, "\(unsaved.output) \(unsaved.stderr)")
    }
}
