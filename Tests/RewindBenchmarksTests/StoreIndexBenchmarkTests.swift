import RewindBenchmarks
import RewindTesting
import SegmentStore
import Testing

@Suite struct StoreIndexBenchmarkTests {
    /// Builds one minute and one hour of 60 fps frames and checks each timed range query returned the right first
    /// frame. Prints the time to the first row (not asserted: the machine is shared and noisy).
    @Test(arguments: [60, 3600])
    func timeToFirstFrameOfOneSecondRanges(seconds: Int) throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let result = try StoreIndexBenchmark.measureTimeToFirstFrame(
            path: directory.indexPath, seconds: seconds, fps: 60, samples: 25)
        #expect(result.frames == seconds * 60)
        #expect(result.coldNanoseconds > 0, "the fresh connection found a frame")
        for (start, first) in zip(result.rangeStarts, result.firstPTS) {
            // The first frame at or after `start`: frame ⌈start × 60 / 10⁹⌉, at floor(frame × 10⁹ / 60) ns.
            let frame = (start * 60 + 999_999_999) / 1_000_000_000
            #expect(first == frame * 1_000_000_000 / 60, "range starting at \(start) ns")
        }
        let index = try StoreIndex(path: directory.indexPath, readOnly: true)
        #expect(try index.summary().frames == seconds * 60)
        #expect(try index.segments().count == (seconds + 59) / 60)
        func ms(_ ns: Int64) -> String {
            let hundredths = (ns + 5_000) / 10_000
            return "\(hundredths / 100).\(hundredths % 100 < 10 ? "0" : "")\(hundredths % 100) ms"
        }
        print(
            "index of \(seconds) s at 60 fps (\(result.frames) frames): inserted in \(ms(result.insertNanoseconds)); "
                + "time to first row of a 1 s range: median \(ms(result.medianNanoseconds)), "
                + "max \(ms(result.maximumNanoseconds)) over \(result.samples.count) ranges; "
                + "first query on a fresh connection \(ms(result.coldNanoseconds))")
    }
}
