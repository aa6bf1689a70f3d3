import Foundation
import RewindKit
import RewindTesting
import Testing

/// The usage example at the top of `RewindKit.swift` and in the README, compiled and run as written.
@Suite(.timeLimit(.minutes(5))) struct UsageExampleTests {
    /// Opens a store, records 8 seconds of a camera, and saves the last 5 s.
    static func saveTheLastFiveSeconds(storeDirectory: String, clipPath: String) throws -> ExportSummary {
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
        guard let lastFive = try source.lastRange(.seconds(5)) else { throw ClipError.noFrames(source: "store") }
        let summary = try source.export(range: lastFive, format: .matroska, to: .path(clipPath))
        _ = try recorder.finish()
        return summary
    }

    @Test(.timeLimit(.minutes(1)))
    func theExampleSavesExactlyTheLastFiveSeconds() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let clip = directory.path + "/last5s.mkv"
        let summary = try Self.saveTheLastFiveSeconds(storeDirectory: directory.path + "/store", clipPath: clip)
        // 240 frames at 30 fps: the last 5 s are the last 150 frames.
        #expect(summary.frames == 150)
        #expect(try ExternalTools.frameMD5s(clip).count == 150)
        let store = try SegmentStore.openReadOnly(directory: directory.path + "/store")
        #expect(try store.summary(streamName: "camera").frames == 240)
    }
}
