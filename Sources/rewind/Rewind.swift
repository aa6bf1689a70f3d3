import Foundation
import RewindKit
import RewindSoak

/// Exit statuses, following `sysexits.h` where one fits. ``CommandFailure`` picks one for each error.
enum ExitStatus {
    static let success: Int32 = 0
    /// A failure of the work itself (I/O, damaged store, failed export).
    static let failure: Int32 = 1
    /// `EX_USAGE`: the command line was wrong.
    static let usage: Int32 = 64
    /// `EX_DATAERR`: the input data was malformed (a bad header, a truncated frame).
    static let dataError: Int32 = 65
    /// `EX_NOINPUT`: an input file does not exist or cannot be opened.
    static let noInput: Int32 = 66
    /// `EX_UNAVAILABLE`: a needed tool or service is missing.
    static let unavailable: Int32 = 69
}

/// A subcommand: its option table and what it runs.
struct Command: Sendable {
    let spec: CommandSpec
    let run: @Sendable (ParsedArguments) throws -> Int32
}

@main
enum Rewind {
    static let commands: [Command] = [
        demoCommand, recordCommand, saveCommand, clipCommand, statusCommand, eventsCommand, markCommand,
        markersCommand, unmarkCommand, infoCommand, verifyCommand, soakCommand, benchCommand,
    ]

    static var overview: String {
        var lines = [
            "rewind \(rewindVersion): a rewind buffer of raw video frames with a durable, queryable frame store",
            "",
            "usage: rewind <command> [options]      rewind <command> --help for a command's options",
            "",
            "commands:",
        ]
        for command in commands {
            let padding = String(repeating: " ", count: max(2, 10 - command.spec.name.count))
            lines.append("  \(command.spec.name)\(padding)\(command.spec.summary)")
        }
        return lines.joined(separator: "\n")
    }

    static func main() {
        // A recorder must stay within its memory budget: freed query and export buffers go back to the system.
        ResidentMemory.limitHeapRetention()
        exit(run(Array(CommandLine.arguments.dropFirst())))
    }

    static func run(_ arguments: [String]) -> Int32 {
        guard let first = arguments.first else {
            printError(overview)
            return ExitStatus.usage
        }
        switch first {
        case "--help", "-h", "help":
            print(overview)
            return ExitStatus.success
        case "--version":
            print("rewind \(rewindVersion)")
            return ExitStatus.success
        default:
            break
        }
        guard let command = commands.first(where: { $0.spec.name == first }) else {
            printError("rewind: unknown command '\(first)'\n\n\(overview)")
            return ExitStatus.usage
        }
        do {
            let parsed = try command.spec.parse(Array(arguments.dropFirst()))
            if parsed.wantsHelp {
                print(command.spec.help)
                return ExitStatus.success
            }
            if let store = parsed.string("store") { try checkStoreDirectory(store) }
            return try command.run(parsed)
        } catch {
            let failure = CommandFailure(error, command: command.spec.name)
            printError(failure.text(command: command.spec.name, help: command.spec.help))
            return failure.status
        }
    }
}

/// Writes a line to standard error.
func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

/// A command that this build does not provide yet: says so and fails.
func unavailable(_ name: String) -> @Sendable (ParsedArguments) throws -> Int32 {
    { _ in
        printError("rewind \(name): not available in this build")
        return ExitStatus.unavailable
    }
}
