import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore

/// Where a soak run is, for a progress line.
public struct SoakProgress: Sendable {
    /// A stage of a soak run; the raw value is how the progress line names it.
    public enum Phase: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// The camera is recording.
        case recording
        /// The final sync and seal.
        case finishing
        /// The last read-back pass over the store and the check of the ring's frames.
        case readingBack = "reading back"

        public var description: String { rawValue }
    }

    public var phase: Phase
    public var streamNanoseconds: Int64
    public var framesProduced: Int
    public var framesDropped: Int
    public var rssBytes: Int
}

/// A soak run: a camera-like load recorded under memory pressure, thermal frame-rate drops and disk faults, with
/// memory and every frame checked.
///
///     SyntheticCamera ──reserve/fill/commit──▶ Recorder (ring, eager spill) ──▶ SegmentStore
///       (pts on the camera clock;               │                                 │ FaultInjectingFileSystem
///        thermal states skip frames)            │ setPressure                     │ (disk=full / slow)
///     events at stream times ───────────────────┘                                 │
///     MemoryMonitor thread: resident size every 10 ms ── limits, pressure cuts    │
///     ReadbackThread: frames read back from the store as they become durable ◀────┘
///     at the end: last read-back pass, ring frames checked, every accepted frame accounted for
///
/// The run owns the recorder, its store (in ``SoakConfiguration/storeDirectory``), the fault-injecting file
/// system under it, and two helper threads; all are stopped before ``run(_:shouldStop:progress:)`` returns.
/// Its own bookkeeping is allocated up front (two bits per camera frame, a fixed sample buffer), so the harness
/// itself does not make memory grow.
public enum Soak {
    /// Runs a soak and checks its invariants (``SoakInvariant``).
    ///
    /// - Parameters:
    ///   - configuration: what to run; see ``SoakConfiguration/validate()``.
    ///   - shouldStop: polled once per frame and while the camera waits (for spill room or a frame's time); true
    ///   ends the recording early (the rest of the run still happens).
    ///   - progress: called on the producing thread about ten times a second.
    /// - Returns: the report; ``SoakReport/passed`` says whether every invariant held.
    /// - Throws: ``SoakConfigurationError`` for a configuration that cannot run; store errors when the store
    ///   cannot be opened or its summary read. A failed invariant is not an error.
    public static func run(
        _ configuration: SoakConfiguration, shouldStop: () -> Bool = { false },
        progress: ((SoakProgress) -> Void)? = nil
    ) throws -> SoakReport {
        try configuration.validate()
        var run = try SoakRun(configuration: configuration)
        return try run.run(shouldStop: shouldStop, progress: progress)
    }
}

/// The state of one run, on the producing thread.
struct SoakRun {
    let configuration: SoakConfiguration
    let disk = FaultInjectingFileSystem()
    let store: SegmentStore
    let camera: SyntheticCamera
    let recorder: Recorder
    let streamRow: StreamRow
    let monitor: MemoryMonitor
    let readback: ReadbackThread
    let started = ContinuousClock.now
    var report: SoakReport
    /// Camera frames the recorder accepted.
    var accepted: FrameBitset
    var thermal = ThermalState.nominal
    /// Copies kept by the `retain-buffers` sabotage, and their total size.
    var retained: [[UInt8]] = []
    var retainedBytes = 0

    init(configuration: SoakConfiguration) throws {
        self.configuration = configuration
        let options = StoreOptions(
            segmentMaxDuration: .seconds(10), diskBudget: configuration.diskBudget, fileSystem: disk)
        store = try SegmentStore.open(directory: configuration.storeDirectory, options: options)
        guard try store.summary().frames == 0 else {
            throw SoakConfigurationError(
                "\(configuration.storeDirectory) already holds frames; a soak needs an empty store")
        }
        camera = SyntheticCamera(
            layout: configuration.layout, frameDuration: configuration.frameDuration, noise: configuration.noise,
            seed: 1)
        recorder = try Recorder(
            stream: camera.stream, store: store, configuration: configuration.recorderConfiguration)
        guard let row = try store.streams().first(where: { $0.name == configuration.recorderConfiguration.streamName })
        else { throw SoakConfigurationError("the recorder made no stream in \(configuration.storeDirectory)") }
        streamRow = row
        monitor = MemoryMonitor(ring: recorder.ring, limit: configuration.memoryLimit, started: started)
        let frameCount = configuration.frameCount
        readback = ReadbackThread(
            store: store, stream: row,
            readback: Readback(
                frameCount: frameCount, frameDuration: configuration.frameDuration,
                sabotage: configuration.sabotage))
        accepted = FrameBitset(count: frameCount)
        report = SoakReport(configuration: configuration)
        report.events.reserveCapacity(configuration.events.count)
    }

    mutating func run(shouldStop: () -> Bool, progress: ((SoakProgress) -> Void)?) throws -> SoakReport {
        try monitor.start()
        do {
            try readback.start()
        } catch {
            _ = monitor.stop()
            throw error
        }
        record(shouldStop: shouldStop, progress: progress)
        report.recordingWallNanoseconds = monitor.now()
        monitor.recordingEnded()
        progress?(progressNow(.finishing))
        retained = []
        // Injected disk faults end with the run: the last segment is sealed and the store left clean.
        disk.setDiskFull(false)
        disk.setWriteDelay(.zero)
        do {
            try recorder.finish()
        } catch {
            report.lastError = "\(error)"
        }
        progress?(progressNow(.readingBack))
        var result = readback.finish()
        let snapshot = recorder.ring.pin(Int64.min..<Int64.max)
        for index in 0..<snapshot.count {
            snapshot.withFrame(at: index) { view, _ in result.check(view, from: .memory) }
        }
        report.framesInMemoryAtEnd = snapshot.count
        snapshot.release()
        let findings = monitor.stop()
        report.wallNanoseconds = monitor.now()
        try summarize(result, findings)
        return report
    }

