import Foundation
import RewindKit
import RewindSoak

/// `rewind soak`: a camera-like load under memory pressure, thermal frame-rate drops and disk faults, with every
/// invariant checked; a summary on stdout, `--report` JSON and `--chart` SVG. Exit 0 when every invariant held,
/// 1 when one failed (named on stderr), 64 for usage errors.
func runSoak(_ arguments: ParsedArguments) throws -> Int32 {
    let duration = try arguments.duration("duration")!
    try RecorderError.checkWallClock()
    let (width, height) = try arguments.convert("size") { text throws(ValueError) in try Values.dimensions(text) }!
    let frameDuration = try arguments.convert("fps") { text throws(ValueError) in try Values.frameRate(text) }!
    let noiseText = arguments.string("noise")!
    guard let noise = Double(noiseText), noise >= 0, noise <= 8 else {
        throw UsageError("--noise: '\(noiseText)' is not a noise level from 0 to 8 (8-bit code values)")
    }
    let layout: FrameLayout
    do {
        layout = try FrameLayout(format: .nv12, width: width, height: height)
    } catch {
        throw UsageError("--size: \(error)")
    }
    if let problem = SyntheticCamera.sizeProblem(width: width, height: height) {
        throw UsageError("--size: \(problem)")
    }
    let events: [SoakEvent]
    do {
        events = try SoakEvent.parseList(arguments.string("events") ?? "", duration: duration)
    } catch {
        throw UsageError("--events: \(error)")
    }
    let diskBudget = try arguments.size("disk")!
    let requestedStore = arguments.string("store")
    if let requestedStore {
        // A recorder's store is never empty: that it runs there is what to say (69, as for record and demo).
        if recorderIsRunning(on: requestedStore) {
            throw CommandError(
                "a recorder is running on '\(requestedStore)'; a soak records into a fresh store: give another --store",
                status: ExitStatus.unavailable)
        }
        try checkEmpty(requestedStore)
        try makeStoreParents(requestedStore)
    }
    if requestedStore == nil { removeStoresOfEndedSoaks() }
    let directory =
        requestedStore ?? NSTemporaryDirectory() + "rewind-soak-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    // The temporary store's path has the limit a --store has (SQLite opens its index only within 512 bytes).
    if requestedStore == nil, let full = tooLongStorePath(directory) {
        throw UsageError(
            "the temporary store \(full) is \(full.utf8.count) bytes long, more than a store's path may be "
                + "(\(SegmentStore.longestDirectoryPath) bytes): set a shorter TMPDIR, or give --store DIR",
            showsHelp: false)
    }
    defer { if requestedStore == nil { try? FileManager.default.removeItem(atPath: directory) } }
    let configuration = SoakConfiguration(
        layout: layout, frameDuration: frameDuration, duration: duration,
        speed: SoakConfiguration.Speed(rawValue: arguments.string("speed")!)!,
        memoryBudget: try arguments.size("memory")!, window: try arguments.duration("window")!,
        diskBudget: diskBudget == 0 ? nil : diskBudget, noise: noise, events: events, storeDirectory: directory,
        sabotage: arguments.string("sabotage").flatMap(SoakConfiguration.Sabotage.init(rawValue:)))
    do {
        try configuration.validate()
    } catch {
        // A value wrong by itself (the message starts with its option) gets the usage line; values that each hold
        // but cannot work together, nothing more (the whole help buried what to give).
        throw UsageError("\(error)", showsHelp: error.description.hasPrefix("--"))
    }
    try checkAddressSpaceFits(memoryBudget: configuration.memoryBudget, command: "the soak")

    // Where the report and chart go must be writable before the soak runs, not only when it ends; two files.
    if arguments.string("report") == "-" || arguments.string("chart") == "-" {
        throw UsageError(
            "--\(arguments.string("report") == "-" ? "report" : "chart"): '-' is no file here (the summary is on "
                + "stdout): give a file, or /dev/stdout for the report alone", showsHelp: false)
    }
    if let report = arguments.string("report"), let chart = arguments.string("chart"), isSameFile(report, chart),
        !isSpecialFile(report)
    {
        throw UsageError(
            "--report and --chart both name \(report): the chart would replace the report; give two files",
            showsHelp: false)
    }
    for option in ["report", "chart"] {
        guard let path = arguments.string(option), !isSpecialFile(path) else { continue }
        let example = option == "report" ? "soak.json" : "soak.svg"
        guard !path.isEmpty else {
            throw UsageError("--\(option): the file name is empty: give one, e.g. \(example)", showsHelp: false)
        }
        try checkNotADirectory(path, option: "--\(option)", example: example)
        // `nodir/`, `r.json/`: a directory's name, which only the write at the end would find missing.
        guard !path.hasSuffix("/") else {
            throw UsageError(
                "--\(option): '\(path)' ends in '/', a directory's name: give a file, e.g. \(path)\(example)",
                showsHelp: false)
        }
        var isDirectory: ObjCBool = false
        let parent = URL(fileURLWithPath: System.followingLinks(path)).deletingLastPathComponent().path
        guard FileManager.default.fileExists(atPath: parent, isDirectory: &isDirectory), isDirectory.boolValue,
            access(parent, W_OK) == 0
        else {
            throw UsageError(
                "--\(option): cannot write \(path): \(parent) is not a writable directory", showsHelp: false)
        }
    }

    installStopHandlers()
    var progress = ProgressLine()
    var report = try Soak.run(
        configuration, shouldStop: { stopRequested.load(ordering: .relaxed) },
        progress: { state in
            progress.update(
                "soak \(state.phase.rawValue) … pts \(formatSeconds(state.streamNanoseconds)) of \(formatSeconds(duration)), "
                    + "\(state.framesProduced) frames, \(state.framesDropped) dropped, "
                    + "RSS \(formatBytes(Int64(state.rssBytes)))")
        })
    progress.clear()
    report.keptStore = requestedStore

    // The summary first: a report that cannot be written does not take the run's result with it.
    printSummary(
        report, store: requestedStore, reportPath: arguments.string("report"), chart: arguments.string("chart"))
    if let path = arguments.string("report") {
        try writeWhole(try report.jsonData(), to: path, command: "soak", what: "the report")
    }
    if let path = arguments.string("chart") {
        try writeWhole(Data(SoakChart.svg(report).utf8), to: path, command: "soak", what: "the chart")
    }
    guard report.failedInvariants.isEmpty else {
        printError("rewind soak: failed: " + report.failedInvariants.joined(separator: ", "))
        return ExitStatus.failure
    }
    // Stopped early: what ran held, but it is not the run asked for (events due later never happened).
    if report.endReason == .stopped {
        let applied = Set(report.events.map { "\($0.at):\($0.event)" })
        let missed = events.filter { !applied.contains("\($0.at):\($0.action)") }
        printError(
            "rewind soak: stopped after \(formatSeconds(report.streamNanoseconds)) of \(formatSeconds(duration)) of "
                + "stream time: not a whole run"
                + (missed.isEmpty ? "" : "; events never applied: " + missed.map(\.description).joined(separator: ", "))
        )
        return ExitStatus.interrupted
    }
    return ExitStatus.success
}

