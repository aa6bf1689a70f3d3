import Foundation
import RewindTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Commands run in a real pids cgroup (what systemd's `TasksMax` sets) whose limit leaves them short of threads:
/// each finishes or refuses at once, saying which thread it could not start (exit 71), never hangs, and leaves the
/// store sound.
///
/// Making a cgroup needs root: other users skip with that reason; a root that cannot make one fails, saying why.
@Suite(.timeLimit(.minutes(45)), .enabled(if: getuid() == 0, "making a pids cgroup needs root"))
struct ThreadLimitTests {
    /// A fresh pids cgroup: at most ``max`` tasks (threads) among the processes put in it.
    final class PidsCgroup {
        let path: String

        init() throws {
            // cgroup v1's pids hierarchy, or the unified hierarchy with the pids controller.
            let v1 = "/sys/fs/cgroup/pids"
            let v2 = "/sys/fs/cgroup"
            let parent: String
            if FileManager.default.fileExists(atPath: v1 + "/cgroup.procs") {
                parent = v1
            } else {
                let controllers = (try? String(contentsOfFile: v2 + "/cgroup.subtree_control", encoding: .utf8)) ?? ""
                try #require(
                    controllers.split(separator: " ").contains(where: { $0.hasPrefix("pids") }),
                    "no pids cgroup controller at \(v1) or in \(v2)/cgroup.subtree_control ('\(controllers)')")
                parent = v2
            }
            path = parent + "/rewind-test-\(getpid())-\(UUID().uuidString.prefix(8))"
            try #require(mkdir(path, 0o755) == 0, "cannot make the cgroup \(path): \(String(cString: strerror(errno)))")
        }

        deinit { rmdir(path) }

        /// Sets the most tasks the cgroup's processes may have together.
        func setMax(_ tasks: Int) throws {
            try "\(tasks)".write(toFile: path + "/pids.max", atomically: false, encoding: .utf8)
        }

        /// The tasks in the cgroup now.
        var current: Int {
            Int(((try? String(contentsOfFile: path + "/pids.current", encoding: .utf8)) ?? "").trimmed) ?? -1
        }

        /// The command line that runs `rewind` with `arguments` inside the cgroup.
        func rewindCommand(_ arguments: [String]) -> [String] {
            ["-c", "echo $$ > \"$0\" && exec \"$@\"", path + "/cgroup.procs", Tool.rewindPath] + arguments
        }

        /// Runs `rewind` with `arguments` inside the cgroup.
        func rewind(_ arguments: [String], timeout: Duration = .seconds(90)) throws -> ToolResult {
            try Tool.run("/bin/sh", rewindCommand(arguments), timeout: timeout)
        }
    }

    /// Whether `result` is the refusal of a command that could not start a thread.
    private func isThreadRefusal(_ result: ToolResult) -> Bool {
        result.status == 71 && result.stderr.contains("could not start a thread (")
            && result.stderr.contains("raise the limit")
    }

    @Test func aRecordingShortOfThreadsRefusesAndLeavesTheStoreSound() throws {
        let directory = try Tool.temporaryDirectory("threads")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let cgroup = try PidsCgroup()
        var refused = 0
        var recorded = 0
        // From no thread beside the main one up to more than a recording needs (its encoder's workers follow the
        // cores): every step either records every frame or refuses, at once.
        for tasks in 1...24 {
            try cgroup.setMax(tasks)
            let run = try cgroup.rewind([
                "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s", "--memory", "16MiB",
            ])
            if run.status == 0 {
                #expect(run.output.contains("recorded 30 frames"), "\(tasks) tasks: \(run.output)")
                #expect(run.output.contains("30 durable"), "\(tasks) tasks: \(run.output)")
                recorded += 1
            } else {
                #expect(isThreadRefusal(run), "\(tasks) tasks: exit \(run.status): \(run.stderr)")
                refused += 1
            }
            let verify = try Tool.rewind(["verify", "--store", store])
            #expect(verify.status == 0, "after \(tasks) tasks: \(verify.output) \(verify.stderr)")
        }
        #expect(refused > 0, "one task is too few for a recording")
        #expect(recorded > 0, "24 tasks are enough for a recording")
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any])
        let frames = try #require(((object["streams"] as? [[String: Any]])?.first)?["frames"] as? Int)
        #expect(frames == 30 * recorded, "\(info.output)")
    }

    @Test func aRecordingOfTwoInputsShortOfThreadsEndsEveryStreamAndNamesTheOneThatFailed() throws {
        let directory = try Tool.temporaryDirectory("threads")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let cgroup = try PidsCgroup()
        var outcomes: Set<Int32> = []
        for tasks in 1...24 {
            try cgroup.setMax(tasks)
            let run = try cgroup.rewind([
                "record", "--store", store, "--input", "a=synthetic:160x120@30", "--input", "b=synthetic:160x120@30",
                "--realtime", "--duration", "1s",
            ])
            outcomes.insert(run.status)
            if run.status == 0 {
                #expect(run.output.contains("stream a: recorded 30 frames"), "\(tasks) tasks: \(run.output)")
                #expect(run.output.contains("stream b: recorded 30 frames"), "\(tasks) tasks: \(run.output)")
            } else {
                #expect(isThreadRefusal(run), "\(tasks) tasks: exit \(run.status): \(run.stderr)")
                // A stream whose input had no thread is named; one left after it says why it did not start.
                if run.stderr.contains("could not start a thread (rewind-input-a)") {
                    #expect(
                        run.stderr.contains("input 'b' was not started: the thread of input 'a' could not be"),
                        "\(run.stderr)")
                }
            }
            let verify = try Tool.rewind(["verify", "--store", store])
            #expect(verify.status == 0, "after \(tasks) tasks: \(verify.output) \(verify.stderr)")
        }
        #expect(outcomes == [0, 71])
    }

    @Test func clipsShortOfThreadsFailAtOnceAndWriteNothing() throws {
        let directory = try Tool.temporaryDirectory("threads")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s",
        ])
        try #require(record.status == 0, "\(record.stderr)")
        let cgroup = try PidsCgroup()
        try cgroup.setMax(1)
        for format in ["y4m", "mkv", "mp4"] {
            let output = directory.appendingPathComponent("clip.\(format)").path
            let clip = try cgroup.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", output])
            if format == "mp4" {
                // ffmpeg cannot be started either: the export says so (before, it waited for ever).
                #expect(
                    isThreadRefusal(clip)
                        || (clip.status == 71 && clip.stderr.contains("could not start a process (ffmpeg)")),
                    "exit \(clip.status): \(clip.stderr)")
            } else {
                #expect(isThreadRefusal(clip), "\(format): exit \(clip.status): \(clip.stderr)")
            }
            #expect(!FileManager.default.fileExists(atPath: output), "\(format): a failed clip leaves no file")
        }
        try cgroup.setMax(10_000)
        let output = directory.appendingPathComponent("clip.mp4").path
        let clip = try cgroup.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", output])
        #expect(clip.status == 0, "\(clip.stderr)")
        let frames = try ExternalTools.run(
            "ffprobe",
            ["-v", "error", "-count_frames", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", output])
        #expect(String(decoding: frames, as: UTF8.self).trimmed == "30")
    }

    /// The bench's spill figures need footage from ffmpeg: without a process for it the part fails, saying why,
    /// rather than leaving its figures out of a run that exits 0.
    @Test func aBenchThatCannotStartFFmpegFailsItsPart() throws {
        let cgroup = try PidsCgroup()
        try cgroup.setMax(1)
        let bench = try cgroup.rewind(["bench", "--only", "store", "--quick"])
        #expect(bench.status == 1, "\(bench.output) \(bench.stderr)")
        #expect(
            bench.stderr.contains("could not measure the segment store: could not start a process (ffmpeg)"),
            "\(bench.stderr)")
        #expect(!bench.output.contains("spill_over_lz4"), "\(bench.output)")
    }

    /// Without ffmpeg on PATH the bench says which tool is missing and exits 69, as any command missing a tool does.
    @Test func aBenchWithoutFFmpegSaysSoAndIsUnavailable() throws {
        let bench = try Tool.rewind(["bench", "--only", "store", "--quick"], environment: ["PATH": "/nonexistent"])
        #expect(bench.status == 69, "\(bench.output) \(bench.stderr)")
        #expect(
            bench.stderr.contains("rewind bench: could not measure the segment store: ffmpeg is not on PATH"),
            "\(bench.stderr)")
    }

    @Test func aRecorderOutOfThreadsDropsRequestsSaysSoAndServesAgainOnceItCan() throws {
        let directory = try Tool.temporaryDirectory("threads")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let cgroup = try PidsCgroup()
        try cgroup.setMax(10_000)
        let recorder = try ExternalTools.Child(
            "/bin/sh",
            cgroup.rewindCommand(["record", "--store", store, "--input", "synthetic:160x120@30", "--realtime"]))
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try waitUntil("the recorder answers", timeout: .seconds(60)) { Tool.firstStreamStatus(store: store) != nil }
        // No room for the thread of a connection: the request is dropped, and the client says the recorder still
        // runs rather than that it stopped. (The limit is taken once the status requests' threads have ended.)
        var counts: [Int] = []
        try waitUntil("the recorder's threads settle", timeout: .seconds(60), interval: .milliseconds(100)) {
            counts.append(cgroup.current)
            return counts.count >= 5 && Set(counts.suffix(5)).count == 1
        }
        try cgroup.setMax(cgroup.current)
        let dropped = try Tool.rewind([
            "save", "--store", store, "--last", "1s", "-o", directory.appendingPathComponent("dropped.y4m").path,
        ])
        #expect(dropped.status == 69, "\(dropped.stderr)")
        #expect(dropped.stderr.contains("closed the connection without answering"), "\(dropped.stderr)")
        #expect(dropped.stderr.contains("raise its limit on threads"), "\(dropped.stderr)")
        // Room for one more task: the request's thread, then the save's, but not ffmpeg's process. The save fails
        // for the limit, exit 71 as a save from the disk would (it was 1, an export failure like any other). (The
        // recorder's tasks counted again once they settle: one it started since counts too.)
        // The client asks for the recorder's status and streams before it posts the save: the thread of such a
        // connection may still be ending when the post arrives, which then finds no room and is dropped (said as
        // above). That step is taken again, a few times, with the threads settled anew.
        func saveWithRoomForOneTask() throws -> ToolResult {
            try cgroup.setMax(10_000)
            counts = []
            try waitUntil("the recorder's threads settle again", timeout: .seconds(60), interval: .milliseconds(100)) {
                counts.append(cgroup.current)
                return counts.count >= 5 && Set(counts.suffix(5)).count == 1
            }
            try cgroup.setMax(counts.last! + 1)
            return try Tool.rewind([
                "save", "--store", store, "--last", "1s", "-o", directory.appendingPathComponent("refused.mp4").path,
            ])
        }
        var refused = try saveWithRoomForOneTask()
        for _ in 1..<5 where refused.status == 69 && refused.stderr.contains("closed the connection without answering")
        {
            refused = try saveWithRoomForOneTask()
        }
        #expect(refused.status == 71, "\(refused.stderr)")
        #expect(refused.stderr.contains("could not start a process (ffmpeg)"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("refused.mp4").path))
        try cgroup.setMax(10_000)
        let saved = directory.appendingPathComponent("saved.y4m").path
        let save = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", saved])
        #expect(save.status == 0, "\(save.stderr)")
        #expect(try ExternalTools.frameMD5s(saved).count == 30)
        recorder.process.terminate()
        let stopped = try recorder.finish(timeout: .seconds(60))
        #expect(stopped.status == 0, "\(stopped.stderr)")
        #expect(stopped.output.contains("; 0 dropped;"), "\(stopped.output)")
    }
}

