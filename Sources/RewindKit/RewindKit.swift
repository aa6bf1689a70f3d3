// RewindKit: a rewind buffer of raw video frames in memory, with a durable, queryable frame store on disk behind it.
//
// Open a store, record, save the last 5 s (UsageExampleTests compiles and runs this):
//
//     import RewindKit
//
//     let store = try SegmentStore.open(directory: "/var/lib/rewind/camera")
//     var camera = SyntheticCamera(
//         layout: try FrameLayout(format: .nv12, width: 1920, height: 1080),
//         frameDuration: FrameTime(value: 1, timescale: 60), frameCount: 600)
//     let recorder = try Recorder(
//         stream: camera.stream, store: store,
//         configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 512 << 20))
//     try recorder.record(from: &camera)
//     let source = ClipSource.recorder(recorder)
//     if let lastFive = try source.lastRange(.seconds(5)) {
//         try source.export(range: lastFive, format: .matroska, to: .path("last5s.mkv"))
//     }
//     try recorder.finish()
//
// The modules re-exported here are the library's public faces; the SQLite layer, test seams, the soak harness and
// the benchmarks are separate modules that a library user does not see.

@_exported import RewindCapture
@_exported import RewindControl
@_exported import RewindCore
@_exported import RewindMedia
@_exported import RewindQuery
@_exported import RewindSystem
@_exported import SegmentStore

/// The version printed by `rewind --version`.
public let rewindVersion = "0.1.0"
