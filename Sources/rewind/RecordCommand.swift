import Foundation
import RewindKit
import Synchronization

/// A parsed `--input` argument.
enum InputSpec {
    case synthetic(width: Int, height: Int, frameDuration: FrameTime)
    case y4mFile(String)
    case standardInput

    /// Parses `synthetic[:WxH[@FPS]]`, `y4m:PATH` or `-`.
    init(parsing text: String) throws(UsageError) {
        if text == "-" {
            self = .standardInput
        } else if text.hasPrefix("y4m:") && text.count > 4 {
            self = .y4mFile(String(text.dropFirst(4)))
        } else if text == "synthetic" || text.hasPrefix("synthetic:") {
            var width = 1920
            var height = 1080
            var duration = FrameTime(value: 1, timescale: 60)
            if text.hasPrefix("synthetic:") {
                let spec = text.dropFirst("synthetic:".count)
                let parts = spec.split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false)
                do {
                    (width, height) = try Values.dimensions(String(parts[0]))
                    if parts.count == 2 { duration = try Values.frameRate(String(parts[1])) }
                } catch {
                    throw UsageError("--input: \(error) (synthetic[:WxH@FPS], e.g. synthetic:1280x720@30)")
                }
                if let problem = SyntheticCamera.sizeProblem(width: width, height: height) {
                    throw UsageError("--input: \(problem)", showsHelp: false)
                }
            }
            self = .synthetic(width: width, height: height, frameDuration: duration)
        } else {
            // A bare file name is the likeliest slip: say how to name it.
            let hint =
                text.lowercased().hasSuffix(".y4m") || FileManager.default.fileExists(atPath: text)
                ? "; for a YUV4MPEG2 file write y4m:\(text)" : ""
            throw UsageError(
                "--input: '\(text)' is not synthetic[:WxH@FPS], y4m:PATH or - (YUV4MPEG2 on stdin)\(hint)")
        }
    }
}

/// One `--input [NAME=]SOURCE` argument: the stream's name and its source.
struct NamedInput {
    var name: String
    var spec: InputSpec
    /// The argument as given, for messages.
    var argument: String

    /// Whether `name` is a stream name: 1 to 64 of `a-z`, `0-9`, `_` and `-`, and not `all` (which selects every
    /// stream).
    static func isValidName(_ name: String) -> Bool {
        name != "all" && (1...64).contains(name.utf8.count)
            && name.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
                    || byte == UInt8(ascii: "-")
            }
    }

    /// What a stream name may be, in words: `all` is kept for every stream (`--stream all`).
    static let nameRule = "1 to 64 of a-z, 0-9, _ and -; 'all' names every stream"

    /// Parses every `--input`: `NAME=SOURCE`, or `SOURCE` named `defaultName` (`--stream`); names are checked,
    /// unique, and at most one input reads stdin.
    static func parse(_ arguments: [String], defaultName: String) throws(UsageError) -> [NamedInput] {
        guard isValidName(defaultName) else {
            throw UsageError("--stream: '\(defaultName)' is not a stream name (\(nameRule))")
        }
        var inputs: [NamedInput] = []
        for argument in arguments {
            var name = defaultName
            var source = argument
            // NAME=SOURCE: a name never holds ':' or '/', so `y4m:a=b.y4m` stays a path.
            if let equals = argument.firstIndex(of: "="), !argument[..<equals].contains(":"),
                !argument[..<equals].contains("/")
            {
                name = String(argument[..<equals])
                source = String(argument[argument.index(after: equals)...])
                guard isValidName(name) else {
                    throw UsageError(
                        "--input \(argument): '\(name)' is not a stream name (\(nameRule))")
                }
            }
            inputs.append(NamedInput(name: name, spec: try InputSpec(parsing: source), argument: argument))
        }
        var seen: Set<String> = []
        for input in inputs where !seen.insert(input.name).inserted {
            let unnamed = inputs.filter { !$0.argument.hasPrefix(input.name + "=") }.count > 1
            throw UsageError(
                "two inputs are named '\(input.name)'"
                    + (unnamed ? " (an input without NAME= is named by --stream)" : "")
                    + ": give each its own name, e.g. --input front=synthetic --input rear=y4m:rear.y4m")
        }
        let stdinInputs = inputs.filter { if case .standardInput = $0.spec { true } else { false } }
        guard stdinInputs.count <= 1 else {
            throw UsageError(
                "inputs \(stdinInputs.map { "'\($0.name)'" }.joined(separator: " and ")) both read stdin (-): "
                    + "at most one input can; give the others y4m:PATH (a file or a named pipe)")
        }
        return inputs
    }
}

/// The free space `--disk` keeps on the file system unless `--min-free` says otherwise: 256 MiB, about 80 raw
/// 1080p frames, small enough for a small disk and enough to absorb a burst while retention deletes.
let defaultMinimumFree = 256 << 20

/// An opened input, with how its record loop reads it.
private struct OpenedInput {
    var name: String
    var source: any FrameSource
    var loop: RecordLoopOptions
}

/// A source that can go to the thread reading it (each input is read by a thread of its own).
private final class SourceBox: @unchecked Sendable {
    var source: any FrameSource
    init(_ source: any FrameSource) { self.source = source }
}

