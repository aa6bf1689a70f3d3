import RewindCapture
import RewindCore
import RewindSystem
import Testing

/// The PSI file format, and the rule that turns readings into levels: rises at once, falls after a quiet period.
@Suite(.timeLimit(.minutes(45)))
struct MemoryPressureHysteresisTests {
    /// Text as `/proc/pressure/memory` prints it.
    static let psiText = """
        some avg10=8.14 avg60=1.96 avg300=0.43 total=1634433
        full avg10=0.90 avg60=0.16 avg300=0.03 total=133584

        """

    @Test func parsesThePressureFile() throws {
        let reading = try #require(PressureStallReading(parsing: Self.psiText))
        #expect(reading.some.average10 == 8.14)
        #expect(reading.some.average60 == 1.96)
        #expect(reading.some.average300 == 0.43)
        #expect(reading.some.totalMicroseconds == 1_634_433)
        #expect(reading.full?.average10 == 0.90)
        #expect(reading.full?.totalMicroseconds == 133_584)
    }

    @Test func refusesTextWithoutASomeLine() {
        #expect(PressureStallReading(parsing: "") == nil)
        #expect(PressureStallReading(parsing: "full avg10=0.00 avg60=0.00 avg300=0.00 total=0") == nil)
        #expect(PressureStallReading(parsing: "some avg10=x avg60=0.00 avg300=0.00 total=0") == nil)
    }

    @Test func readsTheFilesOfThisMachine() throws {
        guard MemoryPressureMonitor.isAvailable else {
            Issue.record("/proc/pressure/memory cannot be read: this kernel offers no PSI")
            return
        }
        let text = try #require(System.readText("/proc/pressure/memory"))
        #expect(PressureStallReading(parsing: text)?.full != nil)
        let memory = try #require(
            System.readText("/proc/meminfo").flatMap(MemoryAvailability.init(parsing:)))
        #expect(memory.totalBytes > 0 && memory.availableBytes > 0 && memory.availableBytes <= memory.totalBytes)
    }

    @Test func parsesMemInfo() throws {
        let memory = try #require(
            MemoryAvailability(
                parsing: "MemTotal:       24683520 kB\nMemFree:        22149120 kB\nMemAvailable:   23853120 kB\n"))
        #expect(memory.totalBytes == 24_683_520 * 1024)
        #expect(memory.availableBytes == 23_853_120 * 1024)
        #expect(MemoryAvailability(parsing: "MemTotal: 1 kB\n") == nil)
    }

    static let second: Int64 = 1_000_000_000

    /// Feeds one sample a second from t = 1 s; returns the level after each.
    static func levels(_ samples: [PressureSample], thresholds: MemoryPressureThresholds = .init())
        -> [MemoryPressure]
    {
        var hysteresis = MemoryPressureHysteresis(thresholds: thresholds)
        return samples.enumerated().map { index, sample in
            _ = hysteresis.update(sample, atNanoseconds: Int64(index + 1) * second)
            return hysteresis.level
        }
    }

    static let quiet = PressureSample(some: 0, full: 0)
    static let warm = PressureSample(some: 0.12, full: 0)
    static let hot = PressureSample(some: 0.45, full: 0.02)

    @Test func risesAtOnceAndFallsAfterTheQuietPeriod() {
        var thresholds = MemoryPressureThresholds()
        thresholds.quietPeriod = .seconds(3)
        let levels = Self.levels(
            [Self.quiet, Self.warm, Self.quiet, Self.quiet, Self.quiet, Self.quiet], thresholds: thresholds)
        #expect(levels == [.normal, .warning, .warning, .warning, .normal, .normal])
    }

    @Test func aSampleBetweenHalfAndTheThresholdHoldsTheLevel() {
        var thresholds = MemoryPressureThresholds()
        thresholds.quietPeriod = .seconds(2)
        let lingering = PressureSample(some: 0.06, full: 0)  // above half of warning's 0.10: holds, never enters
        #expect(Self.levels([lingering, lingering], thresholds: thresholds) == [.normal, .normal])
        let levels = Self.levels(
            [Self.warm, lingering, lingering, lingering, Self.quiet, Self.quiet], thresholds: thresholds)
        #expect(levels == [.warning, .warning, .warning, .warning, .warning, .normal])
    }

    @Test func criticalFallsOneLevelAtATime() {
        var thresholds = MemoryPressureThresholds()
        thresholds.quietPeriod = .seconds(2)
        let levels = Self.levels(
            [Self.hot, Self.warm, Self.warm, Self.warm, Self.quiet, Self.quiet], thresholds: thresholds)
        #expect(levels == [.critical, .critical, .warning, .warning, .warning, .normal])
        #expect(
            Self.levels([Self.hot, Self.quiet, Self.quiet], thresholds: thresholds) == [.critical, .critical, .normal])
    }

    @Test func noiseAroundTheThresholdDoesNotFlap() {
        var thresholds = MemoryPressureThresholds()
        thresholds.quietPeriod = .seconds(5)
        let noisy = (0..<30).map { $0.isMultiple(of: 2) ? Self.warm : PressureSample(some: 0.07, full: 0) }
        let levels = Self.levels(noisy, thresholds: thresholds)
        #expect(levels.allSatisfy { $0 == .warning })
        let bursts = (0..<30).map { $0.isMultiple(of: 4) ? Self.warm : Self.quiet }
        #expect(Self.levels(bursts, thresholds: thresholds).allSatisfy { $0 == .warning })
    }

    @Test func fullStallOrLowMemoryIsCritical() {
        #expect(Self.levels([PressureSample(some: 0.05, full: 0.05)]) == [.critical])
        let total = 8 << 30
        let low = MemoryAvailability(totalBytes: total, availableBytes: total / 40)
        let plenty = MemoryAvailability(totalBytes: total, availableBytes: total / 2)
        #expect(Self.levels([PressureSample(some: 0, full: 0, memory: low)]) == [.critical])
        #expect(Self.levels([PressureSample(some: 0, full: 0, memory: plenty)]) == [.normal])
    }

    @Test func levelsHaveNames() {
        for level in MemoryPressure.allCases { #expect(MemoryPressure(name: level.name) == level) }
        #expect(MemoryPressure(name: "high") == nil)
    }
}
