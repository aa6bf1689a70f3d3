import Testing

@testable import RewindBenchmarks

@Suite(.timeLimit(.minutes(45))) struct SpillBenchmarkTests {
    /// A spill round reports the disk's ceiling beside its own rate, both positive and finite.
    @Test func aSpillRoundMeasuresTheDiskBesideIt() throws {
        let footage = try StoreBenchmarks.Footage.make(noisy: true, frames: 6)
        let spill = try StoreBenchmarks.measureSpill(footage, passes: 1, rounds: 1)
        #expect(spill.overLZ4 > 0 && spill.overLZ4.isFinite)
        #expect(spill.diskOverLZ4 > 0 && spill.diskOverLZ4.isFinite, "disk over LZ4: \(spill.diskOverLZ4)")
    }
}
