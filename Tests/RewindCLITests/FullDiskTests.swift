import Foundation
import RewindTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Recordings into a small real tmpfs: a full disk loses frames only with a non-zero exit, a message and a gap for
/// every lost stretch; with `--min-free` the same recording keeps going by deleting old segments.
///
/// Mounting needs root: other users skip with that reason; a root that cannot mount fails, saying why.
@Suite(.timeLimit(.minutes(45)), .enabled(if: getuid() == 0, "mounting a small tmpfs to fill up needs root"))
struct FullDiskTests {
    /// 300 noisy 640x360 frames (about 100 MiB raw, 30 MiB stored): more than the 24 MiB tmpfs holds.
    static let frameCount = 300

    /// The pts of frame `index` of the 30 fps source, ns.
    static func pts(_ index: Int) -> Int64 { Int64(index) * 1_000_000_000 / 30 }

    /// Mounts a 24 MiB tmpfs at `directory/disk`, runs `body` with its path, and unmounts it.
    private func withSmallDisk(_ body: (_ disk: String, _ source: String) throws -> Void) throws {
        let directory = try Tool.temporaryDirectory("full-disk")
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = directory.appendingPathComponent("source.y4m").path
        try ExternalTools.makeY4M(
            source, width: 640, height: 360, rate: "30", frames: Self.frameCount,
            extra: ["-vf", "noise=alls=100:allf=t+u"])
        try withTmpfs(at: directory.appendingPathComponent("disk").path, size: "24m") { try body($0, source) }
    }