extension String {
    fileprivate var trimmed: String { trimmingCharacters(in: .whitespacesAndNewlines) }
}

/// A recording under a limit on open files (`ulimit -n`, systemd's `LimitNOFILE=`): refused up front when the limit
/// cannot hold it, and its API's connections never take the descriptors its segment files need.
@Suite(.timeLimit(.minutes(45)))
struct OpenFileLimitTests {
    /// The command line that runs `rewind` with `arguments` under `ulimit` with `limit` (`-n 128`, `-Sn 64`).
    private func limited(_ limit: String, _ arguments: [String]) -> [String] {
        ["-c", "ulimit \(limit) && exec \"$0\" \"$@\"", Tool.rewindPath] + arguments
    }

    @Test func aHardLimitTooLowIsRefusedAndASoftOneIsRaised() throws {
        let directory = try Tool.temporaryDirectory("files")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = ["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"]
        let refused = try Tool.run("/bin/sh", limited("-n 64", record))
        #expect(refused.status == 71, "\(refused.stderr)")
        #expect(refused.stderr.contains("may open only 64 files at once"), "\(refused.stderr)")
        #expect(refused.stderr.contains("raise the limit (ulimit -n 1024)"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store), "nothing was made")
        // Only the soft limit low: raised for the recording, which loses nothing.
        let raised = try Tool.run("/bin/sh", limited("-Sn 64", record))
        #expect(raised.status == 0, "\(raised.stderr)")
        #expect(raised.output.contains("30 durable"), "\(raised.output)")
        // A reader with no descriptor left for the index says so, not that the index may be missing.
        let info = try Tool.run("/bin/sh", limited("-n 4", ["info", "--store", store]))
        #expect(info.status == 71, "\(info.stderr)")
        #expect(info.stderr.contains("cannot be opened: too many open files"), "\(info.stderr)")
        #expect(info.stderr.contains("raise the limit on open files (ulimit -n 1024"), "\(info.stderr)")
        #expect(try Tool.run("/bin/sh", limited("-Sn 4", ["info", "--store", store])).status == 0)
    }

