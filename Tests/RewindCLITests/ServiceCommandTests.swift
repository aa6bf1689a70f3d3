import Foundation
import Glibc
import RewindSystem
import RewindTesting
import Testing

/// The command line on top of the HTTP API: save with pre- and post-roll, status, mark, markers, unmark, events,
/// and what a client says when the recorder goes away mid-save.
@Suite(.timeLimit(.minutes(45))) struct ServiceCommandTests {
    func probe(_ path: String, _ entries: String) throws -> String {
        let result = try Tool.run(
            try Tool.path(of: "ffprobe"),
            ["-v", "error", "-count_frames", "-show_entries", entries, "-of", "csv=p=0", path])
        return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func json(_ result: ToolResult) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any], "\(result.output)")
    }

    /// `status` says each stream's rate: exact in `--json` (the keys and values `info --json` and `/v1/streams`
    /// give), and in the text as `info` says it.
    @Test func statusSaysEachStreamsRate() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:320x240@30000/1001", "--input",
            "b=synthetic:160x120@1/2", "--realtime",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        let status = try Tool.rewind(["status", "--store", store, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let streams = try json(status)["streams"] as? [[String: Any]] ?? []
        let rates = streams.map {
            [$0["frame_duration_value"] as? Int ?? -1, $0["frame_duration_timescale"] as? Int ?? -1]
        }
        #expect(rates == [[1001, 30000], [2, 1]], "\(status.output)")
        let text = try Tool.rewind(["status", "--store", store])
        #expect(
            text.output.contains("stream a: nv12 320x240 at 29.970 fps; ")
                && text.output.contains("stream b: nv12 160x120 one frame every 2.000s; "), "\(text.output)")
        recorder.process.interrupt()
        _ = try recorder.finish()
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        let stored = (try json(info)["streams"] as? [[String: Any]] ?? []).map {
            [$0["frame_duration_value"] as? Int ?? -1, $0["frame_duration_timescale"] as? Int ?? -1]
        }
        #expect(stored == rates, "\(info.output)")
    }

    @Test func saveStatusMarkAndEventsFromTheCommandLine() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--window", "3s",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        try waitUntil("the recorder holds 2 s", interval: .milliseconds(50)) {
            let status = try Tool.rewind(["status", "--store", store, "--json"])
            guard status.status == 0 else { return false }
            let streams = try json(status)["streams"] as? [[String: Any]]
            return (streams?.first?["memory_frames"] as? Int ?? 0) >= 60
        }
        // A recorder whose socket took no connection (here: its socket file moved away) is not said to be absent.
        try FileManager.default.moveItem(atPath: store + "/rewind.sock", toPath: directory.path + "/moved.sock")
        let unanswered = try Tool.rewind(["status", "--store", store])
        #expect(unanswered.status == 69, "\(unanswered.stderr)")
        #expect(
            unanswered.stderr.contains("a recorder is recording into \(store), but no answer came on"),
            "\(unanswered.stderr)")
        // Nor does a save (the last second of the recorder, whose newest frames only it holds) come from the disk,
        // short of them, as if none ran; a clip the disk holds whole does, said so, and one reaching past it does not.
        let unsaved = directory.appendingPathComponent("unsaved.mkv").path
        let refused = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", unsaved])
        #expect(refused.status == 69, "\(refused.output) \(refused.stderr)")
        #expect(refused.stderr.contains("but no answer came on") && refused.stderr.contains("nothing was saved"))
        #expect(!FileManager.default.fileExists(atPath: unsaved))
        let old = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "500ms", "-o", unsaved])
        #expect(old.status == 0, "\(old.stderr)")
        #expect(old.stderr.contains("did not answer: exported from the store on disk"), "\(old.stderr)")
        let newest = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1000s", "-o", unsaved])
        #expect(newest.status == 69 && newest.stderr.contains("nothing was exported"), "\(newest.stderr)")
        try FileManager.default.moveItem(atPath: directory.path + "/moved.sock", toPath: store + "/rewind.sock")
        // With SIGPIPE ignored, a reader gone before the text is written ends `status` with 141, as its JSON would.
        for format in ["", " --json"] {
            let gone = try Tool.run(
                "/bin/bash",
                [
                    "-c", "{ trap '' PIPE; sleep 0.5; \"$0\" status --store \"$1\"\(format); echo $? >&2; } | true",
                    Tool.rewindPath, store,
                ])
            #expect(gone.stderr.hasSuffix("stdout: the reader closed the pipe\n141\n"), "\(format): \(gone.stderr)")
        }
        let events = try Tool.startRewind(["events", "--store", store])
        defer { if events.process.isRunning { events.process.terminate() } }

        // 1 s before and 1 s after: 60 frames at 30 fps (30 up to the trigger, 30 after it), written once the
        // post-roll is recorded.
        let clip = directory.appendingPathComponent("around.mkv").path
        let save = try Tool.rewind(["save", "--store", store, "--before", "1s", "--after", "1s", "-o", clip])
        #expect(save.status == 0, "\(save.stderr)")
        #expect(save.output.contains("saved by the live recorder"), "\(save.output)")
        #expect(try probe(clip, "stream=nb_read_frames") == "60")
        // --after alone keeps --last's 5 s pre-roll (from disk beyond the 3 s window), not the whole window: 180
        // frames, 150 up to the trigger and 30 after it.
        try waitUntil("the store holds 6 s", timeout: .seconds(60), interval: .milliseconds(100)) {
            (try? json(try Tool.rewind(["info", "--store", store, "--json"]))["frames"] as? Int ?? 0) ?? 0 >= 180
        }
        let afterOnly = directory.appendingPathComponent("after.mkv").path
        let post = try Tool.rewind(["save", "--store", store, "--after", "1s", "-o", afterOnly])
        #expect(post.status == 0, "\(post.stderr)")
        #expect(try probe(afterOnly, "stream=nb_read_frames") == "180")

        let status = try Tool.rewind(["status", "--store", store])
        #expect(status.status == 0 && status.output.contains("stream camera: nv12 320x240"), "\(status.output)")
        // The process against its limit (the budget in force + 48 MiB), the heap and the index's part of it; the
        // disk the segment files take, with no --disk budget given.
        #expect(status.output.contains("  process: resident "), "\(status.output)")
        #expect(status.output.contains(" within its limit of ") && status.output.contains(" + 48.0 MiB)"))
        if ResidentMemory.heapInUse() != nil {
            #expect(
                status.output.contains("; heap ") && status.output.contains(", of it the index "), "\(status.output)")
        }
        #expect(status.output.contains("  disk: ") && status.output.contains(" (no --disk budget)"), "\(status.output)")
        let memory = try json(try Tool.rewind(["status", "--store", store, "--json"]))
        let streamBudgets = (memory["streams"] as? [[String: Any]] ?? []).map { $0["memory_budget_bytes"] as? Int ?? 0 }
        #expect(memory["memory_budget_bytes"] as? Int == streamBudgets.reduce(0, +), "\(memory)")
        #expect((memory["resident_bytes"] as? Int ?? 0) > 0, "\(memory)")
        // The heap is glibc's malloc's figure: absent only in a build whose malloc is a sanitizer's, as this one's.
        let heap = memory["heap_bytes"] as? Int
        #expect(heap.map { $0 > 0 } ?? (ResidentMemory.heapInUse() == nil), "\(memory)")

        let mark = try Tool.rewind(["mark", "--store", store, "--label", "door", "--at", "1s", "--hold", "500ms"])
        #expect(mark.status == 0, "\(mark.stderr)")
        #expect(mark.output.contains("marker 1 at 1.000s (camera): door; holds 0.500s … 1.500s"), "\(mark.output)")
        // Its last instant, not its exclusive end: a hold ending a nanosecond before a frame does not read as one
        // reaching it.
        let short = try Tool.rewind([
            "mark", "--store", store, "--label", "short", "--at", "1s", "--hold-before", "0s", "--hold-after",
            "499999999ns",
        ])
        #expect(short.output.contains("holds 1.000s … 1.499s"), "\(short.output)")
        _ = try Tool.rewind(["unmark", "--store", store, "--id", "2"])
        let markers = try json(try Tool.rewind(["markers", "--store", store, "--json"]))["markers"] as? [[String: Any]]
        #expect(markers?.first?["label"] as? String == "door")
        let info = try json(try Tool.rewind(["info", "--store", store, "--json"]))
        #expect((info["markers"] as? [[String: Any]])?.first?["at_ns"] as? Int == 1_000_000_000)
        #expect((info["live"] as? [String: Any])?["stream"] as? String == "camera")
        #expect(info["recorder"] as? String == "answering", "\(info)")
        #expect(try Tool.rewind(["info", "--store", store]).output.contains("door"))

        // Bad input to the recorder is a usage error naming it; an unknown marker is not found.
        let bad = try Tool.rewind(["mark", "--store", store, "--label", " "])
        #expect(
            bad.status == 64 && bad.stderr.contains("--label must hold more than white space (it is trimmed)"),
            "\(bad.stderr)")
        // Longer than a label may be, and than a request body: told what a label may be, not what a body may be.
        for length in [257, 100_000] {
            let long = try Tool.rewind(["mark", "--store", store, "--label", String(repeating: "x", count: length)])
            #expect(long.status == 64 && long.stderr.contains("--label must be 1 to 256 characters"), "\(long.stderr)")
            // A bad value gets its usage line, not the whole option table.
            #expect(long.stderr.contains("usage: rewind mark") && !long.stderr.contains("options:"), "\(long.stderr)")
        }
        // A marker before recorder time 0 marks nothing (`-5s` is no "5 s ago"): refused, named by its flag, not made.
        let before = try Tool.rewind(["mark", "--store", store, "--label", "early", "--at", "-5s"])
        #expect(
            before.status == 64 && before.stderr.contains("--at: -5.000s lies before recorder time 0"),
            "\(before.stderr)")
        #expect(!(try Tool.rewind(["markers", "--store", store]).output.contains("early")))
        // The store's start as times are shown, to the millisecond (it lies up to a millisecond later), is its start.
        let stream = try #require((info["streams"] as? [[String: Any]])?.first)
        let firstWall = try #require(stream["first_wall_ns"] as? Int64)
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let shown = formatter.string(from: Date(timeIntervalSince1970: Double(firstWall / 1_000_000) / 1000))
        let atStart = try Tool.rewind(["mark", "--store", store, "--label", "start", "--at", shown])
        #expect(atStart.status == 0 && atStart.output.contains("at 0.000s"), "\(shown): \(atStart.stderr)")
        let unknown = try Tool.rewind(["mark", "--store", store, "--label", "x", "--stream", "nope"])
        #expect(unknown.status == 64 && unknown.stderr.contains("nope"), "\(unknown.stderr)")
        let missing = try Tool.rewind(["unmark", "--store", store, "--id", "99"])
        #expect(missing.status == 1 && missing.stderr.contains("no marker 99"), "\(missing.stderr)")
        // Its line not written (a full disk): a mark fails and is taken back, so a retry does not mark twice; an
        // unmark fails saying the marker is gone all the same.
        let unwritten = try Tool.run(
            "/bin/sh", ["-c", "\"$0\" mark --store \"$1\" --label unwritten > /dev/full", Tool.rewindPath, store])
        #expect(unwritten.status == 1 && unwritten.stderr.contains("the marker was taken back"), "\(unwritten.stderr)")
        #expect(!(try Tool.rewind(["markers", "--store", store]).output.contains("unwritten")))
        let deleted = try Tool.run(
            "/bin/sh", ["-c", "\"$0\" unmark --store \"$1\" 1 > /dev/full", Tool.rewindPath, store])
        #expect(
            deleted.status == 1 && deleted.stderr.contains("marker 1 was deleted all the same"), "\(deleted.stderr)")
        #expect(!(try Tool.rewind(["markers", "--store", store]).output.contains("door")))
        // What the recorder refuses beyond 100 years is named by the flag given; how far back a save or a clip
        // reaches is not bounded, as from the disk: a time past every frame stands for the farthest one.
        for (arguments, flag) in [
            (["mark", "--label", "x", "--hold-before", "36600d"], "--hold-before: '36600d' is longer than 100 years"),
            (["mark", "--label", "x", "--hold", "36600d"], "--hold: '36600d' is longer than 100 years"),
            (["mark", "--label", "x", "--at", "36600d"], "--at: '36600d' is more than 100 years"),
            (["save", "--after", "36600d", "-o", clip], "--after: '36600d' is longer than 100 years"),
        ] {
            let refused = try Tool.rewind(arguments + ["--store", store])
            #expect(refused.status == 64 && refused.stderr.contains(flag), "\(arguments): \(refused.stderr)")
        }
        let everything = directory.appendingPathComponent("everything.y4m").path
        for arguments in [["clip", "--from", "-36600d", "--to", "36600d"], ["save", "--last", "36600d"]] {
            let far = try Tool.rewind(arguments + ["--store", store, "-o", everything])
            #expect(far.status == 0 && far.output.contains("by the live recorder"), "\(arguments): \(far.stderr)")
        }

        // The events client saw the save through its states and the marker, one JSON object a line.
        try waitUntil("the events client has printed the save and the marker") {
            events.output.contains("\"state\":\"done\"") && events.output.contains("\"event\":\"marker\"")
        }
        // A follower stopped by Ctrl-C ends with 130; one whose recorder stopped, with 0.
        let follower = try Tool.startRewind(["events", "--store", store])
        try waitUntil("the second events client hears a marker") {
            _ = try Tool.rewind(["mark", "--store", store, "--label", "probe"])
            return follower.output.contains("\"event\":\"marker\"")
        }
        follower.process.interrupt()
        let interrupted = try follower.finish(timeout: .seconds(60))
        #expect(interrupted.status == 130, "\(interrupted.stderr)")
        // Back with the id of the last event it had, it gets first what came meanwhile; with an id the recorder
        // never gave, `resync` says to read the state again.
        let lastLine = try #require(interrupted.output.split(separator: "\n").last { $0.contains("\"id\":") })
        let lastID = try #require(
            (try JSONSerialization.jsonObject(with: Data(lastLine.utf8)) as? [String: Any])?["id"] as? String)
        #expect(try Tool.rewind(["mark", "--store", store, "--label", "while away"]).status == 0)
        let back = try Tool.startRewind(["events", "--store", store, "--since", lastID])
        let stranger = try Tool.startRewind(["events", "--store", store, "--since", "0-1"])
        try waitUntil("the client that came back hears the marker it missed, the other to resync") {
            back.output.contains("\"label\":\"while away\"") && stranger.output.contains("\"event\":\"resync\"")
        }
        #expect(!back.output.contains("\"label\":\"probe\""), "had before: \(back.output)")
        #expect(stranger.output.hasPrefix("{\"event\":\"resync\",\"data\":{"), "\(stranger.output)")
        for client in [back, stranger] { client.process.interrupt() }
        #expect(try back.finish(timeout: .seconds(60)).status == 130)
        #expect(try stranger.finish(timeout: .seconds(60)).status == 130)
        process.interrupt()
        let finished = try recorder.finish()
        #expect(finished.status == 0, "\(finished.stderr)")
        let ended = try events.finish()
        #expect(ended.status == 0, "\(ended.stderr)")
        let lines = ended.output.split(separator: "\n")
        #expect(lines.allSatisfy { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) != nil })
        #expect(lines.contains { $0.contains("\"event\":\"stopping\"") })
        // The open segment sealed at the stop is an event too, before `stopping`.
        let last = try runChecked(
            "sqlite3",
            ["-readonly", "\(store)/index.sqlite", "SELECT file_name FROM segments ORDER BY id DESC LIMIT 1"]
        ).output.trimmingCharacters(in: .whitespacesAndNewlines)
        let sealedAt = lines.firstIndex { $0.contains("\"event\":\"segment\"") && $0.contains("\"file\":\"\(last)\"") }
        let stoppingAt = lines.firstIndex { $0.contains("\"event\":\"stopping\"") }
        #expect(sealedAt != nil && sealedAt! < stoppingAt!, "no event for \(last) before stopping: \(ended.output)")
        // Without a recorder: status says so (69); save --after needs one.
        let gone = try Tool.rewind(["status", "--store", store])
        #expect(gone.status == 69 && gone.stderr.contains("no recorder is running on"), "\(gone.stderr)")
        let offline = try Tool.rewind(["save", "--store", store, "--before", "1s", "--after", "1s", "-o", clip])
        #expect(offline.status == 69 && offline.stderr.contains("need a live recorder"), "\(offline.stderr)")
        // `--after 0s` is no post-roll: `--before 1s --after 0s` is `--last 1s`, saved from the disk.
        let none = try Tool.rewind(["save", "--store", store, "--before", "1s", "--after", "0s", "-o", clip])
        #expect(none.status == 0, "\(none.stderr)")
        #expect(none.output.contains("wrote "), "\(none.output)")
    }

    /// A recorder with 64 saves pending takes no more: `save` says what to do (exit 69), and a `clip` of a range
    /// the disk holds whole is read from the disk instead.
    @Test func aRecorderFullOfPendingSavesIsToldAndClipsReadTheDisk() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x90@30", "--realtime", "--segment", "500ms",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try waitUntil("the recorder has 2 s on disk", interval: .milliseconds(50)) {
            (Tool.firstStreamStatus(store: store)?["frames_durable"] as? Int ?? 0) >= 60
        }
        let socket = "\(store)/rewind.sock"
        func request(_ method: String, _ route: String, _ body: String? = nil) throws -> ToolResult {
            try Tool.run(
                try Tool.path(of: "curl"),
                ["-s", "--max-time", "10", "--unix-socket", socket, "-X", method, "http://rewind\(route)"]
                    + (body.map { ["-d", $0] } ?? []))
        }
        var waiting: [Int] = []
        for _ in 0..<64 {
            let answer = try request("POST", "/v1/saves", #"{"before":"1s","after":"1h"}"#)
            let object = try JSONSerialization.jsonObject(with: answer.stdout) as? [String: Any]
            if let id = object?["id"] as? Int { waiting.append(id) }
        }
        defer { for id in waiting { _ = try? request("DELETE", "/v1/saves/\(id)") } }
        #expect(waiting.count == 64)
        let save = try Tool.rewind([
            "save", "--store", store, "--last", "1s", "-o", directory.appendingPathComponent("s.mkv").path,
        ])
        #expect(save.status == 69, "\(save.stderr)")
        #expect(
            save.stderr.contains("64 saves are waiting or exporting")
                && save.stderr.contains("cancel a waiting one (DELETE /v1/saves/ID)"), "\(save.stderr)")
        let clipPath = directory.appendingPathComponent("c.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", clipPath])
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(clip.stderr.contains("exported from the store on disk"), "\(clip.stderr)")
        #expect(try probe(clipPath, "stream=nb_read_frames") == "30")
    }

    /// Markers' holds that keep as much as `--disk` leave no room for a new recording: it says so when it starts,
    /// and when retention kept none of its frames, the advice names the holds, not the segment length.
    @Test func holdsThatFillTheDiskBudgetAreNamed() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--segment", "500ms",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try waitUntil("the recorder holds 2 s", interval: .milliseconds(50)) {
            (Tool.firstStreamStatus(store: store)?["frames_durable"] as? Int ?? 0) >= 60
        }
        let mark = try Tool.rewind(["mark", "--store", store, "--label", "keep", "--hold-before", "2s"])
        #expect(mark.status == 0, "\(mark.stderr)")
        recorder.process.interrupt()
        #expect(try recorder.finish().status == 0)
        let again = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "2s", "--segment", "500ms",
            "--disk", "300KiB",
        ])
        #expect(again.stderr.contains("warning: markers' holds keep"), "\(again.stderr)")
        #expect(again.status == 1, "\(again.output)\n\(again.stderr)")
        #expect(again.stderr.contains("retention deleted all"), "\(again.stderr)")
        #expect(again.stderr.contains("delete a marker"), "\(again.stderr)")
    }

    /// A marker held for years into the future, made while no `--disk` bounded the store, keeps every segment
    /// recorded while it lasts: a recording started with `--disk` says so at once, naming the marker.
    @Test func aHoldReachingFarPastTheRecordingIsNamedWhenADiskBudgetIsGiven() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try waitUntil("the recorder holds 1 s", interval: .milliseconds(50)) {
            (Tool.firstStreamStatus(store: store)?["frames_durable"] as? Int ?? 0) >= 30
        }
        let mark = try Tool.rewind(["mark", "--store", store, "--label", "forever", "--hold-after", "36500d"])
        #expect(mark.status == 0, "\(mark.stderr)")
        recorder.process.interrupt()
        #expect(try recorder.finish().status == 0)
        let again = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "1s", "--disk", "64MiB",
        ])
        #expect(
            again.stderr.contains("warning: marker 1 ('forever') holds what 'camera' records for the next"),
            "\(again.stderr)")
        #expect(again.stderr.contains("'rewind unmark --store DIR --id 1'"), "\(again.stderr)")
        let modest = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "1s",
        ])
        #expect(!modest.stderr.contains("holds what"), "no --disk, no warning: \(modest.stderr)")
    }

    /// A recorder killed while a save waits for its post-roll: the client says the recorder stopped before the
    /// save finished.
    @Test func aRecorderKilledMidSaveIsReportedAsSuch() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        try waitUntil("the recorder serves its socket", interval: .milliseconds(50)) {
            try Tool.rewind(["status", "--store", store]).status == 0
        }
        let clip = directory.appendingPathComponent("never.mkv").path
        let save = try Tool.startRewind(["save", "--store", store, "--before", "1s", "--after", "1h", "-o", clip])
        try waitUntil("the save waits for its post-roll", interval: .milliseconds(50)) {
            let status = try json(try Tool.rewind(["status", "--store", store, "--json"]))
            return status["saves_waiting"] as? Int == 1
        }
        // The recorder counts the save before its answer reaches the client, which then asks for the save by its
        // id every 50 ms: killed before that answer arrives, the client could not name the save.
        Thread.sleep(forTimeInterval: 1)
        kill(process.processIdentifier, SIGKILL)
        _ = try recorder.finish()
        let result = try save.finish()
        #expect(result.status == 69, "\(result.stderr)")
        #expect(result.stderr.contains("the recorder stopped before it finished save 1"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: clip))
    }

    /// A save the recorder took, whose client is refused a connection while it waits (the recorder's clients at
    /// their limit) asks again and finishes with the file (it exited 69 saying "try again shortly", and the file
    /// was written all the same: trying again made it twice).
    @Test func aSaveWhoseClientIsRefusedAConnectionWhileItWaitsFinishes() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--duration", "120s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitUntilAnswering(store)
        let output = directory.appendingPathComponent("taken.mkv").path
        let save = try Tool.startRewind(["save", "--store", store, "--before", "1s", "--after", "4s", "-o", output])
        defer { if save.process.isRunning { save.process.terminate() } }
        try waitUntil("the save waits for its post-roll", interval: .milliseconds(50)) {
            let status = try json(try Tool.rewind(["status", "--store", store, "--json"]))
            return status["saves_waiting"] as? Int == 1
        }
        // Seventy connections, each with a request begun and never finished, held for 6 s: every connection the
        // recorder serves at once, and more.
        let hold =
            "import socket, sys, time\n"
            + "held = []\n"
            + "for _ in range(70):\n"
            + "    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            + "    s.send(b'GET /v1/status HTTP/1.1\\r\\nHost: x\\r\\n'); held.append(s)\n"
            + "print('held', flush=True); time.sleep(6)\n"
        let holder = try ExternalTools.Child("/usr/bin/python3", ["-c", hold, store + "/rewind.sock"])
        defer { if holder.process.isRunning { kill(holder.process.processIdentifier, SIGKILL) } }
        try waitUntil("the connections are held") { holder.output.contains("held") }
        // Refused meanwhile, as the waiting client is.
        let refused = try Tool.rewind(["status", "--store", store])
        #expect(refused.status == 69 && refused.stderr.contains("too many connections"), "\(refused.stderr)")
        _ = try holder.finish(timeout: .seconds(60))
        let saved = try save.finish(timeout: .seconds(120))
        #expect(saved.status == 0, "\(saved.stderr)")
        #expect(saved.output.contains("wrote"), "\(saved.output)")
        #expect(FileManager.default.fileExists(atPath: output))
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// A connection closed without an answer: by a recorder being killed (its socket takes a connection for a
    /// moment, and none after), the client says the recorder stopped before it finished (it said "yet it still
    /// runs"); by one that goes on taking connections (short of threads, it closes each unanswered), that it closed
    /// the connection while it runs. Each exits 69.
    @Test func aConnectionClosedWithoutAnAnswerIsToldFromAKilledRecorder() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let socket = directory.appendingPathComponent("rewind.sock").path
        // `dying`: answers the streams' list as a recorder does, then closes the next connection unanswered and
        // its listening socket with it. `silent`: closes every connection once its head is read.
        let streams =
            #"{"streams":[{"chroma_siting":"unspecified","color_matrix":"bt709","color_range":"video","format":"nv12","#
            + #""frame_duration_ns":33333333,"height":2,"name":"camera","pixel_aspect":"1:1","recording":true,"#
            + #""width":64}]}"#
        let server =
            "import socket, sys, time\n"
            + "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(16); print('ready', flush=True)\n"
            + "body = sys.argv[3].encode()\n"
            + "while True:\n"
            + "    c, _ = s.accept(); c.settimeout(5); data = b''\n"
            + "    while b'\\r\\n\\r\\n' not in data:\n"
            + "        chunk = c.recv(4096)\n"
            + "        if not chunk: break\n"
            + "        data += chunk\n"
            + "    if sys.argv[2] == 'dying' and data.startswith(b'GET /v1/streams'):\n"
            + "        c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n'\n"
            + "            b'Connection: close\\r\\n\\r\\n' % len(body) + body); c.close(); continue\n"
            + "    c.close()\n"
            + "    if sys.argv[2] == 'dying': s.close(); time.sleep(60)\n"
        for (mode, expected) in [
            ("dying", "the recorder stopped before it finished the marker"),
            ("silent", "the recorder closed the connection without answering the marker, yet it still runs"),
        ] {
            try? FileManager.default.removeItem(atPath: socket)
            let fake = try ExternalTools.Child("/usr/bin/python3", ["-c", server, socket, mode, streams])
            defer { if fake.process.isRunning { kill(fake.process.processIdentifier, SIGKILL) } }
            try waitUntil("the server listens") { fake.output.contains("ready") }
            let mark = try Tool.rewind(["mark", "--store", directory.path, "--label", "x"], timeout: .seconds(60))
            #expect(mark.status == 69, "\(mode): \(mark.stderr)")
            #expect(mark.stderr.contains(expected), "\(mode): \(mark.stderr)")
            kill(fake.process.processIdentifier, SIGKILL)
            _ = try fake.finish(timeout: .seconds(30))
        }
    }

    /// A recorder that is stopped (Ctrl-Z) answers nothing: a client gives up after 30 s saying so (69), and `info`
    /// shows what the disk holds, saying why; nothing hangs. `save` and `clip`, which asked a stopped recorder with
    /// no time limit (their first questions' failures were taken for no recorder, the export waited for without one),
    /// give up the same way, and so does a save that waits for its post-roll once the recorder has been stopped 30 s.
    @Test func aStoppedRecorderMakesClientsGiveUpInsteadOfHanging() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--duration", "5m",
        ])
        let process = recorder.process
        defer {
            kill(process.processIdentifier, SIGCONT)
            if process.isRunning { process.terminate() }
        }
        try Tool.waitUntilAnswering(store)
        let waitingOutput = directory.appendingPathComponent("waiting.mkv").path
        let waiting = try Tool.startRewind([
            "save", "--store", store, "--before", "1s", "--after", "10m", "-o", waitingOutput,
        ])
        try waitUntil("the save waits, and 1.5 s are on disk", interval: .milliseconds(50)) {
            let status = try json(try Tool.rewind(["status", "--store", store, "--json"]))
            let durable = ((status["streams"] as? [[String: Any]])?.first?["frames_durable"] as? Int) ?? 0
            return status["saves_waiting"] as? Int == 1 && durable >= 45
        }
        kill(process.processIdentifier, SIGSTOP)
        let save = try Tool.startRewind([
            "save", "--store", store, "--last", "1s", "-o", directory.appendingPathComponent("last.mkv").path,
        ])
        let clip = try Tool.startRewind([
            "clip", "--store", store, "--from", "0s", "--to", "10m", "-o",
            directory.appendingPathComponent("clip.mkv").path,
        ])
        // A range the disk holds whole needs nothing of the recorder: read from the disk, said so.
        let onDisk = directory.appendingPathComponent("on-disk.mkv").path
        let stored = try Tool.startRewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", onDisk])
        let status = try Tool.rewind(["status", "--store", store], timeout: .seconds(90))
        #expect(status.status == 69, "\(status.stderr)")
        #expect(
            status.stderr.contains("the recorder sent nothing for 30 s while the request for its status waited"),
            "\(status.stderr)")
        for (name, client) in [("save", save), ("clip", clip), ("the waiting save", waiting)] {
            let result = try client.finish(timeout: .seconds(90))
            #expect(result.status == 69, "\(name): \(result.stderr)")
            #expect(result.stderr.contains("the recorder sent nothing for 30 s"), "\(name): \(result.stderr)")
            // What becomes of its request once the recorder resumes, said: the waiting save is written (it can be
            // cancelled before), the others may or may not have reached it.
            let fates =
                name == "the waiting save"
                ? ["resumed, it still writes save 1: to cancel it, before resuming it, run 'curl --unix-socket "]
                : ["resumed, it may still make the ", "nothing was asked of it yet: run the command again"]
            #expect(fates.contains { result.stderr.contains($0) }, "\(name): \(result.stderr)")
        }
        let fromDisk = try stored.finish(timeout: .seconds(90))
        #expect(fromDisk.status == 0, "\(fromDisk.stderr)")
        #expect(
            fromDisk.stderr.contains("sent nothing for 30 s")
                && fromDisk.stderr.contains("exported from the store on disk, which holds the whole range"),
            "\(fromDisk.stderr)")
        #expect(fromDisk.output.contains("wrote 30 frames"), "\(fromDisk.output)")
        let info = try Tool.rewind(["info", "--store", store], timeout: .seconds(90))
        #expect(info.status == 0, "\(info.stderr)")
        #expect(info.stderr.contains("showing what the store on disk holds") && info.output.contains("stream camera"))
        kill(process.processIdentifier, SIGCONT)
        process.interrupt()
        #expect(try recorder.finish(timeout: .seconds(60)).status == 0)
    }

    /// `record --listen`: the API on TCP with the token from DIR/token (made with mode 0600); 401 without it, and an
    /// address that is not loopback is a usage error unless `--listen-any`.
    @Test func recordListensOnTCPWithAToken() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let refused = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "1s",
            "--listen", "0.0.0.0:0",
        ])
        #expect(refused.status == 64 && refused.stderr.contains("--listen-any"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store), "refused before the store or its token was made")
        for (address, words) in [
            ("127.0.0.1:99999", "port in 0…65535"),
            ("localhost:80", "not a numeric IP address (for this machine, 127.0.0.1 or [::1])"),
        ] {
            let bad = try Tool.rewind([
                "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "1s", "--listen", address,
            ])
            #expect(bad.status == 64 && bad.stderr.contains(words), "\(address): \(bad.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: store))
        // A port something else listens on is no usage error: the system refused it (69), and the advice says so.
        let taken = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(taken) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(taken, pointer, length) == 0 && listen(taken, 1) == 0
                    && getsockname(taken, pointer, &length) == 0
            }
        }
        try #require(bound)
        let takenPort = UInt16(bigEndian: address.sin_port)
        let inUse = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "1s", "--listen",
            "127.0.0.1:\(takenPort)",
        ])
        #expect(inUse.status == 69, "\(inUse.stderr)")
        #expect(inUse.stderr.contains("Address already in use") && inUse.stderr.contains("choose another port"))
        #expect(!FileManager.default.fileExists(atPath: store), "refused before the store is made")
        // A token file that cannot be used is refused before the store's directory is made too.
        let loose = directory.appendingPathComponent("loose-token").path
        try Data("0123456789abcdef0123456789abcdef\n".utf8).write(to: URL(fileURLWithPath: loose))
        chmod(loose, 0o644)
        let readable = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "1s", "--listen",
            "127.0.0.1:0", "--token-file", loose,
        ])
        #expect(readable.status == 64, "\(readable.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store), "refused before the store is made")
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--listen", "127.0.0.1:0",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        let port = try Tool.listeningPort(of: recorder)
        let token = try String(contentsOfFile: store + "/token", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        var mode = stat()
        #expect(stat(store + "/token", &mode) == 0 && mode.st_mode & 0o777 == 0o600)
        let url = "http://127.0.0.1:\(port)/v1/health"
        func code(_ extra: [String]) throws -> String {
            try Tool.run(try Tool.path(of: "curl"), ["-s", "-o", "/dev/null", "-w", "%{http_code}"] + extra + [url])
                .output
        }
        #expect(try code([]) == "401")
        #expect(try code(["-H", "Authorization: Bearer \(token)"]) == "200")
        process.interrupt()
        #expect(try recorder.finish().status == 0)
    }

    /// A token file refused for its token says what the token lacks, without advice about its mode; one others may
    /// read says to chmod it.
    @Test func aRefusedTokenFileIsAdvisedForWhatIsWrongWithIt() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("token").path
        try Data("short".utf8).write(to: URL(fileURLWithPath: file))
        for (mode, says, never) in [(0o600, "fewer than 16", "chmod"), (0o644, "chmod 600", "fewer than 16")] {
            chmod(file, mode_t(mode))
            let result = try Tool.rewind([
                "record", "--store", directory.appendingPathComponent("s").path, "--duration", "100ms", "--listen",
                "127.0.0.1:0", "--token-file", file,
            ])
            #expect(result.status == 64, "\(result.stderr)")
            #expect(result.stderr.contains(says) && !result.stderr.contains(never), "\(result.stderr)")
        }
    }

    /// The page a browser gets without the token names the token file by its full path, also when `--store` (or
    /// `--token-file`) was given relative to the recorder's directory (it named `store/token`).
    @Test func thePageWithoutATokenNamesTheTokenFileByItsFullPath() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let recorder = try ExternalTools.Child(
            "/bin/sh",
            [
                "-c",
                "cd \"$1\" && exec \"$2\" record --store cam --input synthetic:160x120@10 --realtime --listen 127.0.0.1:0",
                "sh", directory.path, Tool.rewindPath,
            ])
        let process = recorder.process
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let port = try Tool.listeningPort(of: recorder)
        let page = try Tool.run(
            try Tool.path(of: "curl"), ["-s", "-H", "Accept: text/html", "http://127.0.0.1:\(port)/"]
        ).output
        let full = directory.path + "/cam/token"
        #expect(page.contains("<code>\(full)</code>"), "\(page)")
        process.interrupt()
        #expect(try recorder.finish().status == 0)
    }

    /// A stream that joins a store later has its own pts, away from the recorder clock: a marker on it is shown on
    /// the recorder clock by the live `mark`, the offline `markers` and `info`, and `unmark`, all alike, and `info`
    /// gives the store's time span on that clock.
    @Test func markersOfALaterStreamAreShownOnTheRecorderClockEverywhere() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let first = try Tool.rewind([
            "record", "--store", store, "--input", "front=synthetic:320x240@30", "--duration", "1s",
        ])
        #expect(first.status == 0, "\(first.stderr)")
        Thread.sleep(forTimeInterval: 1.5)
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "front=synthetic:320x240@30", "--input",
            "rear=synthetic:160x120@15", "--realtime", "--duration", "2s",
        ])
        try Tool.waitForSocket(of: store)
        let mark = try Tool.rewind(["mark", "--store", store, "--stream", "rear", "--label", "both", "--hold", "1s"])
        #expect(mark.status == 0, "\(mark.stderr)")
        #expect(try recorder.finish(timeout: .seconds(60)).status == 0)
        // "marked marker 1 at 3.596s (rear): both; holds …": the same words offline.
        let live = try #require(mark.output.split(separator: "\n").first.map { String($0.dropFirst("marked ".count)) })
        #expect(try Tool.rewind(["markers", "--store", store]).output.contains(live), "\(live)")
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.output.contains(live), "\(info.output)")
        #expect(info.output.contains("time span: recorder time 0.000s … "), "\(info.output)")
        let at = try #require(
            try json(try Tool.rewind(["markers", "--store", store, "--json"]))["markers"] as? [[String: Any]])
        #expect((at.first?["at_ns"] as? Int ?? 0) > 1_000_000_000, "on the recorder clock, after the first recording")
        let unmark = try Tool.rewind(["unmark", "--store", store, "1"])
        #expect(unmark.output == "deleted " + live + "\n", "\(unmark.output)")
        // An empty range of the later stream is said in the recorder time it was asked in.
        let output = directory.appendingPathComponent("none.mkv").path
        let empty = try Tool.rewind([
            "clip", "--store", store, "--stream", "rear", "--from", "0s", "--to", "1s", "-o", output,
        ])
        #expect(
            empty.status == 1 && empty.stderr.contains("no frames in [0.000s, 1.000s); the store holds "),
            "\(empty.stderr)")
    }

    /// A recorder killed after markers were made and one deleted, its index's `-wal` then damaged after its header
    /// (every commit since the first recording's end gone): the next open puts the markers back with their holds from `markers.journal`, and the
    /// gap between the recordings from `losses.journal` when the damage took it; every frame comes back from the
    /// segment files, and the deleted marker stays deleted.
    @Test func markersAndGapsOfAKilledRecorderOutliveADamagedWAL() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let first = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x120@10", "--duration", "1s"])
        #expect(first.status == 0, "\(first.stderr)")
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@10", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitForSocket(of: store)
        for (label, hold) in [("kept", ["--hold", "1s"]), ("deleted", []), ("last", ["--hold-before", "1s"])] {
            let mark = try Tool.rewind(["mark", "--store", store, "--label", label] + hold)
            #expect(mark.status == 0, "\(mark.stderr)")
        }
        #expect(try Tool.rewind(["unmark", "--store", store, "2"]).status == 0)
        let before = try Tool.rewind(["markers", "--store", store]).output
        #expect(before.contains(": kept; holds ") && before.contains(": last; holds "), "\(before)")
        let gaps = try #require(
            try json(try Tool.rewind(["info", "--store", store, "--json"]))["gaps"] as? [[String: Any]])
        #expect(gaps.map { $0["reason"] as? String } == ["recorder stopped"], "\(gaps)")
        // Frames go on being indexed for a moment, so the -wal has commits after the markers'.
        Thread.sleep(forTimeInterval: 1.5)
        kill(recorder.process.processIdentifier, SIGKILL)
        _ = try recorder.finish(timeout: .seconds(60))
        let wal = store + "/index.sqlite-wal"
        let size = try #require(try FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int)
        #expect(size > 32 + 2 * 4120, "the commits are in the -wal")
        // From its first frame on: the first recording's close copied its commits into the index file, so this
        // recording's start from there, and whatever the file holds past them is an older pass of it that SQLite
        // ignores (damage from the middle of the file found only that when a busy machine indexed little).
        let handle = try #require(FileHandle(forWritingAtPath: wal))
        try handle.seek(toOffset: 32)
        try handle.write(contentsOf: Data(repeating: 0x5A, count: size - 32))
        try handle.close()

        let again = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x120@10", "--duration", "1s"])
        #expect(again.status == 0, "\(again.stderr)")
        // The index lost both markers and the deletion (or, had SQLite copied the -wal into the index file on its
        // own since, the last marker at least): they come back from the journal, the deleted one deleted.
        #expect(
            again.stderr.contains("restored 1 marker") || again.stderr.contains("restored 2 markers"), "\(again.stderr)"
        )
        #expect(
            again.stderr.contains("from markers.journal (ids 1, 3)")
                || again.stderr.contains("from markers.journal (id 3)"), "\(again.stderr)")
        let after = try Tool.rewind(["markers", "--store", store]).output
        #expect(after == before, "\(after)")
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)
        let recorded = try json(try Tool.rewind(["info", "--store", store, "--json"]))
        #expect((recorded["frames"] as? Int ?? 0) > 20, "the killed recording's frames are kept: \(recorded)")
        // The gap between the first two recordings is back, and the third recording's follows it.
        let gapsAfter = try #require(recorded["gaps"] as? [[String: Any]])
        #expect(
            gapsAfter.count == 2 && gapsAfter.allSatisfy { $0["reason"] as? String == "recorder stopped" },
            "\(gapsAfter)")
        #expect(gapsAfter.first?["start_ns"] as? Int == gaps.first?["start_ns"] as? Int, "\(gapsAfter)")
        #expect(gapsAfter.first?["end_ns"] as? Int == gaps.first?["end_ns"] as? Int, "\(gapsAfter)")
        let unmark = try Tool.rewind(["unmark", "--store", store, "2"])
        #expect(unmark.status == 1 && unmark.stderr.contains("no marker 2"), "\(unmark.stderr)")
    }

    /// `rewind events` following a recorder that is killed says its event stream broke off (exit 69); one that
    /// stops cleanly ends it with `stopping` (exit 0).
    @Test func eventsSayWhetherTheRecorderStoppedOrWasKilled() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        for killed in [true, false] {
            let store = directory.appendingPathComponent(killed ? "killed" : "stopped").path
            let recorder = try Tool.startRewind([
                "record", "--store", store, "--input", "synthetic:160x120@10", "--realtime", "--duration", "60s",
            ])
            defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
            try Tool.waitForSocket(of: store)
            let events = try Tool.startRewind(["events", "--store", store])
            // Connected once a marker made now reaches it.
            try waitUntil("the events client hears a marker") {
                _ = try Tool.rewind(["mark", "--store", store, "--label", "probe"])
                return events.output.contains("\"event\":\"marker\"")
            }
            if killed { kill(recorder.process.processIdentifier, SIGKILL) } else { recorder.process.interrupt() }
            _ = try recorder.finish(timeout: .seconds(60))
            let followed = try events.finish(timeout: .seconds(60))
            if killed {
                #expect(followed.status == 69, "\(followed.stderr)")
                #expect(followed.stderr.contains("event stream broke off"), "\(followed.stderr)")
                #expect(!followed.stderr.contains("no file was written"), "\(followed.stderr)")
            } else {
                #expect(followed.status == 0, "\(followed.stderr)")
                #expect(followed.output.contains("\"event\":\"stopping\""), "\(followed.output)")
            }
        }
    }

    /// `--disk` covers every stream's segments together, so holds of several streams count together: a hold of
    /// what one stream records next fits; the same of a second stream, which would double it past the budget, is
    /// refused (409, exit 1) instead of leaving retention nothing but new segments to delete. Every recorded stream
    /// keeps two segments of its own beside the holds.
    @Test func holdsOfSeveralStreamsCountTogetherAgainstTheDiskBudget() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        // Small frames, so that a machine busy with other work does not push the spill behind (chunks stored raw
        // would fill the budget with a fraction of a second).
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:160x120@30", "--input", "b=synthetic:160x120@30",
            "--realtime", "--duration", "8s", "--segment", "250ms", "--disk", "768KiB",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try waitUntil("half a second of both streams is on disk") {
            let info =
                try? JSONSerialization.jsonObject(
                    with: try Tool.rewind(["info", "--store", store, "--json"]).stdout) as? [String: Any]
            let streams = info?["streams"] as? [[String: Any]] ?? []
            return streams.count == 2 && streams.allSatisfy { ($0["frames"] as? Int ?? 0) >= 15 }
        }
        // A save waiting 10 s for its post-roll would hold more than the budget meanwhile: refused like a hold.
        let long = try Tool.rewind([
            "save", "--store", store, "--stream", "b", "--before", "1s", "--after", "10s", "-o",
            directory.appendingPathComponent("long.mkv").path,
        ])
        #expect(long.status == 1, "\(long.output) \(long.stderr)")
        #expect(
            long.stderr.contains("the save cannot be held on disk while it waits for its post-roll"), "\(long.stderr)")
        // Nor can a waiting save grow past it by `extend`.
        let socket = store + "/rewind.sock"
        let short = try Tool.run(
            try Tool.path(of: "curl"),
            [
                "-s", "--max-time", "30", "--unix-socket", socket, "-X", "POST", "http://rewind/v1/saves", "-d",
                "{\"stream\":\"b\",\"before\":\"100ms\",\"after\":\"500ms\"}",
            ])
        let id = try #require(
            (try JSONSerialization.jsonObject(with: short.stdout) as? [String: Any])?["id"] as? Int, "\(short.output)")
        let grown = try Tool.run(
            try Tool.path(of: "curl"),
            [
                "-s", "--max-time", "30", "--unix-socket", socket, "-X", "POST", "http://rewind/v1/saves/\(id)/extend",
                "-d", "{\"after\":\"30s\"}",
            ])
        #expect(grown.output.contains("the save cannot be held on disk while it waits"), "\(grown.output)")
        // A file per stream is the recorder's to write, and it writes regular files only: a FIFO among them is
        // refused up front, saying what works.
        let fifo = directory.appendingPathComponent("pipe.y4m").path
        try #require(mkfifo(directory.appendingPathComponent("pipe.b.y4m").path, 0o600) == 0)
        let toFIFO = try Tool.rewind(["save", "--store", store, "--stream", "all", "--last", "1s", "-o", fifo])
        #expect(toFIFO.status == 64, "\(toFIFO.output) \(toFIFO.stderr)")
        #expect(toFIFO.stderr.contains("pipe.b.y4m' is a FIFO: with a recorder running"), "\(toFIFO.stderr)")
        // Without --stream, a recorder of several streams asks which (as save and clip do).
        let unnamed = try Tool.rewind(["mark", "--store", store, "--label", "which"])
        #expect(unnamed.status == 64, "\(unnamed.output) \(unnamed.stderr)")
        #expect(unnamed.stderr.contains("the recorder records several streams (a, b): choose one"), "\(unnamed.stderr)")
        // A stream's next 2.5 s take about 50 % of 768 KiB (390 KB), and two segments of each stream (250 ms) about
        // 20 %: the first hold fits, two do not. A save waiting for 2.5 s of b holds as much: a marker's hold beside
        // it is refused, whichever came first, until the save is cancelled.
        let waiting = try Tool.run(
            try Tool.path(of: "curl"),
            [
                "-s", "--max-time", "30", "--unix-socket", socket, "-X", "POST", "http://rewind/v1/saves", "-d",
                "{\"stream\":\"b\",\"before\":\"100ms\",\"after\":\"2500ms\"}",
            ])
        let waitingID = try #require(
            (try JSONSerialization.jsonObject(with: waiting.stdout) as? [String: Any])?["id"] as? Int,
            "\(waiting.output)")
        let beside = try Tool.rewind([
            "mark", "--store", store, "--stream", "a", "--label", "x", "--hold-after", "2500ms",
        ])
        #expect(beside.status == 1, "\(beside.output) \(beside.stderr)")
        #expect(
            beside.stderr.contains(", saves and clips in progress ")
                && beside.stderr.contains("save \(waitingID) waiting)")
                && beside.stderr.contains("; hold less, or wait for or cancel "), "\(beside.stderr)")
        _ = try Tool.run(
            try Tool.path(of: "curl"),
            ["-s", "--max-time", "30", "--unix-socket", socket, "-X", "DELETE", "http://rewind/v1/saves/\(waitingID)"])
        // Six asked at once, each of 2.5 s of its own (each alone would fit): one is kept and five are refused.
        let marks = try (0..<6).map { index in
            try Tool.startRewind([
                "mark", "--store", store, "--stream", index % 2 == 0 ? "a" : "b", "--label", "m\(index)",
                "--at", "\(10 * (index + 1))s", "--hold-after", "2500ms",
            ])
        }
        let results = try marks.map { try $0.finish(timeout: .seconds(60)) }
        #expect(results.filter { $0.status == 0 }.count == 1, "\(results.map { "\($0.status) \($0.stderr)" })")
        for refused in results where refused.status != 0 {
            #expect(refused.status == 1, "\(refused.output) \(refused.stderr)")
            #expect(
                refused.stderr.contains("the hold cannot fit: it needs ")
                    && refused.stderr.contains(" bytes with the holds already kept (of every stream), more than ")
                    && refused.stderr.contains("; hold less, delete a marker"), "\(refused.stderr)")
        }
        // A longer hold over the kept one: its own range and the marker's share segments, which the total counts
        // once, and the refusal says its parts do not add up to it.
        if let kept = results.firstIndex(where: { $0.status == 0 }) {
            let over = try Tool.rewind([
                "mark", "--store", store, "--stream", kept % 2 == 0 ? "a" : "b", "--label", "over",
                "--at", "\(10 * (kept + 1))s", "--hold-after", "5s",
            ])
            #expect(over.status == 1, "\(over.output) \(over.stderr)")
            #expect(
                over.stderr.contains("(each alone: segments they share count once in the total)"), "\(over.stderr)")
        }
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// Holds of one stream made one after another, each keeping the second before it and the second after (a client
    /// marking every event on one camera), stop being admitted while the other stream still has room for its open
    /// segment and its newest sealed one: it keeps frames of this recording on disk to the end, and the recording
    /// ends well (exit 0). Without the reserve they took the whole --disk, retention deleted each of the other
    /// stream's segments as it was sealed, and the recording ended with "retention deleted all … durable frames"
    /// (exit 1).
    @Test func holdsOfOneStreamLeaveTheOtherItsOwnRecording() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "front=synthetic:160x120@30", "--input",
            "rear=synthetic:160x120@30", "--realtime", "--duration", "14s", "--segment", "250ms", "--disk", "768KiB",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitUntilAnswering(store)
        var kept = 0
        var refused = 0
        let started = ContinuousClock.now
        while ContinuousClock.now - started < .seconds(9) {
            let mark = try Tool.rewind([
                "mark", "--store", store, "--stream", "rear", "--label", "event", "--hold-before", "1s",
                "--hold-after", "1s",
            ])
            if mark.status == 0 {
                kept += 1
            } else {
                #expect(mark.status == 1 && mark.stderr.contains("the hold cannot fit"), "\(mark.stderr)")
                #expect(mark.stderr.contains("bytes the recorded streams keep for what they record"), "\(mark.stderr)")
                refused += 1
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
        #expect(kept > 0 && refused > 0, "kept \(kept), refused \(refused)")
        let ended = try recorder.finish(timeout: .seconds(60))
        #expect(ended.status == 0, "\(ended.output) \(ended.stderr)")
        #expect(!ended.stderr.contains("retention deleted all"), "\(ended.stderr)")
        let info = try json(try Tool.rewind(["info", "--store", store, "--json"]))
        let front = (info["streams"] as? [[String: Any]] ?? []).first { $0["name"] as? String == "front" }
        #expect((front?["frames"] as? Int ?? 0) > 0, "front keeps frames of this recording: \(info)")
    }

    /// Holds shorter than a segment, of every stream, made one after another: each is admitted counting the whole
    /// segments retention keeps around it, so the recording keeps its last seconds on disk (retention deleted every
    /// segment after the third such hold as soon as it was sealed, and the run ended with 0, half its time gone).
    @Test func holdsShorterThanASegmentLeaveTheRecordingItsEnd() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:320x240@30", "--input", "b=synthetic:160x120@7",
            "--realtime", "--duration", "24s", "--disk", "4MiB", "--segment", "1s", "--window", "2s", "--memory",
            "8MiB",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitUntilAnswering(store)
        var kept = 0
        let started = ContinuousClock.now
        while ContinuousClock.now - started < .seconds(12) {
            let mark = try Tool.rewind(["mark", "--store", store, "--stream", "all", "--label", "h", "--hold", "600ms"])
            if mark.status == 0 {
                kept += 1
            } else {
                #expect(mark.status == 1 && mark.stderr.contains("the hold cannot fit"), "\(mark.stderr)")
            }
            Thread.sleep(forTimeInterval: 0.4)
        }
        #expect(kept > 0, "some holds fit")
        let ended = try recorder.finish(timeout: .seconds(60))
        #expect(ended.status == 0, "\(ended.output) \(ended.stderr)")
        let info = try json(try Tool.rewind(["info", "--store", store, "--json"]))
        for stream in info["streams"] as? [[String: Any]] ?? [] {
            let last = stream["last_time_ns"] as? Int ?? 0
            #expect(last >= 22_000_000_000, "\(stream["name"] ?? "?") keeps the recording's end: \(last) ns")
        }
        #expect((info["stored_bytes"] as? Int ?? .max) <= 4 << 20, "\(info["stored_bytes"] ?? "")")
    }

    /// A save of one stream goes by that stream's own frames: when its input stalls while another stream keeps the
    /// recorder clock moving, it is cut short as stalled (it was written without its post-roll once the other
    /// stream's frames passed its end, exit 0 and nothing said).
    @Test func aSaveOfAStalledStreamBesideALiveOneIsCutShortAndSaysSo() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("a.y4m").path
        // 100 frames of 16x16 at 25 fps (4 s, within a pipe's 64 KiB), then nothing, the pipe kept open.
        let frame = Array("FRAME\n".utf8) + [UInt8](repeating: 128, count: 16 * 16 * 3 / 2)
        let writer = try Tool.openFIFO(
            fifo,
            sending: Array("YUV4MPEG2 W16 H16 F25:1 Ip A1:1 C420jpeg\n".utf8)
                + Array(repeating: frame, count: 100).joined())
        defer { close(writer) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=y4m:\(fifo)", "--input", "b=synthetic:64x48@30", "--realtime",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitUntilAnswering(store)
        Thread.sleep(forTimeInterval: 1.5)
        let output = directory.appendingPathComponent("a-cut.y4m").path
        let started = ContinuousClock.now
        let save = try Tool.rewind(
            ["save", "--store", store, "--stream", "a", "--before", "500ms", "--after", "5s", "-o", output],
            timeout: .seconds(120))
        #expect(ContinuousClock.now - started >= .seconds(10), "10 s without a frame of a")
        #expect(save.status == 1, "\(save.output) \(save.stderr)")
        #expect(
            save.stderr.contains("no frame came for the end of its range (the input of a stalled:"), "\(save.stderr)")
        #expect(save.output.contains("… 3.960s"), "the file ends with a's last frame: \(save.output)")
        #expect(recorder.process.isRunning, "the recorder goes on")
        // A save of both streams waits for b's post-roll, then says a's file lacks its end (it was written without
        // it, exit 0 and nothing said).
        let both = directory.appendingPathComponent("both.mkv").path
        let all = try Tool.rewind(
            ["save", "--store", store, "--stream", "all", "--before", "1s", "--after", "1s", "-o", both],
            timeout: .seconds(120))
        #expect(all.status == 1, "\(all.output) \(all.stderr)")
        #expect(
            all.stderr.contains("lacks the end of its range for a: no frame came for the end of its range (the input"),
            "\(all.stderr)")
        // b's track (a has none: no frame of it in the range) holds the whole 2 s.
        let counts = try runChecked(
            "ffprobe",
            ["-v", "error", "-count_frames", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", both])
        let frames = counts.output.split(whereSeparator: \.isNewline).compactMap { Int($0) }
        #expect(frames.count == 1 && frames[0] >= 59, "b's 2 s at 30 fps: \(counts.output)")
        // The last second of a, long stalled: no frames in that second, said of the range asked for (it was cut to
        // nothing, "no frames in [21.300s, 21.300s)").
        let last = try Tool.rewind(
            ["save", "--store", store, "--stream", "a", "--last", "1s", "-o", output], timeout: .seconds(120))
        #expect(last.status == 1, "\(last.output) \(last.stderr)")
        let range = try #require(
            last.stderr.firstMatch(of: /no frames in \[([0-9.]+)s, ([0-9.]+)s\)/), "\(last.stderr)")
        #expect(Double(range.1)! + 0.9 < Double(range.2)!, "\(last.stderr)")
        // The status names the stalled input, and only it (it showed nothing of a stalled input).
        let status = try Tool.rewind(["status", "--store", store])
        #expect(status.output.contains("input stalled: no frame for"), "\(status.output)")
        let json = try Tool.rewind(["status", "--store", store, "--json"])
        let document = try #require(try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any])
        let streams = try #require(document["streams"] as? [[String: Any]], "\(json.output)")
        let stalled = streams.filter { $0["input_stalled"] as? Bool == true }.compactMap { $0["stream"] as? String }
        #expect(stalled == ["a"], "\(json.output)")
        let idle = streams.first { $0["stream"] as? String == "a" }?["input_idle_ns"] as? Int ?? 0
        #expect(idle > 10_000_000_000, "\(json.output)")
        recorder.process.interrupt()
        let log = try recorder.finish(timeout: .seconds(60))
        // The recorder's log, the only report of a SIGUSR1 save, says which saves fell short and why.
        #expect(log.stderr.contains("(short of its end: the input of a stalled)"), "\(log.stderr)")
    }

    /// A save of every stream while one has not sent its first frame (its camera starts late: a header, then
    /// nothing) is written once the others pass its end: that stream's first frame will be placed where it arrives,
    /// after the range. (It waited 10 s, then said the late stream's input stalled, exit 1.)
    @Test func aStreamWithoutAFrameYetIsNotWaitedFor() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("late.y4m").path
        let writer = try Tool.openFIFO(fifo, sending: Array("YUV4MPEG2 W16 H16 F25:1 Ip A1:1 C420jpeg\n".utf8))
        defer { close(writer) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:64x48@30", "--input", "late=y4m:\(fifo)",
            "--realtime",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitUntilAnswering(store)
        Thread.sleep(forTimeInterval: 1.5)
        let output = directory.appendingPathComponent("all.mkv").path
        let save = try Tool.rewind(
            ["save", "--store", store, "--stream", "all", "--before", "1s", "--after", "1s", "-o", output],
            timeout: .seconds(120))
        #expect(save.status == 0, "\(save.output) \(save.stderr)")
        #expect(!save.stderr.contains("stalled"), "\(save.stderr)")
        let counts = try runChecked(
            "ffprobe",
            ["-v", "error", "-count_frames", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", output])
        let frames = counts.output.split(whereSeparator: \.isNewline).compactMap { Int($0) }
        #expect(frames.count == 1 && frames[0] >= 59, "a's 2 s at 30 fps: \(counts.output)")
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// A recorder in `directory/store` of two 64x48, 10 fps streams, answering: `live`, a synthetic camera, and
    /// `file`, a `.y4m` of `fileFrames` frames, whose input ends once they are read.
    private func startLiveAndFileRecorder(in directory: URL, fileFrames: Int) throws -> (ExternalTools.Child, String) {
        let source = try Source(size: "64x48", rate: "10", frames: fileFrames, in: directory)
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "live=synthetic:64x48@10", "--input", "file=y4m:\(source.path)",
            "--realtime", "--duration", "60s",
        ])
        do {
            try Tool.waitUntilAnswering(store)
        } catch {
            kill(recorder.process.processIdentifier, SIGKILL)
            throw error
        }
        return (recorder, store)
    }

    /// One frame in memory is "1 frame in memory" in `status` and in `info`'s lines of the live recorder ("1 frames").
    @Test func oneFrameInMemoryIsSaidInTheSingular() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (recorder, store) = try startLiveAndFileRecorder(in: directory, fileFrames: 1)
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try waitUntil("the file's input ended", interval: .milliseconds(50)) {
            try Tool.rewind(["status", "--store", store]).output.contains("input ended")
        }
        let status = try Tool.rewind(["status", "--store", store])
        #expect(status.output.contains("; 1 frame in memory"), "\(status.output)")
        #expect(!status.output.contains(" 1 frames"), "\(status.output)")
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.output.contains("    stream file: 1 frame in memory"), "\(info.output)")
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// A stream whose input ended (a file read to its end) beside a live one is not waited for as stalled: a
    /// `--last` save and a clip of a past range of both streams are written at once, exit 0, and the status says the
    /// input ended. (They waited 10 s and exited 1 saying the input stalled, a save of the ended stream alone too.)
    @Test func aStreamWhoseInputEndedIsNotWaitedForAsStalled() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (recorder, store) = try startLiveAndFileRecorder(in: directory, fileFrames: 20)
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        Thread.sleep(forTimeInterval: 3.5)
        let status = try Tool.rewind(["status", "--store", store])
        #expect(status.output.contains("input ended (end of input)"), "\(status.output)")
        let json = try Tool.rewind(["status", "--store", store, "--json"])
        let document = try #require(try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any])
        let streams = try #require(document["streams"] as? [[String: Any]], "\(json.output)")
        #expect(streams.compactMap { $0["input_ended"] as? String } == ["end of input"], "\(json.output)")
        for (arguments, name) in [
            (["save", "--stream", "all", "--last", "1s"], "last.mkv"),
            (["clip", "--stream", "all", "--from", "0s", "--to", "3s"], "past.mkv"),
            (["save", "--stream", "file", "--last", "30s"], "file.mkv"),
        ] {
            let output = directory.appendingPathComponent(name).path
            let run = try Tool.rewind(
                [arguments[0], "--store", store] + arguments.dropFirst() + ["-o", output], timeout: .seconds(120))
            #expect(run.status == 0, "\(arguments): \(run.output) \(run.stderr)")
            #expect(!run.stderr.contains("stalled"), "\(run.stderr)")
        }
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// A download of an export in progress when the recorder stops is served to its end (up to 30 s): it was cut
    /// at the stop, the client left with part of the file.
    @Test func aDownloadInProgressWhenTheRecorderStopsIsServedToItsEnd() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitUntilAnswering(store)
        Thread.sleep(forTimeInterval: 2.5)
        let socket = store + "/rewind.sock"
        let saved = try Tool.run(
            try Tool.path(of: "curl"),
            [
                "-s", "--max-time", "60", "--unix-socket", socket, "-X", "POST", "http://rewind/v1/saves", "-d",
                #"{"last":"2s","format":"y4m","wait":true}"#,
            ])
        let object = try #require(try JSONSerialization.jsonObject(with: saved.stdout) as? [String: Any])
        let id = try #require(object["id"] as? Int, "\(saved.output)")
        let file = try #require((object["files"] as? [String])?.first, "\(saved.output)")
        let size = try #require((try FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.intValue)
        #expect(size > 6_000_000, "60 frames of 115 200 bytes")
        // About 4 s at 1.5 MB/s: the recorder is told to stop a second in.
        let output = directory.appendingPathComponent("download.y4m").path
        let download = try ExternalTools.Child(
            try Tool.path(of: "curl"),
            [
                "-s", "--max-time", "60", "--limit-rate", "1500K", "--unix-socket", socket, "-o", output,
                "-w", "%{http_code} %{size_download}", "http://rewind/v1/files/\(id)",
            ])
        Thread.sleep(forTimeInterval: 1)
        recorder.process.interrupt()
        let fetched = try download.finish(timeout: .seconds(90))
        #expect(fetched.status == 0, "\(fetched.output) \(fetched.stderr)")
        #expect(fetched.output == "200 \(size)", "\(fetched.output)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == Data(contentsOf: URL(fileURLWithPath: file)))
        let ended = try recorder.finish(timeout: .seconds(90))
        #expect(ended.status == 0 || ended.status == 130, "\(ended.stderr)")
    }

    /// A save waiting for a post-roll its input never sends (the producer stopped sending and keeps the pipe open)
    /// is cut short once no frame has come for 10 s: written with what was recorded, `cut_short` saying why, and the
    /// client exits 1 naming the stalled inputs (it waited without end). The recorder goes on.
    @Test func aSaveWaitingOnAStalledInputIsCutShortAndSaysSo() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("camera.y4m").path
        let frame = Array("FRAME\n".utf8) + [UInt8](repeating: 128, count: 64 * 48 * 3 / 2)
        let writer = try Tool.openFIFO(
            fifo,
            sending: Array("YUV4MPEG2 W64 H48 F25:1 Ip A1:1 C420jpeg\n".utf8)
                + Array(repeating: frame, count: 10).joined())
        defer { close(writer) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind(["record", "--store", store, "--input", "y4m:\(fifo)"])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitUntilAnswering(store)
        try waitUntil("the ten frames are in") {
            Tool.firstStreamStatus(store: store)?["frames_accepted"] as? Int == 10
        }
        let output = directory.appendingPathComponent("cut.y4m").path
        let started = ContinuousClock.now
        let save = try Tool.rewind(
            ["save", "--store", store, "--before", "200ms", "--after", "30s", "-o", output], timeout: .seconds(120))
        #expect(ContinuousClock.now - started >= .seconds(10), "10 s without a frame")
        #expect(save.status == 1, "\(save.output) \(save.stderr)")
        // The newest frame when it was asked for is at 0.36 s: the save ends just after it.
        #expect(save.stderr.contains("was cut short at 0.360s instead of 30.360s"), "\(save.stderr)")
        #expect(
            save.stderr.contains("no frame came for the end of its range (the input of camera stalled:"),
            "\(save.stderr)")
        let frames = try frameMD5s(output).count
        #expect(frames == 5, "the frames 0.20 … 0.36 s: \(frames) \(save.output)")
        let saves = try Tool.run(
            try Tool.path(of: "curl"),
            ["-s", "--max-time", "30", "--unix-socket", store + "/rewind.sock", "http://rewind/v1/saves"])
        #expect(saves.output.contains(#""cut_short":"input_stalled""#), "\(saves.output)")
        #expect(recorder.process.isRunning, "the recorder goes on")
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// The two segments a recorded stream keeps for itself beside holds are counted as the files take them: whole
    /// frames (at 30 fps a 250 ms segment holds 8 frames, not 7.5) with their headers. Counted by the fractional
    /// duration and the frames' payload alone, they came a frame short each, so a hold admitted near the budget made
    /// retention delete a held stream's last segments at the stop.
    @Test func theSegmentsKeptBesideHoldsAreCountedAsTheFilesTakeThem() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--duration", "3s",
            "--segment", "250ms", "--disk", "3MiB",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitUntilAnswering(store)
        Thread.sleep(forTimeInterval: 1.5)
        let mark = try Tool.rewind(["mark", "--store", store, "--label", "all", "--hold-after", "600s"])
        #expect(mark.status == 1, "\(mark.output) \(mark.stderr)")
        let words = "less the "
        let found = try #require(mark.stderr.range(of: words), "\(mark.stderr)")
        let reserve = try #require(Int64(mark.stderr[found.upperBound...].prefix { $0.isNumber }), "\(mark.stderr)")
        #expect(try recorder.finish(timeout: .seconds(60)).status == 0)
        // Every sealed segment but the last (cut short at the stop) is 8 frames: two of them fit in the reserve.
        let rows = try runChecked(
            "sqlite3",
            ["-readonly", store + "/index.sqlite", "SELECT file_name, frame_count FROM segments ORDER BY id"]
        ).output.split(separator: "\n").map { $0.split(separator: "|") }
        let whole = rows.dropLast().filter { $0.count == 2 && $0[1] == "8" }
        try #require(whole.count >= 4, "\(rows)")
        let sizes = try whole.map { row in
            let path = store + "/segments/\(row[0])"
            let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber
            return try #require(size?.int64Value, "\(path)")
        }
        let largest = sizes.max() ?? 0
        #expect(reserve >= 2 * largest, "the reserve \(reserve) holds two segments of \(largest) bytes")
    }

    /// A hold near `--disk` and a recording that stops: the streams seal their last segments in turn, and the room
    /// kept for the segments not sealed yet no longer takes each stream's last full segment (one stream ended with
    /// four frames after its retention gap, and both lost their last full 250 ms, with the files under budget).
    @Test func aStopKeepsEveryStreamsLastSegmentsBesideAHold() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:320x240@30", "--input", "b=synthetic:320x240@30",
            "--realtime", "--duration", "12s", "--segment", "250ms", "--disk", "3MiB",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitUntilAnswering(store)
        Thread.sleep(forTimeInterval: 2)
        // The longest hold that fits, to a tenth of a second: near the budget.
        var held = false
        for tenths in stride(from: 80, through: 5, by: -5) where !held {
            let mark = try Tool.rewind([
                "mark", "--store", store, "--stream", "a", "--label", "h", "--hold-before", "0s", "--hold-after",
                "\(tenths * 100)ms",
            ])
            held = mark.status == 0
        }
        #expect(held, "a hold fits")
        let ended = try recorder.finish(timeout: .seconds(60))
        #expect(ended.status == 0, "\(ended.output) \(ended.stderr)")
        let info = try json(try Tool.rewind(["info", "--store", store, "--json"]))
        for stream in info["streams"] as? [[String: Any]] ?? [] {
            let last = stream["last_pts_ns"] as? Int ?? 0
            let retention = (stream["gaps"] as? [[String: Any]] ?? []).filter { $0["reason"] as? String == "retention" }
            let end = retention.compactMap { $0["end_ns"] as? Int }.max() ?? 0
            #expect(
                last - end >= 200_000_000,
                "\(stream["name"] ?? "?") keeps a full segment after its gap: \(end) … \(last)")
        }
    }

    /// `GET /v1/streams` gives a stream's exact frame duration, with the keys and values of `rewind info --json`
    /// (value / timescale seconds), besides its whole nanoseconds (rounded down), by which pts computed as a frame
    /// index times the duration fall 72 µs an hour behind at 29.97 fps.
    @Test func theStreamsListGivesTheExactFrameDuration() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30000/1001", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitUntilAnswering(store)
        let answer = try Tool.run(
            try Tool.path(of: "curl"),
            ["-s", "-f", "--max-time", "60", "--unix-socket", "\(store)/rewind.sock", "http://rewind/v1/streams"])
        #expect(answer.status == 0, "\(answer.stderr)")
        let streams = try json(answer)["streams"] as? [[String: Any]]
        let stream = try #require(streams?.first, "\(answer.output)")
        #expect(stream["frame_duration_value"] as? Int == 1001, "\(answer.output)")
        #expect(stream["frame_duration_timescale"] as? Int == 30000, "\(answer.output)")
        #expect(stream["frame_duration_ns"] as? Int == 33_366_666, "\(answer.output)")
        let info = try #require(try streamInfo(store)["camera"])
        #expect(info["frame_duration_value"] as? Int == 1001 && info["frame_duration_timescale"] as? Int == 30000)
        recorder.process.interrupt()
        let ended = try recorder.finish(timeout: .seconds(60))
        #expect(ended.status == 0, "\(ended.stderr)")
    }
}
