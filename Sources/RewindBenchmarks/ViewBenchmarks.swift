import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import SegmentStore

/// Looking at a recording: thumbnails of frames in memory and on disk, and timelines of a long store, for
/// `rewind bench` (`thumbnail_ms_memory`, `thumbnail_ms_disk`, `timeline_ms`). Not a test: it asserts nothing about
/// time.
public enum ViewBenchmarks {
    /// Measures the figures.
    ///
    /// - Parameter quick: fewer samples and a shorter store for the timeline.
    /// - Returns: figures by key: medians in milliseconds, plus the sizes they were measured on.
    public static func run(quick: Bool) throws -> [String: Double] {
        var results: [String: Double] = [:]
        let directory = try RecorderBenchmarks.benchDirectory("view")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let samples = quick ? 9 : 31

        // 4 s of 1080p60 NV12 (clean synthetic footage): all of it on disk, the last 2 s also in memory.
        let layout = try FrameLayout(format: .nv12, width: 1920, height: 1080)
        let fps: Int32 = 60
        var camera = SyntheticCamera(
            layout: layout, frameDuration: FrameTime(value: 1, timescale: fps), frameCount: Int(fps) * 4)
        let store = try SegmentStore.open(directory: directory + "/thumbnails")
        let recorder = try Recorder(
            stream: camera.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(2), memoryBudget: 1 << 30))
        try recorder.record(from: &camera, options: RecordLoopOptions(pacing: .asFastAsPossible))
        let frameNanoseconds = Int64(1_000_000_000 / Int(fps))
        let live = ClipSource.recorder(recorder)
        guard let memoryStart = recorder.ring.statistics.firstPTSNanoseconds else {
            throw BenchmarkError("the ring holds no frames")
        }
        // Thumbnails: a 320-pixel JPEG of the frame at a time, frames spread over the range.
        func thumbnails(_ source: ClipSource, from first: Int64, frames: Int) throws -> Double {
            var times: [Double] = []
            for sample in 0..<samples {
                let at = first + Int64((sample * 37) % frames) * frameNanoseconds + frameNanoseconds / 2
                let start = ContinuousClock.now
                guard try source.picture(at: at, width: 320, format: .jpeg) != nil else {
                    throw BenchmarkError("no frame at \(at) ns")
                }
                times.append(RecorderBenchmarks.seconds(ContinuousClock.now - start) * 1000)
            }
            return times.sorted()[times.count / 2]
        }
        let memoryFrames = Int((recorder.ring.statistics.lastPTSNanoseconds! - memoryStart) / frameNanoseconds)
        results["thumbnail_ms_memory"] = try thumbnails(live, from: memoryStart, frames: max(1, memoryFrames))
        _ = try recorder.finish()
        guard let row = try store.streams().first else { throw BenchmarkError("the store holds no stream") }
        results["thumbnail_ms_disk"] = try thumbnails(.store(store, stream: row), from: 0, frames: Int(fps) * 4)

        // Timelines: one hour of 60 fps (216 000 frame rows, 60 one-minute segments, a gap every 30 s) in 500
        // buckets, from the index alone.
        let seconds = quick ? 600 : 3600
        let timelineDirectory = directory + "/timeline"
        try FileManager.default.createDirectory(atPath: timelineDirectory, withIntermediateDirectories: true)
        let (index, stream) = try StoreIndexBenchmark.buildIndex(
            path: timelineDirectory + "/index.sqlite", seconds: seconds, fps: Int(fps))
        let reasons: [LossReason] = [.spillBehind, .inputInterval, .diskError, .evictedBeforeSpill]
        for (number, second) in stride(from: 15, to: seconds, by: 30).enumerated() {
            let start = Int64(second) * 1_000_000_000
            try index.recordGap(
                GapRow(
                    streamID: stream.id, startNanoseconds: start, endNanoseconds: start + 250_000_000,
                    reason: reasons[number % reasons.count]))
        }
        try index.checkpoint()
        let readOnly = try SegmentStore.openReadOnly(directory: timelineDirectory)
        guard let timelineRow = try readOnly.streams().first else { throw BenchmarkError("no stream in the index") }
        let source = ClipSource.store(readOnly, stream: timelineRow)
        let whole = 0..<Int64(seconds) * 1_000_000_000
        var times: [Double] = []
        for _ in 0..<samples {
            let start = ContinuousClock.now
            let buckets = try source.timeline(range: whole, buckets: 500)
            times.append(RecorderBenchmarks.seconds(ContinuousClock.now - start) * 1000)
            guard buckets.count == 500 else { throw BenchmarkError("\(buckets.count) buckets, not 500") }
        }
        results["timeline_ms"] = times.sorted()[times.count / 2]
        results["timeline_frames"] = Double(seconds * Int(fps))
        return results
    }
}
