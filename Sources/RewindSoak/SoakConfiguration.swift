import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindTesting
import SegmentStore

/// The settings of a soak run (``Soak/run(_:shouldStop:progress:)``).
public struct SoakConfiguration: Sendable {
    /// How fast the camera delivers frames.
    public enum Speed: String, Sendable, CaseIterable {
        /// As fast as the pipeline allows: the camera waits while the spill stage is a ring's worth behind (as a
        /// file input does), so no frame is dropped for backpressure; stream time runs ahead of the wall clock.
        case max
        /// At the frame rate, like a live camera: it never waits, and frames the ring has no room for are dropped
        /// on arrival (`drop-newest`) and counted.
        case realtime
    }

    /// A deliberate fault in the harness itself, to show that a check can fail.
    public enum Sabotage: String, Sendable, CaseIterable {
        /// Keep a copy of every frame produced (up to twice the memory limit): memory grows linearly.
        case retainBuffers = "retain-buffers"
        /// Flip one bit in a copy of the first frame read back from disk before checking it.
        case corruptFrame = "corrupt-frame"
        /// Pretend the first frame read back from disk was never seen (neither on disk nor in memory).
        case loseFrame = "lose-frame"
    }

    /// The resident size allowed above the memory budget for the process itself (code, runtime, SQLite, the
    /// camera's scene, the read-back buffer; the compressor's output buffer counts in the budget).
    public static let processAllowance = 48 << 20

    /// Format (NV12) and size of every frame.
    public var layout: FrameLayout
    public var frameDuration: FrameTime
    /// Stream time to run (whole nanoseconds of pts).
    public var duration: Duration {
        get { .nanoseconds(durationNanoseconds) }
        set { durationNanoseconds = newValue.nanosecondsClamped }
    }
    /// ``duration`` in nanoseconds, converted once when it is set.
    package private(set) var durationNanoseconds: Int64
    public var speed: Speed
    /// The ring's hard memory budget, bytes.
    public var memoryBudget: Int
    /// The rewind window kept in memory, measured in stream time (whole nanoseconds of pts).
    public var window: Duration {
        get { .nanoseconds(windowNanoseconds) }
        set { windowNanoseconds = newValue.nanosecondsClamped }
    }
    /// ``window`` in nanoseconds, converted once when it is set.
    package private(set) var windowNanoseconds: Int64
    /// Retention: the segment files may use at most this many bytes (nil: no limit).
    public var diskBudget: Int?
    /// Sensor noise of the synthetic camera, standard deviation in 8-bit code values (0…8).
    public var noise: Double
    /// What happens when, sorted by time.
    public var events: [SoakEvent]
    /// The store directory; it must not hold a store yet.
    public var storeDirectory: String
    public var sabotage: Sabotage?