    /// Mounts a tmpfs of `size` (`mount -o size=`) at `disk` (made if missing), runs `body` with it, unmounts it.
    private func withTmpfs(at disk: String, size: String, _ body: (_ disk: String) throws -> Void) throws {
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        let mount = try ExternalTools.execute(
            "/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", disk], timeout: .seconds(30))
        try #require(mount.status == 0, "mount -t tmpfs failed as root (is mounting allowed here?): \(mount.stderr)")
        defer { _ = try? ExternalTools.execute("/bin/umount", [disk], timeout: .seconds(30)) }
        try body(disk)
    }

    /// The pts of the frames the index holds, from the `sqlite3` shell.
    private func indexedPTS(_ store: String) throws -> Set<Int64> {
        let query = try runChecked("sqlite3", ["-readonly", "\(store)/index.sqlite", "SELECT pts_ns FROM frames"])
        return Set(query.output.split(separator: "\n").compactMap { Int64($0) })
    }

    /// A query of `store`'s index with the `sqlite3` shell, read-only: its output trimmed, nil when it failed.
    private func indexQuery(_ store: String) throws -> (String) -> String? {
        let sqlite3 = try Tool.path(of: "sqlite3")
        return { sql in
            guard let result = try? Tool.run(sqlite3, ["-readonly", store + "/index.sqlite", sql]), result.status == 0
            else { return nil }
            return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// Fills `disk` with a ballast file once the recorder has indexed a second of frames.
    private func fillOnceIndexed(disk: String, query: (String) -> String?) throws {
        try waitUntil("the recorder has indexed a second of frames", timeout: .seconds(60)) {
            Int(query("SELECT count(*) FROM frames") ?? "") ?? 0 >= 30
        }
        _ = try ExternalTools.execute(
            "/bin/dd", ["if=/dev/zero", "of=\(disk)/ballast", "bs=64k"], timeout: .seconds(60))
    }

    /// Waits until the index's `disk error` gap spans two seconds: the recorder's writes have failed that long.
    private func waitForTwoSecondsOfFailedWrites(query: (String) -> String?) throws {
        try waitUntil("the gap covers two seconds of lost frames", timeout: .seconds(30)) {
            let span = query("SELECT max(end_ns - start_ns) FROM gaps WHERE reason = 'disk error'") ?? ""
            return Int64(span) ?? 0 >= 2_000_000_000
        }
    }

    /// A live save to a FIFO whose staging file in the store's `exports/` finds no room on the store's full disk:
    /// the message says that file, on the store's disk, ran out of room (not the FIFO) and to free space there, and the
    /// FIFO is opened and closed, so its reader gets end of file. It said to write elsewhere, and the reader waited
    /// for ever (the FIFO was opened only once the recorder had written the file).
    @Test func aLiveSaveToAFIFOWhoseStagingFileFindsNoRoomSaysSoAndLetsTheReaderGo() throws {
        let directory = try Tool.temporaryDirectory("full-staging")
        defer { try? FileManager.default.removeItem(at: directory) }
        try withTmpfs(at: directory.appendingPathComponent("disk").path, size: "40m") { disk in
            let store = disk + "/store"
            // 338 KiB a frame: 5 s raw are 50 MiB, more than the tmpfs holds beside the store's 12 MiB.
            let recorder = try Tool.startRewind([
                "record", "--store", store, "--input", "synthetic:640x360@30", "--disk", "12MiB", "--min-free", "1MiB",
                "--realtime", "--duration", "120s",
            ])
            defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
            try Tool.waitUntilAnswering(store)
            try waitUntil("the recorder accepted 5 s of frames", interval: .milliseconds(100)) {
                let status = try Tool.rewind(["status", "--store", store, "--json"])
                let document = try JSONSerialization.jsonObject(with: status.stdout) as? [String: Any]
                let streams = document?["streams"] as? [[String: Any]] ?? []
                return (streams.first?["frames_accepted"] as? Int ?? 0) >= 150
            }
            let fifo = directory.appendingPathComponent("save.mkv").path
            try #require(mkfifo(fifo, 0o600) == 0)
            // The reader, opened without waiting for a writer: once one has opened and closed the FIFO, it reads end
            // of file (a hang-up); until then it has nothing.
            let reader = open(fifo, O_RDONLY | O_NONBLOCK)
            try #require(reader >= 0)
            defer { close(reader) }
            let save = try Tool.rewind(["save", "--store", store, "--last", "7s", "-o", fifo])
            #expect(save.status == 1, "\(save.output)\(save.stderr)")
            #expect(save.stderr.contains("/exports/stdout-") && save.stderr.contains("No space left on device"))
            #expect(
                save.stderr.contains("the store's disk has no room for that file")
                    && save.stderr.contains("(standard output, a FIFO or a device, which is not what ran out of room)")
                    && save.stderr.contains("free some space on the store's disk (\(store))"),
                "\(save.stderr)")
            #expect(!save.stderr.contains("write elsewhere"), "\(save.stderr)")
            var event = pollfd(fd: reader, events: Int16(POLLIN), revents: 0)
            let ready = poll(&event, 1, 10_000)
            #expect(ready == 1 && event.revents & Int16(POLLHUP) != 0, "no end of file came: the reader would wait")
            var byte: UInt8 = 0
            #expect(read(reader, &byte, 1) == 0, "end of file, nothing written")
            recorder.process.interrupt()
            _ = try? recorder.finish(timeout: .seconds(60))
        }
    }

    /// A stopped store on a read-only file system (copied onto read-only media) reads as it is: no `-shm` can be
    /// made there, and with nothing in a WAL the index file alone is the whole index (it failed "unable to open",
    /// with a repair offered).
    @Test func aStoreOnAReadOnlyFileSystemReads() throws {
        let directory = try Tool.temporaryDirectory("read-only")
        defer { try? FileManager.default.removeItem(at: directory) }
        try withTmpfs(at: directory.appendingPathComponent("disk").path, size: "16m") { disk in
            let store = disk + "/store"
            let record = try Tool.rewind([
                "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s",
            ])
            #expect(record.status == 0, "\(record.stderr)")
            for file in ["index.sqlite-wal", "index.sqlite-shm"] {
                try? FileManager.default.removeItem(atPath: store + "/" + file)
            }
            let remount = try ExternalTools.execute(
                "/bin/mount", ["-o", "remount,ro", disk], timeout: .seconds(30))
            try #require(remount.status == 0, "\(remount.stderr)")
            let info = try Tool.rewind(["info", "--store", store])
            #expect(info.status == 0, "\(info.output) \(info.stderr)")
            #expect(info.output.contains("frames: 30"), "\(info.output)")
            let clip = try Tool.rewind([
                "clip", "--store", store, "--from", "0s", "--to", "1s", "-o", directory.path + "/c.y4m",
            ])
            #expect(clip.status == 0, "\(clip.stderr)")
        }
    }

    /// `--disk` on a file system smaller than the free space it keeps by default: refused up front, naming the
    /// default as the cause and what to give instead (not advising the default itself).
    @Test func theDefaultFloorOnADiskSmallerThanItIsNamedAsTheCause() throws {
        let directory = try Tool.temporaryDirectory("small-disk")
        defer { try? FileManager.default.removeItem(at: directory) }
        try withTmpfs(at: directory.appendingPathComponent("disk").path, size: "16m") { disk in
            let record = try Tool.rewind([
                "record", "--store", disk + "/store", "--input", "synthetic:160x120@30", "--disk", "100MiB",
                "--duration", "1s",
            ])
            #expect(record.status == 64, "\(record.stderr)")
            #expect(
                record.stderr.contains("no more than the free space --disk keeps by default (--min-free 256.0 MiB)"),
                "\(record.stderr)")
            #expect(!record.stderr.contains("such as the default"), "\(record.stderr)")
        }
    }

    /// A new store keeps 4 MiB for its index beside the floor: a `--min-free` within that of the free space is
    /// refused up front (it was taken, and retention then deleted every frame). On a tmpfs of its own, so no other
    /// program's files change the free space between the measure and the recorder's check.
    @Test func aFloorWithinTheIndexsRoomOfTheFreeSpaceIsRefused() throws {
        let directory = try Tool.temporaryDirectory("near-floor")
        defer { try? FileManager.default.removeItem(at: directory) }
        try withTmpfs(at: directory.appendingPathComponent("disk").path, size: "64m") { disk in
            var space = statvfs()
            try #require(statvfs(disk, &space) == 0)
            let free = Int64(space.f_bavail) * Int64(space.f_frsize)
            let near = try Tool.rewind([
                "record", "--store", disk + "/store", "--input", "synthetic:160x120@30", "--duration", "1s",
                "--min-free", "\(free - (1 << 20))",
            ])
            #expect(near.status == 64, "\(near.output) \(near.stderr)")
            #expect(near.stderr.contains("and 4.0 MiB more for the index"), "\(near.stderr)")
            #expect(!FileManager.default.fileExists(atPath: disk + "/store/index.sqlite"), "refused before making it")
        }
    }

    /// A disk with less free space than the index's reserve: no floor, not even `--min-free 0`, leaves room to
    /// record, and the refusal says so (it called 0 B "more than the disk can keep free" and advised leaving
    /// `--min-free` out, which recorded nothing).
    @Test func aDiskSmallerThanTheIndexsRoomIsRefusedWhateverTheFloor() throws {
        let directory = try Tool.temporaryDirectory("tiny-disk")
        defer { try? FileManager.default.removeItem(at: directory) }
        try withTmpfs(at: directory.appendingPathComponent("disk").path, size: "3m") { disk in
            let refused = try Tool.rewind([
                "record", "--store", disk + "/store", "--input", "synthetic:160x120@30", "--duration", "1s",
                "--min-free", "0",
            ])
            #expect(refused.status == 64, "\(refused.output) \(refused.stderr)")
            #expect(
                refused.stderr.contains("no more than the store keeps free for its index (4.0 MiB): nothing could be "),
                "\(refused.stderr)")
            #expect(!refused.stderr.contains("more than the disk can keep free"), "\(refused.stderr)")
        }
    }

    /// A floor that deleting the store's segments reaches, but only just (8 KiB short of the free space plus the
    /// files): the earlier recording goes, as the floor asks, and so does each segment of the new one; the run exits
    /// 1 naming the floor and advising one below the free space.
    @Test func aFloorReachedOnlyByDeletingEverythingNamesTheFloor() throws {
        let directory = try Tool.temporaryDirectory("floor")
        defer { try? FileManager.default.removeItem(at: directory) }
        try withTmpfs(at: directory.appendingPathComponent("disk").path, size: "32m") { disk in
            let store = disk + "/store"
            let first = try Tool.rewind([
                "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "3s", "--segment", "1s",
            ])
            #expect(first.status == 0, "\(first.stderr)")
            let segments = try FileManager.default.contentsOfDirectory(atPath: store + "/segments")
            let stored = try segments.reduce(Int64(0)) { total, name in
                let size = try FileManager.default.attributesOfItem(atPath: store + "/segments/" + name)[.size]
                return total + Int64(try #require(size as? Int))
            }
            var space = statvfs()
            try #require(statvfs(disk, &space) == 0)
            let free = Int64(space.f_bavail) * Int64(space.f_frsize)
            let record = try Tool.rewind([
                "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "2s", "--segment", "1s",
                "--min-free", "\(free + stored - 8192)",
            ])
            #expect(record.status == 1, "\(record.output) \(record.stderr)")
            #expect(
                record.stderr.contains("retention deleted all 60 durable frames of this recording (--min-free "),
                "\(record.stderr)")
            #expect(record.stderr.contains("give a --min-free below "), "\(record.stderr)")
            #expect(record.stderr.contains("(the disk has "), "\(record.stderr)")
        }
    }

    @Test func aFullDiskExitsNonZeroNamesTheLossAndLeavesAGapForEveryLostFrame() throws {
        try withSmallDisk { disk, source in
            let store = disk + "/store"
            let record = try Tool.rewind(
                ["record", "--store", store, "--input", "y4m:\(source)", "--segment", "1s"])
            #expect(record.status == 1, "a recording that lost frames must fail: \(record.stderr)")
            #expect(record.stderr.contains("rewind record: lost "), "\(record.stderr)")
            #expect(record.stderr.contains("to disk errors (disk full)"), "\(record.stderr)")

            let stored = try indexedPTS(store)
            let lost = (0..<Self.frameCount).map(Self.pts).filter { !stored.contains($0) }
            #expect(!lost.isEmpty, "24 MiB must fill up")
            #expect(record.stderr.contains("lost \(lost.count) accepted frames"), "\(record.stderr)")
            let gaps = try #require(try info(store)["gaps"] as? [[String: Any]])
            let ranges = gaps.compactMap { gap -> Range<Int64>? in
                guard let start = gap["start_ns"] as? Int64, let end = gap["end_ns"] as? Int64,
                    gap["reason"] as? String == "disk error"
                else { return nil }
                return start..<end
            }
            let uncovered = lost.filter { pts in !ranges.contains { $0.contains(pts) } }
            #expect(uncovered.isEmpty, "lost frames outside every gap: \(uncovered.prefix(5)) (gaps: \(gaps))")
            #expect(lost.last == Self.pts(Self.frameCount - 1), "the tail is what was lost")

            var verify = try Tool.rewind(["verify", "--store", store])
            if verify.status != 0 {
                let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
                #expect(repair.status == 0, "\(repair.output) \(repair.stderr)")
                verify = try Tool.rewind(["verify", "--store", store])
            }
            #expect(verify.status == 0 && verify.output.contains("clean"), "\(verify.output) \(verify.stderr)")
            let names = try FileManager.default.contentsOfDirectory(atPath: store + "/segments").sorted()
            let expected = (1...names.count).map { String(format: "%06d.seg", $0) }
            #expect(names == expected, "failed attempts must not burn segment numbers")

            // Recorded again into the disk still full: its losses continue after the lost tail's gap, not inside it
            // (no two gaps of the stream overlap).
            let again = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(source)", "--segment", "1s"])
            #expect(again.status == 1, "\(again.stderr)")
            let after = try #require(try info(store)["gaps"] as? [[String: Any]])
            let spans = after.compactMap { gap -> (Int64, Int64)? in
                guard let start = gap["start_ns"] as? Int64, let end = gap["end_ns"] as? Int64 else { return nil }
                return (start, end)
            }.sorted { $0.0 < $1.0 }
            #expect(spans.count >= 2, "\(after)")
            for (earlier, later) in zip(spans, spans.dropFirst()) {
                #expect(later.0 >= earlier.1, "gaps overlap: \(after)")
            }
        }
    }

    @Test func minFreeKeepsRecordingByDeletingOldSegments() throws {
        try withSmallDisk { disk, source in
            let store = disk + "/store"
            let record = try Tool.rewind(
                [
                    "record", "--store", store, "--input", "y4m:\(source)", "--segment", "1s", "--disk", "1GiB",
                    "--min-free", "6MiB",
                ])
            #expect(record.status == 0, "\(record.output) \(record.stderr)")
            #expect(record.output.contains("; 0 dropped;"), "\(record.output)")
            let json = try info(store)
            #expect(json["drops"] as? Int == 0)
            #expect((json["gaps"] as? [Any])?.isEmpty == true, "\(json)")
            let stored = try indexedPTS(store)
            #expect(stored.count < Self.frameCount, "old segments must have been deleted")
            #expect(stored.contains(Self.pts(Self.frameCount - 1)), "the newest frame is kept")

            // The newest frames, bit-exact.
            let newest = 30
            let from = Self.pts(Self.frameCount - newest)
            let clip = disk + "/../newest.y4m"
            let save = try Tool.rewind(
                ["clip", "--store", store, "--from", "\(from)ns", "--to", "\(Self.frameCount * 40)ms", "-o", clip])
            #expect(save.status == 0, "\(save.stderr)")
            let expected = Array(try ExternalTools.frameMD5s(source).suffix(newest))
            #expect(try ExternalTools.frameMD5s(clip) == expected)
            let verify = try Tool.rewind(["verify", "--store", store])
            #expect(verify.status == 0 && verify.output.contains("clean"), "\(verify.output) \(verify.stderr)")
        }
    }

    /// Another program fills the disk to the last byte while a camera records, and keeps it full to the end: the
    /// segment writers already stopped short of the index's 4 MiB, but the other program took that too. The index
    /// takes the room its reserve file held, so the lost frames are counted, gapped and stored as drops like those
    /// of a disk the recording filled; the next recording, with room again, makes the reserve anew.
    @Test func aDiskFilledByAnotherProgramStillCountsAndGapsTheLoss() throws {
        try withSmallDisk { disk, _ in
            let store = disk + "/store"
            let recording = try Tool.startRewind([
                "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--duration", "6s",
            ])
            try fillOnceIndexed(disk: disk, query: try indexQuery(store))
            #expect(FileManager.default.fileExists(atPath: store + "/index.reserve"), "the reserve is made at open")
            let record = try recording.finish(timeout: .seconds(60))
            #expect(record.status == 1, "a recording that lost frames must fail: \(record.stderr)")
            #expect(record.stderr.contains("to disk errors (disk full)"), "\(record.stderr)")
            // The index took a slice of the reserve; the rest stays held against other programs.
            let held = (try? FileManager.default.attributesOfItem(atPath: store + "/index.reserve")[.size] as? Int) ?? 0
            #expect(held > 0 && held < 4 << 20, "the index took a slice of the reserve: \(held) bytes left")

            // 180 frames in 6 s: every one not indexed is counted, in the output and in the store, and in a gap.
            let stored = try indexedPTS(store)
            let lost = (0..<180).map(Self.pts).filter { !stored.contains($0) }
            #expect(lost.count >= 30, "the disk was full for the rest of the recording")
            #expect(record.stderr.contains("lost \(lost.count) accepted frames"), "\(record.stderr)")
            let json = try info(store)
            #expect(json["drops"] as? Int == lost.count, "\(json)")
            let gaps = try #require(json["gaps"] as? [[String: Any]])
            let ranges = gaps.compactMap { gap -> Range<Int64>? in
                guard let start = gap["start_ns"] as? Int64, let end = gap["end_ns"] as? Int64,
                    gap["reason"] as? String == "disk error"
                else { return nil }
                return start..<(end + 1)
            }
            let uncovered = lost.filter { pts in !ranges.contains { $0.contains(pts) } }
            #expect(uncovered.isEmpty, "lost frames outside every gap: \(uncovered.prefix(5)) (gaps: \(gaps))")

            // With room again, the next recording goes on after the gap and makes the reserve anew.
            try FileManager.default.removeItem(atPath: disk + "/ballast")
            let next = try Tool.rewind([
                "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "1s",
            ])
            #expect(next.status == 0, "\(next.stderr)")
            #expect(FileManager.default.fileExists(atPath: store + "/index.reserve"))
        }
    }

    /// The same disk full, but the recorder is killed (`kill -9`) while it stays full: the gap of what it lost so
    /// far is in the index already (recorded within a second of the first failed write and moved on every second),
    /// as are its drop counts.
    @Test func aRecorderKilledWhileTheDiskIsFullLeavesTheGapSoFar() throws {
        try withSmallDisk { disk, _ in
            let store = disk + "/store"
            let recording = try Tool.startRewind([
                "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--duration", "60s",
            ])
            defer { if recording.process.isRunning { kill(recording.process.processIdentifier, SIGKILL) } }
            let query = try indexQuery(store)
            try fillOnceIndexed(disk: disk, query: query)
            // About three seconds of lost frames, then the kill, while the recorder still runs (its tail gap would
            // come at the stop).
            try waitForTwoSecondsOfFailedWrites(query: query)
            #expect(recording.process.isRunning, "the recorder was still recording")
            kill(recording.process.processIdentifier, SIGKILL)
            _ = try? recording.finish(timeout: .seconds(30))
            let rows = try #require(query("SELECT count(*) FROM gaps WHERE reason = 'disk error'"))
            #expect(rows == "1", "one row for the stretch, moved on: \(rows)")
            let newest = try #require(Int64(query("SELECT max(pts_ns) FROM frames") ?? ""))
            let start = try #require(Int64(query("SELECT start_ns FROM gaps WHERE reason = 'disk error'") ?? ""))
            #expect(start == newest, "the gap starts at the last frame stored")
            let drops = Int(query("SELECT coalesce(sum(count), 0) FROM drops WHERE reason = 'disk error'") ?? "") ?? 0
            #expect(drops >= 30, "the drop counts are stored every second too: \(drops)")
        }
    }

    /// A live save around now while writes fail, from a ring of two frames: its `lost` reaches the first frame it
    /// holds. The index's row of the failing stretch is moved on only once a second, and the frames after
    /// its end, which left memory unwritten, were listed nowhere.
    @Test func aLiveSaveWhileWritesFailListsEveryFrameItLost() throws {
        try withSmallDisk { disk, _ in
            let store = disk + "/store"
            let recording = try Tool.startRewind([
                "record", "--store", store, "--input", "synthetic:640x360@30", "--realtime", "--memory", "700KiB",
                "--duration", "60s",
            ])
            defer { if recording.process.isRunning { kill(recording.process.processIdentifier, SIGKILL) } }
            let query = try indexQuery(store)
            try fillOnceIndexed(disk: disk, query: query)
            try waitForTwoSecondsOfFailedWrites(query: query)
            let output = try Tool.temporaryDirectory("live-loss")
            defer { try? FileManager.default.removeItem(at: output) }
            for attempt in 0..<3 {
                let file = output.appendingPathComponent("last-\(attempt).mkv").path
                // A second before and after: memory holds only the frames that come while it waits.
                let save = try Tool.rewind([
                    "save", "--store", store, "--before", "1s", "--after", "1s", "-o", file, "--json",
                ])
                try #require(save.status == 0, "\(save.stderr)")
                let object = try #require(try JSONSerialization.jsonObject(with: save.stdout) as? [String: Any])
                let first = try #require(object["first_pts_ns"] as? Int64, "\(save.output)")
                let from = try #require(object["from_ns"] as? Int64, "\(save.output)")
                let lost = (object["lost"] as? [[String: Any]] ?? []).filter { $0["reason"] as? String == "disk error" }
                #expect(first - from > 500_000_000, "the range lies in the stretch whose writes failed")
                let end = lost.compactMap { $0["end_ns"] as? Int64 }.max() ?? .min
                #expect(end >= first, "lost \(lost) ends before the first frame saved, \(first)")
            }
            #expect(recording.process.isRunning, "the recorder was still recording")
        }
    }

    /// A store on a disk that something else filled to the last byte is still read: SQLite cannot make the
    /// index's shared-memory file there, and with nothing in the WAL the index file alone is read as it is.
    /// A soak whose disk fills up by itself (no `disk=full` event) fails `no_frames_lost`, naming the disk errors,
    /// although it counted every loss: the disk itself failed.
    @Test func aSoakOnADiskThatFillsUpByItselfFails() throws {
        try withSmallDisk { disk, _ in
            _ = try ExternalTools.execute(
                "/bin/dd", ["if=/dev/zero", "of=\(disk)/ballast", "bs=1M", "count=23"], timeout: .seconds(60))
            let soak = try Tool.rewind([
                "soak", "--size", "320x240", "--fps", "30", "--memory", "8MiB", "--duration", "3s", "--speed",
                "realtime", "--disk", "0", "--store", disk + "/soak",
            ])
            #expect(soak.status == 1, "\(soak.output)\n\(soak.stderr)")
            #expect(soak.stderr.contains("failed: no_frames_lost"), "\(soak.stderr)")
            #expect(soak.output.contains("disk errors counted that no disk=full event made"), "\(soak.output)")
            // The frames the failed disk cost are lost, in the report too (a job reading frames_lost saw 0).
            #expect(!soak.output.contains(" 0 lost, "), "\(soak.output)")
        }
    }

    /// An `.mp4` whose index (`moov`, written last) no longer fits on the disk: ffmpeg says so but exits 0; the export
    /// fails (exit 1) and the file of that name it would have replaced is kept.
    @Test func anMP4ThatCannotBeFinishedFailsAndKeepsTheFileItWouldReplace() throws {
        let directory = try Tool.temporaryDirectory("full-disk")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "3s",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        try withTmpfs(at: directory.appendingPathComponent("disk").path, size: "2m") { disk in
            let output = disk + "/keep.mp4"
            let first = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "3s", "-o", output])
            #expect(first.status == 0, "\(first.stderr)")
            let kept = try ExternalTools.frameMD5s(output)
            #expect(kept.count == 90)
            // All but 40 KiB filled: the frames fit, the index after them does not.
            var space = statvfs()
            try #require(statvfs(disk, &space) == 0)
            let free = Int(space.f_bavail) * Int(space.f_frsize)
            try Data(count: free - 40 * 1024).write(to: URL(fileURLWithPath: disk + "/ballast"))
            let again = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "3s", "-o", output])
            #expect(again.status == 1, "\(again.output)\(again.stderr)")
            #expect(again.stderr.contains("No space left on device"), "\(again.stderr)")
            #expect(!again.stderr.contains("failed (exit status 0)"), "ffmpeg said it succeeded: \(again.stderr)")
            #expect(try ExternalTools.frameMD5s(output) == kept, "the file it would have replaced is whole")
            #expect(try FileManager.default.contentsOfDirectory(atPath: disk).sorted() == ["ballast", "keep.mp4"])
        }
    }

    /// An `.mp4` for a device is made in TMPDIR first (ffmpeg writes its index last and the file is checked before
    /// it is copied): a TMPDIR with no room for it is named as the cause, with what to do, instead of ffmpeg's
    /// missing `moov` box in a temporary file the user never named; nothing is left in TMPDIR.
    @Test func anMP4ForADeviceThroughAFullTemporaryDirectorySaysSo() throws {
        let directory = try Tool.temporaryDirectory("full-disk")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "3s",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        let device = directory.appendingPathComponent("null.mp4").path
        try FileManager.default.createSymbolicLink(atPath: device, withDestinationPath: "/dev/null")
        try withTmpfs(at: directory.appendingPathComponent("tmp").path, size: "1m") { temporary in
            // All but 8 KiB filled: ffmpeg's log can be made there, the .mp4 cannot.
            var space = statvfs()
            try #require(statvfs(temporary, &space) == 0)
            let free = Int(space.f_bavail) * Int(space.f_frsize)
            try Data(count: free - 8 * 1024).write(to: URL(fileURLWithPath: temporary + "/ballast"))
            var environment = ProcessInfo.processInfo.environment
            environment["TMPDIR"] = temporary
            let clip = try Tool.rewind(
                ["clip", "--store", store, "--from", "0s", "--to", "3s", "-o", device], environment: environment)
            #expect(clip.status == 1, "\(clip.output)\(clip.stderr)")
            #expect(
                clip.stderr.contains(
                    "rewind clip: \(device): an .mp4 for a device is made in the temporary directory first and then "
                        + "copied into it, and TMPDIR (\(temporary)) has no room left for it"), "\(clip.stderr)")
            #expect(
                clip.stderr.contains("free space there, or point TMPDIR at a directory with room"), "\(clip.stderr)")
            #expect(!clip.stderr.contains("moov"), "\(clip.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: temporary) == ["ballast"])
        }
    }

    @Test func aStoreOnAFullDiskCanStillBeReadAndExported() throws {
        try withSmallDisk { disk, source in
            let store = disk + "/store"
            let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(source)", "--duration", "1s"])
            #expect(record.status == 0, "\(record.stderr)")
            // Every commit into the index file, its -wal and -shm gone, as after a clean stop.
            _ = try runChecked("sqlite3", ["\(store)/index.sqlite", "PRAGMA wal_checkpoint(TRUNCATE);"])
            for suffix in ["-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: store + "/index.sqlite" + suffix)
            }
            _ = try ExternalTools.execute(
                "/bin/dd", ["if=/dev/zero", "of=\(disk)/ballast", "bs=64k"], timeout: .seconds(60))
            let listed = try Tool.rewind(["info", "--store", store])
            #expect(listed.status == 0, "\(listed.stderr)")
            #expect(listed.output.contains("frames: 30 in 1 segment"), "\(listed.output)")
            let clip = disk + "/../full.y4m"
            let export = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", clip])
            #expect(export.status == 0, "\(export.stderr)")
            #expect(try ExternalTools.frameMD5s(clip) == Array(try ExternalTools.frameMD5s(source).prefix(30)))

            // A recording started on the full disk: the index takes room from the store's reserve to open, and the
            // frames the disk cannot take are counted, each stretch a gap, instead of the run failing to start.
            let again = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(source)", "--duration", "1s"])
            #expect(again.status == 1, "\(again.output)\(again.stderr)")
            #expect(again.output.contains("30 dropped (disk error: 30)"), "\(again.output)\(again.stderr)")
            #expect(!again.stderr.contains("SQLITE_IOERR"), "\(again.stderr)")
            let after = try info(store)
            #expect(after["frames"] as? Int == 30, "what was stored stays")
            #expect(
                (after["gaps"] as? [[String: Any]] ?? []).contains { $0["reason"] as? String == "disk error" },
                "\(after)")
        }
    }
}
