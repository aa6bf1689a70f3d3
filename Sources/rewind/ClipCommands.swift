import Foundation
import RewindKit

func runClip(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    // Interrupted from the start (even while a recorder that does not answer is asked which streams it records), the
    // command stops cleanly: nothing asked of a recorder is left to be made for nobody.
    installStopHandlers(interruptsWaits: true)
    let output = arguments.string("output")!
    let json = arguments.flag("json")
    if json && output == "-" { throw jsonWithFramesToStandardOutput(command: "clip") }
    let format = try exportFormat(ofOutput: output)
    try checkQuality(arguments, format: format, output: output)
    try checkOutputOutsideStore(output, store: directory)
    // Two times of the same kind are compared before anything is opened or asked of a live recorder (times of day
    // only in one zone: `13:37:02+01:00` is before `12:37:03Z`; those of two zones are compared once resolved).
    switch (try arguments.time("from")!, try arguments.time("to")!) {
    case (.stream(let from), .stream(let to)):
        if from >= to { throw ClipError.badRange(from: from, to: to) }
    case (.timeOfDay(_, let fromZone), .timeOfDay(_, let toZone)) where fromZone != toZone:
        break
    case (.wall(let from), .wall(let to)), (.timeOfDay(let from, _), .timeOfDay(let to, _)):
        // Said in the times as given: their nanoseconds since 1970 or midnight mean nothing to the reader.
        if from >= to {
            throw UsageError(
                "the range [\(arguments.string("from")!), \(arguments.string("to")!)) is empty: its end is not after "
                    + "its start; give a --to later than --from", showsHelp: false)
        }
    default:
        break
    }
    // The range on the recorder clock, as the store's index places it: whether a live recorder must export it.
    let range: Range<Int64>? = {
        guard let store = try? SegmentStore.openReadOnly(directory: directory), let set = try? StreamSet(store: store),
            let from = try? set.recorderTime(try arguments.time("from")!),
            let to = try? set.recorderTime(try arguments.time("to")!), from < to
        else { return nil }
        return from..<to
    }()
    // A live recorder exports from its memory and disk together, so the newest frames are there too.
    let live: Int32?
    do {
        let selection = try liveSelection(directory: directory, stream: arguments.string("stream"), output: output)
        let firstWall = firstWallNanoseconds(ofStore: directory)
        live = try liveExport(
            directory: directory, output: output, format: format, what: "clip", selection: selection, range: range,
            json: json
        ) { path in
            try namingFlags(["from": "--from", "to": "--to"]) {
                try ControlClient(directory: directory).clip(
                    ClipRequest(
                        stream: selection?.requestName ?? arguments.string("stream"),
                        // A time without a zone is this shell's local time, wherever the recorder runs.
                        from: try arguments.naming("from") {
                            try TimeSpec.withLocalZone(arguments.string("from")!, firstWallNanoseconds: firstWall)
                        },
                        to: try arguments.naming("to") {
                            try TimeSpec.withLocalZone(arguments.string("to")!, firstWallNanoseconds: firstWall)
                        },
                        format: format.fileExtension, path: path,
                        quality: givenQuality(arguments)))
            }
        }
    } catch let error as ControlError {
        // A recorder that takes the connection and answers nothing (stopped with Ctrl-Z, stuck): a range the disk
        // holds whole is read from it, said so, as when no connection is taken at all.
        guard case .noAnswer = error, let range, !stopRequested.load(ordering: .relaxed),
            let store = try? SegmentStore.openReadOnly(directory: directory),
            let asked = try? selectStreams(in: store, named: arguments.string("stream")).names,
            !reachesPastDisk(directory: directory, range: range, streams: asked)
        else { throw error }
        printError("rewind clip: \(error): exported from the store on disk, which holds the whole range")
        live = nil
    }
    // A recorder's file is checked against the store as one from the disk (a repair left unfinished, its markers).
    if let live { return checkedExport(directory, command: "clip", format: format, live) }
    let store = try openStoreForReading(directory)
    switch try selectStreams(in: store, named: arguments.string("stream")) {
    case .one(let row):
        let source = ClipSource.store(store, stream: row)
        let from = try arguments.naming("from") { try source.resolve(try arguments.time("from")!) }
        let to = try arguments.naming("to") { try source.resolve(try arguments.time("to")!) }
        guard from < to else { throw ClipError.badRange(from: from, to: to) }
        return checkedExport(
            directory, command: "clip", format: format,
            try export(
                from: source, range: from..<to, output: output, quality: quality(arguments), command: "clip",
                json: json))
    case .all:
        let set = try StreamSet(store: store)
        let from = try arguments.naming("from") { try set.recorderTime(try arguments.time("from")!) }
        let to = try arguments.naming("to") { try set.recorderTime(try arguments.time("to")!) }
        guard from < to else { throw ClipError.badRange(from: from, to: to) }
        return checkedExport(
            directory, command: "clip", format: format,
            try exportAll(
                set, range: from..<to, output: output, format: format, quality: quality(arguments), command: "clip",
                json: json))
    }
}

/// `--stream all` with `-o -`: two values that each hold but cannot work together, so the message alone, which says
/// what to give instead.
private let severalStreamsToStandardOutput = UsageError(
    "-o -: several streams cannot go to stdout as YUV4MPEG2; give -o clip.mkv (a track per stream) or --stream NAME",
    showsHelp: false)

/// `--json` with `-o -`: the document and the frames would both go to stdout.
///
/// - Parameter command: `save` or `clip`, whose other ways to name the file it says.
private func jsonWithFramesToStandardOutput(command: String) -> UsageError {
    UsageError(
        "--json prints its document on stdout, where -o - writes the frames: give -o FILE"
            + (command == "save" ? " (or no -o, for a live recorder's DIR/exports/)" : "") + ", or drop --json",
        showsHelp: false)
}

/// The streams a save or clip asks for, checked against the store's index before a live recorder is asked (the
/// index is readable while it records); nil when there is no index yet. `--stream all` to stdout needs `.mkv`.
private func liveSelection(directory: String, stream: String?, output: String) throws -> StreamSelection? {
    guard FileManager.default.fileExists(atPath: directory + "/index.sqlite") else {
        try checkOneRecordedStream(directory: directory, stream: stream)
        return nil
    }
    // A recorder without a store (`--spill off`) keeps a clock of its own, unrelated to the times of the streams an
    // earlier run stored in the directory: a request that names no stream of them (none, or `all`) is its.
    if stream == nil || stream == "all",
        let status = try askRecorder({ try ControlClient(directory: directory).status() }),
        status.segments == nil, status.diskBytes == nil
    {
        try checkOneRecordedStream(directory: directory, stream: stream)
        return nil
    }
    let selection = try selectStreams(in: try SegmentStore.openReadOnly(directory: directory), named: stream)
    if case .all = selection, output == "-" { throw severalStreamsToStandardOutput }
    return selection
}

