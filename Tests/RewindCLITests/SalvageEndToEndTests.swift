import Foundation
import RewindKit
import RewindTesting
import Testing

@Suite(.timeLimit(.minutes(45))) struct SalvageEndToEndTests {
    /// A byte flipped inside frame 40 of a sealed segment (key frames every 30): `verify` names the frame,
    /// `verify --repair` salvages frames 60…119 into a new segment and says so, and a clip of everything holds
    /// exactly the source frames but 40…59.
    @Test func repairKeepsEveryFrameAfterTheDamageFromTheNextKeyFrameOn() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (source, store, entries) = try storeDamagedInFrame40(in: directory)

        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 1)
        #expect(verify.output.contains("damaged at byte \(entries[40].offset) (frame 40)"), "\(verify.output)")
        #expect(verify.output.contains("a repair would keep 40 frames of segment 000001.seg and salvage 60"))

        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(
            repair.output.contains(
                "salvaged 60 frames after the damage in segment 000001.seg (60 written into 000002.seg); "
                    + "lost 20 frames: frames 40…59 (pts \(source.pts(40))…\(source.pts(59)) ns)"),
            "\(repair.output)")
        let json = try Tool.rewind(["verify", "--store", store, "--json"])
        #expect(json.status == 0)
        let repairJSON = try Tool.rewind(["verify", "--store", store, "--repair", "--json"])
        let object = try JSONSerialization.jsonObject(with: repairJSON.stdout) as? [String: Any]
        #expect(object?["clean"] as? Bool == true)
        #expect((object?["salvage"] as? [Any])?.isEmpty == true, "a second repair has nothing to salvage")

        let gaps = try info(store)["gaps"] as? [[String: Any]] ?? []
        #expect(
            gaps.contains {
                $0["reason"] as? String == "damaged" && $0["start_ns"] as? Int64 == source.pts(39)
                    && $0["end_ns"] as? Int64 == source.pts(60)
            }, "\(gaps)")

        let output = directory.appendingPathComponent("all.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "10s", "-o", output])
        #expect(clip.status == 0, "\(clip.stderr)")
        // The file holds no trace of the lost frames but their absence: the report says where they were.
        #expect(
            clip.output.contains(
                "the range has 1 gap where frames were lost: \(formatSeconds(source.pts(39))) … "
                    + "\(formatSeconds(source.pts(60))) (damaged)"), "\(clip.output)")
        let before = try Tool.rewind([
            "clip", "--store", store, "--from", "0s", "--to", "1s", "-o",
            directory.appendingPathComponent("first.mkv").path,
        ])
        #expect(before.status == 0 && !before.output.contains("lost"), "\(before.output)")
        let sourceMD5s = try frameMD5s(source.path)
        #expect(try frameMD5s(output) == Array(sourceMD5s[0..<40] + sourceMD5s[60..<120]))
    }

    /// A repair killed while it salvages: the index has let go of the damaged file's rows past the damage, and the
    /// frames not salvaged yet are in no new segment. A `damaged` gap over them is recorded before the rows go, so
    /// `info` and a clip say where frames are missing (they called the store whole and the clip complete), and `info`
    /// says the repair did not finish; the next repair salvages the rest, and the store reads back bit-exact.
    @Test func aRepairKilledWhileItSalvagesLeavesAGapAndSaysSo() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:1280x720@30", "--duration", "20s", "--segment", "1h",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        let reference = directory.appendingPathComponent("reference.mkv").path
        #expect(
            try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "30s", "-o", reference]).status == 0)
        let (path, entries) = try firstSegmentsRecords(of: store)
        try #require(entries.count == 600)
        #expect(entries.indices.filter { entries[$0].isKey }.prefix(3) == [0, 30, 60])
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: UInt64(entries[40].offset) + 56 + 200)
        let byte = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: UInt64(entries[40].offset) + 56 + 200)
        try handle.write(contentsOf: Data([byte ^ 0x10]))
        try handle.close()

        // Killed once the salvage has written frames into its new segment: the rows past the damage are gone then.
        let repair = try Tool.startRewind(["verify", "--store", store, "--repair"])
        defer { if repair.process.isRunning { kill(repair.process.processIdentifier, SIGKILL) } }
        let salvaged = "\(store)/segments/000002.seg.partial"
        try waitUntil("the salvage wrote frames", interval: .milliseconds(2)) {
            let size = (try? FileManager.default.attributesOfItem(atPath: salvaged)[.size] as? Int) ?? 0
            return size >= 4 << 20 || !repair.process.isRunning
        }
        try #require(repair.process.isRunning, "the repair finished before it could be killed: \(repair.output)")
        kill(repair.process.processIdentifier, SIGKILL)
        repair.process.waitUntilExit()
        #expect(repair.process.terminationReason == .uncaughtSignal)

        let stopped = try Tool.rewind(["info", "--store", store])
        #expect(stopped.status == 1, "\(stopped.output)")
        #expect(
            stopped.output.contains(
                "a repair of segments/000001.seg was stopped before it finished: the frames after its damage that it "
                    + "had not salvaged yet are left out (a 'damaged' gap covers them)"), "\(stopped.output)")
        #expect(stopped.stderr.contains("'rewind verify --repair' to index their frames"), "\(stopped.stderr)")
        // Every frame from the damage on that the index does not hold lies in the gap.
        let json = try Tool.rewind(["info", "--store", store, "--json"])
        #expect(json.status == 1)
        let document = try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any]
        #expect(
            (document?["problems"] as? [String])?.first?.hasPrefix("a repair of segments/000001.seg was stopped")
                == true, "\(json.output)")
        let gaps = document?["gaps"] as? [[String: Any]] ?? []
        let damaged = gaps.filter { $0["reason"] as? String == "damaged" }
        #expect(damaged.first?["start_ns"] as? Int64 == entries[39].ptsNanoseconds, "\(gaps)")
        #expect((damaged.last?["end_ns"] as? Int64 ?? 0) > entries[599].ptsNanoseconds, "\(gaps)")
        let cut = directory.appendingPathComponent("cut.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "30s", "-o", cut])
        #expect(clip.status == 1, "\(clip.output)\(clip.stderr)")
        #expect(clip.output.contains("where frames were lost"), "\(clip.output)")
        #expect(clip.stderr.contains("a repair of segments/000001.seg was stopped"), "\(clip.stderr)")

        // Through a recorder of the store as well.
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:1280x720@30", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitUntilAnswering(store)
        let live = try Tool.rewind([
            "clip", "--store", store, "--from", "0s", "--to", "1s", "-o",
            directory.appendingPathComponent("live.mkv").path,
        ])
        #expect(
            live.status == 1 && live.output.contains("exported by the live recorder"), "\(live.output)\(live.stderr)")
        #expect(live.stderr.contains("a repair of segments/000001.seg was stopped"), "\(live.stderr)")
        kill(recorder.process.processIdentifier, SIGINT)
        _ = try recorder.finish()

        let again = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(again.status == 0, "\(again.output)\(again.stderr)")
        let whole = try Tool.rewind(["info", "--store", store])
        #expect(whole.status == 0 && !whole.output.contains("repair of"), "\(whole.output)")
        let after = try info(store)["gaps"] as? [[String: Any]] ?? []
        #expect(
            after.filter { $0["reason"] as? String == "damaged" }.map {
                [$0["start_ns"] as? Int64, $0["end_ns"] as? Int64]
            }
                == [[entries[39].ptsNanoseconds, entries[60].ptsNanoseconds]], "\(after)")
        let output = directory.appendingPathComponent("all.mkv").path
        // The recording's frames come after the store's newest, at 20 s and on.
        #expect(try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "20s", "-o", output]).status == 0)
        let expected = try frameMD5s(reference)
        #expect(try frameMD5s(output) == Array(expected[0..<40] + expected[60..<600]))
    }

    /// A recorder killed mid-segment whose `.partial` then had its header damaged: the next recording leaves the
    /// file for a repair (which rebuilds the header from the index) and says so, as it does for any file it leaves.
    @Test func aRecordingBesideAPartialWithADamagedHeaderSaysItNeedsARepair() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--segment", "1h",
        ])
        let process = recorder.process
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        try waitUntil("the recorder made 30 frames durable", interval: .milliseconds(50)) {
            (Tool.firstStreamStatus(store: store)?["frames_durable"] as? Int ?? 0) >= 30
        }
        kill(process.processIdentifier, SIGKILL)
        _ = try recorder.finish()
        let path = "\(store)/segments/000001.seg.partial"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        bytes[17] ^= 0xff
        try bytes.write(to: URL(fileURLWithPath: path))
        let again = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(
            again.stderr.contains("store problem: segment 000001.seg.partial has a damaged header"), "\(again.stderr)")
        #expect(again.stderr.contains("'rewind verify --repair' rebuilds it"), "\(again.stderr)")
        // Damage of the file, not of a frame: `--json` has no frame number for it.
        let json = try Tool.rewind(["verify", "--store", store, "--json"])
        let document = try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any]
        let damage = (document?["damaged"] as? [[String: Any]])?.first
        #expect(json.status == 1 && damage?["segment"] as? String == "000001.seg.partial", "\(json.output)")
        #expect(damage?["frame"] is NSNull, "\(json.output)")
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)
    }

    /// An index whose damage shows only once it is read past the open (a page of the frames table overwritten):
    /// `verify --repair` keeps it aside and rebuilds it from the segment files, as for one that does not open,
    /// instead of advising the same repair again.
    @Test(arguments: ["frames", "streams", "segments_by_time"])
    func repairRebuildsAnIndexWhoseDamageShowsAfterItOpens(table: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try Source(size: "160x120", rate: "30", frames: 330, in: directory)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(source.path)", "--segment", "4s"])
        #expect(record.status == 0, "\(record.stderr)")
        // Every page in the database file itself (none in the WAL, where the damage would be hidden).
        _ = try runChecked("sqlite3", ["\(store)/index.sqlite", "PRAGMA wal_checkpoint(TRUNCATE);"])
        let root = try runChecked(
            "sqlite3", ["\(store)/index.sqlite", "SELECT rootpage FROM sqlite_master WHERE name = '\(table)'"])
        let page = try #require(Int(root.output.trimmingCharacters(in: .whitespacesAndNewlines)))
        let pageSize = try runChecked("sqlite3", ["\(store)/index.sqlite", "PRAGMA page_size"])
        let size = try #require(Int(pageSize.output.trimmingCharacters(in: .whitespacesAndNewlines)))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(store)/index.sqlite"))
        try handle.seek(toOffset: UInt64(size * (page - 1)))
        try handle.write(contentsOf: Data(repeating: 0xDE, count: 64))
        try handle.close()

        let check = try Tool.rewind(["verify", "--store", store])
        #expect(check.status == 1, "\(check.output)\(check.stderr)")
        #expect(check.stderr.contains("rewind verify --repair"), "\(check.stderr)")
        // A program asking for JSON gets it, not clean, with the error, whatever failed.
        let json = try Tool.rewind(["verify", "--store", store, "--json"])
        let document = try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any]
        #expect(json.status == 1 && document?["clean"] as? Bool == false, "\(json.output)")
        #expect((document?["error"] as? String)?.contains("is corrupt (SQLITE_CORRUPT)") == true, "\(json.output)")
        // An index moved aside earlier in the same second (here in each of the next few seconds) is kept too.
        let now = Int(Date().timeIntervalSince1970)
        for second in now..<(now + 5) {
            try Data("earlier".utf8).write(to: URL(fileURLWithPath: "\(store)/index.sqlite.damaged-\(second)"))
        }
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(repair.output.contains("moved the damaged index to \(store)/index.sqlite.damaged-"), "\(repair.output)")
        #expect(repair.output.contains(".sqlite.damaged-\(now)-2") || repair.output.contains("-2 and rebuilt"))
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.status == 0, "\(info.stderr)")
        #expect(repair.output.contains("verified 3 segments, 330 frames"), "\(repair.output)")
        let output = directory.appendingPathComponent("all.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "20s", "-o", output])
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(try frameMD5s(output) == frameMD5s(source.path))
    }

    /// One byte of an index's entries changed (the last byte of its root page): every b-tree still reads as
    /// well-formed, so SQLite's `quick_check` says ok, but the index no longer matches its table. `verify` says the
    /// index is damaged and the repair rebuilds it (it said clean while reads failed with SQLITE_CORRUPT, or, for the
    /// streams' names, the next recording added a second stream of the same name and exports held every frame twice).
    @Test(arguments: ["segments_by_time", "sqlite_autoindex_streams_1"])
    func anIndexEntryThatNoLongerMatchesItsTableIsRebuilt(index: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "4s", "--segment", "1s",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        let before = directory.appendingPathComponent("before.y4m").path
        #expect(try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "5s", "-o", before]).status == 0)
        _ = try runChecked("sqlite3", ["\(store)/index.sqlite", "PRAGMA wal_checkpoint(TRUNCATE);"])
        let root = try runChecked(
            "sqlite3", ["\(store)/index.sqlite", "SELECT rootpage FROM sqlite_master WHERE name = '\(index)'"])
        let page = try #require(Int(root.output.trimmingCharacters(in: .whitespacesAndNewlines)))
        let pageSize = try runChecked("sqlite3", ["\(store)/index.sqlite", "PRAGMA page_size"])
        let size = try #require(Int(pageSize.output.trimmingCharacters(in: .whitespacesAndNewlines)))
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: "\(store)/index.sqlite"))
        try handle.seek(toOffset: UInt64(size * page - 1))
        let byte = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: UInt64(size * page - 1))
        try handle.write(contentsOf: Data([byte ^ 0xFF]))
        try handle.close()
        let quick = try runChecked("sqlite3", ["-readonly", "\(store)/index.sqlite", "PRAGMA quick_check"])
        #expect(quick.output.trimmingCharacters(in: .whitespacesAndNewlines) == "ok", "the damage quick_check misses")

        let check = try Tool.rewind(["verify", "--store", store])
        #expect(check.status == 1, "\(check.output)\(check.stderr)")
        #expect(check.stderr.contains("rewind verify --repair"), "\(check.stderr)")
        if index == "sqlite_autoindex_streams_1" {
            // Streams are found by name through that index: a recording refuses the store instead of adding a
            // second stream of the name, and a read says to repair instead of missing the stream.
            let record = try Tool.rewind([
                "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s",
            ])
            #expect(record.status == 1 && record.stderr.contains("rewind verify --repair"), "\(record.stderr)")
            let rows = try runChecked(
                "sqlite3", ["-readonly", "\(store)/index.sqlite", "SELECT count(*) FROM streams"])
            #expect(rows.output.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "\(rows.output)")
            let info = try Tool.rewind(["info", "--store", store])
            #expect(info.status == 1 && info.stderr.contains("rewind verify --repair"), "\(info.stderr)")
        }
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(repair.output.contains("moved the damaged index to"), "\(repair.output)")
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)
        let again = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s", "--segment", "1s",
        ])
        #expect(again.status == 0, "\(again.output)\(again.stderr)")
        let streams = try runChecked("sqlite3", ["-readonly", "\(store)/index.sqlite", "SELECT name FROM streams"])
        #expect(streams.output.trimmingCharacters(in: .whitespacesAndNewlines) == "camera", "one stream of the name")
        let after = directory.appendingPathComponent("after.y4m").path
        #expect(try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "4s", "-o", after]).status == 0)
        #expect(try frameMD5s(after) == frameMD5s(before).prefix(120).map { $0 }, "every frame of the first recording")
    }

    /// An index whose rows were changed by another program (or damaged where SQLite's own check does not look):
    /// values at the edge of 64 bits, rows naming what is not there, totals other than their rows', a segment marked
    /// deleted with its rows left, an unreadable row. No command traps or returns a wrong frame: reads fail and say
    /// to repair, `verify` is not clean, and the repair moves the index aside and rebuilds it from the files, every
    /// frame kept.
    @Test(arguments: [
        "UPDATE frames SET stored_length = 9223372036854775807 WHERE pts_ns = 2000000000",
        "UPDATE frames SET pts_ns = 9223372036854775807 WHERE pts_ns = 2000000000",
        "UPDATE frames SET pts_ns = -9223372036854775808 WHERE pts_ns = 2000000000",
        "UPDATE streams SET clock_offset_ns = -9223372036854775808",
        "UPDATE streams SET clock_offset_ns = 9223372036854775807",
        "DELETE FROM segments WHERE id = 2",
        "UPDATE segments SET stored_bytes = 9223372036854775807",
        "UPDATE segments SET state = 'deleting' WHERE id = 2",
        "UPDATE segments SET file_name = '../index.sqlite' WHERE id = 2",
        "UPDATE streams SET pixel_format = 'bogus'",
    ])
    func anIndexWhoseRowsContradictTheFilesOrEachOtherIsRebuilt(edit: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (source, store) = try storeOfSource(in: directory, edited: "PRAGMA foreign_keys = OFF; \(edit);")

        let output = directory.appendingPathComponent("all.y4m").path
        let before = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "10s", "-o", output])
        if before.status == 0 {
            // Rows a read may still follow (the segment marked deleted): every frame, each the right one.
            #expect(try frameMD5s(output) == frameMD5s(source.path))
        } else {
            #expect(before.status == 1, "\(before.stderr)")
            #expect(before.stderr.contains("rewind verify --repair"), "\(before.stderr)")
        }
        let check = try Tool.rewind(["verify", "--store", store])
        #expect(check.status == 1, "\(check.output)\(check.stderr)")
        #expect(check.stderr.contains("rewind verify --repair"), "\(check.stderr)")

        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(repair.output.contains("moved the damaged index ("), "\(repair.output)")
        #expect(repair.output.contains("verified 3 segments, 150 frames"), "\(repair.output)")
        let after = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "10s", "-o", output])
        #expect(after.status == 0, "\(after.stderr)")
        #expect(try frameMD5s(output) == frameMD5s(source.path))
    }

    /// Rows of a sealed segment missing from the index (pages damaged so that a range scan skips or stops short, or
    /// rows deleted by another program): a clip never writes the frames around them as if that were all, but fails
    /// naming the rows missing, and a repair puts them back from the file.
    @Test(arguments: [
        "DELETE FROM frames WHERE pts_ns BETWEEN 500000000 AND 700000000",
        "DELETE FROM frames WHERE pts_ns >= 1800000000 AND pts_ns < 2000000000",
        "DELETE FROM frames WHERE pts_ns >= 2000000000 AND pts_ns < 4000000000",
    ])
    func aClipNeverLeavesOutRowsTheIndexLost(edit: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (source, store) = try storeOfSource(in: directory, edited: "\(edit);")

        let output = directory.appendingPathComponent("all.y4m").path
        let before = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "10s", "-o", output])
        #expect(before.status == 1, "\(before.output) \(before.stderr)")
        #expect(before.stderr.contains("rows are missing"), "\(before.stderr)")
        #expect(before.stderr.contains("rewind verify --repair"), "\(before.stderr)")
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        let after = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "10s", "-o", output])
        #expect(after.status == 0, "\(after.stderr)")
        #expect(try frameMD5s(output) == frameMD5s(source.path))
    }

    /// A `.partial` of another store (or one renamed) in `segments/`, whose header says the number of one of this
    /// store's files: never sealed under that number, which replaced the store's file and lost its frames; a repair
    /// keeps it aside as `.foreign`. A copy of a sealed file as its own `.partial` is kept aside as `.duplicate`.
    @Test func aPartialOfAnotherNameNeverReplacesAFileOfTheStore() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try Source(size: "160x120", rate: "30", frames: 150, in: directory)
        var stores: [String] = []
        for name in ["store", "other"] {
            let store = directory.appendingPathComponent(name).path
            let record = try Tool.rewind([
                "record", "--store", store, "--input", "y4m:\(source.path)", "--segment", "2s",
            ])
            #expect(record.status == 0, "\(record.stderr)")
            stores.append(store)
        }
        let (store, other) = (stores[0], stores[1])
        let own = try Data(contentsOf: URL(fileURLWithPath: "\(store)/segments/000002.seg"))
        try FileManager.default.copyItem(
            atPath: "\(other)/segments/000002.seg", toPath: "\(store)/segments/000060.seg.partial")
        let again = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(source.path)", "--duration", "1s"])
        #expect(again.stderr.contains("says in its header that it is segment 2"), "\(again.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: "\(store)/segments/000002.seg")) == own)
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(repair.output.contains("moved it aside as 000060.seg.partial.foreign"), "\(repair.output)")
        let output = directory.appendingPathComponent("first.y4m").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "5s", "-o", output])
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(try frameMD5s(output) == frameMD5s(source.path), "the first recording, whole")

        try FileManager.default.copyItem(
            atPath: "\(store)/segments/000002.seg", toPath: "\(store)/segments/000002.seg.partial")
        let check = try Tool.rewind(["verify", "--store", store])
        #expect(check.status == 1 && check.output.contains("have the same number"), "\(check.output)")
        let mended = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(mended.status == 0, "\(mended.output)\(mended.stderr)")
        #expect(mended.output.contains("moved 000002.seg.partial aside as 000002.seg.partial.duplicate"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: "\(store)/segments/000002.seg")) == own)
    }

    /// A segment file moved away (its frames counted lost by a repair) and put back: the next repair indexes it
    /// again and no `damaged` gap is left, not even a frame-long sliver at either side of it.
    @Test func aSegmentPutBackLeavesNoDamagedGap() throws {
        let (directory, store) = try recordedStore(seconds: 4)
        defer { try? FileManager.default.removeItem(at: directory) }
        let away = directory.appendingPathComponent("away.seg").path
        try FileManager.default.moveItem(atPath: store + "/segments/000002.seg", toPath: away)
        let lost = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(lost.output.contains("its 30 frames are lost"), "\(lost.output)")
        #expect(try (info(store)["gaps"] as? [[String: Any]] ?? []).contains { $0["reason"] as? String == "damaged" })
        try FileManager.default.moveItem(atPath: away, toPath: store + "/segments/000002.seg")
        let back = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(back.status == 0, "\(back.output)")
        let gaps = try info(store)["gaps"] as? [[String: Any]] ?? []
        #expect(gaps.isEmpty, "\(gaps)")
        #expect(try info(store)["frames"] as? Int == 120)
    }

    /// `info` lists `segments/` against the index: a segment file gone, or files the index lost the rows of (a
    /// damaged `-wal`), make it say so and exit 1; a clip that finds nothing says why; a repair puts it right.
    @Test func infoSaysWhenTheIndexAndTheSegmentFilesDisagree() throws {
        let (directory, store) = try recordedStore(seconds: 4)
        defer { try? FileManager.default.removeItem(at: directory) }
        let clean = try Tool.rewind(["info", "--store", store])
        #expect(clean.status == 0 && !clean.output.contains("problems"), "\(clean.output)\(clean.stderr)")

        let away = directory.appendingPathComponent("away.seg").path
        try FileManager.default.moveItem(atPath: store + "/segments/000002.seg", toPath: away)
        let missing = try Tool.rewind(["info", "--store", store])
        #expect(missing.status == 1, "\(missing.output)")
        #expect(missing.output.contains("segments/000002.seg is missing: the index has 30 frames in it"))
        #expect(
            missing.stderr.contains(
                "the index and the files in segments/ disagree (1 problem): run 'rewind verify' for "
                    + "the details, and 'rewind verify --repair' to index the files again and count the frames of missing"
            ),
            "\(missing.stderr)")
        let json = try Tool.rewind(["info", "--store", store, "--json"])
        #expect(json.status == 1)
        let object = try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any]
        #expect(object?["problems"] as? [String] == ["segments/000002.seg is missing: the index has 30 frames in it"])
        try FileManager.default.moveItem(atPath: away, toPath: store + "/segments/000002.seg")

        // Every row of the store lost while its files stay.
        let sqlite = try Tool.run(
            try Tool.path(of: "sqlite3"), [store + "/index.sqlite", "DELETE FROM frames; DELETE FROM segments;"])
        #expect(sqlite.status == 0, "\(sqlite.stderr)")
        let lost = try Tool.rewind(["info", "--store", store])
        #expect(lost.status == 1)
        #expect(lost.output.contains("frames: 0"), "\(lost.output)")
        for name in ["000001.seg", "000004.seg"] {
            #expect(lost.output.contains("segments/\(name) is not in the index: its frames are left out"))
        }
        // Files to take in and none gone: nothing is lost, and the advice does not say so.
        #expect(
            lost.stderr.contains(
                "segments/ holds frames the index does not list yet (4 problems): run 'rewind "
                    + "verify' for the details, and 'rewind verify --repair' (or record into the store again) to index"),
            "\(lost.stderr)")
        let output = directory.appendingPathComponent("clip.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", output])
        #expect(clip.status == 1)
        #expect(
            clip.stderr.contains(
                "segments/ holds frames the index does not list yet (segments/000001.seg is not in the index: its "
                    + "frames are left out and 3 more problems): run 'rewind verify --repair' (or record into the "
                    + "store again) to index their frames"),
            "\(clip.stderr)")
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)")
        let after = try Tool.rewind(["info", "--store", store])
        #expect(after.status == 0 && after.output.contains("frames: 120 in 4 segments"), "\(after.output)")
    }

    /// A clip through a live recorder that meets a damaged segment says what to do, as one from the disk does (it
    /// said only the damage), and the recorder logs it as a clip, not a save.
    @Test func aLiveClipOfADamagedSegmentSaysToRepairOnceTheRecorderStops() throws {
        let (directory, store) = try recordedStore(seconds: 3)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = store + "/segments/000002.seg"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        bytes[bytes.count / 2] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: path))
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitUntilAnswering(store)
        let output = directory.appendingPathComponent("damaged.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "1s", "--to", "2s", "-o", output])
        #expect(clip.status == 1, "\(clip.stderr)")
        #expect(clip.stderr.contains("segment 000002.seg is damaged at byte"), "\(clip.stderr)")
        #expect(
            clip.stderr.contains("stop the recorder, then run 'rewind verify --repair'"), "\(clip.stderr)")
        #expect(!FileManager.default.fileExists(atPath: output))
        recorder.process.interrupt()
        let log = try recorder.finish(timeout: .seconds(60))
        #expect(log.stderr.contains("a clip failed: segment 000002.seg is damaged"), "\(log.stderr)")
    }

    /// The open segment of a recorder killed before its first frames reached the index: `info` and a clip say a
    /// recorder stopped before indexing it and that the repair or the next recording takes its frames in, not that
    /// frames of missing files are lost (they said the index and the files disagree, and to count them lost).
    @Test func anOpenSegmentNeverIndexedIsNamedAsARecordersAndTakenInByTheNextRecording() throws {
        let (directory, store) = try recordedStore(seconds: 1)
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try runChecked("sqlite3", [store + "/index.sqlite", "DELETE FROM frames; DELETE FROM segments;"])
        try FileManager.default.moveItem(
            atPath: store + "/segments/000001.seg", toPath: store + "/segments/000001.seg.partial")
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.status == 1, "\(info.output)")
        #expect(
            info.output.contains(
                "segments/000001.seg.partial is not in the index: a recorder stopped before indexing it"),
            "\(info.output)")
        #expect(!info.stderr.contains("lost"), "\(info.stderr)")
        let output = directory.appendingPathComponent("clip.y4m").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", output])
        #expect(clip.status == 1, "\(clip.stderr)")
        #expect(
            clip.stderr.contains("run 'rewind verify --repair' (or record into the store again) to index their frames"),
            "\(clip.stderr)")
        let again = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"])
        #expect(again.status == 0, "\(again.stderr)")
        let after = try Tool.rewind(["info", "--store", store])
        #expect(after.status == 0 && after.output.contains("frames: 60"), "\(after.output)\(after.stderr)")
    }

    /// A clip or save from the disk of a store whose index lost a segment's rows writes the frames the index has and
    /// fails (1), saying the file may lack frames and what to do, also beside the socket a killed recorder leaves
    /// (which said a recorder ran, and kept the advice back); a text `info` finds rows missing at a stream's end, as
    /// `--json` does, before it prints a figure.
    @Test func anExportFromAStoreWhoseIndexLostRowsSaysTheFileMayLackFrames() throws {
        let (directory, store) = try recordedStore(seconds: 4)
        defer { try? FileManager.default.removeItem(at: directory) }
        let python = "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])"
        _ = try runChecked("python3", ["-c", python, store + "/rewind.sock"])
        _ = try runChecked(
            "sqlite3",
            [
                store + "/index.sqlite",
                "DELETE FROM frames WHERE segment_id = (SELECT id FROM segments WHERE file_name = '000002.seg'); "
                    + "DELETE FROM segments WHERE file_name = '000002.seg';",
            ])
        for command in [["clip", "--from", "0s", "--to", "100s"], ["save", "--last", "100s"]] {
            let output = directory.appendingPathComponent("\(command[0]).mkv").path
            let result = try Tool.rewind(command + ["--store", store, "-o", output])
            #expect(result.status == 1, "\(command[0]): \(result.stderr)")
            #expect(result.output.contains("wrote 90 frames"), "\(command[0]): \(result.output)")
            #expect(
                result.stderr.contains(
                    "rewind \(command[0]): the file written may lack frames of the range: segments/ holds frames the "
                        + "index does not list yet (segments/000002.seg is not in the index: its frames are left out): "
                        + "run 'rewind verify --repair'"), "\(command[0]): \(result.stderr)")
        }
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        let whole = try Tool.rewind([
            "clip", "--store", store, "--from", "0s", "--to", "100s", "-o",
            directory.appendingPathComponent("whole.mkv").path,
        ])
        #expect(whole.status == 0 && whole.output.contains("wrote 120 frames"), "\(whole.output)\(whole.stderr)")
        #expect(!whole.stderr.contains("may lack"), "\(whole.stderr)")

        _ = try runChecked("sqlite3", [store + "/index.sqlite", "DELETE FROM frames WHERE pts_ns > 3900000000;"])
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.status == 1, "\(info.output)")
        #expect(info.stderr.contains("rows are missing"), "\(info.stderr)")
        #expect(info.output.isEmpty, "no figure of an index that lacks rows: \(info.output)")
    }

    /// A markers table the index cannot read: a `.mkv` from the disk is written without chapters (they never fail an
    /// export) and the command exits 1 saying so; after the repair (markers from `markers.journal`) it has them.
    @Test func anExportWhoseMarkersCannotBeReadSaysItHasNoChapters() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--duration", "3s",
        ])
        try Tool.waitUntilAnswering(store)
        let mark = try Tool.rewind(["mark", "--store", store, "--label", "door"])
        #expect(mark.status == 0, "\(mark.stderr)")
        #expect(try recorder.finish(timeout: .seconds(60)).status == 0)
        // A recorder that ends without closing its connection leaves its pages in the WAL too, where reads find
        // them before the file's: empty it, so the damaged page is the one read.
        _ = try runChecked("sqlite3", [store + "/index.sqlite", "PRAGMA wal_checkpoint(TRUNCATE);"])
        let page = try runChecked(
            "sqlite3", ["-readonly", store + "/index.sqlite", "SELECT pageno FROM dbstat WHERE name = 'markers'"])
        let number = try #require(Int(page.output.trimmingCharacters(in: .whitespacesAndNewlines)), "\(page.output)")
        let index = try #require(FileHandle(forUpdatingAtPath: store + "/index.sqlite"))
        try index.seek(toOffset: UInt64(4096 * (number - 1) + 8))
        try index.write(contentsOf: Data(repeating: 0xFF, count: 40))
        try index.close()
        let output = directory.appendingPathComponent("clip.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1m", "-o", output])
        #expect(clip.status == 1, "\(clip.stderr)")
        #expect(clip.output.contains("wrote 90 frames"), "\(clip.output)")
        #expect(
            clip.stderr.contains("the store's markers could not be read (")
                && clip.stderr.contains("so the file has no chapters: run 'rewind verify --repair'"), "\(clip.stderr)")
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        let again = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1m", "-o", output])
        #expect(again.status == 0, "\(again.stderr)")
        let chapters = try runChecked("ffprobe", ["-v", "error", "-show_chapters", "-of", "csv=p=0", output])
        #expect(chapters.output.contains("door"), "\(chapters.output)")
    }

    /// A store entry of the wrong kind (the index a directory, `segments` a file or a link to nothing) is named by
    /// every command, with what to do, before SQLite or the segment reader fail in the system's words (`disk I/O
    /// error`, `Not a directory`) or a read finds no segment file and calls the store healthy.
    @Test(arguments: ["index-directory", "segments-file", "segments-dangling", "reserve-directory"])
    func aStoreEntryOfTheWrongKindIsNamed(case name: String) throws {
        let (directory, store) = try recordedStore(seconds: 1)
        defer { try? FileManager.default.removeItem(at: directory) }
        let expected: String
        switch name {
        case "index-directory":
            for suffix in ["", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: store + "/index.sqlite" + suffix)
            }
            try FileManager.default.createDirectory(atPath: store + "/index.sqlite", withIntermediateDirectories: false)
            expected =
                "'\(store)/index.sqlite' is a directory, where the store keeps its index (a file): move it away; "
                + "'rewind verify --repair' then rebuilds the index from the segment files"
        case "segments-file":
            try FileManager.default.moveItem(atPath: store + "/segments", toPath: directory.path + "/away")
            #expect(FileManager.default.createFile(atPath: store + "/segments", contents: Data("x".utf8)))
            expected =
                "'\(store)/segments' is a file, where the store keeps its segment files (a directory): move it away"
        case "reserve-directory":
            // Without the reserve file the index would have no room of its own on a full disk, silently.
            try? FileManager.default.removeItem(atPath: store + "/index.reserve")
            try FileManager.default.createDirectory(
                atPath: store + "/index.reserve", withIntermediateDirectories: false)
            expected =
                "'\(store)/index.reserve' is a directory, where the store keeps the room its index keeps on a full disk "
                + "(a file): move it away"
        default:
            try FileManager.default.moveItem(atPath: store + "/segments", toPath: directory.path + "/away")
            try FileManager.default.createSymbolicLink(atPath: store + "/segments", withDestinationPath: "/nonexistent")
            expected = "'\(store)/segments' is a symbolic link to nothing ('/nonexistent'), where the store keeps"
        }
        for command in [
            ["info"], ["verify"], ["verify", "--repair"],
            ["clip", "--from", "0s", "--to", "1s", "-o", directory.path + "/c.mkv"],
            ["record", "--input", "synthetic:160x120@30", "--duration", "1s"],
        ] {
            let result = try Tool.rewind([command[0], "--store", store] + command.dropFirst())
            #expect(result.status == 1, "\(command): \(result.output)\(result.stderr)")
            #expect(result.stderr.contains(expected), "\(command): \(result.stderr)")
        }
    }

    /// An index whose record of its schema another program changed (a `schema_migrations` row deleted, so the
    /// migration would run again over its own tables; the table dropped) is refused by `record` with the repair to
    /// run, not SQLite's words over a migration's text, and named by a dry `verify`; the repair rebuilds it from the
    /// segment files.
    @Test(arguments: [
        "DELETE FROM schema_migrations WHERE version = 2", "DROP TABLE schema_migrations",
        "DELETE FROM schema_migrations", "DELETE FROM schema_migrations WHERE version = 7",
    ])
    func anIndexWhoseSchemaRecordWasChangedIsRebuiltByTheRepair(edit: String) throws {
        let (directory, store) = try recordedStore(seconds: 1)
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try runChecked("sqlite3", ["\(store)/index.sqlite", edit])
        // A dry check says so too (it said clean, reading the tables, while recording was refused).
        let check = try Tool.rewind(["verify", "--store", store])
        #expect(check.status == 1, "\(check.output)\(check.stderr)")
        #expect(check.stderr.contains("changed it)"), "\(check.stderr)")
        for missing in [2, 7] where edit.contains("version = \(missing)") {
            // The newest row too: the tables are those of the version after the rows recorded.
            #expect(
                check.stderr.contains(
                    "has no record in schema_migrations of migration \(missing), which made its tables"),
                "\(check.stderr)")
        }
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s",
        ])
        #expect(record.status == 1, "\(record.stderr)")
        #expect(record.stderr.contains("changed it)"), "\(record.stderr)")
        #expect(record.stderr.contains("run 'rewind verify --repair', which moves the index aside and rebuilds it"))
        #expect(!record.stderr.contains("CREATE TABLE"), "\(record.stderr)")
        try expectTheRepairRebuildsTheIndexOfASecond(store)
    }

    /// Another program's SQLite database as `index.sqlite`, nothing else beside it: every command that would write
    /// the store refuses it as that, and leaves it as it was, byte for byte and in its own journal mode (`record`
    /// and `unmark` switched it to WAL before refusing; the repair moved it aside and made an empty store). So too
    /// one with a `schema_migrations` table of its own (Rails, dbmate: SQLite's words over a missing column, then the
    /// same), one with only a view, and an empty one another program marked as its own (rewind's tables were added).
    @Test(arguments: [
        "CREATE TABLE foo(a, b); INSERT INTO foo VALUES (1, 2);",
        "CREATE TABLE schema_migrations(version varchar PRIMARY KEY); INSERT INTO schema_migrations VALUES "
            + "('20240101000000'); CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT);",
        "CREATE VIEW v AS SELECT 1;", "PRAGMA user_version = 42; PRAGMA application_id = 1234;",
        // A name that `LIKE 'sqlite_%'` took for SQLite's own (the database was migrated into).
        "CREATE TABLE SqliteData(x); INSERT INTO SqliteData VALUES (42);",
        // In WAL mode: read-only opens left a -shm and an empty -wal beside it.
        "PRAGMA journal_mode = WAL; CREATE TABLE t(x);",
    ])
    func anotherProgramsDatabaseIsRefusedAndLeftAsItWas(made sql: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("other").path
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: false)
        let database = store + "/index.sqlite"
        _ = try runChecked("sqlite3", [database, sql])
        let original = try #require(FileManager.default.contents(atPath: database))
        for command in [
            ["record", "--input", "synthetic:160x120@10", "--duration", "1s"], ["unmark", "1"], ["verify", "--repair"],
            ["info"], ["verify"], ["markers"], ["clip", "--from", "0s", "--to", "1s", "-o", directory.path + "/c.mkv"],
        ] {
            let result = try Tool.rewind([command[0], "--store", store] + command.dropFirst())
            #expect(result.status == 1, "\(command): \(result.output)\(result.stderr)")
            let said = "is a rewind store's (no segments/, no journals): it is another program's database"
            #expect(result.stderr.contains(said), "\(command): \(result.stderr)")
            #expect(FileManager.default.contents(atPath: database) == original, "\(command) changed it")
            let left = try FileManager.default.contentsOfDirectory(atPath: store)
            #expect(left == ["index.sqlite"], "\(command) left \(left)")
        }
        let mode = try runChecked("sqlite3", [database, "PRAGMA journal_mode"])
        let own = sql.contains("journal_mode = WAL") ? "wal" : "delete"
        #expect(mode.output.trimmingCharacters(in: .whitespacesAndNewlines) == own, "\(mode.output)")
    }

    /// A store's index an administrator switched to a rollback journal, with a write of theirs cut short (a hot
    /// `index.sqlite-journal`): a read says what to do (it blamed permissions), and `record` rolls it back and
    /// records (the check made before a write open read it read-only, which cannot roll it back, and every command
    /// failed, the repair too).
    @Test func anIndexWithAnUnfinishedRollbackJournalIsRolledBackByAWrite() throws {
        // Enough frames that the cut transaction's pages reach the index file.
        let (directory, store) = try recordedStore(seconds: 10)
        defer { try? FileManager.default.removeItem(at: directory) }
        let index = store + "/index.sqlite"
        _ = try runChecked("sqlite3", [index, "PRAGMA journal_mode = DELETE"])
        // A transaction that spills to the file (a one-page cache), its process gone before it commits.
        let cut = try ExternalTools.execute(
            "/usr/bin/python3",
            [
                "-c",
                "import sqlite3, os, sys\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                    + "c.execute('PRAGMA cache_size=1'); c.execute('BEGIN')\n"
                    + "c.execute('UPDATE frames SET wall_ns = wall_ns + 1'); os._exit(9)",
                index,
            ], timeout: .seconds(60))
        #expect(cut.status == 9, "\(cut.stderr)")
        #expect(FileManager.default.fileExists(atPath: index + "-journal"), "a hot journal")
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.status == 1, "\(info.output)")
        #expect(info.stderr.contains("index.sqlite-journal beside it holds a write"), "\(info.stderr)")
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s", "--segment", "1s",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        let check = try Tool.rewind(["verify", "--store", store])
        #expect(check.status == 0, "\(check.output) \(check.stderr)")
    }

    /// One byte of a recorded migration's text changed (the checksum recorded beside it no longer matches) is
    /// damage, not another build's schema: named so, and rebuilt by the repair (it read as "made by a different
    /// build", with no repair offered).
    @Test func aDamagedRecordOfAMigrationIsRebuiltByTheRepair() throws {
        let (directory, store) = try recordedStore(seconds: 1)
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try runChecked(
            "sqlite3",
            [
                "\(store)/index.sqlite",
                "UPDATE schema_migrations SET sql = replace(sql, 'CREATE', 'CREATF') WHERE version = 2",
            ])
        let check = try Tool.rewind(["verify", "--store", store])
        #expect(check.status == 1, "\(check.output)\(check.stderr)")
        #expect(
            check.stderr.contains(
                "a record of migration 2 (0002_segments.sql) in schema_migrations whose text no "
                    + "longer matches the checksum recorded with it"), "\(check.stderr)")
        #expect(!check.stderr.contains("different build"), "\(check.stderr)")
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s",
        ])
        #expect(record.status == 1, "\(record.stderr)")
        #expect(record.stderr.contains("run 'rewind verify --repair', which moves the index aside and rebuilds it"))
        try expectTheRepairRebuildsTheIndexOfASecond(store)
    }

    /// `verify --repair` moves the damaged index of `store` (a second recorded) aside and rebuilds it, and the next
    /// recording of a second goes into it: 60 frames.
    private func expectTheRepairRebuildsTheIndexOfASecond(_ store: String) throws {
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(repair.output.contains("moved the damaged index"), "\(repair.output)")
        let again = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"])
        #expect(again.status == 0, "\(again.stderr)")
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.status == 0 && info.output.contains("frames: 60"), "\(info.output)")
    }

    /// A store whose making was cut short (an index with no schema, a -wal beside it with no whole transaction: a
    /// recorder killed as it began) is named as such, not as one whose -wal is missing, and recording into it again
    /// finishes it.
    @Test func aStoreWhoseMakingWasCutShortSaysSo() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: false)
        #expect(FileManager.default.createFile(atPath: store + "/index.sqlite", contents: Data()))
        #expect(FileManager.default.createFile(atPath: store + "/index.sqlite-wal", contents: Data(count: 8272)))
        let read = try Tool.rewind(["info", "--store", store])
        #expect(read.status == 1, "\(read.output)")
        #expect(read.stderr.contains("the store's making was cut short"), "\(read.stderr)")
        #expect(read.stderr.contains("record into it again"), "\(read.stderr)")
        let again = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try Tool.rewind(["info", "--store", store]).status == 0)
    }

    /// `segments/` itself deleted: `verify` and `info` say so (exit 1), and the repair counts every frame as lost and
    /// leaves a store that records again.
    @Test func aStoreWhoseSegmentsDirectoryIsGoneIsReportedAndRepaired() throws {
        let (directory, store) = try recordedStore(seconds: 1)
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.removeItem(atPath: store + "/segments")
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 1)
        #expect(
            verify.output.contains("segments/ is missing: every segment file of the store is gone (the index lists 1)"),
            "\(verify)")
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.status == 1 && info.output.contains("segments/000001.seg is missing"), "\(info.output)")
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(repair.output.contains("its 30 frames are lost"), "\(repair.output)")
        // Gone again while the index lists no segment: nothing is lost, and it says so.
        try FileManager.default.removeItem(atPath: store + "/segments")
        let empty = try Tool.rewind(["verify", "--store", store])
        #expect(empty.status == 1, "\(empty.output)")
        #expect(
            empty.output.contains("segments/ is missing: the index lists no segment, so no frame is lost"),
            "\(empty.output)")
        #expect(try Tool.rewind(["verify", "--store", store, "--repair"]).status == 0)
        let again = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)
    }

    /// The index of another store put in this one's place (copied over it): every file would be set aside as
    /// foreign and every frame of that index counted lost. `verify`, `info` and `record` say the index is not the
    /// files' and change nothing; a repair keeps it aside and rebuilds the index from the files, every frame as
    /// before.
    @Test func anIndexOfAnotherStoreIsKeptAsideAndRebuiltFromTheFiles() throws {
        let (directory, store) = try recordedStore(seconds: 3)
        defer { try? FileManager.default.removeItem(at: directory) }
        let other = directory.appendingPathComponent("other").path
        let made = try Tool.rewind([
            "record", "--store", other, "--input", "synthetic:160x120@30", "--duration", "2s", "--segment", "1s",
        ])
        #expect(made.status == 0, "\(made.stderr)")
        let before = directory.appendingPathComponent("before.y4m").path
        #expect(try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "3s", "-o", before]).status == 0)
        let manager = FileManager.default
        for suffix in ["", "-wal", "-shm"] {
            try? manager.removeItem(atPath: "\(store)/index.sqlite\(suffix)")
            try? manager.copyItem(atPath: "\(other)/index.sqlite\(suffix)", toPath: "\(store)/index.sqlite\(suffix)")
        }
        let files = ["000001.seg", "000002.seg", "000003.seg"]
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 1, "\(verify.output)")
        #expect(
            verify.stderr.contains(
                "\(store)/index.sqlite is not the index of the segment files beside it: none of its 2 segments was "
                    + "made when any of the 3 files in segments/ was"), "\(verify.stderr)")
        #expect(verify.stderr.contains("keeps it aside as index.sqlite.foreign-"), "\(verify.stderr)")
        let shown = try Tool.rewind(["info", "--store", store])
        #expect(shown.status == 1 && shown.output.contains("is not the index of the segment files"), "\(shown.output)")
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s",
        ])
        #expect(record.status == 1 && record.stderr.contains("is not the index of the segment files"))
        #expect(try manager.contentsOfDirectory(atPath: store + "/segments").sorted() == files)

        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(
            repair.output.contains(
                "moved the index of other segment files (2 segments, none of them in segments/) to "
                    + "\(store)/index.sqlite.foreign-"), "\(repair.output)")
        #expect(repair.output.contains("verified 3 segments, 90 frames"), "\(repair.output)")
        #expect(try manager.contentsOfDirectory(atPath: store + "/segments").sorted() == files)
        #expect(try manager.contentsOfDirectory(atPath: store).contains { $0.hasPrefix("index.sqlite.foreign-") })
        let after = directory.appendingPathComponent("after.y4m").path
        #expect(try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "3s", "-o", after]).status == 0)
        #expect(try frameMD5s(after) == frameMD5s(before))
        #expect(try frameMD5s(after).count == 90)
        #expect((try info(store)["gaps"] as? [Any])?.isEmpty == true)
    }

    /// Every export whose range reaches into frames a repair could not salvage says where they were: a clip of all
    /// streams from the disk (naming the stream), a range wholly inside them (instead of only "no frames"), and a
    /// clip and a save through a live recorder, whose save object lists them (`lost`).
    @Test func everyExportAcrossLostFramesSaysWhereTheyWere() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (source, store, _) = try storeDamagedInFrame40(in: directory)
        #expect(try Tool.rewind(["verify", "--store", store, "--repair"]).status == 0)
        let gap = "\(formatSeconds(source.pts(39))) … \(formatSeconds(source.pts(60)))"
        let other = try Tool.rewind([
            "record", "--store", store, "--input", "other=synthetic:160x120@30", "--duration", "1s",
        ])
        #expect(other.status == 0, "\(other.stderr)")

        let all = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "20s", "-o",
            directory.appendingPathComponent("all.mkv").path,
        ])
        #expect(all.status == 0, "\(all.stderr)")
        #expect(
            all.output.contains("the range has 1 gap where frames were lost: \(gap) (camera: damaged)"), "\(all.output)"
        )
        let inside = try Tool.rewind([
            "clip", "--store", store, "--stream", "camera", "--from", "1.4s", "--to", "1.9s", "-o",
            directory.appendingPathComponent("inside.mkv").path,
        ])
        #expect(inside.status == 1)
        #expect(inside.stderr.contains("no frames in [1.400s, 1.900s); its frames were lost (\(gap) (damaged))"))

        // A live recorder of the same camera (its frames after the stored ones), its API on the store's socket.
        let live = try Source(size: "160x120", rate: "30", frames: 900, in: directory)
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "camera=y4m:\(live.path)", "--realtime",
        ])
        let process = recorder.process
        defer { if process.isRunning { process.terminate() } }
        let socket = store + "/rewind.sock"
        try waitUntil("the recorder serves \(socket)") { FileManager.default.fileExists(atPath: socket) }
        let clip = try Tool.rewind([
            "clip", "--store", store, "--stream", "camera", "--from", "0s", "--to", "3s", "-o",
            directory.appendingPathComponent("live.mkv").path,
        ])
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(clip.output.contains("exported by the live recorder"), "\(clip.output)")
        #expect(clip.output.contains("the range has 1 gap where frames were lost: \(gap) (damaged)"), "\(clip.output)")
        let saves = try Tool.run(
            try Tool.path(of: "curl"), ["-s", "--max-time", "60", "--unix-socket", socket, "http://rewind/v1/saves"])
        let list = try JSONSerialization.jsonObject(with: saves.stdout) as? [String: Any]
        let lost = (list?["saves"] as? [[String: Any]])?.first?["lost"] as? [[String: Any]]
        #expect(lost?.count == 1, "\(saves.output)")
        #expect(lost?.first?["reason"] as? String == "damaged" && lost?.first?["stream"] as? String == "camera")
        #expect(
            lost?.first?["start_ns"] as? Int64 == source.pts(39) && lost?.first?["end_ns"] as? Int64 == source.pts(60))
        // A range that lost nothing has an empty list, and its report no such line.
        let whole = try Tool.rewind([
            "clip", "--store", store, "--stream", "camera", "--from", "0s", "--to", "1s", "-o",
            directory.appendingPathComponent("whole.mkv").path,
        ])
        #expect(whole.status == 0 && !whole.output.contains("lost"), "\(whole.output)")
        // A segment file gone under the recorder: the advice puts stopping it before the repair, which needs that.
        let away = directory.appendingPathComponent("away.seg").path
        try FileManager.default.moveItem(atPath: store + "/segments/000001.seg", toPath: away)
        let missing = try Tool.rewind([
            "clip", "--store", store, "--stream", "camera", "--from", "0s", "--to", "1s", "-o",
            directory.appendingPathComponent("missing.mkv").path,
        ])
        #expect(missing.status == 1)
        #expect(
            missing.stderr.contains(
                "(segments/000001.seg is missing: the index has 40 frames in it): put back what is missing, or stop "
                    + "the recorder, then run 'rewind verify --repair'"), "\(missing.stderr)")
        try FileManager.default.moveItem(atPath: away, toPath: store + "/segments/000001.seg")
        process.terminate()
        process.waitUntilExit()
    }

    /// A store of 120 frames of `testsrc2` (160x120, 30 fps, key frames every 30) in one segment file, with a byte
    /// of frame 40's payload flipped: the source, the store and the file's records.
    private func storeDamagedInFrame40(in directory: URL) throws -> (
        source: Source, store: String, entries: [SegmentFrameEntry]
    ) {
        let source = try Source(size: "160x120", rate: "30", frames: 120, in: directory)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(source.path)", "--segment", "10s"])
        #expect(record.status == 0, "\(record.stderr)")
        let (path, entries) = try firstSegmentsRecords(of: store)
        try #require(entries.count == 120)
        #expect(entries.indices.filter { entries[$0].isKey } == [0, 30, 60, 90])
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        bytes[Int(entries[40].offset) + 56 + 200] ^= 0x10
        try bytes.write(to: URL(fileURLWithPath: path))
        return (source, store, entries)
    }

    /// The path of `store`'s first segment file and its records, as a scan reads them.
    private func firstSegmentsRecords(of store: String) throws -> (path: String, entries: [SegmentFrameEntry]) {
        let path = "\(store)/segments/000001.seg"
        let reader = try SegmentFileReader(path: path, fileSystem: POSIXFileSystem())
        defer { reader.close() }
        return (path, try reader.scan().entries)
    }

    /// A dry `verify` of a file damaged in a frame's header counts the records it reads before the damage as such,
    /// not as all the file holds (it said "its file holds 60" beside "salvage 30 after the damage").
    @Test func aDryVerifyCountsTheRecordsBeforeTheDamageAsSuch() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "4s",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        let (path, entries) = try firstSegmentsRecords(of: store)
        try #require(entries.count == 120)
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: UInt64(entries[60].offset) + 100)
        try handle.write(contentsOf: Data(repeating: 0xFF, count: 64))
        try handle.close()
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 1)
        #expect(
            verify.output.contains(
                "the index has 120 frames for segment 000001.seg, its file holds 60 readable "
                    + "before the damage"), "\(verify.output)")
    }

    /// A segment a killed recorder left open is said to be left so by `info` (no recorder holds it), with what
    /// seals it; the next recording does.
    @Test func aSegmentLeftOpenByAKilledRecorderIsSaidSo() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--realtime", "--duration", "60s",
        ])
        defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
        try Tool.waitForSocket(of: store)
        try waitUntil("frames are durable", interval: .milliseconds(50)) {
            (try? info(store)["frames"] as? Int ?? 0) ?? 0 > 0
        }
        let live = try Tool.rewind(["info", "--store", store])
        #expect(live.output.contains("(1 open)"), "a recorder holds it: \(live.output)")
        kill(recorder.process.processIdentifier, SIGKILL)
        recorder.process.waitUntilExit()
        let left = try Tool.rewind(["info", "--store", store])
        #expect(
            left.output.contains(
                "(1 open, left by a recorder that was stopped without sealing: the next 'rewind record' or 'rewind "
                    + "verify --repair' seals it)"), "\(left.output)")
        let again = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "1s"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try Tool.rewind(["info", "--store", store]).output.contains("(0 open)"))
    }

    /// A recorder killed between two syncs of its index leaves frames in its open segment's file past the last the
    /// index lists: `info`, a `clip` of their range and a `save` from the disk say how many and what takes them in
    /// (exit 1), instead of leaving them out silently (the clip said only "no frames", the save exited 0). What they
    /// count is what a repair indexes.
    @Test func framesInAnOpenSegmentPastTheIndexAreSaidSo() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let repaired = directory.appendingPathComponent("repaired").path
        // Stopped (SIGSTOP: every write finished, none torn) and then killed; a stop that found the index up to date
        // with the file (just after a sync) is tried again.
        var gained = 0
        for _ in 0..<10 where gained == 0 {
            try? FileManager.default.removeItem(atPath: store)
            try? FileManager.default.removeItem(atPath: repaired)
            let recorder = try Tool.startRewind([
                "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "3600s",
            ])
            defer { if recorder.process.isRunning { kill(recorder.process.processIdentifier, SIGKILL) } }
            let sqlite3 = try Tool.path(of: "sqlite3")
            try waitUntil("the index lists frames of an open segment", interval: .milliseconds(20)) {
                // Before the index is made, sqlite3 fails: not yet.
                let query = try? Tool.run(
                    sqlite3,
                    [
                        "-readonly", store + "/index.sqlite",
                        "SELECT count(*) FROM segments WHERE state = 'open' AND frame_count > 0",
                    ])
                return query?.output.trimmingCharacters(in: .whitespacesAndNewlines) == "1"
            }
            kill(recorder.process.processIdentifier, SIGSTOP)
            kill(recorder.process.processIdentifier, SIGKILL)
            recorder.process.waitUntilExit()
            // What a repair of a copy takes in: the frames the store holds past its index.
            // `cp -a`: the socket the killed recorder left is copied as one (Foundation's copy fails on it).
            let copy = try ExternalTools.execute("/bin/cp", ["-a", store, repaired], timeout: .seconds(60))
            try #require(copy.status == 0, "\(copy.stderr)")
            let before = try frames(in: repaired, repairing: false)
            gained = try frames(in: repaired, repairing: true) - before
        }
        try #require(gained > 0, "every stop found the index up to date with the file")
        let said = "holds \(gained) frame\(gained == 1 ? "" : "s") past the last the index lists (pts "
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.status == 1, "\(info.output)\(info.stderr)")
        #expect(info.output.contains(".seg.partial " + said), "\(info.output)")
        #expect(
            info.stderr.contains("segments/ holds frames the index does not list yet (1 problem)")
                && info.stderr.contains("'rewind verify --repair' (or record into the store again) to index their "),
            "\(info.stderr)")
        let last = try #require(try lastPTS(in: store))
        let clip = try Tool.rewind([
            "clip", "--store", store, "--from", "\(last / 1_000_000 + 10)ms", "--to", "\(last / 1_000_000 + 60_000)ms",
            "-o", directory.appendingPathComponent("tail.mkv").path,
        ])
        #expect(clip.status == 1, "\(clip.stderr)")
        #expect(clip.stderr.contains(said) && clip.stderr.contains("verify --repair"), "\(clip.stderr)")
        let save = try Tool.rewind([
            "save", "--store", store, "--last", "1s", "-o", directory.appendingPathComponent("last.mkv").path,
        ])
        #expect(save.status == 1, "\(save.stderr)")
        #expect(
            save.stderr.contains("the file written may lack frames of the range") && save.stderr.contains(said),
            "\(save.stderr)")
    }

    /// The frames `info --json` counts in `store`, after `rewind verify --repair` when `repairing`.
    private func frames(in store: String, repairing: Bool) throws -> Int {
        if repairing {
            let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
            #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        }
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        let document = try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
        return try #require(document?["frames"] as? Int, "\(info.output)\(info.stderr)")
    }

    /// The pts of the last frame `info --json` lists in `store`.
    private func lastPTS(in store: String) throws -> Int64? {
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        let document = try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
        return (document?["last_pts_ns"] as? NSNumber)?.int64Value
    }

    /// A store in a new temporary directory (`DIR/store`), recorded from the synthetic camera at 160x120 and 30 fps
    /// for `seconds`, one segment file a second.
    /// 150 frames of a 160x120 30 fps `.y4m` recorded into `directory/store` in 2 s segments (three), then the
    /// index changed by `edited` (SQL run by `sqlite3`), as another program would.
    private func storeOfSource(in directory: URL, edited: String) throws -> (source: Source, store: String) {
        let source = try Source(size: "160x120", rate: "30", frames: 150, in: directory)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(source.path)", "--segment", "2s"])
        #expect(record.status == 0, "\(record.stderr)")
        _ = try runChecked("sqlite3", ["\(store)/index.sqlite", edited])
        return (source, store)
    }

    private func recordedStore(seconds: Int) throws -> (directory: URL, store: String) {
        let directory = try Tool.temporaryDirectory()
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x120@30", "--duration", "\(seconds)s", "--segment",
            "1s",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        return (directory, store)
    }
}
