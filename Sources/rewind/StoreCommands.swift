import Foundation
import RewindKit

func runInfo(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    let store = try openStoreForReading(directory)
    // One stream (--stream NAME), or the whole store.
    var only: String?
    if let name = arguments.string("stream"), name != "all" {
        only = try selectStream(in: store, named: name).name
    }
    let summary = try store.summary(streamName: only)
    let streams = try store.streams().filter { only == nil || $0.name == only }
    let gaps = try store.gaps(streamName: only)
    let drops = try store.drops(streamName: only).keyedByRawValue
    let segments = try store.segments(streamName: only)
    let totalDrops = drops.values.reduce(0, +)
    // A recorder serving the store: what it holds in memory right now (nil when none runs, or, with --stream, when
    // it does not record that stream).
    var status: StatusResponse?
    var saidNoAnswer = false
    do {
        status = try ControlClient(directory: directory).status()
    } catch let error as ControlError {
        // A recorder that does not answer (stopped with Ctrl-Z, say): what the disk holds, and why only that.
        if case .noAnswer = error {
            printError("rewind info: \(error); showing what the store on disk holds")
            saidNoAnswer = true
        }
    } catch {}
    // A recorder holds the store (its lock) but gave no status: stopped, stuck, or its socket removed. Said, and in
    // the JSON (`recorder`), so a program can tell it from a store nothing records.
    let answered = status != nil
    let recording = answered || SegmentStore.isOpenForRecording(directory: directory)
    if !answered && recording && !saidNoAnswer {
        printError(
            "rewind info: a recorder is recording into \(directory) but does not answer on "
                + "\(directory)/\(RecorderControl.socketName); showing what the store on disk holds")
    }
    if let only, var narrowed = status {
        narrowed.streams = narrowed.streams.filter { $0.stream == only }
        status = narrowed.streams.isEmpty ? nil : narrowed
    }
    let live = status?.streams.first
    let markers = try MarkerBody.list(in: store).filter { only == nil || $0.stream == only }
    let streamNames = Dictionary(streams.map { ($0.id, $0.name) }, uniquingKeysWith: { first, _ in first })
    let setAside = (try? store.setAsideFiles()) ?? []
    let outOfStep = try storeProblems(store, directory: directory, recorderRuns: status != nil)
    // When the frames were captured, by the wall clock, as `--from`/`--to` take it (reading each stream's first and
    // last frame rows also finds rows missing there, before a line is printed): the earliest and latest of every
    // stream, which a clock set back while recording makes other than the first and last frames'.
    var captureTimes: [String: CaptureTimes] = [:]
    for row in streams {
        captureTimes[row.name] = try store.wallTimes(streamName: row.name)
    }
    let earliest = captureTimes.values.map(\.earliest).min()
    let latest = captureTimes.values.map(\.latest).max()
    let wentBack = streams.filter { captureTimes[$0.name]?.wallClockWentBack == true }
    if arguments.flag("json") {
        var object: [String: Any] = [
            "frames": summary.frames, "raw_bytes": summary.rawBytes, "stored_bytes": summary.storedBytes,
            "segments": summary.segments, "drops": totalDrops, "drops_by_reason": drops,
            // In each gap's stream's own pts, named (the streams' objects have their gaps too).
            "gaps": gaps.map {
                [
                    "start_ns": $0.startNanoseconds, "end_ns": $0.endNanoseconds, "reason": $0.reason.rawValue,
                    "stream": streamNames[$0.streamID] ?? "",
                ] as [String: Any]
            },
            "open_segments": segments.filter { $0.state == .open }.count,
            "streams": try streams.map {
                try streamJSON($0, store: store, walls: captureTimes[$0.name], live: status)
            },
            "wall_clock_went_back": !wentBack.isEmpty,
        ]
        object["earliest_wall_ns"] = earliest.map { $0 as Any } ?? NSNull()
        object["latest_wall_ns"] = latest.map { $0 as Any } ?? NSNull()
        object["first_pts_ns"] = summary.firstPTS.map { $0 as Any } ?? NSNull()
        object["last_pts_ns"] = summary.lastPTS.map { $0 as Any } ?? NSNull()
        object["live"] = status.map(liveJSON) ?? NSNull()
        object["recorder"] = answered ? "answering" : recording ? "not answering" as Any : NSNull()
        object["markers"] = markers.map(apiObject)
        object["set_aside"] = setAside.map { ["file": $0.name, "bytes": $0.bytes] as [String: Any] }
        object["problems"] = outOfStep.lines
        try printJSON(object)
        return try adviseOnProblems(outOfStep)
    }
    print("store \(directory)")
    for row in streams {
        let stream = row.description
        let rate = rateText(frameDuration: stream.frameDuration)
        var line = "  stream \(row.name): \(stream.layout) \(rate), colour \(stream.color)"
        if !stream.shapeDescription.isEmpty { line += ", \(stream.shapeDescription)" }
        if streams.count > 1 || only != nil {
            let own = try store.summary(streamName: row.name)
            line += "; \(count(own.frames, "frame"))"
            if let first = own.firstPTS, let last = own.lastPTS {
                line += ", pts \(formatSeconds(first)) … \(formatSeconds(last))"
                if let clock = try store.clock(of: row), clock.offsetNanoseconds != 0 {
                    line += " (recorder time \(formatSeconds(clock.recorderTime(ofPTS: first))) … "
                    line += "\(formatSeconds(clock.recorderTime(ofPTS: last))))"
                }
            }
        }
        print(line)
    }
    // Several streams: their pts lie on different clocks, so the span is on the recorder clock they share.
    var span = summary.firstPTS.flatMap { first in summary.lastPTS.map { (first, $0) } }
    if streams.count > 1, span != nil {
        span = nil
        for row in streams {
            let own = try store.summary(streamName: row.name)
            guard let first = own.firstPTS, let last = own.lastPTS else { continue }
            let clock = try store.clock(of: row) ?? .identity
            let (start, end) = (clock.recorderTime(ofPTS: first), clock.recorderTime(ofPTS: last))
            span = (min(span?.0 ?? start, start), max(span?.1 ?? end, end))
        }
    }
    if let (first, last) = span {
        let clock = streams.count > 1 ? "recorder time" : "pts"
        print("  time span: \(clock) \(formatSeconds(first)) … \(formatSeconds(last)) (\(formatSeconds(last - first)))")
    } else {
        print("  time span: no frames yet")
    }
    if let earliest, let latest {
        // The earliest and latest capture times, whichever frames have them: a range from the first frame's to the
        // last's would run backwards after the clock was set back.
        print(
            "  wall clock: \(SegmentStore.utcText(earliest, iso8601: true)) … "
                + "\(SegmentStore.utcText(latest, iso8601: true))"
                + (wentBack.isEmpty ? "" : " (the earliest and latest capture times)"))
        for row in wentBack {
            guard let times = captureTimes[row.name] else { continue }
            print(
                "    the wall clock went back between frames of '\(row.name)' (it was set back during or between "
                    + "its recordings): its first frame was captured at "
                    + "\(SegmentStore.utcText(times.first, iso8601: true)), its last at "
                    + "\(SegmentStore.utcText(times.last, iso8601: true)); --from/--to count wall-clock times from "
                    + "that of recorder time 0 (clock_wall_ns in --json), not by capture times")
        }
        // A stream placed on the recorder clock away from its capture times (recorded after the clock was set back,
        // or after a recording faster than real time): --from/--to find its frames where the clock places them.
        for row in streams {
            let own = try store.summary(streamName: row.name)
            guard let times = captureTimes[row.name], let clock = try store.clock(of: row), let first = own.firstPTS,
                let last = own.lastPTS
            else { continue }
            let placed = clock.wallNanoseconds(ofPTS: first)
            let apart = placed.subtractingSaturating(times.first)
            guard apart.magnitude >= 1_000_000_000 else { continue }
            print(
                "    '\(row.name)' is found by --from/--to at \(SegmentStore.utcText(placed, iso8601: true)) … "
                    + "\(SegmentStore.utcText(clock.wallNanoseconds(ofPTS: last), iso8601: true)) "
                    + "on the recorder clock, \(formatSeconds(Int64(clamping: apart.magnitude))) \(apart > 0 ? "after" : "before") its "
                    + "capture times (the wall clock was set back before it was recorded, or an earlier recording "
                    + "ran faster than real time)")
        }
    }
    let ratio = summary.rawBytes > 0 ? Double(summary.storedBytes) / Double(summary.rawBytes) : 0
    let open = segments.filter { $0.state == .open }.count
    // Open with no recorder holding the store: a recorder that was killed left it, to be sealed when the store is
    // next opened for writing; or a repair stopped while it salvaged, whose new segment only a repair finishes.
    let repairLeftOpen = (try? store.unfinishedRepair()) != nil
    let leftOpen =
        open > 0 && status == nil && !SegmentStore.isOpenForRecording(directory: directory)
        ? (repairLeftOpen
            ? ", left by a repair or a recorder that was stopped before it finished: 'rewind verify --repair' seals it"
            : ", left by a recorder that was stopped without sealing: the next 'rewind record' or 'rewind verify "
                + "--repair' seals it") : ""
    print("  frames: \(summary.frames) in \(count(summary.segments, "segment")) (\(open) open\(leftOpen))")
    print(
        "  bytes: \(formatBytes(summary.rawBytes)) raw, \(formatBytes(summary.storedBytes)) stored "
            + "(\(String(format: "%.3f", ratio)) of raw)")
    print(
        "  drops: \(totalDrops)"
            + (drops.isEmpty
                ? ""
                : " ("
                    + drops.sorted { $0.key < $1.key }
                    .map { "\($0.key): \($0.value)" }.joined(separator: ", ") + ")"))
    print("  gaps: \(gaps.count)")
    for gap in gaps.prefix(20) {
        // With several streams, each gap says whose it is (its times are that stream's pts).
        let whose = streams.count > 1 ? streamNames[gap.streamID].map { "stream \($0): " } ?? "" : ""
        print(
            "    \(whose)\(formatSeconds(gap.startNanoseconds)) … \(formatSeconds(gap.endNanoseconds)): "
                + gap.reason.rawValue)
    }
    if gaps.count > 20 { print("    … \(gaps.count - 20) more (see --json)") }
    if !setAside.isEmpty {
        // Out of the store, but on its disk: the owner decides what becomes of them.
        print(
            "  set aside by repairs (not part of the store; look at, move or delete them): "
                + setAside.map { "segments/\($0.name) (\(formatBytes($0.bytes)))" }.joined(separator: ", "))
    }
    if !markers.isEmpty {
        print("  markers: \(markers.count)")
        for marker in markers.prefix(20) {
            print("    " + describe(marker))
        }
        if markers.count > 20 { print("    … \(markers.count - 20) more (see rewind markers)") }
    }
    if let live {
        var line = "  live recorder: \(count(live.memoryFrames, "frame")) in memory"
        if let first = live.memoryFirstPTSNanoseconds, let last = live.memoryLastPTSNanoseconds {
            line += " (pts \(formatSeconds(first)) … \(formatSeconds(last)))"
        }
        line += ", \(formatBytes(Int64(live.memoryBytes))) of \(formatBytes(Int64(live.memoryBudgetBytes))); "
        line += "\(count(Int(live.framesAccepted), "frame")) accepted, \(live.framesDurable) durable; "
        line += "memory pressure \(live.pressure) (\(count(live.pressureChanges, "change")))"
        print(line)
        if let streams = status?.streams, streams.count > 1 {
            for stream in streams {
                var streamLine = "    stream \(stream.stream): \(count(stream.memoryFrames, "frame")) in memory"
                if let first = stream.memoryFirstPTSNanoseconds, let last = stream.memoryLastPTSNanoseconds {
                    streamLine += " (pts \(formatSeconds(first)) … \(formatSeconds(last)))"
                }
                streamLine +=
                    ", \(formatBytes(Int64(stream.memoryBytes))) of its \(formatBytes(Int64(stream.memoryBudgetBytes)))"
                streamLine += "; \(stream.framesAccepted) accepted, \(stream.framesDurable) durable"
                let drops = stream.drops.values.reduce(0, +)
                if drops > 0 { streamLine += ", \(drops) dropped" }
                if let error = stream.inputError {
                    streamLine += "; input failed: \(error)"
                } else if let ended = stream.inputEnded {
                    streamLine += "; input ended (\(ended))"
                }
                print(streamLine)
            }
        }
    }
    if !outOfStep.lines.isEmpty {
        print("  problems: \(outOfStep.lines.count)")
        for problem in outOfStep.lines { print("    \(problem)") }
    }
    return try adviseOnProblems(outOfStep)
}

