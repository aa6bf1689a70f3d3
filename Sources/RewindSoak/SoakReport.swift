import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindTesting
import SegmentStore

/// The checks a soak run makes; each has a stable name that reports list when it fails.
public enum SoakInvariant: String, Sendable, CaseIterable {
    /// Every sample of the resident size is at most the memory budget + 48 MiB.
    case rssWithinLimit = "rss_within_limit"
    /// After each pressure cut (`pressure=warning` or `critical`), the resident size is at most the reduced budget
    /// + 48 MiB within 1 s, and stays there until the pressure changes again.
    case rssShedAfterPressure = "rss_shed_after_pressure"
    /// Every copy of a frame read back (from disk or memory) is bit-exact and carries its own pts.
    case framesBitExact = "frames_bit_exact"
    /// Every frame the recorder accepted is read back, or is counted as lost after acceptance (a failed write,
    /// evicted before it was written) and covered by a gap the store recorded with that reason.
    case noFramesLost = "no_frames_lost"
    /// The resident size does not grow: its least-squares slope after warm-up is below the limit.
    case rssFlat = "rss_flat"
}

/// What a soak run did and found: the `--report` JSON of `rewind soak`, and the data behind its chart.
public struct SoakReport: Sendable {
    /// Why a soak run ended; the raw value is what the summary line and `end_reason` in the JSON report say.
    public enum EndReason: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// The run reached ``SoakConfiguration/duration`` of stream time.
        case durationReached = "duration reached"
        /// It was stopped early (`shouldStop` returned true).
        case stopped