/// Removes the temporary stores (`rewind-soak-PID-N`) of soaks that ended without removing theirs (killed, or a
/// second Ctrl-C): their process is gone.
private func removeStoresOfEndedSoaks() {
    let temporary = NSTemporaryDirectory()
    for name in (try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? [] {
        let parts = name.split(separator: "-")
        guard name.hasPrefix("rewind-soak-"), parts.count == 4, let pid = pid_t(parts[2]), System.hasEnded(pid: pid)
        else { continue }
        try? FileManager.default.removeItem(atPath: temporary + name)
    }
}

/// Refuses a `--store` that already holds anything: a soak accounts for every frame of a fresh store.
private func checkEmpty(_ directory: String) throws {
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) else { return }
    guard isDirectory.boolValue, (try? FileManager.default.contentsOfDirectory(atPath: directory))?.isEmpty == true
    else {
        throw UsageError("--store: '\(directory)' is not an empty directory; a soak records into a fresh store")
    }
}

/// Whether `a` and `b` name one file: the same device and inode when both exist (hard links too), else the same
/// path once links are followed and `.`, `..` and the working directory are resolved.
private func isSameFile(_ a: String, _ b: String) -> Bool {
    var first = stat()
    var second = stat()
    if stat(a, &first) == 0 && stat(b, &second) == 0 {
        return first.st_dev == second.st_dev && first.st_ino == second.st_ino
    }
    let resolved = { (path: String) in URL(fileURLWithPath: System.followingLinks(path)).standardizedFileURL.path }
    return resolved(a) == resolved(b)
}

/// "1 copy", "2 copies".
private func copies(_ value: Int) -> String { "\(value) \(value == 1 ? "copy" : "copies")" }

