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
    let selection = try liveSelection(directory: directory, stream: arguments.string("stream"), output: output)
    // A live recorder exports from its memory and disk together, so the newest frames are there too.
    let reply = try ControlClient.clip(
        directory: directory, from: arguments.string("from")!, to: arguments.string("to")!,
        destination: ExportDestination(argument: output), format: format,
        stream: selection?.requestName ?? arguments.string("stream"))
    if let reply { return report(reply, output: output, action: "exported by the live recorder") }
    let store = try openStoreForReading(directory)
    switch try selectStreams(in: store, named: arguments.string("stream")) {
    case .one(let row):
        let source = ClipSource.store(store, stream: row)
        let from = try source.resolve(try arguments.time("from")!)
        let to = try source.resolve(try arguments.time("to")!)
        guard from < to else { throw ClipError.badRange(from: from, to: to) }
        return try export(from: source, range: from..<to, output: arguments.string("output")!)
    case .all:
        let set = try StreamSet(store: store)
        let from = try set.recorderTime(try arguments.time("from")!)
        let to = try set.recorderTime(try arguments.time("to")!)
        guard from < to else { throw ClipError.badRange(from: from, to: to) }
        return try exportAll(set, range: from..<to, output: output, format: format)
    }
}

/// The streams a save or clip asks for, checked against the store's index before a live recorder is asked (the
/// index is readable while it records); nil when there is no index yet. `--stream all` to stdout needs `.mkv`.
private func liveSelection(directory: String, stream: String?, output: String) throws -> StreamSelection? {
    guard FileManager.default.fileExists(atPath: directory + "/index.sqlite") else { return nil }
    let selection = try selectStreams(in: try SegmentStore.openReadOnly(directory: directory), named: stream)
    if case .all = selection, output == "-" {
        throw UsageError(
            "-o -: several streams cannot go to stdout as YUV4MPEG2; give -o clip.mkv (a track per stream) or "
                + "--stream NAME")
    }
    return selection
}

/// Exports every stream of `set` in `range` (recorder time): one `.mkv` with a track per stream, or a file per
/// stream for `.y4m` and `.mp4`; prints each file written.
private func exportAll(_ set: StreamSet, range: Range<Int64>, output: String, format: ExportFormat) throws -> Int32 {
    let summaries = try set.export(range: range, format: format, to: .path(output))
    for summary in summaries {
        var line = describe(summary, destination: summary.path ?? output)
        if format == .matroska { line += " (\(count(set.members.count, "stream")), a track each)" }
        print(line)
    }
    return ExitStatus.success
}

func runSave(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    let duration = try arguments.duration("last")!
    let output = arguments.string("output")!
    guard duration > .zero else { throw UsageError("--last must be longer than 0s") }
    guard let format = ExportFormat(path: output) ?? (output == "-" ? .y4m : nil) else {
        throw UsageError("-o: '\(output)' must end in .y4m, .mkv or .mp4 (or be - for YUV4MPEG2 on stdout)")
    }
    let selection = try liveSelection(directory: directory, stream: arguments.string("stream"), output: output)
    // A live recorder saves from its memory (and disk for what is older) without stopping.
    let reply = try ControlClient.save(
        directory: directory, last: duration, to: ExportDestination(argument: output),
        format: format,
        stream: selection?.requestName ?? arguments.string("stream"))
    if let reply { return report(reply, output: output, action: "saved by the live recorder") }
    let store = try openStoreForReading(directory)
    switch try selectStreams(in: store, named: arguments.string("stream")) {
    case .one(let row):
        let source = ClipSource.store(store, stream: row)
        guard let range = try source.lastRange(try arguments.duration("last")!) else {
            throw CommandError("the store holds no frames yet: nothing to save")
        }
        return try export(from: source, range: range, output: arguments.string("output")!)
    case .all:
        let set = try StreamSet(store: store)
        guard let range = try set.lastRange(duration) else {
            throw CommandError("the store holds no frames yet: nothing to save")
        }
        return try exportAll(set, range: range, output: output, format: format)
    }
}

/// Exports `range` to the `-o` argument and prints what was written.
func export(from source: ClipSource, range: Range<Int64>, output: String) throws -> Int32 {
    let destination = ExportDestination(argument: output)
    guard let format = ExportFormat(path: output) ?? (output == "-" ? .y4m : nil) else {
        throw UsageError("-o: '\(output)' must end in .y4m, .mkv or .mp4 (or be - for YUV4MPEG2 on stdout)")
    }
    var progress = ProgressLine()
    let summary: ExportSummary
    do {
        summary = try source.export(range: range, format: format, to: destination) { count, pts in
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
