import Foundation
import RewindTesting
import Testing

/// The keys `rewind soak --report` promises (DESIGN: machine-readable outputs).
private let contractKeys = [
    "passed", "failed_invariants", "budget_bytes", "max_rss_bytes", "frames_produced", "frames_verified",
    "frames_lost", "corrupt_frames", "rss_slope_bytes_per_s", "events",
]

/// A short soak through the real binary: small frames, a few seconds of stream time at full speed.
private func soak(_ extra: [String], in directory: URL) throws -> (ToolResult, [String: Any]) {
    let report = directory.appendingPathComponent("report.json").path
    let result = try Tool.rewind(
        [
            "soak", "--speed", "max", "--size", "320x240", "--fps", "60", "--memory", "32MiB", "--window", "1s",
            "--report", report,
        ] + extra)
    let data = try Data(contentsOf: URL(fileURLWithPath: report))
    let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    return (result, object)
}

@Suite(.timeLimit(.minutes(45))) struct SoakTests {
    @Test func aShortSoakThroughEveryKindOfEventPassesWithACompleteReportAndChart() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let chart = directory.appendingPathComponent("chart.svg").path
        let store = directory.appendingPathComponent("store").path
        let (result, report) = try soak(
            [
                "--duration", "4s", "--events", "1s:pressure=critical,1.5s:disk=full,2.5s:disk=ok,3s:thermal=serious",
                "--chart", chart, "--store", store,
            ], in: directory)
        #expect(result.status == 0, "\(result.output)\n\(result.stderr)")
        #expect(result.output.hasPrefix("soak passed"))
        for key in contractKeys { #expect(report[key] != nil, "report has \(key)") }
        #expect(report["passed"] as? Bool == true)
        #expect((report["failed_invariants"] as? [String]) == [])
        #expect(report["budget_bytes"] as? Int == 32 << 20)
        let maxRSS = try #require(report["max_rss_bytes"] as? Int)
        #expect(maxRSS > 1 << 20 && maxRSS <= (32 << 20) + (48 << 20))
        #expect(report["frames_lost"] as? Int == 0)
        #expect(report["corrupt_frames"] as? Int == 0)
        let produced = try #require(report["frames_produced"] as? Int)
        let verified = try #require(report["frames_verified"] as? Int)
        let drops = try #require(report["drops_by_reason"] as? [String: Int])
        // 4 s at 60 fps, the last second at 30 fps (thermal=serious).
        #expect(produced == 210)
        #expect(report["frames_skipped_by_camera"] as? Int == 30)
        #expect(produced > drops.values.reduce(0, +))
        #expect(verified > 0 && verified <= produced)
        #expect((drops["disk error"] ?? 0) > 0, "frames written while the disk was full are dropped: \(drops)")
        #expect(report["rss_slope_bytes_per_s"] is Double, "the slope is measured")

        let events = try #require(report["events"] as? [[String: Any]])
        #expect(
            events.compactMap { $0["event"] as? String } == [
                "pressure=critical", "disk=full", "disk=ok", "thermal=serious",
            ])
        #expect(
            events.compactMap { $0["at_ns"] as? Int } == [1_000_000_000, 1_500_000_000, 2_500_000_000, 3_000_000_000])
        let wall = events.compactMap { $0["wall_ns"] as? Int }
        #expect(wall.count == 4 && wall == wall.sorted(), "events happened in order")
        #expect(events.allSatisfy { ($0["rss_bytes"] as? Int ?? 0) > 0 })
        let shed = try #require(events.first?["shed_ns"] as? Int, "the critical cut was watched")
        #expect(shed <= 1_000_000_000)
        let invariants = try #require(report["invariants"] as? [[String: Any]])
        #expect(
            invariants.compactMap { $0["name"] as? String } == [
                "rss_within_limit", "rss_shed_after_pressure", "frames_bit_exact", "no_frames_lost", "rss_flat",
            ])

        // Recording resumed after the full disk; the store says where frames are missing and why, and is clean.
        let stored = try info(store)
        let gaps = try #require(stored["gaps"] as? [[String: Any]])
        let reasons = Set(gaps.compactMap { $0["reason"] as? String })
        #expect(reasons.contains("disk error") && reasons.contains("input interval"), "\(reasons)")
        #expect((stored["last_pts_ns"] as? Int ?? 0) >= 3_900_000_000)
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)

        // The chart is well-formed XML with a marker for every event.
        try runChecked("python3", ["-c", "import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])", chart])
        let svg = try String(contentsOfFile: chart, encoding: .utf8)
        for event in ["pressure=critical", "disk=full", "disk=ok", "thermal=serious"] {
            #expect(svg.contains("<g class='event' data-event='\(event)'"), "marker for \(event)")
        }
        #expect(svg.contains("resident memory (MiB)") && svg.contains("time since the start (s)"))
    }

    /// Frames lost to a full disk stay counted losses after retention deletes their gap with the segments around
    /// it: the read-back saw the gap before the deletion.
    @Test func lossesWhoseGapRetentionDeletedAreStillCovered() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let report = directory.appendingPathComponent("report.json").path
        // 3.4 MB/s of noisy frames against a disk budget of 29 MiB: the first seconds are deleted by the end.
        let result = try Tool.rewind([
            "soak", "--speed", "realtime", "--size", "320x240", "--fps", "30", "--noise", "8", "--memory", "32MiB",
            "--window", "1s", "--disk", "29MiB", "--duration", "14s", "--events", "1s:disk=full,2s:disk=ok",
            "--store", store, "--report", report,
        ])
        #expect(result.status == 0, "\(result.output)\n\(result.stderr)")
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: report)))
        let summary = try #require(object as? [String: Any])
        let lost = try #require((summary["drops_by_reason"] as? [String: Int])?["disk error"])
        #expect(lost >= 15, "a second of the disk being full loses frames")
        #expect(summary["frames_lost"] as? Int == 0)
        #expect(summary["frames_lost_to_counted_drops"] as? Int == lost)
        #expect((summary["gaps_by_reason"] as? [String: Int])?["disk error"] == 1)
        let stored = try info(store)
        #expect((stored["gaps"] as? [[String: Any]])?.isEmpty == true, "retention deleted the gap: \(stored)")
        #expect((stored["first_pts_ns"] as? Int ?? 0) >= 2_000_000_000, "\(stored)")
    }

    /// The report and chart follow links and never replace what is not a regular file: through a link to a private
    /// file (the link stays, the file keeps its mode), through a dangling link (its target is created), into a FIFO
    /// (written in place for its reader); a directory is refused before the run.
    @Test func aSoakWritesItsReportThroughLinksAndIntoAFIFO() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = { (name: String) in directory.appendingPathComponent(name).path }
        try FileManager.default.createDirectory(atPath: path("other"), withIntermediateDirectories: false)
        try Data("old".utf8).write(to: URL(fileURLWithPath: path("other/report.json")))
        #expect(chmod(path("other/report.json"), 0o600) == 0)
        try FileManager.default.createSymbolicLink(
            atPath: path("report.json"), withDestinationPath: "other/report.json")
        try FileManager.default.createSymbolicLink(atPath: path("chart.svg"), withDestinationPath: "other/chart.svg")
        #expect(mkfifo(path("fifo.svg"), 0o644) == 0)
        let arguments = ["soak", "--speed", "max", "--size", "320x240", "--memory", "32MiB", "--duration", "1s"]

        let linked = try Tool.rewind(arguments + ["--report", path("report.json"), "--chart", path("chart.svg")])
        #expect(linked.status == 0, "\(linked.output)\n\(linked.stderr)")
        let report = try JSONSerialization.jsonObject(
            with: Data(contentsOf: URL(fileURLWithPath: path("other/report.json"))))
        #expect((report as? [String: Any])?["passed"] as? Bool == true)
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: path("report.json")) == "other/report.json")
        var mode = stat()
        #expect(stat(path("other/report.json"), &mode) == 0 && mode.st_mode & 0o777 == 0o600)
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: path("chart.svg")) == "other/chart.svg")
        #expect(try String(contentsOfFile: path("other/chart.svg"), encoding: .utf8).contains("<svg"))

        let reader = try ExternalTools.Child(try Tool.path(of: "cat"), [path("fifo.svg")])
        defer { if reader.process.isRunning { reader.process.terminate() } }
        let fifo = try Tool.rewind(arguments + ["--chart", path("fifo.svg")])
        #expect(fifo.status == 0, "\(fifo.output)\n\(fifo.stderr)")
        let read = try reader.finish()
        #expect(read.output.contains("<svg") && read.output.hasSuffix("</svg>\n"), "\(read.output.suffix(80))")
        var info = stat()
        #expect(lstat(path("fifo.svg"), &info) == 0 && info.st_mode & S_IFMT == S_IFIFO, "the FIFO is still there")

        let refused = try Tool.rewind(arguments + ["--report", path("other")])
        #expect(refused.status == 64, "\(refused.output)\n\(refused.stderr)")
        #expect(refused.stderr.contains("is a directory: give a file name in it"), "\(refused.stderr)")
        #expect(!refused.output.contains("soak passed"), "refused before the run")
        // One file for both would keep only the chart; `-` is no file (the summary is on stdout).
        try FileManager.default.createDirectory(atPath: path("sub"), withIntermediateDirectories: false)
        for extra in [
            ["--report", path("both"), "--chart", path("both")],
            ["--report", path("sub/../both"), "--chart", path("both")],
            ["--report", path("./both"), "--chart", path("both")], ["--report", "-"], ["--chart", "-"],
            // An empty name, a directory's name: found before the run, not by the write after it.
            ["--report", ""], ["--chart", ""], ["--report", path("nodir") + "/"], ["--chart", path("r.svg") + "/"],
        ] {
            let refused = try Tool.rewind(arguments + extra)
            #expect(refused.status == 64 && !refused.output.contains("soak passed"), "\(extra): \(refused.stderr)")
            #expect(
                !FileManager.default.fileExists(atPath: path("both")) && !FileManager.default.fileExists(atPath: "-"))
        }
    }

    /// A soak of one frame says so in the right number, and a rate of a million frames a second as a number.
    @Test func aSoakOfOneFrameCountsItInTheRightNumber() throws {
        let result = try Tool.rewind([
            "soak", "--duration", "1ns", "--size", "64x48", "--memory", "2MiB", "--fps", "1000000",
        ])
        #expect(result.status == 0, "\(result.output)\n\(result.stderr)")
        for text in ["at 1000000 fps", "(1 copy from disk", "1 frame accepted"] {
            #expect(result.output.contains(text), "\(text): \(result.output)")
        }
        #expect(!result.output.contains("1 copies") && !result.output.contains("1 frames"), "\(result.output)")
    }

    /// A soak stopped by Ctrl-C before its duration is not a pass: it says how far it got and which events never
    /// happened, and exits 130.
    @Test func aSoakStoppedEarlyIsNotAPass() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let reportPath = directory.appendingPathComponent("report.json").path
        let soak = try Tool.startRewind([
            "soak", "--duration", "60s", "--speed", "realtime", "--size", "160x120", "--fps", "30", "--memory", "16MiB",
            "--events", "30s:pressure=critical,40s:pressure=normal", "--report", reportPath,
        ])
        Thread.sleep(forTimeInterval: 3)
        soak.process.interrupt()
        let result = try soak.finish()
        #expect(result.status == 130, "\(result.output)\n\(result.stderr)")
        #expect(result.output.hasPrefix("soak STOPPED"), "\(result.output)")
        #expect(
            result.stderr.contains("events never applied: 30s:pressure=critical, 40s:pressure=normal"),
            "\(result.stderr)")
        // The report says so too: a job reading it never takes the run for a pass.
        let report = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: reportPath)))
        let object = report as? [String: Any] ?? [:]
        #expect(object["passed"] as? Bool == false && object["end_reason"] as? String == "stopped", "\(object)")
        #expect((object["failed_invariants"] as? [String])?.isEmpty == true, "\(object)")
    }

    /// A real-time soak stopped for a while (SIGSTOP) in the middle catches up in a burst and applies its events
    /// late, although by its end its wall time may be within its pace: it says it fell behind (it read as a clean
    /// pass), how late a frame came, and its report says so (`latest_frame_ns`).
    @Test func aRealtimeSoakStalledInTheMiddleSaysItFellBehind() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let reportPath = directory.appendingPathComponent("report.json").path
        let soak = try Tool.startRewind([
            "soak", "--duration", "12s", "--speed", "realtime", "--size", "160x120", "--fps", "30", "--memory",
            "16MiB", "--events", "6s:pressure=critical,7s:pressure=normal", "--report", reportPath,
        ])
        defer { if soak.process.isRunning { soak.process.terminate() } }
        Thread.sleep(forTimeInterval: 2)
        kill(soak.process.processIdentifier, SIGSTOP)
        Thread.sleep(forTimeInterval: 3)
        kill(soak.process.processIdentifier, SIGCONT)
        let result = try soak.finish(timeout: .seconds(120))
        #expect(result.status == 0, "\(result.output)\n\(result.stderr)")
        #expect(
            result.output.contains("warning: real-time pacing fell behind (a frame was offered "), "\(result.output)")
        let report = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: reportPath)))
        let object = report as? [String: Any] ?? [:]
        #expect(object["pacing_fell_behind"] as? Bool == true, "\(object)")
        #expect((object["latest_frame_ns"] as? Int64 ?? 0) >= 2_000_000_000, "\(object)")
    }

    /// A soak without `--store` records into a store under the temporary directory and removes it (and those
    /// soaks that were killed left there); writing the report and chart leaves nothing else there or beside them.
    @Test func aSoakLeavesNothingBehindButItsReportAndChart() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let temporary = directory.appendingPathComponent("tmp")
        let output = directory.appendingPathComponent("out")
        for folder in [temporary, output] {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        var environment = ProcessInfo.processInfo.environment
        environment["TMPDIR"] = temporary.path
        let report = output.appendingPathComponent("report.json").path
        let chart = output.appendingPathComponent("chart.svg").path
        let arguments = [
            "soak", "--speed", "max", "--size", "320x240", "--memory", "32MiB", "--window", "1s", "--duration", "1s",
            "--report", report, "--chart", chart,
        ]
        // A store left by a soak that was killed (its process is gone) is removed; one of a live process stays.
        let ended = Process()
        ended.executableURL = URL(fileURLWithPath: try Tool.path(of: "true"))
        try ended.run()
        ended.waitUntilExit()
        let leftOver = temporary.appendingPathComponent("rewind-soak-\(ended.processIdentifier)-7").path
        let live = "rewind-soak-\(getpid())-7"
        for folder in [leftOver, temporary.appendingPathComponent(live).path] {
            try FileManager.default.createDirectory(atPath: folder + "/segments", withIntermediateDirectories: true)
        }
        // Twice: the second run replaces the first run's files.
        for _ in 0..<2 {
            let result = try Tool.rewind(arguments, environment: environment)
            #expect(result.status == 0, "\(result.output)\n\(result.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: temporary.path) == [live])
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: output.path).sorted() == [
                    "chart.svg", "report.json",
                ])
            let object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: report)))
            #expect((object as? [String: Any])?["passed"] as? Bool == true)
            // The removed store is named by nobody; a run at max speed keeps no pace.
            #expect((object as? [String: Any])?["store"] is NSNull, "\(object)")
            #expect((object as? [String: Any])?["pacing_fell_behind"] as? Bool == false, "\(object)")
        }
    }

    @Test(
        arguments: [
            ("retain-buffers", "rss_within_limit", "20s"),
            ("corrupt-frame", "frames_bit_exact", "2s"),
            ("lose-frame", "no_frames_lost", "2s"),
        ])
    func aSabotagedRunFailsTheInvariantItBreaks(sabotage: String, invariant: String, duration: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (result, report) = try soak(["--duration", duration, "--sabotage", sabotage], in: directory)
        #expect(result.status == 1, "\(result.output)\n\(result.stderr)")
        #expect(result.stderr.contains("failed: ") && result.stderr.contains(invariant))
        #expect(result.output.contains("FAILED \(invariant): "))
        #expect(report["passed"] as? Bool == false)
        #expect((report["failed_invariants"] as? [String])?.contains(invariant) == true)
        switch sabotage {
        case "retain-buffers": #expect((report["max_rss_bytes"] as? Int ?? 0) > (32 << 20) + (48 << 20))
        case "corrupt-frame": #expect(report["corrupt_frames"] as? Int == 1)
        default: #expect(report["frames_lost"] as? Int == 1)
        }
    }

    @Test(
        arguments: [
            (["--events", "1s:disk=broken"], "--events: '1s:disk=broken': disk must be full, slow or ok"),
            (["--events", "1s:pressure=critical,,2s:disk=ok"], "--events: '': an empty event"),
            (["--events", "5s:disk=full"], "'5s:disk=full': it is at or after the end of the run"),
            // Within the run but after its last frame (2s at 60 fps: the last frame is at 1.983s).
            (["--events", "1999ms:pressure=critical"], "is after the run's last frame (pts 1.983s)"),
            (["--events", "1s:humidity=high"], "unknown key 'humidity'"),
            (["--speed", "fast"], "--speed: 'fast' is not one of max, realtime"),
            (["--noise", "9"], "--noise: '9' is not a noise level"),
            (["--memory", "512KiB"], "holds fewer than 8 frames"),
            (["--disk", "100MiB"], "holds fewer than 256 frames"),
            (["--size", "32x32"], "at least 64x2"),
            (["--sabotage", "everything"], "--sabotage: 'everything' is not one of"),
            // Copies of every frame that stay under the limit would break nothing.
            (["--size", "320x240", "--sabotage", "retain-buffers"], "add up to 13.2 MiB, under the limit of"),
        ] as [([String], String)])
    func badSoakOptionsAreUsageErrors(arguments: [String], message: String) throws {
        let result = try Tool.rewind(["soak", "--duration", "2s"] + arguments)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
        // A value wrong by itself gets the usage line; values that cannot work together (a budget too small for
        // the frame size) nothing more: the whole option table buried what to give.
        let alone = result.stderr.hasPrefix("rewind soak: --")
        #expect(result.stderr.contains("usage: rewind soak") == alone, "\(result.stderr)")
        #expect(!result.stderr.contains("options:"), "\(result.stderr)")
    }

    /// At max speed the soak waits for the spill stage, also when a thermal event makes frames come further apart
    /// than the nominal rate: the ring's time window then fills before its room in frames, and must not push out
    /// frames not yet written (a slow disk keeps the spill stage behind). Every accepted frame is stored.
    @Test func sparseFramesAtMaxSpeedLoseNothing() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let result = try Tool.rewind([
            "soak", "--duration", "20s", "--size", "320x240", "--fps", "30", "--memory", "128MiB", "--disk", "0",
            "--window", "4s", "--events", "0s:disk=slow,1s:thermal=critical", "--store", store,
        ])
        #expect(result.status == 0, "\(result.output) \(result.stderr)")
        let info = try JSONSerialization.jsonObject(with: try Tool.rewind(["info", "--store", store, "--json"]).stdout)
        let object = try #require(info as? [String: Any])
        #expect(object["drops"] as? Int == 0, "\(object["drops_by_reason"] ?? "")")
        #expect(result.output.contains(", 0 lost"), "\(result.output)")
    }

    /// A camera speeding up again after a thermal slowdown refills a ring its window limits: memory grows until the
    /// ring is full again, which is no leak, and `rss_flat` holds.
    @Test func aRingRefillingAfterAThermalSlowdownIsNoLeak() throws {
        let result = try Tool.rewind(
            [
                "soak", "--duration", "12s", "--speed", "realtime", "--size", "1280x720", "--fps", "30", "--memory",
                "256MiB", "--disk", "0", "--window", "4s", "--events", "0s:thermal=critical,4s:thermal=nominal",
            ], timeout: .seconds(120))
        #expect(result.status == 0, "\(result.output) \(result.stderr)")
        #expect(result.output.contains("ok     rss_flat"), "\(result.output)")
    }

    /// At max speed a small --disk fills many times within the read-back's second: what is not read back yet is
    /// held against retention, so every accepted frame is read back and none counts as lost.
    @Test func readBackKeepsUpWithRetentionAtMaxSpeed() throws {
        let result = try Tool.rewind([
            "soak", "--duration", "60s", "--speed", "max", "--size", "320x240", "--fps", "30", "--memory", "64MiB",
            "--disk", "30MiB",
        ])
        #expect(result.status == 0, "\(result.output) \(result.stderr)")
        #expect(result.output.contains("1800 verified bit-exact"), "\(result.output)")
    }

    /// A `--store` whose directories above are missing gets them, as `record` makes them; a soak or a demo into a
    /// store a recorder is recording into is refused as `record` refuses it (69).
    @Test func aStoreIsMadeWithItsParentsAndOneBeingRecordedIsUnavailable() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let deep = directory.appendingPathComponent("a/b/store").path
        let made = try Tool.rewind(["soak", "--duration", "1s", "--size", "160x120", "--store", deep])
        #expect(made.status == 0, "\(made.output)\n\(made.stderr)")
        #expect(FileManager.default.fileExists(atPath: deep + "/index.sqlite"))
        let busy = directory.appendingPathComponent("busy").path
        let recorder = try Tool.startRewind([
            "record", "--store", busy, "--input", "synthetic:160x120@30", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: busy)
        let soak = try Tool.rewind(["soak", "--duration", "1s", "--size", "160x120", "--store", busy])
        #expect(soak.status == 69 && soak.stderr.contains("a recorder is running on"), "\(soak.stderr)")
        let demo = try Tool.rewind(["demo", "--store", busy, "--seconds", "17ms"])
        #expect(demo.status == 69 && demo.stderr.contains("a recorder is running on"), "\(demo.stderr)")
        recorder.process.interrupt()
        _ = try recorder.finish()
    }

    /// The temporary store under a TMPDIR too long for a store's path is refused before the run (64), naming the
    /// limit, as a --store is; not SQLite's failure to open the index with advice to repair it.
    @Test func aTemporaryStoreTooLongForTheIndexIsRefused() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var long = directory
        for letter in ["e", "f", "g"] { long.appendPathComponent(String(repeating: letter, count: 150)) }
        try FileManager.default.createDirectory(at: long, withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        environment["TMPDIR"] = long.path
        let result = try Tool.rewind(
            ["soak", "--duration", "1s", "--size", "64x2", "--memory", "1MiB"], environment: environment)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("set a shorter TMPDIR, or give --store DIR"), "\(result.stderr)")
    }

    @Test func aStoreThatIsNotEmptyIsRefused() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try Data("x".utf8).write(to: directory.appendingPathComponent("file"))
        let result = try Tool.rewind(["soak", "--duration", "1s", "--size", "320x240", "--store", directory.path])
        #expect(result.status == 64)
        #expect(result.stderr.contains("is not an empty directory"))
    }
}