/// Without `--stream`, a recorder without a store (`--spill off`) of several streams asks which, as a store of
/// several does (it would save every stream, under names not given).
private func checkOneRecordedStream(directory: String, stream: String?) throws {
    guard stream == nil, let live = try askRecorder({ try ControlClient(directory: directory).streams() }) else {
        return
    }
    let recorded = live.streams.filter(\.recording).map(\.name)
    guard recorded.count > 1 else { return }
    throw UsageError(
        "the recorder records several streams (\(recorded.joined(separator: ", "))): choose one with --stream NAME, "
            + "or --stream all")
}

/// The selected streams of the store that a running recorder does not record (a camera of an earlier run), and the
/// selected ones it records: both empty when none runs.
private func streamsOutsideRecorder(directory: String, _ selection: StreamSelection?) throws -> (
    outside: [String], recorded: [String]
) {
    guard let selection, let live = try askRecorder({ try ControlClient(directory: directory).streams() }) else {
        return ([], [])
    }
    let recording = Set(live.streams.filter(\.recording).map(\.name))
    let names = selection.names
    return (names.filter { !recording.contains($0) }, names.filter { recording.contains($0) })
}

/// After the recorder exported `all` without `outside` (streams it does not record): fails, naming them, when any has
/// frames in the range asked for (a clip's, which the recorder cuts at its newest frame though stored streams may
/// reach past it; else the exported one); says they had none otherwise.
private func checkStoredStreamsLeftOut(
    _ outside: [String], directory: String, object: SaveObject?, asked: Range<Int64>?, what: String
) throws {
    guard let range = asked ?? object.map({ $0.fromNanoseconds..<max($0.toNanoseconds, $0.fromNanoseconds + 1) })
    else { return }
    let holding =
        (try? SegmentStore.openReadOnly(directory: directory)).flatMap { store in
            try? StreamSet(store: store).members(withFramesIn: range).map(\.name).filter { outside.contains($0) }
        } ?? outside
    if holding.isEmpty {
        printError(
            "rewind \(what): \(outside.joined(separator: ", ")), which the running recorder does not record, "
                + "\(outside.count == 1 ? "has" : "have") no frames in the range")
        return
    }
    let names = holding.joined(separator: ", ")
    throw CommandError(
        "\(names) \(holding.count == 1 ? "has" : "have") frames in the range, and the running recorder does not "
            + "record \(holding.count == 1 ? "it" : "them"): the file does not hold them; export "
            + (holding.count == 1 ? "it" : "each") + " from the disk with 'rewind clip --store \(directory) --stream "
            + "\(holding[0]) --from \(formatSeconds(range.lowerBound)) --to \(formatSeconds(range.upperBound))'"
    )
}

/// Whether `range` (recorder time) reaches past the newest frame on disk of one of `streams`: then the running
/// recorder, which holds the newest frames in memory, must export them. True when the disk cannot tell.
/// `recorded`, or every stream of the store at `directory` when the recorder did not say which it records (it
/// answered nothing, or 503).
private func recordedOrAll(_ recorded: [String], directory: String) -> [String] {
    guard recorded.isEmpty else { return recorded }
    return (try? SegmentStore.openReadOnly(directory: directory).streams().map(\.name)) ?? []
}

private func reachesPastDisk(directory: String, range: Range<Int64>, streams: [String]) -> Bool {
    guard let store = try? SegmentStore.openReadOnly(directory: directory), let rows = try? store.streams() else {
        return true
    }
    for row in rows where streams.contains(row.name) {
        let source = ClipSource.store(store, stream: row)
        guard let clock = try? source.clock(), let span = try? source.span() else { return true }
        if range.upperBound > clock.recorderTime(ofPTS: span.upperBound) { return true }
    }
    return false
}

/// Exports every stream of `set` in `range` (recorder time): one `.mkv` with a track per stream, or a file per
/// stream for `.y4m` and `.mp4`; prints each file written, or with `json` the document
/// (``exportDocument(_:source:streams:)``).
///
/// - Parameter command: `clip` or `save`, for messages.
private func exportAll(
    _ set: StreamSet, range: Range<Int64>, output: String, format: ExportFormat, quality: ExportQuality,
    command: String, json: Bool = false
) throws -> Int32 {
    let holding = try set.members(withFramesIn: range)
    let tracks = holding.count
    // A file per stream: the streams that got none are said (the document lists them as `without_frames`).
    let empty = set.members.map(\.name).filter { name in !holding.contains { $0.name == name } }
    let sayEmpty = {
        guard format != .matroska && !empty.isEmpty else { return }
        print(withoutFramesLine(empty))
    }
    // Each stream's file is a file, as -o itself must be: refused up front, before any stream is written.
    if format != .matroska {
        for member in holding { try checkNotADirectory(StreamSet.fileName(for: output, stream: member.name)) }
    }
    // A file per stream, FIFOs or devices among them: one stream after the other (as a reader of each in turn
    // expects), each through the one-stream export, which waits for its FIFO's reader without blocking, so Ctrl-C
    // still ends it, and makes an .mp4 for a FIFO or device in a file first.
    var files: [(member: StreamSet.Member?, summary: ExportSummary)] = []
    if format != .matroska,
        holding.contains(where: { member in
            let file = StreamSet.fileName(for: output, stream: member.name)
            return isFIFO(file) || writesThroughAFile(file, format)
        })
    {
        // Each stream's export says its own lost gaps (or that they are unknown, which fails the command).
        var status = ExitStatus.success
        for member in holding {
            let file = StreamSet.fileName(for: output, stream: member.name)
            let streamRange = member.clock.ptsRange(range)
            guard json else {
                let exported = try export(
                    from: member.source, range: streamRange, output: file, quality: quality, command: command)
                if exported != ExitStatus.success { status = exported }
                continue
            }
            let summary = try writeExport(
                from: member.source, range: streamRange, output: file, quality: quality, command: command)
            guard summary.frames > 0 else { throw nothingLeftToExport }
            files.append((member, summary))
        }
        if !json {
            sayEmpty()
            return status
        }
    } else {
        var progress = ProgressLine()
        // Interrupted (SIGINT, SIGTERM): as one stream's export, it stops at its next frame and removes its files.
        installStopHandlers(interruptsWaits: true)
        do {
            files = try set.exportFiles(range: range, format: format, to: .path(output), quality: quality) { written in
                if stopRequested.load(ordering: .relaxed) {
                    throw CommandError(
                        "interrupted after \(written) frames: the export was stopped; no file was kept",
                        status: ExitStatus.interrupted)
                }
                progress.update("exporting … \(written) frames of \(count(tracks, "stream"))")
            }
        } catch {
            progress.clear()
            throw error
        }
        progress.clear()
    }
    // The frames lost in the range, on the recorder clock; unknown, and said so, when the gaps cannot be read.
    var lost: [GapObject]?
    var unknown: UnknownLosses?
    do {
        lost = try set.lostGaps(in: range).map(GapObject.init)
    } catch {
        unknown = UnknownLosses(error)
    }
    if json {
        // Each stream's file as -o names it (the one .mkv: -o itself); the pts they cover, and the frames lost in
        // the range, on the recorder clock, as a live recorder's save of `all` says them.
        var object = diskSaveObject(
            stream: "all", range: range, format: format,
            files: files.map {
                ($0.member.map { StreamSet.fileName(for: output, stream: $0.name) } ?? output, $0.summary)
            })
        let span = StreamSet.recorderTimeSpan(of: files)
        object.firstPTSNanoseconds = span?.lowerBound
        object.lastPTSNanoseconds = span?.upperBound
        if format == .matroska { object.tracks = holding.map(\.name) }
        object.lost = lost
        object.lostUnknown = unknown?.reason
        try printJSON(exportDocument(object, source: .disk, streams: set.members.map(\.name)))
        return unknown.map { reportUnknownLosses($0, command: command) } ?? ExitStatus.success
    }
    for (member, summary) in files {
        // A stream's file says its frames on the recorder clock, as --from and --to, the .mkv and a live recorder's
        // export of it say them (its own pts lie its clock offset apart).
        var shown = summary
        if let member {
            shown.firstPTSNanoseconds = summary.firstPTSNanoseconds.map(member.clock.recorderTime(ofPTS:))
            shown.lastPTSNanoseconds = summary.lastPTSNanoseconds.map(member.clock.recorderTime(ofPTS:))
        }
        var line = describe(shown, destination: summary.path ?? output)
        if format == .matroska {
            line += " (" + trackCount(tracks)
            if tracks < set.members.count {
                line += "; \(count(set.members.count - tracks, "stream")) without frames in the range"
            }
            line += ")"
        }
        print(line)
    }
    // Frames lost inside the range are in no file: said, with their streams.
    if let lost = lostGapsLine(lost ?? [], namingStreams: set.members.count > 1) {
        print(lost)
    }
    sayEmpty()
    return unknown.map { reportUnknownLosses($0, command: command) } ?? ExitStatus.success
}

