import Foundation
import Glibc
import RewindTesting
import Testing

/// `rewind record` serves saves while it records: `rewind save` through DIR/rewind.sock, and SIGUSR1.
@Suite(.timeLimit(.minutes(45))) struct LiveRecorderTests {

    func probe(_ path: String, _ entries: String) throws -> String {
        let result = try Tool.run(
            try Tool.path(of: "ffprobe"),
            ["-v", "error", "-count_frames", "-show_entries", entries, "-of", "csv=p=0", path])
        return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func saveAndSignalFromALiveRecorderThenFallBackToDisk() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--window", "3s",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        let socket = store + "/rewind.sock"
        // Three seconds recorded: the socket is up and the window (3 s at 30 fps, and the frame that ends it) is full.
        try waitUntil("the recorder serves \(socket)") { FileManager.default.fileExists(atPath: socket) }
        try waitUntil("the live recorder holds a full window of 91 frames", interval: .milliseconds(50)) {
            let info = try Tool.rewind(["info", "--store", store, "--json"])
            let object = try? JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
            return (object?["live"] as? [String: Any])?["memory_frames"] as? Int == 91
        }

        // A save through the socket comes from memory: the last 2 s, 60 frames at 30 fps, written by the recorder.
        let clip = directory.appendingPathComponent("live.mkv").path
        let save = try Tool.rewind(["save", "--store", store, "--last", "2s", "-o", clip])
        #expect(save.status == 0, "\(save.stderr)")
        #expect(save.output.contains("saved by the live recorder"), "\(save.output)")
        #expect(try probe(clip, "stream=nb_read_frames") == "60")

        // A clip of stream time goes through the recorder too: 1 s at 30 fps.
        let ranged = directory.appendingPathComponent("range.mkv").path
        let ranges = try Tool.rewind(["clip", "--store", store, "--from", "0.5s", "--to", "1.5s", "-o", ranged])
        #expect(ranges.status == 0, "\(ranges.stderr)")
        #expect(ranges.output.contains("exported by the live recorder"), "\(ranges.output)")
        // The line gives the pts the file covers (its first and last frame), not the range asked for.
        #expect(ranges.output.contains("pts 0.500s … 1.466s"), "\(ranges.output)")
        #expect(try probe(ranged, "stream=nb_read_frames") == "30")

        // To stdout: the recorder writes into this process's standard output, passed along with the request.
        let piped = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", "-"])
        #expect(piped.status == 0, "\(piped.stderr)")
        #expect(piped.stderr.contains("saved by the live recorder"))
        let pipedPath = directory.appendingPathComponent("piped.y4m").path
        try piped.stdout.write(to: URL(fileURLWithPath: pipedPath))
        #expect(try probe(pipedPath, "stream=nb_read_frames") == "30")
        // The file the recorder wrote for stdout is gone however the copy ends: a reader that stops early (the
        // client dies of SIGPIPE), a stdout that cannot be written (exit 1, said so), and a client killed before
        // (its file is removed by the next client, since its process is gone).
        let exports = store + "/exports"
        func stdoutFiles() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: exports)) ?? []).filter { $0.hasPrefix("stdout-") }
        }
        let endedPID = try Tool.run("/bin/sh", ["-c", "echo $$"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        try Data("left by a killed client".utf8).write(to: URL(fileURLWithPath: "\(exports)/stdout-\(endedPID)-1.y4m"))
        let command = "'\(Tool.rewindPath)' save --store '\(store)' --last 1s -o -"
        let headed = try Tool.run("/bin/bash", ["-c", "\(command) | head -c 100 > /dev/null; echo ${PIPESTATUS[0]}"])
        // Ended by SIGPIPE, or, where SIGPIPE is ignored (as this test process passes it on), by EPIPE: said so.
        let headedStatus = headed.output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(
            headedStatus == "141"
                || (headedStatus == "1" && headed.stderr.contains("stdout: writing failed: Broken pipe")),
            "\(headedStatus): \(headed.stderr)")
        #expect(stdoutFiles() == [], "\(stdoutFiles())")
        let full = try Tool.run("/bin/sh", ["-c", "\(command) > /dev/full"])
        #expect(full.status == 1 && full.stderr.contains("stdout: writing failed: No space left"), "\(full.stderr)")
        #expect(stdoutFiles() == [], "\(stdoutFiles())")

        // `rewind info` shows what the live recorder holds in memory.
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        let object = try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
        let live = try #require(object?["live"] as? [String: Any], "\(info.output)")
        #expect(live["memory_frames"] as? Int == 91)
        #expect(live["stream"] as? String == "camera")
        #expect(try Tool.rewind(["info", "--store", store]).output.contains("live recorder: 91 frames in memory"))
        // `verify` checks a store at rest: with a recorder writing it, it says so instead of reporting its open
        // segment and moving index as problems.
        let busy = try Tool.rewind(["verify", "--store", store])
        #expect(busy.status == 1 && busy.stderr.contains("is open for recording by another process"), "\(busy.stderr)")
        #expect(busy.stderr.contains("verify checks a store at rest") && busy.output.isEmpty, "\(busy.output)")
        // A second recorder is told the same fact, with its own advice.
        let second = try Tool.rewind(["record", "--store", store, "--duration", "1s"])
        #expect(second.status == 69 && second.stderr.contains("is open for recording by another process"))
        #expect(second.stderr.contains("stop it (one recorder per store), or give another --store"), "\(second.stderr)")

        // SIGUSR1 saves the whole window (3 s) into DIR/exports/.
        kill(process.processIdentifier, SIGUSR1)
        func exported() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: exports)) ?? []).filter { $0.hasSuffix(".mkv") }
        }
        try waitUntil("SIGUSR1 wrote one clip into \(exports)") { exported().count == 1 }
        let saved = exports + "/" + (exported().first ?? "missing")
        try waitUntil("the SIGUSR1 clip holds 90 frames", interval: .milliseconds(50)) {
            (try? probe(saved, "stream=nb_read_frames")) == "90"
        }

        // SIGINT: the recorder finishes, removes its socket, and `rewind save` reads the disk instead.
        process.interrupt()
        let finished = try recorder.finish()
        let log = finished.stderr
        #expect(finished.status == 0, "\(log)")
        #expect(finished.output.contains("recorded"))
        #expect(log.contains("saved: wrote 90 frames"), "\(log)")
        #expect(!FileManager.default.fileExists(atPath: socket))
        let fromDisk = directory.appendingPathComponent("disk.y4m").path
        let later = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", fromDisk])
        #expect(later.status == 0, "\(later.stderr)")
        #expect(!later.output.contains("live recorder"))
        let infoAfter = try Tool.rewind(["info", "--store", store, "--json"])
        #expect((try JSONSerialization.jsonObject(with: infoAfter.stdout) as? [String: Any])?["live"] is NSNull)
        #expect(try probe(fromDisk, "stream=nb_read_frames") == "30")
    }

    /// The recorder's log, the only report of a SIGUSR1 save, names the gaps where its range lost frames, as a
    /// client's save does (it said only what it wrote).
    @Test func aSignalSaveSaysWhereItsRangeLostFrames() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        // A window that still reaches the gap at 0.5 s when the signal comes late on a busy machine: a SIGUSR1 save
        // is the window back from the newest frame, and one of 3 s sent after 3.8 s of recording left the gap out.
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x90@30", "--realtime", "--window", "60s",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        try Tool.waitUntilAnswering(store)
        // Frames of the window's stretch 0.5 s … 0.8 s lost as the spill fell behind, as the recorder notes them.
        try waitUntil("the recorder spilled its first second", interval: .milliseconds(50)) {
            let info = try Tool.rewind(["info", "--store", store, "--json"])
            let object = try? JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
            return ((object?["live"] as? [String: Any])?["memory_frames"] as? Int ?? 0) >= 30
        }
        _ = try runChecked(
            "sqlite3",
            [
                store + "/index.sqlite",
                ".timeout 10000",
                "INSERT INTO gaps (stream_id, start_ns, end_ns, reason) VALUES (1, 500000000, 800000000, 'spill behind')",
            ])
        kill(process.processIdentifier, SIGUSR1)
        let exports = store + "/exports"
        try waitUntil("SIGUSR1 wrote its clip into \(exports)") {
            ((try? FileManager.default.contentsOfDirectory(atPath: exports)) ?? []).contains { $0.hasSuffix(".mkv") }
        }
        process.interrupt()
        let finished = try recorder.finish(timeout: .seconds(60))
        #expect(finished.stderr.contains("saved: wrote"), "\(finished.stderr)")
        #expect(
            finished.stderr.contains("the range has 1 gap where frames were lost: 0.500s … 0.800s (spill behind)"),
            "\(finished.stderr)")
    }

    /// `save --since-last-save` without `--last` goes back to where the last save ended, further than the 5 s a
    /// save takes by default and than the window: the two saves hold every frame between them once. A save into a
    /// pipe whose reader goes away does not count: the client takes it back before it ends by SIGPIPE.
    /// A memory-only recorder takes no lock on the store, but serves the directory's API: a recorder of the store
    /// started beside it (in either order) is refused up front, so no save or marker meant for one reaches the other.
    @Test func aMemoryOnlyRecorderAndAStoreRecorderNeverShareADirectory() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let source = ["--input", "synthetic:160x120@30", "--realtime"]
        for first in ["off", "eager"] {
            let running = try Tool.startRewind(["record", "--store", store, "--spill", first] + source)
            defer { if running.process.isRunning { kill(running.process.processIdentifier, SIGKILL) } }
            try waitUntil("the first recorder answers") { Tool.firstStreamStatus(store: store) != nil }
            let second = try Tool.rewind(
                ["record", "--store", store, "--spill", first == "off" ? "eager" : "off", "--duration", "1s"] + source)
            #expect(second.status == 69, "\(second.stderr)")
            #expect(second.stderr.contains("another recorder already serves \(store)/rewind.sock"), "\(second.stderr)")
            #expect(
                second.stderr.contains("(one with --spill off") == (first == "off"), "\(second.stderr)")
            #expect(second.output.isEmpty, "refused before recording: \(second.output)")
            // A marker reaches the recorder that serves the directory: kept by the store's, refused by the other.
            let marked = try Tool.rewind(["mark", "--store", store, "--label", "kept"])
            #expect((marked.status == 0) == (first == "eager"), "\(marked.stderr)")
            if first == "off" {
                // No store to read yet, and no advice to record one there (it would be refused): the recorder is named.
                let info = try Tool.rewind(["info", "--store", store])
                #expect(info.status == 1, "\(info.stderr)")
                #expect(info.stderr.contains("the recorder serving there records without one (--spill off)"))
            }
            running.process.interrupt()
            let stopped = try running.finish(timeout: .seconds(60))
            #expect(stopped.status == 0, "\(stopped.stderr)")
        }
        // Only the store recorder's marker is on disk, and only its frames.
        let markers = try Tool.rewind(["markers", "--store", store, "--json"])
        #expect(markers.status == 0, "\(markers.stderr)")
        let list = try #require(try JSONSerialization.jsonObject(with: markers.stdout) as? [String: Any])
        #expect((list["markers"] as? [Any])?.count == 1, "\(markers.output)")
    }

    @Test func saveSinceTheLastSaveGoesBackFurtherThanFiveSeconds() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--window", "2s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        Thread.sleep(forTimeInterval: 1)
        let first = directory.appendingPathComponent("first.mkv").path
        let save = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", first])
        #expect(save.status == 0, "\(save.stderr)")
        Thread.sleep(forTimeInterval: 0.5)
        // 30 frames of 28.8 kB into a pipe of 64 KiB whose reader takes one byte and leaves.
        let cutOff = try Tool.run(
            try Tool.path(of: "bash"),
            [
                "-c", "set -o pipefail; \"$0\" save --store \"$1\" --last 1s -o - | head -c 1 > /dev/null",
                Tool.rewindPath, store,
            ])
        #expect(cutOff.status == 141, "the client ends by SIGPIPE: \(cutOff.status) \(cutOff.stderr)")
        Thread.sleep(forTimeInterval: 6)
        let second = directory.appendingPathComponent("second.mkv").path
        let since = try Tool.rewind(["save", "--store", store, "--since-last-save", "-o", second])
        #expect(since.status == 0, "\(since.stderr)")
        // "pts A … B": the second starts one frame (1/30 s) after the first ends.
        func span(_ line: String) -> (Double, Double)? {
            guard let range = line.range(of: #"pts ([0-9.]+)s … ([0-9.]+)s"#, options: .regularExpression) else {
                return nil
            }
            let numbers = line[range].dropFirst(4).split(separator: "…").compactMap {
                Double($0.trimmingCharacters(in: .whitespaces).dropLast())
            }
            return numbers.count == 2 ? (numbers[0], numbers[1]) : nil
        }
        let (_, firstEnd) = try #require(span(save.output), "\(save.output)")
        let (secondStart, secondEnd) = try #require(span(since.output), "\(since.output)")
        #expect(abs(secondStart - firstEnd - 1.0 / 30) < 0.002, "\(save.output)\(since.output)")
        #expect(secondEnd - secondStart > 6, "more than 5 s and the 2 s window: \(since.output)")
    }

    /// A recorder killed (`kill -9`) while it writes a save leaves nothing under the requested name: the save was
    /// written under a temporary name beside it, renamed only once complete.
    @Test func aRecorderKilledMidSaveLeavesNoFileUnderTheRequestedName() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:1920x1080@30", "--realtime", "--window", "10s",
            "--memory", "2GiB",
        ])
        let process = recorder.process
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        try waitUntil("the live recorder holds 8 s", timeout: .seconds(60), interval: .milliseconds(100)) {
            let info = try? Tool.rewind(["info", "--store", store, "--json"])
            let object = info.flatMap { try? JSONSerialization.jsonObject(with: $0.stdout) as? [String: Any] }
            return ((object?["live"] as? [String: Any])?["memory_frames"] as? Int ?? 0) >= 241
        }
        let exports = directory.appendingPathComponent("exports")
        try FileManager.default.createDirectory(at: exports, withIntermediateDirectories: true)
        let output = exports.appendingPathComponent("out.mkv").path
        // 240 frames of 3 MB: the recorder writes for a while, under a temporary name.
        let save = try Tool.startRewind(["save", "--store", store, "--last", "8s", "-o", output])
        try waitUntil("the recorder started writing the save", interval: .milliseconds(2)) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: exports.path)) ?? []
            return names.contains { $0.hasPrefix(".out.mkv.partial-") }
        }
        kill(process.processIdentifier, SIGKILL)
        _ = try recorder.finish()
        let client = try save.finish()
        #expect(client.status != 0, "the save reported success: \(client.output) \(client.stderr)")
        #expect(!FileManager.default.fileExists(atPath: output), "a partial \(output) was left under its name")

        // The next export to that name removes the partial file the killed recorder left; one that replaces a file
        // keeps its permissions. The store is repaired first: the killed recorder's open segment may hold frames past
        // its index, which a save from the disk would report (exit 1).
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        let later = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", output])
        #expect(later.status == 0, "\(later.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: exports.path) == ["out.mkv"])
        #expect(chmod(output, 0o600) == 0)
        #expect(try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", output]).status == 0)
        var mode = stat()
        #expect(stat(output, &mode) == 0 && mode.st_mode & 0o777 == 0o600)
    }

    @Test func aLiveRecorderOfSeveralStreamsSavesEachOrAllAndSignalSavesAll() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "front=synthetic:320x240@30", "--input", "rear=synthetic:160x96@15",
            "--realtime", "--window", "3s",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        // Both windows full: 91 frames at 30 fps and 46 at 15 fps.
        var streams: [[String: Any]] = []
        try waitUntil("the live recorder holds both windows", interval: .milliseconds(50)) {
            let info = try Tool.rewind(["info", "--store", store, "--json"])
            let object = try? JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
            streams = (object?["live"] as? [String: Any])?["streams"] as? [[String: Any]] ?? []
            return streams.map { $0["memory_frames"] as? Int } == [91, 46]
        }
        #expect(streams.map { $0["name"] as? String } == ["front", "rear"])
        let budgets = streams.compactMap { $0["memory_budget_bytes"] as? Int }
        #expect(budgets.count == 2 && budgets[0] > budgets[1], "shares follow byte rates: \(budgets)")

        // One stream, by name; then every stream into one .mkv, a track each, from memory.
        let rear = directory.appendingPathComponent("rear.mkv").path
        let one = try Tool.rewind(["save", "--store", store, "--stream", "rear", "--last", "2s", "-o", rear])
        #expect(one.status == 0, "\(one.stderr)")
        #expect(one.output.contains("saved by the live recorder"), "\(one.output)")
        #expect(try probe(rear, "stream=width,nb_read_frames") == "160,30")
        let all = directory.appendingPathComponent("all.mkv").path
        let both = try Tool.rewind(["save", "--store", store, "--stream", "all", "--last", "2s", "-o", all])
        #expect(both.status == 0, "\(both.stderr)")
        #expect(both.output.contains("saved by the live recorder"), "\(both.output)")
        #expect(both.output.contains("(2 streams, a track each)"), "as from the disk: \(both.output)")
        // 2 s of each: 60 frames at 30 fps, 30 at 15 fps (one fewer when that stream's newest frame is not in yet).
        let saved = try probe(all, "stream=width,nb_read_frames").split(separator: "\n").map {
            $0.split(separator: ",").compactMap { Int($0) }
        }
        #expect(saved.count == 2, "\(saved)")
        if saved.count == 2 {
            #expect(saved[0].first == 320 && (59...60).contains(saved[0].last ?? 0), "\(saved)")
            #expect(saved[1].first == 160 && (29...30).contains(saved[1].last ?? 0), "\(saved)")
        }
        let unnamed = try Tool.rewind(["save", "--store", store, "--last", "2s", "-o", all])
        #expect(unnamed.status == 64, "\(unnamed.stderr)")

        // SIGUSR1 saves the window of every stream into one file.
        kill(process.processIdentifier, SIGUSR1)
        let exports = store + "/exports"
        func exported() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: exports)) ?? []).filter { $0.hasSuffix(".mkv") }
        }
        try waitUntil("SIGUSR1 wrote one clip into \(exports)") { exported().count == 1 }
        process.interrupt()
        let result = try recorder.finish(timeout: .seconds(60))
        #expect(result.status == 0, "\(result.stderr)")
        let signalled = exports + "/" + exported()[0]
        let tracks = try probe(signalled, "stream=width,nb_read_frames").split(separator: "\n")
        #expect(tracks.count == 2, "\(tracks)")
        #expect(tracks.first?.hasPrefix("320,") == true && tracks.last?.hasPrefix("160,") == true, "\(tracks)")
    }

    /// A recorder that holds the store but does not answer (its socket removed) is told apart from none: `info`
    /// says so on stderr and `--json` has `recorder: "not answering"` (it read as a store nothing records).
    @Test func infoTellsARecorderThatDoesNotAnswerFromNone() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x96@30", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        try FileManager.default.removeItem(atPath: store + "/rewind.sock")
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        let object = try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
        #expect(object?["recorder"] as? String == "not answering", "\(info.output)")
        #expect(object?["live"] is NSNull, "\(info.output)")
        #expect(info.stderr.contains("a recorder is recording into \(store) but does not answer"), "\(info.stderr)")
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
        let after = try Tool.rewind(["info", "--store", store, "--json"])
        #expect((try JSONSerialization.jsonObject(with: after.stdout) as? [String: Any])?["recorder"] is NSNull)
    }

    /// A recorder of one stream whose store holds others too: a save of `all` is every stream's export, as a clip of
    /// `all` from the disk is (a titled track on the recorder clock, a file named for the stream), not that stream's
    /// own (its own pts, which lie the stream's clock offset before recorder time).
    @Test func aSaveOfAllFromARecorderOfOneOfTheStoresStreamsIsEveryStreams() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        func file(_ name: String) -> String { directory.appendingPathComponent(name).path }
        let first = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:160x96@30", "--duration", "1s",
        ])
        try #require(first.status == 0, "\(first.stderr)")
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "c=synthetic:160x96@30", "--realtime", "--window", "10s",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        try Tool.waitForSocket(of: store)
        try waitUntil("c records 1.5 s", interval: .milliseconds(50)) {
            let status = try Tool.rewind(["status", "--store", store, "--json"])
            let object = try? JSONSerialization.jsonObject(with: status.stdout) as? [String: Any]
            let streams = object?["streams"] as? [[String: Any]] ?? []
            return (streams.first?["memory_last_pts_ns"] as? Int ?? 0) > 1_500_000_000
        }
        let mkv = try Tool.rewind(["save", "--store", store, "--stream", "all", "--last", "1s", "-o", file("all.mkv")])
        #expect(mkv.status == 0, "\(mkv.stderr)")
        #expect(try probe(file("all.mkv"), "stream_tags=title") == "c", "a track named for its stream")
        let y4m = try Tool.rewind(["save", "--store", store, "--stream", "all", "--last", "1s", "-o", file("all.y4m")])
        #expect(y4m.status == 0, "\(y4m.stderr)")
        #expect(FileManager.default.fileExists(atPath: file("all.c.y4m")), "\(y4m.output)")
        // A device where the stream's file goes is refused before the recorder starts, by the client and by the API
        // (the recorder writes regular files only; it wrote into the device named by -o instead, or failed later).
        try FileManager.default.createSymbolicLink(atPath: file("dev.c.y4m"), withDestinationPath: "/dev/null")
        let device = try Tool.rewind([
            "save", "--store", store, "--stream", "all", "--last", "1s", "-o", file("dev.y4m"),
        ])
        #expect(device.status == 64 && device.stderr.contains("dev.c.y4m' is a device"), "\(device.stderr)")
        let asked = try Tool.run(
            try Tool.path(of: "curl"),
            [
                "-s", "-w", "%{http_code}", "--unix-socket", store + "/rewind.sock", "-X", "POST",
                "http://rewind/v1/saves", "-d", "{\"stream\":\"all\",\"last\":\"1s\",\"path\":\"\(file("dev.y4m"))\"}",
            ])
        #expect(asked.output.hasSuffix("400") && asked.output.contains("dev.c.y4m"), "\(asked.output)")
        // The same request without `all` is the stream's own, under the name given.
        let own = try Tool.rewind(["save", "--store", store, "--stream", "c", "--last", "1s", "-o", file("c.y4m")])
        #expect(own.status == 0 && FileManager.default.fileExists(atPath: file("c.y4m")), "\(own.stderr)")
        process.interrupt()
        #expect(try recorder.finish(timeout: .seconds(60)).status == 0)
        // From the disk, a stream's file of `all` says its frames on the recorder clock too (c's own pts lie its
        // clock offset, over a second, before).
        let disk = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "2s", "--to", "2.5s", "-o", file("disk.y4m"),
        ])
        #expect(disk.status == 0, "\(disk.stderr)")
        let diskFirst = disk.output.firstMatch(of: /disk\.c\.y4m, pts (\d+\.\d+)s/).flatMap { Double($0.1) } ?? -1
        #expect(diskFirst >= 2.0 && diskFirst < 2.1, "\(disk.output)")
    }

    /// What a live recorder's exports hold is said as offline exports say it: the frames a `.y4m` repeats to fill
    /// gaps (`repeated_frames` in the save object), the pts the files of `--stream all` cover (the earliest first
    /// and latest last frame on the recorder clock, not the range asked for), the streams without frames in the
    /// range; and times in its errors are seconds. `--stream all` on a store of one stream writes the name given.
    @Test func liveExportsSayWhatTheirFilesHold() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        func file(_ name: String) -> String { directory.appendingPathComponent(name).path }
        // A first recording of `front` alone, 1 s: a store of one stream.
        let first = try Tool.rewind([
            "record", "--store", store, "--input", "front=synthetic:160x96@30", "--duration", "1s", "--realtime",
        ])
        try #require(first.status == 0, "\(first.stderr)")
        let only = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "1s", "-o", file("one.y4m"),
        ])
        #expect(only.status == 0, "\(only.stderr)")
        #expect(FileManager.default.fileExists(atPath: file("one.y4m")), "the name given: \(only.output)")
        // Then, after a pause, `front` again (a gap of at least the pause) and a new stream, `rear`, live.
        Thread.sleep(forTimeInterval: 0.5)
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "front=synthetic:160x96@30", "--input", "rear=synthetic:160x96@15",
            "--realtime", "--window", "10s",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        // Both streams recorded past recorder time 3 s.
        try waitUntil("both streams pass recorder time 3 s", interval: .milliseconds(50)) {
            let info = try Tool.rewind(["info", "--store", store, "--json"])
            let object = try? JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
            let streams = (object?["live"] as? [String: Any])?["streams"] as? [[String: Any]] ?? []
            let times = streams.compactMap { stream -> Int? in
                guard let last = stream["memory_last_pts_ns"] as? Int, let offset = stream["clock_offset_ns"] as? Int
                else { return nil }
                return last + offset
            }
            return times.count == 2 && times.allSatisfy { $0 > 3_100_000_000 }
        }

        // `front` across the gap: the line says how many frames repeat, as the file holds them.
        let gap = try Tool.rewind([
            "clip", "--store", store, "--stream", "front", "--from", "0s", "--to", "3s", "-o", file("gap.y4m"),
        ])
        #expect(gap.status == 0, "\(gap.stderr)")
        let inFile = Int(try probe(file("gap.y4m"), "stream=nb_read_frames")) ?? -1
        // Every frame time of the 3 s (a last frame off the grid may round to the slot just past it).
        #expect((90...91).contains(inFile), "\(inFile) frames")
        let match = gap.output.firstMatch(of: /wrote (\d+) frames \((\d+) stored \+ (\d+) repeated to fill gaps/)
        let counts = match.map { (Int($0.1)!, Int($0.2)!, Int($0.3)!) } ?? (0, 0, 0)
        #expect(counts.0 == inFile && counts.1 + counts.2 == inFile && counts.2 >= 10, "\(gap.output)")
        #expect(gap.output.contains("exported by the live recorder"), "\(gap.output)")
        let socket = store + "/rewind.sock"
        let saves = try Tool.run(
            try Tool.path(of: "curl"), ["-s", "--max-time", "60", "--unix-socket", socket, "http://rewind/v1/saves"])
        let list = try JSONSerialization.jsonObject(with: saves.stdout) as? [String: Any]
        let objects = list?["saves"] as? [[String: Any]] ?? []
        #expect(objects.last?["repeated_frames"] as? Int == counts.2, "\(saves.output)")

        // Every stream over a range only `front` has frames in: one file, the pts it covers, the other stream named.
        let part = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "0.9s", "-o", file("part.y4m"),
        ])
        #expect(part.status == 0, "\(part.stderr)")
        #expect(part.output.contains("pts 0.000s … 0.866s; exported by the live recorder"), "\(part.output)")
        #expect(part.output.contains("\n1 stream without frames in the range, no file: rear"), "\(part.output)")
        #expect(FileManager.default.fileExists(atPath: file("part.front.y4m")))
        #expect(!FileManager.default.fileExists(atPath: file("part.rear.y4m")))

        // Every stream over 1…3 s, as .y4m files and as one .mkv (whose timestamps are recorder time): the same pts.
        var covered: [String] = []
        for name in ["both.y4m", "both.mkv"] {
            let both = try Tool.rewind([
                "clip", "--store", store, "--stream", "all", "--from", "1s", "--to", "3s", "-o", file(name),
            ])
            #expect(both.status == 0, "\(both.stderr)")
            let pts = both.output.firstMatch(of: /pts (\d+\.\d+)s … (\d+\.\d+)s/)
            #expect(pts != nil && pts?.2 != "3.000", "the pts the files cover, not the range asked for: \(both.output)")
            covered.append(pts.map { "\($0.1) … \($0.2)" } ?? "")
        }
        #expect(covered.count == 2 && covered[0] == covered[1], "\(covered)")

        // Nothing recorded yet from 500 s on: said in seconds, with what is held, as from the disk.
        let early = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "500s", "--to", "600s", "-o", file("x.mkv"),
        ])
        #expect(early.status != 0)
        #expect(
            early.stderr.contains("no frames in [500.000s, 600.000s); the store holds 0.000s … ")
                && early.stderr.contains("; nothing was written"), "\(early.stderr)")

        process.interrupt()
        let result = try recorder.finish(timeout: .seconds(60))
        #expect(result.status == 0, "\(result.stderr)")
        // From the store, the same range names the stream that got no file, as the recorder's export did.
        let offline = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "0.9s", "-o", file("off.y4m"),
        ])
        #expect(offline.status == 0, "\(offline.stderr)")
        #expect(offline.output.contains("1 stream without frames in the range, no file: rear"), "\(offline.output)")
    }

    /// A client interrupted while the recorder works on its save cancels it (no file is kept, the temporary file of
    /// `-o -` included); a recorder stopped while a save waits for its post-roll writes what it has, and the
    /// waiting client sees it done.
    @Test func interruptedClientsCancelAndStoppedRecordersFinishTheirSaves() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--window", "5s",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        try Tool.waitForSocket(of: store)
        try waitUntil("a second is recorded", interval: .milliseconds(50)) {
            let info = try Tool.rewind(["info", "--store", store, "--json"])
            let object = try? JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
            return ((object?["live"] as? [String: Any])?["memory_frames"] as? Int ?? 0) >= 30
        }
        let piped = try ExternalTools.Child(
            Tool.rewindPath, ["save", "--store", store, "--before", "1s", "--after", "30s", "-o", "-"])
        try waitUntil("the save waits", interval: .milliseconds(50)) {
            try Tool.rewind(["status", "--store", store]).output.contains("saves: 1 waiting")
        }
        piped.process.interrupt()
        let interrupted = try piped.finish(timeout: .seconds(60))
        #expect(interrupted.status == 130, "\(interrupted.stderr)")
        #expect(interrupted.stderr.contains("was cancelled; no file was kept"), "\(interrupted.stderr)")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: store + "/exports")) ?? []
        #expect(left.isEmpty, "\(left)")

        let path = directory.appendingPathComponent("stopped.mkv").path
        let waiting = try ExternalTools.Child(
            Tool.rewindPath, ["save", "--store", store, "--before", "1s", "--after", "30s", "-o", path])
        try waitUntil("the second save waits", interval: .milliseconds(50)) {
            try Tool.rewind(["status", "--store", store]).output.contains("saves: 1 waiting")
        }
        process.terminate()
        let saved = try waiting.finish(timeout: .seconds(60))
        _ = try recorder.finish(timeout: .seconds(60))
        // Written with what was recorded, and said to fall short of the 30 s post-roll (69: the recorder stopped).
        #expect(saved.status == 69, "\(saved.stderr)")
        #expect(saved.output.contains("saved by the live recorder"), "\(saved.output)")
        #expect(saved.stderr.contains("was cut short at"), "\(saved.stderr)")
        #expect(saved.stderr.contains("the recorder stopped;"), "\(saved.stderr)")
        #expect(FileManager.default.fileExists(atPath: path))
    }

    /// A save of one stream of several, waiting for its post-roll when the recorder stops, is cut short saying so
    /// (69), whichever input stops first (the stream whose input stopped first had its save written as whole, exit 0:
    /// the stop read as an input that ended, which saves do not wait for).
    @Test func eachStreamsSaveWaitingAtTheStopIsCutShort() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:160x120@30", "--input", "b=synthetic:64x48@25",
            "--realtime",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitUntilAnswering(store)
        Thread.sleep(forTimeInterval: 1.5)
        let saves = try ["a", "b"].map { name in
            try ExternalTools.Child(
                Tool.rewindPath,
                [
                    "save", "--store", store, "--stream", name, "--before", "1s", "--after", "30s", "-o",
                    directory.appendingPathComponent("\(name).mkv").path,
                ])
        }
        try waitUntil("both saves wait", interval: .milliseconds(50)) {
            try Tool.rewind(["status", "--store", store]).output.contains("saves: 2 waiting")
        }
        recorder.process.terminate()
        for (name, save) in zip(["a", "b"], saves) {
            let saved = try save.finish(timeout: .seconds(60))
            #expect(saved.status == 69, "\(name): \(saved.output) \(saved.stderr)")
            #expect(saved.stderr.contains("was cut short at"), "\(name): \(saved.stderr)")
        }
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// A storeless recorder whose memory cannot hold a save's post-roll cuts it short while it goes on recording:
    /// the client says so, and why, with exit 1 (it blamed a stop that did not happen, with 69).
    @Test func aPostRollMemoryCannotHoldIsCutShortSayingWhy() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--spill", "off",
            "--memory", "2MiB", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        Thread.sleep(forTimeInterval: 1.5)
        let path = directory.appendingPathComponent("cut.mkv").path
        let save = try Tool.rewind(
            ["save", "--store", store, "--before", "1s", "--after", "10s", "-o", path], timeout: .seconds(60))
        #expect(save.status == 1, "\(save.output) \(save.stderr)")
        #expect(save.stderr.contains("was cut short at") && save.stderr.contains("had no room for the rest"))
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(recorder.process.isRunning, "the recorder goes on")
        // Markers live in a store, which it has none of: said, with what to do (it gave no way on).
        for command in [["mark", "--label", "x"], ["unmark", "--id", "1"]] {
            let refused = try Tool.rewind([command[0], "--store", store] + command.dropFirst())
            #expect(refused.status == 1, "\(command[0]): \(refused.stderr)")
            #expect(
                refused.stderr.contains(
                    "records without one (spill off): record with a store to mark; 'rewind "
                        + "unmark' changes a store no recorder runs on"), "\(command[0]): \(refused.stderr)")
        }
        recorder.process.terminate()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// A client interrupted before the recorder answers (here it is stopped by SIGSTOP, so the client waits on its
    /// first question, which streams the recorder records) ends cleanly: exit 130, no save requested or a save
    /// cancelled, no file kept. (The handlers were once installed only once the save had started: the signal ended the
    /// client at once, and a request already sent was made into a file for nobody.)
    @Test func aClientInterruptedBeforeTheAnswerCancelsItsSave() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--window", "5s",
        ])
        let process = recorder.process
        defer {
            kill(process.processIdentifier, SIGCONT)
            if process.isRunning { process.terminate() }
        }
        try Tool.waitUntilAnswering(store)
        kill(process.processIdentifier, SIGSTOP)
        let output = directory.appendingPathComponent("last.mkv").path
        let client = try ExternalTools.Child(Tool.rewindPath, ["save", "--store", store, "--last", "1s", "-o", output])
        // Time to ask the stopped recorder, which does not answer.
        Thread.sleep(forTimeInterval: 1)
        client.process.interrupt()
        Thread.sleep(forTimeInterval: 0.3)
        kill(process.processIdentifier, SIGCONT)
        let interrupted = try client.finish(timeout: .seconds(60))
        #expect(interrupted.status == 130, "a clean stop, not a death by the signal: \(interrupted.stderr)")
        #expect(interrupted.stderr.contains("interrupted: "), "\(interrupted.stderr)")
        #expect(interrupted.stderr.contains("no file was kept"), "\(interrupted.stderr)")
        // What the recorder was asked for, if the request got there: cancelled.
        let list = try ExternalTools.run(
            "curl", ["-s", "--max-time", "30", "--unix-socket", store + "/rewind.sock", "http://rewind/v1/saves"])
        let saves = try #require(
            (try JSONSerialization.jsonObject(with: list) as? [String: Any])?["saves"] as? [[String: Any]])
        #expect(saves.allSatisfy { $0["state"] as? String == "cancelled" }, "\(saves)")
        process.interrupt()
        #expect(try recorder.finish(timeout: .seconds(60)).status == 0)
        #expect(!FileManager.default.fileExists(atPath: output))
    }

    /// Stopping the recorder's whole process group (Ctrl-C in its terminal, `timeout`, a service manager) while it
    /// encodes a `.mp4` clip lets the clip finish: ffmpeg runs in a process group of its own, so the signal asks only
    /// the recorder to stop, and the recorder finishes its running exports before it exits. (ffmpeg shared the
    /// recorder's group: the signal ended it, the clip failed with ffmpeg's "Immediate exit requested" and no file.)
    @Test func stoppingTheRecordersProcessGroupLetsARunningMP4ClipFinish() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:1280x720@30", "--realtime", "--window", "30s",
            "--memory", "1GiB",
        ])
        let process = recorder.process
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let group = getpgid(process.processIdentifier)
        try #require(group == process.processIdentifier && group != getpgid(0), "the recorder leads its own group")
        try Tool.waitForSocket(of: store)
        try waitUntil("four seconds are recorded", interval: .milliseconds(50)) {
            let info = try Tool.rewind(["info", "--store", store, "--json"])
            let object = try? JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
            return ((object?["live"] as? [String: Any])?["memory_frames"] as? Int ?? 0) >= 125
        }
        let path = directory.appendingPathComponent("stopped.mp4").path
        let save = try ExternalTools.Child(
            Tool.rewindPath,
            ["clip", "--store", store, "--from", "0s", "--to", "4s", "--quality", "balanced", "-o", path])
        var encoder: pid_t = 0
        try waitUntil("the recorder's ffmpeg encodes the clip", interval: .milliseconds(5)) {
            encoder = childProcesses(of: process.processIdentifier).first { $0.name == "ffmpeg" }?.pid ?? 0
            return encoder > 0
        }
        #expect(getpgid(encoder) != group, "ffmpeg runs in a process group of its own")
        kill(-group, SIGINT)  // as Ctrl-C in the recorder's terminal
        let saved = try save.finish(timeout: .seconds(120))
        let stopped = try recorder.finish(timeout: .seconds(120))
        #expect(saved.status == 0, "\(saved.stderr)")
        #expect(stopped.status == 0, "\(stopped.stderr)")
        #expect(!stopped.stderr.contains("failed"), "\(stopped.stderr)")
        #expect(try probe(path, "stream=nb_read_frames") == "120")
    }

    /// The running processes whose parent is `parent`: pid and command name (from /proc).
    private func childProcesses(of parent: pid_t) -> [(pid: pid_t, name: String)] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { entry in
            guard let pid = pid_t(entry),
                let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")")
            else { return nil }
            // pid (comm) state ppid …
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 1, pid_t(fields[1]) == parent else { return nil }
            return (pid, String(stat[stat.index(after: open)..<close]))
        }
    }

    /// `--spill off` with a ring of about half a second: saves of the last 2 s, one after another, each finish at
    /// once with what memory holds, the ring keeps recording between them, and the frames their pins cost are
    /// counted as `pinned frames`.
    @Test func savesLongerThanASmallStorelessRingFinishAndTheRingKeepsRecording() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--memory", "2MiB",
            "--spill", "off", "--memory-pressure", "off",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        // No store on disk: the recorder's status says what memory holds.
        func live() -> [String: Any]? { Tool.firstStreamStatus(store: store) }
        try waitUntil("the ring is full", interval: .milliseconds(50)) { (live()?["memory_frames"] as? Int ?? 0) >= 16 }
        for round in 0..<3 {
            let path = directory.appendingPathComponent("save\(round).mkv").path
            let save = try Tool.rewind(["save", "--store", store, "--last", "2s", "-o", path], timeout: .seconds(60))
            #expect(save.status == 0, "round \(round): \(save.stderr)")
            #expect(save.output.contains("saved by the live recorder"), "\(save.output)")
            // The ring refills: new frames are stored again once the save's pins are released.
            let accepted = live()?["frames_accepted"] as? Int ?? 0
            try waitUntil("round \(round): the ring records on", interval: .milliseconds(50)) {
                let now = live()
                return (now?["frames_accepted"] as? Int ?? 0) >= accepted + 15
                    && (now?["memory_frames"] as? Int ?? 0) > 8
            }
        }
        process.interrupt()
        let result = try recorder.finish(timeout: .seconds(60))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(!result.output.contains("dropped (") || result.output.contains("pinned frames"), "\(result.output)")
    }

    /// A time of day or a wall-clock time without a zone is the local time of the shell that types it, also when the
    /// recorder runs in another zone (a service in UTC): the client writes its zone into the times it sends.
    @Test func aClipByTimeOfDayMeansTheClientsZoneWhereverTheRecorderRuns() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        var utc = ProcessInfo.processInfo.environment
        utc["TZ"] = "UTC"
        let recorder = try ExternalTools.Child(
            Tool.rewindPath,
            ["record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--window", "10s"],
            environment: utc)
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        func status() -> [String: Any]? { Tool.firstStreamStatus(store: store) }
        try waitUntil("two seconds are recorded", interval: .milliseconds(50)) {
            (status()?["frames_accepted"] as? Int ?? 0) >= 61
        }
        let wallZero = try #require(status()?["clock_wall_ns"] as? Int64)
        // A recorder time as a time of day `offset` seconds from UTC, to the millisecond; by default in Kolkata
        // (UTC+05:30 all year).
        func kolkata(_ recorderTime: Int64, offset: Int64 = 19_800) -> String {
            let local = wallZero + recorderTime + offset * 1_000_000_000
            let seconds = (local / 1_000_000_000) % 86_400
            func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
            return "\(two(seconds / 3600)):\(two(seconds / 60 % 60)):\(two(seconds % 60))."
                + String(String((local / 1_000_000) % 1000 + 1000).dropFirst())
        }
        var india = ProcessInfo.processInfo.environment
        india["TZ"] = "Asia/Kolkata"
        let output = directory.appendingPathComponent("clip.mkv").path
        let clip = try Tool.rewind(
            ["clip", "--store", store, "--from", kolkata(1_000_000_000), "--to", kolkata(1_500_000_000), "-o", output],
            environment: india)
        #expect(clip.status == 0, "\(clip.stderr)")
        // Frames 30…44 at 30 fps (the times are cut to the millisecond, so the range starts just before 1 s).
        #expect(
            clip.output.contains("wrote 15 frames") && clip.output.contains("pts 1.000s … 1.466s"), "\(clip.output)")
        // The ends in two zones, each with its offset: compared as the instants they are, not as times of day
        // (18:30 in Kolkata is before 13:00:01Z).
        let mixed = try Tool.rewind([
            "clip", "--store", store, "--from", kolkata(1_000_000_000) + "+05:30", "--to",
            kolkata(1_500_000_000, offset: 0) + "Z", "-o", output,
        ])
        #expect(mixed.status == 0, "\(mixed.stderr)")
        #expect(mixed.output.contains("wrote 15 frames"), "\(mixed.output)")
        // A marker's time of day too (cut to the millisecond: just before 1 s).
        let mark = try Tool.rewind(
            ["mark", "--store", store, "--label", "here", "--at", kolkata(1_000_000_000)], environment: india)
        #expect(mark.status == 0 && mark.output.contains("marked marker 1 at 0.99"), "\(mark.output) \(mark.stderr)")
        process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// A recorder killed while it exported left a hidden partial file in DIR/exports; the next recorder on the store
    /// removes it (its process is gone), and leaves one whose process still runs.
    @Test func aNewRecorderRemovesThePartialExportsAKilledOneLeft() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let exports = store + "/exports"
        try FileManager.default.createDirectory(atPath: exports, withIntermediateDirectories: true)
        let ended = try Tool.run("/bin/sh", ["-c", "echo $$"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        let abandoned = "\(exports)/.save-20261201T101010Z-1.mkv.partial-\(ended)-1"
        let running = "\(exports)/.save-20261201T101010Z-2.mkv.partial-\(getpid())-1"
        for path in [abandoned, running] { try Data("half".utf8).write(to: URL(fileURLWithPath: path)) }
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@10", "--realtime", "--duration", "30s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        #expect(!FileManager.default.fileExists(atPath: abandoned), "the killed recorder's partial file is gone")
        #expect(FileManager.default.fileExists(atPath: running), "a running process's partial file stays")
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// A recorder without a store (`--spill off`) in a directory whose store holds an earlier run's stream: its clock
    /// is its own, so `save` and `save --stream all` save the stream it records (not the stored one's newest second
    /// from the disk) and say nothing of the stored one.
    @Test func aStorelessRecorderSavesAllOfWhatItRecords() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let earlier = try Tool.rewind([
            "record", "--store", store, "--input", "b=synthetic:160x120@10", "--duration", "20s",
        ])
        #expect(earlier.status == 0, "\(earlier.stderr)")
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:160x120@10", "--realtime", "--spill", "off",
            "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        Thread.sleep(forTimeInterval: 1.5)
        for stream in [["--stream", "all"], []] {
            let saved = directory.appendingPathComponent("saved.mkv").path
            let save = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", saved] + stream)
            #expect(save.status == 0, "\(stream): \(save.output) \(save.stderr)")
            #expect(
                !save.stderr.contains("does not record b") && !save.stderr.contains("b has frames"), "\(save.stderr)")
            // The recorder's stream, from its memory: its first seconds, not b's last (19 s) from the disk.
            #expect(!save.output.contains("19.9"), "\(stream): \(save.output)")
        }
        recorder.process.terminate()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// An `-o` the system will not make (a directory that takes no new files, one that is a file, one that is not
    /// there) exits 1 whether the recorder writes it or the command does from the disk (with a recorder the first
    /// two exited 64, as if the command line were malformed).
    @Test func anOutputTheSystemWillNotMakeFailsAlikeWithARecorderAndWithout() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let file = directory.appendingPathComponent("afile").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
        let outputs = ["/proc/rewind-x.mkv", file + "/x.mkv", directory.appendingPathComponent("none/x.mkv").path]
        func statuses() throws -> [Int32] {
            try outputs.map { output in
                let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", output])
                #expect(!clip.stderr.isEmpty, "\(output): \(clip.output)")
                return clip.status
            }
        }
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@10", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitUntilAnswering(store)
        Thread.sleep(forTimeInterval: 1.5)
        let live = try statuses()
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
        let fromDisk = try statuses()
        #expect(live == [1, 1, 1], "\(live)")
        #expect(fromDisk == live, "\(fromDisk)")
    }

    /// A storeless recorder of two streams asks which, without `--stream`, as a store of two does (it saved both, to
    /// names not given); `--stream all` saves both.
    @Test func aStorelessRecorderOfSeveralStreamsAsksWhichToSave() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:160x120@10", "--input", "b=synthetic:96x64@10",
            "--realtime", "--spill", "off", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        Thread.sleep(forTimeInterval: 1.5)
        let output = directory.appendingPathComponent("saved.y4m").path
        for command in [["save", "--last", "1s"], ["clip", "--from", "0s", "--to", "1s"]] {
            let unnamed = try Tool.rewind([command[0], "--store", store, "-o", output] + command.dropFirst())
            #expect(unnamed.status == 64, "\(command): \(unnamed.output) \(unnamed.stderr)")
            #expect(unnamed.stderr.contains("the recorder records several streams (a, b): choose one"))
        }
        let all = try Tool.rewind(["save", "--store", store, "--stream", "all", "--last", "1s", "-o", output])
        #expect(all.status == 0, "\(all.stderr)")
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("saved.b.y4m").path))
        recorder.process.terminate()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// `clip --stream all` while the recorded stream has no frame yet (its input sent only its header) and a stored
    /// stream has frames in the range: the command names the stored stream and the clip that exports it, instead of
    /// saying the store holds no frames.
    @Test func allWithOnlyAStoredStreamInTheRangeNamesIt() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let earlier = try Tool.rewind([
            "record", "--store", store, "--input", "b=synthetic:160x120@10", "--duration", "2s",
        ])
        #expect(earlier.status == 0, "\(earlier.stderr)")
        let fifo = directory.appendingPathComponent("pipe.y4m").path
        let writer = try Tool.openFIFO(fifo, sending: Array("YUV4MPEG2 W160 H120 F10:1 Ip A1:1 C420jpeg\n".utf8))
        defer { close(writer) }
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=y4m:\(fifo)", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        let clip = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "1s", "-o",
            directory.appendingPathComponent("all.mkv").path,
        ])
        #expect(clip.status == 1, "\(clip.stderr)")
        #expect(
            clip.stderr.contains("b has frames in the range") && clip.stderr.contains("--stream b --from 0.000s"),
            "\(clip.stderr)")
        recorder.process.terminate()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// A live recorder of an input that does not say its chroma siting or pixel aspect, into a stream the store
    /// knows them of, saves from memory what exports from the disk say.
    @Test func aLiveSaveSaysTheChromaSitingAndPixelAspectTheStoreKnows() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let said = directory.appendingPathComponent("said.y4m").path
        try ExternalTools.makeY4M(
            said, width: 160, height: 120, rate: "10", frames: 10,
            extra: ["-chroma_sample_location", "left", "-aspect", "40:33"])
        let earlier = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(said)"])
        #expect(earlier.status == 0, "\(earlier.stderr)")
        let fifo = directory.appendingPathComponent("pipe.y4m").path
        let writer = try Tool.openFIFO(fifo, sending: Array("YUV4MPEG2 W160 H120 F10:1 Ip A0:0\n".utf8))
        defer { close(writer) }
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "y4m:\(fifo)", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitForSocket(of: store)
        // More than a pipe holds: written once the recorder reads.
        for index in 0..<5 {
            let frame = Array("FRAME\n".utf8) + [UInt8](repeating: UInt8(16 + index), count: 28_800)
            #expect(write(writer, frame, frame.count) == frame.count)
        }
        try waitUntil("the live recorder holds the 5 frames", interval: .milliseconds(50)) {
            let info = try Tool.rewind(["info", "--store", store, "--json"])
            let object = try? JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
            return (object?["live"] as? [String: Any])?["memory_frames"] as? Int == 5
        }
        let clip = directory.appendingPathComponent("live.y4m").path
        let save = try Tool.rewind(["save", "--store", store, "--last", "0.5s", "-o", clip])
        #expect(save.status == 0, "\(save.stderr)")
        #expect(save.output.contains("saved by the live recorder"), "\(save.output)")
        let probed = try probe(clip, "stream=sample_aspect_ratio,chroma_location,nb_read_frames")
        #expect(probed == "10:11,left,5", "\(probed)")
        // A picture of a frame shows it at its shape: 160 wide, 120 × 11/10 high.
        let picture = directory.appendingPathComponent("frame.png").path
        let fetched = try Tool.run(
            try Tool.path(of: "curl"),
            [
                "-s", "-f", "--max-time", "60", "--unix-socket", "\(store)/rewind.sock", "-o", picture,
                "http://rewind/v1/streams/camera/frame?at=100s&format=png",
            ])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        #expect(try probe(picture, "stream=width,height") == "160,132")
        recorder.process.terminate()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    /// A save into a FIFO: the recorder writes a regular file of its own, which the client copies into the FIFO,
    /// so a reader that is slow (or never reads) holds up the client, never the recorder; the API refuses the FIFO
    /// itself as a path, and the recorder stops at once after.
    @Test func aSaveToAFIFOIsCopiedThereByTheClient() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitForSocket(of: store)
        Thread.sleep(forTimeInterval: 1.5)
        let fifo = directory.appendingPathComponent("pipe.y4m").path
        try #require(mkfifo(fifo, 0o600) == 0)
        let copy = directory.appendingPathComponent("copy.y4m").path
        let reader = try ExternalTools.Child("/bin/sh", ["-c", "cat '\(fifo)' > '\(copy)'"])
        let save = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", fifo], timeout: .seconds(60))
        #expect(save.status == 0, "\(save.stderr)")
        #expect(save.output.contains("to \(fifo), pts"), "\(save.output)")
        #expect(try reader.finish(timeout: .seconds(30)).status == 0)
        let frames = Int(try probe(copy, "stream=nb_read_frames")) ?? -1
        #expect((29...31).contains(frames), "\(frames) frames in the copy")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: store + "/exports")) ?? []
        #expect(left.isEmpty, "the recorder's file is removed: \(left)")

        // Nobody reads the FIFO: the client says it waits for a reader, and Ctrl-C ends it (130), leaving nothing.
        try Tool.expectWaitForAReaderEndsOnInterrupt(
            ["save", "--store", store, "--last", "1s", "-o", fifo], fifo: fifo)
        let leftAfter = (try? FileManager.default.contentsOfDirectory(atPath: store + "/exports")) ?? []
        #expect(leftAfter.isEmpty, "nothing is left in exports: \(leftAfter)")

        let api = try Tool.run(
            try Tool.path(of: "curl"),
            [
                "-s", "--max-time", "30", "--unix-socket", store + "/rewind.sock", "-X", "POST",
                "http://rewind/v1/saves", "-d", "{\"last\":\"1s\",\"path\":\"\(fifo)\"}",
            ])
        #expect(api.output.contains("is a FIFO: the recorder writes regular files only"), "\(api.output)")
        let stopped = ContinuousClock.now
        recorder.process.terminate()
        #expect(try recorder.finish(timeout: .seconds(30)).status == 0)
        #expect(ContinuousClock.now - stopped < .seconds(10))
    }

    /// A recorder whose every connection is taken (64 clients holding them) answers 503: a clip of a range the disk
    /// holds whole is read from the disk, said so, as when it has 64 exports waiting.
    @Test func aClipFromARecorderWithEveryConnectionTakenIsReadFromTheDisk() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--duration", "60s",
            "--segment", "1s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        try waitUntil("two seconds are on disk", interval: .milliseconds(100)) {
            let info =
                try? JSONSerialization.jsonObject(
                    with: try Tool.rewind(["info", "--store", store, "--json"]).stdout) as? [String: Any]
            return (info?["frames"] as? Int ?? 0) >= 60
        }
        // 64 connections, each with a request begun and never finished, for 8 s (within the 10 s a request has).
        let holder = try ExternalTools.Child(
            try Tool.path(of: "python3"),
            [
                "-c",
                """
                import socket, sys, time
                held = []
                for _ in range(64):
                    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.send(b"GET /v1/health HTTP/1.1\\r\\n")
                    held.append(s)
                print("held", flush=True); time.sleep(8)
                """,
                store + "/rewind.sock",
            ])
        defer { if holder.process.isRunning { holder.process.terminate() } }
        try waitUntil("every connection is held") {
            (try? Tool.rewind(["status", "--store", store]))?.stderr.contains("too many connections") == true
        }
        let output = directory.appendingPathComponent("clip.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", output])
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(
            clip.stderr.contains("too many connections") && clip.stderr.contains("exported from the store on disk"),
            "\(clip.stderr)")
        #expect(clip.output.contains("wrote 30 frames"), "\(clip.output)")
        recorder.process.interrupt()
        _ = try recorder.finish()
    }

    /// While a recorder runs, a stream of the store it does not record (a camera of an earlier run) is exported from
    /// the disk, alone or in `all` over a range on disk, saying so; `all` over a range that needs the recorder is
    /// exported by it for the streams it records, failing when a stored one has frames there; a post-roll save or a
    /// marker of a stored stream, which need a recorder recording it, are refused (69).
    @Test func streamsTheRecorderDoesNotRecordAreExportedFromDisk() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let earlier = try Tool.rewind([
            "record", "--store", store, "--input", "b=synthetic:160x120@10", "--realtime", "--duration", "2s",
        ])
        #expect(earlier.status == 0, "\(earlier.stderr)")
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:160x120@10", "--realtime", "--duration", "30s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        let one = directory.appendingPathComponent("b.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--stream", "b", "--from", "0s", "--to", "1s", "-o", one])
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(clip.output.contains("wrote 10 frames"), "\(clip.output)")
        #expect(clip.stderr.contains("the running recorder does not record b: exported from the store on disk"))
        #expect(!clip.stderr.contains("the streams it records"), "b alone: nothing of a to miss: \(clip.stderr)")
        try waitUntil("some of stream a is on disk", interval: .milliseconds(100)) {
            let info =
                try? JSONSerialization.jsonObject(
                    with: try Tool.rewind(["info", "--store", store, "--json"]).stdout) as? [String: Any]
            let streams = info?["streams"] as? [[String: Any]] ?? []
            return streams.contains { $0["name"] as? String == "a" && ($0["frames"] as? Int ?? 0) > 0 }
        }
        // `all` over a range on disk (b's frames, before a began): from the disk, a track for b, which holds frames.
        let both = directory.appendingPathComponent("all.mkv").path
        let all = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "1s", "-o", both,
        ])
        #expect(all.status == 0, "\(all.stderr)")
        let tracks = try runChecked(
            "ffprobe", ["-v", "error", "-show_entries", "stream=index", "-of", "csv=p=0", both])
        #expect(tracks.output.split(separator: "\n").count == 1, "\(tracks.output)")
        #expect(all.stderr.contains("the running recorder does not record b: exported from the store on disk"))
        // A save of `all` ends at the newest frame, which only the recorder holds: it saves the stream it records
        // (from memory), and says b has no frames in the range.
        let saved = directory.appendingPathComponent("saved.mkv").path
        let save = try Tool.rewind(["save", "--store", store, "--stream", "all", "--last", "1s", "-o", saved])
        #expect(save.status == 0, "\(save.stderr)")
        #expect(save.output.contains("saved by the live recorder (the streams it records: a)"), "\(save.output)")
        #expect(save.stderr.contains("b, which the running recorder does not record, has no frames"), "\(save.stderr)")
        // Without -o a stored stream has nowhere to go (the recorder writes its saves, not the disk export).
        let nowhere = try Tool.rewind(["save", "--store", store, "--stream", "b", "--last", "1s"])
        #expect(nowhere.status == 64, "\(nowhere.stderr)")
        #expect(nowhere.stderr.contains("does not record the stream asked for"), "\(nowhere.stderr)")
        #expect(!nowhere.stderr.contains("no recorder is running"), "\(nowhere.stderr)")
        // `all` over a range that reaches the recorder's newest frames and holds b's: a is exported by the recorder,
        // and the command fails naming b and how to export it.
        let reaching = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "600s", "-o", both,
        ])
        #expect(reaching.status == 1, "\(reaching.output) \(reaching.stderr)")
        #expect(reaching.output.contains("exported by the live recorder (the streams it records: a)"))
        // The advice keeps the range asked for: the recorder cuts its clip at its newest frame, b's frames on disk
        // are not.
        #expect(
            reaching.stderr.contains("b has frames in the range, and the running recorder does not record it")
                && reaching.stderr.contains("--stream b --from 0.000s --to 600.000s"), "\(reaching.stderr)")
        // The API's clip of `all` names b under `not_recorded`; one of a alone does not.
        func apiClip(_ stream: String, to: String = "600s") throws -> [String: Any] {
            let body = "{\"stream\":\"\(stream)\",\"from\":\"0s\",\"to\":\"\(to)\",\"wait\":true}"
            let answer = try runChecked(
                "curl",
                [
                    "-s", "--max-time", "60", "--unix-socket", store + "/rewind.sock", "-X", "POST", "-d", body,
                    "http://rewind/v1/clips",
                ])
            return try #require(try JSONSerialization.jsonObject(with: answer.stdout) as? [String: Any])
        }
        let apiAll = try apiClip("all")
        #expect(apiAll["state"] as? String == "done" && apiAll["not_recorded"] as? [String] == ["b"], "\(apiAll)")
        let apiA = try apiClip("a")
        #expect(apiA["state"] as? String == "done" && apiA["not_recorded"] == nil, "\(apiA)")
        // Over b's frames alone (before a began): the answer names b and how to clip it, not a's span as the store's.
        let onlyB = try apiClip("all", to: "1s")
        let message = (onlyB["error"] as? [String: Any])?["message"] as? String ?? ""
        #expect(message.contains("the store's 'b', which it does not record, has: clip it by name"), "\(onlyB)")
        let postRoll = try Tool.rewind([
            "save", "--store", store, "--stream", "b", "--before", "1s", "--after", "1s", "-o", one,
        ])
        #expect(postRoll.status == 69 && postRoll.stderr.contains("does not record b"), "\(postRoll.stderr)")
        // A marker of b needs a recorder recording it too.
        let mark = try Tool.rewind(["mark", "--store", store, "--stream", "b", "--label", "x"])
        #expect(mark.status == 69 && mark.stderr.contains("does not record b: a marker needs"), "\(mark.stderr)")
        // info of one stream shows the recorder's memory of that stream only, none for one it does not record.
        func live(_ stream: String) throws -> Any? {
            let info = try JSONSerialization.jsonObject(
                with: try Tool.rewind(["info", "--store", store, "--stream", stream, "--json"]).stdout)
            return (info as? [String: Any])?["live"]
        }
        #expect(try live("b") is NSNull)
        #expect((try live("a") as? [String: Any])?["stream"] as? String == "a")
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
    }
}