    // MARK: Recording

    /// Produces every camera frame of the run, applying events as stream time reaches them.
    private mutating func record(shouldStop: () -> Bool, progress: ((SoakProgress) -> Void)?) {
        let frameCount = configuration.frameCount
        var nextEvent = 0
        var lastProgress = ContinuousClock.now
        for index in 0..<frameCount {
            if shouldStop() {
                report.endReason = .stopped
                break
            }
            let pts = FrameTime.frame(Int64(index), duration: configuration.frameDuration)!.nanoseconds!
            report.streamNanoseconds = pts
            // Published before the events of this instant, so samples taken while they apply count after them.
            monitor.streamTime.store(pts, ordering: .relaxed)
            if nextEvent < configuration.events.count && configuration.events[nextEvent].at <= pts {
                if configuration.speed == .realtime {
                    System.sleep(until: started + .nanoseconds(pts), unless: shouldStop)
                }
                while nextEvent < configuration.events.count && configuration.events[nextEvent].at <= pts {
                    apply(configuration.events[nextEvent], index: nextEvent)
                    nextEvent += 1
                }
            }
            guard index % thermal.frameDivisor == 0 else {
                report.framesSkippedByCamera += 1
                continue
            }
            report.framesProduced += 1
            switch configuration.speed {
            case .realtime:
                let due = started + .nanoseconds(pts)
                System.sleep(until: due, unless: shouldStop)
                let late = due.duration(to: .now).nanosecondsClamped
                report.latestFrameNanoseconds = max(report.latestFrameNanoseconds, late)
            case .max: recorder.waitForSpillRoom(until: shouldStop)
            }
            // A stop while waiting ends the recording before another frame is offered (it would only be dropped).
            if shouldStop() {
                report.framesProduced -= 1
                report.endReason = .stopped
                break
            }
            capture(index)
            if progress != nil, ContinuousClock.now - lastProgress >= .milliseconds(100) {
                lastProgress = ContinuousClock.now
                progress?(progressNow(.recording))
            }
        }
        if report.endReason != .stopped { report.streamNanoseconds = configuration.durationNanoseconds }
    }

    /// Captures camera frame `index` straight into a pooled slab and hands it to the recorder.
    private mutating func capture(_ index: Int) {
        guard let slab = recorder.reserve() else {
            report.framesDroppedOnArrival += 1
            return
        }
        let camera = self.camera
        let keepsCopy = configuration.sabotage == .retainBuffers && retainedBytes / 2 < configuration.memoryLimit
        let (info, copy) = slab.withUnsafeMutableBytes { bytes -> (FrameInfo?, [UInt8]?) in
            let info = try? camera.frame(at: Int64(index), into: bytes)
            return (info, keepsCopy ? Array(bytes) : nil)
        }
        if let copy {
            retainedBytes += copy.count
            retained.append(copy)
        }
        guard let info, let outcome = try? recorder.commit(slab, info: info) else {
            // The pts is out of range (a frame index beyond 2⁴⁸ frames): validation rules this out.
            report.problems.append("frame \(index) could not be made")
            return
        }
        switch outcome {
        case .stored:
            accepted[index] = true
            report.framesAccepted += 1
        case .dropped:
            report.framesDroppedOnArrival += 1
        }
    }

    /// Applies one event and records when it happened and what memory did.
    private mutating func apply(_ event: SoakEvent, index: Int) {
        let before = ResidentMemory.current() ?? 0
        let wall = monitor.now()
        var reducedLimit: Int?
        switch event.action {
        case .pressure(let level):
            if level != .normal {
                reducedLimit = configuration.limit(forBudget: recorder.memoryBudget(under: level))
            }
            monitor.pressureWillChange(event: index, limit: reducedLimit)
            recorder.setPressure(level)
            monitor.sampleNow()
        case .thermal(let state):
            thermal = state
        case .disk(.full):
            disk.setWriteDelay(.zero)
            disk.setDiskFull(true)
        case .disk(.slow):
            disk.setDiskFull(false)
            disk.setWriteDelay(SoakEvent.slowDiskWriteDelay)
        case .disk(.ok):
            disk.setDiskFull(false)
            disk.setWriteDelay(.zero)
        }
        report.events.append(
            SoakReport.Event(
                at: event.at, event: "\(event.action)", wallNanoseconds: wall, rssBeforeBytes: before,
                rssBytes: ResidentMemory.current() ?? 0, reducedLimitBytes: reducedLimit))
    }

    private func progressNow(_ phase: SoakProgress.Phase) -> SoakProgress {
        SoakProgress(
            phase: phase, streamNanoseconds: report.streamNanoseconds, framesProduced: report.framesProduced,
            framesDropped: report.framesDroppedOnArrival, rssBytes: ResidentMemory.current() ?? 0)
    }

}
