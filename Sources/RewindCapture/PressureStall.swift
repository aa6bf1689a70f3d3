import RewindCore

// Linux pressure stall information (PSI) and the rule that turns it into a `MemoryPressure` level, apart from the
// thread that reads it (`MemoryPressureMonitor`), so tests feed the rule synthetic readings.

extension MemoryPressure {
    /// `normal`, `warning` or `critical`: the word logs, the live status and the soak's events use.
    public var name: String {
        switch self {
        case .normal: "normal"
        case .warning: "warning"
        case .critical: "critical"
        }
    }

    /// The level named `name` (`normal`, `warning` or `critical`); nil for any other word.
    public init?(name: some StringProtocol) {
        guard let level = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = level
    }

    /// 0, 1, 2 for normal, warning, critical: levels compare by urgency.
    var urgency: Int {
        switch self {
        case .normal: 0
        case .warning: 1
        case .critical: 2
        }
    }
}

/// One reading of a PSI file: `/proc/pressure/memory`, or a cgroup v2 `memory.pressure`.
///
///     some avg10=0.18 avg60=0.03 avg300=0.00 total=161394
///     full avg10=0.00 avg60=0.00 avg300=0.00 total=0
///
/// `some` is the share of time at least one task waited for memory (reclaim, refaults of evicted pages), `full`
/// the share during which every non-idle task did; the averages are percentages over 10, 60 and 300 seconds,
/// `total` the stall time in microseconds since boot.
public struct PressureStallReading: Sendable, Hashable {
    /// One line of the file.
    public struct Line: Sendable, Hashable {
        /// Percent of the last 10 seconds stalled.
        public var average10: Double
        /// Percent of the last 60 seconds stalled.
        public var average60: Double
        /// Percent of the last 300 seconds stalled.
        public var average300: Double
        /// Microseconds stalled since boot.
        public var totalMicroseconds: UInt64

        /// Makes a line from its fields.
        public init(average10: Double, average60: Double, average300: Double, totalMicroseconds: UInt64) {
            self.average10 = average10
            self.average60 = average60
            self.average300 = average300
            self.totalMicroseconds = totalMicroseconds
        }
    }

    /// At least one task stalled.
    public var some: Line
    /// Every non-idle task stalled; nil in files that have no `full` line (older kernels' CPU pressure).
    public var full: Line?

    /// Parses the file's text; nil when it has no well-formed `some` line.
    public init?(parsing text: some StringProtocol) {
        var some: Line?
        var full: Line?
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard let kind = fields.first else { continue }
            var values: [String: String] = [:]
            for field in fields.dropFirst() {
                let pair = field.split(separator: "=", maxSplits: 1)
                if pair.count == 2 { values[String(pair[0])] = String(pair[1]) }
            }
            guard let a10 = values["avg10"].flatMap({ Double($0) }),
                let a60 = values["avg60"].flatMap({ Double($0) }),
                let a300 = values["avg300"].flatMap({ Double($0) }),
                let total = values["total"].flatMap({ UInt64($0) })
            else { continue }
            let parsed = Line(average10: a10, average60: a60, average300: a300, totalMicroseconds: total)
            switch String(kind) {
            case "some": some = parsed
            case "full": full = parsed
            default: continue
            }
        }
        guard let some else { return nil }
        self.some = some
        self.full = full
    }
}

/// The two figures of `/proc/meminfo` the monitor needs.
public struct MemoryAvailability: Sendable, Hashable {
    /// `MemTotal`, bytes.
    public var totalBytes: Int
    /// `MemAvailable`, bytes: what can be allocated without swapping, page cache that can be dropped included.
    public var availableBytes: Int

    /// Makes a reading from its fields.
    public init(totalBytes: Int, availableBytes: Int) {
        self.totalBytes = totalBytes
        self.availableBytes = availableBytes
    }

    /// Parses `/proc/meminfo` (`MemTotal:  24683520 kB`, …); nil when either line is missing.
    public init?(parsing text: some StringProtocol) {
        var total: Int?
        var available: Int?
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 2, let kibibytes = Int(fields[1]) else { continue }
            switch String(fields[0]) {
            case "MemTotal:": total = kibibytes * 1024
            case "MemAvailable:": available = kibibytes * 1024
            default: continue
            }
            if total != nil && available != nil { break }
        }
        guard let total, let available else { return nil }
        self.init(totalBytes: total, availableBytes: available)
    }
}