func runRecord(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    try RecorderError.checkWallClock()
    let inputs = try NamedInput.parse(arguments.strings("input"), defaultName: arguments.string("stream") ?? "camera")
    if arguments.isGiven("stream"), let stream = arguments.string("stream"),
        inputs.allSatisfy({ $0.argument.hasPrefix($0.name + "=") })
    {
        throw UsageError(
            "--stream \(stream) names an input given without NAME=, but every --input has its own name: drop --stream "
                + "or the input's NAME=", showsHelp: false)
    }
    let spill = SpillPolicy(rawValue: arguments.string("spill")!)!
    let storeOptions = ["disk", "min-free", "max-age", "segment", "backpressure"]
    if spill == .off, let option = storeOptions.first(where: { arguments.isGiven($0) }) {
        throw UsageError(
            "--\(option) is about writing to the store on disk, but --spill off writes nothing there: drop "
                + "--\(option), or record to disk (--spill eager)", showsHelp: false)
    }
    var configuration = RecorderConfiguration(
        window: try arguments.duration("window")!, memoryBudget: try arguments.size("memory")!, spill: spill)
    configuration.streamName = inputs[0].name
    if let policy = arguments.string("backpressure") {
        configuration.backpressure = BackpressurePolicy(rawValue: policy)!
    }
    var options = StoreOptions()
    options.diskBudget = try arguments.size("disk")
    if options.diskBudget == 0 {
        throw UsageError("--disk 0 keeps nothing; give a budget such as 20GiB, or leave --disk out for no limit")
    }
    options.minimumFreeBytes = try arguments.size("min-free") ?? options.diskBudget.map { _ in defaultMinimumFree }
    if let age = try arguments.duration("max-age") {
        guard age > .zero else { throw UsageError("--max-age must be longer than 0s") }
        options.maxAge = age
    }
    var segment = try arguments.duration("segment")!
    // Shorter segments would make a file (and its seal, sync and rows) per frame or two.
    guard segment >= .milliseconds(100) else {
        throw UsageError("--segment must be at least 100ms (a file every few frames at least; the default is 60s)")
    }
    // Retention deletes a segment whole once it is older than --max-age after its seal: its first frame lives up to a
    // segment longer. A segment as long as the age would keep frames twice as long as asked; a default one is
    // shortened to a quarter of the age, one given is refused.
    if let age = options.maxAge, segment >= age {
        let ageText = age < .milliseconds(1) ? "\(age.nanosecondsClamped)ns" : formatSeconds(age)
        // No segment is shorter than 100 ms: an age no longer than that cannot be kept to.
        guard age > .milliseconds(100) else {
            throw UsageError(
                "--max-age \(ageText) is not longer than the shortest segment a store writes (100ms): retention "
                    + "deletes a segment whole, so frames would stay longer than asked; give a --max-age above 100ms",
                showsHelp: false)
        }
        let quarter = max(.milliseconds(100), age / 4)
        guard !arguments.isGiven("segment") else {
            throw UsageError(
                "--max-age \(ageText) is not longer than --segment \(formatSeconds(segment)): retention "
                    + "deletes a segment whole once it is older than --max-age, so frames would stay up to a segment "
                    + "longer than asked; give --segment \(roundedUpDuration(quarter.nanosecondsClamped)) (a quarter "
                    + "of --max-age, at least 100ms)", showsHelp: false)
        }
        segment = quarter
    }
    options.segmentMaxDuration = segment
    let pacing: RecordLoopOptions.Pacing = arguments.flag("realtime") ? .realtime : .asFastAsPossible
    let duration = try arguments.duration("duration")
    if let duration, duration <= .zero { throw UsageError("--duration must be longer than 0s") }
    let followsPressure = arguments.string("memory-pressure")! == "auto"
    let listen = try listenOptions(arguments, directory: directory)
    let allowedHosts = arguments.strings("allow-host")
    for given in allowedHosts where RecorderControl.hostName(given) == nil {
        throw UsageError(
            "--allow-host: \(given.debugDescription) is not a host name: give one name alone, as a browser sends "
                + "it, without a port, scheme or wildcard (e.g. --allow-host camera.example.com; a name in "
                + "another script in its xn-- form)")
    }

    // From here on a stop signal stops the recording cleanly, also while the inputs are opened, the store recovered
    // and the ring's memory set up: the recording then ends before its first frame and says so.
    installStopHandlers(
        secondSignalNote:
            "rewind record: stopped at once by a second signal: frames accepted but not yet written are lost (the "
            + "next recording into the store marks the stretch 'recorder stopped'), and saves not yet finished are "
            + "not written")
    let (opened, withoutHeader) = try openInputs(inputs, pacing: pacing, duration: duration)
    try checkDiskFits(opened.map(\.source.stream), options, given: arguments.string("disk"))
    try checkFloorFits(options, directory: directory, given: arguments.string("min-free") != nil)
    let status = try record(
        opened, directory: directory, configuration: configuration, options: options,
        followsPressure: followsPressure, listen: listen, allowedHosts: allowedHosts)
    // The inputs left out: each is a loss of this run, as a stalled input is.
    for name in withoutHeader {
        printError(
            "rewind record: stream '\(name)' was not recorded: its input sent no Y4M header within "
                + "\(inputHeaderTimeout.components.seconds) s of the other inputs' (start its producer first, or "
                + "record it in a run of its own)")
    }
    return withoutHeader.isEmpty || status != ExitStatus.success ? status : ExitStatus.failure
}

/// How long inputs that have sent their Y4M header wait for the others' before recording starts without them.
let inputHeaderTimeout = Duration.seconds(5)

/// Opens every input, each file or pipe on a thread of its own (its open and header read block until its producer
/// writes), so that one whose producer has not started holds up no other stream for long: once an input is ready,
/// the others have ``inputHeaderTimeout`` to send their headers, and recording starts without those that did not.
///
/// - Returns: the opened inputs, in the order given, and the names of those left out.
/// - Throws: the first error of an input that failed to open (an empty input, a bad header) before recording
///   starts: nothing is recorded then.
private func openInputs(_ inputs: [NamedInput], pacing: RecordLoopOptions.Pacing, duration: Duration?) throws
    -> (opened: [OpenedInput], withoutHeader: [String])
{
    let results = Mutex<[Int: Result<SourceBox, any Error>]>([:])
    let done = DispatchSemaphore(value: 0)
    for (index, input) in inputs.enumerated() {
        let open: @Sendable () throws -> any FrameSource = {
            switch input.spec {
            case .synthetic(let width, let height, let frameDuration):
                let layout = try FrameLayout(format: .nv12, width: width, height: height)
                return SyntheticCamera(layout: layout, frameDuration: frameDuration)
            case .y4mFile(let path): return try Y4MReader(path: path)
            case .standardInput: return try Y4MReader(fileDescriptor: .standardInput)
            }
        }
        if case .synthetic = input.spec {
            results.withAnnotatedLock { $0[index] = Result { SourceBox(try open()) } }
            done.signal()
            continue
        }
        try Threads.start(named: "rewind-open-\(input.name)") {
            let result = Result { SourceBox(try open()) }
            results.withAnnotatedLock { $0[index] = result }
            done.signal()
        }
    }
    var firstReady: ContinuousClock.Instant?
    var saidWaiting = false
    var start = ContinuousClock.now
    // A pause of the whole process is no wait of the inputs': the allowances move on by it (an input whose header
    // came during the pause was dropped as late).
    var watch = PauseWatch()
    while true {
        _ = done.wait(timeout: .now() + .milliseconds(100))
        if let paused = watch.look() {
            start += paused
            firstReady = firstReady.map { $0 + paused }
        }
        let finished = results.withAnnotatedLock { $0 }
        // The first failure in input order, as the inputs were opened one after the other before.
        for index in inputs.indices {
            if case .failure(let error)? = finished[index] { throw error }
        }
        let ready = finished.count
        if ready == inputs.count { break }
        let pending = inputs.indices.filter { finished[$0] == nil }.map { "'\(inputs[$0].name)'" }
            .joined(separator: ", ")
        if stopRequested.load(ordering: .relaxed) {
            throw CommandError(
                "stopped while waiting for the Y4M header of input \(pending): nothing was recorded",
                status: ExitStatus.interrupted)
        }
        let now = ContinuousClock.now
        if ready > 0 {
            firstReady = firstReady ?? now
            if now - firstReady! >= inputHeaderTimeout { break }
        } else if let duration, now - start >= duration + inputStallTimeout {
            // No input sent anything for as long as the recording was to last, and the stall allowance after it:
            // ended as a stalled input is, so a scripted run ends.
            throw CommandError(
                "no Y4M header from input \(pending) within the --duration of \(formatSeconds(duration)) and "
                    + "\(inputStallTimeout.components.seconds) s more (its producer never sent one, or a FIFO nobody "
                    + "opened): nothing was recorded")
        }
        if !saidWaiting && now - start >= .seconds(2) {
            printError(
                "rewind record: waiting for the Y4M header of input \(pending)"
                    + (ready > 0
                        ? "; recording starts without it after \(inputHeaderTimeout.components.seconds) s" : ""))
            saidWaiting = true
        }
    }
    let finished = results.withAnnotatedLock { $0 }
    var opened: [OpenedInput] = []
    var withoutHeader: [String] = []
    for (index, input) in inputs.enumerated() {
        guard case .success(let box)? = finished[index] else {
            withoutHeader.append(input.name)
            continue
        }
        // Paced by --realtime, an input is a live camera: it never waits for the disk (drops instead).
        opened.append(
            OpenedInput(
                name: input.name, source: box.source, loop: RecordLoopOptions(pacing: pacing, duration: duration)))
    }
    if !withoutHeader.isEmpty {
        printError(
            "rewind record: no Y4M header from input \(withoutHeader.map { "'\($0)'" }.joined(separator: ", ")) "
                + "within \(inputHeaderTimeout.components.seconds) s of the others': recording the other streams "
                + "without it")
    }
    return (opened, withoutHeader)
}