/// What `info` finds out of step between the index and `segments/` from a listing of the directory.
struct OutOfStep {
    /// One line per problem: segment files the index holds frames in that are gone, and (while no recorder writes
    /// the store) files the index does not know, whose frames the figures leave out.
    var lines: [String] = []
    /// Whether frames the index holds are out of reach (files gone, the index of another store): a repair counts
    /// them lost. Without, the index has only files to take in, which a repair (or the next `record`) indexes.
    var losesFrames = false
    /// Whether only a repair takes the frames in (a repair's salvage that was stopped: recording does not redo it).
    var needsRepair = false

    /// What to do, for a command that found them (`recorderRuns`: a repair waits for the recorder to stop).
    func advice(recorderRuns: Bool) -> String {
        let repair =
            recorderRuns ? "stop the recorder, then run 'rewind verify --repair'" : "run 'rewind verify --repair'"
        guard losesFrames else {
            return "\(repair)\(needsRepair ? "" : " (or record into the store again)") to index their frames"
        }
        return "put back what is missing, or \(repair) to index the files again and count the frames of missing ones "
            + "as lost"
    }

    /// The problems, the first in full: `the index and the files in segments/ disagree (…)`.
    var summary: String? {
        guard let first = lines.first else { return nil }
        let more = lines.count > 1 ? " and \(count(lines.count - 1, "more problem"))" : ""
        return losesFrames
            ? "the index and the files in segments/ disagree (\(first)\(more))"
            : "segments/ holds frames the index does not list yet (\(first)\(more))"
    }
}