func runSave(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    // Interrupted from the start (even while a recorder that does not answer is asked which streams it records), the
    // command stops cleanly: nothing asked of a recorder is left to be made for nobody.
    installStopHandlers(interruptsWaits: true)
    let last = try arguments.duration("last")
    let before = try arguments.duration("before")
    let after = try arguments.duration("after")
    if last != nil && (before != nil || after != nil) {
        throw UsageError("--last is --before with --after 0s: give one or the other", showsHelp: false)
    }
    for (name, value) in [("last", last), ("before", before)] where value.map({ $0 <= .zero }) ?? false {
        throw UsageError("--\(name) must be longer than 0s")
    }
    let output = arguments.string("output")
    let json = arguments.flag("json")
    if json && output == "-" { throw jsonWithFramesToStandardOutput(command: "save") }
    var format: ExportFormat?
    if let output {
        format = try exportFormat(ofOutput: output)
        try checkOutputOutsideStore(output, store: directory)
    }
    try checkQuality(arguments, format: format ?? .matroska, output: output)
    let selection = try liveSelection(
        directory: directory, stream: arguments.string("stream"), output: output ?? "save.mkv")
    // A live recorder saves from its memory (and disk for what is older) without stopping; with --after it
    // waits for the post-roll.
    let request = SaveRequest(
        stream: selection?.requestName ?? arguments.string("stream"),
        // --since-last-save without --last goes back to the last save's end, however far: no default cap.
        last: before == nil && after == nil
            ? arguments.string("last") ?? (arguments.flag("since-last-save") ? nil : "5s") : nil,
        // --after alone keeps --last's pre-roll: 5 s before now (not the whole window).
        before: arguments.string("before")
            ?? (after != nil && !arguments.flag("since-last-save") ? "5s" : nil),
        after: arguments.string("after"), format: format?.fileExtension,
        sinceLastSave: arguments.flag("since-last-save") ? true : nil,
        quality: givenQuality(arguments))
    // A post-roll needs a recorder; `--after 0s` is none (`--last` is `--before` with it).
    let postRoll = after.map { $0 > .zero } ?? false
    let needsRecorder = postRoll || arguments.flag("since-last-save")
    let live = try liveExport(
        directory: directory, output: output, format: format, what: "save", selection: selection,
        needsRecorder: needsRecorder, postRoll: postRoll, json: json
    ) { path in
        var request = request
        request.path = path
        return try namingFlags(["last": "--last", "before": "--before", "after": "--after"]) {
            try ControlClient(directory: directory).save(request)
        }
    }
    if let live { return checkedExport(directory, command: "save", format: format ?? .matroska, live) }
    guard !postRoll, !arguments.flag("since-last-save") else {
        throw CommandError(
            "no recorder is running on \(directory): --after and --since-last-save need a live recorder",
            status: ExitStatus.unavailable)
    }
    guard let output else {
        // No store there either (a mistyped --store): that is said first, as giving -o would say it next.
        try requireStore(directory)
        throw CommandError(
            "no recorder is running on \(directory): a save without -o is the recorder's; give -o to save from the "
                + "store on disk", status: ExitStatus.unavailable)
    }
    let store = try openStoreForReading(directory)
    let duration = before ?? last ?? .seconds(5)
    switch try selectStreams(in: store, named: arguments.string("stream")) {
    case .one(let row):
        let source = ClipSource.store(store, stream: row)
        guard let range = try source.lastRange(duration) else {
            throw CommandError("the store holds no frames yet: nothing to save")
        }
        return checkedExport(
            directory, command: "save", format: format ?? .matroska,
            try export(
                from: source, range: range, output: output, quality: quality(arguments), command: "save", json: json))
    case .all:
        if output == "-" { throw severalStreamsToStandardOutput }
        let set = try StreamSet(store: store)
        guard let range = try set.lastRange(duration) else {
            throw CommandError("the store holds no frames yet: nothing to save")
        }
        return checkedExport(
            directory, command: "save", format: format ?? .matroska,
            try exportAll(
                set, range: range, output: output, format: format ?? .matroska, quality: quality(arguments),
                command: "save", json: json))
    }
}

/// Removes the `stdout-PID-N.EXT` files in `exports` whose client process has ended (killed while it waited for the
/// recorder, which then finished the file for nobody). A running client's file stays.
private func removeFilesOfEndedClients(in exports: String) {
    for name in (try? FileManager.default.contentsOfDirectory(atPath: exports)) ?? []
    where name.hasPrefix(StagingFile.prefix) {
        let rest = name.dropFirst(StagingFile.prefix.count)
        guard let dash = rest.firstIndex(of: "-"), let pid = pid_t(rest[..<dash]), System.hasEnded(pid: pid) else {
            continue
        }
        unlink(exports + "/" + name)
    }
}