private func record(
    _ inputs: [OpenedInput], directory: String, configuration: RecorderConfiguration, options: StoreOptions,
    followsPressure: Bool, listen: RecorderControl.Listen?, allowedHosts: [String]
) throws -> Int32 {
    let specs = inputs.map { RecorderStreamSpec(name: $0.name, stream: $0.source.stream) }
    try checkMemoryFits(specs.map(\.stream), configuration)
    try checkMemoryFitsCgroup(configuration)
    try checkAddressSpaceFits(memoryBudget: configuration.memoryBudget, command: "the recorder")
    try checkOpenFileLimit()
    // (A recorder holding the store is left to the open, which says so.)
    if configuration.spill == .off || !SegmentStore.isOpenForRecording(directory: directory) {
        try checkNoOtherRecorderServes(directory)
    }
    // A stream of another format is refused before the store is opened for writing, whose recovery would already
    // change it (the check is made again after it, on what recovery left).
    // (A store another recorder holds is left to the open, which says so.)
    if configuration.spill != .off, !SegmentStore.isOpenForRecording(directory: directory),
        let existing = try? SegmentStore.openReadOnly(directory: directory)
    {
        try checkStreamsMatch(specs, store: existing, directory: directory)
    }
    // A new store's missing parent directories are made, as the control's socket and the token make them.
    if configuration.spill != .off { try makeStoreParents(directory) }
    let store = configuration.spill == .off ? nil : try SegmentStore.open(directory: directory, options: options)
    let entries = store.map { StoreEntryIdentities(store: $0) }
    if let store {
        if !store.recovery.repaired.isEmpty {
            printError("recovered the store: " + store.recovery.repaired.joined(separator: "; "))
        }
        // What recovery left as it was (a file that is not this store's, one damaged for a repair): recording goes
        // on beside it.
        for problem in store.recovery.problems { printError("rewind record: store problem: \(problem)") }
        try checkStreamsMatch(specs, store: store, directory: directory)
        try unmarkAsDemo(store)
        if let budget = options.diskBudget, let held = markersHeldBytes(store), held >= Int64(budget) {
            printError(
                "rewind record: warning: markers' holds keep \(formatBytes(held)) on disk, as much as --disk "
                    + "\(formatBytes(Int64(budget))) or more: retention will delete each new segment once it is sealed; "
                    + "delete a marker ('rewind markers', 'rewind unmark --store DIR --id ID') or give a larger --disk")
        }
        if let budget = options.diskBudget, let warning = futureHoldWarning(store, budget: budget) {
            printError(warning)
        }
    }
    // Each stream's newest stored pts before this recording: its frames all come after it.
    var storedBefore: [String: Int64] = [:]
    for spec in specs {
        if let last = try? store?.summary(streamName: spec.name).lastPTS { storedBefore[spec.name] = last }
    }
    let recorder = try Recorder(streams: specs, store: store, configuration: configuration)
    if recorder.clockLeadNanoseconds > 0 {
        let lead = formatSeconds(recorder.clockLeadNanoseconds)
        printError(
            "rewind record: warning: the store's recordings end \(lead) after now on the wall clock (recorded faster "
                + "than real time, or the wall clock was set back since): this recording comes after them, \(lead) "
                + "ahead of the wall clock, so a wall-clock time (--from 12:00:00) finds what it records \(lead) later")
    }
    // The HTTP API on DIR/rewind.sock (and --listen): saves, markers, status, events; SIGUSR1 saves the whole
    // window into DIR/exports/.
    var control: RecorderControl?
    do {
        // The recorder's exports never write a FIFO or device in place: one nobody reads would block its export
        // threads, and with them cancels and the stop (clients copy to such files themselves).
        StagedExport.refuseSpecialFiles()
        control = try RecorderControl(
            recorder: recorder, directory: directory, listen: listen, allowedHosts: allowedHosts
        ) { result, object, isClip in
            switch result {
            case .success(let summary):
                // The log is the only report of a SIGUSR1 save: a save that fell short says so.
                var cut = ""
                if let object, let reason = object.cutShort {
                    let streams = object.stalledStreams?.joined(separator: ", ")
                    let why =
                        switch reason {
                        case .inputStalled: streams.map { "the input of \($0) stalled" } ?? "input stalled"
                        case .diskBehind: "the disk fell behind" + (streams.map { " (\($0))" } ?? "")
                        default: reason.rawValue.replacingOccurrences(of: "_", with: " ")
                        }
                    cut = " (short of its end: \(why))"
                }
                printError(
                    (isClip ? "exported a clip: " : "saved: ")
                        + describe(summary, destination: summary.path ?? "a client")
                        + cut)
                // Frames lost inside its range are in no file: said, as a client's save says them; gaps it could not
                // read, said to be unknown, never left out as none.
                if let object, let lost = lostGapsLine(object.lost ?? [], namingStreams: object.stream == "all") {
                    printError(lost)
                }
                if let reason = object?.lostUnknown { printError("  " + unknownLossesLine(reason)) }
            case .failure(let error): printError("a \(isClip ? "clip" : "save") failed: \(error)")
            }
        }
        installSaveSignal(control!)
        if let port = control?.tcpPort, let listen {
            printError(
                "serving the API on \(RecorderControl.Listen.address(host: listen.host, port: port)) (bearer token "
                    + "required)")
        }
    } catch ControlError.alreadyServed(let path) {
        // Another recorder started on the directory since the check above.
        throw CommandError(
            "another recorder already serves \(path): stop it, or record into another --store",
            status: ExitStatus.unavailable)
    } catch let error as ControlError where listen != nil {
        if case .badListenAddress = error { throw error }
        printError("live saves are not available (recording goes on): \(error)")
    } catch {
        printError("live saves are not available (recording goes on): \(error)")
    }
    let monitor = followsPressure ? try startPressureMonitor(recorder) : nil
    let isSingle = inputs.count == 1
    // Each input is read by a thread of its own, so a stalled or failed input holds up no other stream.
    let results = Mutex<[String: Result<RecordLoopResult, any Error>]>([:])
    let done = DispatchSemaphore(value: 0)
    let progressLine = Mutex(ProgressLine())
    // When each input's thread last gave a frame or was between frames (waiting for the disk or a frame's time), and
    // the inputs left behind blocked in a read (they stop at their next frame).
    let lastActive = Mutex<[String: ContinuousClock.Instant]>([:])
    let abandoned = Mutex<Set<String>>([])
    for (index, (input, stream)) in zip(inputs, recorder.streams).enumerated() {
        let box = SourceBox(input.source)
        let loop = input.loop
        let body: @Sendable () -> Void = {
            let result = Result { () throws -> RecordLoopResult in
                try stream.record(
                    from: &box.source, options: loop,
                    shouldStop: {
                        // Asked between frames and while the loop waits (for spill room, or a frame's time): the
                        // input is not blocked in a read, so not stalled, however long the disk takes.
                        lastActive.withAnnotatedLock { $0[stream.name] = .now }
                        return stopRequested.load(ordering: .relaxed)
                            || abandoned.withAnnotatedLock { $0.contains(stream.name) }
                    },
                    progress: { result, pts in
                        lastActive.withAnnotatedLock { $0[stream.name] = .now }
                        progressLine.withAnnotatedLock {
                            guard isSingle else {
                                $0.update(
                                    "recording \(count(recorder.streams.count, "stream")) … "
                                        + recorder.streams.map { "\($0.name) \($0.memoryStatistics.appended)" }
                                        .joined(separator: ", ") + " frames, "
                                        + "\(recorder.streams.reduce(0) { $0 + $1.unspilledFrames }) waiting for disk")
                                return
                            }
                            $0.update(
                                "recording \(stream.stream.layout) … \(result.framesStored) frames, pts "
                                    + "\(formatSeconds(pts)), \(stream.unspilledFrames) waiting for disk")
                        }
                    })
            }
            switch result {
            case .success(let ended) where ended.endReason == .stopped:
                // The recorder stops (or left a stalled input behind): not an input that ended, which saves take to
                // have every frame it will (a save of one stream waiting for its post-roll was then written as whole,
                // exit 0, when its input happened to stop before the others).
                break
            case .success(let ended):
                stream.noteInputEnded(ended.endReason.description)
            case .failure(let error):
                stream.noteInputFailed(error)
                // Said now only while other inputs go on (a long recording's notice of it); otherwise the summary
                // that follows at once says it (it was said twice, and "the other streams go on" when none did).
                if !isSingle, recorder.streams.contains(where: { $0.inputEnded == nil }) {
                    printError(
                        "rewind record: input '\(stream.name)' failed: \(error); stream '\(stream.name)' ended there, "
                            + "the other streams go on")
                }
            }
            // An input ended as stalled keeps that end: its thread, freed from the read later, only stops.
            results.withAnnotatedLock { results in
                if results[stream.name] == nil { results[stream.name] = result }
            }
            done.signal()
        }
        do {
            try Threads.start(named: "rewind-input-\(input.name)", body)
        } catch {
            // The recording cannot have every stream: the streams already reading stop, and this one and those
            // after it end with the error.
            let started = inputs[..<index].map(\.name)
            abandoned.withAnnotatedLock { $0.formUnion(started) }
            results.withAnnotatedLock { results in
                results[input.name] = .failure(error)
                for unstarted in inputs[(index + 1)...] {
                    results[unstarted.name] = .failure(InputNotStarted(name: unstarted.name, earlier: input.name))
                }
            }
            done.signal()
            break
        }
    }
    let stalled = waitForInputs(
        inputs.map(\.name), done: done, finished: { results.withAnnotatedLock { Set($0.keys) } },
        lastActive: { lastActive.withAnnotatedLock { $0 } },
        durations: Dictionary(
            inputs.compactMap { input in input.loop.duration.map { (input.name, $0) } },
            uniquingKeysWith: { first, _ in first }))
    abandoned.withAnnotatedLock { $0.formUnion(stalled) }
    for name in stalled {
        guard let stream = recorder.stream(named: name) else { continue }
        if stopRequested.load(ordering: .relaxed) {
            // Stopped while its input was blocked in a read: it ends with the others.
            var stopped = RecordLoopResult()
            stopped.endReason = .stopped
            results.withAnnotatedLock { $0[name] = .success(stopped) }
        } else {
            let error = InputStalled(name: name, alone: stalled.count == inputs.count)
            stream.noteInputFailed(error)
            results.withAnnotatedLock { $0[name] = .failure(error) }
        }
    }
    progressLine.withAnnotatedLock { $0.clear() }
    monitor?.stop()
    removeSaveSignal()
    // Everything written and the open segments sealed before the control stops: its events clients see those
    // seals, and it still answers while the spill stage drains. A recorder that could not finish writing (an index
    // that cannot grow on a full disk) still reports what each stream recorded, durable and dropped, before its
    // error.
    var finishError: (any Error)?
    do { _ = try recorder.finish() } catch { finishError = error }
    control?.stop()
    let outcomes = results.withAnnotatedLock { $0 }
    var status = ExitStatus.success
    var failures: [(name: String, failure: CommandFailure)] = []
    // The index or segments/ deleted (or replaced) under the recording: it wrote into what it had open, which no
    // later command sees.
    let changedEntries = entries?.changed() ?? []
    let segmentsGone = changedEntries.contains { $0.name == "segments" }
    for (input, stream) in zip(inputs, recorder.streams) {
        let statistics = stream.statistics
        var line = isSingle ? "" : "stream \(stream.name): "
        line += "recorded \(count(Int(statistics.framesAccepted), "frame")) of \(stream.stream.layout)"
        if configuration.spill != .off {
            // Durable when written: with segments/ deleted since, no longer there (said below).
            line += "; \(statistics.framesDurable) " + (segmentsGone ? "written to disk" : "durable")
            if isSingle { line += " in \(directory)" }
            line += " (\(formatBytes(statistics.rawBytesSpilled)) raw"
            if isSingle, let store, let summary = finishError == nil ? try store.summary() : try? store.summary() {
                // The whole store, every stream and every earlier run included.
                line +=
                    "; the store now holds \(count(summary.frames, "frame")) in \(formatBytes(summary.storedBytes)) on "
                    + "disk for \(formatBytes(summary.rawBytes)) raw"
            }
            line += ")"
        }
        line += "; \(statistics.totalDrops) dropped"
        if !statistics.drops.isEmpty {
            line +=
                " ("
                + statistics.drops.keyedByRawValue.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
                .joined(separator: ", ") + ")"
        }
        if statistics.rejected > 0 { line += "; \(statistics.rejected) rejected as bad input" }
        let memory = stream.memoryStatistics
        if memory.refusedMappings > 0 {
            // Frames then reused the ring's slabs, as under a full budget: the window held less than asked.
            line +=
                "; the system refused the ring memory \(count(Int(memory.refusedMappings), "time"))"
                + (memory.systemLimit.map { " (it kept to \(formatBytes(Int64($0))) of its budget)" } ?? "")
        }
        if isSingle && (monitor != nil || recorder.pressureChanges > 0) {
            line += "; \(count(recorder.pressureChanges, "memory pressure change"))"
        }
        switch outcomes[stream.name] {
        case .success(let result)?: line += "; \(result.endReason.rawValue)"
        case .failure(let error)?: line += error is InputStalled ? "; input stalled" : "; input failed"
        case nil: break
        }
        print(line)
        if let lastError = statistics.lastError {
            printError(
                "rewind record: " + (isSingle ? "" : "stream '\(stream.name)': ") + "last write error: \(lastError)")
        }
        // Without a finished store, the loss's gaps may not be written: the finish error says what is wrong.
        if finishError == nil,
            let loss = lossFailure(
                statistics, loop: input.loop, options: options, held: store.flatMap(markersHeldBytes))
        {
            printError(loss.text(command: "record", help: "", stream: isSingle ? nil : stream.name))
            if status == ExitStatus.success { status = loss.status }
        }
        if finishError == nil, let store,
            let retained = try retentionKeptNothing(
                statistics, stream: stream.name, after: storedBefore[stream.name], store, options)
        {
            printError(retained.text(command: "record", help: "", stream: isSingle ? nil : stream.name))
            if status == ExitStatus.success { status = retained.status }
        }
        if case .failure(let error)? = outcomes[stream.name] {
            failures.append((stream.name, CommandFailure(error, command: "record")))
        }
    }
    if let finishError { throw finishError }
    for (_, problem) in changedEntries {
        printError("rewind record: \(problem)")
        status = ExitStatus.failure
    }
    if !isSingle, let store {
        let summary = try store.summary()
        var line =
            "recorded \(count(inputs.count, "stream")) into \(directory); the store now holds "
            + "\(count(summary.frames, "frame")) in \(formatBytes(summary.storedBytes)) on disk for "
            + "\(formatBytes(summary.rawBytes)) raw"
        if monitor != nil || recorder.pressureChanges > 0 {
            line += "; \(count(recorder.pressureChanges, "memory pressure change"))"
        }
        if !failures.isEmpty { line += "; failed: " + failures.map(\.name).joined(separator: ", ") }
        print(line)
    }
    for (name, failure) in failures {
        printError(failure.text(command: "record", help: "", stream: isSingle ? nil : name))
        let recorded = recorder.stream(named: name)?.statistics.framesAccepted ?? 0
        if configuration.spill == .off {
            if recorded > 0 { printError("rewind record: nothing is stored: --spill off keeps frames in memory only") }
        } else if isSingle {
            printError("rewind record: everything recorded before it is stored")
        } else if recorded > 0 {
            printError(
                "rewind record: everything stream '\(name)' recorded before it is stored, and an 'input failed' gap "
                    + "marks the rest of the recording")
        }
    }
    if let first = failures.first { return first.failure.status }
    return status
}

