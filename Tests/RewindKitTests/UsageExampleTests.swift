import Foundation
import RewindKit
import RewindTesting
import Testing

/// The usage example at the top of `RewindKit.swift` and in the README, compiled and run as written.
@Suite(.timeLimit(.minutes(45))) struct UsageExampleTests {
    /// The README's example as written, with its two relative paths (`camera-store`, `last-5s.mkv`) made absolute.
    static func saveTheLastFiveSeconds(storeDirectory: String, clipPath: String) throws {
        // Open (or create) a store: segment files and an SQLite index in one directory.
        let store = try SegmentStore.open(directory: storeDirectory)

        // A camera: here the synthetic one; any FrameSource works (Y4MReader reads YUV4MPEG2 files).
        var camera = SyntheticCamera(
            layout: try FrameLayout(format: .nv12, width: 320, height: 180),
            frameDuration: FrameTime(value: 1, timescale: 30), frameCount: 240)

        // Record: the newest 10 s stay in memory under a 64 MiB budget; every frame is also spilled to disk.
        let recorder = try Recorder(
            stream: camera.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 64 << 20))
        try recorder.record(from: &camera)

        // Save the last 5 s, frame-exact, from memory and disk.
        let source = ClipSource.recorder(recorder)
        if let lastFive = try source.lastRange(.seconds(5)) {
            let summary = try source.export(range: lastFive, format: .matroska, to: .path(clipPath))
            print("saved \(summary.frames) frames")  // 150: the last 5 s of 240 frames at 30 fps
        }
        try recorder.finish()  // everything accepted is durable
    }

    @Test(.timeLimit(.minutes(45)))
    func theExampleSavesExactlyTheLastFiveSeconds() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try Self.saveTheLastFiveSeconds(
            storeDirectory: directory.path + "/camera-store", clipPath: directory.path + "/last-5s.mkv")
        // 240 frames at 30 fps: the last 5 s are the last 150 frames.
        #expect(try ExternalTools.frameMD5s(directory.path + "/last-5s.mkv").count == 150)
        let store = try SegmentStore.openReadOnly(directory: directory.path + "/camera-store")
        #expect(try store.summary(streamName: "camera").frames == 240)
    }
}
