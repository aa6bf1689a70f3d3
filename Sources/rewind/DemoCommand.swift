import Foundation
import RewindKit

/// `rewind demo`: the whole product in one run on the embedded defaults.
func runDemo(_ arguments: ParsedArguments) throws -> Int32 {
    let directory = arguments.string("store")!
    let seconds = try arguments.duration("seconds")!
    // One frame of the 60 fps camera at least: a shorter demo records nothing.
    guard seconds >= .milliseconds(17) else {
        throw UsageError("--seconds must be at least one frame (17ms); the demo's default is 20s")
    }
    // From here on Ctrl-C stops the demo cleanly, also while the ring's memory is set up (a second or more for its
    // 1.5 GiB on a busy machine): the recording then stops before its first frame and says so.
    let budget = 1536 << 20
    // Under a smaller limit the ring would hold less than its window and the demo say otherwise: refused (71).
    try checkAddressSpaceFits(memoryBudget: budget, command: "the demo", fixed: true)
    try RecorderError.checkWallClock()
    installStopHandlers(interruptsWaits: true)
    try prepareFreshStore(directory)
    let layout = try FrameLayout(format: .nv12, width: 1920, height: 1080)
    let frameDuration = FrameTime(value: 1, timescale: 60)
    let window: Duration = .seconds(8)
    print("rewind demo: synthetic 1080p60 NV12 camera → \(formatSeconds(window)) ring in \(formatBytes(Int64(budget)))")
    print("             with eager spill to \(directory) (LZ4 segments + SQLite index)")

    try makeStoreParents(directory)
    let store = try SegmentStore.open(directory: directory)
    try markAsDemo(store)
    var camera = SyntheticCamera(layout: layout, frameDuration: frameDuration)
    let recorder = try Recorder(
        stream: camera.stream, store: store, configuration: RecorderConfiguration(window: window, memoryBudget: budget))
    var progress = ProgressLine()
    let started = ContinuousClock.now
    let loop = try recorder.record(
        from: &camera, options: RecordLoopOptions(duration: seconds),
        shouldStop: { stopRequested.load(ordering: .relaxed) },
        progress: { result, pts in
            progress.update("recording … \(result.framesStored) frames, pts \(formatSeconds(pts))")
        })
    progress.clear()
    let elapsed = ContinuousClock.now - started
    var statistics = recorder.statistics
    let ringStatistics = recorder.memoryStatistics
    // Stopped (Ctrl-C, SIGTERM): what was recorded is said and kept, and nothing more is done.
    let stopped = stopRequested.load(ordering: .relaxed)
    let recorded =
        stopped
        ? Duration.nanoseconds(ringStatistics.lastPTSNanoseconds.map { $0 + (frameDuration.nanoseconds ?? 0) } ?? 0)
        : seconds
    print(
        "1. recorded \(count(loop.framesStored, "frame")) (\(formatSeconds(recorded)) of stream time) in "
            + "\(formatSeconds(elapsed)), "
            + "\(statistics.totalDrops) dropped; the ring holds \(ringStatistics.frames) frames "
            + "(\(formatSeconds(ringStatistics.firstPTSNanoseconds ?? 0)) … "
            + "\(formatSeconds(ringStatistics.lastPTSNanoseconds ?? 0)), \(formatBytes(Int64(ringStatistics.bytesInRing))))"
    )

    if stopped {
        statistics = try recorder.finish()
        print(
            "stopped before \(formatSeconds(seconds)) of stream time: \(statistics.framesDurable) frames durable, "
                + "nothing saved or extracted")
        print("inspect: rewind info --store \(directory)")
        return ExitStatus.interrupted
    }

    do {
        try saveAndExtract(recorder, store: store, directory: directory, saveLength: min(.seconds(5), seconds))
    } catch let error as CommandError where error.status == ExitStatus.interrupted {
        // Stopped while exporting: that export's file is gone (staged), what was recorded stays, sealed.
        _ = try? recorder.finish()
        throw error
    }
    return ExitStatus.success
}