/// - Throws: what listing `segments/` or reading the index failed with (no descriptor left, say): a store that could
///   not be checked is not reported whole.
private func storeProblems(_ store: SegmentStore, directory: String, recorderRuns: Bool) throws -> OutOfStep {
    // Files and rows that do not match are then all of them: the index is the one to set right.
    if let foreign = try? store.foreignIndexProblem() { return OutOfStep(lines: ["\(foreign)"], losesFrames: true) }
    let (missing, unindexed) = try store.segmentFilesOutOfStep()
    var problems = OutOfStep(
        lines: missing.map { "segments/\($0.fileName) is missing: the index has \(count($0.frames, "frame")) in it" },
        losesFrames: !missing.isEmpty)
    let unfinishedRepair = try store.unfinishedRepair()
    if let segment = unfinishedRepair {
        problems.lines.append(
            "a repair of segments/\(segment) was stopped before it finished: the frames after its damage that it had "
                + "not salvaged yet are left out (a 'damaged' gap covers them)")
        problems.needsRepair = true
    }
    if !recorderRuns && !SegmentStore.isOpenForRecording(directory: directory) {
        problems.lines += unindexed.map { name in
            // The open segment of a recorder (or of a repair's salvage) that stopped before its first frames reached
            // the index (killed, or the machine went down): its frames are whole up to where it stopped.
            guard name.hasSuffix(SegmentFormat.partialSuffix) else {
                return "segments/\(name) is not in the index: its frames are left out"
            }
            return "segments/\(name) is not in the index: "
                + (unfinishedRepair == nil
                    ? "a recorder stopped before indexing it"
                    : "a recorder or the repair stopped before indexing it") + ", and its frames are left out"
        }
        // The open segment of a recorder that stopped between two syncs: its newest frames are in the file only.
        problems.lines += try store.framesPastIndex().map { tail in
            let (first, last) = formatSecondsApart(tail.firstPTS, tail.lastPTS)
            return "segments/\(tail.fileName) holds \(count(tail.frames, "frame")) past the last the index lists (pts "
                + "\(first) … \(last)): a recorder stopped before indexing them, and they are left out"
        }
    }
    return problems
}

