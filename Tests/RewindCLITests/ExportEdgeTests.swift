import Foundation
import RewindTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Exports to destinations that fail or are not plain files: every run ends with a clear error or a complete file,
/// never a crash or a hang, and nothing of the user's or the store's is removed or overwritten.
@Suite(.timeLimit(.minutes(45))) struct ExportEdgeTests {
    /// A store of 4 s of 320x240 at 30 fps.
    static func makeStore(in directory: URL) throws -> String {
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "4s", "--segment", "1s",
        ])
        try #require(record.status == 0, "\(record.stderr)")
        return store
    }

    /// Writes that start failing part way (the file size limit of `ulimit -f`, as a full disk would; its SIGXFSZ is
    /// ignored by rewind itself): exit 1 naming the error, no crash, and no temporary file left. Repeated, since where the failure falls decides which of the
    /// export's threads is waiting when it does.
    @Test(arguments: ["lim.y4m", "lim.mkv"])
    func writesThatFailPartWayEndWithAnError(name: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Self.makeStore(in: directory)
        let output = directory.appendingPathComponent(name).path
        for _ in 0..<6 {
            let result = try Tool.rewindWithFileSizeLimit(
                512_000, ["clip", "--store", store, "--from", "0s", "--to", "4s", "-o", output])
            #expect(result.status == 1, "\(result.stderr)")
            #expect(result.stderr.contains("File too large"), "\(result.stderr)")
            let left = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            #expect(left.sorted() == ["store"], "nothing left behind: \(left)")
        }
        // ffmpeg failing at once (a missing directory) is the same path for .mp4.
        let mp4 = try Tool.rewind([
            "clip", "--store", store, "--from", "0s", "--to", "1s", "-o", directory.path + "/nodir/x.mp4",
        ])
        #expect(mp4.status == 1, "\(mp4.stderr)")
        #expect(mp4.stderr.contains("No such file or directory"), "\(mp4.stderr)")
    }

    /// An export from the disk into a FIFO nobody reads says it waits for a reader, and Ctrl-C ends it (130); an
    /// `.mp4` into a FIFO (which ffmpeg cannot write: its index comes last) is made in a temporary file and copied
    /// there, whole.
    @Test func anExportIntoAFIFOWaitsInterruptiblyAndAnMP4GoesThroughAFile() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Self.makeStore(in: directory)
        let fifo = directory.appendingPathComponent("unread.y4m").path
        try #require(mkfifo(fifo, 0o600) == 0)
        try Tool.expectWaitForAReaderEndsOnInterrupt(
            ["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", fifo], fifo: fifo)

        let mp4 = directory.appendingPathComponent("pipe.mp4").path
        try #require(mkfifo(mp4, 0o600) == 0)
        let copy = directory.appendingPathComponent("copy.mp4").path
        let reader = try ExternalTools.Child("/bin/sh", ["-c", "cat '\(mp4)' > '\(copy)'"])
        let clip = try Tool.rewind(
            ["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", mp4, "--quality", "lossless"],
            timeout: .seconds(60))
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(try reader.finish(timeout: .seconds(30)).status == 0)
        let direct = directory.appendingPathComponent("direct.mp4").path
        let reference = try Tool.rewind([
            "clip", "--store", store, "--from", "0s", "--to", "1s", "-o", direct, "--quality", "lossless",
        ])
        #expect(reference.status == 0, "\(reference.stderr)")
        let copied = try ExternalTools.frameMD5s(copy, pixelFormat: "yuv420p")
        let expected = try ExternalTools.frameMD5s(direct, pixelFormat: "yuv420p")
        #expect(copied.count == 30 && copied == expected, "the .mp4 copied through the FIFO is the same")
    }

    /// An `.mp4` to a device (a link to `/dev/null` named for the format), from the disk, of one stream and of each
    /// of several: made in a temporary file and copied there, as for a FIFO (ffmpeg's file read back from the device
    /// was taken for an unfinished one, exit 1), and no temporary file is left.
    @Test func anMP4ToADeviceIsWrittenThroughAFile() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:160x120@30", "--input", "b=synthetic:160x120@30",
            "--duration", "2s",
        ])
        try #require(record.status == 0, "\(record.stderr)")
        // The temporary .mp4 goes to TMPDIR: one of the test's own, so that it can tell none is left.
        let temporary = directory.appendingPathComponent("tmp").path
        try FileManager.default.createDirectory(atPath: temporary, withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        environment["TMPDIR"] = temporary
        for name in ["null.mp4", "null.a.mp4", "null.b.mp4"] {
            try FileManager.default.createSymbolicLink(
                atPath: directory.appendingPathComponent(name).path, withDestinationPath: "/dev/null")
        }
        let output = directory.appendingPathComponent("null.mp4").path
        let one = try Tool.rewind(
            [
                "clip", "--store", store, "--stream", "a", "--from", "0s", "--to", "1s", "-o", output,
            ], environment: environment)
        #expect(one.status == 0, "\(one.stderr)")
        #expect(one.output.contains("wrote 30 frames"), "\(one.output)")
        let each = try Tool.rewind(
            [
                "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "1s", "-o", output,
            ], environment: environment)
        #expect(each.status == 0, "\(each.stderr)")
        #expect(each.output.components(separatedBy: "wrote 30 frames").count == 3, "\(each.output)")
        // A device that takes nothing (/dev/full) is named, with what to do.
        let full = directory.appendingPathComponent("full.mp4").path
        try FileManager.default.createSymbolicLink(atPath: full, withDestinationPath: "/dev/full")
        let refused = try Tool.rewind(
            ["clip", "--store", store, "--stream", "a", "--from", "0s", "--to", "1s", "-o", full],
            environment: environment)
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(
            refused.stderr.contains(
                "\(full): writing failed: No space left on device; free some space or write elsewhere"),
            "\(refused.stderr)")
        // A temporary directory that is not there is named (it read as ffmpeg missing).
        environment["TMPDIR"] = directory.appendingPathComponent("gone").path
        let noTemporary = try Tool.rewind(
            ["clip", "--store", store, "--stream", "a", "--from", "0s", "--to", "1s", "-o", directory.path + "/r.mp4"],
            environment: environment)
        #expect(noTemporary.status == 1, "\(noTemporary.stderr)")
        #expect(
            noTemporary.stderr.contains("cannot make ffmpeg's log") && noTemporary.stderr.contains("TMPDIR"),
            "\(noTemporary.stderr)")
        #expect(noTemporary.stderr.contains("point TMPDIR at a directory that exists"), "\(noTemporary.stderr)")
        // An .mp4 for a device is made there too: the message names the file given, not the one made for it.
        let device = directory.appendingPathComponent("null.mp4").path
        let toDevice = try Tool.rewind(
            ["clip", "--store", store, "--stream", "a", "--from", "0s", "--to", "1s", "-o", device],
            environment: environment)
        #expect(toDevice.status == 1, "\(toDevice.stderr)")
        #expect(
            toDevice.stderr.hasPrefix("rewind clip: \(device): cannot make ffmpeg's log in the temporary directory"),
            "\(toDevice.stderr)")
        #expect(toDevice.stderr.contains("point TMPDIR at a directory that exists"), "\(toDevice.stderr)")
        #expect(!toDevice.stderr.contains(".rewind-"), "\(toDevice.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: temporary).isEmpty, "no temporary .mp4 is left")
    }

    /// `--stream all` from the disk into a FIFO per stream: while nobody reads the first, it says it waits and
    /// Ctrl-C ends it (130); a reader of each in turn gets each stream's frames, the same as a file of it.
    @Test func everyStreamIntoItsOwnFIFOWaitsInterruptiblyAndWritesThemInTurn() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:160x120@30", "--input", "b=synthetic:160x120@30",
            "--duration", "2s",
        ])
        try #require(record.status == 0, "\(record.stderr)")
        let output = directory.appendingPathComponent("out.y4m").path
        let fifos = ["a", "b"].map { directory.appendingPathComponent("out.\($0).y4m").path }
        for fifo in fifos { try #require(mkfifo(fifo, 0o600) == 0) }
        let arguments = ["clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "1s", "-o", output]
        try Tool.expectWaitForAReaderEndsOnInterrupt(arguments, fifo: fifos[0])

        let copies = ["a", "b"].map { directory.appendingPathComponent("copy.\($0).y4m").path }
        let reader = try ExternalTools.Child(
            "/bin/sh", ["-c", "cat '\(fifos[0])' > '\(copies[0])' && cat '\(fifos[1])' > '\(copies[1])'"])
        let clip = try Tool.rewind(arguments, timeout: .seconds(60))
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(try reader.finish(timeout: .seconds(30)).status == 0)
        for (name, copy) in zip(["a", "b"], copies) {
            let direct = directory.appendingPathComponent("direct.\(name).y4m").path
            let reference = try Tool.rewind([
                "clip", "--store", store, "--stream", name, "--from", "0s", "--to", "1s", "-o", direct,
            ])
            #expect(reference.status == 0, "\(reference.stderr)")
            let copied = try ExternalTools.frameMD5s(copy)
            let expected = try ExternalTools.frameMD5s(direct)
            #expect(copied.count == 30 && copied == expected, "stream \(name)")
        }
        // A directory where a stream's file would go is refused up front (64), before any stream is written.
        let named = directory.appendingPathComponent("dir.y4m").path
        try FileManager.default.createDirectory(
            atPath: directory.appendingPathComponent("dir.b.y4m").path, withIntermediateDirectories: true)
        let refused = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "1s", "-o", named,
        ])
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("dir.b.y4m' is a directory"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("dir.a.y4m").path))
    }

    /// A FIFO whose reader stops early: the export ends (the writes fail) instead of waiting for ever.
    @Test func aFIFOWhoseReaderLeavesEndsTheExport() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Self.makeStore(in: directory)
        let fifo = directory.appendingPathComponent("pipe.y4m").path
        try #require(mkfifo(fifo, 0o600) == 0)
        let reader = try ExternalTools.Child("/usr/bin/head", ["-c", "1000", fifo])
        let result = try Tool.rewind(
            ["clip", "--store", store, "--from", "0s", "--to", "4s", "-o", fifo], timeout: .seconds(60))
        #expect(result.status != 0, "the reader left after 1000 bytes")
        _ = try reader.finish(timeout: .seconds(30))
        var info = stat()
        #expect(stat(fifo, &info) == 0 && (info.st_mode & S_IFMT) == S_IFIFO, "the FIFO is still there")
    }

    /// A reader that opened the FIFO and stopped reading, an ffmpeg that takes no input, and one that takes it all
    /// and never finishes: each holds the export in a wait of its own, which the first Ctrl-C ends (130), saying
    /// what it waited for; the ffmpeg is killed with it and no file is left.
    @Test func aReaderOrAnFFmpegThatStopsDoesNotHoldAnInterruptedExport() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Self.makeStore(in: directory)
        let fifo = directory.appendingPathComponent("stalled.y4m").path
        try #require(mkfifo(fifo, 0o600) == 0)
        let reader = open(fifo, O_RDONLY | O_NONBLOCK)
        try #require(reader >= 0)
        defer { close(reader) }
        let clip = try Tool.startRewind(["clip", "--store", store, "--from", "0s", "--to", "4s", "-o", fifo])
        defer { if clip.process.isRunning { kill(clip.process.processIdentifier, SIGKILL) } }
        try waitUntil("the FIFO is full", timeout: .seconds(60)) {
            var queued: Int32 = 0
            return ioctl(reader, UInt(FIONREAD), &queued) == 0 && queued >= 65536
        }
        clip.process.interrupt()
        let interrupted = try clip.finish(timeout: .seconds(10))
        #expect(interrupted.status == 130, "\(interrupted.stderr)")
        #expect(
            interrupted.stderr.contains("interrupted while waiting for its reader to take more"),
            "\(interrupted.stderr)")

        // A stand-in for ffmpeg that says it runs, then takes nothing, or everything, and never ends.
        let tools = directory.appendingPathComponent("tools")
        try FileManager.default.createDirectory(at: tools, withIntermediateDirectories: true)
        let started = directory.appendingPathComponent("ffmpeg.pid").path
        for (takes, waiting) in [("", "its reader to take more"), ("cat > /dev/null; ", "ffmpeg to finish")] {
            unlink(started)
            let script = "#!/bin/sh\n\(takes)echo $$ > '\(started)'\nexec sleep 600\n"
            try Data(script.utf8).write(to: tools.appendingPathComponent("ffmpeg"))
            chmod(tools.appendingPathComponent("ffmpeg").path, 0o755)
            let output = directory.appendingPathComponent("out.mp4").path
            let mp4 = try ExternalTools.Child(
                "/bin/sh",
                [
                    "-c",
                    "PATH='\(tools.path)':/usr/bin:/bin exec '\(Tool.rewindPath)' clip --store '\(store)' "
                        + "--from 0s --to 4s -o '\(output)'",
                ])
            defer { if mp4.process.isRunning { kill(mp4.process.processIdentifier, SIGKILL) } }
            // The shell makes the file before `echo` writes into it: wait for the number itself.
            var pid: Int32 = 0
            try waitUntil("the stand-in runs", timeout: .seconds(60)) {
                let text = (try? String(contentsOfFile: started, encoding: .utf8)) ?? ""
                pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
                return pid > 0
            }
            defer { kill(pid, SIGKILL) }
            // Long enough for the export to fill the pipe, or to be waiting for the stand-in to end.
            Thread.sleep(forTimeInterval: 0.5)
            mp4.process.interrupt()
            let ended = try mp4.finish(timeout: .seconds(10))
            #expect(ended.status == 130, "\(waiting): \(ended.stderr)")
            #expect(ended.stderr.contains("interrupted while waiting for \(waiting)"), "\(ended.stderr)")
            #expect(kill(pid, 0) == -1 && errno == ESRCH, "the stand-in for ffmpeg was killed (\(waiting))")
            let left = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            #expect(!left.contains { $0.contains("out.mp4") }, "\(left)")
        }
    }

    /// Ctrl-C (SIGINT) during an export from disk stops it at its next frame: exit 130, saying so, and neither the
    /// file nor its hidden partial is left; for `--stream all` (a file per stream), interrupted once the first
    /// stream's file is complete, every earlier file of those names is left as it was.
    @Test(arguments: [false, true])
    func anInterruptedExportLeavesNoFile(allStreams: Bool) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let inputs =
            allStreams
            ? ["--input", "a=synthetic:640x360@30", "--input", "b=synthetic:320x180@30"]
            : ["--input", "synthetic:640x360@30"]
        let record = try Tool.rewind(["record", "--store", store, "--duration", "10s"] + inputs)
        try #require(record.status == 0, "\(record.stderr)")
        let output = directory.appendingPathComponent("clip.mp4").path
        let earlier = allStreams ? ["clip.a.mp4", "clip.b.mp4"] : []
        for name in earlier { try Data("old \(name)".utf8).write(to: directory.appendingPathComponent(name)) }
        let clip = try Tool.startRewind(
            ["clip", "--store", store, "--from", "0s", "--to", "10s", "-o", output, "--quality", "lossless"]
                + (allStreams ? ["--stream", "all"] : []))
        func files() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter { $0 != "store" }
        }
        // One stream: once its file is begun. Every stream: once the second one's is (the first one's complete).
        try waitUntil("the export has started", interval: .milliseconds(5)) {
            files().contains { $0.hasPrefix(".clip.mp4.partial-") || $0.contains(".clip.b.mp4.partial-") }
        }
        clip.process.interrupt()
        let result = try clip.finish(timeout: .seconds(60))
        #expect(result.status == 130, "\(result.stderr)")
        #expect(result.stderr.contains("interrupted") && result.stderr.contains("no file was kept"), "\(result.stderr)")
        #expect(files().sorted() == earlier, "\(files())")
        for name in earlier {
            let text = String(decoding: try Data(contentsOf: directory.appendingPathComponent(name)), as: UTF8.self)
            #expect(text == "old \(name)", "\(name) was replaced")
        }
    }

    /// A link to a device that fails (`/dev/full`): the error is reported and the link stays.
    @Test func aFailedExportToALinkedDeviceKeepsTheLink() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Self.makeStore(in: directory)
        let link = directory.appendingPathComponent("out.y4m").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "/dev/full")
        let result = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", link])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("No space left on device"), "\(result.stderr)")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: link) == "/dev/full")
    }

    /// A dangling link: the export creates the file it names, and the link stays a link.
    @Test func anExportThroughADanglingLinkCreatesItsTarget() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Self.makeStore(in: directory)
        let link = directory.appendingPathComponent("out.y4m").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "made.y4m")
        let result = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", link])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: link) == "made.y4m")
        let made = directory.appendingPathComponent("made.y4m").path
        #expect(try probeStreams(made).map(\.frames) == [30], "\(result.output)")
    }

    /// `-o` into the store's own files, directly or through a link, is refused before anything is written.
    @Test func anOutputInsideTheStoreIsRefused() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Self.makeStore(in: directory)
        let segment = store + "/segments/000001.seg"
        let before = FileManager.default.contents(atPath: segment)
        let link = directory.appendingPathComponent("seg.mkv").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: segment)
        let indexLink = directory.appendingPathComponent("index.mkv").path
        try FileManager.default.createSymbolicLink(atPath: indexLink, withDestinationPath: store + "/index.sqlite")
        // A dangling link (through a second one) to a file not yet in segments/: it would be made there.
        let dangling = directory.appendingPathComponent("dangling.mkv").path
        try FileManager.default.createSymbolicLink(atPath: dangling, withDestinationPath: "hop.mkv")
        try FileManager.default.createSymbolicLink(
            atPath: directory.appendingPathComponent("hop.mkv").path, withDestinationPath: store + "/segments/zz.mkv")
        for arguments in [
            ["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", link],
            ["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", store + "/segments/new.y4m"],
            ["save", "--store", store, "--last", "1s", "-o", indexLink],
            ["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", dangling],
        ] {
            let result = try Tool.rewind(arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("inside the store where only rewind writes"), "\(result.stderr)")
        }
        // The place it advises works as given: beside the store (its `exports/` is made by live saves only).
        let refused = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", link])
        let advised = try #require(refused.stderr.firstMatch(of: /elsewhere, e\.g\. -o (\S+)/).map { String($0.1) })
        let followed = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", advised])
        #expect(followed.status == 0, "\(refused.stderr) → \(followed.stderr)")
        // Never a name whose stream's file (`--stream all` to .y4m: NAME.STREAM.y4m) is someone's already.
        try Data("precious".utf8).write(to: URL(fileURLWithPath: directory.path + "/new.camera.y4m"))
        let perStream = try Tool.rewind([
            "clip", "--store", store, "--from", "0s", "--to", "1s", "-o", store + "/segments/new.y4m",
        ])
        #expect(
            perStream.status == 64 && perStream.stderr.contains("e.g. -o \(directory.path)/clip.y4m"),
            "\(perStream.stderr)")
        #expect(FileManager.default.contents(atPath: segment) == before)
        #expect(!FileManager.default.fileExists(atPath: store + "/segments/zz.mkv"))
        // A name too long for the system once the export's temporary name is made of it: a usage error up front.
        let long = directory.appendingPathComponent(String(repeating: "y", count: 240) + ".mkv").path
        let tooLong = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "1s", "-o", long])
        #expect(tooLong.status == 64, "\(tooLong.stderr)")
        #expect(tooLong.stderr.contains("its file name is 244 bytes long"), "\(tooLong.stderr)")
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.output)")
    }

    /// `--stream all` to `.y4m` writes a file per stream (`k.a.y4m`, `k.b.y4m`): each is checked, so a link among
    /// them to the store's index is refused like `-o` itself.
    @Test func aPerStreamFileInsideTheStoreIsRefused() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "a=synthetic:160x120@30", "--input", "b=synthetic:160x120@30",
            "--duration", "2s",
        ])
        try #require(record.status == 0, "\(record.stderr)")
        let index = store + "/index.sqlite"
        let before = FileManager.default.contents(atPath: index)
        let output = directory.appendingPathComponent("k.y4m").path
        try FileManager.default.createSymbolicLink(
            atPath: directory.appendingPathComponent("k.a.y4m").path, withDestinationPath: index)
        let result = try Tool.rewind([
            "clip", "--store", store, "--stream", "all", "--from", "0s", "--to", "1s", "-o", output,
        ])
        #expect(result.status == 64, "\(result.output) \(result.stderr)")
        #expect(result.stderr.contains("k.a.y4m' would write \(index)"), "\(result.stderr)")
        #expect(FileManager.default.contents(atPath: index) == before)
    }

    /// A full-range gray recording (ffmpeg's `-pix_fmt gray` Y4M says `Cmono XCOLORRANGE=FULL`) keeps its levels in
    /// a lossless `.mp4`: the decoded Y plane is the recorded luma, frame for frame, tagged full range.
    @Test func aFullRangeGrayRecordingKeepsItsLumaInALosslessMP4() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("mono.y4m").path
        try ExternalTools.makeY4M(input, width: 320, height: 240, rate: "30", frames: 30, pixelFormat: "gray")
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:" + input])
        try #require(record.status == 0, "\(record.stderr)")
        let output = directory.appendingPathComponent("mono.mp4").path
        let clip = try Tool.rewind([
            "clip", "--store", store, "--from", "0s", "--to", "5s", "-o", output, "--quality", "lossless",
        ])
        #expect(clip.status == 0, "\(clip.stderr)")
        let range = try ExternalTools.probe(output, ["-show_entries", "stream=color_range"])
        #expect(range == [["pc"]])
        let luma = try ExternalTools.run(
            "ffmpeg",
            ["-hide_banner", "-loglevel", "error", "-i", output, "-vf", "extractplanes=y", "-f", "framemd5", "-"])
        let md5s = String(decoding: luma, as: UTF8.self).split(separator: "\n").filter { !$0.hasPrefix("#") }.map {
            String($0.split(separator: ",").last!.trimmingCharacters(in: .whitespaces))
        }
        let expected = try ExternalTools.frameMD5s(input)
        #expect(expected.count == 30 && md5s == expected)
    }

    /// A 10-bit recording (`C420p10`, as a `p010` stream's `.y4m` export is written) round-trips bit-exact through
    /// the store, to `.y4m`, to `.mkv` (planar 10-bit, `Y3[11][10]`) and to a lossless `.mp4` (x264 10-bit); a
    /// default `.mp4` stays 10-bit. (`.mkv` and `.mp4` were refused: Matroska's feed had no 10-bit form.)
    @Test func aTenBitY4MRecordingComesBackBitExact() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("ten.y4m").path
        try ExternalTools.makeY4M(
            input, width: 322, height: 242, rate: "30", frames: 30, pixelFormat: "yuv420p10le",
            extra: ["-strict", "-1"])
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:" + input])
        try #require(record.status == 0, "\(record.stderr)")
        #expect(record.output.contains("recorded 30 frames of p010 322x242"), "\(record.output)")
        let output = directory.appendingPathComponent("back.y4m").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "5s", "-o", output])
        #expect(clip.status == 0, "\(clip.stderr)")
        let expected = try ExternalTools.frameMD5s(input)
        let back = try ExternalTools.frameMD5s(output)
        #expect(expected.count == 30 && back == expected)
        for (name, quality) in [("back.mkv", []), ("exact.mp4", ["--quality", "lossless"]), ("back.mp4", [])] {
            let path = directory.appendingPathComponent(name).path
            let exported = try Tool.rewind(
                ["clip", "--store", store, "--from", "0s", "--to", "5s", "-o", path] + quality)
            #expect(exported.status == 0, "\(name): \(exported.stderr)")
            let stream = try ExternalTools.probe(path, ["-show_entries", "stream=pix_fmt,width,height"])
            #expect(stream.first.map(Set.init) == ["yuv420p10le", "322", "242"], "\(name): \(stream)")
            let md5s = try ExternalTools.frameMD5s(path, pixelFormat: "yuv420p10le")
            #expect(md5s.count == 30, "\(name)")
            if name != "back.mp4" { #expect(md5s == expected, "\(name) is bit-exact") }
        }
    }

    /// Times the parser cannot represent (outside 1678…2261) or that do not exist are usage errors, not a crash.
    @Test(arguments: ["9999-12-31T23:59:59Z", "1600-01-01T00:00:00Z", "2026-02-30T10:00:00Z"])
    func impossibleTimesAreUsageErrors(time: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Self.makeStore(in: directory)
        let result = try Tool.rewind([
            "clip", "--store", store, "--from", "0s", "--to", time, "-o", directory.path + "/o.y4m",
        ])
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains(time), "\(result.stderr)")
    }
    /// A YUV4MPEG2 input's chroma siting and pixel aspect are kept from record to export: a stream recorded without
    /// them (as by a build that kept neither) takes them from the next recording that says, keeps them through an
    /// index rebuilt from the segment files, refuses a recording that says otherwise, and every export says them.
    @Test func chromaSitingAndPixelAspectGoFromTheInputToEveryExport() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        func input(_ name: String, _ extra: [String]) throws -> String {
            let path = directory.appendingPathComponent(name).path
            // One frame a second: the 30 s the first recording stores end long after the wall clock reaches the
            // second's start, which then follows them directly on any machine (at 30 fps they would end after 1 s).
            try ExternalTools.makeY4M(path, width: 320, height: 240, rate: "1", frames: 30, extra: extra)
            return path
        }
        let said = try input("said.y4m", ["-chroma_sample_location", "left", "-aspect", "40:33"])
        let other = try input("other.y4m", ["-chroma_sample_location", "topleft", "-aspect", "40:33"])
        // The same frames with a header that says neither.
        let unsaid = directory.appendingPathComponent("unsaid.y4m").path
        var bytes = try Data(contentsOf: URL(fileURLWithPath: try input("plain.y4m", [])))
        let newline = try #require(bytes.firstIndex(of: 0x0A))
        bytes.replaceSubrange(0..<newline, with: Data("YUV4MPEG2 W320 H240 F1:1 Ip A0:0".utf8))
        try bytes.write(to: URL(fileURLWithPath: unsaid))
        let store = directory.appendingPathComponent("store").path
        func info() throws -> String {
            let result = try Tool.rewind(["info", "--store", store])
            #expect(result.status == 0, "\(result.stderr)")
            return result.output
        }

        #expect(try Tool.rewind(["record", "--store", store, "--input", "y4m:\(unsaid)"]).status == 0)
        #expect(!(try info()).contains("chroma"))
        let first = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(said)"])
        #expect(first.status == 0, "\(first.stderr)")
        let filled = try info()
        #expect(filled.contains("colour unspecified/video, chroma left, pixels 10:11"), "\(filled)")
        let refused = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(other)"])
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("chroma siting left → topleft"), "\(refused.stderr)")
        // An aspect the input does not say is no difference: only the siting is named.
        let unsaidAspect = directory.appendingPathComponent("topleft.y4m").path
        let headerEnd = try #require(bytes.firstIndex(of: 0x0A))
        bytes.replaceSubrange(0..<headerEnd, with: Data("YUV4MPEG2 W320 H240 F1:1 Ip A0:0 C420paldv".utf8))
        try bytes.write(to: URL(fileURLWithPath: unsaidAspect))
        let sitingOnly = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(unsaidAspect)"])
        #expect(sitingOnly.status == 64, "\(sitingOnly.stderr)")
        #expect(
            sitingOnly.stderr.contains("this input differs (chroma siting left → topleft)"), "\(sitingOnly.stderr)")
        let columns = try SQLiteShell.run([
            "\(store)/index.sqlite", "SELECT chroma_siting, pixel_aspect_num, pixel_aspect_den FROM streams",
        ])
        #expect(columns.output == "left|10|11\n", "\(columns.stderr)")

        // The index rebuilt from the segment files (the first says neither, the second both) knows them again.
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: "\(store)/index.sqlite\(suffix)")
        }
        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output) \(repair.stderr)")
        let rebuilt = try info()
        #expect(rebuilt.contains("chroma left, pixels 10:11"), "\(rebuilt)")

        for name in ["out.y4m", "out.mkv", "out.mp4"] {
            let output = directory.appendingPathComponent(name).path
            let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "60s", "-o", output])
            #expect(clip.status == 0, "\(clip.stderr)")
            let probed = try ExternalTools.probe(
                output, ["-show_entries", "stream=chroma_location,sample_aspect_ratio,nb_read_frames", "-count_frames"])
            #expect(probed == [["10:11", "left", "60"]], "\(name): \(probed)")
        }
    }
}