    /// A store missing a segment file is never reported whole, whatever descriptors are left: `segments/` that
    /// could not be listed was taken for a store in order (exit 0, no problem).
    @Test func aStoreThatCouldNotBeCheckedIsNotReportedWhole() throws {
        let directory = try Tool.temporaryDirectory("files")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "3s", "--segment", "1s",
        ])
        try #require(record.status == 0, "\(record.stderr)")
        try FileManager.default.removeItem(atPath: store + "/segments/000002.seg")
        for limit in 4...16 {
            let info = try Tool.run("/bin/sh", limited("-n \(limit)", ["info", "--store", store, "--json"]))
            #expect([1, 71].contains(info.status), "ulimit -n \(limit): \(info.stderr)")
        }
    }

    /// An export that runs out of descriptors says so (71, with the limit to raise) wherever it does: making
    /// ffmpeg's log for an `.mp4` (it said TMPDIR was unusable, exit 1), or checking `segments/` against the index
    /// once a `.mkv` was written (exit 1, "once that is fixed").
    @Test func anExportOutOfDescriptorsSaysToRaiseTheLimit() throws {
        let directory = try Tool.temporaryDirectory("files")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "2s",
        ])
        try #require(record.status == 0, "\(record.stderr)")
        for format in ["mp4", "mkv"] {
            var seen: Set<Int32> = []
            for limit in 6...12 {
                let output = directory.appendingPathComponent("clip-\(limit).\(format)").path
                let clip = try Tool.run(
                    "/bin/sh",
                    limited("-n \(limit)", ["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", output]))
                seen.insert(clip.status)
                #expect([0, 71].contains(clip.status), "\(format), ulimit -n \(limit): \(clip.stderr)")
                #expect(!clip.stderr.contains("TMPDIR"), "\(format), ulimit -n \(limit): \(clip.stderr)")
                if clip.status == 71 {
                    #expect(
                        clip.stderr.contains("raise the limit on open files (ulimit -n 1024"),
                        "\(format), ulimit -n \(limit): \(clip.stderr)")
                }
            }
            #expect(seen.contains(71), "\(format): some limit of 6…12 ran out of descriptors: \(seen)")
        }
        // A store with a problem (a file the index does not list): a check skipped for want of a descriptor is
        // never taken for a store in order (at one limit, the check's own open of the index failed: exit 0).
        let copy = try Data(contentsOf: URL(fileURLWithPath: store + "/segments/000001.seg"))
        try copy.write(to: URL(fileURLWithPath: store + "/segments/000002.seg.partial"))
        for limit in 6...12 {
            let clip = try Tool.run(
                "/bin/sh", limited("-n \(limit)", ["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", "-"]))
            #expect([1, 71].contains(clip.status), "ulimit -n \(limit): \(clip.stderr)")
        }
    }

    @Test func connectionsPastTheDescriptorsLeftAreAnswered503AndTheRecordingLosesNothing() throws {
        let directory = try Tool.temporaryDirectory("files")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        // A segment a second: many files opened while every connection the API allows is taken.
        let recorder = try ExternalTools.Child(
            "/bin/sh",
            limited(
                "-n 128",
                [
                    "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--segment", "1s",
                    "--listen", "127.0.0.1:0",
                ]))
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try waitUntil("the recorder answers", timeout: .seconds(60)) { Tool.firstStreamStatus(store: store) != nil }
        // The socket answers a moment before the TCP listener's line is written: waited for, not read once.
        let port = try #require(Int(try Tool.listeningPort(of: recorder)))
        // 150 event followers on the socket and 150 idle connections on TCP, held open for 5 s: every follower the
        // recorder accepts is answered, 200 or 503, none is closed unanswered (the rest wait in the full backlog). (Both servers at their full default limits would take
        // more descriptors than the 128 allowed.)
        let flood =
            "import socket, sys, time\n"
            + "held, answers = [], {}\n"
            + "for _ in range(150):\n"
            + "    try: held.append(socket.create_connection(('127.0.0.1', int(sys.argv[2])), timeout=1))\n"
            + "    except OSError: pass\n"
            + "tcp = len(held)\n"
            + "for _ in range(150):\n"
            + "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(10)\n"
            + "    try: s.connect(sys.argv[1])\n"
            + "    except BlockingIOError: answers['backlog full'] = answers.get('backlog full', 0) + 1; continue\n"
            + "    s.sendall(b'GET /v1/events HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'); held.append(s)\n"
            + "for s in held[tcp:]:\n"
            + "    s.settimeout(10); line = s.recv(64).split(b'\\r\\n')[0].decode() or 'closed'\n"
            + "    answers[line] = answers.get(line, 0) + 1\n"
            + "print(answers, flush=True); time.sleep(5)\n"
        let followers = try ExternalTools.Child("/usr/bin/python3", ["-c", flood, store + "/rewind.sock", "\(port)"])
        defer { if followers.process.isRunning { kill(followers.process.processIdentifier, SIGKILL) } }
        try waitUntil("the followers are answered", timeout: .seconds(60)) {
            followers.output.contains("}") || !followers.process.isRunning
        }
        let answers = followers.output + followers.stderr
        #expect(answers.contains("'HTTP/1.1 200 OK'") && answers.contains("'HTTP/1.1 503"), "\(answers)")
        #expect(!answers.contains("closed"), "\(answers)")
        let busy = try Tool.rewind([
            "save", "--store", store, "--last", "1s", "-o", directory.appendingPathComponent("busy.y4m").path,
        ])
        // Served if a refused follower's slot is free again, else refused like them: never left unanswered.
        #expect(
            busy.status == 0 || (busy.status == 69 && busy.stderr.contains("too many connections")),
            "\(busy.status) \(busy.stderr)")
        _ = try followers.finish(timeout: .seconds(60))
        // Their connections end as the recorder next writes to them (a status event a second); a save makes several
        // requests, so it is asked again while the last of them are still ending, and must then succeed.
        let saved = directory.appendingPathComponent("saved.y4m").path
        var save = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", saved])
        try waitUntil("the recorder takes a save again", timeout: .seconds(30), interval: .milliseconds(200)) {
            guard save.status == 69 && save.stderr.contains("too many connections") else { return true }
            save = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", saved])
            return false
        }
        #expect(save.status == 0, "\(save.stderr)")
        recorder.process.interrupt()
        let stopped = try recorder.finish(timeout: .seconds(60))
        #expect(stopped.status == 0, "\(stopped.stderr)")
        let counts = stopped.output.split(separator: " ").compactMap { Int($0) }
        #expect(counts.count >= 2 && counts[0] == counts[1] && counts[0] > 30, "every frame durable: \(stopped.output)")
        #expect(stopped.output.contains("; 0 dropped;"), "\(stopped.output)")
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.output)")
    }
}

