import RewindBenchmarks
import Testing

@Suite(.timeLimit(.minutes(45))) struct ViewBenchmarksTests {
    /// The view benchmarks run end to end (a picture of every sampled frame, in memory and on disk; 500 buckets per
    /// timeline) and report every key; the times themselves are not asserted.
    @Test func everyFigureIsMeasured() throws {
        let results = try ViewBenchmarks.run(quick: true)
        for key in ["thumbnail_ms_memory", "thumbnail_ms_disk", "timeline_ms"] {
            let value = try #require(results[key], "\(key) missing from \(results)")
            #expect(value > 0 && value.isFinite, "\(key) = \(value)")
        }
        #expect(results["timeline_frames"] == Double(600 * 60))
    }
}