    public init(
        layout: FrameLayout, frameDuration: FrameTime, duration: Duration, speed: Speed = .max,
        memoryBudget: Int = 256 << 20, window: Duration = .seconds(10), diskBudget: Int? = 4 << 30,
        noise: Double = 2, events: [SoakEvent] = [], storeDirectory: String, sabotage: Sabotage? = nil
    ) {
        self.layout = layout
        self.frameDuration = frameDuration
        self.durationNanoseconds = duration.nanosecondsClamped
        self.speed = speed
        self.memoryBudget = memoryBudget
        self.windowNanoseconds = window.nanosecondsClamped
        self.diskBudget = diskBudget
        self.noise = noise
        self.events = events.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }
            .map(\.element)
        self.storeDirectory = storeDirectory
        self.sabotage = sabotage
    }

    /// The resident size no sample may exceed: ``limit(forBudget:)`` of the whole budget.
    public var memoryLimit: Int { limit(forBudget: memoryBudget) }

    /// The resident size allowed while the ring's budget is `budget`: it plus ``processAllowance`` plus the
    /// harness's own ``bookkeepingBytes``.
    public func limit(forBudget budget: Int) -> Int {
        let extra = Self.processAllowance + bookkeepingBytes
        return budget > Int.max - extra ? Int.max : budget + extra  // a budget near 2⁶³ has no limit above it
    }

    /// What ``memoryLimit`` is made of, for reports: `budget 256.0 MiB + 48 MiB`, and the bookkeeping once it reaches
    /// 1 MiB.
    public var memoryLimitTerms: String {
        "budget \(formatBytes(Int64(memoryBudget))) + 48 MiB"
            + (bookkeepingBytes >= 1 << 20 ? " + \(formatBytes(Int64(bookkeepingBytes))) of frame bookkeeping" : "")
    }

    /// What the harness allocates up front to account for every camera frame: three bits per frame (accepted, read
    /// back, damaged). Not the recorder's memory, so the limit makes room for it.
    public var bookkeepingBytes: Int { 3 * 8 * ((frameCount + 63) / 64) }

    /// The recorder's settings: eager spill, `drop-newest` backpressure, the budget and window given.
    public var recorderConfiguration: RecorderConfiguration {
        RecorderConfiguration(streamName: "soak", window: window, memoryBudget: memoryBudget)
    }

    /// How many camera frames (captured or skipped) the run spans: those whose pts is below ``duration``.
    public var frameCount: Int {
        // pts(n) = floor(n × value × 1e9 / timescale) < duration  ⟺  n < duration × timescale / (value × 1e9).
        let numerator = Int128(durationNanoseconds) * Int128(frameDuration.timescale)
        let denominator = Int128(frameDuration.value) * 1_000_000_000
        return Int(clamping: (numerator + denominator - 1) / denominator)
    }

    /// The most camera frames a run may span (its bookkeeping takes three bits per frame, allocated up front: at
    /// most 256 MiB; 1 << 29 frames is 103 days at 60 fps).
    public static let maximumFrameCount = 1 << 29

    /// Checks what the types cannot.
    ///
    /// - Throws: ``SoakConfigurationError`` saying what is wrong: starting with the option, for a value wrong by
    ///   itself; in words naming the options, for values that each hold but cannot work together.
    public func validate() throws(SoakConfigurationError) {
        guard durationNanoseconds > 0 else { throw .init("--duration must be longer than 0s") }
        guard frameDuration.value > 0 else { throw .init("--fps must be positive") }
        guard frameCount <= Self.maximumFrameCount else {
            throw .init(
                "\(frameCount) frames is more than a soak can track (\(Self.maximumFrameCount), three bits each): give a "
                    + "shorter --duration or a lower --fps")
        }
        guard layout.width >= SyntheticCamera.minimumWidth && layout.height >= SyntheticCamera.minimumHeight else {
            throw .init(
                "--size: frames must be at least \(SyntheticCamera.minimumWidth)x\(SyntheticCamera.minimumHeight) "
                    + "to carry the synthetic camera's mark")
        }
        guard noise >= 0 && noise <= 8 else { throw .init("--noise must be 0…8 code values") }
        guard windowNanoseconds > 0 else { throw .init("--window must be longer than 0s") }
        // Frame times are whole nanoseconds rounded down: at 30 fps two frames lie 33 333 333 or 33 333 334 ns apart,
        // and the window must span the longer step.
        let frameNanoseconds = frameDuration.nanosecondsRoundedUp ?? 0
        guard windowNanoseconds >= frameNanoseconds else {
            let (window, frame) = formatSecondsApart(windowNanoseconds, frameNanoseconds)
            throw .init(
                "a window of \(window) is shorter than one frame (\(frame)), so it holds no frame before the newest; "
                    + "give at least \(roundedUpDuration(frameNanoseconds))")
        }
        // Each frame takes whole pages in the ring.
        let slab = Recorder.smallestMemoryBudget(for: [layout])
        let minimum = 8 * slab
        guard memoryBudget >= minimum else {
            throw .init(
                "a memory budget of \(formatBytes(Int64(memoryBudget))) holds fewer than 8 frames of \(layout) "
                    + "(\(formatBytes(Int64(slab))) each in whole pages); give at least --memory \(kibibytesUp(minimum))"
            )
        }
        if let diskBudget, diskBudget < 256 * layout.byteCount {
            // Retention deletes the oldest of at least eight segments: each must hold enough frames that the
            // read-back, a pass about every second, reads them first.
            throw .init(
                "a disk budget of \(formatBytes(Int64(diskBudget))) holds fewer than 256 frames of \(layout); give at "
                    + "least --disk \(kibibytesUp(256 * layout.byteCount)), or 0 for no limit")
        }
        // An event happens at the first frame at or after its time: after the last frame it never would.
        let lastFrame = FrameTime.frame(Int64(frameCount - 1), duration: frameDuration)?.nanoseconds ?? .max
        if let event = events.first(where: { $0.at > lastFrame }) {
            throw .init(
                "--events: event '\(event)' is after the run's last frame (pts \(formatSeconds(lastFrame))), so it "
                    + "would never happen")
        }
        // The copies it keeps must outgrow the limit, or the sabotaged run passes and shows nothing.
        let allFrames = Int64(frameCount) * Int64(layout.byteCount)
        if sabotage == .retainBuffers && allFrames < Int64(memoryLimit) {
            throw .init(
                "--sabotage retain-buffers keeps a copy of every frame to break rss_within_limit, but the run's "
                    + "\(frameCount) frames of \(formatBytes(Int64(layout.byteCount))) add up to "
                    + "\(formatBytes(allFrames)), under the limit of \(formatBytes(Int64(memoryLimit))): give a longer "
                    + "--duration or a larger --size")
        }
    }
}

/// `bytes` as a size the command line reads, rounded up to whole KiB (`28801KiB`).
private func kibibytesUp(_ bytes: Int) -> String { "\((bytes + 1023) / 1024)KiB" }

/// A soak configuration that cannot run.
public struct SoakConfigurationError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
