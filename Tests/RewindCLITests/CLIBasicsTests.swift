import Foundation
import Testing

@Suite(.timeLimit(.minutes(15))) struct CLIBasicsTests {
    @Test func helpListsEveryCommand() throws {
        let result = try Tool.rewind(["--help"])
        #expect(result.status == 0)
        for command in ["demo", "record", "save", "clip", "info", "verify", "soak", "bench"] {
            #expect(result.output.contains("\n  \(command) "), "help lists \(command)")
        }
    }

    @Test func versionPrintsTheVersion() throws {
        let result = try Tool.rewind(["--version"])
        #expect(result.status == 0)
        #expect(result.output.hasPrefix("rewind "))
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

    @Test(arguments: [
        ["info"],
        ["info", "--store"],
        ["clip", "--store", "x", "--from", "1s", "--to", "2s", "-o", "a.y4m", "--bogus"],
        ["record", "--store", "x", "--memory", "lots"],
        ["record", "--store", "x", "--spill", "sometimes"],
        ["save", "--store", "x", "--last", "five", "-o", "a.y4m"],
    ])
    func badOptionsExit64WithTheCommandsUsage(arguments: [String]) throws {
        let result = try Tool.rewind(arguments)
        #expect(result.status == 64, "\(arguments): \(result.stderr)")
        #expect(result.stderr.contains("usage: rewind \(arguments[0])"))
        #expect(result.stdout.isEmpty)
    }

    @Test func everyCommandHasHelp() throws {
        for command in ["demo", "record", "save", "clip", "info", "verify", "soak", "bench"] {
            let result = try Tool.rewind([command, "--help"])
            #expect(result.status == 0)
            #expect(result.output.hasPrefix("usage: rewind \(command)"))
        }
    }
}
