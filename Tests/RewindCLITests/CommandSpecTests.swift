import RewindKit
import Testing

@testable import rewind

@Suite struct CommandSpecTests {
    let spec = CommandSpec(
        name: "clip", summary: "extract a clip",
        options: [
            .value("store", "DIR", "store directory", required: true),
            .value("window", "DURATION", "rewind window", default: "10s"),
            .value("output", short: "o", "PATH", "output file"),
            .flag("json", "print JSON"),
        ])

    @Test func parsesValuesFlagsShortAndInlineForms() throws {
        let parsed = try spec.parse(["--store", "/tmp/s", "--json", "-o", "out.y4m", "--window=5s"])
        #expect(parsed.string("store") == "/tmp/s")
        #expect(parsed.string("output") == "out.y4m")
        #expect(parsed.flag("json"))
        #expect(try parsed.duration("window") == .seconds(5))
    }

    @Test func appliesDefaults() throws {
        let parsed = try spec.parse(["--store", "x"])
        #expect(try parsed.duration("window") == .seconds(10))
        #expect(!parsed.flag("json"))
    }

    @Test(
        arguments: [
            (["--bogus"], "unknown option '--bogus'"),
            (["--store"], "needs a value"),
            (["--store", "--json"], "option '--store' needs a value"),
            (["--json"], "needs --store"),
            (["--store", "a", "--store", "b"], "given twice"),
            (["--store", "a", "stray"], "unexpected argument 'stray'"),
            (["--store", "a", "--json=yes"], "takes no value"),
            (["-x"], "unknown option '-x'"),
        ] as [([String], String)])
    func rejectsBadCommandLines(arguments: [String], message: String) {
        #expect {
            try spec.parse(arguments)
        } throws: { error in
            (error as? UsageError)?.message.contains(message) == true
        }
    }

    @Test func badTypedValueIsAUsageErrorNamingTheOption() throws {
        let parsed = try spec.parse(["--store", "x", "--window", "soon"])
        #expect {
            try parsed.duration("window")
        } throws: { error in
            (error as? UsageError)?.message == "--window: 'soon' is not a duration like 5s, 1500ms, 10m, 1h or 12.5s"
        }
    }

    @Test func helpListsEveryOptionWithDefaults() throws {
        let parsed = try spec.parse(["--help"])
        #expect(parsed.wantsHelp)
        #expect(spec.help.contains("--window DURATION"))
        #expect(spec.help.contains("(default: 10s)"))
        #expect(spec.help.contains("-o, --output PATH"))
        #expect(spec.help.hasPrefix("usage: rewind clip --store DIR"))
    }
}