/// Asks a live recorder for an export and waits for it, printing its progress, and returns the command's exit status
/// (1 when the recorder could not read the range's gaps: the file is kept, its losses unknown); nil when no recorder
/// runs, or when it does not record a stream of `selection` (a camera of an earlier run): then the export is made
/// from the store on disk, and stderr says so; one that `needsRecorder` (a post-roll) is refused.
///
/// `-o -` goes through a temporary file in `DIR/exports/`, copied to standard output and removed. A relative path
/// is made absolute (the recorder runs elsewhere).
///
/// - Parameter json: print the save object (``exportDocument(_:source:streams:)``) instead of the lines of text.
private func liveExport(
    directory: String, output: String?, format: ExportFormat?, what: String, selection: StreamSelection?,
    range: Range<Int64>? = nil, needsRecorder: Bool = false, postRoll: Bool = false, json: Bool = false,
    start: (String?) throws -> SaveObject?
) throws -> Int32? {
    let (outside, recorded) = try streamsOutsideRecorder(directory: directory, selection)
    // `all` of recorded and stored streams over a range that needs the recorder (a save, which ends at its newest
    // frame; a clip past what its streams have on disk): the recorder exports the streams it records, and stored
    // frames in the range, which it cannot add, make the command fail after it.
    let recorderExportsAll =
        !outside.isEmpty && !recorded.isEmpty
        && (range.map { reachesPastDisk(directory: directory, range: $0, streams: recorded) } ?? true)
    if !outside.isEmpty && !recorderExportsAll {
        let names = outside.joined(separator: ", ")
        guard !needsRecorder else {
            throw CommandError(
                "the recorder running on \(directory) does not record \(names): --after and --since-last-save need a "
                    + "recorder recording the stream", status: ExitStatus.unavailable)
        }
        guard output != nil else {
            throw UsageError(
                "the recorder running on \(directory) does not record the stream asked for (\(names)), so it is saved "
                    + "from the store on disk: give -o FILE")
        }
        // The recorded streams of the selection, exported from the disk too, may miss their newest second.
        printError(
            "rewind \(what): the running recorder does not record \(names): exported from the store on disk"
                + (recorded.isEmpty ? "" : " (the newest second of the streams it records may not be there yet)"))
        return nil
    }
    let streams = recorderExportsAll ? recorded.count : selection?.streamCount
    let toStandardOutput = output == "-"
    // `all` of a store of several streams to .y4m or .mp4: the recorder writes a file per stream it records,
    // `NAME.STREAM.EXT`, also when it records one of them.
    let filePerStream = format != .matroska && (selection?.streamCount ?? 1) > 1
    // A FIFO or device (one file: one stream, or .mkv) is written by this process, from a file the recorder
    // writes first: the recorder writes regular files only, so that nothing reading slowly, or never, holds it up.
    let toSpecialFile = !toStandardOutput && output.map(isSpecialFile) == true && !filePerStream
    // A file per stream is written by the recorder itself, which writes regular files only: a FIFO or device among
    // those names is refused here, saying what works.
    if let output, !toStandardOutput, filePerStream {
        for name in recorded {
            let file = StreamSet.fileName(for: output, stream: name)
            guard let kind = StagedExport.specialFileKind(file) else { continue }
            throw UsageError(
                "-o: '\(file)' is \(kind): with a recorder running, the file of each stream is written by the "
                    + "recorder, which writes regular files only; give -o NAME.mkv (a track per stream, which can go "
                    + "to a FIFO), or regular files", showsHelp: false)
        }
    }
    // Absolute, and otherwise as given but for its `.` components: the recorder's open resolves `..` after the links
    // before it, as an export from the disk does (no `..` is taken away by its spelling, and a `~` is a name, which
    // a shell would have expanded already).
    let absoluteOutput = output.map(absolutePath)
    var path = absoluteOutput
    if toStandardOutput || toSpecialFile {
        let exports = directory + "/exports"
        try? FileManager.default.createDirectory(atPath: exports, withIntermediateDirectories: true)
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: exports, isDirectory: &isDirectory), !isDirectory.boolValue {
            throw CommandError(
                "'\(exports)' is not a directory: the recorder writes a file there for "
                    + (toStandardOutput ? "-o -" : "'\(output ?? "")'") + " first; move what is there away")
        }
        removeFilesOfEndedClients(in: exports)
        path = StagingFile.path(
            in: URL(fileURLWithPath: exports).standardizedFileURL.path, pid: getpid(),
            fileExtension: (format ?? .y4m).fileExtension)
    }
    // Interrupted (the callers install the stop handlers as they start): before the request is sent, nothing is
    // asked for; after, what the recorder started is cancelled (below) instead of being made for nobody.
    if stopRequested.load(ordering: .relaxed) {
        throw CommandError(
            "interrupted: no \(what) was requested; no file was kept", status: ExitStatus.interrupted)
    }
    let started: SaveObject?
    do {
        started = try start(path)
    } catch ControlError.refused(let error) where error.code == .empty && recorderExportsAll && range != nil {
        // The streams the recorder records have no frame in the range: the stored ones may (named, with the clip
        // that exports them); else the recorder's answer stands.
        try checkStoredStreamsLeftOut(outside, directory: directory, object: nil, asked: range, what: what)
        throw ControlError.refused(error)
    } catch ControlError.refused(let error)
        where (error.code == .tooMany || error.code == .unavailable) && what == "clip"
        && range.map({
            !reachesPastDisk(directory: directory, range: $0, streams: recordedOrAll(recorded, directory: directory))
        }) == true
    {
        // The recorder takes no more exports, or connections, for now, and the disk holds the whole range: read
        // from it.
        printError("rewind clip: \(error.message): exported from the store on disk")
        return nil
    }
    guard let started else {
        // No answer, from a recorder that records here: its newest frames are in its memory alone. A save (of the
        // last seconds, by the recorder's clock) or a clip reaching past the disk is refused rather than made short
        // from the disk; a clip the disk holds whole is read from it, said so.
        guard SegmentStore.isOpenForRecording(directory: directory) else { return nil }
        // Which streams it records is unknown (it did not answer): every stream asked for counts.
        let asked = selection?.names ?? []
        guard what == "clip", let range, !asked.isEmpty,
            !reachesPastDisk(directory: directory, range: range, streams: asked)
        else {
            throw unansweringRecorder(
                directory,
                instead:
                    ": its newest frames are in its memory alone, nothing was \(what == "save" ? "saved" : "exported")")
        }
        printError(
            "rewind clip: the recorder recording into \(directory) did not answer: exported from the store on disk")
        return nil
    }
    let client = ControlClient(directory: directory)
    var progress = ProgressLine()
    var object = started
    // Since when every question about it was refused for want of a connection.
    var refusedSince: ContinuousClock.Instant?
    // Interrupted while the recorder works on it (or while its request was on the way): the save is cancelled (its
    // partial file removed), not left to finish unseen; a second signal ends this process at once.
    while !object.state.isFinal {
        if stopRequested.load(ordering: .relaxed) {
            progress.clear()
            _ = try? client.cancelSave(id: object.id)
            if toStandardOutput || toSpecialFile, let path { unlink(path) }
            throw CommandError(
                "interrupted: \(what) \(object.id) was cancelled; no file was kept", status: ExitStatus.interrupted)
        }
        // Waiting: for its post-roll to be recorded, or (any save or clip) for one of the recorder's export slots.
        let waitsFor =
            postRoll
            ? ", recording until pts \(formatSeconds(object.toNanoseconds))" : " for an export slot (4 run at once)"
        progress.update(
            "\(what) \(object.id) \(object.state.rawValue) … \(object.frames) frames"
                + (object.state == .waiting ? waitsFor : ""))
        System.sleep(for: .milliseconds(50))
        let answer: SaveObject?
        do {
            answer = try client.save(id: object.id)
            refusedSince = nil
        } catch ControlError.refused(let error) where error.code == .unavailable {
            // It has the save, and no connection for this question now (its clients at their limit): asked again
            // (it said "try again shortly", exit 69, and the save was written all the same), for 30 s at most.
            let since = refusedSince ?? .now
            refusedSince = since
            guard ContinuousClock.now - since >= .seconds(30) else { continue }
            progress.clear()
            throw CommandError(
                "the recorder took \(what) \(object.id) but has refused every connection for 30 s since (\(error.message)): "
                    + "it still writes it; to cancel it, run 'curl --unix-socket DIR/rewind.sock -X DELETE "
                    + "http://rewind/v1/saves/\(object.id)'", status: ExitStatus.unavailable)
        }
        guard let next = answer else {
            progress.clear()
            throw ControlError.recorderStopped(request: "\(what) \(object.id)")
        }
        object = next
    }
    progress.clear()
    switch object.state {
    case .done:
        break
    case .cancelled:
        throw CommandError("\(what) \(object.id) was cancelled; no file was kept")
    default:
        let error = object.error ?? APIError.Detail(code: "failed", message: "the \(what) failed")
        throw ControlError.refused(APIError(APIError.Code(rawValue: error.code) ?? .failed, error.message))
    }
    let file = object.files.isEmpty ? "?" : object.files.joined(separator: ", ")
    // The pts the files cover, as the recorder says (for every stream, on the recorder clock); the range asked for
    // from a recorder that does not say.
    let covered =
        object.firstPTSNanoseconds.flatMap { first in object.lastPTSNanoseconds.map { (first, $0) } }
        ?? (object.fromNanoseconds, object.toNanoseconds)
    var message = "wrote \(count(object.frames, "frame"))"
    if let repeated = object.repeatedFrames, repeated > 0 {
        message += " (\(object.frames - repeated) stored + \(repeated) repeated to fill gaps at a constant frame rate)"
    }
    let (first, last) = formatSecondsApart(covered.0, covered.1)
    message +=
        " (\(formatBytes(object.bytes))) to \(toStandardOutput ? "stdout" : toSpecialFile ? output! : file), pts "
        + "\(first) … \(last)"
    // The streams it exported: those asked for, or, of `all`, those the recorder records.
    var names = recorderExportsAll ? recorded : selection?.names ?? []
    if json && names.isEmpty {
        // Asked without a store's index to name them (a recorder without a store): the recorder's.
        names = (try? askRecorder({ try client.streams() }))?.streams.filter(\.recording).map(\.name) ?? []
    }
    // A file per stream: the streams that had no frame in the range got none, said by name on a line of its own, as
    // from the disk. One .mkv: a track per stream, as from the disk.
    var withoutFile: [String] = []
    if let streams, ExportFormat(fileExtension: object.format) != .matroska, object.files.count < streams {
        withoutFile = names.filter { name in !object.files.contains { $0.hasSuffix(".\(name).\(object.format)") } }
        if withoutFile.isEmpty {
            message += " (\(count(streams - object.files.count, "stream")) without frames in the range)"
        }
    } else if let streams, streams > 1, ExportFormat(fileExtension: object.format) == .matroska {
        let tracks = object.tracks?.count ?? streams
        message += " (" + trackCount(tracks)
        if tracks < streams { message += "; \(count(streams - tracks, "stream")) without frames in the range" }
        message += ")"
    }
    message += "; \(what == "clip" ? "exported" : "saved") by the live recorder"
    if recorderExportsAll { message += " (the streams it records: \(recorded.joined(separator: ", ")))" }
    if toStandardOutput || toSpecialFile {
        let handle = FileHandle(forReadingAtPath: file)
        // Removed before the copy (the open handle keeps the bytes), so that nothing is left behind however the copy
        // ends.
        unlink(file)
        guard let handle else { throw CommandError("cannot read \(file), which the recorder wrote") }
        // A reader that goes away fails the write (EPIPE) instead of ending the process before the save is taken back.
        signal(SIGPIPE, SIG_IGN)
        do {
            let target =
                toStandardOutput
                ? STDOUT_FILENO : try openForWriting(output!, command: what, what: "\(what) \(object.id)")
            defer { if !toStandardOutput { close(target) } }
            try copy(handle, to: target, what: "\(what) \(object.id)", name: toStandardOutput ? "stdout" : output!)
        } catch {
            // Not delivered (interrupted while waiting for the FIFO's reader, a write that failed, a reader that went
            // away): the recorder is told, so that the save does not count for --since-last-save. A reader that went
            // away then ends this process by SIGPIPE, as it would any other writer of the pipe.
            _ = try? client.cancelSave(id: object.id)
            if let failure = error as? CommandError, failure.status == ExitStatus.brokenPipe {
                signal(SIGPIPE, SIG_DFL)
                raise(SIGPIPE)
            }
            throw error
        }
        message += " (through \(file), removed)"
        if toStandardOutput { printError(message) } else if !json { print(message) }
    } else if !json {
        print(message)
    }
    if json {
        // The file this process wrote, not the recorder's, removed.
        var written = object
        if toSpecialFile, let absoluteOutput { written.files = [absoluteOutput] }
        try printJSON(exportDocument(written, source: .recorder, streams: names))
    } else {
        if !withoutFile.isEmpty { print(withoutFramesLine(withoutFile)) }
        // Frames lost inside the range are in no file: said, as from the disk.
        if let lost = lostGapsLine(object.lost ?? [], namingStreams: object.stream == "all") {
            if toStandardOutput { printError(lost) } else { print(lost) }
        }
    }
    // Gaps the recorder could not read: the losses are unknown, said (with its reason) before anything else that
    // fails the command, and the command fails.
    let status = object.lostUnknown.map { reportUnknownLosses(UnknownLosses(reason: $0), command: what) }
    if recorderExportsAll {
        try checkStoredStreamsLeftOut(outside, directory: directory, object: object, asked: range, what: what)
    }
    // A post-roll the recorder could not wait for (it stopped; its inputs stalled; or, without a store, its memory
    // could not hold the rest): the file is kept, with what was recorded, and the command says it fell short, and why.
    // The streams whose inputs stalled: in a save of several that kept its end, their files end early.
    let stalled = object.stalledStreams ?? []
    let stalledCut = object.cutShort == .inputStalled || object.cutShort == .diskBehind
    if object.toNanoseconds < started.toNanoseconds || (stalledCut && !stalled.isEmpty) {
        let cut =
            object.toNanoseconds < started.toNanoseconds
            ? "\(what) \(object.id) was cut short at \(formatSeconds(object.toNanoseconds)) instead of "
                + "\(formatSeconds(started.toNanoseconds)): "
            : "\(what) \(object.id) lacks the end of its range for \(stalled.joined(separator: ", ")): "
        switch object.cutShort {
        case .inputStalled:
            let inputs = stalled.isEmpty ? "the recorder's inputs" : "the input of \(stalled.joined(separator: ", "))"
            throw CommandError(
                cut + "no frame came for the end of its range (\(inputs) stalled: it sends nothing, its pipe or "
                    + "device kept open); the file holds what was recorded (check what feeds that input)")
        case .diskBehind:
            let inputs = stalled.isEmpty ? "its streams" : stalled.joined(separator: ", ")
            throw CommandError(
                cut + "the recorder's writes fell behind: \(inputs) went on sending, but no frame reached its memory "
                    + "for the end of its range (dropped as 'spill behind' while the disk was slow); the file holds "
                    + "what was recorded ('rewind status' shows the drops; check the disk)")
        case .noMemory:
            throw CommandError(
                cut + "the recorder, which keeps a save's frames in memory while it waits (it records without a "
                    + "store), had no room for the rest of the post-roll; the file holds what was recorded (give it "
                    + "more --memory, or save less after)")
        case .recorderStopped, nil:
            throw CommandError(
                cut + "the recorder stopped; the file holds what was recorded", status: ExitStatus.unavailable)
        }
    }
    return status ?? ExitStatus.success
}

