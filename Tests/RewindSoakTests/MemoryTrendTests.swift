import RewindSoak
import Testing

@Suite struct MemoryTrendTests {
    @Test func aStepBetweenStretchesIsNotGrowth() throws {
        let before = (0..<10).map { (x: Double($0), y: 300.0) }
        let after = (10..<20).map { (x: Double($0), y: 80.0) }
        #expect(MemoryTrend.slope([before, after]) == 0)
        // Fitted as one stretch, the same step looks like a trend.
        #expect(try #require(MemoryTrend.slope([before + after])) < -10)
    }

    @Test func growthShowsInEveryStretch() throws {
        let first = (0..<10).map { (x: Double($0), y: 300 + 3 * Double($0)) }
        let second = (10..<20).map { (x: Double($0), y: 80 + 3 * Double($0)) }
        #expect(abs(try #require(MemoryTrend.slope([first, second])) - 3) < 1e-9)
    }

    @Test func tooFewPointsHaveNoSlope() {
        #expect(MemoryTrend.slope([]) == nil)
        #expect(MemoryTrend.slope([[(x: 0, y: 1)], []]) == nil)
        #expect(MemoryTrend.slope([[(x: 1, y: 1), (x: 1, y: 5)]]) == nil)
    }
}
