import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindTesting
import SegmentStore
import Testing

/// A camera that stalls once, before one frame, as a process stopped and continued does.
private struct StallingCamera: FrameSource {
    var camera: SyntheticCamera
    let stallBefore: Int
    let stall: Duration
    var read = 0
    var stream: StreamDescription { camera.stream }

    mutating func readFrame(into buffer: UnsafeMutableRawBufferPointer) throws -> FrameInfo? {
        if read == stallBefore { Thread.sleep(forTimeInterval: Double(stall.components.seconds) + 0.3) }
        read += 1
        return try camera.readFrame(into: buffer)
    }
}

@Suite(.timeLimit(.minutes(45))) struct RealtimePacingTests {
    @Test func afterAPauseTheRealTimePaceResumesInsteadOfBursting() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SegmentStore.open(directory: directory.path)
        let layout = try FrameLayout(format: .nv12, width: 64, height: 48)
        var source = StallingCamera(
            camera: SyntheticCamera(layout: layout, frameDuration: FrameTime(value: 1, timescale: 20), frameCount: 40),
            stallBefore: 5, stall: RecordLoopOptions.pauseThreshold)
        let recorder = try Recorder(stream: source.stream, store: store, configuration: RecorderConfiguration())
        var arrivals: [ContinuousClock.Instant] = []
        let result = try recorder.record(
            from: &source, options: RecordLoopOptions(pacing: .realtime), progress: { _, _ in arrivals.append(.now) })
        try recorder.finish()
        #expect(result.framesStored == 40 && result.framesDropped == 0)
        try #require(arrivals.count == 40)
        // Frames 6…15 are 9 frame steps (450 ms) apart in real time; caught up, they would come at once.
        let paced = arrivals[6].duration(to: arrivals[15])
        #expect(paced >= .milliseconds(300), "frames after the pause came \(paced) apart")
    }

    /// A pause that runs past the duration ends the recording there, and what it left out within the duration is
    /// an `input interval` gap from the last frame to the duration's end, as a pause inside the duration leaves (the
    /// stream just ended at its last frame, as if nothing was missing after it).
    @Test func aPausePastTheDurationIsAnIntervalToTheDurationsEnd() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SegmentStore.open(directory: directory.path)
        let layout = try FrameLayout(format: .nv12, width: 64, height: 48)
        // 20 fps for a second; the pause before frame 10 (0.5 s) moves it past 1 s.
        var source = StallingCamera(
            camera: SyntheticCamera(layout: layout, frameDuration: FrameTime(value: 1, timescale: 20), frameCount: 40),
            stallBefore: 10, stall: RecordLoopOptions.pauseThreshold)
        let recorder = try Recorder(stream: source.stream, store: store, configuration: RecorderConfiguration())
        let result = try recorder.record(
            from: &source, options: RecordLoopOptions(pacing: .realtime, duration: .seconds(1)))
        let statistics = try recorder.finish()
        #expect(result.endReason == .durationReached && result.framesStored == 10, "\(result)")
        let gaps = try store.gaps(streamName: recorder.streams[0].name)
        #expect(
            gaps.map { [$0.startNanoseconds, $0.endNanoseconds] } == [[450_000_000, 1_000_000_000]]
                && gaps.map(\.reason) == [.inputInterval], "\(gaps)")
        #expect(statistics.gaps == 1 && statistics.totalDrops == 0, "\(statistics)")
    }
}
