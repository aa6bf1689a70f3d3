import Foundation
import RewindCore
import RewindMedia
import RewindTesting
import SegmentStore
import Testing

/// The frame indices the synthetic camera wrote into the stored frames of `stream`, each frame proven bit-exact by
/// its checksum; a frame that fails the check is recorded as an issue.
func syntheticIndices(store: String, stream: String) throws -> [Int64] {
    let segmentStore = try SegmentStore.openReadOnly(directory: store)
    var indices: [Int64] = []
    try segmentStore.frames(streamName: stream, in: Int64.min..<Int64.max) { view in
        if let mark = SyntheticCamera.verify(view) {
            indices.append(mark.index)
        } else {
            Issue.record("stream \(stream): frame at pts \(view.info.ptsNanoseconds) is not bit-exact")
        }
        return true
    }
    return indices
}

/// `ffprobe`'s video streams of a file: (width, height, frames read).
func probeStreams(_ path: String) throws -> [(width: Int, height: Int, frames: Int)] {
    let result = try runChecked(
        "ffprobe",
        [
            "-v", "error", "-count_frames", "-select_streams", "v", "-show_entries",
            "stream=width,height,nb_read_frames", "-of", "csv=p=0", path,
        ])
    return result.output.split(separator: "\n").compactMap { line in
        let fields = line.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        return fields.count == 3 ? (fields[0], fields[1], fields[2]) : nil
    }
}

/// The streams of `rewind info --json`, by name.
func streamInfo(_ store: String) throws -> [String: [String: Any]] {
    let streams = try info(store)["streams"] as? [[String: Any]] ?? []
    return Dictionary(
        uniqueKeysWithValues: streams.compactMap { stream in
            (stream["name"] as? String).map { ($0, stream) }
        })
}