/// What the monitor measured over one sampling interval: the share of it stalled on memory, worst over every PSI
/// file it reads, and the memory available.
public struct PressureSample: Sendable, Hashable {
    /// Share of the interval, 0…1, during which some task stalled on memory.
    public var some: Double
    /// Share of the interval, 0…1, during which every non-idle task stalled on memory.
    public var full: Double
    /// `/proc/meminfo`'s figures; nil when they could not be read.
    public var memory: MemoryAvailability?

    /// Makes a sample from its fields.
    public init(some: Double, full: Double, memory: MemoryAvailability? = nil) {
        self.some = some
        self.full = full
        self.memory = memory
    }
}

/// When PSI readings mean `warning` and `critical`, and how long pressure must stay away before the level falls.
///
/// A sample *enters* a level when it reaches that level's threshold, and *holds* it while it stays above half of
/// it (the `exitRatio`); the level rises at the first sample that enters a higher one and falls only after
/// ``quietPeriod`` with no sample holding it — one level at a time, to the highest level held during that time.
/// Two thresholds and a quiet period keep a level from flapping on a noisy signal.
public struct MemoryPressureThresholds: Sendable, Hashable {
    /// `warning` when some task stalls on memory at least this share of the time (default 0.10: 100 ms a second).
    public var warningSome: Double = 0.10
    /// `critical` when some task stalls on memory at least this share of the time (default 0.40).
    public var criticalSome: Double = 0.40
    /// `critical` when every task stalls on memory at least this share of the time (default 0.05: the system
    /// made no progress 50 ms a second).
    public var criticalFull: Double = 0.05
    /// `critical` when `MemAvailable` is below this share of `MemTotal` (default 1/32, about 3 %), whatever the
    /// stall figures say.
    public var criticalAvailable: Double = 1.0 / 32
    /// A level is held while its figures stay above this share of its thresholds (for the memory floor: while
    /// `MemAvailable` stays below the floor divided by it). Default 0.5.
    public var exitRatio: Double = 0.5
    /// How long no sample may hold the level before it falls (default 10 s).
    public var quietPeriod: Duration = .seconds(10) {
        didSet { quietPeriodNanoseconds = quietPeriod.nanosecondsClamped }
    }
    /// ``quietPeriod`` in nanoseconds.
    package private(set) var quietPeriodNanoseconds: Int64 = 10_000_000_000

    /// The default thresholds.
    public init() {}

    /// The level `sample` enters (with `ratio` 1) or holds (with ``exitRatio``).
    func level(of sample: PressureSample, ratio: Double) -> MemoryPressure {
        if sample.some >= criticalSome * ratio || sample.full >= criticalFull * ratio {
            return .critical
        }
        if let memory = sample.memory, memory.totalBytes > 0,
            Double(memory.availableBytes) * ratio < Double(memory.totalBytes) * criticalAvailable
        {
            return .critical
        }
        return sample.some >= warningSome * ratio ? .warning : .normal
    }
}

/// The level memory pressure is at, from one sample after another: rises at once, falls after a quiet period.
///
/// - Complexity: O(1) per sample.
public struct MemoryPressureHysteresis: Sendable {
    /// The thresholds and quiet period in force.
    public let thresholds: MemoryPressureThresholds
    /// The level now.
    public private(set) var level = MemoryPressure.normal
    /// When a sample last held ``level`` (or it was entered), nanoseconds on the caller's clock.
    private var lastHeldNanoseconds: Int64 = 0
    /// The highest level samples held since then.
    private var highestSince = MemoryPressure.normal

    /// Starts at `normal`.
    public init(thresholds: MemoryPressureThresholds = MemoryPressureThresholds()) {
        self.thresholds = thresholds
    }

    /// Takes one sample.
    ///
    /// - Parameters:
    ///   - sample: the figures of the interval that just ended.
    ///   - now: when it ended, nanoseconds on a monotonic clock.
    /// - Returns: the new level when it changed, nil otherwise.
    public mutating func update(_ sample: PressureSample, atNanoseconds now: Int64) -> MemoryPressure? {
        let entered = thresholds.level(of: sample, ratio: 1)
        if entered.urgency > level.urgency {
            level = entered
            lastHeldNanoseconds = now
            highestSince = .normal
            return level
        }
        let held = thresholds.level(of: sample, ratio: thresholds.exitRatio)
        if held.urgency >= level.urgency {
            lastHeldNanoseconds = now
            highestSince = .normal
            return nil
        }
        if held.urgency > highestSince.urgency { highestSince = held }
        guard level != .normal, now - lastHeldNanoseconds >= thresholds.quietPeriodNanoseconds else { return nil }
        level = highestSince
        lastHeldNanoseconds = now
        highestSince = .normal
        return level
    }
}