/// The store's index file and `segments/` as a recording found them (device and inode), to tell when something
/// deleted or replaced one under it.
private struct StoreEntryIdentities {
    let store: SegmentStore
    let identities: [String: (device: UInt64, inode: UInt64)]
    var directory: String { store.directory }

    init(store: SegmentStore) {
        self.store = store
        var found: [String: (device: UInt64, inode: UInt64)] = [:]
        for name in ["index.sqlite", "segments"] { found[name] = Self.identity(store.directory + "/" + name) }
        identities = found
    }

    private static func identity(_ path: String) -> (device: UInt64, inode: UInt64)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    /// What was deleted or replaced since (the entry's name, and the problem with what to do, in words); empty when
    /// nothing was.
    func changed() -> [(name: String, problem: String)] {
        var problems: [(name: String, problem: String)] = []
        for (name, before) in identities.sorted(by: { $0.key < $1.key }) {
            let now = Self.identity(directory + "/" + name)
            // A directory made again may get the inode number the deleted one had: the store says it made it.
            let remade = name == "segments" && store.segmentsDirectoryWasMadeAgain
            guard now?.device != before.device || now?.inode != before.inode || remade else { continue }
            let what = now == nil || remade ? "was deleted" : "was replaced"
            problems.append(
                (
                    name,
                    name == "index.sqlite"
                        ? "\(directory)/index.sqlite \(what) while recording: the rows this recording wrote went with the "
                            + "file it had open, and its frames are in the segment files alone; run 'rewind verify --repair', "
                            + "which rebuilds the index from them"
                        : "\(directory)/segments \(what) while recording: the segment files written before are gone"
                            + (remade ? " (it was made again for what came after)" : "")
                            + "; run 'rewind verify --repair', which records their frames as lost"
                ))
        }
        return problems
    }
}

