import Foundation
import RewindTesting
import Testing

/// Windows and budgets of a frame or two, stops while the recorder waits, and soaks under critical pressure on
/// small rings: each records every frame, is refused up front, or ends promptly — never hangs.
@Suite(.timeLimit(.minutes(45))) struct ReliabilityEdgeTests {
    /// A 10 fps 320x240 file of 12 frames (100 ms per frame, 115200 bytes or 29 pages per frame).
    private func makeSource(in directory: URL, rate: String = "10", frames: Int = 12) throws -> String {
        let path = directory.appendingPathComponent("source.y4m").path
        try ExternalTools.makeY4M(path, width: 320, height: 240, rate: rate, frames: frames)
        return path
    }

    @Test(arguments: [
        ["--window", "100ms"], ["--window", "200ms"], ["--memory", "116KiB"], ["--memory", "232KiB"],
        ["--window", "100ms", "--memory", "116KiB"],
    ])
    func aFileRecordsEveryFrameBitExactInAWindowOrBudgetOfOneOrTwoFrames(limits: [String]) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try makeSource(in: directory)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(
            ["record", "--store", store, "--input", "y4m:" + source] + limits, timeout: .seconds(60))
        #expect(record.status == 0, "\(limits): \(record.stderr)")
        #expect(record.output.contains("recorded 12 frames"), "\(limits): \(record.output)")
        #expect(record.output.contains("; 0 dropped;"), "\(limits): \(record.output)")
        let saved = directory.appendingPathComponent("saved.y4m").path
        let save = try Tool.rewind(["save", "--store", store, "--last", "10s", "-o", saved])
        #expect(save.status == 0, "\(save.stderr)")
        #expect(try ExternalTools.frameMD5s(saved) == ExternalTools.frameMD5s(source), "\(limits)")
    }

    /// A camera in real time into a ring of two or three frames, with each spill policy: whether a frame has room
    /// is decided when it is due, by when the spill stage has written the one before, so nothing is dropped. At
    /// 5 fps the ring's few frames leave the spill 400–600 ms for a write (at 10 fps, 300 ms, the spill fell a frame
    /// behind once on a machine busy with the whole test suite).
    @Test(arguments: [
        ["--window", "500ms"], ["--window", "500ms", "--spill", "on-evict"], ["--window", "2s", "--spill", "on-evict"],
        ["--memory", "100KiB"],
    ])
    func aCameraInRealTimeIntoARingOfAFewFramesDropsNothing(limits: [String]) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(
            ["record", "--store", store, "--input", "synthetic:160x120@5", "--realtime", "--duration", "6s"] + limits,
            timeout: .seconds(60))
        #expect(record.status == 0, "\(limits): \(record.stderr)")
        #expect(record.output.contains("recorded 30 frames"), "\(limits): \(record.output)")
        #expect(record.output.contains("; 0 dropped;"), "\(limits): \(record.output)")
    }

    @Test(arguments: [
        (["--window", "99ms"], "give at least --window 100ms"),
        (["--window", "0s"], "give at least --window 100ms"),
        (["--memory", "112KiB"], "give at least --memory 116KiB"),
        (["--memory", "0"], "give at least --memory 116KiB"),
    ])
    func aWindowOrBudgetTooSmallForOneFrameIsRefusedNamingTheSmallestThatWorks(
        limits: [String], advice: String
    ) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try makeSource(in: directory)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:" + source] + limits)
        #expect(record.status == 64, "\(limits): \(record.output) \(record.stderr)")
        #expect(record.stderr.contains(advice), "\(limits): \(record.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store + "/index.sqlite"), "refused before the store opened")
    }

    /// A window a fraction of a millisecond short of a frame is told to the nanosecond (to the millisecond both read
    /// 0.033s), as is one that would read 0.000s, without the whole help.
    /// A memory budget at the top of 64 bits is taken as no limit by everything that adds to it: `status`'s process
    /// line and the soak's limit and ring turnover, which trapped on the overflow.
    @Test func aBudgetAtTheTopOfSixtyFourBitsTrapsNothing() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let largest = String(Int64.max)
        let soak = try Tool.rewind(["soak", "--duration", "1s", "--size", "160x120", "--memory", largest])
        #expect(soak.status == 0, "\(soak.output)\n\(soak.stderr)")
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--duration", "60s",
            "--memory", largest,
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: store)
        let status = try Tool.rewind(["status", "--store", store])
        #expect(status.status == 0 && status.output.contains("process: resident"), "\(status.output)\(status.stderr)")
        recorder.process.interrupt()
        #expect(try recorder.finish().status == 0)
    }

    /// Frames dropped because the spill stage is behind are counted once each, and only frames that came: the end
    /// of the input or the duration costs no frame dropped (reserving room for a frame before reading it counted
    /// one more than came); the gap they leave ends one frame after the last frame offered, not where the recorder's
    /// clock stood when it had written everything.
    @Test func dropsAtTheEndCountOnlyFramesThatCame() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // 20 frames a nanosecond apart, in real time: each comes before the one before it is written.
        let made = directory.appendingPathComponent("made.y4m").path
        try ExternalTools.makeY4M(made, width: 64, height: 48, rate: "30", frames: 20)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: made))
        let header = try #require(bytes.firstIndex(of: 0x0A))
        let line = String(decoding: bytes[..<header], as: UTF8.self)
        bytes.replaceSubrange(
            ..<header, with: Data(line.replacingOccurrences(of: "F30:1", with: "F1000000000:1").utf8))
        let fast = directory.appendingPathComponent("fast.y4m")
        try bytes.write(to: fast)
        // The same cut inside its 16th frame: 15 whole frames came (a frame cut short is no frame lost).
        let cut = directory.appendingPathComponent("cut.y4m")
        let headerBytes = bytes.firstIndex(of: 0x0A)! + 1
        try bytes.prefix(headerBytes + 15 * (6 + 64 * 48 * 3 / 2) + 1000).write(to: cut)
        for (input, offered) in [("y4m:" + fast.path, 20), ("y4m:" + cut.path, 15), ("synthetic:1280x720@240", 240)] {
            let store = directory.appendingPathComponent("store-\(offered)").path
            let record = try Tool.rewind(
                ["record", "--store", store, "--input", input, "--realtime", "--memory", "1384448"]
                    + (offered == 240 ? ["--window", "5ms", "--duration", "1s"] : ["--window", "1ns"]))
            #expect(record.status == (offered == 15 ? 65 : 0), "\(record.stderr)")
            let object = try info(store)
            let stream = try #require((object["streams"] as? [[String: Any]])?.first)
            let frames = stream["frames"] as? Int ?? 0
            let drops = (stream["drops"] as? [String: Int])?.values.reduce(0, +) ?? -1
            let rate: Int64 = offered == 240 ? 240 : 1_000_000_000
            let (frameNanoseconds, lastOffered) = (1_000_000_000 / rate, Int64(offered - 1) * 1_000_000_000 / rate)
            let gaps = stream["gaps"] as? [[String: Any]] ?? []
            // A camera whose frames come later than a pause allows (a machine too slow to render 240 fps, as under a
            // sanitizer) never gave the frames of the pause: each `input interval` gap, from the frame before it,
            // stands for the frames in between.
            let skipped = gaps.filter { $0["reason"] as? String == "input interval" }.reduce(0) { total, gap in
                let length = (gap["end_ns"] as? Int64 ?? 0) - (gap["start_ns"] as? Int64 ?? 0)
                return total + Int((length + frameNanoseconds / 2) / frameNanoseconds) - 1
            }
            // So did the frames after the last one it gave, when a pause moved it past the duration.
            let reached = max(
                stream["last_pts_ns"] as? Int64 ?? 0,
                gaps.map { ($0["end_ns"] as? Int64 ?? 0) - frameNanoseconds }.max() ?? 0)
            let trailing = max(0, Int((lastOffered + frameNanoseconds / 2 - reached) / frameNanoseconds))
            #expect(
                frames + drops + skipped + trailing == offered,
                "\(frames) stored + \(drops) dropped + \(skipped) + \(trailing) never given: \(record.output)")
            let dropped = gaps.filter { $0["reason"] as? String == "spill behind" }
            for gap in dropped {
                let end = gap["end_ns"] as? Int64 ?? .max
                #expect(end <= lastOffered + frameNanoseconds + 1, "\(input): \(gap)")
            }
            // The clip's report of the gap tells its ends apart (to the nanosecond: they are nanoseconds apart).
            if offered == 20, !dropped.isEmpty {
                let clip = try Tool.rewind([
                    "clip", "--store", store, "--from", "0s", "--to", "1s", "-o",
                    directory.appendingPathComponent("fast.mkv").path,
                ])
                #expect(
                    clip.output.contains("where frames were lost: ") && clip.output.contains("ns (spill behind)"),
                    "\(clip.output)")
            }
            // A cut input's `input failed` gap follows the drops' gap: it does not swallow them.
            if offered == 15, !dropped.isEmpty {
                let failed = gaps.first { $0["reason"] as? String == "input failed" }
                #expect(
                    (failed?["start_ns"] as? Int64 ?? -1) >= (dropped.last?["end_ns"] as? Int64 ?? .max),
                    "\(gaps)")
            }
        }
    }

    @Test func aWindowJustShortOfAFrameSaysByHowMuch() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--window", "33ms", "--duration", "1s",
        ])
        #expect(record.status == 64, "\(record.stderr)")
        #expect(
            record.stderr.contains("--window: 33000000ns is shorter than one frame of this input (33333334ns)"),
            "\(record.stderr)")
        #expect(record.stderr.contains("give at least --window 34ms") && !record.stderr.contains("usage:"))
        let soak = try Tool.rewind(["soak", "--duration", "1s", "--size", "160x120", "--fps", "30", "--window", "33ms"])
        #expect(
            soak.status == 64 && soak.stderr.contains("a window of 33000000ns is shorter than one frame (33333334ns)"))
        // Frame times are rounded down to the nanosecond, so frames lie up to a nanosecond more than the frame
        // duration apart: a window of the duration rounded down holds no frame before the newest at such steps.
        let rounded = try Tool.rewind([
            "soak", "--duration", "1s", "--size", "64x48", "--fps", "30000/1001", "--window", "33366666ns",
        ])
        #expect(
            rounded.status == 64 && rounded.stderr.contains("is shorter than one frame (33366667ns)"),
            "\(rounded.stderr)")
        let roundedRecord = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--window", "33333333ns", "--duration", "1s",
        ])
        #expect(roundedRecord.status == 64, "\(roundedRecord.stderr)")
        // A window that would read as 0.000s is told in nanoseconds too.
        let tiny = try Tool.rewind(["soak", "--duration", "1s", "--size", "160x120", "--fps", "30", "--window", "1ns"])
        #expect(
            tiny.status == 64 && tiny.stderr.contains("a window of 1ns is shorter than one frame (33333334ns)"),
            "\(tiny.stderr)")
        // Whole seconds that only end in "0.000s" are told in seconds (10.000s against a 1000 s frame at 0.001 fps).
        let slow = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@0.001", "--duration", "1s",
        ])
        #expect(
            slow.status == 64
                && slow.stderr.contains("--window: 10.000s is shorter than one frame of this input (1000.000s)"),
            "\(slow.stderr)")
        // Output that cannot be written names the command, whichever way it was printed.
        #expect(
            try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x120@10", "--duration", "1s"]).status
                == 0)
        for command in ["info", "info --json"] {
            let full = try Tool.run(
                "/bin/sh", ["-c", "'\(Tool.rewindPath)' \(command) --store '\(store)' > /dev/full"])
            #expect(full.status == 1 && full.stderr.contains("rewind info: stdout: writing failed:"), "\(full.stderr)")
        }
    }

    @Test func aSoakWithAWindowShorterThanAFrameIsRefused() throws {
        let result = try Tool.rewind([
            "soak", "--duration", "2s", "--size", "320x240", "--fps", "10", "--window", "50ms",
        ])
        #expect(result.status == 64, "\(result.output) \(result.stderr)")
        #expect(result.stderr.contains("give at least 100ms"), "\(result.stderr)")
    }

    /// SIGTERM while a real-time recording waits for a frame a second away ends it within a moment, cleanly.
    @Test func sigtermEndsARealTimeRecordingWaitingForItsNextFrame() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try makeSource(in: directory, rate: "1/5", frames: 3)  // a frame every 5 s
        let store = directory.appendingPathComponent("store").path
        let child = try Tool.startRewind(["record", "--store", store, "--input", "y4m:" + source, "--realtime"])
        defer { if child.process.isRunning { kill(child.process.processIdentifier, SIGKILL) } }
        try waitUntil("the recorder holds the store's lock", timeout: .seconds(30)) {
            FileManager.default.fileExists(atPath: store + "/index.sqlite")
        }
        Thread.sleep(forTimeInterval: 1)  // into the wait for the second frame
        let signalled = ContinuousClock.now
        kill(child.process.processIdentifier, SIGTERM)
        #expect(child.waitForExit(timeout: .seconds(5)), "one SIGTERM ended the recording")
        #expect(ContinuousClock.now - signalled < .seconds(3))
        let result = try child.finish(timeout: .seconds(5))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output.contains("recorded 1 frame of"), "\(result.output)")
        #expect(result.output.hasSuffix("; stopped\n"), "\(result.output)")
        // Slower than a frame a second: said as the time between frames, not as 0.200 fps rounded towards none.
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.output.contains("one frame every 5.000s, colour"), "\(info.output)")
    }

    /// SIGHUP (the terminal went away, or the kernel's notice to a stopped job whose shell is gone) stops a recording
    /// cleanly, as SIGTERM does; it ended the process with 129 and an unsealed segment. Under `nohup` (SIGHUP
    /// ignored) the recording goes on.
    @Test func sighupStopsARecordingCleanlyUnlessIgnored() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = ["record", "--store", store, "--input", "synthetic:160x120@30", "--realtime"]
        let child = try Tool.startRewind(record)
        defer { if child.process.isRunning { kill(child.process.processIdentifier, SIGKILL) } }
        try Tool.waitUntilAnswering(store)
        kill(child.process.processIdentifier, SIGHUP)
        let result = try child.finish(timeout: .seconds(30))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output.hasSuffix("; stopped\n"), "\(result.output)")
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 0 && verify.output.contains("clean"), "\(verify.output) \(verify.stderr)")

        let ignoring = try ExternalTools.Child(
            "/bin/sh", ["-c", "trap '' HUP && exec \"$0\" \"$@\"", Tool.rewindPath] + record)
        defer { if ignoring.process.isRunning { kill(ignoring.process.processIdentifier, SIGKILL) } }
        try waitUntil("the recorder answers again", timeout: .seconds(60), interval: .milliseconds(50)) {
            try Tool.rewind(["status", "--store", store]).status == 0
        }
        kill(ignoring.process.processIdentifier, SIGHUP)
        #expect(!ignoring.waitForExit(timeout: .seconds(2)), "SIGHUP ignored under nohup")
        kill(ignoring.process.processIdentifier, SIGTERM)
        let stopped = try ignoring.finish(timeout: .seconds(30))
        #expect(stopped.status == 0 && stopped.output.hasSuffix("; stopped\n"), "\(stopped.output) \(stopped.stderr)")
    }

    /// The same signal twice within a moment (as `timeout` sends it: to the recorder, then to its own process group)
    /// is one request to stop: the recording ends cleanly, its segment sealed, instead of at once.
    @Test func aSignalDeliveredTwiceAtOnceStopsTheRecordingCleanly() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        // An input that sent two frames and then nothing: the stop waits a moment for the blocked read.
        let fifo = directory.appendingPathComponent("pipe.y4m").path
        let frame = Array("FRAME\n".utf8) + [UInt8](repeating: 128, count: 160 * 120 * 3 / 2)
        let writer = try Tool.openFIFO(
            fifo, sending: Array("YUV4MPEG2 W160 H120 F30:1 Ip A1:1 C420jpeg\n".utf8) + frame + frame)
        defer { close(writer) }
        let child = try Tool.startRewind([
            "record", "--store", store, "--input", "y4m:\(fifo)", "--memory-pressure", "off",
        ])
        defer { if child.process.isRunning { kill(child.process.processIdentifier, SIGKILL) } }
        try Tool.waitForSocket(of: store)
        Thread.sleep(forTimeInterval: 0.5)
        kill(child.process.processIdentifier, SIGTERM)
        usleep(20_000)
        kill(child.process.processIdentifier, SIGTERM)
        let result = try child.finish(timeout: .seconds(30))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output.hasSuffix("; stopped\n"), "\(result.output)")
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.output)")
        #expect(
            !((try? FileManager.default.contentsOfDirectory(atPath: store + "/segments")) ?? []).contains {
                $0.hasSuffix(".partial")
            })
    }

    /// SIGTERM while a soak at full speed waits for a slow disk on a small ring ends it within a moment; the run
    /// then finishes its checks and says it was stopped short (130: not a pass).
    @Test func sigtermEndsASoakWaitingForASlowDisk() throws {
        let child = try Tool.startRewind([
            "soak", "--duration", "10m", "--speed", "max", "--size", "320x240", "--fps", "60", "--memory", "2MiB",
            "--events", "0.5s:disk=slow",
        ])
        defer { if child.process.isRunning { kill(child.process.processIdentifier, SIGKILL) } }
        Thread.sleep(forTimeInterval: 4)  // past the event: every write now takes 25 ms longer
        let signalled = ContinuousClock.now
        kill(child.process.processIdentifier, SIGTERM)
        #expect(child.waitForExit(timeout: .seconds(20)), "one SIGTERM ended the soak")
        #expect(ContinuousClock.now - signalled < .seconds(20))
        let result = try child.finish(timeout: .seconds(5))
        #expect(result.status == 130, "\(result.output) \(result.stderr)")
        #expect(result.output.hasPrefix("soak STOPPED") && result.output.contains("(stopped)"), "\(result.output)")
        #expect(result.output.contains("ok     frames_bit_exact"), "the checks ran: \(result.output)")
    }

    /// 1080p60 with 64 MiB: critical pressure leaves a ring of three frames; the soak writes through and passes.
    @Test func a1080p60SoakWith64MiBPassesThroughCriticalPressure() throws {
        let result = try Tool.rewind(
            [
                "soak", "--duration", "12s", "--speed", "max", "--size", "1920x1080", "--fps", "60", "--memory",
                "64MiB", "--events", "4s:pressure=critical,8s:pressure=normal",
            ], timeout: .seconds(240))
        #expect(result.status == 0, "\(result.output) \(result.stderr)")
        #expect(result.output.hasPrefix("soak passed"), "\(result.output)")
        #expect(result.output.contains("(duration reached)"))
        #expect(result.output.contains("720 produced"), "\(result.output)")
    }

    /// 4K30 with 512 MiB: critical pressure leaves a ring of five frames; the soak records every frame through it.
    /// With the event later in the run, the pressure cut can evict every unwritten frame at once: the spill stage
    /// counts them as lost (`evicted before spill`) and moves on, and the waiting producer with it.
    @Test(arguments: [
        ("6s", "2s:pressure=critical,4s:pressure=normal", 180), ("8s", "3s:pressure=critical,5s:pressure=normal", 240),
    ])
    func a4K30SoakWith512MiBRecordsEveryFrameThroughCriticalPressure(duration: String, events: String, frames: Int)
        throws
    {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let reportPath = directory.appendingPathComponent("report.json").path
        let result = try Tool.rewind(
            [
                "soak", "--duration", duration, "--speed", "max", "--size", "3840x2160", "--fps", "30", "--memory",
                "512MiB", "--events", events, "--report", reportPath,
            ], timeout: .seconds(300))
        #expect(result.output.contains("(duration reached)"), "\(result.output) \(result.stderr)")
        let data = try Data(contentsOf: URL(fileURLWithPath: reportPath))
        let report = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(report["frames_produced"] as? Int == frames)
        #expect(report["frames_accepted"] as? Int == frames)
        let verified = try #require(report["frames_verified"] as? Int)
        let counted = try #require(report["frames_lost_to_counted_drops"] as? Int)
        #expect(verified + counted == frames, "every accepted frame is verified or a counted loss")
        #expect(report["frames_lost"] as? Int == 0)
        let invariants = try #require(report["invariants"] as? [[String: Any]])
        for name in ["frames_bit_exact", "no_frames_lost"] {
            #expect(invariants.first { $0["name"] as? String == name }?["passed"] as? Bool == true, "\(name)")
        }
    }

    /// A recording that reaches the file size limit (`ulimit -f`, systemd's LimitFSIZE) is not killed by SIGXFSZ:
    /// the write fails like one on a full disk, the frame is counted as lost to a disk error, the segment is sealed,
    /// and the run exits 1 with the store clean.
    @Test func aRecordingPastTheFileSizeLimitCountsItsLossAndExitsOne() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        // 8 MB: above the index's 4 MiB reserve, below the 20 s recorded into one segment.
        let record = try Tool.rewindWithFileSizeLimit(
            8_192_000, ["record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "20s"])
        #expect(record.status == 1, "\(record.output)\(record.stderr)")
        #expect(record.stderr.contains("File too large"), "\(record.stderr)")
        #expect(record.output.contains("disk error"), "\(record.output)")
        // Every error line names the command.
        let lines = record.stderr.split(separator: "\n").filter { $0.contains("last write error") }
        #expect(!lines.isEmpty && lines.allSatisfy { $0.hasPrefix("rewind record: ") }, "\(record.stderr)")
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.output)")
    }
}