/// A recording in a memory cgroup whose limit cannot hold its `--memory` budget is refused up front, naming the
/// largest budget that fits, instead of being killed by the kernel once its rings fill.
@Suite(.timeLimit(.minutes(45)), .enabled(if: getuid() == 0, "making a memory cgroup needs root"))
struct MemoryCgroupTests {
    @Test func aBudgetTheCgroupCannotHoldIsRefusedAndOneThatFitsRecords() throws {
        let directory = try Tool.temporaryDirectory("memory")
        defer { try? FileManager.default.removeItem(at: directory) }
        let v1 = "/sys/fs/cgroup/memory"
        let isV1 = FileManager.default.fileExists(atPath: v1 + "/cgroup.procs")
        let cgroup = (isV1 ? v1 : "/sys/fs/cgroup") + "/rewind-test-\(getpid())-\(UUID().uuidString.prefix(8))"
        try #require(mkdir(cgroup, 0o755) == 0, "cannot make \(cgroup): \(String(cString: strerror(errno)))")
        defer { rmdir(cgroup) }
        try "\(128 << 20)".write(
            toFile: cgroup + (isV1 ? "/memory.limit_in_bytes" : "/memory.max"), atomically: false, encoding: .utf8)
        func record(_ memory: String) throws -> ToolResult {
            try Tool.run(
                "/bin/sh",
                [
                    "-c", "echo $$ > \"$0\" && exec \"$@\"", cgroup + "/cgroup.procs", Tool.rewindPath, "record",
                    "--store", directory.appendingPathComponent(memory).path, "--input", "synthetic:640x360@30",
                    "--duration", "2s", "--memory", memory,
                ])
        }
        let refused = try record("512MiB")
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(
            refused.stderr.contains("--memory: 512.0 MiB does not fit in the 128.0 MiB this process's memory cgroup")
                && refused.stderr.contains("give at most --memory 64MiB"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("512MiB").path))
        let fits = try record("64MiB")
        #expect(fits.status == 0, "\(fits.stderr)")
        #expect(fits.output.contains("60 durable"), "\(fits.output)")
    }
}