/// What a recorder uses besides its `--memory` budget (code, heaps, the index's cache, an export's buffers), about.
let recorderMemoryOverhead = 64 << 20

/// Refuses a `--memory` budget the process's memory cgroup cannot hold with ``recorderMemoryOverhead``: the kernel
/// would kill the recorder without a word (its OOM killer) once the rings fill.
private func checkMemoryFitsCgroup(_ configuration: RecorderConfiguration) throws(UsageError) {
    guard let limit = MemoryPressureMonitor.cgroupMemoryLimit(),
        configuration.memoryBudget + recorderMemoryOverhead > limit
    else { return }
    let budget = formatBytes(Int64(configuration.memoryBudget))
    let allowed = formatBytes(Int64(limit))
    let advice =
        limit > recorderMemoryOverhead + (1 << 20)
        ? "give at most --memory \((limit - recorderMemoryOverhead) >> 20)MiB, or raise the cgroup's limit"
        : "raise the cgroup's limit"
    throw UsageError(
        "--memory: \(budget) does not fit in the \(allowed) this process's memory cgroup allows, with about "
            + "\(formatBytes(Int64(recorderMemoryOverhead))) for the recorder itself: the kernel would kill the "
            + "recording once its rings fill; \(advice) (memory.max, systemd's MemoryMax=)", showsHelp: false)
}

/// The fewest descriptors a recording may open: its segment files and index, the saves exporting at once, and some
/// connections of its API (which are fitted into what is left).
let recordingOpenFileMinimum = 128

/// Refuses a recording whose limit on open descriptors (raised to the hard limit up to 1024 at start) is below
/// ``recordingOpenFileMinimum``, before anything is opened (it would lose frames to EMFILE at its next segment, or
/// when clients connect).
private func checkOpenFileLimit() throws {
    let (soft, hard) = System.openFileLimit
    guard soft < recordingOpenFileMinimum else { return }
    throw CommandError(
        "the process may open only \(soft) files at once (hard limit \(hard): ulimit -n, systemd's LimitNOFILE=), "
            + "and a recording needs at least \(recordingOpenFileMinimum) for its segment files, index, exports and "
            + "API connections; raise the limit (ulimit -n 1024) and run again", status: ExitStatus.systemLimit)
}

/// Refuses a recording into `directory` while another recorder serves its API (one with `--spill off` takes no lock
/// on the store): that one would get every save and marker meant for this recording.
private func checkNoOtherRecorderServes(_ directory: String) throws {
    guard let other = try? ControlClient(directory: directory).status() else { return }
    var what = "another recorder already serves \(directory)/\(RecorderControl.socketName)"
    if other.stopping {
        what += " (it is stopping: record again once it has)"
    } else if other.diskBytes == nil {
        what += " (one with --spill off, keeping its frames in memory only)"
    }
    throw CommandError(
        what + ": the saves and markers of its clients would not reach this recording; stop it, or record into "
            + "another --store", status: ExitStatus.unavailable)
}

/// An input whose thread was not started because an earlier input's could not be.
struct InputNotStarted: Error, CustomStringConvertible {
    let name: String
    let earlier: String

    var description: String { "input '\(name)' was not started: the thread of input '\(earlier)' could not be" }
}

/// An input that gave no frame for ``inputStallTimeout`` after every other input had ended, or after its
/// `--duration` had passed on the wall clock (with `--duration`).
struct InputStalled: Error, CustomStringConvertible {
    let name: String
    /// Whether no input had ended: it was left running only by its own `--duration` passing on the wall clock.
    let alone: Bool

    var description: String {
        "input '\(name)' stalled: no frame for \(inputStallTimeout.components.seconds) s "
            + (alone
                ? "by the time its --duration had passed on the wall clock (it gives frames slower than their times, or "
                    + "its source stopped sending without closing)"
                : "after the other inputs ended")
            + "; stream '\(name)' ended there"
    }
}

/// Tells a pause of the whole process (SIGSTOP, Ctrl-Z, a machine suspended) from a wait, for a loop that looks
/// several times a second: a longer time between two looks was a pause, which no input's allowance may count (its
/// thread could not read either).
struct PauseWatch {
    private var lastLook = ContinuousClock.now

    /// How long the process was paused since the last look (nil for no pause: under a second between looks).
    mutating func look(at now: ContinuousClock.Instant = .now) -> Duration? {
        defer { lastLook = now }
        return now - lastLook > .seconds(1) ? now - lastLook : nil
    }
}

/// How long an input may give no frame, once every other input has ended or its `--duration` has passed on the wall
/// clock, before a recording with `--duration` ends it as stalled.
let inputStallTimeout = Duration.seconds(5)