/// The tracks of a `.mkv` of several streams, in words: `2 streams, a track each`, or `1 track`.
private func trackCount(_ tracks: Int) -> String {
    tracks == 1 ? "1 track" : "\(count(tracks, "stream")), a track each"
}

/// Where the frames of a save or clip came from, as its `--json` document's `source` says it.
enum ExportSource: String {
    /// A running recorder exported them, from its memory and disk.
    case recorder
    /// This command read them from the store on disk.
    case disk
}

/// The document `save --json` and `clip --json` print: the save object as the HTTP API gives it (`GET
/// /v1/saves/ID`; its `id` null for an export made from the disk, which has none), with `source`, `stream_files`
/// (`{stream, file}` for each stream written: its own file, or its track's `.mkv`) and `without_frames` (the streams
/// asked for that had no frame in the range, and got no file or track).
///
/// - Parameters:
///   - object: the finished save (one made alike by ``diskSaveObject(stream:range:format:files:)``).
///   - streams: the streams asked for (of `all` through a recorder: those it records), by which the files of a
///     file per stream (`NAME.STREAM.EXT`) are told apart.
func exportDocument(_ object: SaveObject, source: ExportSource, streams: [String]) -> [String: Any] {
    let files: [(stream: String, file: String)]
    if let tracks = object.tracks, object.files.count == 1 {
        files = tracks.map { ($0, object.files[0]) }
    } else {
        files = object.files.map { file in
            let stream = streams.first { file.hasSuffix(".\($0).\(object.format)") }
            return (stream ?? (streams.count == 1 ? streams[0] : object.stream), file)
        }
    }
    var document = apiObject(object)
    if source == .disk { document["id"] = NSNull() }
    document["source"] = source.rawValue
    document["stream_files"] = files.map { ["stream": $0.stream, "file": $0.file] }
    document["without_frames"] =
        streams.count > 1 ? streams.filter { name in !files.contains { $0.stream == name } } : []
    return document
}

