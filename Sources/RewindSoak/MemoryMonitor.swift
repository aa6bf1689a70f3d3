import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore
import Synchronization

/// Samples the process's resident size on its own thread, every 10 ms, and checks the memory invariants at every
/// sample: the resident size never above the limit (budget + allowance), and, after each pressure cut, at or below
/// the reduced limit within 1 s and from then on while the cut lasts.
///
/// Memory stays flat while it runs: the samples kept for the report and chart live in a buffer allocated once
/// (``SampleBuffer``), and everything else is a few counters.
final class MemoryMonitor: Sendable {
    /// One reading.
    struct Sample: Sendable, Hashable {
        /// Nanoseconds since the run started (wall clock).
        var wall: Int64
        /// The stream time the camera had reached.
        var stream: Int64
        /// Resident size, bytes.
        var rss: Int
        /// Bytes mapped by the ring's slab pool (frames, free slabs, pinned slabs).
        var ring: Int
        /// False once the camera has stopped (final sync and read-back).
        var isRecording: Bool
    }

    /// What happened after one pressure cut.
    struct PressureOutcome: Sendable, Hashable {
        /// The reduced limit: the budget under the new pressure plus the allowance.
        var limit: Int
        /// How long after the event the resident size was first at or below the limit.
        var shedAfter: Int64?
        /// A sample that broke the rule: above the limit more than 1 s after the event, or again after shedding.
        var violation: Sample?
        /// The cut ended (another pressure event, or the end) before 1 s passed without the size falling: nothing
        /// can be concluded.
        var isInconclusive = false
    }

    /// Everything the monitor found.
    struct Findings: Sendable {
        var samples: [Sample]
        var sampleCount = 0
        var unreadableSamples = 0
        var maxRSS = 0
        var maxRSSWall: Int64 = 0
        var samplesOverLimit = 0
        var firstOverLimit: Sample?
        /// By index of the event in the run's event list.
        var pressure: [Int: PressureOutcome] = [:]
    }

    /// How long after a pressure cut the resident size must be at or below the reduced limit.
    static let shedDeadline: Int64 = 1_000_000_000
    static let interval = DispatchTimeInterval.milliseconds(10)

    let limit: Int
    /// The stream time the camera has reached; set by the producer.
    let streamTime = Atomic<Int64>(0)
    private let ring: RingStore
    private let started: ContinuousClock.Instant
    private let isRecording = Atomic<Bool>(true)
    private let isStopping = Atomic<Bool>(false)
    private let wakeup = DispatchSemaphore(value: 0)
    private let stopped = DispatchSemaphore(value: 0)
    private let state: Mutex<State>

    fileprivate struct Watch {
        var event: Int
        var start: Int64
        var outcome: PressureOutcome
    }

    fileprivate struct State {
        var findings: Findings
        var buffer: SampleBuffer
        var watch: Watch?
    }

    /// - Parameters:
    ///   - ring: the recorder's ring (its mapped bytes are sampled alongside).
    ///   - limit: the resident size no sample may exceed.
    ///   - started: time zero of the run.
    ///   - sampleCapacity: samples kept for the report (older ones are thinned out as the run goes on).
    init(ring: RingStore, limit: Int, started: ContinuousClock.Instant, sampleCapacity: Int = 2048) {
        self.ring = ring
        self.limit = limit
        self.started = started
        state = Mutex(State(findings: Findings(samples: []), buffer: SampleBuffer(capacity: sampleCapacity)))
    }

    /// Starts the sampling thread.
    func start() throws(ThreadStartFailed) {
        try Threads.start(named: "rewind-soak-memory") { [self] in
            while !isStopping.load(ordering: .acquiring) {
                sampleNow()
                _ = wakeup.wait(timeout: .now() + Self.interval)
            }
            sampleNow()
            stopped.signal()
        }
    }