/// Waits until every input's thread is done, or a stop request has waited a second for them, or — with a duration —
/// the inputs still running have been blocked in a read (no frame, and not between frames waiting for the disk or
/// a frame's time: `lastActive`) for ``inputStallTimeout`` while every other input has ended or
/// their own durations (`durations`, stream time, by input) have passed on the wall clock: `--duration` counts
/// stream time, which an input that stopped sending never reaches. A pause of the whole process (SIGSTOP, Ctrl-Z, a
/// machine suspended) is no stall: its input threads could not read either, so their allowance starts again when it
/// ends.
///
/// - Returns: the inputs left running (blocked in a read), to be ended without them.
private func waitForInputs(
    _ names: [String], done: DispatchSemaphore, finished: () -> Set<String>,
    lastActive: () -> [String: ContinuousClock.Instant], durations: [String: Duration]
) -> [String] {
    let start = ContinuousClock.now
    var pending = names.count
    var stopSeen: ContinuousClock.Instant?
    // The inputs' allowance counts from the end of a pause of the process.
    var watch = PauseWatch()
    var resumed = start
    while pending > 0 {
        let signalled = done.wait(timeout: .now() + .milliseconds(200)) == .success
        let now = ContinuousClock.now
        if watch.look(at: now) != nil { resumed = now }
        if signalled {
            pending -= 1
            continue
        }
        if stopRequested.load(ordering: .relaxed) {
            stopSeen = stopSeen ?? now
            if now - stopSeen! >= .seconds(1) { break }
            continue
        }
        let ended = finished()
        guard !durations.isEmpty else { continue }
        let active = lastActive()
        let running = names.filter { !ended.contains($0) }
        let overdue = running.allSatisfy { name in durations[name].map { now - start >= $0 } ?? false }
        guard !ended.isEmpty || overdue else { continue }
        if running.allSatisfy({ now - max(active[$0] ?? start, resumed) >= inputStallTimeout }) { break }
    }
    let ended = finished()
    return names.filter { !ended.contains($0) }
}

/// Refuses, before anything is recorded, an input whose stream the store holds with another format, size, frame
/// rate, colour, chroma siting or pixel aspect (where both say one): saying what differs and suggesting another name.
private func checkStreamsMatch(_ specs: [RecorderStreamSpec], store: SegmentStore, directory: String) throws {
    let rows = try store.streams()
    for spec in specs {
        guard let row = rows.first(where: { $0.name == spec.name }), !row.description.agrees(with: spec.stream),
            try !store.index.streamIsUnused(named: spec.name)
        else { continue }
        let stored = row.description
        let given = spec.stream
        var differences: [String] = []
        if stored.layout.format != given.layout.format {
            differences.append("format \(stored.layout.format.name) → \(given.layout.format.name)")
        }
        if stored.layout.width != given.layout.width || stored.layout.height != given.layout.height {
            differences.append(
                "size \(stored.layout.width)x\(stored.layout.height) → \(given.layout.width)x\(given.layout.height)")
        }
        if stored.frameDuration != given.frameDuration {
            differences.append(
                "frame rate \(describeRate(stored.frameDuration)) → \(describeRate(given.frameDuration))")
        }
        if stored.color != given.color { differences.append("colour \(stored.color) → \(given.color)") }
        // Siting and aspect differ only where both say one (an unknown one takes the stream's).
        if stored.chromaSiting != given.chromaSiting && stored.chromaSiting != .unspecified
            && given.chromaSiting != .unspecified
        {
            differences.append("chroma siting \(stored.chromaSiting.name) → \(given.chromaSiting.name)")
        }
        if stored.pixelAspect != given.pixelAspect && stored.pixelAspect.isKnown && given.pixelAspect.isKnown {
            differences.append("pixel aspect \(stored.pixelAspect) → \(given.pixelAspect)")
        }
        let names = Set(rows.map(\.name))
        var suggestion = spec.name + "-2"
        var number = 2
        while names.contains(suggestion) {
            number += 1
            suggestion = "\(spec.name)-\(number)"
        }
        throw UsageError(
            "stream '\(spec.name)' in \(directory) holds \(stored.layout) at \(describeRate(stored.frameDuration)) "
                + "fps, and this input differs (\(differences.joined(separator: ", "))); a stream keeps one format and "
                + "size: record it as another stream, e.g. --stream \(suggestion) (or --input \(suggestion)=SOURCE)",
            showsHelp: false)
    }
}

/// A frame rate as people write it: `30`, `29.97`.
func describeRate(_ duration: FrameTime) -> String {
    let fps = Double(duration.timescale) / Double(duration.value)
    return fps == fps.rounded() ? String(Int(fps)) : String(format: "%.3f", fps)
}

/// The stored bytes of the segments markers' holds keep from retention, over every stream; nil when it cannot say.
private func markersHeldBytes(_ store: SegmentStore) -> Int64? {
    try? store.streams().reduce(Int64(0)) { total, row in
        let holds = try store.markers(streamName: row.name).compactMap(\.hold)
        return total + (holds.isEmpty ? 0 : try store.heldBytes(streamName: row.name, ranges: holds))
    }
}

/// A warning for a marker whose hold reaches past its stream's newest frame further than `budget` could keep at the
/// rate the stream was stored so far (a hold of years, made without `--disk`): every segment recorded while it
/// lasts is kept, and retention cannot keep the budget. Nil when no hold does.
private func futureHoldWarning(_ store: SegmentStore, budget: Int) -> String? {
    for row in (try? store.streams()) ?? [] {
        guard let summary = try? store.summary(streamName: row.name), let first = summary.firstPTS,
            let last = summary.lastPTS, last > first, summary.storedBytes > 0
        else { continue }
        let bytesPerNanosecond = Double(summary.storedBytes) / Double(last - first)
        for marker in (try? store.markers(streamName: row.name)) ?? [] {
            guard let hold = marker.hold, hold.upperBound > last else { continue }
            let ahead = hold.upperBound - max(last, hold.lowerBound)
            let bytes = Double(ahead) * bytesPerNanosecond
            guard bytes >= Double(budget) else { continue }
            return "rewind record: warning: marker \(marker.id) ('\(marker.label)') holds what '\(row.name)' records "
                + "for the next \(formatSeconds(ahead)) (about \(formatBytes(Int64(min(bytes, 4e18)))) at the rate "
                + "stored so far), more than --disk \(formatBytes(Int64(budget))): retention cannot keep the budget "
                + "while that hold lasts; delete the marker ('rewind unmark --store DIR --id \(marker.id)') or give a "
                + "larger --disk"
        }
    }
    return nil
}

