import Foundation
import RewindCore
import RewindMedia
import RewindTesting
import SegmentStore
import Testing

/// A system clock a recording cannot keep times at (before 1970, after 2199: wall times are 64-bit nanoseconds since
/// 1970) is refused before anything is made on disk (71, saying what the clock reads and to set it), where the
/// recorder trapped on an overflow; the last years it takes record as any other. The clock is set for the one
/// process by `faketime`.
@Suite(.timeLimit(.minutes(45)))
struct WallClockRangeTests {
    /// Runs `rewind` with `arguments` under `faketime` at `time` (UTC).
    private func rewind(at time: String, _ arguments: [String]) throws -> ToolResult {
        try Tool.run(
            try Tool.path(of: "faketime"), [time, Tool.rewindPath] + arguments, environment: ["TZ": "UTC"],
            timeout: .seconds(120))
    }

    @Test(arguments: [
        ("1969-12-31 23:59:58", "1969-12-31 23:59:5"), ("2263-01-01 00:00:00", "2263-01-01 00:00:0"),
        ("2262-04-11 23:47:14", "2262-04-11 23:47:1"),
    ])
    func aClockOutsideTheRecordableYearsIsRefusedUpFront(time: String, shown: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try rewind(
            at: time, ["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"])
        #expect(record.status == 71, "\(record.output) \(record.stderr)")
        #expect(record.stderr.contains("rewind record: the system clock reads \(shown)"), "\(record.stderr)")
        #expect(record.stderr.contains("outside the years 1970 to 2199"), "\(record.stderr)")
        #expect(record.stderr.contains("set the system clock"), "\(record.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store), "nothing made on disk")
        let soak = try rewind(at: time, ["soak", "--duration", "1s", "--report", directory.path + "/soak.json"])
        #expect(soak.status == 71, "\(soak.output) \(soak.stderr)")
        #expect(soak.stderr.contains("rewind soak: the system clock reads"), "\(soak.stderr)")
    }