/// A save object for an export this command made from the disk, as a live recorder's finished save reads: `done`,
/// its files (made absolute), and the frames, repeats and bytes they hold together; `id` 0 (it has none).
///
/// - Parameters:
///   - range: the range exported, recorder time.
///   - files: each file as `-o` names it, with what was written to it.
private func diskSaveObject(
    stream: String, range: Range<Int64>, format: ExportFormat, files: [(path: String, summary: ExportSummary)]
) -> SaveObject {
    var object = SaveObject(
        id: 0, state: .done, stream: stream, fromNanoseconds: range.lowerBound, toNanoseconds: range.upperBound,
        format: format.fileExtension, files: files.map { absolutePath($0.path) },
        frames: files.reduce(0) { $0 + $1.summary.writtenFrames }, bytes: files.reduce(0) { $0 + $1.summary.bytes },
        progress: 1)
    object.repeatedFrames = files.reduce(0) { $0 + $1.summary.filledFrames }
    return object
}

/// The gaps where an export's range lost frames (``ClipSource/lostGaps(in:)``, or a live save's `lost`), as a line
/// for its report: `  the range has 1 gap where frames were lost: 1.300s … 2.000s (damaged)`, each gap's stream
/// named when `namingStreams` (`(camera: damaged)`), five at most; nil when there are none.
func lostGapsLine(_ gaps: [GapObject], namingStreams: Bool) -> String? {
    guard !gaps.isEmpty else { return nil }
    // To the nanosecond where two of the times would read alike (gaps of tiny frames at high rates, the gaps of two
    // streams a few ns apart), every time of the line alike.
    let listed = Array(gaps.prefix(5))
    let times = formatSecondsApart(listed.flatMap { [$0.startNanoseconds, $0.endNanoseconds] })
    let shown = listed.indices.map { index in
        "\(times[2 * index]) … \(times[2 * index + 1]) ("
            + (namingStreams ? "\(listed[index].stream): " : "") + "\(listed[index].reason))"
    }
    return "  the range has \(count(gaps.count, "gap")) where frames were lost: " + shown.joined(separator: ", ")
        + (gaps.count > 5 ? ", … (rewind info lists them all)" : "")
}

/// The gaps of an export's range could not be read (the store's index failed): the frames it lost, if any, are
/// unknown. The files written are kept, and the command says so and exits 1 (``reportUnknownLosses(_:command:)``), as
/// an export kept without the end of its range does, so that no report reads as "nothing lost".
struct UnknownLosses: Error, CustomStringConvertible {
    /// Why the gaps could not be read: the store's error, or a live recorder's `lost_unknown`.
    var reason: String
    /// The store's error, when this process read the store itself (for its advice).
    var cause: (any Error)?

    init(_ cause: any Error) {
        reason = "\(cause)"
        self.cause = cause
    }

    init(reason: String) { self.reason = reason }

    var description: String { unknownLossesLine(reason) + "; what was written is kept" }
}