/// Advice for a command that found too few frames in `directory`, when the index and `segments/` disagree (files
/// the index lost, or files gone): nil when they agree, or the store cannot be opened.
func outOfStepAdvice(_ directory: String) -> String? {
    guard let store = try? SegmentStore.openReadOnly(directory: directory) else { return nil }
    return outOfStepCheck(store, directory: directory)?.advice
}

/// What ``outOfStepAdvice(_:)`` says, with the exit status it calls for: 1, or 71 when the check itself ran out of
/// file descriptors (the process's limit, with what to raise).
private func outOfStepCheck(_ store: SegmentStore, directory: String) -> (advice: String, status: Int32)? {
    // A recorder holds the store's lock while it records (a socket left by one that was killed says nothing).
    let recorderRuns = SegmentStore.isOpenForRecording(directory: directory)
    let problems: OutOfStep
    do {
        problems = try storeProblems(store, directory: directory, recorderRuns: recorderRuns)
    } catch {
        guard !CommandFailure.isOutOfDescriptors(error) else {
            return (
                "segments/ could not be checked against the index (\(error)): " + raiseDescriptorsToCheck,
                ExitStatus.systemLimit
            )
        }
        return (
            "segments/ could not be checked against the index (\(error)): run 'rewind verify' once that is fixed",
            ExitStatus.failure
        )
    }
    guard let summary = problems.summary else { return nil }
    return (summary + ": " + problems.advice(recorderRuns: recorderRuns), ExitStatus.failure)
}