/// A recording or soak under a limit on address space (`ulimit -v`, systemd's `LimitAS=`): refused up front when its
/// `--memory` budget does not fit with the process's own needs, naming the largest that does, instead of dropping
/// every frame for want of a mapping or ending in a crash report when the Swift runtime's allocation is refused; one
/// that fits records every frame.
@Suite(.timeLimit(.minutes(45)))
struct AddressSpaceLimitTests {
    private func limited(_ kibibytes: Int, _ arguments: [String]) throws -> ToolResult {
        try Tool.run("/bin/sh", ["-c", "ulimit -v \(kibibytes) && exec \"$0\" \"$@\"", Tool.rewindPath] + arguments)
    }

    /// The demo's ring (1.5 GiB) under a smaller limit is refused up front (71), before its store is touched: it
    /// ran with a ring of a fraction of its window and said it saved the last seconds from memory.
    @Test func aDemoWhoseRingTheLimitCannotHoldIsRefused() throws {
        let directory = try Tool.temporaryDirectory("address")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("demo").path
        let refused = try limited(600_000, ["demo", "--store", store, "--seconds", "1s"])
        #expect(refused.status == 71, "\(refused.output)\(refused.stderr)")
        #expect(refused.stderr.contains("its ring of 1.5 GiB does not fit in the"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store))
    }