/// The failure a recording is when retention (`--disk`, `--min-free`, `--max-age`) deleted every frame it made
/// durable, so the store holds none of them (older frames a hold keeps aside): a budget smaller than one segment,
/// or a disk that cannot keep the free-space floor. Nil otherwise.
///
/// - Parameter after: the stream's newest stored pts before the recording (its frames all come after it).
private func retentionKeptNothing(
    _ statistics: RecorderStatistics, stream: String, after: Int64?, _ store: SegmentStore, _ options: StoreOptions
) throws -> CommandFailure? {
    guard statistics.framesDurable > 0 else { return nil }
    let summary = try store.summary(streamName: stream)
    // None left when the stream holds no frame, or none after what it held before.
    var keptNone = summary.frames == 0
    if let after, let last = summary.lastPTS { keptNone = keptNone || last <= after }
    guard keptNone else { return nil }
    var limits: [String] = []
    // What to change, for each limit that can have deleted everything: a floor the disk cannot keep, an age no
    // longer than a segment, a budget under a few segments.
    var advice: [String] = []
    let segment = options.segmentMaxDuration.nanosecondsClamped
    if let budget = options.diskBudget {
        limits.append("--disk \(formatBytes(Int64(budget)))")
        if let held = markersHeldBytes(store), held >= Int64(budget) / 2 {
            // The holds, not the segment length, left no room.
            advice.append(
                "a --disk larger than the \(formatBytes(held)) markers' holds keep, or delete a marker ('rewind "
                    + "markers', 'rewind unmark --store DIR --id ID')")
        } else {
            advice.append("a --disk larger than a few segments (or a shorter --segment)")
        }
    }
    if let floor = options.minimumFreeBytes {
        limits.append("--min-free \(formatBytes(Int64(floor)))")
        if options.diskBudget == nil, let held = markersHeldBytes(store), held > 0 {
            // The holds kept what the floor would have had deleted.
            advice.append(
                "fewer markers' holds (they keep \(formatBytes(held)) that retention may not delete: 'rewind "
                    + "markers', 'rewind unmark --store DIR --id ID')")
        }
        if let free = try? POSIXFileSystem().availableBytes(store.directory), free < Int64(floor) + 4 * (1 << 20) {
            // Retention keeps the floor free and, above it, the next frame and room for the index (up to 4 MiB):
            // a floor below the free space may still be more than the disk can keep (the advice named the free
            // space alone, which a floor already below it did not help).
            let room = free - 4 * (1 << 20)
            advice.insert(
                room >= 1 << 20
                    ? "a --min-free below \(formatBytes(room)) (the disk has \(formatBytes(free)) free now, and "
                        + "retention keeps up to 4 MiB more free for the index and the next frame), or free space on "
                        + "the disk"
                    : "free space on the disk: it has \(formatBytes(free)) free now, and retention keeps up to 4 MiB "
                        + "free for the index and the next frame above any --min-free",
                at: 0)
        }
    }
    if let age = options.maxAge {
        let ageNanoseconds = age.nanosecondsClamped
        limits.append(
            "--max-age " + (ageNanoseconds < 1_000_000 ? "\(ageNanoseconds)ns" : formatSeconds(ageNanoseconds)))
        if ageNanoseconds <= segment {
            advice.insert("a --max-age longer than a segment (\(formatSeconds(segment)))", at: 0)
        }
    }
    if advice.isEmpty { advice.append("free space on the disk") }
    return CommandFailure(
        message: "retention deleted all \(count(statistics.framesDurable, "durable frame")) of this recording "
            + "(\(limits.joined(separator: ", "))): the store holds none of them",
        advice: "give " + advice.joined(separator: ", or "))
}

/// The failure a recording is when it lost frames it had accepted: to disk errors always, and left the ring before
/// they were written when the input waits for the disk (a file, which promises to lose nothing). Nil otherwise.
///
/// - Parameter held: the stored bytes markers' holds keep from retention (nil or 0: none).
private func lossFailure(
    _ statistics: RecorderStatistics, loop: RecordLoopOptions, options: StoreOptions, held: Int64?
) -> CommandFailure? {
    let diskErrors = statistics.drops[.diskError] ?? 0
    let evicted = loop.spillLag == .wait ? statistics.drops[.evictedBeforeSpill] ?? 0 : 0
    guard diskErrors + evicted > 0 else { return nil }
    var causes: [String] = []
    if diskErrors > 0 {
        let why = statistics.lastWriteErrno.map { $0.isDiskFull ? "disk full" : "\($0)" } ?? "write failed"
        causes.append("\(diskErrors) to disk errors (\(why))")
    }
    if evicted > 0 { causes.append("\(evicted) evicted from memory before they were written") }
    let isDiskFull = statistics.lastWriteErrno?.isDiskFull ?? false
    var advice: String?
    if isDiskFull {
        advice =
            options.hasRetention
            ? "free space, or raise --min-free (a floor the disk reaches before it fills)"
                + (options.diskBudget == nil ? "" : " or lower --disk")
            : "free space, or set --disk or --min-free so old segments are deleted to make room"
        // What holds keep, retention cannot delete: a hold of what is still to come fills a disk that has no
        // --disk to check it against.
        if let held, held > 0 {
            advice! +=
                "; markers' holds keep \(formatBytes(held)) that retention may not delete: delete a marker ('rewind "
                + "markers', 'rewind unmark --store DIR --id ID')"
        }
    }
    return CommandFailure(
        message: "lost \(count(diskErrors + evicted, "accepted frame")): \(causes.joined(separator: ", ")); "
            + "\(count(statistics.framesDurable, "frame")) are durable and each lost stretch is a gap in the index",
        status: ExitStatus.failure, advice: advice)
}

/// Refuses a window or memory budget too small to record `streams` at all, naming the smallest that works: the
/// budget must hold one frame of each stream (rounded up to whole pages), the window must span one frame time of
/// each. Anything at or above these records every frame of a file, a frame at a time if need be.
func checkMemoryFits(_ streams: [StreamDescription], _ configuration: RecorderConfiguration) throws(UsageError) {
    let smallestBudget = Recorder.smallestMemoryBudget(for: streams.map(\.layout))
    guard configuration.memoryBudget >= smallestBudget else {
        let what =
            streams.count == 1
            ? "one frame of \(streams[0].layout)" : "one frame of each of the \(streams.count) streams"
        let (given, needed) = formatBytesApart(Int64(configuration.memoryBudget), Int64(smallestBudget))
        throw UsageError(
            "--memory: \(given) cannot hold \(what) (\(needed) in whole pages); give at least --memory "
                + "\((smallestBudget + 1023) / 1024)KiB", showsHelp: false)
    }
    // Frame times are whole nanoseconds rounded down: at 30 fps two frames lie 33 333 333 or 33 333 334 ns apart, and
    // the window must span the longer step.
    let frameNanoseconds = streams.map { $0.frameDuration.nanosecondsRoundedUp ?? 0 }.max() ?? 0
    guard configuration.window >= .nanoseconds(frameNanoseconds) else {
        // To the millisecond they may read the same (33ms against 33.333…ms): then to the nanosecond.
        let (window, frame) = formatSecondsApart(configuration.window.nanosecondsClamped, frameNanoseconds)
        throw UsageError(
            "--window: \(window) is shorter than one frame of " + (streams.count == 1 ? "this input" : "an input")
                + " (\(frame)), so it holds no frame before the newest; give at least "
                + "--window \(roundedUpDuration(frameNanoseconds))", showsHelp: false)
    }
}

/// Refuses a `--disk` budget smaller than one frame of each stream stored raw (what a frame that does not compress
/// takes), before the store is opened: retention would delete everything the store holds, earlier recordings
/// included, to stay under it. A size without a unit is in bytes (`--disk 20` is 20 bytes), which the message says.
func checkDiskFits(_ streams: [StreamDescription], _ options: StoreOptions, given text: String? = nil)
    throws(UsageError)
{
    guard let budget = options.diskBudget else { return }
    let smallest = streams.reduce(0) { $0 + $1.layout.byteCount }
    guard budget < smallest else { return }
    let what =
        streams.count == 1 ? "one frame of \(streams[0].layout)" : "one frame of each of the \(streams.count) streams"
    let bare = text.map { !$0.isEmpty && $0.allSatisfy { $0.isASCII && ($0.isNumber || $0 == ".") } } ?? false
    let (given, needed) = formatBytesApart(Int64(budget), Int64(smallest))
    throw UsageError(
        "--disk: \(given)"
            + (bare ? " ('\(text!)' has no unit: a size without one is in bytes)" : "")
            + " cannot hold \(what) (\(needed) stored raw), and retention would delete "
            + "everything the store holds to stay under it; give a budget such as --disk 20GiB",
        showsHelp: false)
}