/// What to do when a check after an export found no descriptor left.
private let raiseDescriptorsToCheck =
    "raise the limit on open files (ulimit -n 1024, systemd's LimitNOFILE=) and run 'rewind verify'"

/// The exit status of a save or clip that wrote its file and ended with `status` (from the disk, or through a
/// recorder): 1, said with the advice, when the index and `segments/` disagree (the file may then lack frames the
/// store holds: files the index lost, a repair left unfinished), or when the store's markers, which a `.mkv` carries
/// as chapters (an export never fails for them), could not be read; 71 when a check found no descriptor left. A
/// check skipped for that is never taken for a store in order.
func checkedExport(_ directory: String, command: String, format: ExportFormat, _ status: Int32) -> Int32 {
    // Written (with 1, its losses unknown: said already), and checked as any file written.
    guard status == ExitStatus.success || status == ExitStatus.failure else { return status }
    let store: SegmentStore
    do {
        store = try SegmentStore.openReadOnly(directory: directory)
    } catch {
        // No store to check (a recorder that keeps its frames in memory only), unless the open found no descriptor.
        guard CommandFailure.isOutOfDescriptors(error) else { return status }
        printError(
            "rewind \(command): the file written may lack frames of the range: the store could not be opened to check "
                + "it (\(error)): " + raiseDescriptorsToCheck)
        return ExitStatus.systemLimit
    }
    var checked = status
    if let (advice, status) = outOfStepCheck(store, directory: directory) {
        printError("rewind \(command): the file written may lack frames of the range: \(advice)")
        checked = status
    }
    if format == .matroska {
        do {
            _ = try MarkerBody.list(in: store)
        } catch {
            let outOfDescriptors = CommandFailure.isOutOfDescriptors(error)
            printError(
                "rewind \(command): the store's markers could not be read (\(error)), so the file has no chapters: "
                    + (outOfDescriptors
                        ? raiseDescriptorsToCheck
                        : "run 'rewind verify --repair', which rebuilds them from markers.journal, and export again"))
            checked = outOfDescriptors ? ExitStatus.systemLimit : max(checked, ExitStatus.failure)
        }
    }
    return checked
}