private func printSummary(_ report: SoakReport, store: String?, reportPath: String?, chart: String?) {
    let configuration = report.configuration
    let bytes = { (value: Int) in formatBytes(Int64(value)) }
    let rate = { (value: Double) in (value < 0 ? "-" : "") + formatBytes(Int64(abs(value).rounded())) + "/s" }
    print(
        "soak \(report.verdict): \(configuration.layout) at \(describeRate(configuration.frameDuration)) fps, "
            + "\(configuration.speed.rawValue) speed, \(formatSeconds(report.streamNanoseconds)) of stream time in "
            + "\(formatSeconds(report.wallNanoseconds)) (\(report.endReason.rawValue))")
    // Real time that could not keep up (a slow machine, a debug build): events came late, and the load was lighter.
    if let sabotage = configuration.sabotage {
        print("  sabotage: \(sabotage.rawValue), breaking one invariant on purpose")
    }
    if report.pacingFellBehind {
        // Behind by the end, or stalled in the middle (a frame offered late, then the rest in a burst).
        let stalled = report.latestFrameNanoseconds > report.lateFrameLimitNanoseconds
        let how =
            stalled
            ? "a frame was offered \(formatSeconds(report.latestFrameNanoseconds)) after its time, \(formatSeconds(report.wallNanoseconds)) for "
            : "\(formatSeconds(report.wallNanoseconds)) for "
        print(
            "  warning: real-time pacing fell behind (\(how)\(formatSeconds(report.streamNanoseconds)) of stream time)"
                + (report.events.isEmpty
                    ? ": the load was lighter than asked" + (stalled ? " or came in a burst" : "")
                    : ": events were applied late (see below)"))
    }
    var memory =
        "  memory: max RSS \(bytes(report.maxRSSBytes)), limit \(bytes(report.limitBytes)) "
        + "(\(configuration.memoryLimitTerms)); slope "
    memory += report.rssSlopeBytesPerSecond.map(rate) ?? "not measured"
    memory += " (limit \(rate(report.rssSlopeLimitBytesPerSecond))), \(report.sampleCount) samples"
    print(memory)
    print(
        "  frames: \(report.framesProduced) produced (\(report.framesSkippedByCamera) skipped by the camera), "
            + "\(report.framesAccepted) accepted, \(report.framesVerified) verified bit-exact "
            + "(\(copies(report.copiesVerifiedFromDisk)) from disk, \(report.copiesVerifiedFromMemory) from memory), "
            + "\(report.framesLost) lost, \(report.corruptFrames) corrupt")
    let drops = report.drops.values.reduce(0, +)
    let gaps = report.gaps.values.reduce(0, +)
    print(
        "  drops: \(drops)\(describe(report.drops.keyedByRawValue)); gaps: \(gaps)\(describe(report.gaps.keyedByRawValue)); "
            + "store: \(count(report.segments, "segment")), \(formatBytes(report.storedBytes)) for "
            + "\(formatBytes(report.rawBytes)) raw")
    if !report.events.isEmpty {
        print("  events:")
        for event in report.events {
            var line =
                "    \(formatSeconds(event.at)) \(event.event), applied at \(formatSeconds(event.wallNanoseconds)): "
                + "RSS \(bytes(event.rssBeforeBytes)) → \(bytes(event.rssBytes))"
            if let limit = event.reducedLimitBytes {
                line += ", ≤ \(bytes(limit)) "
                line +=
                    event.shedNanoseconds.map { String(format: "after %.1f ms", Double($0) / 1e6) } ?? "not reached"
            }
            print(line)
        }
    }
    print("  invariants:")
    for invariant in report.invariants {
        print("    \(invariant.passed ? "ok    " : "FAILED") \(invariant.name): \(invariant.detail)")
    }
    for problem in report.problems.prefix(5) { print("  problem: \(problem)") }
    if let lastError = report.lastError { print("  last write error: \(lastError)") }
    var files: [String] = []
    if let reportPath { files.append("report \(reportPath)") }
    if let chart { files.append("chart \(chart)") }
    files.append(store.map { "store \($0)" } ?? "store removed (keep it with --store DIR)")
    print("  " + files.joined(separator: ", "))
}

/// ` (a: 1, b: 2)`, or nothing when empty.
private func describe(_ counts: [String: Int]) -> String {
    guard !counts.isEmpty else { return "" }
    return " (" + counts.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + ")"
}
