import Foundation
import RewindControl
import RewindCore
import RewindMedia
import RewindTesting
import Testing

/// The timeline page in a real browser (headless Chromium through Selenium, `Tests/Browser/timeline_page.py`),
/// against a live recorder of two streams on TCP with its token; and every request that changes state refused
/// without the token or from another site.
@Suite(.timeLimit(.minutes(45))) struct TimelinePageTests {

    /// A recorder of two synthetic streams (front 640×360 at 30 fps, rear 320×240 at 15 fps) in real time, serving
    /// TCP on a port of its choosing.
    struct Live {
        let store: String
        let recorder: ExternalTools.Child
        let base: String
        let token: String

        /// What `rewind record` is given besides the store and the address.
        static let options = front + ["--input", "rear=synthetic:320x240@15"] + pacing
        static let front = ["--input", "front=synthetic:640x360@30"]
        static let pacing = ["--realtime", "--window", "30s", "--memory", "512MiB"]

        init(directory: URL) throws {
            store = directory.appendingPathComponent("store").path
            recorder = try Tool.startRewind(
                ["record", "--store", store] + Self.options + ["--listen", "127.0.0.1:0"])
            base = "http://127.0.0.1:\(try Tool.listeningPort(of: recorder))"
            token = try String(contentsOfFile: store + "/token", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }

        /// `curl` with the token: the response body.
        func get(_ path: String) throws -> Data {
            try runChecked("curl", ["-sf", "-H", "Authorization: Bearer \(token)", base + path]).stdout
        }

        /// The port the recorder listens on.
        var port: String { String(base.split(separator: ":").last ?? "") }

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
        let script = Tool.packageRoot + "/Tests/Browser/timeline_page.py"
        // Debian's Python, which has Debian's Selenium (another python3 may come first on PATH).
        let python = "/usr/bin/python3"
        #expect(FileManager.default.isExecutableFile(atPath: python), "\(python) is missing: run make test")
        // The browser and the command line in a zone other than UTC, with a half-hour offset: a wall-clock time the
        // page shows must mean the same instant to `rewind clip`.
        let zone = ["TZ": "Asia/Kolkata"]
        let environment = ProcessInfo.processInfo.environment.merging(zone) { $1 }
        let run = try Tool.run(
            python, [script, live.base, live.token, output], environment: environment, timeout: .seconds(600))
        #expect(run.status == 0, "\(run.stderr.suffix(3000))")
        let result = try #require(
            try JSONSerialization.jsonObject(with: run.stdout) as? [String: Any], "\(run.output) \(run.stderr)")
        #expect(result["error"] == nil, "the page failed: \(result)")
        #expect(result["failed_parts"] == nil, "parts of the page failed: \(result["failed_parts"] ?? "")")

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

        // Ten → pressed at once step ten frames, and ten ← step back to where they started.
        let fast = result["fast_steps"] as? [Int64] ?? []
        #expect(fast.count == 3 && (333_333_330...333_333_340).contains(fast[1] - fast[0]), "\(fast)")
        #expect(fast.count == 3 && fast[2] == fast[0], "\(fast)")

        // The frame's wall-clock time is local time with its offset; its time of day, given to `rewind clip
        // --from` in the same zone, starts the clip at that frame.
        let wall = result["caption_wall"] as? String ?? ""
        let shape = /\d{4}-\d\d-\d\dT(\d\d:\d\d:\d\d\.\d{3})\+05:30/
        let timeOfDay = try shape.wholeMatch(in: wall)?.output.1
        #expect(timeOfDay != nil, "local time with its zone: \(wall)")
        #expect((result["caption"] as? String)?.contains(wall) == true)
        #expect((result["zone_note"] as? String)?.contains("UTC+05:30") == true, "\(result["zone_note"] ?? "")")

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
        #expect(try frameMarks(downloaded, width: 640, height: 360) == indexes)
        #expect(indexes.count == downloadedFrames.count, "every downloaded frame is bit-exact")
        #expect(indexes == Array((indexes.first ?? 0)..<((indexes.first ?? 0) + Int64(indexes.count))))

        // Markup in a label is text.
        #expect(result["xss_ran"] as? Bool == false)
        #expect(result["injected_images"] as? Int == 0)
        let labels = result["marker_texts"] as? [String] ?? []
        #expect(labels.contains { $0.contains(#"<img src=x onerror="window.__xss=1">"#) }, "\(labels)")
        let panel = result["status_panel"] as? String ?? ""
        for entry in ["frames durable", "spill lag", "pressure", "disk", "segments", "resident within its limit of"] {
            #expect(panel.contains(entry), "the status panel shows \(entry): \(panel)")
        }

        // Every gap reason has its colour in the legend.
        let legend = result["legend"] as? [String] ?? []
        for reason in LossReason.allCases {
            #expect(legend.contains("gap: \(reason.rawValue)"), "the legend shows \(reason.rawValue): \(legend)")
        }

        // A timeline load that failed (the recorder busy) says why, until a later load succeeds.
        #expect(
            result["load_message_while_busy"] as? String
                == "rear: too many connections (at most 64); try again shortly",
            "\(result["load_message_while_busy"] ?? "")")
        #expect(result["load_message_after"] as? String == "", "a load that succeeds takes the message away")

        // A 200-letter label without spaces stays inside its lane and the markers panel: no sideways scrolling.
        let long = result["long_label"] as? [String: Any] ?? [:]
        #expect(long["listed"] as? Bool == true, "\(long)")
        #expect((long["page_width"] as? Int ?? .max) <= (long["window_width"] as? Int ?? 0), "\(long)")
        #expect((long["item_overflow"] as? Int ?? 1) <= 0, "\(long)")
        #expect((long["label_right"] as? Double ?? .infinity) <= (long["lanes_right"] as? Double ?? 0), "\(long)")

        // Labels of markers close together, zoomed out, are not written over the lane's name or each other; those
        // without room are hidden and named by the hover caption at their line; the pointer goes through a label to
        // the lane; a label's direction marks are isolated in the markers panel.
        let crowded = result["crowded_labels"] as? [String: Any] ?? [:]
        let crowd = crowded["labels"] as? [[String: Any]] ?? []
        let visible: [Any?] = crowd.filter { $0["visible"] as? Bool == true }.map { $0["box"] }
        let boxes: [[Double]] = ([crowded["name"]] + visible).compactMap { $0 as? [Double] }
        #expect(crowd.count == 6 && boxes.count >= 3 && boxes.count < 7, "\(crowded)")
        for (index, box) in boxes.enumerated() {
            for other in boxes[(index + 1)...] {
                let apart = box[2] <= other[0] || other[2] <= box[0] || box[3] <= other[1] || other[3] <= box[1]
                #expect(apart, "\(box) overlaps \(other): \(crowded)")
            }
        }
        #expect(crowded["under_label"] as? String == "CANVAS", "\(crowded)")
        #expect((crowded["caption"] as? String)?.contains("◆ crowd 2") == true, "\(crowded)")
        #expect(crowded["isolated"] as? String == "held \u{202E}", "\(crowded)")

        // Times past 100 s keep their milliseconds (an axis tick as precise as the ticks are apart); a wheel event of
        // any size leaves a view numbers describe; a busy recorder is not said to be stopping; an export with no
        // stream chosen says so and sends nothing.
        let edges = result["page_edges"] as? [String: Any] ?? [:]
        #expect(edges["seconds"] as? String == "113.712s" && edges["tick"] as? String == "113.71s", "\(edges)")
        // Cut, not rounded, as the command line says times: never after the frame (21.334s left it out of a clip).
        #expect(edges["cut"] as? String == "21.333s" && edges["cut_tick"] as? String == "1s", "\(edges)")
        #expect(edges["ticks_on_reopen"] as? [Bool] == [true, true], "the recorded streams ticked again: \(edges)")
        #expect(edges["finite"] as? Bool == true && edges["zoomed_out"] as? Bool == true, "\(edges)")
        #expect((edges["busy_banner"] as? String)?.hasPrefix("the recorder is busy") == true, "\(edges)")
        #expect(edges["proxy_503_state"] as? String == "lost", "\(edges)")
        #expect(
            edges["no_stream_message"] as? String == "nothing was exported: choose at least one stream"
                && edges["new_saves"] as? Int == 0, "\(edges)")

        // The save box: less than a millisecond is refused by the page; any other number is sent as whole
        // milliseconds (a number in exponent form is no duration the API takes). The label box never stops short
        // of what the API takes (256 characters, 1024 bytes), whatever their UTF-16 length.
        #expect(
            result["tiny_save_message"] as? String == "the number of seconds to save must be at least 0.001",
            "\(result["tiny_save_message"] ?? "")")
        let bodies = (result["save_bodies"] as? [String] ?? []).compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        #expect(bodies.map { $0["last"] as? String } == ["250ms", "9000000000000ms"], "\(bodies)")
        let typed = result["label_typed"] as? [String: [String: Int]] ?? [:]
        #expect(typed["astral"]?["characters"] == MarkerRequest.maximumLabelLength, "\(typed)")
        #expect(typed["family"]?["bytes"] ?? 0 >= 4 * MarkerRequest.maximumLabelLength, "\(typed)")

        // An export of several files (.y4m of every stream) has a link per file, each serving its own file.
        let several = result["several_files"] as? [String: Any] ?? [:]
        let files = several["files"] as? [String] ?? []
        let links = several["links"] as? [[String]] ?? []
        let served = several["served"] as? [[Any]] ?? []
        #expect(files.count == 2 && links.count == 2 && served.count == 2, "\(several)")
        for (index, file) in files.enumerated() where index < links.count && index < served.count {
            let name = (file as NSString).lastPathComponent
            #expect(links[index].first == name && links[index].last?.hasSuffix("?file=\(index)") == true, "\(links)")
            let size = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? -1
            #expect(served[index].first as? Int == 200, "\(served)")
            #expect((served[index][1] as? String)?.contains("filename=\"\(name)\"") == true, "\(served)")
            #expect(served[index].last as? Int == size && size > 0, "\(served) \(file): \(size) bytes")
        }

        // Before recorder time 0 nothing is recorded: no thumbnail, no frame view, no export of frame 0.
        let hover = result["hover_before_zero"] as? [String: Any] ?? [:]
        #expect(
            (hover["caption"] as? String)?.contains("nothing is recorded before recorder time 0") == true,
            "\(hover)")
        #expect(hover["time"] is NSNull, "\(hover)")
        let click = result["click_before_zero"] as? [String: Any] ?? [:]
        #expect((click["message"] as? String)?.hasPrefix("no frame of front at or before -5.000s") == true, "\(click)")
        #expect(click["frame_view_open"] as? Bool == false, "\(click)")
        #expect(result["message_after_a_frame"] as? String == "", "a frame shown takes the message away")
        #expect(result["save_order"] as? String == "done", "a late answer does not take a save back to waiting")
        let drag = result["drag_before_zero"] as? [String: Any] ?? [:]
        #expect((drag["message"] as? String)?.hasPrefix("no frames in range -1") == true, "\(drag)")
        #expect(drag["export_dialog_open"] as? Bool == false && drag["new_saves"] as? Int == 0, "\(drag)")

        // Zooming out past 7 days keeps the time under the pointer under it; day-apart labels differ.
        let zoom = result["zoom"] as? [String: Any] ?? [:]
        let span = (zoom["to"] as? Double ?? 0) - (zoom["from"] as? Double ?? 0)
        #expect(abs(span - 7 * 86_400e9) < 1e6, "\(zoom)")
        #expect(abs((zoom["at_anchor"] as? Double ?? 0) - (zoom["anchor"] as? Double ?? 1e18)) < 1e6, "\(zoom)")
        let ticks = zoom["labels"] as? [String] ?? []
        #expect(ticks.count >= 3 && Set(ticks).count == ticks.count, "\(ticks)")

        // A click without the token cookie says so, and how to open the page again.
        // A window narrower than the thumbnail: it starts at the lane's left edge (it was 53 px off it, clipped).
        let narrow = result["narrow"] as? [String: Any] ?? [:]
        #expect(narrow["left"] as? String == "0px", "\(narrow)")
        let refused = result["message_without_cookie"] as? String ?? ""
        #expect(refused.contains("token cookie") && refused.contains("/?token="), "\(refused)")

        // A token link opened from another site's page opens the timeline, and a reload keeps it (the cookie is
        // SameSite=Strict: after a redirect from the link it would not be sent); the 401 page's token box opens it
        // with the token in no address.
        let ways = result["token_ways"] as? [String: Any] ?? [:]
        #expect(ways["linked_title"] as? String != "rewind: token needed", "\(ways)")
        #expect(ways["reloaded_lanes"] as? Int == 2, "\(ways)")
        #expect(ways["without_title"] as? String == "rewind: token needed", "\(ways)")
        #expect(ways["form_lanes"] as? Int == 2 && (ways["form_url"] as? String)?.hasSuffix("/") == true, "\(ways)")
        #expect((ways["back_url"] as? String)?.hasPrefix("http://127.0.0.1") == true, "\(ways)")

        // The screenshot the README shows.
        let screenshot = output + "/timeline.png"
        #expect(FileManager.default.fileExists(atPath: screenshot))
        if ProcessInfo.processInfo.environment["REWIND_UPDATE_SCREENSHOT"] == "1" {
            try? FileManager.default.removeItem(atPath: Tool.packageRoot + "/docs/timeline.png")
            try FileManager.default.copyItem(atPath: screenshot, toPath: Tool.packageRoot + "/docs/timeline.png")
        }
        try live.stop()

        // The same time of day given to `rewind clip --from` in the same zone (on the stopped store: a live recorder
        // reads it in its own zone) starts the clip at the frame the page showed.
        if let timeOfDay {
            let shownPTS = steps.last ?? 0
            let fromPage = directory.appendingPathComponent("from-page.mkv").path
            let clipFromPage = try Tool.rewind(
                [
                    "clip", "--store", live.store, "--stream", "front", "--from", String(timeOfDay), "--to",
                    "\(shownPTS + 300_000_000)ns", "-o", fromPage,
                ], environment: environment)
            #expect(clipFromPage.status == 0, "\(clipFromPage.stderr)")
            let firstIndex = try frameMarks(fromPage, width: 640, height: 360).first ?? -1
            let shownIndex = (shownPTS * 30 + 500_000_000) / 1_000_000_000
            #expect(
                abs(firstIndex - shownIndex) <= 1,
                "the clip from \(timeOfDay) starts at frame \(firstIndex), not \(shownIndex)")
        }
    }

    /// When the recorder stops (SIGTERM), the page says so and keeps saying so, marks memory and status as stale and
    /// asks less and less often; when a recorder answers again on the same store and port, the message goes and the
    /// streams are read again: a new stream gets its lane, and its failed input shows on the lane, in the status and
    /// as `input failed` gaps in their own colour; killed (SIGKILL), it is found gone again.
    @Test func thePageSaysWhenTheRecorderStopsAndReadsItAgainWhenItIsBack() throws {
        let directory = try Tool.temporaryDirectory("timeline-restart")
        defer { try? FileManager.default.removeItem(at: directory) }
        let live = try Live(directory: directory)
        defer { if live.recorder.process.isRunning { live.recorder.process.terminate() } }
        // A file whose input fails after 40 s at 25 fps (paced by --realtime), cut in the middle of frame 1001: long
        // after the page has found the new run (it checks at most 15 s apart), so the page sees it fail.
        let side = directory.appendingPathComponent("side.y4m").path
        try ExternalTools.makeY4M(side, width: 160, height: 120, rate: "25", frames: 1001)
        let data = try Data(contentsOf: URL(fileURLWithPath: side))
        let frameBytes = 160 * 120 * 3 / 2 + 6
        try data.prefix(data.count - frameBytes + 100).write(to: URL(fileURLWithPath: side))
        // Without the rear camera: the store still holds its frames, and the page shows it as a stored lane.
        let again =
            [Tool.rewindPath, "record", "--store", live.store] + Live.front + Live.pacing
            + ["--input", "side=y4m:\(side)", "--listen", "127.0.0.1:\(live.port)"]
        let command = String(decoding: try JSONSerialization.data(withJSONObject: again), as: UTF8.self)
        try waitUntil("the recorder holds 2 s of front", timeout: .seconds(60), interval: .milliseconds(200)) {
            let status = try? JSONSerialization.jsonObject(with: live.get("/v1/status")) as? [String: Any]
            let streams = status?["streams"] as? [[String: Any]] ?? []
            return (streams.first { $0["stream"] as? String == "front" }?["memory_frames"] as? Int ?? 0) >= 60
        }
        let output = directory.appendingPathComponent("browser").path
        try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
        let script = Tool.packageRoot + "/Tests/Browser/timeline_page.py"
        let run = try Tool.run(
            "/usr/bin/python3",
            [script, live.base, live.token, output, "restart", "\(live.recorder.process.processIdentifier)", command],
            timeout: .seconds(900))
        #expect(run.status == 0, "\(run.stderr.suffix(3000))")
        let result = try #require(
            try JSONSerialization.jsonObject(with: run.stdout) as? [String: Any], "\(run.output) \(run.stderr)")
        #expect(result["error"] == nil, "the page failed: \(result)")
        let first = try live.recorder.finish()
        #expect(first.status == 0, "the recorder stopped by SIGTERM: \(first.stderr)")
        #expect(result["lanes_before"] as? [String] == ["front", "rear"])

        // Stopped with SIGSTOP (connections kept, nothing answered): the silence is noticed and said, and the page is
        // back when the recorder runs again.
        let silent = result["silent"] as? [String: Any] ?? [:]
        #expect(
            (silent["banner"] as? String)?.hasPrefix("the recorder has sent nothing since ") == true
                && (silent["banner"] as? String)?.contains("it is stopped (Ctrl-Z, kill -STOP) or stuck") == true,
            "\(silent)")
        #expect(silent["banner_hidden"] as? Bool == false && silent["status_stale"] as? Bool == true, "\(silent)")
        #expect(result["resumed_banner_hidden"] as? Bool == true, "\(result)")

        // Stopped: one clear message that stays, stale live parts, and checks further and further apart.
        let stopped = result["stopped"] as? [String: Any] ?? [:]
        #expect(
            (stopped["banner"] as? String)?.hasPrefix("the recorder stopped or is not reachable") == true, "\(stopped)")
        #expect(stopped["banner_hidden"] as? Bool == false, "\(stopped)")
        #expect((stopped["message"] as? String)?.contains("Failed to fetch") == false, "\(stopped)")
        #expect(stopped["status_stale"] as? Bool == true && stopped["lanes_stale"] as? Bool == true, "\(stopped)")
        #expect((stopped["status_heading"] as? String)?.contains("stale") == true, "\(stopped)")
        #expect((stopped["retry_delay_ms"] as? Int ?? 0) >= 4000, "backing off: \(stopped)")
        let click = result["click_while_stopped"] as? String ?? ""
        #expect(click.hasPrefix("the recorder is not reachable"), "\(click)")

        // Back: the message is gone, the new run's streams are read, and the failed input shows.
        let back = result["restarted"] as? [String: Any] ?? [:]
        #expect(back["banner_hidden"] as? Bool == true && back["status_stale"] as? Bool == false, "\(back)")
        #expect(back["lanes"] as? [String] == ["front", "side", "rear"], "\(back)")
        #expect((back["rear_label"] as? String)?.hasSuffix("(stored: not recording)") == true, "\(back)")
        #expect(back["export_streams"] as? [String] == ["front", "side", "rear"], "\(back)")
        #expect(back["export_checked"] as? [Bool] == [true, true, false], "the stored stream when ticked: \(back)")
        let stored = result["stored_export"] as? [String: Any] ?? [:]
        #expect(stored["stream"] as? String == "rear" && stored["state"] as? String == "done", "\(stored)")
        #expect((stored["frames"] as? Int ?? 0) > 0, "the stored camera's frames, from the disk: \(stored)")
        #expect((back["rear_timeline_buckets"] as? Int ?? 0) > 0, "the stored lane reads its timeline: \(back)")
        #expect(result["back_message"] as? String == "", "the message is cleared: \(result["back_message"] ?? "")")
        #expect(result["saves_after_restart"] as? Int == 0, "the last run's saves are gone from the page")
        let failedBeforeItWasSeen = result["failed_before_the_page_was_back"] as? Bool
        #expect(failedBeforeItWasSeen == false, "the side input failed only after the page found the new run")
        #expect((back["message"] as? String)?.hasPrefix("side: input failed: ") == true, "\(back)")
        #expect((back["side_lane_error"] as? String)?.hasPrefix("input failed: ") == true, "\(back)")
        #expect((back["status_panel"] as? String)?.contains("input failed: ") == true, "\(back)")
        #expect(back["input_failed_colour"] as? String != "#f8fafc", "\(back)")
        #expect((back["input_failed_pixels"] as? Int ?? 0) > 0, "the lane draws its input failed gap: \(back)")

        // Killed (SIGKILL): gone again, and the page says so.
        let killed = result["killed_banner"] as? String ?? ""
        #expect(killed.hasPrefix("the recorder stopped or is not reachable"), "\(killed)")
    }

    /// Saves and exports as the page lists and draws them, on a recorder of two streams whose store also holds a
    /// third from an earlier run (`Tests/Browser/timeline_page.py … saves`).
    @Test func thePageShowsEverySaveAndWhatBecameOfIt() throws {
        let directory = try Tool.temporaryDirectory("timeline-saves")
        defer { try? FileManager.default.removeItem(at: directory) }
        // The earlier run: a camera the recorder below does not record, whose lane is a stored one.
        let earlier = try Tool.rewind([
            "record", "--store", directory.appendingPathComponent("store").path, "--input", "old=synthetic:160x120@15",
            "--duration", "1s",
        ])
        #expect(earlier.status == 0, "\(earlier.stderr)")
        let live = try Live(directory: directory)
        defer { if live.recorder.process.isRunning { live.recorder.process.terminate() } }
        try waitUntil("the recorder holds 2 s of front", timeout: .seconds(60), interval: .milliseconds(200)) {
            let status = try? JSONSerialization.jsonObject(with: live.get("/v1/status")) as? [String: Any]
            let streams = status?["streams"] as? [[String: Any]] ?? []
            return (streams.first { $0["stream"] as? String == "front" }?["memory_frames"] as? Int ?? 0) >= 60
        }
        let output = directory.appendingPathComponent("browser").path
        try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
        let run = try Tool.run(
            "/usr/bin/python3",
            [
                Tool.packageRoot + "/Tests/Browser/timeline_page.py", live.base, live.token, output, "saves",
                "\(live.recorder.process.processIdentifier)",
            ], timeout: .seconds(600))
        #expect(run.status == 0, "\(run.stderr.suffix(3000))")
        let result = try #require(
            try JSONSerialization.jsonObject(with: run.stdout) as? [String: Any], "\(run.output) \(run.stderr)")
        #expect(result["error"] == nil, "the page failed: \(result)")
        #expect(result["failed_parts"] == nil, "parts of the page failed: \(result["failed_parts"] ?? "")")
        #expect(result["lanes"] as? [String] == ["front", "rear", "old"], "\(result)")

        // An export of two streams that fails for both says so for each, not only for the last.
        let several = result["several_message"] as? String ?? ""
        #expect(several.contains("export of front: ") && several.contains("export of rear: "), "\(several)")

        // A save of `all` is drawn on the lanes of the streams it covers: while it waits, the recorded ones (not the
        // stored lane, which it does not include); with its tracks known, those.
        #expect(result["waiting_bands"] as? [String: Int] == ["front": 1, "rear": 1, "old": 0], "\(result)")
        #expect(result["bands_after_cancel"] as? [String: Int] == ["front": 0, "rear": 0, "old": 0], "\(result)")
        #expect(result["tracks_bands"] as? [String: Int] == ["front": 0, "rear": 1, "old": 0], "\(result)")

        // Every save the recorder lists is in the exports panel, more than 20 too, newest first, and the panel
        // scrolls.
        let every = result["every_save"] as? [String: Any] ?? [:]
        #expect((every["api"] as? Int ?? 0) > 25 && every["page"] as? Int == every["api"] as? Int, "\(every)")
        #expect(every["newest_first"] as? Bool == true && every["scrolls"] as? Bool == true, "\(every)")

        // Stopped (SIGTERM) while a save of every stream waited: the page says the recorder is stopping, keeps
        // listening, and shows the save the recorder finished as done, with its files; then finds it gone.
        let stopped = try live.recorder.finish()
        #expect(stopped.status == 0, "the recorder stopped by SIGTERM: \(stopped.stderr)")
        #expect(result["stopping_connection"] as? String == "stopping", "\(result)")
        #expect((result["stopping_banner"] as? String)?.hasPrefix("the recorder is stopping") == true, "\(result)")
        let save = result["stopped_save"] as? [String: Any] ?? [:]
        #expect(save["state"] as? String == "done" && save["shown"] as? String == "done", "\(save)")
        #expect(save["link"] as? Bool == true, "\(save)")
        let files = save["files"] as? [String] ?? []
        #expect(!files.isEmpty && files.allSatisfy { FileManager.default.fileExists(atPath: $0) }, "\(save)")
        #expect(result["connection_after_stop"] as? String == "lost", "\(result)")
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
                    data + [
                        "-H", "Cookie: rewind_token_\(live.port)=\(live.token)", "-H", "Origin: http://evil.example",
                    ]) == "403",
                "\(method) \(path) from another site")
        }
        for path in ["/", "/timeline.js", "/v1/status", "/v1/streams/front/frame?at=0s", "/v1/files/1"] {
            #expect(try code("GET", path) == "401", "GET \(path) without a token")
        }
        // A browser opening the page without the token gets a page saying how to open it, not the API's JSON.
        let html = try Tool.run(curl, ["-s", "-i", "-H", "Accept: text/html,*/*", live.base + "/?token=wrong"]).output
        #expect(html.hasPrefix("HTTP/1.1 401"), "\(html)")
        #expect(html.lowercased().contains("content-type: text/html"), "\(html)")
        #expect(html.contains("/?token=") && html.contains(live.store + "/token"), "\(html)")
        #expect(html.contains("The token given is not this recorder's."), "a wrong token is said to be wrong: \(html)")
        let none = try Tool.run(curl, ["-s", "-H", "Accept: text/html", live.base + "/"]).output
        #expect(none.contains("needs its token") && !none.contains("The token given"), "\(none)")
        #expect(!html.contains(live.token))
        #expect(
            try Tool.run(curl, ["-s", "-H", "Accept: application/json", live.base + "/"]).output.contains(
                #""code":"unauthorized""#))
        // With the token: the page, and a marker from the page's own origin.
        #expect(try code("GET", "/", ["-H", "Authorization: Bearer \(live.token)"]) == "200")
        #expect(
            try code(
                "POST", "/v1/markers",
                [
                    "--data", #"{"label": "ok"}"#, "-H", "Cookie: rewind_token_\(live.port)=\(live.token)", "-H",
                    "Origin: \(live.base)",
                ]
            ) != "403")
        try live.stop()
    }
}

