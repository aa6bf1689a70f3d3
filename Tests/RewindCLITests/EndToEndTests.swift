import Foundation
import RewindTesting
import Testing

/// A YUV4MPEG2 test source made by ffmpeg, and what ffmpeg says its frames are.
struct Source {
    let path: String
    let frames: Int
    let rate: (Int64, Int64)  // numerator, denominator (frames per second)

    /// Makes `frames` frames of `testsrc2` at `size` and `rate` (e.g. "30000/1001").
    init(size: String, rate: String, frames: Int, pixelFormat: String = "yuv420p", in directory: URL) throws {
        path = directory.appendingPathComponent("source-\(size)-\(frames).y4m").path
        let parts = rate.split(separator: "/").map { Int64($0)! }
        self.rate = (parts[0], parts.count > 1 ? parts[1] : 1)
        self.frames = frames
        let (width, height) = (size.split(separator: "x")[0], size.split(separator: "x")[1])
        try runChecked(
            "ffmpeg",
            [
                "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=size=\(size):rate=\(rate)",
                "-vf", "scale=\(width):\(height)", "-frames:v", "\(frames)", "-pix_fmt", pixelFormat,
                "-f", "yuv4mpegpipe", "-y", path,
            ])
    }

    /// The pts of frame `index` in nanoseconds (frame index × frame duration, rounded down).
    func pts(_ index: Int) -> Int64 {
        Int64((Int128(index) * Int128(rate.1) * 1_000_000_000) / Int128(rate.0))
    }
}

@discardableResult
func runChecked(_ tool: String, _ arguments: [String]) throws -> ToolResult {
    let result = try Tool.run(try Tool.path(of: tool), arguments)
    if result.status != 0 {
        Issue.record("\(tool) \(arguments.joined(separator: " ")) failed (\(result.status)): \(result.stderr)")
    }
    return result
}

/// The MD5 of each frame of `path` decoded to yuv420p, from `ffmpeg -f framemd5`.
func frameMD5s(_ path: String) throws -> [String] {
    let result = try runChecked(
        "ffmpeg",
        [
            "-hide_banner", "-loglevel", "error", "-i", path, "-fps_mode", "passthrough", "-pix_fmt", "yuv420p", "-f",
            "framemd5", "-",
        ])
    return result.output.split(separator: "\n").filter { !$0.hasPrefix("#") }.map {
        String($0.split(separator: ",").last!.trimmingCharacters(in: .whitespaces))
    }
}

/// `rewind info --json` of a store, parsed.
func info(_ store: String) throws -> [String: Any] {
    let result = try Tool.rewind(["info", "--store", store, "--json"])
    #expect(result.status == 0, "\(result.stderr)")
    return try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any] ?? [:]
}