        public var description: String { rawValue }
    }

    /// One check and its outcome.
    public struct Invariant: Sendable, Hashable {
        public var name: String
        public var passed: Bool
        /// What was compared, with the numbers.
        public var detail: String
    }

    /// An event as it happened.
    public struct Event: Sendable, Hashable {
        /// Stream time at which it was due, nanoseconds.
        public var at: Int64
        /// `KEY=VALUE`.
        public var event: String
        /// When it was applied, nanoseconds since the run started (wall clock).
        public var wallNanoseconds: Int64
        /// The resident size just before and just after it was applied.
        public var rssBeforeBytes: Int
        public var rssBytes: Int
        /// For a pressure cut: the reduced budget + 48 MiB the resident size must fall to.
        public var reducedLimitBytes: Int?
        /// For a pressure cut: how long after the event the resident size was first at or below that limit.
        public var shedNanoseconds: Int64?
    }

    /// One reading of the resident size.
    public struct Sample: Sendable, Hashable {
        /// Nanoseconds since the run started (wall clock).
        public var wallNanoseconds: Int64
        /// The stream time the camera had reached.
        public var streamNanoseconds: Int64
        public var rssBytes: Int
        /// Bytes mapped by the ring's slab pool.
        public var ringBytes: Int
        /// False once the camera has stopped (final sync and read-back).
        public var isRecording: Bool
    }

    public var configuration: SoakConfiguration
    /// Stream time reached, nanoseconds (the duration, unless stopped early).
    public var streamNanoseconds: Int64 = 0
    /// Wall-clock time of the whole run and of its recording part, nanoseconds.
    public var wallNanoseconds: Int64 = 0
    public var recordingWallNanoseconds: Int64 = 0
    /// In real time, the most a frame was offered after its time, nanoseconds (0 at `--speed max`): a stall of the
    /// process (SIGSTOP, a suspended machine) shows here even when the run caught up by its end.
    public var latestFrameNanoseconds: Int64 = 0
    /// Why the run ended.
    public var endReason = EndReason.durationReached

    /// The budget (``SoakConfiguration/memoryBudget``), the limit on the resident size (budget + 48 MiB), and the
    /// budget under critical pressure.
    public var budgetBytes = 0
    public var limitBytes = 0
    public var criticalBudgetBytes = 0
    public var maxRSSBytes = 0
    public var maxRSSWallNanoseconds: Int64 = 0
    /// Least-squares slope of the resident size over wall-clock time after warm-up (see ``MemoryTrend``); nil
    /// when too few samples qualify.
    public var rssSlopeBytesPerSecond: Double?
    public var rssSlopeLimitBytesPerSecond: Double = 0
    public var slopeSampleCount = 0
    /// Samples kept for the chart, evenly thinned over the run; ``sampleCount`` were taken and checked.
    public var samples: [Sample] = []
    public var sampleCount = 0

    /// Camera frames delivered to the recorder (not counting those a thermal state skipped).
    public var framesProduced = 0
    /// Camera frames never captured because of a thermal state.
    public var framesSkippedByCamera = 0
    public var framesAccepted = 0
    /// Frames the recorder did not accept (backpressure or memory), counted among ``drops``.
    public var framesDroppedOnArrival = 0
    /// Frames durable in the store when the run ended (before retention deleted any).
    public var framesDurable = 0
    public var framesInMemoryAtEnd = 0
    /// Accepted frames read back bit-exact, from disk or memory.
    public var framesVerified = 0
    public var copiesVerifiedFromDisk = 0
    public var copiesVerifiedFromMemory = 0
    /// Accepted frames neither read back nor accounted for by a counted drop and its gap.
    public var framesLost = 0
    /// Copies read back that were not bit-exact (or could not be read).
    public var corruptFrames = 0
    /// Accepted frames missing because of a counted loss after acceptance (`disk error` a `disk=full` event made,
    /// `evicted before spill`).
    public var framesLostToCountedDrops = 0
    /// Of ``framesLost``, those missing where the disk failed by itself (`disk error` gaps without a `disk=full`
    /// event).
    public var framesLostToDiskFailure = 0
    /// The store the run recorded into when it is kept (`--store`); nil when it was a temporary one, removed.
    public var keptStore: String?
    /// Every frame lost, by reason (the recorder's counters).
    public var drops: [LossReason: Int] = [:]
    /// Gaps the store recorded, by reason.
    public var gaps: [LossReason: Int] = [:]
    public var segments = 0
    public var rawBytes: Int64 = 0
    public var storedBytes: Int64 = 0
    public var events: [Event] = []
    public var invariants: [Invariant] = []
    /// The first problems found (lost or corrupt frames, read errors), described.
    public var problems: [String] = []
    /// The recorder's last write error, if any (expected while the disk is full).
    public var lastError: String?

    public init(configuration: SoakConfiguration) {
        self.configuration = configuration
    }

    /// The names of the invariants that failed.
    public var failedInvariants: [String] { invariants.filter { !$0.passed }.map(\.name) }
    /// Every invariant held over the whole run asked for: a run stopped before its duration is no pass (its events
    /// due later never happened), whatever held until then.
    public var passed: Bool { failedInvariants.isEmpty && endReason == .durationReached }
    /// The run in one word: `FAILED` (an invariant failed), `STOPPED` (stopped before its duration, nothing failed),
    /// or `passed`.
    public var verdict: String { !failedInvariants.isEmpty ? "FAILED" : passed ? "passed" : "STOPPED" }

    /// Whether a real-time run took more than a tenth (and half a second) longer than its stream time, or offered a
    /// frame more than ``lateFrameLimitNanoseconds`` after its time: events came late, and the load was lighter than
    /// asked (a slow machine, a debug build) or came in a burst (the process was stopped for a while).
    public var pacingFellBehind: Bool {
        configuration.speed == .realtime
            && (wallNanoseconds > streamNanoseconds / 10 * 11 + 500_000_000
                || latestFrameNanoseconds > lateFrameLimitNanoseconds)
    }

    /// How late a real-time frame may be offered before the run counts as behind its pace: a second, or two frame
    /// times (as `rewind record` takes a frame that late for a pause).
    public var lateFrameLimitNanoseconds: Int64 {
        max(1_000_000_000, 2 * (configuration.frameDuration.nanosecondsRoundedUp ?? 0))
    }

    /// The report as JSON-compatible values, with the keys of the `rewind soak --report` contract.
    public var jsonObject: [String: Any] {
        let configuration = self.configuration
        var object: [String: Any] = [
            "passed": passed,
            "failed_invariants": failedInvariants,
            "invariants": invariants.map { ["name": $0.name, "passed": $0.passed, "detail": $0.detail] },
            "budget_bytes": budgetBytes,
            "limit_bytes": limitBytes,
            "critical_budget_bytes": criticalBudgetBytes,
            "max_rss_bytes": maxRSSBytes,
            "max_rss_at_ns": maxRSSWallNanoseconds,
            "rss_slope_limit_bytes_per_s": rssSlopeLimitBytesPerSecond,
            "slope_samples": slopeSampleCount,
            "sample_count": sampleCount,
            "frames_produced": framesProduced,
            "frames_skipped_by_camera": framesSkippedByCamera,
            "frames_accepted": framesAccepted,
            "frames_dropped_on_arrival": framesDroppedOnArrival,
            "frames_durable": framesDurable,
            "frames_in_memory_at_end": framesInMemoryAtEnd,
            "frames_verified": framesVerified,
            "copies_verified_from_disk": copiesVerifiedFromDisk,
            "copies_verified_from_memory": copiesVerifiedFromMemory,
            "frames_lost": framesLost,
            "corrupt_frames": corruptFrames,
            "frames_lost_to_counted_drops": framesLostToCountedDrops,
            "drops": drops.values.reduce(0, +),
            "drops_by_reason": drops.keyedByRawValue,
            "gaps_by_reason": gaps.keyedByRawValue,
            "segments": segments,
            "raw_bytes": rawBytes,
            "stored_bytes": storedBytes,
            "stream_ns": streamNanoseconds,
            "wall_ns": wallNanoseconds,
            "recording_wall_ns": recordingWallNanoseconds,
            "end_reason": endReason.rawValue,
            "pacing_fell_behind": pacingFellBehind,
            "latest_frame_ns": latestFrameNanoseconds,
            "problems": problems,
            "store": keptStore.map { $0 as Any } ?? NSNull(),
            "settings": [
                "duration_ns": configuration.durationNanoseconds,
                "speed": configuration.speed.rawValue,
                "width": configuration.layout.width,
                "height": configuration.layout.height,
                "pixel_format": configuration.layout.format.name,
                "frame_duration_value": configuration.frameDuration.value,
                "frame_duration_timescale": Int(configuration.frameDuration.timescale),
                "memory_budget_bytes": configuration.memoryBudget,
                "window_ns": configuration.windowNanoseconds,
                "disk_budget_bytes": configuration.diskBudget.map { $0 as Any } ?? NSNull(),
                "noise": configuration.noise,
                "sabotage": configuration.sabotage.map { $0.rawValue as Any } ?? NSNull(),
            ] as [String: Any],
            "events": events.map { event -> [String: Any] in
                var entry: [String: Any] = [
                    "at_ns": event.at, "event": event.event, "wall_ns": event.wallNanoseconds,
                    "rss_before_bytes": event.rssBeforeBytes, "rss_bytes": event.rssBytes,
                ]
                if let limit = event.reducedLimitBytes { entry["reduced_limit_bytes"] = limit }
                if let shed = event.shedNanoseconds { entry["shed_ns"] = shed }
                return entry
            },
            "samples": samples.map { sample -> [String: Any] in
                [
                    "wall_ns": sample.wallNanoseconds, "stream_ns": sample.streamNanoseconds,
                    "rss_bytes": sample.rssBytes, "ring_bytes": sample.ringBytes, "recording": sample.isRecording,
                ]
            },
        ]
        object["rss_slope_bytes_per_s"] = rssSlopeBytesPerSecond.map { $0 as Any } ?? NSNull()
        object["last_error"] = lastError.map { $0 as Any } ?? NSNull()
        return object
    }

    /// The report as pretty JSON with sorted keys.
    public func jsonData() throws -> Data {
        try JSONSerialization.data(withJSONObject: jsonObject, options: [.prettyPrinted, .sortedKeys])
    }
}
