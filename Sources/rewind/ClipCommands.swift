import Foundation
import RewindKit

func runClip(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    let output = arguments.string("output")!
    guard let format = ExportFormat(path: output) ?? (output == "-" ? .y4m : nil) else {
        throw UsageError("-o: '\(output)' must end in .y4m, .mkv or .mp4 (or be - for YUV4MPEG2 on stdout)")
    }
    // Two times of the same kind are compared before anything is opened or asked of a live recorder.
    switch (try arguments.time("from")!, try arguments.time("to")!) {
    case (.stream(let from), .stream(let to)), (.wall(let from), .wall(let to)),
        (.timeOfDay(let from), .timeOfDay(let to)):
        if from >= to { throw ClipError.badRange(from: from, to: to) }
    default:
        break
    }
    // A live recorder exports from its memory and disk together, so the newest frames are there too.
    let reply = try ControlClient.clip(
        directory: directory, from: arguments.string("from")!, to: arguments.string("to")!,
        destination: ExportDestination(argument: output), format: format, stream: arguments.string("stream"),
        quality: quality(arguments))
    if let reply { return report(reply, output: output, action: "exported by the live recorder") }
    let store = try openStoreForReading(directory)
    let source = ClipSource.store(store, stream: try selectStream(in: store, named: arguments.string("stream")))
    let from = try source.resolve(try arguments.time("from")!)
    let to = try source.resolve(try arguments.time("to")!)
    guard from < to else { throw ClipError.badRange(from: from, to: to) }
    return try export(from: source, range: from..<to, output: arguments.string("output")!, quality: quality(arguments))
}

func runSave(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    let duration = try arguments.duration("last")!
    let output = arguments.string("output")!
    guard duration > .zero else { throw UsageError("--last must be longer than 0s") }
    guard let format = ExportFormat(path: output) ?? (output == "-" ? .y4m : nil) else {
        throw UsageError("-o: '\(output)' must end in .y4m, .mkv or .mp4 (or be - for YUV4MPEG2 on stdout)")
    }
    // A live recorder saves from its memory (and disk for what is older) without stopping.
    let reply = try ControlClient.save(
        directory: directory, last: duration, to: ExportDestination(argument: output),
        format: format,
        stream: arguments.string("stream"), quality: quality(arguments))
    if let reply { return report(reply, output: output, action: "saved by the live recorder") }
    let store = try openStoreForReading(directory)
    let source = ClipSource.store(store, stream: try selectStream(in: store, named: arguments.string("stream")))
    guard let range = try source.lastRange(try arguments.duration("last")!) else {
        throw CommandError("the store holds no frames yet: nothing to save")
    }
    return try export(from: source, range: range, output: arguments.string("output")!, quality: quality(arguments))
}

/// The `--quality` of a save or clip (`fast` unless given).
private func quality(_ arguments: ParsedArguments) -> ExportQuality {
    arguments.string("quality").flatMap(ExportQuality.init(rawValue:)) ?? .fast
}

/// Exports `range` to the `-o` argument and prints what was written.
func export(from source: ClipSource, range: Range<Int64>, output: String, quality: ExportQuality = .fast) throws
    -> Int32
{
    let destination = ExportDestination(argument: output)
    guard let format = ExportFormat(path: output) ?? (output == "-" ? .y4m : nil) else {
        throw UsageError("-o: '\(output)' must end in .y4m, .mkv or .mp4 (or be - for YUV4MPEG2 on stdout)")
    }
    var progress = ProgressLine()
    let summary: ExportSummary
    do {
        summary = try source.export(range: range, format: format, to: destination, quality: quality) { count, pts in
            progress.update("exporting … \(count) frames, pts \(formatSeconds(pts))")
        }
    } catch {
        progress.clear()
        throw error
    }
    progress.clear()
    let message = describe(summary, destination: output == "-" ? "stdout" : output)
    if output == "-" { printError(message) } else { print(message) }
    return ExitStatus.success
}

/// Prints what a live recorder wrote for us, like ``describe(_:destination:)`` does for a local export.
private func report(_ export: ExportSummary, output: String, action: String) -> Int32 {
    let message = describe(export, destination: output == "-" ? "stdout" : output) + "; \(action)"
    if output == "-" { printError(message) } else { print(message) }
    return ExitStatus.success
}
