import Foundation
import RewindKit

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
                guard width >= SyntheticCamera.minimumWidth && height >= SyntheticCamera.minimumHeight else {
                    throw UsageError(
                        "--input: synthetic frames must be at least "
                            + "\(SyntheticCamera.minimumWidth)x\(SyntheticCamera.minimumHeight)")
                }
            }
            self = .synthetic(width: width, height: height, frameDuration: duration)
        } else {
            throw UsageError("--input: '\(text)' is not synthetic[:WxH@FPS], y4m:PATH or - (YUV4MPEG2 on stdin)")
        }
    }
}

/// The free space `--disk` keeps on the file system unless `--min-free` says otherwise: 256 MiB, about 80 raw
/// 1080p frames, small enough for a small disk and enough to absorb a burst while retention deletes.
let defaultMinimumFree = 256 << 20

func runRecord(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    let input = try InputSpec(parsing: arguments.string("input")!)
    let spill = SpillPolicy(rawValue: arguments.string("spill")!)!
    var configuration = RecorderConfiguration(
        window: try arguments.duration("window")!, memoryBudget: try arguments.size("memory")!, spill: spill)
    if let name = arguments.string("stream") { configuration.streamName = name }
    if let policy = arguments.string("backpressure") {
        configuration.backpressure = BackpressurePolicy(rawValue: policy)!
    }
    var options = StoreOptions()
    options.diskBudget = try arguments.size("disk")
    options.minimumFreeBytes = try arguments.size("min-free") ?? options.diskBudget.map { _ in defaultMinimumFree }
    let segment = try arguments.duration("segment")!
    guard segment > .zero else { throw UsageError("--segment must be longer than 0s") }
    options.segmentMaxDuration = segment
    let pacing: RecordLoopOptions.Pacing = arguments.flag("realtime") ? .realtime : .asFastAsPossible
    let duration = try arguments.duration("duration")
    let followsPressure = arguments.string("memory-pressure")! == "auto"
    let listen = try listenOptions(arguments, directory: directory)

    switch input {
    case .synthetic(let width, let height, let frameDuration):
        let layout = try FrameLayout(format: .nv12, width: width, height: height)
        var camera = SyntheticCamera(layout: layout, frameDuration: frameDuration)
        // A live camera: it paces itself when --realtime, and never waits for the disk (drops instead).
        return try record(
            from: &camera, directory: directory, configuration: configuration, options: options,
            followsPressure: followsPressure, listen: listen,
            loop: RecordLoopOptions(pacing: pacing, duration: duration, spillLag: pacing == .realtime ? .drop : .wait))
    case .y4mFile(let path):
        var reader = try Y4MReader(path: path)
        return try record(
            from: &reader, directory: directory, configuration: configuration, options: options,
            followsPressure: followsPressure, listen: listen,
            loop: RecordLoopOptions(pacing: pacing, duration: duration))
    case .standardInput:
        var reader = try Y4MReader(fileDescriptor: .standardInput)
        return try record(
            from: &reader, directory: directory, configuration: configuration, options: options,
            followsPressure: followsPressure, listen: listen,
            loop: RecordLoopOptions(pacing: pacing, duration: duration))
    }
}