    @Test func aBudgetTheLimitCannotHoldIsRefusedAndOneThatFitsRecordsEveryFrame() throws {
        let directory = try Tool.temporaryDirectory("address")
        defer { try? FileManager.default.removeItem(at: directory) }
        func record(_ memory: String, under kibibytes: Int) throws -> ToolResult {
            try limited(
                kibibytes,
                [
                    "record", "--store", directory.appendingPathComponent(memory).path, "--input",
                    "synthetic:640x360@30", "--duration", "2s", "--memory", memory,
                ])
        }
        // 400000 KiB (390.6 MiB): the build before this check crashed here (a refused allocation of the runtime).
        for kibibytes in [150_000, 400_000] {
            let refused = try record("256MiB", under: kibibytes)
            #expect(refused.status == 71, "\(refused.stderr)")
            #expect(
                refused.stderr.contains("--memory 256.0 MiB does not fit in the")
                    && refused.stderr.contains("of address space this process may use (ulimit -v"),
                "\(refused.stderr)")
            #expect(!refused.stderr.contains("crashed"), "\(refused.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("256MiB").path))
        let tight = try record("256MiB", under: 700_000)
        #expect(tight.status == 71, "\(tight.stderr)")
        #expect(tight.stderr.contains("give at most --memory 171MiB"), "\(tight.stderr)")
        // Within the limit: malloc's arenas no longer take a gigabyte of address space, and nothing is dropped.
        let fits = try record("64MiB", under: 700_000)
        #expect(fits.status == 0, "\(fits.stderr)")
        #expect(fits.output.contains("60 durable") && fits.output.contains("; 0 dropped"), "\(fits.output)")

        // Three streams (threads for each) at 585.9 MiB: the build before kept a malloc arena per thread (64 MiB of
        // address space each) and dropped frames for want of a mapping (`memory budget`), exit 0.
        let three = try limited(
            600_000,
            [
                "record", "--store", directory.appendingPathComponent("three").path, "--input",
                "a=synthetic:640x360@30", "--input", "b=synthetic:320x240@30", "--input", "c=synthetic:640x360@30",
                "--duration", "2s", "--memory", "64MiB",
            ])
        #expect(three.status == 0, "\(three.stderr)")
        #expect(
            three.output.components(separatedBy: "60 durable").count == 4 && !three.output.contains("memory budget"),
            "\(three.output)")

