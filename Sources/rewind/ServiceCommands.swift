import Foundation
import RewindKit
import RewindSoak

/// The client of a running recorder serving `directory`, or a failure saying none runs there, or that the one
/// recording there does not answer (exit 69).
private func requireRecorder<Answer>(_ directory: String, _ call: (ControlClient) throws -> Answer?) throws -> Answer {
    guard let answer = try call(ControlClient(directory: directory)) else {
        if SegmentStore.isOpenForRecording(directory: directory) { throw unansweringRecorder(directory) }
        throw CommandError(
            "no recorder is running on \(directory) (no answer on \(directory)/\(RecorderControl.socketName)); "
                + "start one with 'rewind record --store \(directory)'",
            status: ExitStatus.unavailable)
    }
    return answer
}

/// The failure of a command that needs the recorder recording into `directory`, which holds the store's lock but
/// took no connection on its socket (exit 69). `instead` says what the command does not do for it.
func unansweringRecorder(_ directory: String, instead: String = "") -> CommandError {
    CommandError(
        "a recorder is recording into \(directory), but no answer came on "
            + "\(directory)/\(RecorderControl.socketName) (it records without its API, its socket was removed, "
            + "or it is short of memory or threads)\(instead); try again, or see what it printed when it started",
        status: ExitStatus.unavailable)
}

func runStatus(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    let status = try requireRecorder(directory) { try $0.status() }
    if arguments.flag("json") {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try writeAll(try encoder.encode(status) + Data("\n".utf8), to: STDOUT_FILENO)
        return ExitStatus.success
    }
    print("recorder on \(directory)\(status.stopping ? " (stopping)" : "")")
    for stream in status.streams {
        var line = "  stream \(stream.stream): \(stream.layout)"
        if stream.frameDurationValue > 0, let timescale = Int32(exactly: stream.frameDurationTimescale), timescale > 0 {
            line += " " + rateText(frameDuration: FrameTime(value: stream.frameDurationValue, timescale: timescale))
        }
        line += "; \(count(stream.memoryFrames, "frame")) in memory"
        if let first = stream.memoryFirstPTSNanoseconds, let last = stream.memoryLastPTSNanoseconds {
            line += " (pts \(formatSeconds(first)) … \(formatSeconds(last)))"
        }
        print(line)
        print(
            "    memory \(formatBytes(Int64(stream.memoryBytes))) of \(formatBytes(Int64(stream.memoryBudgetBytes))), "
                + "pressure \(stream.pressure); \(count(Int(stream.framesAccepted), "frame")) accepted, "
                + "\(stream.framesDurable) durable")
        let drops = stream.drops.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
        print(
            "    drops: \(stream.drops.values.reduce(0, +))"
                + (drops.isEmpty ? "" : " (\(drops.joined(separator: ", ")))"))
        if let error = stream.inputError {
            print("    input failed: \(error)")
        } else if let ended = stream.inputEnded {
            print("    input ended (\(ended))")
        } else if stream.inputStalled, let idle = stream.inputIdleNanoseconds {
            print("    input stalled: no frame for \(formatSeconds(idle)) (check what feeds it)")
        }
    }
    print("  saves: \(status.savesWaiting) waiting, \(status.savesExporting) exporting")
    if let line = processLine(status) { print(line) }
    if let bytes = status.diskBytes, let segments = status.segments {
        print(
            "  disk: \(formatBytes(bytes)) in \(count(segments, "segment file"))"
                + (status.diskBudgetBytes.map { " of a \(formatBytes(Int64($0))) budget" } ?? " (no --disk budget)"))
    }
    return ExitStatus.success
}