    /// Nanoseconds since the run started.
    func now() -> Int64 {
        let (seconds, attoseconds) = (ContinuousClock.now - started).components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    /// Takes a sample on the calling thread (the producer does, right after changing the pressure).
    func sampleNow() {
        let rss = ResidentMemory.current()
        let sample = Sample(
            wall: now(), stream: streamTime.load(ordering: .relaxed), rss: rss ?? 0,
            ring: ring.statistics.mappedBytes, isRecording: isRecording.load(ordering: .relaxed))
        state.withAnnotatedLock { state in
            guard rss != nil else {
                state.findings.unreadableSamples += 1
                return
            }
            state.record(sample, limit: limit)
        }
    }

    /// Called just before the recorder's pressure changes: ends the watch of the previous cut and, when `limit` is
    /// given (a cut), starts watching the resident size fall to it.
    ///
    /// - Parameters:
    ///   - event: the index of the pressure event.
    ///   - limit: the reduced limit, or nil when the pressure returns to normal.
    func pressureWillChange(event: Int, limit: Int?) {
        let start = now()
        state.withAnnotatedLock { state in
            state.endWatch(at: start)
            if let limit {
                state.watch = Watch(event: event, start: start, outcome: PressureOutcome(limit: limit))
            }
        }
    }

    /// Marks later samples as taken after the camera stopped.
    func recordingEnded() {
        isRecording.store(false, ordering: .relaxed)
    }

    /// Stops the thread after a last sample.
    ///
    /// - Returns: what the monitor found.
    func stop() -> Findings {
        isStopping.store(true, ordering: .releasing)
        wakeup.signal()
        stopped.wait()
        let end = now()
        return state.withAnnotatedLock { state in
            state.endWatch(at: end)
            var findings = state.findings
            findings.samples = state.buffer.samples
            return findings
        }
    }
}

extension MemoryMonitor.State {
    fileprivate mutating func record(_ sample: MemoryMonitor.Sample, limit: Int) {
        buffer.append(sample)
        findings.sampleCount += 1
        if sample.rss > findings.maxRSS {
            findings.maxRSS = sample.rss
            findings.maxRSSWall = sample.wall
        }
        if sample.rss > limit {
            findings.samplesOverLimit += 1
            if findings.firstOverLimit == nil { findings.firstOverLimit = sample }
        }
        guard var watch, watch.outcome.violation == nil else { return }
        let elapsed = sample.wall - watch.start
        if watch.outcome.shedAfter == nil {
            if sample.rss <= watch.outcome.limit {
                watch.outcome.shedAfter = max(0, elapsed)
            } else if elapsed > MemoryMonitor.shedDeadline {
                watch.outcome.violation = sample
            }
        } else if sample.rss > watch.outcome.limit {
            watch.outcome.violation = sample
        }
        self.watch = watch
    }

    fileprivate mutating func endWatch(at end: Int64) {
        guard var watch else { return }
        if watch.outcome.shedAfter == nil && watch.outcome.violation == nil {
            watch.outcome.isInconclusive = end - watch.start <= MemoryMonitor.shedDeadline
        }
        findings.pressure[watch.event] = watch.outcome
        self.watch = nil
    }
}

/// The samples kept for a report: at most `capacity`, allocated once. When full, every other sample is dropped
/// and from then on only every second one offered is kept (then every fourth, …), so the kept samples always
/// span the whole run at an even spacing.
///
///     offered:  0 1 2 3 4 5 6 7 8 9 …
///     stride 1: 0 1 2 3                  (capacity 4: full)
///     stride 2: 0   2   4   6            (full again)
///     stride 4: 0       4       8 …
struct SampleBuffer {
    let capacity: Int
    private(set) var samples: [MemoryMonitor.Sample]
    private var stride = 1
    private var offered = 0

    init(capacity: Int) {
        precondition(capacity >= 2, "a sample buffer holds at least two samples")
        self.capacity = capacity
        samples = []
        samples.reserveCapacity(capacity)
    }

    mutating func append(_ sample: MemoryMonitor.Sample) {
        defer { offered += 1 }
        guard offered % stride == 0 else { return }
        if samples.count == capacity {
            var kept = 0
            for index in Swift.stride(from: 0, to: samples.count, by: 2) {
                samples[kept] = samples[index]
                kept += 1
            }
            samples.removeLast(samples.count - kept)
            stride *= 2
            guard offered % stride == 0 else { return }
        }
        samples.append(sample)
    }
}