/// `could not read the range's gaps (REASON): frames it lost, if any, are not listed`: what an export's report says
/// in place of its lost gaps (``lostGapsLine(_:namingStreams:)``) when they could not be read.
func unknownLossesLine(_ reason: String) -> String {
    "could not read the range's gaps (\(reason)): frames it lost, if any, are not listed"
}

/// Says on stderr that an export's losses are unknown (``UnknownLosses``), with advice for the store's error; the
/// command then exits with the status this returns, 1.
func reportUnknownLosses(_ unknown: UnknownLosses, command: String) -> Int32 {
    let failure = CommandFailure(unknown, command: command)
    printError(failure.text(command: command, help: ""))
    return failure.status
}

/// Copies what `handle` reads into `target` (named `name` in messages), a MiB at a time; Ctrl-C ends it (130).
private func copy(_ handle: FileHandle, to target: Int32, what: String, name: String) throws {
    // A pipe or FIFO is written without blocking, so an interruption ends the wait for a reader that stopped
    // reading; its own flags are given back after (stdout may be shared with other processes).
    let flags = Interruption.makeNonBlockingIfPipe(target)
    defer { if let flags { _ = fcntl(target, F_SETFL, flags) } }
    while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
        if stopRequested.load(ordering: .relaxed) {
            throw CommandError("interrupted while copying \(what) to \(name)", status: ExitStatus.interrupted)
        }
        try writeAll(chunk, to: target, name: name)
    }
}

/// Whether `path` is a FIFO (following links).
func isFIFO(_ path: String) -> Bool { StagedExport.specialFileKind(path) == "a FIFO" }

/// Runs the export command `run` (`clip`, `save`); when it fails and its `-o` is a FIFO, opens the FIFO without
/// waiting and closes it at once, so that a reader waiting on it gets end of file instead of waiting for ever (as an
/// export from the disk, which opens it first, leaves it). Nothing is opened when nobody reads it.
func lettingTheFIFOsReaderGoOnFailure(_ arguments: ParsedArguments, _ run: (ParsedArguments) throws -> Int32)
    throws -> Int32
{
    do {
        return try run(arguments)
    } catch {
        if let output = arguments.string("output"), output != "-", isFIFO(output) {
            let fd = open(output, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            if fd >= 0 { close(fd) }
        }
        throw error
    }
}

/// Opens the FIFO or device `path` for writing. A FIFO's open waits for a reader: it is tried without blocking every
/// 50 ms (saying once that it waits), so Ctrl-C still ends the command while nobody reads.
///
/// - Parameters:
///   - command: `clip`, `save` or `soak`, for the message that it waits.
///   - what: what is not written when interrupted (`clip 3`, `the export`, `the report`).
/// - Throws: ``CommandError`` when it cannot be opened, or (130) when interrupted while waiting.
func openForWriting(_ path: String, command: String, what: String) throws -> Int32 {
    let isFIFO = isFIFO(path)
    var said = false
    while true {
        let fd = open(path, O_WRONLY | O_CLOEXEC | (isFIFO ? O_NONBLOCK : 0))
        if fd >= 0 {
            // Writes block again: the copy waits for the reader rather than failing when the pipe is full.
            if isFIFO { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) }
            return fd
        }
        let code = errno
        guard isFIFO && (code == ENXIO || code == EINTR) else {
            throw CommandError("cannot open \(path) for writing: \(String(cString: strerror(code)))")
        }
        if stopRequested.load(ordering: .relaxed) {
            throw CommandError(
                "interrupted while waiting for a reader of \(path): \(what) was not written to it",
                status: ExitStatus.interrupted)
        }
        if !said {
            printError("rewind \(command): waiting for a reader of the FIFO \(path) (Ctrl-C gives up)")
            said = true
        }
        System.sleep(for: .milliseconds(50))
    }
}

/// The format an `-o` names by its extension (`-`: YUV4MPEG2 on stdout).
func exportFormat(named output: String) throws -> ExportFormat {
    guard let format = ExportFormat(path: output) ?? (output == "-" ? .y4m : nil) else {
        throw UsageError("-o: '\(output)' must end in .y4m, .mkv or .mp4 (or be - for YUV4MPEG2 on stdout)")
    }
    return format
}

/// ``exportFormat(named:)`` of an `-o` as the command line gave it: a directory is told to take a file name in it
/// before its missing extension is.
func exportFormat(ofOutput output: String) throws -> ExportFormat {
    // As a live recorder refuses it: a name that would not stay one line where it is printed or logged.
    if output.holdsLineBreakingCharacters {
        throw UsageError(
            "-o \(output.debugDescription) holds control characters (newlines, escapes, tabs): name the file "
                + "without them", showsHelp: false)
    }
    try checkNotADirectory(output)
    return try exportFormat(named: output)
}

/// Refuses an output that is a directory (following links): an export, a report, a chart is a file.
///
/// - Parameters:
///   - option: the option that named it (`-o`, `--report`).
///   - example: a file name to suggest in it, with what it says (`clip.mkv (the extension picks the format)`).
/// - Throws: ``UsageError`` saying to name a file in it.
func checkNotADirectory(
    _ output: String, option: String = "-o", example: String = "clip.mkv (the extension picks the format)"
) throws {
    var isDirectory: ObjCBool = false
    guard output != "-", FileManager.default.fileExists(atPath: output, isDirectory: &isDirectory),
        isDirectory.boolValue
    else { return }
    throw UsageError(
        "\(option): '\(output)' is a directory: give a file name in it, e.g. "
            + "\(output.hasSuffix("/") ? output : output + "/")\(example)", showsHelp: false)
}

/// Whether `path` exists and is neither a regular file nor a directory (a FIFO, a device), following links.
func isSpecialFile(_ path: String) -> Bool {
    StagedExport.specialFileKind(path).map { $0 != "a directory" } ?? false
}

/// The line that names the streams an export of `all` to a file per stream wrote no file for (no frames in its
/// range).
func withoutFramesLine(_ names: [String]) -> String {
    "\(count(names.count, "stream")) without frames in the range, no file: \(names.joined(separator: ", "))"
}

/// Whether an export to `path` in `format` is made in a temporary file first and copied into it: an `.mp4` for a
/// FIFO or a device (`ln -s /dev/null x.mp4`), which ffmpeg finishes by seeking back and which is read back to check
/// that it is whole.
func writesThroughAFile(_ path: String, _ format: ExportFormat) -> Bool { format == .mp4 && isSpecialFile(path) }

/// Refuses `--quality` where nothing is encoded: `.y4m` and `.mkv` are always uncompressed and exact.
///
/// - Parameters:
///   - format: the export's format (a save without `-o` makes `.mkv`).
///   - output: `-o` as given; nil when there is none.
/// - Throws: ``UsageError`` naming the format and what to do.
private func checkQuality(_ arguments: ParsedArguments, format: ExportFormat, output: String?) throws {
    guard arguments.isGiven("quality"), let quality = arguments.string("quality"), format != .mp4 else { return }
    let what =
        switch output {
        case "-": "-o - writes YUV4MPEG2"
        case let output?: "'\(output)' is .\(format.fileExtension)"
        case nil: "a save without -o is .mkv"
        }
    throw UsageError(
        "--quality \(quality) sets how .mp4 is encoded, but \(what), which is always uncompressed and exact: drop "
            + "--quality, or give -o NAME.mp4", showsHelp: false)
}

