import Foundation
import RewindCore
import RewindSystem
import SegmentStore

/// How ``Recorder/record(from:options:shouldStop:progress:)`` reads its source.
public struct RecordLoopOptions: Sendable {
    /// How fast the loop reads its source.
    public enum Pacing: Sendable, Hashable, CaseIterable {
        /// Read as fast as the pipeline allows (a file recorded at once).
        case asFastAsPossible
        /// Wait until each frame's pts has come on a clock started at the first frame (a file played as if live).
        /// A frame read more than ``RecordLoopOptions/pauseThreshold`` (or two frame steps) after its time moves
        /// that clock on: after a pause the pace resumes instead of catching up in a burst.
        case realtime
    }

    /// How late a frame may come in real time before the loop takes it for a pause (the process stopped, the
    /// machine suspended) and paces the next frames from it.
    public static let pauseThreshold: Duration = .seconds(1)

    /// What the loop does when the spill stage has fallen behind and memory is full of frames not yet written.
    public enum SpillLag: Sendable, Hashable, CaseIterable {
        /// Wait before reading the next frame until the spill stage has room, so no frame is dropped for it: for
        /// sources that can wait (files).
        case wait
        /// Keep reading; the recorder's ``BackpressurePolicy`` decides which frame is dropped: for sources that
        /// must not wait (a live camera).
        case drop
    }

    /// How fast the source is read.
    public var pacing: Pacing
    /// Stop before the first frame whose pts is this far past the first frame's (whole nanoseconds of pts).
    public var duration: Duration? {
        get { durationNanoseconds.map { .nanoseconds($0) } }
        set { durationNanoseconds = newValue?.nanosecondsClamped }
    }
    /// ``duration`` in nanoseconds, converted once when it is set; the loop compares each pts against it.
    package private(set) var durationNanoseconds: Int64?
    /// What to do when the spill stage falls behind.
    public var spillLag: SpillLag

    /// Makes options.
    ///
    /// - Parameters:
    ///   - pacing: how fast the source is read.
    ///   - duration: how much stream time to record (nil: until the source ends or the loop is stopped).
    ///   - spillLag: what to do when the spill stage falls behind; by default `.wait` when reading as fast as
    ///     possible and `.drop` in real time.
    public init(pacing: Pacing = .asFastAsPossible, duration: Duration? = nil, spillLag: SpillLag? = nil) {
        self.pacing = pacing
        self.durationNanoseconds = duration?.nanosecondsClamped
        self.spillLag = spillLag ?? (pacing == .realtime ? .drop : .wait)
    }
}

/// What a record loop read.
public struct RecordLoopResult: Sendable {
    /// Why a record loop ended; the raw value is the phrase the command line prints.
    public enum EndReason: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// The source had no more frames.
        case endOfInput = "end of input"
        /// `shouldStop` returned true.
        case stopped
        /// The next frame was past ``RecordLoopOptions/duration``.
        case durationReached = "duration reached"

        /// The phrase the command line prints: the raw value (`end of input`, `stopped`, `duration reached`).
        public var description: String { rawValue }
    }

    /// Frames read from the source.
    public var framesRead = 0
    /// Frames the ring accepted.
    public var framesStored = 0
    /// Frames dropped on arrival (the recorder's statistics say why: spill behind, memory budget, pinned frames).
    public var framesDropped = 0
    /// Why the loop ended.
    public var endReason = EndReason.endOfInput

    /// An empty result: no frames read, stored or dropped, ended by ``EndReason/endOfInput``.
    public init() {}
}

extension Recorder {
    /// Records the first stream from `source`: ``RecorderStream/record(from:options:shouldStop:progress:)``.
    ///
    /// - Throws: the source's error (malformed or truncated input). Frames stored before it stay stored; call
    ///   ``finish()`` afterwards either way.
    @discardableResult
    public func record<Source: FrameSource>(
        from source: inout Source, options: RecordLoopOptions = .init(), shouldStop: () -> Bool = { false },
        progress: ((RecordLoopResult, Int64) -> Void)? = nil
    ) throws -> RecordLoopResult {
        try streams[0].record(from: &source, options: options, shouldStop: shouldStop, progress: progress)
    }
}

