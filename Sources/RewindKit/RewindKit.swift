// RewindKit: a rewind buffer of raw video frames in memory, with a durable, queryable frame store on disk behind it.
//
// Open a store, record, save the last 5 s (UsageExampleTests runs the same code):
//
//     import RewindKit
//
//     // Open (or create) a store: segment files and an SQLite index in one directory.
//     let store = try SegmentStore.open(directory: "camera-store")
//
//     // A camera: here the synthetic one; any FrameSource works (Y4MReader reads YUV4MPEG2 files).
//     var camera = SyntheticCamera(
//         layout: try FrameLayout(format: .nv12, width: 320, height: 180),
//         frameDuration: FrameTime(value: 1, timescale: 30), frameCount: 240)
//
//     // Record: the newest 10 s stay in memory under a 64 MiB budget; every frame is also spilled to disk.
//     let recorder = try Recorder(
//         stream: camera.stream, store: store,
//         configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 64 << 20))
//     try recorder.record(from: &camera)
//
//     // Save the last 5 s, frame-exact, from memory and disk.
//     let source = ClipSource.recorder(recorder)
//     if let lastFive = try source.lastRange(.seconds(5)) {
//         let summary = try source.export(range: lastFive, format: .matroska, to: .path("last-5s.mkv"))
//         print("saved \(summary.frames) frames")  // 150: the last 5 s of 240 frames at 30 fps
//     }
//     try recorder.finish()  // everything accepted is durable
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