/// `--quality` as given, for a recorder's request (nil when not given: the recorder's default, and no quality for a
/// format that is not encoded).
private func givenQuality(_ arguments: ParsedArguments) -> String? {
    arguments.isGiven("quality") ? arguments.string("quality") : nil
}

/// The `--quality` of a save or clip (`fast` unless given).
private func quality(_ arguments: ParsedArguments) -> ExportQuality {
    arguments.string("quality").flatMap(ExportQuality.init(rawValue:)) ?? .fast
}

/// Exports `range` to the `-o` argument and prints what was written: its lines, or with `json` the document
/// (``exportDocument(_:source:streams:)``).
func export(
    from source: ClipSource, range: Range<Int64>, output: String, quality: ExportQuality = .fast, command: String,
    json: Bool = false
) throws -> Int32 {
    let summary = try writeExport(from: source, range: range, output: output, quality: quality, command: command)
    // Frames the store lost inside the range are not in the file: said, so a clip is never taken for whole; gaps
    // that cannot be read are said to be unknown, never taken for none.
    var gaps: [GapRow]?
    var unknown: UnknownLosses?
    do {
        gaps = try source.lostGaps(in: range)
    } catch {
        unknown = UnknownLosses(error)
    }
    if json {
        // A document for a file with frames only: one without is a failure (below), which prints nothing on stdout.
        guard summary.frames > 0 else { throw nothingLeftToExport }
        let clock = try source.clock()
        var object = diskSaveObject(
            stream: source.streamName,
            range: clock.recorderTime(ofPTS: range.lowerBound)..<clock.recorderTime(ofPTS: range.upperBound),
            format: summary.format, files: [(output, summary)])
        // The pts of its frames, as the line says them (and a live recorder's save of one stream); its losses on the
        // recorder clock, as the API's `lost`.
        object.firstPTSNanoseconds = summary.firstPTSNanoseconds
        object.lastPTSNanoseconds = summary.lastPTSNanoseconds
        object.lost = gaps?.map { GapObject(stream: source.streamName, $0.onRecorderClock(clock)) }
        object.lostUnknown = unknown?.reason
        try printJSON(exportDocument(object, source: .disk, streams: [source.streamName]))
        return unknown.map { reportUnknownLosses($0, command: command) } ?? ExitStatus.success
    }
    let message = describe(summary, destination: output == "-" ? "stdout" : output)
    if output == "-" { printError(message) } else { print(message) }
    if let lost = lostGapsLine((gaps ?? []).map { GapObject(stream: source.streamName, $0) }, namingStreams: false) {
        if output == "-" { printError(lost) } else { print(lost) }
    }
    guard summary.frames > 0 else { throw nothingLeftToExport }
    return unknown.map { reportUnknownLosses($0, command: command) } ?? ExitStatus.success
}

/// The failure of an export that wrote no frame of a range that held some when it was checked.
private var nothingLeftToExport: CommandError {
    // Retention may have deleted the range between the check and the read (an export waiting for a FIFO's reader,
    // before it held anything): nothing written is a failure, not a clip.
    CommandError(
        "no frame of the range was left to export: retention deleted them after the range was checked; clip a later "
            + "range")
}

/// Exports `range` to `output` (a path, a FIFO, a device, or `-`), showing progress on a terminal; prints nothing of
/// what was written.
///
/// - Parameter command: `clip` or `save`, for messages.
/// - Returns: what was written.
/// - Throws: ``CommandError`` when interrupted (130) or when the output cannot be opened; export and store errors.
private func writeExport(
    from source: ClipSource, range: Range<Int64>, output: String, quality: ExportQuality, command: String
) throws -> ExportSummary {
    var destination = ExportDestination(argument: output)
    let format = try exportFormat(named: output)
    var progress = ProgressLine()
    let summary: ExportSummary
    // Interrupted (SIGINT, SIGTERM): the export stops at its next frame and its partial file is removed; a second
    // signal ends this process at once.
    installStopHandlers(interruptsWaits: true)
    // A FIFO is opened here, polling, so that Ctrl-C ends the command while nobody reads it; an .mp4 for a FIFO or a
    // device, whose index ffmpeg writes last (seeking back) and which is read back to check it is whole, goes to a
    // temporary file first and is copied into it.
    var fifo: Int32?
    var staged: String?
    defer {
        if let fifo { close(fifo) }
        if let staged { unlink(staged) }
    }
    if output != "-" && writesThroughAFile(output, format) {
        // NSTemporaryDirectory() ends with a slash.
        staged = NSTemporaryDirectory() + ".rewind-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).mp4"
        destination = .path(staged!)
    } else if output != "-" && isFIFO(output) {
        fifo = try openForWriting(output, command: command, what: "the \(command)")
        destination = .fileDescriptor(FileDescriptor(rawValue: fifo!), name: output)
    }
    do {
        summary = try source.export(range: range, format: format, to: destination, quality: quality) { count, pts in
            if stopRequested.load(ordering: .relaxed) {
                throw CommandError(
                    "interrupted after \(count) frames: the export was stopped; no file was kept",
                    status: ExitStatus.interrupted)
            }
            progress.update("exporting … \(count) frames, pts \(formatSeconds(pts))")
        }
    } catch let error as ExportError {
        progress.clear()
        // The temporary directory unusable: said of the file the user named, not of the one made for it there.
        if staged != nil, case .temporaryDirectoryUnusable = error.reason {
            var named = error
            named.destination = output
            throw named
        }
        // The file made first in the temporary directory found no room there: said of TMPDIR, not of a file the user
        // never named.
        guard staged != nil, case .noRoom(_, let directory, let available, _) = error.reason else { throw error }
        let free = available < 1 << 20 ? "\(available >> 10) KiB" : "\(available >> 20) MiB"
        throw CommandError(
            "\(output): an .mp4 for \(StagedExport.specialFileKind(output) ?? "a file that is not a regular file") is "
                + "made in the temporary directory first and then copied into it, and TMPDIR (\(directory)) has no "
                + "room left for it (\(free) free): free space there, or point TMPDIR at a directory with room "
                + "(TMPDIR=/var/tmp rewind \(command) …)")
    } catch {
        progress.clear()
        throw error
    }
    progress.clear()
    if let staged {
        let handle = FileHandle(forReadingAtPath: staged)
        unlink(staged)
        guard let handle else { throw CommandError("cannot read \(staged), the .mp4 made for \(output)") }
        let target = try openForWriting(output, command: command, what: "the \(command)")
        defer { close(target) }
        try copy(handle, to: target, what: "the \(command)", name: output)
    }
    return summary
}