/// Steps 2 to 4 of the demo and what to try next; Ctrl-C stops the export under way (its file is not kept) and the
/// rest (130).
private func saveAndExtract(_ recorder: Recorder, store: SegmentStore, directory: String, saveLength: Duration) throws {
    let ringStatistics = recorder.memoryStatistics
    let exports = directory + "/exports"
    try FileManager.default.createDirectory(atPath: exports, withIntermediateDirectories: true)
    let stop: (Int, Int64) throws -> Void = { written, _ in
        if stopRequested.load(ordering: .relaxed) {
            throw CommandError(
                "interrupted after \(written) frames of an export: stopped; that file was not kept",
                status: ExitStatus.interrupted)
        }
    }
    let source = ClipSource.recorder(recorder)
    // The last 5 s, or everything when the run was shorter.
    guard let last5 = try source.lastRange(saveLength) else { throw CommandError("nothing was recorded") }
    var step = 2
    for format in [ExportFormat.y4m, .matroska] {
        let path = "\(exports)/last-\(shortSeconds(saveLength)).\(format.fileExtension)"
        let pinStart = ContinuousClock.now
        let summary = try source.export(range: last5, format: format, to: .path(path), progress: stop)
        let took = ContinuousClock.now - pinStart
        print(
            "\(step). saved the last \(shortSeconds(saveLength)) from memory in \(formatSeconds(took)): "
                + describe(summary, destination: path))
        step += 1
    }
    let spanStart = (ringStatistics.firstPTSNanoseconds ?? 0) - 2_000_000_000
    let spanRange = max(0, spanStart)..<(max(0, spanStart) + 4_000_000_000)
    let clipPath = "\(exports)/disk-and-memory.mkv"
    let split = try recorder.frames(in: spanRange) { _ in true }
    let summary = try source.export(range: spanRange, format: .matroska, to: .path(clipPath), progress: stop)
    print(
        "\(step). extracted [\(formatSeconds(spanRange.lowerBound)), \(formatSeconds(spanRange.upperBound))): "
            + "\(split.fromDisk) frames from disk + \(split.fromMemory) from memory: "
            + describe(summary, destination: clipPath))
    let statistics = try recorder.finish()
    let stored = try store.summary()
    let ratio = stored.rawBytes > 0 ? Double(stored.storedBytes) / Double(stored.rawBytes) : 0
    print(
        "\(step + 1). finished: \(statistics.framesDurable) frames durable, \(formatBytes(stored.rawBytes)) raw stored in "
            + "\(formatBytes(stored.storedBytes)) (\(String(format: "%.3f", ratio)) of raw), \(count(stored.segments, "segment"))"
    )
    print("")
    print("play:    ffplay \(exports)/last-\(shortSeconds(saveLength)).mkv      (or mpv)")
    print("inspect: rewind info --store \(directory)")
    if let first = stored.firstPTS, let last = stored.lastPTS {
        // A range the store holds: 1.5 s from the middle of what was recorded; all of a short run (whole
        // milliseconds, the end past the last frame).
        var length = min(1_500_000_000, (last - first) / 3)
        var from = (first + (last - first) / 3) / 1_000_000 * 1_000_000
        if last - first < 3_000_000_000 {
            from = first / 1_000_000 * 1_000_000
            length = (last + 1_000_000) / 1_000_000 * 1_000_000 - from
        }
        print(
            "clip:    rewind clip --store \(directory) --from \(formatSeconds(from)) --to \(formatSeconds(from + length)) -o clip.mp4"
        )
    }
}

/// `5s`, `2.5s`: seconds without trailing zeros, for names and sentences.
private func shortSeconds(_ duration: Duration) -> String {
    var text = formatSeconds(duration).dropLast()  // "2.500"
    while text.hasSuffix("0") { text = text.dropLast() }
    if text.hasSuffix(".") { text = text.dropLast() }
    return text + "s"
}

/// The index key and value that mark a store `rewind demo` made, which a later demo may replace.
private let demoMarker = (key: "made_by", value: "rewind demo")