private func record<Source: FrameSource>(
    from source: inout Source, directory: String, configuration: RecorderConfiguration, options: StoreOptions,
    followsPressure: Bool, listen: RecorderControl.Listen?, loop: RecordLoopOptions
) throws -> Int32 {
    try checkMemoryFits(source.stream, configuration)
    let store = configuration.spill == .off ? nil : try SegmentStore.open(directory: directory, options: options)
    if let store, !store.recovery.repaired.isEmpty {
        printError("recovered the store: " + store.recovery.repaired.joined(separator: "; "))
    }
    let recorder = try Recorder(stream: source.stream, store: store, configuration: configuration)
    installStopHandlers()
    // The HTTP API on DIR/rewind.sock (and --listen): saves, markers, status, events; SIGUSR1 saves the whole
    // window into DIR/exports/.
    var control: RecorderControl?
    do {
        control = try RecorderControl(recorder: recorder, directory: directory, listen: listen) { result in
            switch result {
            case .success(let summary):
                printError("saved: " + describe(summary, destination: summary.path ?? "a client"))
            case .failure(let error): printError("a save failed: \(error)")
            }
        }
        installSaveSignal(control!)
        if let port = control?.tcpPort, let listen {
            printError("serving the API on \(listen.host):\(port) (bearer token required)")
        }
    } catch let error as ControlError where listen != nil {
        if case .badListenAddress = error { throw error }
        printError("live saves are not available (recording goes on): \(error)")
    } catch {
        printError("live saves are not available (recording goes on): \(error)")
    }
    let monitor = followsPressure ? startPressureMonitor(recorder) : nil
    var progress = ProgressLine()
    let layout = source.stream.layout
    var inputError: (any Error)?
    var loopResult = RecordLoopResult()
    do {
        loopResult = try recorder.record(
            from: &source, options: loop, shouldStop: { stopRequested.load(ordering: .relaxed) },
            progress: { result, pts in
                progress.update(
                    "recording \(layout) … \(result.framesStored) frames, pts \(formatSeconds(pts)), "
                        + "\(recorder.unspilledFrames) waiting for disk")
            })
    } catch {
        inputError = error
    }
    progress.clear()
    monitor?.stop()
    removeSaveSignal()
    control?.stop()
    let statistics = try recorder.finish()
    var line = "recorded \(statistics.framesAccepted) frames of \(layout)"
    if configuration.spill != .off {
        line += "; \(statistics.framesDurable) durable in \(directory) (\(formatBytes(statistics.rawBytesSpilled)) raw"
        if let store {
            // The whole store, every stream and every earlier run included.
            let summary = try store.summary()
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
    if monitor != nil || recorder.pressureChanges > 0 {
        line += "; \(count(recorder.pressureChanges, "memory pressure change"))"
    }
    line += "; \(loopResult.endReason.rawValue)"
    print(line)
    if let lastError = statistics.lastError { printError("last write error: \(lastError)") }
    var status = ExitStatus.success
    if let loss = lossFailure(statistics, loop: loop) {
        printError(loss.text(command: "record", help: ""))
        status = loss.status
    }
    if let inputError {
        let failure = CommandFailure(inputError, command: "record")
        printError(failure.text(command: "record", help: ""))
        printError("rewind record: everything recorded before it is stored")
        return failure.status
    }
    return status
}

/// The failure a recording is when it lost frames it had accepted: to disk errors always, and left the ring before
/// they were written when the input waits for the disk (a file, which promises to lose nothing). Nil otherwise.
private func lossFailure(_ statistics: RecorderStatistics, loop: RecordLoopOptions) -> CommandFailure? {
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
    return CommandFailure(
        message: "lost \(count(diskErrors + evicted, "accepted frame")): \(causes.joined(separator: ", ")); "
            + "\(count(statistics.framesDurable, "frame")) are durable and each lost stretch is a gap in the index",
        status: ExitStatus.failure,
        advice: isDiskFull ? "free space, or set --disk or --min-free so old segments are deleted to make room" : nil)
}

/// Refuses a window or memory budget too small to record `stream` at all, naming the smallest that works: the
/// budget must hold one frame (rounded up to whole pages), the window must span one frame time. Anything at or
/// above these records every frame of a file, a frame at a time if need be.
func checkMemoryFits(_ stream: StreamDescription, _ configuration: RecorderConfiguration) throws(UsageError) {
    let smallestBudget = Recorder.smallestMemoryBudget(for: stream.layout)
    guard configuration.memoryBudget >= smallestBudget else {
        throw UsageError(
            "--memory: \(formatBytes(Int64(configuration.memoryBudget))) cannot hold one frame of \(stream.layout) "
                + "(\(formatBytes(Int64(smallestBudget))) in whole pages); give at least --memory \((smallestBudget + 1023) / 1024)KiB"
        )
    }
    let frameNanoseconds = stream.frameDuration.nanoseconds ?? 0
    guard configuration.window >= .nanoseconds(frameNanoseconds) else {
        throw UsageError(
            "--window: \(formatSeconds(configuration.window)) is shorter than one frame of this input "
                + "(\(formatSeconds(frameNanoseconds))), so it holds no frame before the newest; give at least "
                + "--window \((frameNanoseconds + 999_999) / 1_000_000)ms")
    }
}

/// Starts following the kernel's memory pressure for `recorder` (`--memory-pressure auto`), logging each change
/// with the resident size before and after; says once on stderr when the kernel offers none.
private func startPressureMonitor(_ recorder: Recorder) -> MemoryPressureMonitor? {
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
    monitor.start()
    return monitor
}

/// The TCP listener `--listen` asks for, with its token (read from `--token-file` or `DIR/token`, made if missing).
private func listenOptions(_ arguments: ParsedArguments, directory: String) throws -> RecorderControl.Listen? {
    guard let text = arguments.string("listen") else {
        if arguments.flag("listen-any") || arguments.string("token-file") != nil {
            throw UsageError("--listen-any and --token-file go with --listen HOST:PORT")
        }
        return nil
    }
    let (host, port) = try RecorderControl.Listen.parse(text)
    try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let token = try ControlToken.loadOrCreate(path: arguments.string("token-file") ?? directory + "/token")
    return RecorderControl.Listen(host: host, port: port, allowsAnyAddress: arguments.flag("listen-any"), token: token)
}