extension RecorderStream {
    /// Reads `source` frame by frame straight into pooled slabs (the zero-copy path) until it ends, `duration` is
    /// reached or `shouldStop` returns true.
    ///
    /// - Parameters:
    ///   - source: the frames to record.
    ///   - options: pacing, duration and what to do when the spill stage falls behind.
    ///   - shouldStop: asked before each frame and while the loop waits (for spill room, about every half
    ///     millisecond; for a frame's time in real time, every 50 ms); true ends the loop without reading on.
    ///   - progress: called after each frame read with the counts so far and that frame's pts (nanoseconds on
    ///     the source's clock).
    /// - Throws: the source's error (malformed or truncated input). Frames stored before it stay stored; call
    ///   ``finish()`` afterwards either way.
    @discardableResult
    public func record<Source: FrameSource>(
        from source: inout Source, options: RecordLoopOptions = .init(), shouldStop: () -> Bool = { false },
        progress: ((RecordLoopResult, Int64) -> Void)? = nil
    ) throws -> RecordLoopResult {
        precondition(source.stream.layout == stream.layout, "source layout \(source.stream.layout) != \(stream.layout)")
        var result = RecordLoopResult()
        var firstPTS: Int64?
        var startInstant: ContinuousClock.Instant?
        // The last frame's pts and how far after the one before it came (at first, the nominal frame duration): in
        // real time, the next frame is expected that far after it.
        var lastPTS: Int64?
        var lastStep = stream.frameDuration.nanoseconds ?? 0
        // In real time, the frame times a pause left out (the process stopped, the machine suspended): every later
        // frame is put that many frames on, where a live camera's frame would have been captured.
        var pausedFrames: Int64 = 0
        // Where a frame goes when the ring has no slab for it: read (to keep the input in step) and discarded.
        var scratch: [UInt8] = []
        while true {
            if shouldStop() {
                result.endReason = .stopped
                break
            }
            if options.spillLag == .wait {
                waitForSpillRoom(until: shouldStop)
                // A stop while waiting ends the loop before another frame is read (it would only be dropped).
                if shouldStop() {
                    result.endReason = .stopped
                    break
                }
            }
            // In real time, whether the frame has room is decided when it is due, not a frame early: the spill stage
            // writes the frame before it meanwhile (a small ring has room for only one unwritten frame).
            if options.pacing == .realtime, let start = startInstant, let first = firstPTS, let last = lastPTS,
                lastStep > 0
            {
                let due = last.addingSaturating(lastStep) - first
                guard System.sleep(until: start + .nanoseconds(due), unless: shouldStop) else {
                    result.endReason = .stopped
                    break
                }
            }
            /// Counts the frame and applies the duration limit and pacing, moving it on past the pauses before it;
            /// false ends the loop.
            func admit(_ info: inout FrameInfo) -> Bool {
                result.framesRead += 1
                info = moved(info, by: pausedFrames)
                var pts = info.ptsNanoseconds
                let first = firstPTS ?? pts
                firstPTS = first
                var paused = false
                if options.pacing == .realtime, let start = startInstant {
                    let late = start.advanced(by: .nanoseconds(pts - first)).duration(to: .now)
                    if late > max(RecordLoopOptions.pauseThreshold, .nanoseconds(lastStep) * 2) {
                        // A pause (the process stopped, the machine suspended): the frames a live camera gave
                        // meanwhile were never captured, so this frame and those after it go where they are
                        // captured, a whole number of frames on (the stored times and wall-clock queries stay true,
                        // and so does every other stream's alignment; the hole is an `input interval` gap). The pace
                        // goes on from now with what is left: catching up would burst the frames it is behind on,
                        // which the spill stage could only drop.
                        let frame = stream.frameDuration.nanoseconds ?? 0
                        let skipped = frame > 0 ? late.nanosecondsClamped / frame : 0
                        let before = pts
                        info = moved(info, by: skipped)
                        pts = info.ptsNanoseconds
                        paused = pts != before
                        if paused { pausedFrames += skipped }
                        startInstant = start.advanced(by: late - .nanoseconds(pts - before))
                    }
                }
                // The next frame is expected a step after this one: the source's, not the pause's.
                if let lastPTS, !paused { lastStep = pts &- lastPTS }
                lastPTS = pts
                if let duration = options.durationNanoseconds, pts - first >= duration {
                    result.framesRead -= 1
                    result.endReason = .durationReached
                    // The pause ran past the duration: what it left out within the duration is still an interval
                    // of the input, from the last frame to the duration's end.
                    if paused { noteInputPaused(untilSourcePTS: first.addingSaturating(duration)) }
                    return false
                }
                if options.pacing == .realtime {
                    let start = startInstant ?? ContinuousClock.now
                    startInstant = start
                    // However far the next pts lies, a stop ends the wait within 50 ms.
                    guard System.sleep(until: start + .nanoseconds(pts - first), unless: shouldStop) else {
                        result.framesRead -= 1
                        result.endReason = .stopped
                        return false
                    }
                }
                return true
            }
            // Room is taken only for a frame that comes, and one past the duration is not read: neither the end of
            // the input nor the duration may count a frame dropped for want of room that never was.
            guard try source.nextFrameComes() else { break }
            if let duration = options.durationNanoseconds, let first = firstPTS, let next = source.nextPTS,
                next &- first >= duration
            {
                result.endReason = .durationReached
                break
            }
            var deferredDrop: DeferredDrop?
            if let reserved = reserve(deferringDrop: &deferredDrop) {
                guard var info = try reserved.withUnsafeMutableBytes({ try source.readFrame(into: $0) }),
                    admit(&info)
                else { break }
                switch try commit(reserved, info: info) {
                case .stored: result.framesStored += 1
                case .dropped: result.framesDropped += 1
                }
                progress?(result, info.ptsNanoseconds)
            } else {
                if scratch.isEmpty { scratch = [UInt8](repeating: 0, count: stream.layout.byteCount) }
                guard var info = try scratch.withUnsafeMutableBytes({ try source.readFrame(into: $0) }),
                    admit(&info)
                else { break }
                if let deferredDrop { countDrop(deferredDrop, of: info) }
                result.framesDropped += 1
                progress?(result, info.ptsNanoseconds)
            }
        }
        return result
    }

    /// `info` moved on by `frames` frame durations, its capture time too; as it is when that does not fit (a source
    /// whose pts are on another clock than its frame rate's, or beyond 64 bits).
    private func moved(_ info: FrameInfo, by frames: Int64) -> FrameInfo {
        let duration = stream.frameDuration
        guard frames > 0, info.pts.timescale == duration.timescale, let frame = duration.nanoseconds else {
            return info
        }
        let (step, over) = frames.multipliedReportingOverflow(by: duration.value)
        let (value, beyond) = info.pts.value.addingReportingOverflow(step)
        let (shift, wide) = frames.multipliedReportingOverflow(by: frame)
        guard !over, !beyond, !wide,
            let moved = try? FrameInfo(
                pts: FrameTime(value: value, timescale: duration.timescale),
                wallNanoseconds: info.wallNanoseconds.addingSaturating(shift), color: info.color)
        else { return info }
        return moved
    }
}