        let soak = try limited(700_000, ["soak", "--duration", "2s", "--memory", "256MiB"])
        #expect(soak.status == 71, "\(soak.stderr)")
        #expect(soak.stderr.contains("for the soak itself"), "\(soak.stderr)")
    }

    /// An `.mp4` export under limits too low for ffmpeg (its libraries cannot be mapped, x264 cannot allocate, a
    /// filter's allocation refused): the limit is named as the likely cause, with its value and how to raise it
    /// (71), never ffmpeg's words alone with exit 1; a limit that leaves rewind itself short is refused the same way.
    @Test func anMP4ExportThatTheLimitLeavesFFmpegShortOfNamesTheLimit() throws {
        _ = try ExternalTools.locate("ffmpeg")
        let directory = try Tool.temporaryDirectory("address-mp4")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "2s",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        var namedFFmpeg = 0
        // From where ffmpeg cannot load its libraries up to where it encodes: every step exports or names the limit.
        for kibibytes in stride(from: 100_000, through: 400_000, by: 20_000) {
            let clip = directory.appendingPathComponent("\(kibibytes).mp4").path
            let run = try limited(
                kibibytes, ["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", clip])
            if run.status == 0 {
                #expect(FileManager.default.fileExists(atPath: clip), "ulimit -v \(kibibytes)")
                continue
            }
            #expect(run.status == 71, "ulimit -v \(kibibytes): \(run.stderr)")
            if run.stderr.contains("ffmpeg failed") {
                namedFFmpeg += 1
                #expect(
                    run.stderr.contains("likely because of the limit on address space it runs under")
                        && run.stderr.contains("(ulimit -v \(kibibytes))")
                        && run.stderr.contains(
                            "rewind clip: raise the limit on address space (ulimit -v unlimited; "
                                + "systemd's LimitAS=)"),
                    "ulimit -v \(kibibytes): \(run.stderr)")
            } else {
                #expect(run.stderr.contains("ulimit -v"), "ulimit -v \(kibibytes): \(run.stderr)")
            }
            #expect(!FileManager.default.fileExists(atPath: clip), "ulimit -v \(kibibytes)")
        }
        #expect(namedFFmpeg > 0, "no limit left ffmpeg short: the steps missed what it needs")
    }

    /// A limit lowered while the ring still grows (`prlimit` on the running recorder; strict overcommit refuses
    /// mappings the same way): the ring keeps to the slabs it has, as under a full budget, so the window is shorter
    /// and no frame is lost. The build before dropped every frame after the refusal as `memory budget`, exit 0.
    @Test func aLimitLoweredWhileRecordingShortensTheWindowAndLosesNothing() throws {
        let directory = try Tool.temporaryDirectory("address-lowered")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--duration", "6s",
            "--window", "10s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try waitUntil("the recorder holds 1 s", interval: .milliseconds(50)) {
            let status = try Tool.rewind(["status", "--store", store, "--json"])
            guard status.status == 0,
                let object = try JSONSerialization.jsonObject(with: status.stdout) as? [String: Any],
                let streams = object["streams"] as? [[String: Any]]
            else { return false }
            return (streams.first?["memory_frames"] as? Int ?? 0) >= 30
        }
        // Room for about 70 more frames' slabs (112.5 KiB each) of the 150 still to come.
        let pid = recorder.process.processIdentifier
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmSize:") })
        let kibibytes = try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
        let limit = (kibibytes + 8192) * 1024
        let lowered = try Tool.run(try Tool.path(of: "prlimit"), ["--pid", "\(pid)", "--as=\(limit)"])
        #expect(lowered.status == 0, "\(lowered.stderr)")
        // Once the ring has met the limit (about 70 frames, 2.3 s, later), requests make the recorder allocate: each
        // is answered, or refused for want of memory or a thread (69 or 71, named), and the recorder goes on (it
        // gave some of the ring back; the build before could end on the Swift runtime's "failed to allocate").
        Thread.sleep(forTimeInterval: 3)
        for _ in 0..<5 {
            let asked = try Tool.rewind(["status", "--store", store])
            #expect([0, 69, 71].contains(asked.status), "\(asked.stderr)")
        }
        let finished = try recorder.finish()
        #expect(finished.status == 0, "\(finished.stderr)")
        #expect(
            finished.output.contains("180 durable") && finished.output.contains("; 0 dropped")
                && finished.output.contains("; the system refused the ring memory"),
            "\(finished.output)")
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.output.contains("drops: 0") && info.output.contains("gaps: 0"), "\(info.output)")
    }
}
