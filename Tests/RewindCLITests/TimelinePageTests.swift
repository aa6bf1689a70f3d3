import Foundation
import RewindCore
import RewindMedia
import RewindTesting
import Testing

/// The timeline page in a real browser (headless Chromium through Selenium, `Tests/Browser/timeline_page.py`),
/// against a live recorder of two streams on TCP with its token; and every request that changes state refused
/// without the token or from another site.
@Suite(.timeLimit(.minutes(15))) struct TimelinePageTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    /// A recorder of two synthetic streams (front 640×360 at 30 fps, rear 320×240 at 15 fps) in real time, serving
    /// TCP on a port of its choosing.
    struct Live {
        let store: String
        let recorder: ExternalTools.Child
        let base: String
        let token: String

        init(directory: URL) throws {
            store = directory.appendingPathComponent("store").path
            recorder = try Tool.startRewind([
                "record", "--store", store, "--input", "front=synthetic:640x360@30",
                "--input", "rear=synthetic:320x240@15", "--realtime", "--window", "30s", "--memory", "512MiB",
                "--listen", "127.0.0.1:0",
            ])
            var port = ""
            let recorder = recorder
            try waitUntil("the recorder says where it listens", interval: .milliseconds(50)) {
                guard
                    let line = recorder.stderr.split(separator: "\n").first(where: { $0.contains("serving the API on") }
                    )
                else { return false }
                port = String(line.split(separator: ":").last?.prefix { $0.isNumber } ?? "")
                return !port.isEmpty
            }
            base = "http://127.0.0.1:\(port)"
            token = try String(contentsOfFile: store + "/token", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }

        /// `curl` with the token: the response body.
        func get(_ path: String) throws -> Data {
            try runChecked("curl", ["-sf", "-H", "Authorization: Bearer \(token)", base + path]).stdout
        }

        func stop() throws {
            recorder.process.interrupt()
            let finished = try recorder.finish()
            #expect(finished.status == 0, "\(finished.stderr)")
        }
    }

    @Test func thePageShowsTheStreamsPicturesStepsAndExports() throws {
        let directory = try Tool.temporaryDirectory("timeline")
        defer { try? FileManager.default.removeItem(at: directory) }
        let live = try Live(directory: directory)
        defer { if live.recorder.process.isRunning { live.recorder.process.terminate() } }
        // Four seconds recorded: something to hover over and drag across.
        try waitUntil("the recorder holds 4 s of front", timeout: .seconds(60), interval: .milliseconds(200)) {
            let status = try? JSONSerialization.jsonObject(with: live.get("/v1/status")) as? [String: Any]
            let streams = status?["streams"] as? [[String: Any]] ?? []
            return (streams.first { $0["stream"] as? String == "front" }?["memory_frames"] as? Int ?? 0) >= 120
        }
        let output = directory.appendingPathComponent("browser").path
        try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
        let script = Self.packageRoot + "/Tests/Browser/timeline_page.py"
        // Debian's Python, which has Debian's Selenium (another python3 may come first on PATH).
        let python = "/usr/bin/python3"
        #expect(FileManager.default.isExecutableFile(atPath: python), "\(python) is missing: run make test")
        let run = try Tool.run(python, [script, live.base, live.token, output], timeout: .seconds(600))
        #expect(run.status == 0, "\(run.stderr.suffix(3000))")
        let result = try #require(
            try JSONSerialization.jsonObject(with: run.stdout) as? [String: Any], "\(run.output) \(run.stderr)")
        #expect(result["error"] == nil, "the page failed: \(result)")

        // The token left the address bar for a cookie; one lane per stream.
        #expect(result["url"] as? String == live.base + "/", "\(result["url"] ?? "")")
        #expect(result["lanes"] as? [String] == ["front", "rear"])

        // The hovered thumbnail is the stored frame: its full-size PNG carries the synthetic camera's mark for
        // the frame at that pts, and the thumbnail's pixels are that frame scaled down.
        let thumbnail = try #require(result["thumbnail"] as? [String: Any])
        let time = try #require(thumbnail["time_ns"] as? Int64)
        let pts = try #require(thumbnail["pts_ns"] as? Int64)
        #expect(thumbnail["width"] as? Int == 320 && thumbnail["height"] as? Int == 180, "\(thumbnail)")
        let full = directory.appendingPathComponent("frame.png").path
        try live.get("/v1/streams/front/frame?at=\(time)ns&format=png").write(to: URL(fileURLWithPath: full))
        let rgb = try ExternalTools.run(
            "ffmpeg", ["-hide_banner", "-loglevel", "error", "-i", full, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"])
        #expect(rgb.count == 640 * 360 * 3)
        var word: UInt64 = 0
        for bit in 0..<64 { word = word << 1 | (rgb[rgb.startIndex + bit * 3] > 127 ? 1 : 0) }
        #expect(word >> 48 == 0x5257, "the frame mark's magic")
        let index = Int64(word & 0xFFFF_FFFF_FFFF)
        #expect(index == (pts * 30 + 500_000_000) / 1_000_000_000, "mark says frame \(index), pts \(pts) ns")
        let scaled = try ExternalTools.run(
            "ffmpeg",
            [
                "-hide_banner", "-loglevel", "error", "-i", full, "-vf", "scale=320:180:flags=area", "-f", "rawvideo",
                "-pix_fmt", "rgb24", "-",
            ])
        let shown = try Data(contentsOf: URL(fileURLWithPath: output + "/thumbnail.rgb"))
        #expect(shown.count == scaled.count)
        let difference = zip(shown, scaled).reduce(0) { $0 + abs(Int($1.0) - Int($1.1)) }
        #expect(Double(difference) / Double(max(1, shown.count)) < 8, "mean difference \(difference)")

        // → → ← step one stored frame each (30 fps) and back.
        let steps = try #require(result["steps"] as? [Int64])
        #expect(steps.count == 4)
        if steps.count == 4 {
            #expect((33_333_333...33_333_334).contains(steps[1] - steps[0]), "\(steps)")
            #expect((33_333_333...33_333_334).contains(steps[2] - steps[1]), "\(steps)")
            #expect(steps[3] == steps[1], "\(steps)")
        }
        #expect((result["caption"] as? String)?.contains("pts \(steps.last ?? -1) ns") == true)

        // The dragged range, exported as .mkv of the front stream and downloaded by id: every frame of the range,
        // bit-exact (the same frames as a clip of that range through the command line).
        let export = try #require(result["export"] as? [String: Any])
        #expect(export["stream"] as? String == "front" && export["state"] as? String == "done", "\(export)")
        let from = try #require(export["from_ns"] as? Int64)
        let to = try #require(export["to_ns"] as? Int64)
        #expect(to - from > 1_000_000_000, "a drag of a quarter of a 30 s view covers seconds: \(from) … \(to)")
        let downloaded = output + "/export.mkv"
        let reference = directory.appendingPathComponent("reference.mkv").path
        let clip = try Tool.rewind([
            "clip", "--store", live.store, "--stream", "front", "--from", "\(from)ns", "--to", "\(to)ns", "-o",
            reference,
        ])
        #expect(clip.status == 0, "\(clip.stderr)")
        let downloadedFrames = try frameMD5s(downloaded)
        #expect(!downloadedFrames.isEmpty)
        #expect(downloadedFrames == (try frameMD5s(reference)))
        let raw = try ExternalTools.run(
            "ffmpeg",
            ["-hide_banner", "-loglevel", "error", "-i", downloaded, "-f", "rawvideo", "-pix_fmt", "nv12", "-"])
        let layout = try FrameLayout(format: .nv12, width: 640, height: 360)
        var indexes: [Int64] = []
        raw.withUnsafeBytes { bytes in
            for offset in stride(from: 0, to: bytes.count - layout.byteCount + 1, by: layout.byteCount) {
                let frame = UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + layout.byteCount)])
                let info = try! FrameInfo(pts: FrameTime(nanoseconds: 0), wallNanoseconds: 0, color: .bt709Video)
                if let mark = SyntheticCamera.verify(FrameView(layout: layout, info: info, bytes: frame)) {
                    indexes.append(mark.index)
                }
            }
        }
        #expect(indexes.count == downloadedFrames.count, "every downloaded frame is bit-exact")
        #expect(indexes == Array((indexes.first ?? 0)..<((indexes.first ?? 0) + Int64(indexes.count))))

        // Markup in a label is text.
        #expect(result["xss_ran"] as? Bool == false)
        #expect(result["injected_images"] as? Int == 0)
        let labels = result["marker_texts"] as? [String] ?? []
        #expect(labels.contains { $0.contains(#"<img src=x onerror="window.__xss=1">"#) }, "\(labels)")
        let panel = result["status_panel"] as? String ?? ""
        for entry in ["frames durable", "spill lag", "pressure", "disk", "segments"] {
            #expect(panel.contains(entry), "the status panel shows \(entry): \(panel)")
        }

        // The screenshot the README shows.
        let screenshot = output + "/timeline.png"
        #expect(FileManager.default.fileExists(atPath: screenshot))
        if ProcessInfo.processInfo.environment["REWIND_UPDATE_SCREENSHOT"] == "1" {
            try? FileManager.default.removeItem(atPath: Self.packageRoot + "/docs/timeline.png")
            try FileManager.default.copyItem(atPath: screenshot, toPath: Self.packageRoot + "/docs/timeline.png")
        }
        try live.stop()
    }

    /// Every request that changes state needs the token over TCP (401 without it), and one from a page of another
    /// site is refused even with the cookie (403); reading needs the token too.
    @Test func stateChangesNeedTheTokenAndThisRecordersOrigin() throws {
        let directory = try Tool.temporaryDirectory("timeline-auth")
        defer { try? FileManager.default.removeItem(at: directory) }
        let live = try Live(directory: directory)
        defer { if live.recorder.process.isRunning { live.recorder.process.terminate() } }
        let curl = try Tool.path(of: "curl")
        func code(_ method: String, _ path: String, _ extra: [String] = []) throws -> String {
            try Tool.run(
                curl,
                ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method, "-H", "Content-Type: application/json"]
                    + extra + [live.base + path]
            ).output
        }
        let changes: [(String, String, String)] = [
            ("POST", "/v1/saves", #"{"last": "1s"}"#), ("POST", "/v1/clips", #"{"from": "0s", "to": "1s"}"#),
            ("POST", "/v1/markers", #"{"label": "x"}"#), ("DELETE", "/v1/markers/1", ""),
            ("DELETE", "/v1/saves/1", ""), ("POST", "/v1/saves/1/extend", #"{"after": "1s"}"#),
        ]
        for (method, path, body) in changes {
            let data = body.isEmpty ? [] : ["--data", body]
            #expect(try code(method, path, data) == "401", "\(method) \(path) without a token")
            #expect(
                try code(method, path, data + ["-H", "Authorization: Bearer wrong"]) == "401",
                "\(method) \(path) with a wrong token")
            #expect(
                try code(
                    method, path,
                    data + ["-H", "Cookie: rewind_token=\(live.token)", "-H", "Origin: http://evil.example"]) == "403",
                "\(method) \(path) from another site")
        }
        for path in ["/", "/timeline.js", "/v1/status", "/v1/streams/front/frame?at=0s", "/v1/files/1"] {
            #expect(try code("GET", path) == "401", "GET \(path) without a token")
        }
        // With the token: the page, and a marker from the page's own origin.
        #expect(try code("GET", "/", ["-H", "Authorization: Bearer \(live.token)"]) == "200")
        #expect(
            try code(
                "POST", "/v1/markers",
                [
                    "--data", #"{"label": "ok"}"#, "-H", "Cookie: rewind_token=\(live.token)", "-H",
                    "Origin: \(live.base)",
                ]
            ) != "403")
        try live.stop()
    }
}
