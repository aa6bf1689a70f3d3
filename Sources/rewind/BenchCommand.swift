import Foundation
import RewindBenchmarks
import RewindKit

/// The figures `rewind bench` prints, in order, with what each one means and its goal.
private let figures: [(key: String, meaning: String, goal: String)] = [
    ("append_copy_over_memcpy", "append with copy ÷ memcpy, 1080p NV12", "≤ 1.2"),
    ("append_inplace_overhead_ns", "in-place append overhead per frame, ns", "≤ 5000"),
    ("ring_ops_per_s_4k", "4K NV12 append+evict cycles per second (copy)", ""),
    ("spill_over_lz4", "spill raw MB/s ÷ single-thread LZ4 (acc. 1), same frames (clean footage)", "≥ 1.5"),
    ("spill_over_lz4_noisy", "the same on noisy footage", "≥ 1.0"),
    ("spill_over_lz4_testsrc2", "the same on ffmpeg's animated testsrc2", "≥ 1.0"),
    ("spill_over_lz4_cli", "spill raw MB/s ÷ `lz4 -1`, same bytes", "≥ 1.0"),
    ("disk_over_lz4", "raw MB/s the disk took the stored bytes at (plain writes, fdatasync) ÷ the same LZ4", ""),
    ("disk_over_lz4_noisy", "the same on noisy footage: the most spill_over_lz4_noisy can reach in that run", ""),
    ("disk_over_lz4_testsrc2", "the same on testsrc2", ""),
    ("stored_over_lz4_clean", "stored size ÷ plain LZ4 size, clean camera-like footage", "≤ 0.35"),
    ("stored_over_lz4_noisy", "stored size ÷ plain LZ4 size, noisy footage", "≤ 1.0"),
    ("stored_over_lz4_testsrc2", "stored size ÷ plain LZ4 size, testsrc2", "≤ 1.0"),
    ("ttff_ms_1min", "time to first frame of a 1 s range, 1-minute store, ms", "≤ 20"),
    ("ttff_ms_1h", "time to first frame of a 1 s range, 1-hour store, ms", "≤ 20, flat"),
    ("record_y4m_over_lz4", "record 1080p Y4M (eager spill) raw MB/s ÷ `lz4 -1`", "≥ 1.0"),
    ("drops_1080p60", "frames dropped, live 1080p60 NV12, eager spill", "0"),
    ("drops_4k30", "frames dropped, live 4K30 NV12, eager spill", "0"),
    ("drops_4k60", "frames dropped, live 4K60 NV12, eager spill, 2 GiB", "0"),
    ("spill_raw_fraction_4k60", "share of the 4K60 frames' bytes stored raw", ""),
    ("stored_over_raw_4k60", "what the 4K60 run stored ÷ its raw bytes", ""),
    ("synthetic_render_cores_4k60", "the synthetic camera's own rendering at 4K60, cores", ""),
    ("export_over_write", "clip export to .y4m from disk ÷ plain write of as many bytes (one 1 MiB buffer)", "≤ 1.3"),
    ("export_over_memory_write", "the same ÷ writing the exported file's own bytes from memory", ""),
    (
        "export_cpu_floor_over_write",
        "the export's CPU time ÷ 2 cores ÷ the plain write: its ratio with both cores busy", ""
    ),
    ("save_pin_ms", "save last 5 s: request → frames pinned, ms", "≤ 1"),
    ("save_over_write", "save last 5 s from memory to .y4m ÷ plain write of the same bytes", "≤ 1.3"),
    ("mp4_save_over_realtime", "save last 5 s of 1080p60 to .mp4 (quality fast) ÷ 5 s", "≤ 1.0"),
    ("thumbnail_ms_memory", "320-px JPEG of a 1080p frame in memory, median ms", "≤ 10"),
    ("thumbnail_ms_disk", "320-px JPEG of a 1080p frame on disk (decoded from its key frame), median ms", "≤ 30"),
    ("timeline_ms", "timeline of one hour of 60 fps in 500 buckets, median ms", "≤ 20"),
    ("control_save_ack_ms", "POST /v1/saves answered while four exports run, median, ms", "≤ 5"),
    ("control_drops_1080p60", "frames dropped, live 1080p60 while clients hammer the API", "0"),
    ("drops_4x1080p30", "frames dropped, four live 1080p30 NV12 streams in one recorder, eager spill", "0"),
    ("save_all_over_write", "save last 5 s of the four streams to one .mkv ÷ plain write of the same bytes", "≤ 1.3"),
]

func runBench(_ arguments: ParsedArguments) throws -> Int32 {
    let quick = arguments.flag("quick")
    let json = arguments.flag("json")
    #if DEBUG
        printError(
            "rewind bench: this is a debug build; build with 'swift build -c release' (make bench) for real figures")
    #endif
    var results: [String: Double] = [:]
    var failures: [String] = []
    var missingTool = false
    let only = arguments.string("only")
    func measure(_ part: String, _ name: String, _ body: () throws -> [String: Double]) {
        if let only, only != part { return }
        if !json { printError("measuring \(name) …") }
        do {
            results.merge(try body()) { _, new in new }
        } catch {
            if BenchmarkError.isMissingTool(error) { missingTool = true }
            failures.append("\(name): \(error)")
        }
    }
    measure("ring", "the ring") { RingBenchmarks.run(quick: quick) }
    measure("store", "the segment store") { try StoreBenchmarks.run(quick: quick) }
    measure("file", "recording a file and exporting from disk") {
        try RecorderBenchmarks.runFileRecording(quick: quick)
    }
    measure("live", "live recording and saving from memory") { try RecorderBenchmarks.runLive(quick: quick) }
    measure("view", "thumbnails and timelines") { try ViewBenchmarks.run(quick: quick) }
    measure("control", "the HTTP API of a live recorder") { try ControlBenchmarks.run(quick: quick) }
    if json {
        try printJSON(results)
    } else {
        func shown(_ value: Double) -> String {
            value.rounded() == value && abs(value) < 1e15 ? String(Int64(value)) : String(format: "%.3f", value)
        }
        for figure in figures {
            guard let value = results[figure.key] else { continue }
            let key = figure.key.padding(toLength: 28, withPad: " ", startingAt: 0)
            let number = shown(value).padding(toLength: 12, withPad: " ", startingAt: 0)
            let meaning = quick ? quickMeaning(figure.meaning) : figure.meaning
            print("\(key)\(number)\(meaning)" + (figure.goal.isEmpty ? "" : " (goal \(figure.goal))"))
        }
        let extra = results.keys.filter { key in !figures.contains { $0.key == key } }.sorted()
        if !extra.isEmpty {
            print("also measured: " + extra.map { "\($0)=\(shown(results[$0]!))" }.joined(separator: ", "))
        }
    }
    for failure in failures { printError("rewind bench: could not measure \(failure)") }
    if missingTool { return ExitStatus.unavailable }
    return failures.isEmpty ? ExitStatus.success : ExitStatus.failure
}

/// A figure's meaning as `--quick` measures it: live recordings of 3 s (so saves of the last 3 s, not 5) and a
/// timeline of ten minutes, not an hour.
private func quickMeaning(_ meaning: String) -> String {
    meaning.replacingOccurrences(of: "last 5 s", with: "last 3 s").replacingOccurrences(of: "÷ 5 s", with: "÷ 3 s")
        .replacingOccurrences(of: "timeline of one hour", with: "timeline of ten minutes")
}