/// The recorder process's memory against its limit (the budget in force plus the allowance the soak holds it to),
/// and what of it the heap and the index hold; nil from a recorder that does not say.
private func processLine(_ status: StatusResponse) -> String? {
    guard let resident = status.residentBytes, let budget = status.memoryBudgetBytes else { return nil }
    let allowance = SoakConfiguration.processAllowance
    let limit = budget > Int.max - allowance ? Int.max : budget + allowance  // a budget near 2⁶³ (--memory 8EiB)
    var line =
        "  process: resident \(formatBytes(Int64(resident))) "
        + (resident <= limit ? "within" : "OVER") + " its limit of \(formatBytes(Int64(limit))) (budget "
        + "\(formatBytes(Int64(budget))) + \(formatBytes(Int64(SoakConfiguration.processAllowance))))"
    if let heap = status.heapBytes {
        line += "; heap \(formatBytes(Int64(heap)))"
        if let index = status.indexMemoryBytes { line += ", of it the index \(formatBytes(Int64(index)))" }
    }
    return line
}

func runEvents(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    installStopHandlers()
    var failure: (any Error)?
    let served = try ControlClient(directory: directory).events(after: arguments.string("since")) { name, data, id in
        // Unbuffered: a reader of a pipe sees each event as it happens.
        do {
            let idField = id.map { ",\"id\":\"\($0)\"" } ?? ""
            try writeAll(Data("{\"event\":\"\(name)\"\(idField),\"data\":\(data)}\n".utf8), to: STDOUT_FILENO)
        } catch {
            failure = error
            return false
        }
        return !stopRequested.load(ordering: .relaxed)
    }
    if let failure { throw failure }
    guard served else {
        _ = try requireRecorder(directory) { _ in String?.none }
        return ExitStatus.unavailable
    }
    // Ended by Ctrl-C or SIGTERM (130, as a follower is), or by the recorder's own stream ending (0).
    return stopRequested.load(ordering: .relaxed) ? ExitStatus.interrupted : ExitStatus.success
}

func runMark(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    if case .failure(let problem) = MarkerRequest.checkedLabel(arguments.string("label")!) {
        // `--label must be …`: the message starts with its option, so the usage line alone follows.
        let message = problem.message
        throw UsageError(message.hasPrefix("label ") ? "--" + message : "--label: " + message)
    }
    let hold = arguments.string("hold")
    if hold != nil && (arguments.string("hold-before") != nil || arguments.string("hold-after") != nil) {
        throw UsageError(
            "--hold holds as much before as after: give it, or --hold-before and --hold-after", showsHelp: false)
    }
    var held: MarkerRequest.Hold?
    if hold != nil || arguments.string("hold-before") != nil || arguments.string("hold-after") != nil {
        held = MarkerRequest.Hold(
            before: hold ?? arguments.string("hold-before"), after: hold ?? arguments.string("hold-after"))
    }
    // An unknown stream is a usage error naming the store's streams, as for save and clip. The recorder's list
    // (every stream of its store, recorded or not) first: the index need not be readable (its -wal deleted under
    // the recorder) for a request the recorder answers.
    if let name = arguments.string("stream"), name != "all" {
        let live = try askRecorder({ try ControlClient(directory: directory).streams() })
        if let live, !live.streams.contains(where: { $0.name == name }) {
            let names = live.streams.map(\.name).joined(separator: ", ")
            throw UsageError("--stream: no stream '\(name)' in the store; it has: \(names) (or --stream all)")
        }
        if live == nil, FileManager.default.fileExists(atPath: directory + "/index.sqlite") {
            _ = try selectStreams(in: try SegmentStore.openReadOnly(directory: directory), named: name)
        }
        // A stream of the store that the running recorder does not record (a camera of an earlier run): a marker
        // needs one being recorded, as a post-roll save does.
        if let live, live.streams.contains(where: { $0.name == name && !$0.recording }) {
            throw CommandError(
                "the recorder running on \(directory) does not record \(name): a marker needs a recorder recording the "
                    + "stream", status: ExitStatus.unavailable)
        }
    }
    // No --stream on a recorder of several streams: choose, as save and clip ask (`all` marks each).
    if arguments.string("stream") == nil,
        let live = try askRecorder({ try ControlClient(directory: directory).streams() })
    {
        let recorded = live.streams.filter(\.recording).map(\.name)
        if recorded.count > 1 {
            throw UsageError(
                "the recorder records several streams (\(recorded.joined(separator: ", "))): choose one with --stream "
                    + "NAME, or --stream all for a marker on each")
        }
    }
    // A time without a zone is this shell's local time, wherever the recorder runs.
    let request = MarkerRequest(
        label: arguments.string("label")!,
        at: try arguments.string("at").map { at in
            try arguments.naming("at") {
                try TimeSpec.withLocalZone(at, firstWallNanoseconds: firstWallNanoseconds(ofStore: directory))
            }
        },
        stream: arguments.string("stream"), hold: held)
    let flags = [
        "at": "--at", "hold.before": hold != nil ? "--hold" : "--hold-before",
        "hold.after": hold != nil ? "--hold" : "--hold-after",
    ]
    let list = try requireRecorder(directory) { client in try namingFlags(flags) { try client.mark(request) } }
    // A command that fails leaves nothing behind: markers whose line (or document) could not be written (a full disk,
    // a reader gone) are taken back, as a save is, so that a script retrying it does not mark twice.
    signal(SIGPIPE, SIG_IGN)
    do {
        if arguments.flag("json") {
            // The answer of `POST /v1/markers`: the markers made, one per stream.
            try printJSON(apiObject(list))
        } else {
            try writeAll(Data(list.markers.map { "marked " + describe($0) + "\n" }.joined().utf8), to: STDOUT_FILENO)
        }
    } catch let error as CommandError {
        let client = ControlClient(directory: directory)
        for marker in list.markers { _ = try? client.unmark(id: marker.id) }
        throw CommandError("\(error.description); the marker was taken back", status: error.status)
    }
    return ExitStatus.success
}