extension TimelinePageTests {
    /// The headers of a GET, with the token, as curl prints them (`-D -`), lowercased.
    static func headers(_ live: Live, _ path: String, _ extra: [String] = []) throws -> String {
        let curl = try Tool.path(of: "curl")
        return try Tool.run(curl, ["-s", "-o", "/dev/null", "-D", "-"] + extra + [live.base + path]).output.lowercased()
    }

    /// Every answer, a frame, a JSON answer, the page and a refusal alike, says that its bytes are only what its
    /// type says and that no page of another origin may embed it: a page on another port of the same host (the
    /// same site, so the token cookie goes with its requests) cannot show the camera's frames in an `<img>`.
    @Test func everyAnswerIsForThisOriginOnly() throws {
        let directory = try Tool.temporaryDirectory("timeline-headers")
        defer { try? FileManager.default.removeItem(at: directory) }
        let live = try Live(directory: directory)
        defer { if live.recorder.process.isRunning { live.recorder.process.terminate() } }
        try waitUntil("the recorder holds a frame of front", timeout: .seconds(60), interval: .milliseconds(100)) {
            (try? live.get("/v1/streams/front/frame?at=1h")) != nil
        }
        let bearer = ["-H", "Authorization: Bearer \(live.token)"]
        let answers = [
            ("a frame", "/v1/streams/front/frame?at=1h", bearer), ("JSON", "/v1/status", bearer),
            ("the page", "/", bearer), ("the script", "/timeline.js", bearer), ("a 401", "/v1/status", []),
            ("a 404", "/v1/nothing", bearer),
        ]
        for (what, path, extra) in answers {
            let headers = try Self.headers(live, path, extra)
            #expect(headers.contains("\r\ncross-origin-resource-policy: same-origin\r\n"), "\(what): \(headers)")
            #expect(headers.contains("\r\nx-content-type-options: nosniff\r\n"), "\(what): \(headers)")
            #expect(headers.components(separatedBy: "x-content-type-options").count == 2, "once: \(headers)")
        }
        try live.stop()
    }