/// The exit status of an `info` that found `problems`: 1, with advice on stderr, when there are any.
private func adviseOnProblems(_ problems: OutOfStep) throws -> Int32 {
    guard !problems.lines.isEmpty else { return ExitStatus.success }
    let what =
        problems.losesFrames
        ? "the index and the files in segments/ disagree" : "segments/ holds frames the index does not list yet"
    printError(
        "rewind info: \(what) (\(count(problems.lines.count, "problem"))): run 'rewind verify' for the details, and "
            + (problems.losesFrames
                ? "'rewind verify --repair' to index the files again and count the frames of missing ones as lost"
                : "'rewind verify --repair'\(problems.needsRepair ? "" : " (or record into the store again)") to index "
                    + "their frames"))
    return ExitStatus.failure
}

/// One stream for `info --json`: what it is, what the store holds of it (pts, wall-clock times, bytes, segments,
/// drops, gaps), its place on the recorder clock, and what a live recorder holds of it in memory.
private func streamJSON(_ row: StreamRow, store: SegmentStore, walls: CaptureTimes?, live: StatusResponse?) throws
    -> [String: Any]
{
    let stream = row.description
    let summary = try store.summary(streamName: row.name)
    let clock = try store.clock(of: row)
    var object: [String: Any] = [
        "name": row.name, "format": stream.layout.format.name, "width": stream.layout.width,
        "height": stream.layout.height, "frame_duration_value": stream.frameDuration.value,
        "frame_duration_timescale": Int(stream.frameDuration.timescale),
        "fps": Double(stream.frameDuration.timescale) / Double(stream.frameDuration.value),
        "color_matrix": stream.color.matrix.name, "color_range": stream.color.range.name,
        "chroma_siting": stream.chromaSiting.name,
        "pixel_aspect": stream.pixelAspect.ratio ?? NSNull(),
        "frames": summary.frames, "raw_bytes": summary.rawBytes, "stored_bytes": summary.storedBytes,
        "segments": summary.segments,
        "drops": try store.drops(streamName: row.name).keyedByRawValue,
        "gaps": try store.gaps(streamName: row.name).map {
            ["start_ns": $0.startNanoseconds, "end_ns": $0.endNanoseconds, "reason": $0.reason.rawValue]
                as [String: Any]
        },
    ]
    func value(_ number: Int64?) -> Any { number.map { $0 as Any } ?? NSNull() }
    object["first_pts_ns"] = value(summary.firstPTS)
    object["last_pts_ns"] = value(summary.lastPTS)
    object["first_wall_ns"] = value(walls?.first)
    object["last_wall_ns"] = value(walls?.last)
    object["earliest_wall_ns"] = value(walls?.earliest)
    object["latest_wall_ns"] = value(walls?.latest)
    object["wall_clock_went_back"] = walls?.wallClockWentBack ?? false
    object["clock_offset_ns"] = value(clock?.offsetNanoseconds)
    object["clock_wall_ns"] = value(clock?.wallNanoseconds)
    object["first_time_ns"] = value(summary.firstPTS.flatMap { pts in clock.map { $0.recorderTime(ofPTS: pts) } })
    object["last_time_ns"] = value(summary.lastPTS.flatMap { pts in clock.map { $0.recorderTime(ofPTS: pts) } })
    let memory = live?.streams.first { $0.stream == row.name }
    object["memory_frames"] = memory?.memoryFrames ?? 0
    object["memory_bytes"] = memory?.memoryBytes ?? 0
    object["memory_budget_bytes"] = memory?.memoryBudgetBytes ?? 0
    object["memory_first_pts_ns"] = value(memory?.memoryFirstPTSNanoseconds)
    object["memory_last_pts_ns"] = value(memory?.memoryLastPTSNanoseconds)
    object["live"] = memory != nil
    return object
}