    /// A time of day without a zone, given to a live recorder, lies on the recording's date at the zone's offset on
    /// that date, as a reader of the store takes it: a recording made in the other half of the year (daylight saving
    /// time or not, whichever now is not) was read at the offset now, an hour off ("no frames").
    @Test func aTimeOfDayGivenToALiveRecorderTakesTheOffsetOfTheRecordingsDate() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let zone = "America/New_York"
        let summerNow = TimeZone(identifier: zone)?.isDaylightSavingTime(for: Date()) ?? false
        let day = summerNow ? "2026-01-15" : "2026-07-01"
        let recorder = try ExternalTools.Child(
            try Tool.path(of: "faketime"),
            [
                "\(day) 12:00:00", Tool.rewindPath, "record", "--store", store, "--input", "synthetic:160x120@30",
                "--realtime", "--duration", "30s",
            ], environment: ["TZ": zone])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        try waitUntil("the recorder holds 3 s", interval: .milliseconds(50)) {
            (Tool.firstStreamStatus(store: store)?["frames_durable"] as? Int ?? 0) >= 90
        }
        // The first whole second after recorder time 0 (the clock starts at noon when the process does; a busy
        // machine starts recording a moment later), and the one after it, as times of day in the zone.
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        let object = try #require(
            try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any], "\(info.stderr)")
        let zero = try #require((object["streams"] as? [[String: Any]])?.first?["clock_wall_ns"] as? Int64)
        let formatter = DateFormatter()
        formatter.timeZone = TimeZone(identifier: zone)
        formatter.dateFormat = "HH:mm:ss"
        let second = zero / 1_000_000_000 + 1
        let (from, to) = (
            formatter.string(from: Date(timeIntervalSince1970: Double(second))),
            formatter.string(from: Date(timeIntervalSince1970: Double(second + 1)))
        )
        let clip = try Tool.rewind(
            ["clip", "--store", store, "--from", from, "--to", to, "-o", directory.path + "/x.mkv"],
            environment: ["TZ": zone])
        #expect(clip.status == 0, "\(clip.output) \(clip.stderr)")
        #expect(
            clip.output.contains("wrote 30 frames") && clip.output.contains("by the live recorder"), "\(clip.output)")
        let mark = try Tool.rewind(
            ["mark", "--store", store, "--label", "noon", "--at", from], environment: ["TZ": zone])
        let at = mark.output.firstMatch(of: /marked marker \d+ at (\d+\.\d+)s/).flatMap { Double($0.1) } ?? -1
        #expect(mark.status == 0 && at >= 0 && at < 2, "\(mark.output) \(mark.stderr)")
        recorder.process.interrupt()
        _ = try recorder.finish(timeout: .seconds(60))
    }

    @Test func theLastRecordableYearRecordsAndReadsBack() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try rewind(
            at: "2199-12-31 23:59:00",
            ["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"])
        #expect(record.status == 0, "\(record.output) \(record.stderr)")
        let clip = try rewind(
            at: "2199-12-31 23:59:30",
            [
                "clip", "--store", store, "--from", "2199-12-31T23:59:00Z", "--to", "2200-01-01T00:00:00Z", "-o",
                directory.path + "/late.y4m",
            ])
        #expect(clip.status == 0, "\(clip.output) \(clip.stderr)")
        #expect(clip.stderr.contains("30 frames") || clip.output.contains("30 frames"), "\(clip.output) \(clip.stderr)")
    }

    /// A store whose later frames were captured an hour before its first (the system clock set back between two
    /// recordings): `info` gives the earliest to the latest capture time, never a range that runs backwards, says
    /// the clock went back and gives the first and last frames' times; its JSON says the same.
    @Test func infoGivesTheEarliestAndLatestCaptureTimesAfterTheClockWentBack() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("store").path
        // 2026-12-06T05:00:00Z; frames 30…59 an hour earlier by the wall clock.
        let start: Int64 = 1_796_533_200_000_000_000
        let camera = SyntheticCamera(
            layout: try FrameLayout(format: .nv12, width: 160, height: 96),
            frameDuration: FrameTime(value: 1, timescale: 30), startWallNanoseconds: start)
        do {  // The store is closed (its lock let go) at the end of the scope.
            let store = try SegmentStore.open(directory: path)
            let writer = try store.makeWriter(streamName: "camera", stream: camera.stream)
            var bytes = [UInt8](repeating: 0, count: camera.stream.layout.byteCount)
            for index in 0..<60 {
                try bytes.withUnsafeMutableBytes { buffer in
                    var info = try camera.frame(at: Int64(index), into: buffer)
                    if index >= 30 { info.wallNanoseconds -= 3_600_000_000_000 }
                    try writer.append(
                        FrameView(layout: camera.stream.layout, info: info, bytes: UnsafeRawBufferPointer(buffer)))
                }
            }
            try writer.close()
        }

        let info = try Tool.rewind(["info", "--store", path])
        #expect(info.status == 0, "\(info.stderr)")
        // Frame 30 at 04:00:01.000, frame 29 at 05:00:00.966; the first at 05:00:00, the last at 04:00:01.966.
        #expect(
            info.output.contains(
                "wall clock: 2026-12-06T04:00:01.000Z … 2026-12-06T05:00:00.966Z (the earliest and latest capture "
                    + "times)"), "\(info.output)")
        #expect(
            info.output.contains(
                "the wall clock went back between frames of 'camera' (it was set back during or between its "
                    + "recordings): its first frame was captured at 2026-12-06T05:00:00.000Z, its last at "
                    + "2026-12-06T04:00:01.966Z"), "\(info.output)")
        let json = try Tool.rewind(["info", "--store", path, "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any])
        let stream = try #require((object["streams"] as? [[String: Any]])?.first)
        for document in [object, stream] {
            #expect(document["earliest_wall_ns"] as? Int64 == start - 3_600_000_000_000 + 1_000_000_000)
            #expect(document["latest_wall_ns"] as? Int64 == start + 966_666_666)
            #expect(document["wall_clock_went_back"] as? Bool == true)
        }
        #expect(stream["first_wall_ns"] as? Int64 == start)
        #expect(stream["last_wall_ns"] as? Int64 == start - 3_598_033_333_334)
    }

    /// A stream first recorded after the wall clock was set back is placed on the recorder clock after the others,
    /// an hour from its capture times: `info` says where `--from`/`--to` find it, which a clip by those times gets.
    @Test func infoSaysWhereAStreamRecordedAfterTheClockWentBackIsFound() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        for (time, name) in [("2026-12-06 05:00:00", "a"), ("2026-12-06 04:00:00", "e")] {
            let record = try rewind(
                at: time, ["record", "--store", store, "--input", "\(name)=synthetic:160x120@10", "--duration", "1s"])
            #expect(record.status == 0, "\(record.output) \(record.stderr)")
        }
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.status == 0, "\(info.stderr)")
        let line = try #require(
            info.output.split(separator: "\n").first { $0.contains("'e' is found by --from/--to at ") },
            "\(info.output)")
        #expect(line.contains(" after its capture times"), "\(line)")
        #expect(!info.output.contains("'a' is found by"), "\(info.output)")
        // The times it gives find every frame of e.
        let times = line.split(separator: " ").filter { $0.hasSuffix("Z") }.map(String.init)
        try #require(times.count == 2, "\(line)")
        let output = directory.appendingPathComponent("e.y4m").path
        let clip = try Tool.rewind([
            "clip", "--store", store, "--stream", "e", "--from", times[0], "--to", times[1], "-o", output,
        ])
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(try ExternalTools.frameMD5s(output).count == 9, "the last frame lies at --to, which is exclusive")
    }

    /// A local time without a zone must name one moment: on the days Berlin's clocks go forward (2026-03-29, 02:00 →
    /// 03:00) and back (2026-10-25, 03:00 → 02:00), 02:30 names none or two, as a date-time and as a time of day on
    /// a recording's first day; each is refused (64) with the offsets that name each moment, where one was taken
    /// silently.
    @Test(arguments: [
        (
            "2026-03-29 00:00:00",
            "'02:30:00' is not a local time that exists: daylight saving time skips it on 2026-03-29, the recording's "
                + "first day, in this zone (the clocks go from +01:00 to +02:00); give the offset you mean, "
                + "02:30:00+01:00 or 02:30:00+02:00",
            "'2026-03-29T02:30:00' is not a local time that exists: daylight saving time skips it on that date in this "
                + "zone (the clocks go from +01:00 to +02:00); give the offset you mean, 2026-03-29T02:30:00+01:00 or "
                + "2026-03-29T02:30:00+02:00"
        ),
        (
            "2026-10-25 00:00:00",
            "'02:30:00' is not a local time that comes once: it comes twice on 2026-10-25, the recording's first day, "
                + "in this zone, as daylight saving time ends (first at +02:00, then at +01:00); give the offset of "
                + "the one you mean, 02:30:00+02:00 or 02:30:00+01:00",
            "'2026-10-25T02:30:00' is not a local time that comes once: it comes twice on that date in this zone, as "
                + "daylight saving time ends (first at +02:00, then at +01:00); give the offset of the one you mean, "
                + "2026-10-25T02:30:00+02:00 or 2026-10-25T02:30:00+01:00"
        ),
    ])
    func aLocalTimeThatDaylightSavingTimeSkipsOrRepeatsIsRefused(recorded: String, timeOfDay: String, dateTime: String)
        throws
    {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try rewind(
            at: recorded, ["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"])
        #expect(record.status == 0, "\(record.output) \(record.stderr)")
        let day = String(recorded.prefix(10))
        let output = directory.appendingPathComponent("x.mkv").path
        for (from, to, message) in [
            ("02:30:00", "02:31:00", timeOfDay), ("\(day)T02:30:00", "\(day)T02:31:00", dateTime),
        ] {
            let clip = try Tool.rewind(
                ["clip", "--store", store, "--from", from, "--to", to, "-o", output],
                environment: ["TZ": "Europe/Berlin"])
            #expect(clip.status == 64, "\(clip.output) \(clip.stderr)")
            #expect(clip.stderr.contains(message), "\(clip.stderr)")
            // The option is named, as for any value it refuses.
            #expect(clip.stderr.hasPrefix("rewind clip: --from: '\(from)' is not a local time"), "\(clip.stderr)")
            #expect(!FileManager.default.fileExists(atPath: output))
        }
        // An offset names the moment: the recording's second, from 00:00 UTC.
        let zoned = try Tool.rewind(
            ["clip", "--store", store, "--from", "\(day)T00:00:00Z", "--to", "\(day)T00:00:05Z", "-o", output],
            environment: ["TZ": "Europe/Berlin"])
        #expect(zoned.status == 0 && zoned.output.contains("wrote 30 frames"), "\(zoned.output) \(zoned.stderr)")
    }

    /// The same local time given to a live recorder's API without a zone (read in the recorder's zone, on its
    /// recording's first day) is refused as the command line refuses it, with 400 and the same explanation, in every
    /// field that takes a time: a clip's `from` and `to`, a marker's `at`, and the `at`, `from` and `to` of the
    /// frame, timeline and marker queries.
    @Test(arguments: [
        (
            "2026-03-29 00:00:00",
            "'02:30:00' is not a local time that exists: daylight saving time skips it on 2026-03-29, the recording's "
                + "first day, in this zone (the clocks go from +01:00 to +02:00); give the offset you mean, "
                + "02:30:00+01:00 or 02:30:00+02:00"
        ),
        (
            "2026-10-25 00:00:00",
            "'02:30:00' is not a local time that comes once: it comes twice on 2026-10-25, the recording's first day, "
                + "in this zone, as daylight saving time ends (first at +02:00, then at +01:00); give the offset of "
                + "the one you mean, 02:30:00+02:00 or 02:30:00+01:00"
        ),
    ])
    func aLocalTimeThatDaylightSavingTimeSkipsOrRepeatsIsRefusedByTheAPI(recorded: String, message: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try ExternalTools.Child(
            try Tool.path(of: "faketime"),
            [
                recorded, Tool.rewindPath, "record", "--store", store, "--input", "front=synthetic:160x120@30",
                "--realtime", "--duration", "20s",
            ], environment: ["TZ": "Europe/Berlin"])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        try waitUntil("the recorder holds 3 s", interval: .milliseconds(50)) {
            (Tool.firstStreamStatus(store: store)?["memory_frames"] as? Int ?? 0) >= 90
        }
        let output = directory.appendingPathComponent("x.mkv").path
        let requests: [(method: String, path: String, body: String?, field: String)] = [
            ("POST", "/v1/clips", #"{"from":"02:30:00","to":"02:31:00","path":"\#(output)"}"#, "from"),
            ("POST", "/v1/clips", #"{"from":"2026-01-01T00:00:00Z","to":"02:30:00","path":"\#(output)"}"#, "to"),
            ("POST", "/v1/markers", #"{"label":"x","at":"02:30:00"}"#, "at"),
            ("GET", "/v1/streams/front/frame?at=02:30:00", nil, "at"),
            ("GET", "/v1/streams/front/timeline?from=02:30:00&to=02:31:00", nil, "from"),
            ("GET", "/v1/markers?from=02:30:00&to=02:31:00", nil, "from"),
        ]
        for request in requests {
            let answer = try Tool.run(
                try Tool.path(of: "curl"),
                [
                    "-s", "--max-time", "30", "-w", "\n%{http_code}", "--unix-socket", store + "/rewind.sock", "-X",
                    request.method, "http://rewind" + request.path,
                ] + (request.body.map { ["-H", "Content-Type: application/json", "-d", $0] } ?? []))
            let lines = answer.output.split(separator: "\n")
            #expect(lines.last == "400", "\(request.method) \(request.path): \(answer.output)")
            let body = try #require(lines.first.map { Data($0.utf8) }, "\(answer.output)")
            let error = try #require(
                try JSONSerialization.jsonObject(with: body) as? [String: [String: String]], "\(answer.output)")
            #expect(error["error"]?["code"] == "bad_request", "\(answer.output)")
            #expect(
                error["error"]?["message"] == "\(request.field): \(message)",
                "\(request.method) \(request.path): \(answer.output)")
        }
        #expect(!FileManager.default.fileExists(atPath: output), "nothing was exported")
        // A time of day the day has once is taken: the recording's third second, from 00:00 local time.
        let marked = try Tool.run(
            try Tool.path(of: "curl"),
            [
                "-s", "--max-time", "30", "-w", "\n%{http_code}", "--unix-socket", store + "/rewind.sock", "-X", "POST",
                "http://rewind/v1/markers", "-H", "Content-Type: application/json", "-d",
                #"{"label":"x","at":"00:00:02"}"#,
            ])
        #expect(marked.output.hasSuffix("\n201"), "\(marked.output)")
        // faketime does not pass a signal on to the recorder it runs: the recording ends with its duration.
        #expect(try recorder.finish(timeout: .seconds(60)).status == 0)
    }
}