/// Refuses a `--min-free` floor at least as large as the whole file system the store is on, before the store is
/// opened: no deletion could ever reach it, so retention would delete everything the store holds, earlier
/// recordings included.
///
/// - Parameter given: whether `--min-free` was given (else the floor is the default that `--disk` brings).
func checkFloorFits(_ options: StoreOptions, directory: String, given: Bool = true) throws(UsageError) {
    guard let floor = options.minimumFreeBytes else { return }
    // The store's directory, or the nearest folder above it that exists.
    var path = directory.isEmpty ? "." : directory
    var info = statvfs()
    while statvfs(path, &info) != 0 {
        let parent = System.parentDirectory(of: path)
        guard !parent.isEmpty, parent != path else { return }
        path = parent
    }
    let total = Int64(info.f_blocks) * Int64(info.f_frsize)
    guard total > 0, Int64(floor) >= total else {
        try checkFloorCanBeKept(
            Int64(floor), free: Int64(info.f_bavail) * Int64(info.f_frsize), directory: directory, given: given)
        return
    }
    let (floorText, size) = formatBytesApart(Int64(floor), total)
    guard given else {
        throw UsageError(
            "the file system holding \(path) is \(size), no more than the free space --disk keeps by default "
                + "(--min-free \(floorText)): retention would delete everything the store holds and still not free it; "
                + "give --min-free well below the disk's size (--min-free 1MiB, say), or record onto a larger disk",
            showsHelp: false)
    }
    throw UsageError(
        "--min-free \(floorText) is as much as the whole file system holding \(path) (\(size)) or more: retention "
            + "would delete everything the store holds and still not free it; give a floor well below the disk's size",
        showsHelp: false)
}

/// Refuses a `--min-free` floor that deleting every segment file of the store could not reach (the disk's free space
/// now plus what the store's segment files take), before the store is opened: retention would delete the earlier
/// recordings and then each new segment as soon as it is sealed, keeping nothing. (A floor reached by deleting some
/// of them is what the option is for.)
private func checkFloorCanBeKept(
    _ floor: Int64, free: Int64, directory: String, given: Bool
) throws(UsageError) {
    let segments = (directory.isEmpty ? "." : directory) + "/segments"
    let files = POSIXFileSystem()
    let stored = ((try? files.contentsOfDirectory(segments)) ?? []).reduce(Int64(0)) {
        $0 + (files.fileBytes(segments + "/" + $1) ?? 0)
    }
    // Retention also keeps the index's reserve free (or held in DIR/index.reserve, whose bytes are not free now).
    let heldReserve = files.fileBytes((directory.isEmpty ? "." : directory) + "/index.reserve") ?? 0
    let indexRoom = max(0, StoreOptions.indexReserveBytes - heldReserve)
    guard floor + indexRoom >= free + stored else { return }
    let (floorText, freeText) = formatBytesApart(floor, free)
    // Less room than the index's reserve alone: no floor, not even 0, leaves any to record in.
    guard free + stored > indexRoom else {
        throw UsageError(
            "the file system holding \(directory) has \(freeText) free now"
                + (stored > 0 ? " and the store's segment files take \(formatBytes(stored))" : "")
                + ", no more than the store keeps free for its index (\(formatBytes(indexRoom))): nothing could be "
                + "recorded there, whatever --min-free says; free space on the disk, or record onto a larger one",
            showsHelp: false)
    }
    let what =
        stored > 0
        ? "and the store's segment files take \(formatBytes(stored)): retention would delete every one of them (the "
            + "recordings the store holds) and then each new segment as soon as it is sealed, keeping nothing"
        : "and the store has no segment files to delete: retention would delete each new segment as soon as it is "
            + "sealed, keeping nothing"
    throw UsageError(
        (given
            ? "--min-free \(floorText) is more than the disk can keep free: the file system holding \(directory) has "
                + "\(freeText) free now, "
            : "the file system holding \(directory) has \(freeText) free now, less than the free space --disk keeps by "
                + "default (--min-free \(floorText)), ")
            + what + " (retention keeps the floor free and \(formatBytes(indexRoom)) more for the index); "
            + floorAdvice(room: free + stored - indexRoom), showsHelp: false)
}

/// What to give instead of a floor the disk cannot keep, when the segment files and the free space less the
/// index's room come to `room`: a floor well below that (half, in whole MiB), or more free space (it suggested
/// `--min-free 1MiB` whatever the disk had).
private func floorAdvice(room: Int64) -> String {
    let half = room / 2 / (1 << 20)
    guard half >= 1 else { return "free space on the disk (no floor leaves room to record there)" }
    return "give a --min-free below \(formatBytes(room)) (--min-free \(half)MiB, say), or free space on the disk"
}

/// Starts following the kernel's memory pressure for `recorder` (`--memory-pressure auto`), logging each change
/// with the resident size before and after; says once on stderr when the kernel offers none.
private func startPressureMonitor(_ recorder: Recorder) throws(ThreadStartFailed) -> MemoryPressureMonitor? {
    let monitor: MemoryPressureMonitor
    do {
        monitor = try MemoryPressureMonitor(recorder: recorder) { change in
            var line = "memory pressure \(change.from.name) → \(change.to.name)"
            line += String(
                format: " (stalled %.0f%% some, %.0f%% full", change.sample.some * 100, change.sample.full * 100)
            if let memory = change.sample.memory {
                line += ", \(formatBytes(Int64(memory.availableBytes))) available"
            }
            line += ")"
            if let before = change.residentBytesBefore, let after = change.residentBytesAfter {
                line += "; resident \(formatBytes(Int64(before))) → \(formatBytes(Int64(after)))"
            }
            printError(line)
        }
    } catch {
        printError("memory pressure: off (\(error): the kernel offers no pressure stall information)")
        return nil
    }
    do {
        try monitor.start()
    } catch let error as ThreadStartFailed {
        throw error
    } catch {
        printError("memory pressure: off (\(error): no pipe to wake the monitor)")
        return nil
    }
    return monitor
}

/// The TCP listener `--listen` asks for, with its token (read from `--token-file` or `DIR/token`, made if missing).
private func listenOptions(_ arguments: ParsedArguments, directory: String) throws -> RecorderControl.Listen? {
    guard let text = arguments.string("listen") else {
        if arguments.flag("listen-any") || arguments.string("token-file") != nil {
            throw UsageError("--listen-any and --token-file go with --listen HOST:PORT", showsHelp: false)
        }
        return nil
    }
    let (host, port) = try RecorderControl.Listen.check(text, allowsAnyAddress: arguments.flag("listen-any"))
    // Before anything is made: a port in use, a token file that cannot be used.
    try RecorderControl.Listen.checkFree(text, host: host, port: port)
    if arguments.string("token-file") == nil { System.makeStoreDirectory(directory) }
    // Absolute: the page a browser gets without the token names it, and the browser's user is not in our directory.
    let tokenFile = URL(fileURLWithPath: arguments.string("token-file") ?? directory + "/token").standardizedFileURL
        .path
    let token = try ControlToken.loadOrCreate(path: tokenFile)
    return RecorderControl.Listen(
        host: host, port: port, allowsAnyAddress: arguments.flag("listen-any"), token: token, tokenFile: tokenFile)
}