/// A live recorder's status for `info --json`: the keys of its first stream in `GET /v1/status`, and every stream
/// under `streams`.
private func liveJSON(_ status: StatusResponse) -> Any {
    func object(_ stream: StreamStatus) -> [String: Any] {
        var object = apiObject(stream)
        object["name"] = stream.stream  // as the store's `streams` entries name it
        return object
    }
    var first = status.streams.first.map(object) ?? [:]
    first["streams"] = status.streams.map(object)
    return first
}

/// `value` in its API encoding (the keys the API's answers have), for `--json` output put together as a dictionary.
func apiObject(_ value: some Encodable) -> [String: Any] {
    ((try? JSONSerialization.jsonObject(with: JSONEncoder().encode(value))) as? [String: Any]) ?? [:]
}

/// What `verify --json` prints when the check could not run (its command line refused too): not clean, and why.
func verifyFailureDocument(_ message: String, repaired: [String] = []) -> [String: Any] {
    [
        "clean": false, "segments": 0, "frames": 0, "damaged": [Any](), "problems": [message], "repaired": repaired,
        "salvage": [Any](), "error": message,
    ]
}

func runVerify(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    let repair = arguments.flag("repair")
    var movedIndex: (path: String, why: String)?
    var (store, report, only): (SegmentStore, VerifyReport, String?)
    do {
        // Neither an index nor segment files: nothing to check or to rebuild an index from.
        try requireStore(directory)
        if !repair && SegmentStore.isOpenForRecording(directory: directory) {
            // While a recorder writes, the open segment grows, retention deletes files and the index moves on between
            // reads: a check would report damage that is not there.
            throw SegmentStoreError.storeLocked(directory: directory)
        }
        (store, report, only) = try openAndVerify(
            directory: directory, repair: repair, stream: arguments.string("stream"), movedIndex: &movedIndex)
    } catch  where arguments.flag("json") {
        // A program reading the JSON gets a document whatever failed: not clean, and why (stderr says it too).
        try printJSON(
            verifyFailureDocument("\(error)", repaired: movedIndex.map { ["moved \($0.why) to \($0.path)"] } ?? []))
        throw error
    }
    if repair {
        // Report what was repaired, then the state the store is in now.
        var repaired = store.recovery.repaired + report.repaired
        if let movedIndex {
            // The rebuild itself says what could not come back.
            repaired.insert(
                "moved \(movedIndex.why) to \(movedIndex.path) and rebuilt it from the segment files", at: 0)
        }
        let salvage = store.recovery.salvage + report.salvage
        // What the repair could not do (a salvage without room, a file it could not seal) comes first: the check
        // after it only sees the result.
        let failed = report.problems
        report = try store.verify(repair: false, streamName: only)
        report.repaired = repaired
        report.salvage = salvage
        report.problems = failed + report.problems.filter { !failed.contains($0) }
    }
    if arguments.flag("json") {
        try printJSON([
            "clean": report.clean, "segments": report.segments, "frames": report.frames,
            "damaged": report.damaged.map {
                // A damaged file header or footer is no frame's.
                [
                    "segment": $0.segment, "frame": $0.frame >= 0 ? $0.frame : NSNull(), "offset": $0.offset,
                    "message": $0.message,
                ] as [String: Any]
            },
            "problems": report.problems, "repaired": report.repaired,
            "salvage": report.salvage.map(salvageJSON),
        ])
    } else {
        print("verified \(count(report.segments, "segment")), \(count(report.frames, "frame")) in \(directory)")
        for damage in report.damaged { print("  damaged: \(damage.message)") }
        for problem in report.problems { print("  problem: \(problem)") }
        for fix in report.repaired { print("  repaired: \(fix)") }
        if report.clean {
            print("clean")
        } else {
            print(repair ? "not clean after repair: see the lines above" : "not clean: run 'rewind verify --repair'")
        }
    }
    return report.clean ? ExitStatus.success : ExitStatus.failure
}

