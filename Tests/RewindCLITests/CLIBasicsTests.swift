import Foundation
import RewindSystem
import Testing

@Suite(.timeLimit(.minutes(45))) struct CLIBasicsTests {
    @Test func helpListsEveryCommand() throws {
        let result = try Tool.rewind(["--help"])
        #expect(result.status == 0)
        for command in ["demo", "record", "save", "clip", "info", "verify", "soak", "bench"] {
            #expect(result.output.contains("\n  \(command) "), "help lists \(command)")
        }
    }

    /// `rewind help CMD` is `rewind CMD --help`; an unknown one is a usage error.
    @Test func helpOfACommandIsItsOwnHelp() throws {
        let help = try Tool.rewind(["help", "info"])
        let own = try Tool.rewind(["info", "--help"])
        #expect(help.status == 0 && help.output == own.output, "\(help.output)")
        let unknown = try Tool.rewind(["help", "rewrite"])
        #expect(unknown.status == 64 && unknown.stderr.contains("unknown command 'rewrite'"), "\(unknown.stderr)")
        // `--help CMD` is `help CMD`; the help of help is the overview; a second command is not ignored.
        #expect(try Tool.rewind(["--help", "info"]).output == own.output)
        let overview = try Tool.rewind(["help"])
        for arguments in [["help", "help"], ["help", "--help"]] {
            let help = try Tool.rewind(arguments)
            #expect(help.status == 0 && help.output == overview.output, "\(arguments): \(help.stderr)")
        }
        let extra = try Tool.rewind(["help", "soak", "extra"])
        #expect(extra.status == 64 && extra.stderr.contains("unexpected argument 'extra'"), "\(extra.stderr)")
    }

    /// `--` ends the options: what follows is the bare argument; an unknown option is named once, without the
    /// command repeated after the prefix that names it.
    @Test func doubleDashEndsTheOptions() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let missing = directory.appendingPathComponent("none").path
        let unmark = try Tool.rewind(["unmark", "--store", missing, "--", "3"])
        #expect(!unmark.stderr.contains("unexpected argument"), "\(unmark.stderr)")
        #expect(unmark.stderr.contains("no store at"), "got past the options: \(unmark.stderr)")
        let two = try Tool.rewind(["unmark", "--store", missing, "--", "3", "4"])
        #expect(two.status == 64 && two.stderr.contains("unexpected argument '4'"), "\(two.stderr)")
        // The bare argument after its option: named as that option again, with the usage line only.
        let again = try Tool.rewind(["unmark", "--store", missing, "--id", "3", "3"])
        #expect(again.status == 64, "\(again.stderr)")
        #expect(again.stderr.contains("--id is given already (3); give it once"), "\(again.stderr)")
        #expect(!again.stderr.contains("options:"), "\(again.stderr)")
        let before = try Tool.rewind(["unmark", "--store", missing, "3", "--id", "3"])
        #expect(before.status == 64, "\(before.stderr)")
        #expect(before.stderr.contains("--id is given already (3, as the bare argument)"), "\(before.stderr)")
        #expect(!before.stderr.contains("options:"), "\(before.stderr)")
        let bogus = try Tool.rewind(["soak", "--bogus"])
        #expect(bogus.stderr.hasPrefix("rewind soak: unknown option '--bogus'\n"), "\(bogus.stderr)")
    }

    @Test func versionPrintsTheVersion() throws {
        let result = try Tool.rewind(["--version"])
        #expect(result.status == 0)
        #expect(result.output.hasPrefix("rewind "))
        // Nothing after it is ignored.
        let extra = try Tool.rewind(["--version", "extra"])
        #expect(extra.status == 64 && extra.stderr.contains("unexpected argument 'extra'"), "\(extra.stderr)")
        #expect(extra.output.isEmpty, "\(extra.output)")
    }

    @Test func noArgumentsIsAUsageError() throws {
        let result = try Tool.rewind([])
        #expect(result.status == 64)
        #expect(result.stderr.contains("usage: rewind <command>"))
    }

    @Test func unknownCommandIsAUsageError() throws {
        let result = try Tool.rewind(["rewrite"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("unknown command 'rewrite'"))
    }

    /// Messages about one option's value (`--segment 50ms is …`, raised by a command rather than the parser) get the
    /// usage line alone too.
    @Test(arguments: [["--segment", "50ms"], ["--max-age", "0s"], ["--input", "bogus:x"]])
    func aCommandsOwnValueErrorGetsTheUsageLineAlone(option: [String]) throws {
        let result = try Tool.rewind(["record", "--store", "x", "--duration", "1s"] + option)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.hasPrefix("rewind record: \(option[0])"), "\(result.stderr)")
        #expect(
            result.stderr.contains("usage: rewind record") && !result.stderr.contains("\noptions:"), "\(result.stderr)")
    }

    /// Values that each hold but cannot work together: the message says what to change, and nothing follows it (no
    /// usage line: the command line is well formed).
    @Test(arguments: [
        ["save", "--store", "x", "--last", "1s", "--before", "2s", "-o", "a.mkv"],
        ["mark", "--store", "x", "--label", "a", "--hold", "1s", "--hold-before", "1s"],
        ["record", "--store", "x", "--listen-any", "--duration", "1s"],
    ])
    func valuesThatCannotWorkTogetherGetNothingMore(arguments: [String]) throws {
        let result = try Tool.rewind(arguments)
        #expect(result.status == 64, "\(arguments): \(result.stderr)")
        #expect(result.stderr.hasPrefix("rewind \(arguments[0]): --"), "\(result.stderr)")
        #expect(
            !result.stderr.contains("usage:") && result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
    }

    /// `verify --json` prints a document whatever happens, a command line it refuses too: not clean, and why.
    @Test(arguments: [["--store", "FILE"], ["--store", "DIR", "--bogus"], ["--store", "DIR", "--stream", "nope"]])
    func verifyJSONIsADocumentForARefusedCommandLine(arguments: [String]) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "synthetic:64x48@10", "--duration", "1s"])
        try #require(record.status == 0, "\(record.stderr)")
        let file = directory.appendingPathComponent("file").path
        try Data().write(to: URL(fileURLWithPath: file))
        let given = arguments.map { $0 == "FILE" ? file : $0 == "DIR" ? store : $0 }
        let verify = try Tool.rewind(["verify"] + given + ["--json"])
        #expect(verify.status == 64, "\(verify.stderr)")
        let object = try JSONSerialization.jsonObject(with: verify.stdout) as? [String: Any]
        #expect(
            object?["clean"] as? Bool == false && (object?["error"] as? String)?.isEmpty == false, "\(verify.output)")
    }

    /// A save without `-o` is the recorder's (into its `DIR/exports/`): with none running, that is a missing
    /// service (69, as `save --after`), not a malformed command line, and no help follows.
    @Test func aSaveWithoutOutputAndNoRecorderIsUnavailable() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "synthetic:64x48@10", "--duration", "1s"])
        try #require(record.status == 0, "\(record.stderr)")
        let save = try Tool.rewind(["save", "--store", store, "--last", "1s"])
        #expect(save.status == 69, "\(save.stderr)")
        #expect(save.stderr.contains("give -o to save from the store on disk"), "\(save.stderr)")
        #expect(!save.stderr.contains("usage:"), "\(save.stderr)")
        // A mistyped store is said as such first: giving -o would not help.
        let typo = try Tool.rewind(["save", "--store", store + "x", "--last", "1s"])
        #expect(typo.status == 1 && typo.stderr.contains("no store at '\(store)x'"), "\(typo.stderr)")
    }

    @Test(arguments: [
        ["info"],
        ["info", "--store"],
        ["clip", "--store", "x", "--from", "1s", "--to", "2s", "-o", "a.y4m", "--bogus"],
        ["record", "--store", "x", "--memory", "lots"],
        ["record", "--store", "x", "--spill", "sometimes"],
        ["save", "--store", "x", "--last", "five", "-o", "a.y4m"],
        ["save", "--store", "x", "--last", "5s", "-o", "a.avi"],
    ])
    func badOptionsExit64WithTheCommandsUsage(arguments: [String]) throws {
        let result = try Tool.rewind(arguments)
        #expect(result.status == 64, "\(arguments): \(result.stderr)")
        #expect(result.stderr.contains("usage: rewind \(arguments[0])"))
        #expect(result.stdout.isEmpty)
        // A value that is not one of its option's: the message says what it must look like, and the usage line
        // alone follows (the table of every option buried that advice); a malformed command line gets the table.
        let badValue = ["lots", "sometimes", "five", "a.avi"].contains(where: arguments.contains)
        #expect(result.stderr.contains("\noptions:") != badValue, "\(result.stderr)")
        #expect(result.stderr.contains("--help' lists every option") == badValue, "\(result.stderr)")
    }

    /// An option that would be silently ignored is a usage error naming it and what to do, before anything is read
    /// or written: `--quality` where nothing is encoded, the disk limits with `--spill off`, `--stream` when every
    /// input has its own name.
    @Test(arguments: [
        (["clip", "--from", "0s", "--to", "1s", "-o", "OUT/a.y4m", "--quality", "lossless"], "'OUT/a.y4m' is .y4m"),
        (["clip", "--from", "0s", "--to", "1s", "-o", "-", "--quality", "fast"], "-o - writes YUV4MPEG2"),
        (["save", "--last", "1s", "-o", "OUT/a.mkv", "--quality", "balanced"], "'OUT/a.mkv' is .mkv"),
        (["save", "--last", "1s", "--quality", "lossless"], "a save without -o is .mkv"),
        (["record", "--spill", "off", "--disk", "1GiB", "--duration", "1s"], "--disk is about writing to the store"),
        (["record", "--spill", "off", "--max-age", "1h", "--duration", "1s"], "--max-age is about writing to the"),
        (["record", "--spill", "off", "--segment", "5s", "--duration", "1s"], "--segment is about writing to the"),
        (
            ["record", "--spill", "off", "--backpressure", "drop-oldest-unspilled", "--duration", "1s"],
            "--backpressure is about writing to the"
        ),
        (["record", "--duration", "0s"], "--duration must be longer than 0s"),
        (["record", "--segment", "1ns", "--duration", "1s"], "--segment must be at least 100ms"),
        (["record", "--segment", "99ms", "--duration", "1s"], "--segment must be at least 100ms"),
        (["record", "--input", "synthetic:32641x64@30", "--duration", "1s"], "must be at most 32640x32640"),
        (["record", "--input", "synthetic:64x32768@30", "--duration", "1s"], "must be at most 32640x32640"),
        (["soak", "--size", "32700x64", "--duration", "1s"], "--size: synthetic frames must be at most 32640x32640"),
        (["record", "--min-free", "100000TiB", "--duration", "1s"], "is as much as the whole file system holding"),
        (
            ["record", "--stream", "front", "--input", "a=synthetic", "--duration", "1s"],
            "--stream front names an input"
        ),
    ])
    func optionsThatWouldBeIgnoredAreRefused(arguments: [String], message: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let output = directory.path
        let given = arguments.map { $0.replacingOccurrences(of: "OUT/", with: output + "/") }
        let result = try Tool.rewind([given[0], "--store", store] + given.dropFirst())
        #expect(result.status == 64, "\(arguments): \(result.stderr)")
        let expected = message.replacingOccurrences(of: "OUT/", with: output + "/")
        #expect(result.stderr.contains(expected), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store), "nothing was created")
        #expect(try FileManager.default.contentsOfDirectory(atPath: output).isEmpty)
    }

    /// An `-o` that is a directory (whatever its name ends in, or without an extension) is a usage error saying to
    /// name a file in it, for `clip` and `save`, before anything is read.
    @Test func anOutputThatIsADirectoryIsRefused() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let output = directory.appendingPathComponent("clips.mp4").path
        try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
        let store = directory.appendingPathComponent("store").path
        for arguments in [["clip", "--from", "0s", "--to", "1s"], ["save", "--last", "1s"]] {
            for (given, example) in [
                (output, output + "/clip.mkv"), (directory.path, directory.path + "/clip.mkv"),
                (directory.path + "/", directory.path + "/clip.mkv"),
            ] {
                let result = try Tool.rewind([arguments[0], "--store", store] + arguments.dropFirst() + ["-o", given])
                #expect(result.status == 64, "\(arguments): \(result.stderr)")
                #expect(
                    result.stderr.contains("-o: '\(given)' is a directory: give a file name in it, e.g. \(example)"),
                    "\(result.stderr)")
            }
        }
    }

    /// A store named by a relative path whose last component is one character (`--store E`, `--store new/x`, whose
    /// directory is missing) is taken like any other: the directory above it is found without the process stopping.
    @Test func aStoreNamedByOneCharacterIsTakenLikeAnyOther() throws {
        for (path, parent) in [
            ("E", "."), ("new/x", "new"), ("/a", "/"), ("/", "/"), ("a/b/", "a"), ("//x//y", "//x"),
            ("/tmp/a.mkv", "/tmp"),
        ] {
            #expect(System.parentDirectory(of: path) == parent, "\(path)")
        }
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        for store in ["E", "new/x"] {
            let result = try Tool.run(
                "/bin/sh",
                [
                    "-c",
                    "cd '\(directory.path)' && '\(Tool.rewindPath)' record --store \(store) --input synthetic:64x48@30 "
                        + "--duration 100ms --min-free 1MiB",
                ])
            #expect(result.status == 0, "\(store): \(result.stderr)")
            #expect(FileManager.default.fileExists(atPath: directory.path + "/" + store + "/index.sqlite"))
            // A new store is its owner's alone (the camera's frames, like its socket and token); the directories
            // made above it are as mkdir -p makes them.
            var mode = stat()
            #expect(stat(directory.path + "/" + store, &mode) == 0 && mode.st_mode & 0o777 == 0o700, "\(store)")
        }
        var above = stat()
        #expect(stat(directory.path + "/new", &above) == 0 && above.st_mode & 0o777 == 0o755)
        // --allow-host takes a name as a browser sends it (any case, a final dot), nothing else.
        for bad in ["*.example", "x,y", "Bücher.example", "a:80", "", ".example", "a..b"] {
            let refused = try Tool.rewind(["record", "--store", directory.path + "/h", "--allow-host", bad])
            #expect(refused.status == 64 && refused.stderr.contains("is not a host name"), "\(bad): \(refused.stderr)")
        }
        let named = directory.path + "/named"
        let recorder = try Tool.startRewind([
            "record", "--store", named, "--realtime", "--duration", "20s", "--allow-host", "Trail.Example.",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        try Tool.waitForSocket(of: named)
        let asked = try Tool.run(
            try Tool.path(of: "curl"),
            [
                "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", named + "/rewind.sock", "-H",
                "Host: trail.example:8080", "-H", "Sec-Fetch-Site: same-origin", "http://x/v1/health",
            ])
        #expect(asked.output == "200", "\(asked.output)")
        recorder.process.terminate()
        _ = try recorder.finish(timeout: .seconds(60))
        // Also when the API's listener or a store-less recorder makes the directory first.
        for (name, options) in [("listened/a", ["--listen", "127.0.0.1:0"]), ("unspilled", ["--spill", "off"])] {
            let store = directory.path + "/" + name
            let result = try Tool.rewind(["record", "--store", store, "--duration", "100ms"] + options)
            var mode = stat()
            #expect(result.status == 0 && stat(store, &mode) == 0 && mode.st_mode & 0o777 == 0o700, "\(name)")
        }
        // An existing directory keeps its mode.
        let shared = directory.path + "/shared"
        #expect(mkdir(shared, 0o750) == 0 && chmod(shared, 0o750) == 0)
        #expect(try Tool.rewind(["record", "--store", shared, "--duration", "100ms"]).status == 0)
        var kept = stat()
        #expect(stat(shared, &kept) == 0 && kept.st_mode & 0o777 == 0o750)
    }

    @Test func everyCommandHasHelp() throws {
        for command in ["demo", "record", "save", "clip", "info", "verify", "soak", "bench"] {
            let result = try Tool.rewind([command, "--help"])
            #expect(result.status == 0)
            #expect(result.output.hasPrefix("usage: rewind \(command)"))
        }
    }
}