/// Empties `directory` if it is a store an earlier demo made and nothing runs on; refuses to touch anything else:
/// a store `rewind record` or a soak made, one a recorder is writing, files rewind did not make (also in
/// `exports/`, where the demo writes only `last-*.y4m`, `last-*.mkv` and `disk-and-memory.mkv`).
private func prepareFreshStore(_ directory: String) throws {
    let manager = FileManager.default
    guard manager.fileExists(atPath: directory) else { return }
    let entries = try manager.contentsOfDirectory(atPath: directory)
    guard !entries.isEmpty else { return }
    // A recorder first: what it made (its token, say) is no stranger's file.
    if recorderIsRunning(on: directory) {
        throw CommandError(
            "a recorder is running on '\(directory)'; choose another --store for the demo",
            status: ExitStatus.unavailable)
    }
    // `token`: what `rewind record --listen` makes for its TCP listener.
    let storeEntries = Set(
        SegmentStore.indexFileNames + ["segments", "exports", "rewind.sock", "store.lock", "token"])
    let foreign = entries.filter { !storeEntries.contains($0) }
    guard foreign.isEmpty else {
        throw CommandError(
            "'\(directory)' holds files rewind did not make (\(foreign.sorted().joined(separator: ", "))); choose "
                + "another --store for the demo", status: ExitStatus.usage)
    }
    // segments/: the store's files only (`000001.seg`, an open `.seg.partial`, one moved aside as unreadable).
    let segments = (try? manager.contentsOfDirectory(atPath: directory + "/segments")) ?? []
    let strangers = segments.filter { name in
        SegmentFormat.sequence(ofFileName: name) == nil && SegmentFormat.sequence(ofMovedAsideName: name) == nil
    }
    guard strangers.isEmpty else {
        throw CommandError(
            "'\(directory)/segments' holds files the store did not make (\(strangers.sorted().joined(separator: ", "))); "
                + "choose another --store", status: ExitStatus.usage)
    }
    let exports = (try? manager.contentsOfDirectory(atPath: directory + "/exports")) ?? []
    let ownExports = exports.filter { name in
        name == "disk-and-memory.mkv" || name.hasPrefix("last-") && (name.hasSuffix(".y4m") || name.hasSuffix(".mkv"))
    }
    guard ownExports.count == exports.count else {
        let others = Set(exports).subtracting(ownExports).sorted().joined(separator: ", ")
        throw CommandError(
            "'\(directory)/exports' holds files the demo did not write (\(others)); choose another --store",
            status: ExitStatus.usage)
    }
    if manager.fileExists(atPath: directory + "/index.sqlite") {
        let store = try SegmentStore.openReadOnly(directory: directory)
        let madeBy = try store.index.info(demoMarker.key)
        guard madeBy == demoMarker.value else {
            let whose =
                madeBy == recordedMarker
                ? "a store 'rewind demo' made and 'rewind record' then recorded into"
                : "a store that 'rewind demo' did not make"
            throw CommandError(
                "'\(directory)' holds \(whose); the demo replaces only its own: choose another --store (a demo store "
                    + "of an older rewind is not marked as one: remove it first)",
                status: ExitStatus.usage)
        }
    }
    // Its entries, each by the directory's real path: `dd/segments/..` would stop resolving once `segments` went,
    // and the directory itself stays (it may be the working directory).
    let real = URL(fileURLWithPath: directory).resolvingSymlinksInPath().path
    for entry in entries { try manager.removeItem(atPath: real + "/" + entry) }
}

/// Marks the store at `store` as the demo's, so the next demo may replace it.
private func markAsDemo(_ store: SegmentStore) throws {
    try store.index.setInfo(demoMarker.key, to: demoMarker.value)
}

/// What `made_by` says of a demo's store that `rewind record` recorded into.
private let recordedMarker = "rewind demo, then rewind record"

/// Takes the demo's mark off a store `rewind record` is about to record into: its recordings are not the demo's to
/// replace (the next demo deleted them with the rest).
func unmarkAsDemo(_ store: SegmentStore) throws {
    guard try store.index.info(demoMarker.key) == demoMarker.value else { return }
    try store.index.setInfo(demoMarker.key, to: recordedMarker)
}