/// Opens the store (for a repair, recovering it) and checks or repairs it, one stream's segments when `stream`
/// names one. A repair that finds the index damaged, when the store opens or later while it checks, or the index of
/// other segment files, keeps that index aside (`movedIndex`: where, and what it was) and starts again on one
/// rebuilt from the segment files, from which the index is derived.
private func openAndVerify(
    directory: String, repair: Bool, stream: String?, movedIndex: inout (path: String, why: String)?
) throws -> (SegmentStore, VerifyReport, String?) {
    do {
        let store =
            try repair ? SegmentStore.open(directory: directory) : SegmentStore.openReadOnly(directory: directory)
        var only: String?
        if let stream, stream != "all" { only = try selectStream(in: store, named: stream).name }
        return (store, try store.verify(repair: repair, streamName: only), only)
    } catch
        where repair && movedIndex == nil && SegmentStoreError.indexDamage(error) != nil
        && !isAnotherProgramsDatabase(error, directory: directory)
    {
        movedIndex = (try moveIndexAside(in: directory, as: "damaged"), SegmentStoreError.indexDamage(error)!)
        return try openAndVerify(directory: directory, repair: repair, stream: stream, movedIndex: &movedIndex)
    } catch SegmentStoreError.foreignIndex(_, let segments, _) where repair && movedIndex == nil {
        movedIndex = (
            try moveIndexAside(in: directory, as: "foreign"),
            "the index of other segment files (\(count(segments, "segment")), none of them in segments/)"
        )
        return try openAndVerify(directory: directory, repair: repair, stream: stream, movedIndex: &movedIndex)
    }
}

/// Whether `error` says the index has tables no migration of a store made while nothing else in `directory` is a
/// store's: another program's database, which a repair must not move aside to make an empty store in its place.
private func isAnotherProgramsDatabase(_ error: any Error, directory: String) -> Bool {
    guard case SegmentStoreError.index(_, .unrecordedSchema(nil), _) = error else { return false }
    return !SegmentStore.holdsStoreFiles(directory: directory)
}

/// One damaged segment's lost and salvaged frames, for `verify --json`.
private func salvageJSON(_ salvage: SegmentSalvage) -> [String: Any] {
    [
        "segment": salvage.segment, "kept_frames": salvage.keptFrames, "lost_frames": salvage.lostFrameCount,
        "lost": salvage.lost.map { lost -> [String: Any] in
            [
                "first_frame": lost.firstFrame, "last_frame": lost.lastFrame, "count": lost.count,
                "first_pts_ns": lost.firstPTS.map { $0 as Any } ?? NSNull(),
                "last_pts_ns": lost.lastPTS.map { $0 as Any } ?? NSNull(),
                "previous_pts_ns": lost.previousPTS.map { $0 as Any } ?? NSNull(),
                "next_pts_ns": lost.nextPTS.map { $0 as Any } ?? NSNull(), "counted_before": lost.countedBefore,
            ]
        },
        "usable_frames": salvage.usableFrames, "salvaged_frames": salvage.salvagedFrames,
        "already_stored_frames": salvage.alreadyStoredFrames, "salvaged_into": salvage.salvagedInto,
        "failure": salvage.failure.map { $0 as Any } ?? NSNull(),
    ]
}

/// Renames `DIR/index.sqlite` (and its WAL files) to `index.sqlite.WHY-<unix seconds>` (`damaged`, `foreign`);
/// returns the new path.
private func moveIndexAside(in directory: String, as why: String) throws -> String {
    let manager = FileManager.default
    // One per second by name; a second one within that second gets a number after it.
    var target = "\(directory)/index.sqlite.\(why)-\(Int(Date().timeIntervalSince1970))"
    let base = target
    var number = 1
    while ["", "-wal", "-shm"].contains(where: { manager.fileExists(atPath: target + $0) }) {
        number += 1
        target = "\(base)-\(number)"
    }
    try manager.moveItem(atPath: "\(directory)/index.sqlite", toPath: target)
    for suffix in ["-wal", "-shm"] where manager.fileExists(atPath: "\(directory)/index.sqlite\(suffix)") {
        try manager.moveItem(atPath: "\(directory)/index.sqlite\(suffix)", toPath: target + suffix)
    }
    return target
}