    /// A download names its file by RFC 6266: an ASCII `filename` (quotes, backslashes, control characters and
    /// what is not ASCII replaced) and the exact name in `filename*`, percent-encoded UTF-8; quotes, a backslash, a
    /// semicolon and Japanese come through whole.
    @Test func aDownloadNamesItsFileWhateverItsCharacters() throws {
        let directory = try Tool.temporaryDirectory("timeline-download-name")
        defer { try? FileManager.default.removeItem(at: directory) }
        let live = try Live(directory: directory)
        defer { if live.recorder.process.isRunning { live.recorder.process.terminate() } }
        try waitUntil("the recorder holds a frame of front", timeout: .seconds(60), interval: .milliseconds(100)) {
            (try? live.get("/v1/streams/front/frame?at=1h")) != nil
        }
        let name = #"a "b" \c; 日本.mkv"#
        let path = directory.appendingPathComponent(name).path
        let body = try JSONSerialization.data(withJSONObject: [
            "stream": "front", "from": "0s", "to": "500ms", "path": path, "wait": true,
        ])
        let curl = try Tool.path(of: "curl")
        let made = try Tool.run(
            curl,
            [
                "-sf", "-H", "Authorization: Bearer \(live.token)", "-H", "Content-Type: application/json", "--data",
                String(decoding: body, as: UTF8.self), live.base + "/v1/clips",
            ])
        let save = try #require(try JSONSerialization.jsonObject(with: made.stdout) as? [String: Any], "\(made)")
        let id = try #require(save["id"] as? Int, "\(save)")
        let headers = try Tool.run(
            curl,
            [
                "-s", "-o", "/dev/null", "-D", "-", "-H", "Authorization: Bearer \(live.token)",
                live.base + "/v1/files/\(id)",
            ]
        ).output
        let line = try #require(
            headers.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-disposition:") }, "\(headers)")
        let value = line.drop { $0 != ":" }.dropFirst().trimmingCharacters(in: .whitespaces)
        #expect(
            value
                == #"attachment; filename="a _b_ _c; __.mkv"; filename*=UTF-8''a%20%22b%22%20%5Cc%3B%20%E6%97%A5%E6%9C%AC.mkv"#,
            "\(value)")
        #expect(value.unicodeScalars.allSatisfy { $0.isASCII && $0.value >= 0x20 }, "\(value)")
        // A parser of RFC 2231 parameters (Python's email package) reads the exact name from `filename*`.
        let parsed = try Tool.run(
            "/usr/bin/python3",
            [
                "-c",
                "import sys, email.message, email.utils; m = email.message.Message(); "
                    + "m['Content-Disposition'] = sys.argv[1]; "
                    + "encoded = [v for k, v in m.get_params(header='content-disposition') if isinstance(v, tuple)]; "
                    + "sys.stdout.buffer.write(email.utils.collapse_rfc2231_value(encoded[0]).encode())",
                value,
            ])
        #expect(parsed.output == name, "\(parsed.output) \(parsed.stderr)")
        // curl -J, which reads only `filename`, saves the download under its ASCII name.
        let downloads = directory.appendingPathComponent("downloads")
        try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
        let saved = try Tool.run(
            "/bin/sh",
            [
                "-c", #"cd "$1" && exec "$2" -sfOJ -H "Authorization: Bearer $3" "$4""#, "sh", downloads.path, curl,
                live.token, live.base + "/v1/files/\(id)",
            ])
        #expect(saved.status == 0, "\(saved.stderr)")
        let fallback = downloads.appendingPathComponent("a _b_ _c; __.mkv").path
        #expect(FileManager.default.contentsEqual(atPath: fallback, andPath: path))
        try live.stop()
    }

    /// A wrong token posted in the token box is answered, as the right one is, with a redirect (303) to the page,
    /// which says the token was wrong: Back never offers to post it again.
    @Test func aWrongTokenPostedInTheBoxIsARedirect() throws {
        let directory = try Tool.temporaryDirectory("timeline-wrong-token")
        defer { try? FileManager.default.removeItem(at: directory) }
        let live = try Live(directory: directory)
        defer { if live.recorder.process.isRunning { live.recorder.process.terminate() } }
        let curl = try Tool.path(of: "curl")
        func post(_ token: String) throws -> String {
            try Tool.run(
                curl,
                [
                    "-s", "-o", "/dev/null", "-D", "-", "-H", "Accept: text/html", "-H", "Origin: \(live.base)",
                    "--data-urlencode", "token=\(token)", live.base + "/",
                ]
            ).output
        }
        let wrong = try post("wrong-token-of-some-length")
        #expect(wrong.hasPrefix("HTTP/1.1 303"), "\(wrong)")
        #expect(wrong.contains("\r\nLocation: /?token_refused=1\r\n"), "\(wrong)")
        #expect(!wrong.lowercased().contains("set-cookie"), "\(wrong)")
        // Where it leads: the page that asks for the token, saying the one given was wrong.
        let page = try Tool.run(curl, ["-s", "-i", "-H", "Accept: text/html", live.base + "/?token_refused=1"]).output
        #expect(page.hasPrefix("HTTP/1.1 401"), "\(page)")
        #expect(page.contains("The token given is not this recorder's."), "\(page)")
        #expect(page.contains(#"<form method="post" action="/">"#), "\(page)")
        // The right token: a redirect to the page, with the cookie.
        let right = try post(live.token)
        #expect(right.hasPrefix("HTTP/1.1 303") && right.contains("\r\nLocation: /\r\n"), "\(right)")
        #expect(right.contains("Set-Cookie: rewind_token_\(live.port)="), "\(right)")
        // A program posting the form without asking for HTML gets the API's 401.
        let program = try Tool.run(
            curl,
            ["-s", "-w", " %{http_code}", "--data-urlencode", "token=wrong-token-of-some-length", live.base + "/"]
        ).output
        #expect(program.hasSuffix(" 401") && program.contains(#""code":"unauthorized""#), "\(program)")
        try live.stop()
    }
}

/// The synthetic camera's frame indexes in a video file, frame by frame (frames without a mark are skipped).
private func frameMarks(_ path: String, width: Int, height: Int) throws -> [Int64] {
    let raw = try ExternalTools.run(
        "ffmpeg", ["-hide_banner", "-loglevel", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "nv12", "-"])
    let layout = try FrameLayout(format: .nv12, width: width, height: height)
    let info = try FrameInfo(pts: FrameTime(nanoseconds: 0), wallNanoseconds: 0, color: .bt709Video)
    var indexes: [Int64] = []
    raw.withUnsafeBytes { bytes in
        for offset in stride(from: 0, to: bytes.count - layout.byteCount + 1, by: layout.byteCount) {
            let frame = UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + layout.byteCount)])
            if let mark = SyntheticCamera.verify(FrameView(layout: layout, info: info, bytes: frame)) {
                indexes.append(mark.index)
            }
        }
    }
    return indexes
}