@Suite(.timeLimit(.minutes(45))) struct StreamsEndToEndTests {
    @Test func threeInputsRecordedAtOnceInRealTimeAreEachBitExactAndComplete() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try Source(size: "320x240", rate: "25", frames: 75, in: directory)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "cam=y4m:\(source.path)", "--input", "wide=synthetic:640x360@30",
            "--input", "small=synthetic:320x180@15", "--duration", "3s", "--realtime", "--memory", "96MiB",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        #expect(record.output.contains("stream cam: recorded 75 frames of i420 320x240"), "\(record.output)")
        #expect(record.output.contains("stream wide: recorded 90 frames of nv12 640x360"), "\(record.output)")
        #expect(record.output.contains("stream small: recorded 45 frames of nv12 320x180"), "\(record.output)")
        #expect(record.output.contains("recorded 3 streams into"), "\(record.output)")

        let streams = try streamInfo(store)
        #expect(streams["cam"]?["frames"] as? Int == 75)
        #expect(streams["wide"]?["frames"] as? Int == 90)
        #expect(streams["small"]?["frames"] as? Int == 45)
        for (name, stream) in streams {
            #expect(stream["drops"] as? [String: Int] == [:], "\(name)")
            #expect(stream["clock_offset_ns"] is Int64 || stream["clock_offset_ns"] is Int, "\(name) has no clock")
            #expect(stream["first_wall_ns"] is Int64 || stream["first_wall_ns"] is Int, "\(name) has no wall time")
        }
        // Started together in real time: every stream's first frame lies within 100 ms of recorder time 0.
        for (name, stream) in streams {
            let first = (stream["first_time_ns"] as? NSNumber)?.int64Value ?? .max
            #expect((0..<100_000_000).contains(first), "\(name) starts at recorder time \(first) ns")
        }
        #expect(try syntheticIndices(store: store, stream: "wide") == Array(0..<90))
        #expect(try syntheticIndices(store: store, stream: "small") == Array(0..<45))
        let sourceMD5s = try frameMD5s(source.path)
        let cam = directory.appendingPathComponent("cam.y4m").path
        let clip = try Tool.rewind([
            "clip", "--store", store, "--stream", "cam", "--from", "0s", "--to", "10s", "-o", cam,
        ])
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(try frameMD5s(cam) == sourceMD5s)

        // Every stream into one Matroska file: a track each, its own size and every frame.
        let all = directory.appendingPathComponent("all.mkv").path
        let save = try Tool.rewind(["save", "--store", store, "--stream", "all", "--last", "10s", "-o", all])
        #expect(save.status == 0, "\(save.stderr)")
        #expect(save.output.contains("(3 streams, a track each)"), "\(save.output)")
        let tracks = try probeStreams(all)
        #expect(tracks.map(\.width) == [320, 640, 320])
        #expect(tracks.map(\.height) == [240, 360, 180])
        #expect(tracks.map(\.frames) == [75, 90, 45])
        let camTrack = try runChecked(
            "ffmpeg",
            [
                "-hide_banner", "-loglevel", "error", "-i", all, "-map", "0:0", "-fps_mode", "passthrough",
                "-pix_fmt", "yuv420p", "-f", "framemd5", "-",
            ]
        ).output.split(separator: "\n").filter { !$0.hasPrefix("#") }.map {
            String($0.split(separator: ",").last!.trimmingCharacters(in: .whitespaces))
        }
        #expect(camTrack == sourceMD5s)

        // .y4m holds one stream: one file per stream, NAME.STREAM.y4m.
        let y4m = directory.appendingPathComponent("last.y4m").path
        let perStream = try Tool.rewind(["save", "--store", store, "--stream", "all", "--last", "10s", "-o", y4m])
        #expect(perStream.status == 0, "\(perStream.stderr)")
        #expect(try frameMD5s(directory.appendingPathComponent("last.cam.y4m").path) == sourceMD5s)
        #expect(try probeStreams(directory.appendingPathComponent("last.wide.y4m").path).map(\.frames) == [90])

        // Several streams and none named: a usage error that lists them; an unknown one is named.
        let unnamed = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", all])
        #expect(unnamed.status == 64)
        #expect(unnamed.stderr.contains("several streams (cam, wide, small)"), "\(unnamed.stderr)")
        let unknown = try Tool.rewind([
            "clip", "--store", store, "--stream", "rear", "--from", "0s", "--to", "1s", "-o", all,
        ])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("no stream 'rear'"), "\(unknown.stderr)")
        // Every stream to stdout: the message says what to give instead, and nothing more follows.
        for command in [["save", "--last", "1s"], ["clip", "--from", "0s", "--to", "1s"]] {
            let piped = try Tool.rewind(
                [command[0], "--store", store, "--stream", "all", "-o", "-"] + command.dropFirst())
            #expect(piped.status == 64 && piped.stdout.isEmpty, "\(piped.stderr)")
            #expect(
                piped.stderr == "rewind \(command[0]): -o -: several streams cannot go to stdout as YUV4MPEG2; give -o "
                    + "clip.mkv (a track per stream) or --stream NAME\n", "\(piped.stderr)")
        }
        let verify = try Tool.rewind(["verify", "--store", store, "--stream", "small"])
        #expect(verify.status == 0 && verify.output.contains("1 segment, 45 frames"), "\(verify.output)")
    }

    /// A `.y4m` clip of every stream, killed while it writes, leaves each stream's file under the one temporary name
    /// an export uses (`.NAME.partial-PID-N`), which the next export to that name removes.
    @Test func aKilledExportOfEveryStreamLeavesNothingTheNextOneDoesNotRemove() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:640x480@30", "--input", "b=synthetic:320x240@30",
            "--duration", "10s",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        let out = directory.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
        func hidden() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []).filter { $0.hasPrefix(".") }
        }
        let arguments = [
            "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "10s", "-o", out.path + "/kc.y4m",
        ]
        let killed = try Tool.startRewind(arguments)
        try waitUntil("the export writes its first file", interval: .milliseconds(5)) { !hidden().isEmpty }
        kill(killed.process.processIdentifier, SIGKILL)
        _ = try killed.finish(timeout: .seconds(60))
        let left = hidden()
        #expect(left.allSatisfy { $0.hasPrefix(".kc.") && !$0.hasPrefix("..") }, "\(left)")
        let again = try Tool.rewind(arguments)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(hidden().isEmpty, "\(hidden())")
    }

    @Test func aStreamWhoseInputFailsMidwayEndsAloneAndTheOthersStayWhole() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try Source(size: "160x120", rate: "25", frames: 50, in: directory)
        // Cut the file in the middle of frame 30: the input fails there as malformed.
        let data = try Data(contentsOf: URL(fileURLWithPath: source.path))
        let frameBytes = 160 * 120 * 3 / 2 + 6
        let header = data.count - 50 * frameBytes
        let truncated = directory.appendingPathComponent("truncated.y4m").path
        try data.prefix(header + 30 * frameBytes + 100).write(to: URL(fileURLWithPath: truncated))
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "cam=y4m:\(truncated)", "--input", "wide=synthetic:320x180@30",
            "--duration", "2s", "--realtime",
        ])
        #expect(record.status == 65, "\(record.stderr)")
        #expect(record.stderr.contains("input 'cam' failed"), "\(record.stderr)")
        #expect(record.stderr.contains("stream 'cam': "), "\(record.stderr)")
        #expect(record.output.contains("stream cam: recorded 30 frames"), "\(record.output)")
        #expect(record.output.contains("failed: cam"), "\(record.output)")
        #expect(record.output.contains("stream wide: recorded 60 frames"), "\(record.output)")
        #expect(try syntheticIndices(store: store, stream: "wide") == Array(0..<60))
        let streams = try streamInfo(store)
        #expect(streams["cam"]?["frames"] as? Int == 30)
        let camGaps = streams["cam"]?["gaps"] as? [[String: Any]] ?? []
        #expect(camGaps.map { $0["reason"] as? String } == ["input failed"], "\(camGaps)")
        // From its last frame to the end of the recording.
        #expect(camGaps.first?["start_ns"] as? Int64 == 1_160_000_000, "\(camGaps)")
        #expect((camGaps.first?["end_ns"] as? Int64 ?? 0) >= 1_900_000_000, "\(camGaps)")
        #expect((streams["wide"]?["gaps"] as? [Any])?.isEmpty == true)
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.output)")

        // Inputs read faster than real time: the gap still runs to where the other stream's frames end (2 s), not
        // to when the reading stopped.
        let fast = directory.appendingPathComponent("fast").path
        let read = try Tool.rewind([
            "record", "--store", fast, "--input", "cam=y4m:\(truncated)", "--input", "whole=y4m:\(source.path)",
        ])
        #expect(read.status == 65, "\(read.stderr)")
        let fastGaps = try streamInfo(fast)["cam"]?["gaps"] as? [[String: Any]] ?? []
        #expect(fastGaps.map { $0["reason"] as? String } == ["input failed"], "\(fastGaps)")
        #expect(fastGaps.first?["start_ns"] as? Int64 == 1_160_000_000, "\(fastGaps)")
        #expect((fastGaps.first?["end_ns"] as? Int64 ?? 0) >= 1_950_000_000, "\(fastGaps)")
    }

    /// A stream that never stored a frame (its input sent a header and nothing) takes the next recording's
    /// format; once it holds frames, another format is refused up front, suggesting another name.
    @Test func aStreamKeepsItsFormatOnlyOnceItHoldsFrames() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let header = directory.appendingPathComponent("header.y4m").path
        try Data("YUV4MPEG2 W64 H48 F25:1 Ip A1:1 C420jpeg\n".utf8).write(to: URL(fileURLWithPath: header))
        let empty = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(header)"])
        #expect(empty.status == 0 && empty.output.contains("recorded 0 frames"), "\(empty.output)\(empty.stderr)")
        let real = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"])
        #expect(real.status == 0, "\(real.stderr)")
        #expect(try streamInfo(store)["camera"]?["width"] as? Int == 160)
        let other = try Tool.rewind(["record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "1s"])
        #expect(other.status == 64, "\(other.stderr)")
        #expect(other.stderr.contains("size 160x120 → 320x240") && other.stderr.contains("--stream camera-2"))
        // Refused before the store is opened for writing: an index of another store (its stream of another size)
        // in place of this one's is not "recovered" against these files by a run that is then refused.
        let foreign = directory.appendingPathComponent("foreign").path
        let made = try Tool.rewind([
            "record", "--store", foreign, "--input", "synthetic:320x240@30", "--duration", "3s",
        ])
        #expect(made.status == 0, "\(made.stderr)")
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: "\(store)/index.sqlite\(suffix)")
            try? FileManager.default.copyItem(
                atPath: "\(foreign)/index.sqlite\(suffix)", toPath: "\(store)/index.sqlite\(suffix)")
        }
        let refused = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s",
        ])
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(!refused.stderr.contains("recovered the store"), "\(refused.stderr)")
        let shown = try Tool.rewind(["info", "--store", store, "--json"])
        #expect(shown.status == 1, "the index is another store's: \(shown.stderr)")
        let object = try JSONSerialization.jsonObject(with: shown.stdout) as? [String: Any]
        #expect((object?["gaps"] as? [Any])?.isEmpty == true, "the refused run changed nothing")
        #expect((object?["problems"] as? [String])?.first?.contains("is not the index of the segment files") == true)
    }

    @Test func recordingAgainIntoAStoreContinuesItsTimeline() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let first = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:640x360@30", "--duration", "10s",
        ])
        #expect(first.status == 0, "\(first.stderr)")
        let second = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:640x360@30", "--duration", "2s",
        ])
        #expect(second.status == 0, "\(second.stderr)")
        // The first recording's 10 s took less: the second comes after them, ahead of the wall clock, and says so.
        #expect(second.stderr.contains("warning: the store's recordings end"), "\(second.stderr)")
        #expect(second.stderr.contains("ahead of the wall clock"), "\(second.stderr)")
        #expect(second.output.contains("recorded 60 frames"), "\(second.output)")
        #expect(second.output.contains("the store now holds 360 frames"), "\(second.output)")
        let summary = try info(store)
        #expect(summary["frames"] as? Int == 360)
        #expect(summary["drops"] as? Int == 0)
        let gaps = summary["gaps"] as? [[String: Any]] ?? []
        #expect(gaps.map { $0["reason"] as? String } == ["recorder stopped"], "\(gaps)")
        #expect((gaps.first?["start_ns"] as? NSNumber)?.int64Value == 9_966_666_666)
        #expect(((summary["last_pts_ns"] as? NSNumber)?.int64Value ?? 0) > 11_900_000_000)
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.output)")
        #expect(verify.output.contains("2 segments, 360 frames"), "\(verify.output)")
        let rows = try runChecked(
            "sqlite3",
            [
                "-readonly", store + "/index.sqlite",
                "SELECT count(*), count(DISTINCT pts_ns) FROM frames; "
                    + "SELECT clock_offset_ns IS NOT NULL AND clock_wall_ns IS NOT NULL FROM streams; "
                    + "SELECT state FROM segments",
            ])
        #expect(rows.output.split(separator: "\n") == ["360|360", "1", "sealed", "sealed"], "\(rows.output)")
        // The second recording's frames are the camera's, whole, after the first ones.
        #expect(try syntheticIndices(store: store, stream: "camera") == Array(0..<300) + Array(0..<60))

        // Another size for the same stream is refused before anything is recorded.
        let bigger = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:1280x720@30", "--duration", "1s",
        ])
        #expect(bigger.status == 64)
        #expect(bigger.stderr.contains("size 640x360 → 1280x720"), "\(bigger.stderr)")
        #expect(bigger.stderr.contains("--stream camera-2"), "\(bigger.stderr)")
        #expect(try info(store)["frames"] as? Int == 360)
    }

    /// An index rebuilt from the segment files (it was deleted) puts each stream where it was recorded on the
    /// recorder clock again: a camera that joined the store in a later recording keeps its place within a frame, so
    /// `--stream all` and recorder times mean what they meant — recorded in real time, or faster (capture times then
    /// run ahead of the clock, and the second recording comes after the first's frames). (Every stream was put at
    /// recorder time 0.)
    @Test(arguments: [true, false]) func aRebuiltIndexPlacesALaterStreamWhereItWasRecorded(realtime: Bool) throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        for inputs in [["a=synthetic:160x90@30"], ["a=synthetic:160x90@30", "b=synthetic:320x180@30"]] {
            let recorded = try Tool.rewind(
                ["record", "--store", store, "--duration", "1s"] + (realtime ? ["--realtime"] : [])
                    + inputs.flatMap { ["--input", $0] })
            #expect(recorded.status == 0, "\(recorded.stderr)")
        }
        func clocks() throws -> [Substring] {
            try runChecked(
                "sqlite3",
                ["-readonly", store + "/index.sqlite", "SELECT name, clock_offset_ns FROM streams ORDER BY name"]
            ).output.split(separator: "\n")
        }
        let recorded = try clocks()
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: "\(store)/index.sqlite\(suffix)")
        }
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)")
        #expect(repair.output.contains("restored from their frames' capture times"), "\(repair.output)")
        let rebuilt = try clocks()
        #expect(rebuilt.count == 2 && recorded.count == 2, "\(rebuilt) \(recorded)")
        #expect(rebuilt.first == "a|0", "\(rebuilt)")
        let offset = { (row: Substring?) in Int64(row?.split(separator: "|").last ?? "") ?? -1 }
        // After the first recording's 30 frames (0 … 0.967 s): at 1 s exactly when recorded faster than real time
        // and quickly enough that the wall clock is still behind the first recording's end, later otherwise.
        #expect(offset(recorded.last) >= 1_000_000_000, "\(recorded)")
        #expect(abs(offset(rebuilt.last) - offset(recorded.last)) < 33_333_333, "\(rebuilt) against \(recorded)")
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)
    }

    @Test func verifyRepairMovesARecordingThatStartedAStreamsClockAgain() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let other = directory.appendingPathComponent("other").path
        for (path, duration) in [(store, "3s"), (other, "1s")] {
            let record = try Tool.rewind([
                "record", "--store", path, "--input", "synthetic:320x180@30", "--duration", duration,
            ])
            #expect(record.status == 0, "\(record.stderr)")
        }
        // What older builds left: a segment of the same stream whose pts start at 0 again, unknown to the index.
        try FileManager.default.copyItem(
            atPath: other + "/segments/000001.seg", toPath: store + "/segments/000002.seg")
        // Older builds also recorded a false 'disk error' gap at the pts that recording repeated.
        try runChecked(
            "sqlite3",
            [
                store + "/index.sqlite",
                "INSERT INTO gaps (stream_id, start_ns, end_ns, reason) VALUES (1, 333333333, 400000000, 'disk error')",
            ])
        let dryRun = try Tool.rewind(["verify", "--store", store])
        #expect(dryRun.status == 1, "\(dryRun.output)")
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(repair.output.contains("moved the 30 frames of segment 000002.seg"), "\(repair.output)")
        #expect(repair.output.contains("removed the 'disk error' gap"), "\(repair.output)")
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.output)")
        let summary = try info(store)
        #expect(summary["frames"] as? Int == 120)
        #expect((summary["gaps"] as? [[String: Any]])?.map { $0["reason"] as? String } == ["recorder stopped"])
        #expect(try syntheticIndices(store: store, stream: "camera") == Array(0..<90) + Array(0..<30))
    }

    /// With several streams, `info` says whose each gap is.
    @Test func gapsOfSeveralStreamsNameTheirStream() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let both = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:160x90@30", "--input", "b=synthetic:160x90@30",
            "--duration", "1s",
        ])
        #expect(both.status == 0, "\(both.stderr)")
        let again = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:160x90@30", "--duration", "1s",
        ])
        #expect(again.status == 0, "\(again.stderr)")
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.output.contains(": recorder stopped"), "\(info.output)")
        let gapLines = info.output.split(separator: "\n").filter { $0.hasSuffix(": recorder stopped") }
        #expect(!gapLines.isEmpty && gapLines.allSatisfy { $0.contains("stream a: ") }, "\(gapLines)")
    }

    @Test(arguments: [
        (["--input", "a=synthetic", "--input", "a=synthetic:320x180@30"], "two inputs are named 'a'"),
        (["--input", "synthetic", "--input", "synthetic:320x180@30"], "(an input without NAME= is named by --stream)"),
        (["--input", "Front=synthetic"], "'Front' is not a stream name"),
        (["--input", "a=-", "--input", "b=-"], "both read stdin"),
        (["--stream", "no space", "--input", "synthetic"], "'no space' is not a stream name"),
        (["--input", "all=synthetic:320x180@30"], "'all' is not a stream name"),
        (["--stream", "all", "--input", "synthetic:320x180@30"], "'all' is not a stream name"),
        (["--input", "synthetic:320x180@30", "--disk", "0"], "--disk 0 keeps nothing"),
        (
            ["--input", "synthetic:320x180@30", "--disk", "20"],
            "--disk: 20 B ('20' has no unit: a size without one is in bytes) cannot hold one frame"
        ),
        (
            ["--input", "a=synthetic:320x180@30", "--input", "b=synthetic:160x96@15", "--disk", "100KiB"],
            "cannot hold one frame of each of the 2 streams"
        ),
        (["--input", "synthetic:320x180@30", "--max-age", "0s"], "--max-age must be longer than 0s"),
        (
            ["--input", "synthetic:320x240@30", "--memory", "118783"],
            "--memory: 118783 B cannot hold one frame of nv12 320x240 (118784 B in whole pages); give at least "
                + "--memory 116KiB"
        ),
    ])
    func badInputNamesAreUsageErrors(arguments: [String], message: String) throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let result = try Tool.rewind(["record", "--store", store, "--duration", "1s"] + arguments)
        #expect(result.status == 64)
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store + "/index.sqlite"))
    }

    @Test func maxAgeDeletesSegmentsOlderThanItAcrossStreams() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let first = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:320x180@30", "--input", "b=synthetic:160x96@15",
            "--duration", "1s",
        ])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try info(store)["segments"] as? Int == 2)
        usleep(1_500_000)
        // The new recording's segments are sealed at its end, when the first recording's are older than 1 s.
        let second = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:320x180@30", "--duration", "1s", "--max-age", "1s",
        ])
        #expect(second.status == 0, "\(second.stderr)")
        let streams = try streamInfo(store)
        #expect(streams["a"]?["frames"] as? Int == 30, "only the new recording of a is left")
        #expect(streams["b"]?["frames"] as? Int == 0, "b's older segment went too")
        let days = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:320x180@30", "--duration", "1s", "--max-age", "7d",
        ])
        #expect(days.status == 0, "\(days.stderr)")
        #expect(try streamInfo(store)["a"]?["frames"] as? Int == 60)
    }

    /// A recorder stopped and continued (Ctrl-Z, SIGSTOP; a machine suspended) in real time puts the frames after
    /// the pause where they are captured: every stream has an `input interval` gap over the pause, the stored wall
    /// clock ends when the recording did (a wall-clock clip finds those frames), and `--duration`, stream time,
    /// counts the pause. The frames were put right after the frames before the pause, as if no time had passed.
    @Test func framesAfterAPauseAreStoredWhereTheyWereCaptured() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let started = Date()
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:320x240@30", "--input", "b=synthetic:160x120@15",
            "--realtime", "--duration", "8s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        Thread.sleep(forTimeInterval: 1.5)
        kill(recorder.process.processIdentifier, SIGSTOP)
        Thread.sleep(forTimeInterval: 3)
        kill(recorder.process.processIdentifier, SIGCONT)
        let ended = try recorder.finish(timeout: .seconds(60))
        let end = Date()
        #expect(ended.status == 0, "\(ended.stderr)")
        #expect(
            end.timeIntervalSince(started) < 11, "the pause counts in the duration: \(end.timeIntervalSince(started))")
        let streams = try streamInfo(store)
        for name in ["a", "b"] {
            let stream = try #require(streams[name])
            let gaps = (stream["gaps"] as? [[String: Any]] ?? []).filter { $0["reason"] as? String == "input interval" }
            let longest = gaps.map { ($0["end_ns"] as? Int64 ?? 0) - ($0["start_ns"] as? Int64 ?? 0) }.max() ?? 0
            #expect(longest >= 2_500_000_000, "\(name): \(gaps)")
            let lastWall = Double(stream["last_wall_ns"] as? Int64 ?? 0) / 1e9
            #expect(abs(lastWall - end.timeIntervalSince1970) < 2, "\(name): last frame at \(lastWall), ended \(end)")
        }
    }

    /// A recorder stopped (SIGSTOP, Ctrl-Z) until after its duration's end ends the recording there, and the pause
    /// within the duration is an `input interval` gap from the last frame to the duration's end, as a pause inside
    /// it leaves: the stream did not just end at its last frame as if nothing was missing after it.
    @Test func aPausePastTheDurationIsAGapToTheDurationsEnd() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "a=synthetic:320x240@30", "--realtime", "--duration", "3s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        Thread.sleep(forTimeInterval: 0.5)
        kill(recorder.process.processIdentifier, SIGSTOP)
        Thread.sleep(forTimeInterval: 4)
        kill(recorder.process.processIdentifier, SIGCONT)
        let ended = try recorder.finish(timeout: .seconds(60))
        #expect(ended.status == 0, "\(ended.stderr)")
        #expect(ended.output.contains("duration reached"), "\(ended.output)")
        let stream = try #require(try streamInfo(store)["a"])
        let first = stream["first_pts_ns"] as? Int64 ?? -1
        let last = stream["last_pts_ns"] as? Int64 ?? -1
        #expect(last - first < 2_500_000_000, "frames came after the pause: \(stream)")
        let gaps = (stream["gaps"] as? [[String: Any]] ?? []).map { gap in
            [gap["start_ns"] as? Int64 ?? -1, gap["end_ns"] as? Int64 ?? -1] as [Int64]
        }
        #expect(gaps == [[last, first + 3_000_000_000]], "\(stream["gaps"] ?? [])")
        #expect(
            (stream["gaps"] as? [[String: Any]])?.last?["reason"] as? String == "input interval",
            "\(stream["gaps"] ?? [])")
        // The index holds the row too, as sqlite3 reads it.
        let rows = try runChecked(
            "sqlite3", ["-readonly", store + "/index.sqlite", "SELECT start_ns, end_ns, reason FROM gaps"]
        )
        .output
        #expect(rows.contains("\(last)|\(first + 3_000_000_000)|input interval"), "\(rows)")
    }

    /// A recorder stopped (SIGSTOP, Ctrl-Z) for longer than the stall allowance while one input has ended and
    /// another waits in a read is no stall of that input once continued: its thread could not read either. An input
    /// that sends within the allowance after the pause ends the recording whole (it was called stalled at once, and
    /// the recording ended with it, exit 1).
    @Test func aPauseOfTheWholeRecorderIsNoStallOfAnInput() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let header = Array("YUV4MPEG2 W16 H16 F25:1 Ip A1:1 C420jpeg\n".utf8)
        let frame = Array("FRAME\n".utf8) + [UInt8](repeating: 128, count: 16 * 16 * 3 / 2)
        let file = directory.appendingPathComponent("short.y4m")
        try Data(header + frame + frame).write(to: file)
        let fifo = directory.appendingPathComponent("live.y4m").path
        let writer = try Tool.openFIFO(fifo, sending: header + frame)
        var open = true
        defer { if open { close(writer) } }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "short=y4m:\(file.path)", "--input", "live=y4m:\(fifo)",
            "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        Thread.sleep(forTimeInterval: 1)
        kill(recorder.process.processIdentifier, SIGSTOP)
        Thread.sleep(forTimeInterval: 7)
        kill(recorder.process.processIdentifier, SIGCONT)
        Thread.sleep(forTimeInterval: 1)
        try #require(write(writer, frame, frame.count) == frame.count)
        close(writer)
        open = false
        let ended = try recorder.finish(timeout: .seconds(60))
        #expect(ended.status == 0, "\(ended.output)\(ended.stderr)")
        #expect(!ended.stderr.contains("stalled") && !ended.output.contains("stalled"), "\(ended.stderr)")
        #expect(ended.output.contains("stream live: recorded 2 frames"), "\(ended.output)")
    }

    /// A pause of the whole recorder while it waits for an input's Y4M header does not use up the header's
    /// allowance: a header sent just after the recorder runs again is read (it ended at once saying no header came
    /// within the duration and 5 s more, nothing recorded, counting the pause as the input's wait).
    @Test func aPauseWhileWaitingForAHeaderIsNoWaitOfTheInput() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("late.y4m").path
        let writer = try Tool.openFIFO(fifo, sending: [])
        defer { close(writer) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind(["record", "--store", store, "--input", "y4m:\(fifo)", "--duration", "1s"])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        Thread.sleep(forTimeInterval: 0.5)
        kill(recorder.process.processIdentifier, SIGSTOP)
        Thread.sleep(forTimeInterval: 7)
        kill(recorder.process.processIdentifier, SIGCONT)
        Thread.sleep(forTimeInterval: 0.5)
        // The header and 30 frames (1.2 s at 25 fps).
        let frame = Array("FRAME\n".utf8) + [UInt8](repeating: 128, count: 16 * 16 * 3 / 2)
        var bytes = Array("YUV4MPEG2 W16 H16 F25:1 Ip A1:1 C420jpeg\n".utf8)
        for _ in 0..<30 { bytes += frame }
        try #require(write(writer, bytes, bytes.count) == bytes.count)
        let ended = try recorder.finish(timeout: .seconds(60))
        #expect(ended.status == 0, "\(ended.output)\(ended.stderr)")
        #expect(ended.output.contains("recorded 25 frames"), "\(ended.output)")
        #expect(ended.output.contains("duration reached"), "\(ended.output)")
    }

    @Test func aStalledInputEndsAloneOnceTheOthersReachTheirDuration() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("stalled.y4m").path
        // A source that sends its header and then nothing, and stays open.
        let writer = try Tool.openFIFO(fifo, sending: Array("YUV4MPEG2 W160 H120 F25:1 Ip A1:1 C420jpeg\n".utf8))
        defer { close(writer) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(
            [
                "record", "--store", store, "--input", "stalled=y4m:\(fifo)", "--input", "cam=synthetic:320x180@30",
                "--duration", "2s", "--realtime",
            ], timeout: .seconds(60))
        #expect(record.status == 1, "\(record.stderr)")
        #expect(record.stderr.contains("input 'stalled' stalled: no frame for 5 s"), "\(record.stderr)")
        #expect(record.output.contains("stream stalled: recorded 0 frames"), "\(record.output)")
        #expect(record.output.contains("input stalled"), "\(record.output)")
        #expect(record.output.contains("failed: stalled"), "\(record.output)")
        #expect(try syntheticIndices(store: store, stream: "cam") == Array(0..<60))
    }

    /// `--duration` counts stream time, which a lone input that stops sending (and stays open) never reaches: once
    /// the duration has passed on the wall clock and 5 s have given no frame, it ends as stalled (exit 1), with what
    /// it sent before stored.
    @Test func aLoneInputThatStopsSendingEndsOnceItsDurationHasPassed() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("stopped.y4m").path
        let frame = Array("FRAME\n".utf8) + [UInt8](repeating: 128, count: 64 * 48 * 3 / 2)
        let writer = try Tool.openFIFO(
            fifo,
            sending: Array("YUV4MPEG2 W64 H48 F25:1 Ip A1:1 C420jpeg\n".utf8)
                + Array(repeating: frame, count: 10).joined())
        defer { close(writer) }
        let store = directory.appendingPathComponent("store").path
        let started = ContinuousClock.now
        let record = try Tool.rewind(
            ["record", "--store", store, "--input", "y4m:\(fifo)", "--duration", "1s"], timeout: .seconds(120))
        #expect(ContinuousClock.now - started >= .seconds(5), "the duration passed, and 5 s without a frame")
        #expect(record.status == 1, "\(record.stderr)")
        #expect(
            record.stderr.contains("no frame for 5 s by the time its --duration had passed on the wall clock"),
            "\(record.stderr)")
        #expect(
            record.output.contains("recorded 10 frames") && record.output.contains("10 durable"), "\(record.output)")
        #expect(record.output.contains("input stalled"), "\(record.output)")
    }

    /// A lone input that never sends its header (a FIFO nobody opens, so even its open blocks) ends by the same
    /// rule, once its duration and 5 s more have passed: exit 1, nothing recorded, rather than waiting for a signal.
    @Test func aLoneInputThatNeverSendsItsHeaderEndsOnceItsDurationHasPassed() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("silent.y4m").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let store = directory.appendingPathComponent("store").path
        let started = ContinuousClock.now
        let record = try Tool.rewind(
            ["record", "--store", store, "--input", "y4m:\(fifo)", "--duration", "1s"], timeout: .seconds(120))
        #expect(ContinuousClock.now - started >= .seconds(6), "the duration passed, and 5 s without a header")
        #expect(record.status == 1, "\(record.stderr)")
        #expect(
            record.stderr.contains("no Y4M header from input 'camera' within the --duration of 1.000s and 5 s more"),
            "\(record.stderr)")
    }

    /// An input whose producer never starts (a FIFO nobody writes, so even its open blocks) holds up the others
    /// only 5 s: they record without it, and the run says so and exits 1. Its header arriving late changes nothing.
    @Test func anInputThatNeverSendsItsHeaderHoldsUpTheOthersFiveSecondsAtMost() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("silent.y4m").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(
            [
                "record", "--store", store, "--input", "silent=y4m:\(fifo)", "--input", "cam=synthetic:320x180@30",
                "--duration", "2s", "--realtime",
            ], timeout: .seconds(60))
        #expect(record.status == 1, "\(record.stderr)")
        #expect(record.stderr.contains("waiting for the Y4M header of input 'silent'"), "\(record.stderr)")
        #expect(
            record.stderr.contains("stream 'silent' was not recorded: its input sent no Y4M header within 5 s"),
            "\(record.stderr)")
        #expect(try syntheticIndices(store: store, stream: "cam") == Array(0..<60))
        #expect(try streamInfo(store)["silent"] == nil, "nothing of the silent input is in the store")
    }

    @Test func theDiskBudgetIsTheTotalAndEveryStreamKeepsAboutTheSameHistory() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:640x360@30", "--input", "b=synthetic:320x180@30",
            "--segment", "1s", "--duration", "8s", "--disk", "10MiB", "--min-free", "1MiB", "--memory-pressure", "off",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        let bytes = try segmentFileBytes(store)
        // The 8 s take about 14 MB: a budget well below keeps the test about retention, however well they compress.
        #expect(bytes <= 10 << 20, "segments take \(bytes) bytes")
        let streams = try streamInfo(store)
        let firsts = ["a", "b"].map { (streams[$0]?["first_pts_ns"] as? NSNumber)?.int64Value ?? -1 }
        let lasts = ["a", "b"].map { (streams[$0]?["last_pts_ns"] as? NSNumber)?.int64Value ?? -1 }
        #expect(firsts.allSatisfy { $0 > 0 }, "the oldest segments of both streams went: \(firsts)")
        // Within two segments (2 s): retention deletes only sealed segments, and the two inputs, read as fast as
        // they go on threads of their own, seal theirs at different moments.
        #expect(abs(firsts[0] - firsts[1]) <= 2_000_000_000, "both keep about the same history: \(firsts)")
        #expect(lasts == [7_966_666_666, 7_966_666_666])
    }

    /// The bytes of every file in `store`'s `segments` folder.
    func segmentFileBytes(_ store: String) throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: store + "/segments").reduce(0) { total, name in
            total + (try FileManager.default.attributesOfItem(atPath: store + "/segments/" + name)[.size] as? Int ?? 0)
        }
    }

    /// A budget smaller than the two streams' minute-long segments together: segments are sealed in steps of each
    /// stream's share of the budget (by raw bytes per second, so a small stream's span about as long as a large
    /// one's), and the stop's retention keeps about the same newest seconds of both streams instead of deleting one
    /// stream's whole recording.
    @Test func aBudgetBelowTwoOpenSegmentsKeepsTheNewestOfEveryStream() throws {
        let directory = try Tool.temporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:160x120@30", "--input", "b=synthetic:960x540@30",
            "--duration", "10s", "--disk", "16MiB", "--min-free", "1MiB", "--memory-pressure", "off",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        #expect(!record.stderr.contains("retention deleted all"), "\(record.stderr)")
        let streams = try streamInfo(store)
        let firsts = ["a", "b"].map { (streams[$0]?["first_pts_ns"] as? NSNumber)?.int64Value ?? -1 }
        let lasts = ["a", "b"].map { (streams[$0]?["last_pts_ns"] as? NSNumber)?.int64Value ?? -1 }
        #expect(lasts == [9_966_666_666, 9_966_666_666], "both keep their newest frames: \(lasts)")
        #expect(firsts.allSatisfy { $0 > 0 && $0 < 8_000_000_000 }, "both keep two seconds or more: \(firsts)")
        #expect(abs(firsts[0] - firsts[1]) <= 2_000_000_000, "both keep about the same history: \(firsts)")
        let bytes = try segmentFileBytes(store)
        #expect(bytes <= 16 << 20, "segments take \(bytes) bytes")
    }
}