@Suite(.timeLimit(.minutes(45))) struct EndToEndTests {
    /// A file of tiny frames at a high rate (16x16 at 100 000 fps): the ring's 16 384 slots fill before its bytes
    /// do, and the reader waits for the spill stage by slots too, so every frame is stored, none lost.
    @Test func aFileOfManyTinyFramesIsStoredWhole() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let frames = 60_000
        var bytes = Data("YUV4MPEG2 W16 H16 F100000:1 Ip C420jpeg\n".utf8)
        for index in 0..<frames {
            bytes.append(contentsOf: Array("FRAME\n".utf8))
            bytes.append(contentsOf: [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: 384))
        }
        let input = directory.appendingPathComponent("tiny.y4m")
        try bytes.write(to: input)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(input.path)"])
        #expect(record.status == 0, "\(record.output)\(record.stderr)")
        #expect(record.output.contains("recorded \(frames) frames"), "\(record.output)")
        let stored = try info(store)
        #expect(stored["frames"] as? Int == frames)
        #expect(stored["drops"] as? Int == 0, "\(stored["drops_by_reason"] ?? "")")
        // Frames 10 µs apart: the pts they span are said to the nanosecond, not as `0.000s … 0.000s`.
        let clip = try Tool.rewind([
            "clip", "--store", store, "--from", "0s", "--to", "1ms", "-o",
            directory.appendingPathComponent("c.y4m").path,
        ])
        #expect(clip.status == 0 && clip.output.contains("wrote 100 frames"), "\(clip.output)\(clip.stderr)")
        #expect(clip.output.contains("pts 0ns … 990000ns"), "\(clip.output)")
    }

    @Test(arguments: [("320x240", "30000/1001", 90), ("321x241", "25", 60), ("640x360", "60", 150)])
    func y4mRecordThenClipIsFrameExactAcrossSegments(size: String, rate: String, frameCount: Int) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try Source(size: size, rate: rate, frames: frameCount, in: directory)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(source.path)", "--segment", "1s"])
        #expect(record.status == 0, "\(record.stderr)")
        #expect(record.output.contains("recorded \(frameCount) frames"))

        let sourceMD5s = try frameMD5s(source.path)
        #expect(sourceMD5s.count == frameCount)
        // A range that starts and ends inside segments (segments are 1 s long).
        let first = frameCount / 5 + 1
        let end = frameCount - frameCount / 7
        let from = "\(source.pts(first))ns"
        let to = "\(source.pts(end))ns"
        for format in ["y4m", "mkv"] {
            let output = directory.appendingPathComponent("clip.\(format)").path
            let clip = try Tool.rewind(["clip", "--store", store, "--from", from, "--to", to, "-o", output])
            #expect(clip.status == 0, "\(clip.stderr)")
            #expect(clip.output.contains("wrote \(end - first) frames"))
            #expect(try frameMD5s(output) == Array(sourceMD5s[first..<end]), "\(format) frames equal the source's")
        }
        // The Matroska file carries exactly the stored pts (time base 1/1e9).
        let mkv = directory.appendingPathComponent("clip.mkv").path
        let probe = try runChecked(
            "ffprobe", ["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts", "-of", "csv=p=0", mkv])
        let pts = probe.output.split(separator: "\n").compactMap { Int64($0.trimmingCharacters(in: .whitespaces)) }
        #expect(pts == (first..<end).map { source.pts($0) })

        let mp4 = directory.appendingPathComponent("clip.mp4").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", from, "--to", to, "-o", mp4])
        #expect(clip.status == 0, "\(clip.stderr)")
        let counted = try runChecked(
            "ffprobe",
            [
                "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                "stream=nb_read_frames,duration", "-of", "default=nw=1", mp4,
            ])
        #expect(counted.output.contains("nb_read_frames=\(end - first)"))
        let duration = counted.output.split(separator: "\n").first { $0.hasPrefix("duration=") }
            .flatMap { Double($0.dropFirst("duration=".count)) }
        let expected = Double(end - first) * Double(source.rate.1) / Double(source.rate.0)
        #expect(abs((duration ?? 0) - expected) < 0.002, "mp4 duration \(duration ?? -1) vs \(expected)")

        // save --last: the newest frames.
        let saved = directory.appendingPathComponent("last.y4m").path
        let save = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", saved])
        #expect(save.status == 0, "\(save.stderr)")
        let lastCount = (0..<frameCount).filter { source.pts($0) > source.pts(frameCount - 1) - 1_000_000_000 }.count
        #expect(try frameMD5s(saved) == Array(sourceMD5s.suffix(lastCount)))
    }

    @Test func infoJSONAgreesWithTheIndex() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(
            ["record", "--store", store, "--input", "synthetic:320x180@30", "--duration", "4s", "--segment", "1s"])
        #expect(record.status == 0, "\(record.stderr)")
        let json = try info(store)
        let query = try runChecked(
            "sqlite3",
            [
                "-readonly", "\(store)/index.sqlite",
                "SELECT count(*), min(pts_ns), max(pts_ns), sum(raw_length), sum(stored_length) FROM frames; "
                    + "SELECT count(*) FROM segments WHERE state != 'deleting'; SELECT count(*) FROM gaps;",
            ])
        let lines = query.output.split(separator: "\n").map { $0.split(separator: "|").map { Int64($0)! } }
        #expect(json["frames"] as? Int64 == lines[0][0])
        #expect(json["frames"] as? Int == 120)
        #expect(json["first_pts_ns"] as? Int64 == lines[0][1])
        #expect(json["last_pts_ns"] as? Int64 == lines[0][2])
        #expect(json["raw_bytes"] as? Int64 == lines[0][3])
        #expect(json["stored_bytes"] as? Int64 == lines[0][4])
        #expect(json["segments"] as? Int64 == lines[1][0])
        #expect((json["gaps"] as? [Any])?.count == Int(lines[2][0]))
        #expect(json["drops"] as? Int == 0)
        #expect(lines[1][0] >= 4, "1 s segments over 4 s")
        // After the stop, the index file alone (its WAL left behind, as a copy of the one file would) holds every
        // frame: the WAL was copied in when the last writer closed.
        let copy = directory.appendingPathComponent("copy.sqlite").path
        try FileManager.default.copyItem(atPath: "\(store)/index.sqlite", toPath: copy)
        let alone = try runChecked("sqlite3", ["-readonly", copy, "SELECT count(*) FROM frames"])
        #expect(alone.output.trimmingCharacters(in: .whitespacesAndNewlines) == "120")
    }

    /// The rows a recording writes after its segments are sealed (an input that failed: its gap; the drop
    /// counters) are in `index.sqlite` alone after the stop too, not only in its WAL.
    @Test func theIndexFileAloneHoldsTheRowsWrittenAfterTheLastSeal() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let whole = directory.appendingPathComponent("a.y4m").path
        let cut = directory.appendingPathComponent("b.y4m").path
        try ExternalTools.makeY4M(whole, width: 160, height: 120, rate: "30", frames: 60)
        try ExternalTools.makeY4M(cut, width: 160, height: 120, rate: "30", frames: 30)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: cut))
        try handle.truncate(atOffset: try handle.seekToEnd() - 1000)  // the last frame cut short
        try handle.close()
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "a=y4m:" + whole, "--input", "b=y4m:" + cut,
        ])
        #expect(record.status == 65, "\(record.output) \(record.stderr)")
        let copy = directory.appendingPathComponent("copy.sqlite").path
        try FileManager.default.copyItem(atPath: "\(store)/index.sqlite", toPath: copy)
        let rows =
            "SELECT stream_id, start_ns, end_ns, reason FROM gaps ORDER BY id; SELECT * FROM drops ORDER BY 1, 2;"
        let stored = try runChecked("sqlite3", ["-readonly", "\(store)/index.sqlite", rows]).output
        let alone = try runChecked("sqlite3", ["-readonly", copy, rows]).output
        #expect(stored.contains("input failed"), "\(stored)")
        #expect(alone == stored)
    }

    @Test func wallClockRangesMapToTheFramesCapturedThen() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x90@10", "--duration", "5s"])
        #expect(record.status == 0, "\(record.stderr)")
        let query = try runChecked(
            "sqlite3", ["-readonly", "\(store)/index.sqlite", "SELECT wall_ns FROM frames ORDER BY pts_ns LIMIT 1"])
        let firstWall = try #require(Int64(query.output.trimmingCharacters(in: .whitespacesAndNewlines)))
        // [first + 1.05 s, first + 2.05 s) in wall-clock time: frames 11…20 at 10 fps.
        func iso(_ nanoseconds: Int64) -> String {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            return formatter.string(from: Date(timeIntervalSince1970: Double(nanoseconds) / 1e9))
        }
        let output = directory.appendingPathComponent("wall.mkv").path
        let clip = try Tool.rewind([
            "clip", "--store", store, "--from", iso(firstWall + 1_050_000_000), "--to", iso(firstWall + 2_050_000_000),
            "-o", output,
        ])
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(clip.output.contains("wrote 10 frames"), "\(clip.output)")
        #expect(clip.output.contains("pts 1.100s … 2.000s"), "\(clip.output)")
    }

    @Test func garbageIndexIsRefusedClearlyThenRebuiltByRepairWithoutLosingAFrame() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        #expect(
            try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x90@30", "--duration", "2s"])
                .status == 0)
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: "\(store)/index.sqlite\(suffix)")
        }
        try Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7919) }).write(
            to: URL(fileURLWithPath: "\(store)/index.sqlite"))
        for command in ["info", "verify", "record"] {
            let result = try Tool.rewind(
                [command, "--store", store, "--input", "synthetic:160x90@30"].prefix(
                    command == "record" ? 5 : 3
                ).map { $0 })
            #expect(result.status == 1, "\(command)")
            #expect(result.stderr.contains("is not a SQLite database"), "\(command): \(result.stderr)")
            #expect(result.stderr.contains("rewind verify --repair"), "\(command)")
        }
        let segments = try FileManager.default.contentsOfDirectory(atPath: "\(store)/segments")
        #expect(!segments.isEmpty, "nothing was deleted")
        // A folder holding only such an index is left as it was found: no segments/ made for a store refused.
        let bare = directory.appendingPathComponent("bare").path
        try FileManager.default.createDirectory(atPath: bare, withIntermediateDirectories: false)
        try Data(repeating: 0x5A, count: 4096).write(to: URL(fileURLWithPath: "\(bare)/index.sqlite"))
        let refused = try Tool.rewind(["record", "--store", bare, "--input", "synthetic:160x90@30"])
        #expect(refused.status == 1 && refused.stderr.contains("is not a SQLite database"), "\(refused.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: bare) == ["index.sqlite"])
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(repair.output.contains("moved the damaged index to"))
        #expect(repair.output.contains("their frames are indexed again from the files"), "\(repair.output)")
        #expect(!repair.output.contains("there is no "), "the journals were made with the store: \(repair.output)")
        #expect(try info(store)["frames"] as? Int == 60)
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)

        // A deleted index: reading says how to rebuild it; the next recording rebuilds it, and the journals made
        // with the store leave nothing it must say is gone.
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: "\(store)/index.sqlite\(suffix)")
        }
        let unread = try Tool.rewind(["info", "--store", store])
        #expect(unread.status == 1, "\(unread.stderr)")
        #expect(
            unread.stderr.contains(
                "if index.sqlite is missing, run 'rewind verify --repair', which rebuilds it from the segment files"),
            "\(unread.stderr)")
        let again = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x90@30", "--duration", "1s"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stderr.contains("recovered the store: the index knew none of the "), "\(again.stderr)")
        #expect(!again.stderr.contains("there is no "), "\(again.stderr)")
        #expect(try info(store)["frames"] as? Int == 90)
    }

    /// A second stop signal while the recorder finishes (here a save it is encoding, which a stop waits for) ends
    /// it at once (by the signal: 143 in a shell), saying what that cost, not silently.
    @Test func aSecondSignalSaysWhatItCost() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:1280x720@30", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitForSocket(of: store)
        try waitUntil("four seconds are recorded", timeout: .seconds(60)) {
            (Tool.firstStreamStatus(store: store)?["frames_accepted"] as? Int ?? 0) >= 120
        }
        let save = try Tool.startRewind([
            "save", "--store", store, "--last", "4s", "--quality", "lossless", "-o",
            directory.appendingPathComponent("last.mp4").path,
        ])
        defer { if save.process.isRunning { save.process.terminate() } }
        try waitUntil("the save is exporting", timeout: .seconds(60)) {
            let status =
                try? JSONSerialization.jsonObject(
                    with: try Tool.rewind(["status", "--store", store, "--json"]).stdout) as? [String: Any]
            return (status?["saves_exporting"] as? Int ?? 0) > 0
        }
        kill(recorder.process.processIdentifier, SIGTERM)
        Thread.sleep(forTimeInterval: 0.3)
        kill(recorder.process.processIdentifier, SIGTERM)
        let ended = try recorder.finish(timeout: .seconds(60))
        #expect(ended.status == SIGTERM, "killed by the signal: \(ended.output)\(ended.stderr)")
        #expect(
            ended.stderr.contains("stopped at once by a second signal: frames accepted but not yet written are lost"),
            "\(ended.stderr)")
        _ = try save.finish(timeout: .seconds(60))
    }

    /// The index's -wal deleted under a running recorder: a reader is told so (the recorder keeps the file open and
    /// writes every row into index.sqlite when it stops), not only "check the disk"; once it stops, every frame is
    /// there.
    @Test func aWALDeletedUnderARunningRecorderIsNamedAndNothingIsLost() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x90@30", "--realtime", "--duration", "4s",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitForSocket(of: store)
        try waitUntil("the index has frames in its -wal", interval: .milliseconds(50)) {
            (try? info(store)["frames"] as? Int ?? 0) ?? 0 > 0
        }
        try FileManager.default.removeItem(atPath: store + "/index.sqlite-wal")
        let read = try Tool.rewind(["info", "--store", store])
        #expect(read.status == 1, "\(read.output)")
        #expect(
            read.stderr.contains("index.sqlite-wal is missing or empty (deleted?) while the recorder writes the index"),
            "\(read.stderr)")
        // A marker is the recorder's to make: it needs no read of the index.
        let mark = try Tool.rewind(["mark", "--store", store, "--stream", "camera", "--label", "still"])
        #expect(mark.status == 0, "\(mark.stderr)")
        let unknown = try Tool.rewind(["mark", "--store", store, "--stream", "nope", "--label", "x"])
        #expect(unknown.status == 64 && unknown.stderr.contains("no stream 'nope' in the store; it has: camera"))
        let ended = try recorder.finish(timeout: .seconds(60))
        #expect(ended.status == 0, "\(ended.stderr)")
        #expect(try info(store)["frames"] as? Int == 120)
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)
    }

    /// The index, or `segments/`, deleted under a running recorder: it ends with exit 1 saying so and what the
    /// repair does (it said the store held every frame, exit 0); a deleted `segments/` is made again for what comes
    /// after, which the repair keeps.
    @Test(arguments: ["index", "segments"]) func aStoreEntryDeletedUnderARecordingIsNamedAtItsEnd(entry: String) throws
    {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x90@30", "--realtime", "--duration", "4s",
            "--segment", "1s",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitForSocket(of: store)
        try waitUntil("a segment is sealed", interval: .milliseconds(50)) {
            ((try? FileManager.default.contentsOfDirectory(atPath: store + "/segments")) ?? []).contains("000001.seg")
        }
        if entry == "index" {
            for suffix in ["", "-wal", "-shm"] {
                try FileManager.default.removeItem(atPath: store + "/index.sqlite" + suffix)
            }
        } else {
            try FileManager.default.removeItem(atPath: store + "/segments")
        }
        let ended = try recorder.finish(timeout: .seconds(60))
        #expect(ended.status == 1, "\(ended.stderr)")
        #expect(
            ended.stderr.contains(
                entry == "index"
                    ? "index.sqlite was deleted while recording" : "segments was deleted while recording"),
            "\(ended.stderr)")
        #expect(ended.stderr.contains("run 'rewind verify --repair'"), "\(ended.stderr)")
        // The exit line does not call frames durable that went with the directory.
        #expect(ended.output.contains(entry == "index" ? "120 durable" : " written to disk in "), "\(ended.output)")
        #expect(entry == "index" || !ended.output.contains(" durable"), "\(ended.output)")
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        let frames = try info(store)["frames"] as? Int ?? 0
        // The index rebuilt from every file; or the files after the deletion kept.
        #expect(entry == "index" ? frames == 120 : frames > 0 && frames < 120, "\(frames)")
    }

    /// A segment of another store copied over one of this store's: `verify` names it, the repair sets it aside as
    /// `.foreign` (its place a `damaged` gap), and `info` lists what repairs set aside, with sizes, so the disk
    /// space it takes is not a mystery.
    @Test func aSegmentOfAnotherStoreIsSetAsideAndInfoNamesIt() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (store, other) = (directory.path + "/p", directory.path + "/q")
        for path in [store, other] {
            let recorded = try Tool.rewind([
                "record", "--store", path, "--input", "synthetic:160x90@25", "--duration", "3s", "--segment", "1s",
            ])
            #expect(recorded.status == 0, "\(recorded.stderr)")
        }
        try FileManager.default.removeItem(atPath: store + "/segments/000002.seg")
        try FileManager.default.copyItem(atPath: other + "/segments/000002.seg", toPath: store + "/segments/000002.seg")
        let checked = try Tool.rewind(["verify", "--store", store])
        #expect(checked.status == 1)
        #expect(checked.output.contains("segment 000002.seg is not the file the index knew"), "\(checked.output)")
        let repaired = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repaired.status == 0, "\(repaired.output)")
        #expect(repaired.output.contains("moved segments/000002.seg aside as 000002.seg.foreign"), "\(repaired.output)")
        let shown = try Tool.rewind(["info", "--store", store])
        #expect(shown.output.contains("set aside by repairs"), "\(shown.output)")
        #expect(shown.output.contains("segments/000002.seg.foreign ("), "\(shown.output)")
        let object = try info(store)
        #expect(object["frames"] as? Int == 50)
        let aside = object["set_aside"] as? [[String: Any]]
        #expect(aside?.map { $0["file"] as? String } == ["000002.seg.foreign"], "\(String(describing: aside))")
        #expect((aside?.first?["bytes"] as? Int ?? 0) > 0)
        #expect(((object["gaps"] as? [[String: Any]]) ?? []).map { $0["reason"] as? String } == ["damaged"])
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)
    }

    @Test func stdinInputRecordsEveryFrame() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try Source(size: "160x120", rate: "30", frames: 45, in: directory)
        let store = directory.appendingPathComponent("store").path
        let data = try Data(contentsOf: URL(fileURLWithPath: source.path))
        let record = try Tool.rewind(["record", "--store", store, "--input", "-"], stdin: data)
        #expect(record.status == 0, "\(record.stderr)")
        #expect(try info(store)["frames"] as? Int == 45)
    }

    @Test func sigintFinishesCleanlyWithEveryAcceptedFrameDurable() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@60", "--realtime",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        // Interrupted once it has recorded half a second (it serves its socket while recording).
        try waitUntil("the recorder holds more than 30 frames in memory", interval: .milliseconds(50)) {
            let info = try Tool.rewind(["info", "--store", store, "--json"])
            let object = try? JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
            return ((object?["live"] as? [String: Any])?["memory_frames"] as? Int ?? 0) > 30
        }
        recorder.process.interrupt()
        let finished = try recorder.finish()
        let text = finished.output
        #expect(finished.status == 0, "\(finished.stderr)")
        #expect(text.contains("stopped"))
        // "recorded N frames …; N durable"
        let words = text.split(separator: " ")
        let recorded = words.firstIndex(of: "recorded").flatMap { Int(words[$0 + 1]) }
        let durable = words.firstIndex(of: "durable").flatMap { Int(words[$0 - 1]) }
        #expect((recorded ?? 0) > 30)
        #expect(recorded == durable)
        #expect(try info(store)["frames"] as? Int == recorded)
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.output)")
    }

    @Test func truncatedFinalFrameKeepsEverythingBeforeIt() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try Source(size: "160x120", rate: "30", frames: 10, in: directory)
        let data = try Data(contentsOf: URL(fileURLWithPath: source.path))
        let truncated = directory.appendingPathComponent("truncated.y4m")
        try data.prefix(data.count - 1000).write(to: truncated)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(truncated.path)"])
        #expect(record.status == 65)
        #expect(record.stderr.contains("truncated"))
        #expect(record.stderr.contains("byte"))
        #expect(try info(store)["frames"] as? Int == 9)
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)
    }

    @Test(arguments: [
        ("YUV4MPEG2 H120 F30:1\n", "W"),
        ("YUV4MPEG2 W160 H120 F30:1 C444\n", "444"),
        ("YUV4MPEG2 W160 H120 F30:1 C444\n", "-pix_fmt yuv420p -f yuv4mpegpipe"),
        // More than 8 bits: the advice keeps 10 of them.
        ("YUV4MPEG2 W160 H120 F30:1 C422p10\n", "-pix_fmt yuv420p10le -strict -1"),
        ("YUV4MPEG2 W160 H120 F30:1 Cmono12\n", "-pix_fmt yuv420p10le -strict -1"),
        ("YUV4MPEG3 W160 H120 F30:1\n", "YUV4MPEG2"),
        ("", "header"),
    ])
    func malformedHeaderIsADataError(header: String, mentions: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("bad.y4m")
        try Data(header.utf8).write(to: input)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(input.path)"])
        #expect(record.status == 65, "\(record.stderr)")
        #expect(record.stderr.contains(mentions), "\(record.stderr)")
    }

    @Test func emptyRangeSaysWhatTheStoreHoldsAndWritesNothing() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        #expect(
            try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x90@30", "--duration", "1s"])
                .status == 0)
        let output = directory.appendingPathComponent("none.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "5s", "--to", "6s", "-o", output])
        #expect(clip.status == 1)
        #expect(clip.stderr.contains("no frames in [5.000s, 6.000s)"))
        #expect(clip.stderr.contains("the store holds 0.000s … 0.966s"))
        #expect(!FileManager.default.fileExists(atPath: output))
        let backwards = try Tool.rewind(["clip", "--store", store, "--from", "1s", "--to", "0s", "-o", output])
        #expect(backwards.status == 64, "\(backwards.stderr)")
        #expect(backwards.stderr.contains("give a --to later than --from"))
        let nowhere = directory.appendingPathComponent("nope").path
        let missing = try Tool.rewind(["info", "--store", nowhere])
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("no store at"))
        // Editing a store that is not there makes none; an unknown marker is not found (exit 1).
        let unmarkNowhere = try Tool.rewind(["unmark", "--store", nowhere, "3"])
        #expect(unmarkNowhere.status == 1 && unmarkNowhere.stderr.contains("no store at"), "\(unmarkNowhere.stderr)")
        #expect(!FileManager.default.fileExists(atPath: nowhere))
        // A folder with neither an index nor segment files is no store to check either.
        try FileManager.default.createDirectory(atPath: nowhere, withIntermediateDirectories: true)
        let verifyEmpty = try Tool.rewind(["verify", "--store", nowhere])
        #expect(
            verifyEmpty.status == 1 && verifyEmpty.stderr.contains("no store at '\(nowhere)'"), "\(verifyEmpty.stderr)")
        let unknownMarker = try Tool.rewind(["unmark", "--store", store, "3"])
        #expect(unknownMarker.status == 1 && unknownMarker.stderr.contains("no marker 3"), "\(unknownMarker.stderr)")
        let badExtension = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", "x.avi"])
        #expect(badExtension.status == 64)
    }

    /// `--store` naming a file: every command refuses it as a usage error before doing anything, and the file is
    /// left as it was.
    @Test func aStoreThatIsAFileIsRefusedByEveryCommand() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("afile").path
        try Data("not a store".utf8).write(to: URL(fileURLWithPath: file))
        for arguments in [
            ["info"], ["verify"], ["verify", "--repair"], ["clip", "--from", "0s", "--to", "1s", "-o", "x.mkv"],
            ["save", "--last", "1s", "-o", "x.mkv"], ["record", "--input", "synthetic:160x90@30", "--duration", "1s"],
            ["status"], ["markers"],
        ] {
            let result = try Tool.rewind([arguments[0], "--store", file] + arguments.dropFirst())
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("'\(file)' is a file, not a store directory"), "\(result.stderr)")
        }
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "not a store")

        // A link to nothing is named as one (not "No such file"), and nothing is made where it points; a device is
        // not "a file".
        let dangling = directory.appendingPathComponent("dangling").path
        let missing = directory.appendingPathComponent("gone/store").path
        try FileManager.default.createSymbolicLink(atPath: dangling, withDestinationPath: missing)
        for command in [
            ["record", "--input", "synthetic:160x90@30", "--duration", "100ms"], ["demo", "--seconds", "100ms"],
            ["soak", "--duration", "1s", "--size", "64x2"], ["info"],
        ] {
            let result = try Tool.rewind([command[0], "--store", dangling] + command.dropFirst())
            #expect(result.status == 64, "\(command): \(result.stderr)")
            #expect(
                result.stderr.contains("'\(dangling)' is a symbolic link to '\(missing)', which does not exist"),
                "\(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("gone").path))
        let device = try Tool.rewind(["info", "--store", "/dev/null"])
        #expect(device.status == 64 && device.stderr.contains("'/dev/null' is a device, not"), "\(device.stderr)")
        // A chain of links is named by where it ends; a loop of them, and a FIFO, as what they are.
        let chain = directory.appendingPathComponent("chain").path
        try FileManager.default.createSymbolicLink(atPath: chain, withDestinationPath: "dangling")
        let chained = try Tool.rewind(["info", "--store", chain])
        #expect(
            chained.stderr.contains("is a symbolic link to '\(missing)', which does not exist"), "\(chained.stderr)")
        let loop = directory.appendingPathComponent("loop").path
        try FileManager.default.createSymbolicLink(atPath: loop, withDestinationPath: "loop")
        let looped = try Tool.rewind(["info", "--store", loop])
        #expect(looped.status == 64 && looped.stderr.contains("is a loop of symbolic links"), "\(looped.stderr)")
        let fifo = directory.appendingPathComponent("fifo").path
        try #require(mkfifo(fifo, 0o600) == 0)
        let piped = try Tool.rewind(["info", "--store", fifo])
        #expect(piped.status == 64 && piped.stderr.contains("is a FIFO, not a store directory"), "\(piped.stderr)")
    }

    /// Exit statuses from the README's table for inputs and values that cannot work: a directory as a Y4M input
    /// cannot be opened (66); an empty `--store` and a demo shorter than a frame are usage errors (64). Nothing is
    /// made.
    @Test(
        arguments: [
            (["record", "--store", "S", "--input", "y4m:/tmp"], 66, "cannot open for reading: Is a directory"),
            (["info", "--store", ""], 64, "--store needs a directory"),
            (["record", "--store", "S", "--input", "cam.y4m"], 64, "for a YUV4MPEG2 file write y4m:cam.y4m"),
            (["demo", "--store", "S", "--seconds", "0s"], 64, "--seconds must be at least one frame"),
            (["soak", "--duration", "1s", "--report", "/nonexistent/r.json"], 64, "/nonexistent is not a writable"),
            (
                [
                    "clip", "--store", "S", "--from", "2026-12-01T10:33:58Z", "--to", "2026-12-01T10:33:57Z", "-o",
                    "o.y4m",
                ], 64, "[2026-12-01T10:33:58Z, 2026-12-01T10:33:57Z) is empty"
            ),
        ] as [([String], Int32, String)])
    func unusableValuesHaveTheirExitStatus(arguments: [String], status: Int32, words: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let result = try Tool.rewind(arguments.map { $0 == "S" ? store : $0 })
        #expect(result.status == status, "\(result.stderr)")
        #expect(result.stderr.contains(words), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store))
    }

    /// A store the user may read but not write: recording into it is refused at once (before any frame is taken),
    /// and reading it still works. Run as user 65534 (`setpriv`) when the tests run as root, who may write anything.
    @Test func aStoreThatCannotBeWrittenIsRefusedBeforeRecording() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let first = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x90@30", "--duration", "1s"])
        try #require(first.status == 0, "\(first.stderr)")
        for path in [directory.path, store, store + "/segments"] { chmod(path, 0o555) }
        for name in try FileManager.default.contentsOfDirectory(atPath: store) where name.hasPrefix("index.sqlite") {
            chmod(store + "/" + name, 0o444)
        }
        defer { for path in [directory.path, store, store + "/segments"] { chmod(path, 0o755) } }
        let asUser = getuid() == 0 ? ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] : []
        let command = asUser + [Tool.rewindPath]
        let record = try Tool.run(
            try Tool.path(of: command[0]),
            Array(command.dropFirst()) + [
                "record", "--store", store, "--input", "synthetic:160x90@30", "--duration", "30s", "--realtime",
            ], timeout: .seconds(20))
        #expect(record.status == 1, "\(record.stderr)")
        #expect(record.stderr.contains("open for writing") && record.stderr.contains("Permission denied"))
        let info = try Tool.run(
            try Tool.path(of: command[0]), Array(command.dropFirst()) + ["info", "--store", store, "--json"])
        #expect(info.status == 0 && info.output.contains("\"frames\" : 30"), "\(info.output) \(info.stderr)")
    }

    /// `rewind record` makes a new store's missing parent directories (as it did with `--listen`, for the token),
    /// and names the one it cannot make.
    @Test func aStoreInDirectoriesThatDoNotExistYetIsMadeWithThem() throws {
        let directory = try Tool.temporaryDirectory()
        defer {
            chmod(directory.path + "/locked", 0o755)
            try? FileManager.default.removeItem(at: directory)
        }
        let store = directory.appendingPathComponent("site/cams/front").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x90@30", "--duration", "1s"])
        #expect(record.status == 0, "\(record.stderr)")
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        #expect(info.status == 0 && info.output.contains("\"frames\" : 30"), "\(info.output) \(info.stderr)")
        try FileManager.default.createDirectory(
            atPath: directory.path + "/locked", withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o555])
        let asUser = getuid() == 0 ? ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] : []
        let command = asUser + [Tool.rewindPath]
        let refused = try Tool.run(
            try Tool.path(of: command[0]),
            Array(command.dropFirst()) + [
                "record", "--store", directory.path + "/locked/a/b", "--input", "synthetic:160x90@30", "--duration",
                "1s",
            ])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(
            refused.stderr.contains(
                "--store: cannot make \(directory.path)/locked/a, a directory above the store: "
                    + "Permission denied"), "\(refused.stderr)")
    }

    /// `rewind demo --store` replaces only a store an earlier demo made: never a recording (while a recorder writes
    /// it or not), nor a demo store holding files the demo did not write.
    @Test func theDemoReplacesOnlyItsOwnStore() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let recorded = directory.appendingPathComponent("cams").path
        // With --listen: its token is the recording's own file, not a stranger's.
        let record = try Tool.rewind([
            "record", "--store", recorded, "--input", "synthetic:160x90@30", "--duration", "1s", "--listen",
            "127.0.0.1:0",
        ])
        try #require(record.status == 0, "\(record.stderr)")
        let refused = try Tool.rewind(["demo", "--store", recorded, "--seconds", "100ms"])
        #expect(
            refused.status == 64 && refused.stderr.contains("holds a store that 'rewind demo' did not make"),
            "\(refused.stderr)")
        #expect(try Tool.rewind(["info", "--store", recorded]).output.contains("160x90"), "the recording is intact")

        let demo = directory.appendingPathComponent("demo").path
        #expect(try Tool.rewind(["demo", "--store", demo, "--seconds", "100ms"]).status == 0)
        #expect(try Tool.rewind(["demo", "--store", demo, "--seconds", "100ms"]).status == 0, "its own store again")
        try Data("mine".utf8).write(to: URL(fileURLWithPath: demo + "/exports/notes.txt"))
        let foreign = try Tool.rewind(["demo", "--store", demo, "--seconds", "100ms"])
        #expect(foreign.status == 64 && foreign.stderr.contains("notes.txt"), "\(foreign.stderr)")
        #expect(FileManager.default.fileExists(atPath: demo + "/exports/notes.txt"))

        // Nor one whose segments/ holds files the store did not make (a folder of the user's, a note).
        try FileManager.default.removeItem(atPath: demo + "/exports/notes.txt")
        try FileManager.default.createDirectory(atPath: demo + "/segments/sub", withIntermediateDirectories: true)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: demo + "/segments/sub/important.txt"))
        let inSegments = try Tool.rewind(["demo", "--store", demo, "--seconds", "100ms"])
        #expect(inSegments.status == 64 && inSegments.stderr.contains("(sub)"), "\(inSegments.stderr)")
        #expect(FileManager.default.fileExists(atPath: demo + "/segments/sub/important.txt"))

        // A demo's store that `record` then recorded into is no longer the demo's: its recording is kept.
        let again = directory.appendingPathComponent("again").path
        #expect(try Tool.rewind(["demo", "--store", again, "--seconds", "100ms"]).status == 0)
        let added = try Tool.rewind([
            "record", "--store", again, "--input", "mine=synthetic:160x90@30", "--duration", "1s",
        ])
        try #require(added.status == 0, "\(added.stderr)")
        let kept = try Tool.rewind(["demo", "--store", again, "--seconds", "100ms"])
        #expect(
            kept.status == 64
                && kept.stderr.contains("holds a store 'rewind demo' made and 'rewind record' then recorded into"),
            "\(kept.stderr)")
        #expect(try Tool.rewind(["info", "--store", again]).output.contains("stream mine"), "the recording is intact")

        let live = try Tool.startRewind([
            "record", "--store", recorded, "--input", "synthetic:160x90@30", "--realtime", "--duration", "30s",
        ])
        defer { if live.process.isRunning { live.process.terminate() } }
        try Tool.waitForSocket(of: recorded)
        let busy = try Tool.rewind(["demo", "--store", recorded, "--seconds", "100ms"])
        #expect(busy.status == 69 && busy.stderr.contains("a recorder is running on"), "\(busy.stderr)")
        live.process.terminate()
        let finished = try live.finish(timeout: .seconds(60))
        #expect(finished.status == 0, "the recording was not disturbed: \(finished.stderr)")
    }

    /// A demo stopped by Ctrl-C says how much it recorded (not what `--seconds` asked for), saves and extracts
    /// nothing, and exits 130 with what it recorded kept; stopped while it still sets up (its store is made, the
    /// ring's memory not yet), the same, having recorded nothing.
    @Test func aDemoStoppedEarlySaysWhatItRecordedAndStops() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("demo").path

        let early = try Tool.startRewind(["demo", "--store", store, "--seconds", "600s"])
        defer { if early.process.isRunning { early.process.terminate() } }
        try waitUntil("the demo makes its store", interval: .milliseconds(5)) {
            FileManager.default.fileExists(atPath: store + "/segments")
        }
        early.process.interrupt()
        let setUp = try early.finish(timeout: .seconds(120))
        #expect(setUp.status == 130, "a clean stop, not a death by the signal: \(setUp.output)\n\(setUp.stderr)")
        #expect(setUp.output.contains("stopped before 600.000s of stream time"), "\(setUp.output)")
        if setUp.output.contains("recorded 0 frames") {
            #expect(setUp.output.contains("(0.000s of stream time)"), "\(setUp.output)")
        }

        let demo = try Tool.startRewind(["demo", "--store", store, "--seconds", "600s"])
        defer { if demo.process.isRunning { demo.process.terminate() } }
        try waitUntil("the demo spills frames", timeout: .seconds(120)) {
            let segments = (try? FileManager.default.contentsOfDirectory(atPath: store + "/segments")) ?? []
            return segments.contains { $0.hasSuffix(".seg") }
        }
        Thread.sleep(forTimeInterval: 0.5)
        demo.process.interrupt()
        let result = try demo.finish(timeout: .seconds(120))
        #expect(result.status == 130, "\(result.output)\n\(result.stderr)")
        #expect(!result.output.contains("(600.000s of stream time)") && !result.output.contains("saved the last"))
        #expect(result.output.contains("stopped before 600.000s of stream time"), "\(result.output)")
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        let stored = try JSONSerialization.jsonObject(with: info.stdout)
        #expect(((stored as? [String: Any])?["frames"] as? Int ?? 0) > 0, "what it recorded is kept")
        #expect(!FileManager.default.fileExists(atPath: store + "/exports/last-5s.mkv"))

        // Stopped while it saves: the export under way stops, its file is not kept, nothing more is written.
        let saving = try Tool.startRewind(["demo", "--store", store, "--seconds", "2s"])
        defer { if saving.process.isRunning { saving.process.terminate() } }
        try waitUntil("the demo saves", timeout: .seconds(120)) {
            FileManager.default.fileExists(atPath: store + "/exports")
        }
        saving.process.interrupt()
        let stopped = try saving.finish(timeout: .seconds(120))
        #expect(stopped.status == 130, "\(stopped.output)\n\(stopped.stderr)")
        #expect(stopped.stderr.contains("interrupted after"), "\(stopped.stderr)")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: store + "/exports")) ?? []
        #expect(!left.contains("last-2s.mkv") && !left.contains("disk-and-memory.mkv"), "\(left)")
        #expect(!left.contains { $0.contains(".partial") }, "\(left)")
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)
    }

    /// A recording stopped while it starts (the store opened, the ring's memory set up) stops cleanly at its first
    /// frame and says what it recorded; one stopped while its input has sent no header yet says so, records nothing
    /// and makes no store.
    @Test func aRecordingStoppedWhileItStartsSaysSoAndStops() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path

        let starting = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:1920x1080@60", "--memory", "1536MiB", "--duration",
            "600s", "--realtime",
        ])
        defer { if starting.process.isRunning { starting.process.terminate() } }
        try waitUntil("the recorder makes its store", interval: .milliseconds(5)) {
            FileManager.default.fileExists(atPath: store)
        }
        starting.process.interrupt()
        let stopped = try starting.finish(timeout: .seconds(120))
        #expect(stopped.status == 0, "a clean stop, not a death by the signal: \(stopped.output)\n\(stopped.stderr)")
        #expect(stopped.output.contains("; stopped"), "\(stopped.output)")
        #expect(!stopped.output.contains("duration reached"), "\(stopped.output)")
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)

        let fifo = directory.appendingPathComponent("camera.y4m").path
        try #require(mkfifo(fifo, 0o600) == 0)
        let other = directory.appendingPathComponent("other").path
        try Tool.expectWaitEndsOnInterrupt(
            ["record", "--store", other, "--input", "y4m:" + fifo],
            saying: "waiting for the Y4M header of input 'camera'",
            then: "stopped while waiting for the Y4M header of input 'camera': nothing was recorded")
        #expect(!FileManager.default.fileExists(atPath: other))
    }

    /// A `--disk` smaller than one segment deletes each segment as it is sealed: the run fails and says so instead
    /// of ending with an empty store and exit 0. A budget of a few segments keeps the newest ones and succeeds. One
    /// smaller than a frame stored raw (a bare `1`, in bytes) is refused before the store is touched.
    @Test(arguments: [("120K", 1), ("1", 64), ("100K", 64), ("115199", 64), ("10MiB", 0)])
    func retentionThatKeepsNothingOfARecordingIsAFailure(disk: String, expected: Int32) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "3s", "--segment", "1s",
            "--disk", disk,
        ])
        #expect(record.status == expected, "\(record.output) \(record.stderr)")
        if expected == 64 {
            // In bytes where the sizes would round to the same figure.
            let needed = disk == "115199" ? "115200 B" : "112.5 KiB"
            #expect(record.stderr.contains("cannot hold one frame of nv12 320x240 (\(needed) stored raw)"))
            #expect(!FileManager.default.fileExists(atPath: store + "/index.sqlite"))
            return
        }
        let info = try JSONSerialization.jsonObject(with: try Tool.rewind(["info", "--store", store, "--json"]).stdout)
        let frames = try #require((info as? [String: Any])?["frames"] as? Int)
        if expected == 0 {
            #expect(frames > 0)
            #expect(!record.stderr.contains("retention"), "\(record.stderr)")
        } else {
            #expect(frames == 0)
            #expect(record.stderr.contains("retention deleted all 90 durable frames of this recording (--disk "))
            #expect(record.stderr.contains("give a --disk larger than a few segments"))
        }
    }

    /// An age no longer than the shortest segment (100 ms) is refused up front, with a `--segment` given or not
    /// (written to the nanosecond when under a millisecond). (A floor above what the disk can free is refused before
    /// anything is deleted: below; one that only a recording's own frames pass, in `FullDiskTests`.)
    @Test func aMaxAgeNoLongerThanTheShortestSegmentIsRefused() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        // A --segment given as long as the age is refused before anything is recorded.
        let refused = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "2s", "--segment", "1s",
            "--max-age", "1ns",
        ])
        #expect(refused.status == 64, "\(refused.output) \(refused.stderr)")
        #expect(
            refused.stderr.contains("--max-age 1ns is not longer than the shortest segment a store writes (100ms)"),
            "\(refused.stderr)")
        // Without --segment too: no segment is as short as the age.
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "2s", "--max-age", "1ns",
        ])
        #expect(record.status == 64, "\(record.output) \(record.stderr)")
        #expect(record.stderr.contains("give a --max-age above 100ms"), "\(record.stderr)")

    }

    /// A `--min-free` that deleting every segment file could not reach (FLOOR: halfway from the free space to the file
    /// system's size) is refused before the store is opened (64), saying what the disk has free: the recordings the
    /// store holds stay whole.
    @Test func aFloorTheDiskCannotReachIsRefusedBeforeAnythingIsDeleted() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let first = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "2s", "--segment", "1s",
        ])
        #expect(first.status == 0, "\(first.stderr)")
        var space = statvfs()
        try #require(statvfs(directory.path, &space) == 0)
        let free = Int64(space.f_bavail) * Int64(space.f_frsize)
        let total = Int64(space.f_blocks) * Int64(space.f_frsize)
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "2s", "--segment", "1s",
            "--min-free", "\(free + (total - free) / 2)",
        ])
        #expect(record.status == 64, "\(record.output) \(record.stderr)")
        #expect(record.stderr.contains("is more than the disk can keep free"), "\(record.stderr)")
        #expect(record.stderr.contains("retention would delete every one of them"), "\(record.stderr)")
        // A floor the disk can keep, below its free space (it offered 1 MiB whatever the disk had).
        let advice = /give a --min-free below .* \(--min-free ([0-9]+)MiB, say\)/
        let offered = try #require(record.stderr.firstMatch(of: advice), "\(record.stderr)")
        #expect(Int64(offered.1)! << 20 < free, "\(record.stderr)")
        #expect(Int64(offered.1)! > 1, "half the room on this disk: \(record.stderr)")
        let info = try JSONSerialization.jsonObject(with: try Tool.rewind(["info", "--store", store, "--json"]).stdout)
        #expect((info as? [String: Any])?["frames"] as? Int == 60, "the first recording is whole")
    }

    /// The same when a hold keeps older frames of the stream: the store still holds frames, but none of this
    /// recording's, and the run fails.
    @Test func retentionThatKeepsNothingOfARecordingIsAFailureBesideHeldFrames() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        // A live first recording of 2 s, marked with a hold around 0.5 s while it runs.
        let first = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "2s", "--segment", "200ms",
            "--realtime",
        ])
        try Tool.waitForSocket(of: store)
        let mark = try Tool.rewind(["mark", "--store", store, "--label", "keep", "--at", "0.5s", "--hold", "200ms"])
        #expect(mark.status == 0, "\(mark.stderr)")
        #expect(try first.finish(timeout: .seconds(60)).status == 0)
        let second = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "3s", "--segment", "1s",
            "--disk", "120K",
        ])
        #expect(second.status == 1, "\(second.output) \(second.stderr)")
        #expect(second.stderr.contains("retention deleted all 90 durable frames of this recording"), "\(second.stderr)")
        let info = try JSONSerialization.jsonObject(with: try Tool.rewind(["info", "--store", store, "--json"]).stdout)
        let last = try #require((info as? [String: Any])?["last_pts_ns"] as? Int)
        #expect(last < 2_000_000_000, "only the held frames of the first recording are left")
    }

    /// A recording right after the stored frames continues on their frame grid: with 1/30 s frames the 301st frame
    /// is at exactly 10 s, not a nanosecond before it, so a clip from a whole second starts with it. Both recordings
    /// run faster than real time, so the second starts long before the wall clock reaches the stored 10 s and follows
    /// them directly (had the two taken longer than 10 s, it would be placed where the wall clock is).
    @Test func aContinuationStaysOnTheFrameGrid() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        for _ in 0..<2 {
            let record = try Tool.rewind([
                "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "10s",
            ])
            #expect(record.status == 0, "\(record.stderr)")
        }
        let pts = try runChecked("sqlite3", [store + "/index.sqlite", "SELECT pts_ns FROM frames ORDER BY pts_ns"])
            .output.split(separator: "\n").compactMap { Int64($0) }
        #expect(pts.count == 600)
        #expect(Array(pts[299...301]) == [9_966_666_666, 10_000_000_000, 10_033_333_333], "\(pts[299...301])")
        let output = directory.appendingPathComponent("second.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "10s", "--to", "11s", "-o", output])
        #expect(clip.output.contains("wrote 30 frames") && clip.output.contains("pts 10.000s"), "\(clip.output)")
    }

    /// An export of `all` where only one stream has frames in the range says the recorder time its file covers,
    /// the same the file's timestamps give, not that stream's own pts.
    @Test func anExportOfAllWithOneStreamInRangeSaysItsRecorderTime() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        for (index, name) in ["p", "q"].enumerated() {
            if index > 0 { Thread.sleep(forTimeInterval: 1.5) }
            let record = try Tool.rewind([
                "record", "--store", store, "--input", "\(name)=synthetic:160x120@10", "--duration", "1s",
            ])
            #expect(record.status == 0, "\(record.stderr)")
        }
        let output = directory.appendingPathComponent("late.mkv").path
        let clip = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "1.2s", "--to", "60s", "-o", output,
        ])
        #expect(clip.status == 0, "\(clip.stderr)")
        let first = try runChecked(
            "ffprobe", ["-v", "error", "-show_entries", "packet=pts_time", "-of", "csv=p=0", output]
        ).output.split(separator: "\n").first.flatMap { Double($0) }
        let firstMs = Int(((try #require(first)) * 1000).rounded(.down))
        #expect(firstMs > 1200, "q lies after p on the recorder clock: \(firstMs) ms")
        #expect(
            clip.output.contains(String(format: "pts %d.%03ds …", firstMs / 1000, firstMs % 1000)), "\(clip.output)")
    }
}