func runMarkers(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    let store = try openStoreForReading(directory)
    let markers = try MarkerBody.list(in: store)
    if arguments.flag("json") {
        try printJSON(["markers": markers.map(apiObject)])
        return ExitStatus.success
    }
    if markers.isEmpty { print("no markers in \(directory)") }
    for marker in markers { print(describe(marker)) }
    return ExitStatus.success
}

func runUnmark(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    let id = Int64(try arguments.integer("id", in: 1...Int.max)!)
    // A running recorder owns the store (and its lock); otherwise the store is changed directly.
    let removed: MarkerBody
    if let answer = try ControlClient(directory: directory).unmark(id: id) {
        removed = answer
    } else {
        try requireStore(directory)
        let store = try SegmentStore.open(directory: directory)
        guard let row = try store.removeMarker(id: id) else {
            throw CommandError("no marker \(id) in \(directory); 'rewind markers' lists them")
        }
        removed = try MarkerBody(row, in: store)
    }
    // The marker is gone whether or not its line (or document) can be written: a failure says so, so that a script
    // does not take it for a marker still there.
    signal(SIGPIPE, SIG_IGN)
    do {
        if arguments.flag("json") {
            // The answer of `DELETE /v1/markers/ID`: the marker removed.
            try printJSON(apiObject(removed))
        } else {
            try writeAll(Data(("deleted " + describe(removed) + "\n").utf8), to: STDOUT_FILENO)
        }
    } catch let error as CommandError {
        throw CommandError("\(error.description); marker \(id) was deleted all the same", status: error.status)
    }
    return ExitStatus.success
}

/// "marker 3 at 12.500s (camera): goal; holds 2.500s … 22.500s", times on the recorder clock (what `--from`
/// takes).
func describe(_ marker: MarkerBody) -> String {
    var text = "marker \(marker.id) at \(formatSeconds(marker.atNanoseconds)) (\(marker.stream)): \(marker.label)"
    if let from = marker.holdFromNanoseconds, let to = marker.holdToNanoseconds {
        // Both ends included, as `--hold` gives them: the last instant held, not the exclusive end, which read the
        // same for a hold reaching a frame and one ending a nanosecond before it.
        text += "; holds \(formatSeconds(from)) … \(formatSeconds(to - 1))"
    }
    return text
}
