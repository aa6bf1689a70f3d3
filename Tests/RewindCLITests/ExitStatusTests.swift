import Foundation
import RewindKit
import Testing

@testable import rewind

/// Each exit status the README lists, end to end, with what stderr says; and the one mapping behind them.
@Suite struct ExitStatusTests {
    func recordedStore(in directory: URL) throws -> String {
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x90@30", "--duration", "1s"])
        #expect(record.status == 0, "\(record.stderr)")
        return store
    }

    /// A gap noted between two frames starts at the frame before it, which the store keeps: a clip that reaches only
    /// that frame of the gap lost nothing and says nothing of it; one that reaches further names the gap.
    @Test func aRangeEndingAtTheFrameBeforeAGapLostNothing() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try recordedStore(in: directory)
        // After frame 14 (466 666 666 ns), a second of frames dropped as spill behind.
        _ = try runChecked(
            "sqlite3",
            [
                store + "/index.sqlite",
                "INSERT INTO gaps (stream_id, start_ns, end_ns, reason) "
                    + "VALUES (1, 466666666, 1466666666, 'spill behind')",
            ])
        let output = directory.appendingPathComponent("x.y4m").path
        let upTo = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "466666667ns", "-o", output])
        #expect(upTo.status == 0 && upTo.output.contains("wrote 15 frames"), "\(upTo.output)\(upTo.stderr)")
        #expect(!upTo.output.contains("frames were lost"), "\(upTo.output)")
        let into = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "600ms", "-o", output])
        #expect(into.output.contains("the range has 1 gap where frames were lost: 0.466s … 1.466s"), "\(into.output)")
    }

    /// The gaps of two streams a few nanoseconds apart read apart in one line, to the nanosecond, and a time that
    /// is not zero does not read as zero.
    @Test func lostGapsOfSeveralStreamsReadApart() throws {
        let line = try #require(
            lostGapsLine(
                [
                    GapObject(stream: "a", startNanoseconds: 0, endNanoseconds: 27_433_000_000, reason: "disk error"),
                    GapObject(
                        stream: "b", startNanoseconds: 148_671, endNanoseconds: 27_433_482_004, reason: "disk error"),
                ], namingStreams: true))
        #expect(
            line == "  the range has 2 gaps where frames were lost: 0ns … 27433000000ns (a: disk error), 148671ns … "
                + "27433482004ns (b: disk error)", "\(line)")
    }

    @Test func aBackwardsRangeIsAUsageErrorNamingBothTimes() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try recordedStore(in: directory)
        let output = directory.appendingPathComponent("x.y4m").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "3s", "--to", "1s", "-o", output])
        #expect(clip.status == 64, "\(clip.stderr)")
        #expect(clip.stderr.hasPrefix("rewind clip: the range [3.000s, 1.000s) is empty"), "\(clip.stderr)")
        #expect(clip.stderr.contains("rewind clip: give a --to later than --from"), "\(clip.stderr)")
        #expect(!FileManager.default.fileExists(atPath: output))
        // Times of day say the same, in one line.
        let day = try Tool.rewind(["clip", "--store", store, "--from", "00:00:02", "--to", "00:00:01", "-o", output])
        #expect(day.status == 64, "\(day.stderr)")
        #expect(
            day.stderr == "rewind clip: the range [00:00:02, 00:00:01) is empty: its end is not after its start; give "
                + "a --to later than --from\n", "\(day.stderr)")
    }

    /// `--max-age` no longer than `--segment` would keep frames up to a segment longer than asked (a segment goes
    /// whole): a given `--segment` is refused naming the one to give, the default one becomes a quarter of the age.
    @Test func aMaxAgeNoLongerThanASegmentIsRefusedOrShortensTheDefaultSegment() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let input = ["--input", "synthetic:160x90@30", "--duration", "2s"]
        let refused = try Tool.rewind(["record", "--store", store] + input + ["--max-age", "2s", "--segment", "10m"])
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(
            refused.stderr.contains("--max-age 2.000s is not longer than --segment 600.000s")
                && refused.stderr.contains("give --segment 500ms (a quarter of --max-age, at least 100ms)"),
            "\(refused.stderr)"
        )
        #expect(!FileManager.default.fileExists(atPath: store))
        let shortened = try Tool.rewind(["record", "--store", store] + input + ["--max-age", "2s"])
        #expect(shortened.status == 0, "\(shortened.stderr)")
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        let object = try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
        #expect((object?["segments"] as? Int ?? 0) >= 4, "500 ms segments over 2 s: \(info.output)")
    }

    /// The window a refusal suggests is written as the value's own unit, rounded up: `1h`, not `3600000ms`.
    @Test func theSuggestedWindowIsWrittenInItsOwnUnit() {
        #expect(roundedUpDuration(3_600_000_000_000) == "1h")
        #expect(roundedUpDuration(5_000_000_000) == "5s")
        #expect(roundedUpDuration(12_500_000_000) == "13s")
        #expect(roundedUpDuration(2_500_000_000) == "2500ms")
        #expect(roundedUpDuration(33_333_333) == "34ms")
        #expect(roundedUpDuration(100_000_000) == "100ms")
    }

    /// An `-o` with a control character is refused with or without a recorder (only a recorder refused it: from
    /// the disk the printed line then broke in two).
    @Test func anOutputNameWithAControlCharacterIsAUsageError() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try recordedStore(in: directory)
        let output = directory.appendingPathComponent("a\nb.mkv").path
        for command in [["clip", "--from", "0s", "--to", "1s"], ["save", "--last", "1s"]] {
            let result = try Tool.rewind([command[0], "--store", store] + command.dropFirst() + ["-o", output])
            #expect(result.status == 64, "\(command[0]): \(result.output)\(result.stderr)")
            #expect(result.stderr.contains("holds control characters"), "\(command[0]): \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: output))
    }

    @Test(arguments: [
        (["save", "--last", "5"], "--last: '5' has no unit", "5s"),
        (["clip", "--from", "3", "--to", "4s"], "--from: '3' has no unit", "3s"),
        (["record", "--input", "synthetic", "--duration", "2"], "--duration: '2' has no unit", "2s"),
    ])
    func aBareNumberForATimeIsRefusedWithTheUnitSuggested(arguments: [String], message: String, suggestion: String)
        throws
    {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        var full = [arguments[0], "--store", store] + arguments.dropFirst()
        if arguments[0] != "record" { full += ["-o", directory.appendingPathComponent("x.y4m").path] }
        let result = try Tool.rewind(full)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stderr.contains(suggestion), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store), "nothing was started")
    }

    /// Bytes that are not UTF-8 in a path (Latin-1 `café`) are refused before anything is written: read as
    /// Swift strings they would be replaced, and the clip would land in a file of another name.
    @Test func anArgumentThatIsNotUTF8IsRefusedNotReplaced() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try recordedStore(in: directory)
        // The shell makes the byte 0xE9: the test runner's own arguments can only be UTF-8.
        let clip = try Tool.run(
            "/bin/sh",
            [
                "-c", "exec \"$0\" clip --store \"$1\" --from 0s --to 1s -o \"$2/caf$(printf '\\351').y4m\"",
                Tool.rewindPath, store, directory.path,
            ])
        #expect(clip.status == 64, "\(clip.stderr)")
        #expect(
            clip.stderr.contains("argument 9 ('\(directory.path)/caf\\xE9.y4m') is not valid UTF-8"), "\(clip.stderr)")
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(files == ["store"], "\(files)")
    }

    /// SQLite cannot open an index under a path much longer than 490 bytes: such a store is refused up front,
    /// naming the limit, while one at the limit records.
    @Test func aStorePathTooLongForTheIndexIsAUsageError() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        func store(length: Int) throws -> String {
            var path = URL(fileURLWithPath: directory.path).resolvingSymlinksInPath().path
            while path.utf8.count < length {
                path += "/" + String(repeating: "d", count: min(100, length - path.utf8.count - 1))
            }
            try #require(path.utf8.count == length)
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            return path
        }
        let longest = try store(length: 491)
        let record = ["--input", "synthetic:160x90@30", "--duration", "1s"]
        let fits = try Tool.rewind(["record", "--store", longest] + record)
        #expect(fits.status == 0, "\(fits.stderr)")
        let tooLong = try store(length: 492)
        for command in [["record"] + record, ["info"]] {
            let refused = try Tool.rewind([command[0], "--store", tooLong] + command.dropFirst())
            #expect(refused.status == 64, "\(refused.stderr)")
            #expect(
                refused.stderr.contains("the store's full path is 492 bytes long")
                    && refused.stderr.contains("at most 491 bytes"), "\(refused.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: tooLong), "nothing was made")
    }

    @Test func aMissingInputFileIsNoInputNotMalformedData() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let missing = directory.appendingPathComponent("missing.y4m").path
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(missing)"])
        #expect(record.status == 66, "\(record.stderr)")
        #expect(record.stderr.hasPrefix("rewind record: \(missing): cannot open for reading"), "\(record.stderr)")
        #expect(record.stderr.contains("No such file or directory"), "\(record.stderr)")
    }

    @Test func aTruncatedInputNamesItsOffsetOnceAfterTheCommandPrefix() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("short.y4m")
        // One 4x2 gray frame needs 8 bytes of payload; 3 are there.
        try Data(("YUV4MPEG2 W4 H2 F25:1 Cmono\nFRAME\n".utf8) + [1, 2, 3]).write(to: input)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(input.path)"])
        #expect(record.status == 65, "\(record.stderr)")
        let line = try #require(
            record.stderr.split(separator: "\n").first { $0.hasPrefix("rewind record: \(input.path)") })
        #expect(
            line == "rewind record: \(input.path): at byte 37: frame 0 is truncated: expected 8 bytes of payload, got 3"
        )
        #expect(record.stderr.contains("everything recorded before it is stored"))
    }

    /// A rate of one frame every 68 years puts the third frame past the 100 years of stream time a recording keeps:
    /// the input ends there (65) with what came before stored, and recording the file again into the same store
    /// (which continues the stream after its last frame) ends the same way. Both crashed on an arithmetic overflow
    /// (the gap's end, the continued stream's first pts) once a pts passed 64-bit nanoseconds.
    @Test func framesBeyondAHundredYearsOfStreamTimeEndTheInputInsteadOfOverflowing() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("slow.y4m")
        var bytes = Data("YUV4MPEG2 W4 H4 F1:2147483647 Ip A1:1 C420jpeg\n".utf8)
        for _ in 0..<6 { bytes += Data("FRAME\n".utf8) + Data(count: 24) }
        try bytes.write(to: input)
        let store = directory.appendingPathComponent("store").path
        for run in 1...3 {
            let record = try Tool.rewind([
                "record", "--store", store, "--input", "y4m:\(input.path)", "--window", "2147483647000ms",
            ])
            #expect(record.status == 65, "run \(run): \(record.stderr)")
            #expect(
                record.stderr.contains("is beyond the 100 years of stream time a recording keeps")
                    && !record.stderr.contains("crashed"), "run \(run): \(record.stderr)")
            #expect(record.output.contains(run == 1 ? "recorded 2 frames" : "recorded 0 frames"), "\(record.output)")
        }
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        #expect(info.status == 0 && info.output.contains("\"frames\" : 2"), "\(info.output)")
        #expect(try Tool.rewind(["verify", "--store", store]).status == 0)
    }

    @Test func mp4WithoutFFmpegIsUnavailable() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try recordedStore(in: directory)
        let output = directory.appendingPathComponent("clip.mp4").path
        let clip = try Tool.rewind(
            ["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", output],
            environment: ["PATH": "/nonexistent"])
        #expect(clip.status == 69, "\(clip.stderr)")
        #expect(clip.stderr.contains("ffmpeg not found on PATH"), "\(clip.stderr)")
        #expect(clip.stderr.contains("install ffmpeg"), "\(clip.stderr)")
    }

    @Test func theMappingGivesEachErrorItsStatusAndAdvice() {
        let cases: [(any Error, String, Int32, String?)] = [
            (UsageError("bad"), "clip", 64, nil),
            (ValueError(input: "5", expected: "a duration", suggestion: "5s"), "save", 64, nil),
            (ClipError.badRange(from: 3, to: 1), "clip", 64, "give a --to later than --from"),
            (ClipError.empty(range: 0..<1, held: nil), "clip", 1, nil),
            (ControlError.refused(APIError(.badRequest, "m")), "clip", 64, nil),
            (ControlError.refused(APIError(.stopping, "m")), "save", 69, nil),
            (ControlError.recorderStopped(request: "save 1"), "save", 69, "check the recorder's log"),
            (
                ControlError.recorderStopped(request: "save 1"), "save", 69,
                "'rewind save' without a recorder saves from"
            ),
            (ControlError.recorderStopped(request: "clip 1"), "clip", 69, "'rewind clip' without a recorder reads the"),
            (
                InputError(input: "f", byteOffset: 1, problem: .truncated(expectedBytes: 2, gotBytes: 1)), "record", 65,
                nil
            ),
            (InputError(input: "f", byteOffset: nil, problem: .cannotOpen(Errno(rawValue: ENOENT))), "record", 66, nil),
            (ExportError(destination: "x.mp4", reason: .missingTool("ffmpeg")), "clip", 69, "install ffmpeg"),
            (
                ExportError(destination: "x.y4m", reason: .gapTooLarge(frames: 9, bytes: 9, available: 1)), "clip", 1,
                "export .mkv"
            ),
            (
                SegmentStoreError.damaged(file: "1.seg", frame: 2, offset: 3, detail: "crc"), "clip", 1,
                "rewind verify --repair"
            ),
            (
                SegmentStoreError.damagedIndex(path: "i", isDatabase: false, detail: "d"), "info", 1,
                "rewind verify --repair"
            ),
            (
                SegmentStoreError.foreignIndex(path: "i", segments: 2, files: 3), "record", 1,
                "keeps it aside as index.sqlite.foreign-"
            ),
            // Out of file descriptors, wherever: a limit of the system, with what to raise.
            (
                SegmentStoreError.io(FileSystemError(operation: "open", path: "s/1.seg", code: EMFILE)), "clip", 71,
                "raise the limit on open files"
            ),
            (FileSystemError(operation: "opendir", path: "s", code: ENFILE), "verify", 71, "ulimit -n"),
            (
                ExportError(
                    destination: "x.mkv", reason: .system(action: "cannot create the file", Errno(rawValue: EMFILE))),
                "clip", 71, "raise the limit on open files"
            ),
            (
                SegmentStoreError.index(path: "i", problem: .tooManyOpenFiles, detail: "d"), "info", 71,
                "raise the limit on open files"
            ),
            (
                SegmentStoreError.diskFull(
                    file: "f", durableFrames: 1, durablePTS: 1,
                    cause: FileSystemError(operation: "pwrite", path: "f", code: ENOSPC)), "record", 1,
                "set --disk or --min-free"
            ),
            (
                RecorderError.finishFailed(
                    cause: SegmentStoreError.index(path: "i", problem: .full, detail: "d")), "record", 1,
                "set --disk or --min-free"
            ),
            (
                SegmentStoreError.index(
                    path: "i", problem: .schemaNewerThanThisBuild(databaseVersion: 2, codeVersion: 1), detail: ""),
                "info", 1,
                "upgrade rewind"
            ),
            (CommandError("x", status: 69), "bench", 69, nil),
            (SegmentStoreError.storeLocked(directory: "d"), "record", 69, "one recorder per store"),
            // A marker writes no file: neither the message nor the advice speaks of one.
            (ControlError.recorderStopped(request: "the marker"), "mark", 69, "'rewind markers' says whether"),
            (ControlError.recorderStopped(request: "save 3"), "save", 69, "'rewind save' without a recorder"),
            (SegmentStoreError.storeLocked(directory: "d"), "verify", 1, "verify checks a store at rest"),
        ]
        for (error, command, status, advice) in cases {
            let failure = CommandFailure(error, command: command)
            #expect(failure.status == status, "\(error)")
            if let advice {
                #expect(failure.advice?.contains(advice) == true, "\(error): \(String(describing: failure.advice))")
            } else {
                #expect(failure.advice == nil, "\(error)")
            }
            #expect(failure.message == (error as? UsageError)?.message ?? "\(error)")
        }
        #expect(!"\(ControlError.recorderStopped(request: "the marker"))".contains("file"))
        #expect("\(ControlError.recorderStopped(request: "save 3"))".contains("no file was written by it"))
    }
}
