import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import SegmentStore
import Synchronization

/// Where a clip's frames come from: a live recorder (memory + disk) or a store on disk.
public enum ClipSource: Sendable {
    /// The first stream of a live recorder (its only one, for a recorder of one stream).
    case recorder(Recorder)
    /// One stream of a live recorder.
    case recorderStream(RecorderStream)
    /// One stream of a store on disk.
    case store(SegmentStore, stream: StreamRow)
    /// One stream of a live recorder, with frames of it pinned in memory (oldest first) that may have left its
    /// ring since: a save of a recorder without a store. The pinned frames come first, then the stream's from
    /// after the last of them.
    case pinned(RecorderStream, [RingSnapshot])

    /// The live stream, for a recorder source.
    var live: RecorderStream? {
        switch self {
        case .recorder(let recorder): recorder.streams[0]
        case .recorderStream(let stream), .pinned(let stream, _): stream
        case .store: nil
        }
    }

    /// The stream the clip's frames belong to.
    public var stream: StreamDescription {
        switch self {
        case .recorder(let recorder): recorder.stream
        case .recorderStream(let stream), .pinned(let stream, _): stream.stream
        case .store(_, let row): row.description
        }
    }

    /// The stream's name in the store.
    public var streamName: String {
        switch self {
        case .recorder(let recorder): recorder.streams[0].name
        case .recorderStream(let stream), .pinned(let stream, _): stream.name
        case .store(_, let row): row.name
        }
    }

    /// Where the stream's pts lie on the recorder clock every stream of the store shares: the mapping the recorder
    /// made or the store holds; the identity (recorder time = pts) for a stream that has neither yet.
    ///
    /// - Throws: store errors.
    public func clock() throws -> StreamClock {
        switch self {
        case .recorder, .recorderStream, .pinned:
            let live = live!
            if let clock = live.clock { return clock }
            if let store = live.store, let row = try store.streams().first(where: { $0.name == live.name }),
                let clock = try store.clock(of: row)
            {
                return clock
            }
            return .identity
        case .store(let store, let row):
            return try store.clock(of: row) ?? .identity
        }
    }

    /// Calls `body` with every frame in `range`, in pts order.
    ///
    /// - Parameters:
    ///   - range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    ///   - body: receives each frame (valid only during the call); returns false to stop.
    public func frames(in range: Range<Int64>, _ body: (FrameView) throws -> Bool) throws {
        switch self {
        case .recorder, .recorderStream:
            try live!.frames(in: range, body)
        case .store(let store, let row):
            try store.frames(streamName: row.name, in: range, body)
        case .pinned(let stream, let pins):
            var rest = range
            for pin in pins {
                for index in 0..<pin.count {
                    let keepGoing = try pin.withFrame(at: index) { view, _ in
                        range.contains(view.info.ptsNanoseconds) ? try body(view) : true
                    }
                    if !keepGoing { return }
                }
                if let last = pin.lastPTSNanoseconds, last >= rest.lowerBound {
                    rest = min(last + 1, range.upperBound)..<range.upperBound
                }
            }
            if !rest.isEmpty { try stream.frames(in: rest, body) }
        }
    }

    /// Whether any frame lies in `range`, from the ring and the index alone (nothing is decoded).
    ///
    /// - Parameter range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    public func hasFrames(in range: Range<Int64>) throws -> Bool {
        switch self {
        case .pinned(let stream, let pins):
            for pin in pins {
                for index in 0..<pin.count
                where pin.withFrame(at: index, { view, _ in range.contains(view.info.ptsNanoseconds) }) {
                    return true
                }
            }
            return try ClipSource.recorderStream(stream).hasFrames(in: range)
        case .recorder, .recorderStream:
            let live = live!
            let snapshot = live.ring.pin(range, limit: 1)
            defer { snapshot.release() }
            if !snapshot.isEmpty { return true }
            guard let store = live.store,
                let row = try store.streams().first(where: { $0.name == live.name })
            else { return false }
            // Frames the ring let go of since the last sync are written but not yet in the index: a range of them
            // alone read as "no frames" for about a second after they left memory.
            live.flushIndex()
            return try ClipSource.store(store, stream: row).hasFrames(in: range)
        case .store(let store, let row):
            var found = false
            try store.index.frames(streamID: row.id, in: range) { _ in
                found = true
                return false
            }
            return found
        }
    }

    /// The first and last pts recorded, nanoseconds on the stream clock, both inclusive; nil when nothing is.
    public func span() throws -> ClosedRange<Int64>? {
        switch self {
        case .recorder, .recorderStream, .pinned:
            let live = live!
            var first = live.ring.statistics.firstPTSNanoseconds
            var last = live.ring.statistics.lastPTSNanoseconds
            if let store = live.store, try store.streams().contains(where: { $0.name == live.name }) {
                let summary = try store.summary(streamName: live.name)
                if let diskFirst = summary.firstPTS { first = min(first ?? diskFirst, diskFirst) }
                if let diskLast = summary.lastPTS { last = max(last ?? diskLast, diskLast) }
            }
            guard let first, let last else { return nil }
            return first...last
        case .store(let store, let row):
            let summary = try store.summary(streamName: row.name)
            guard let first = summary.firstPTS, let last = summary.lastPTS else { return nil }
            return first...last
        }
    }

    /// How many frames an export of `range` (pts nanoseconds on the stream clock) writes at most, for its
    /// progress: the frame rate over the part of the range the stream's frames span, less its gaps (pauses, stops,
    /// losses), since a range may reach far before the oldest frame kept or over nights without a recorder
    /// (`last: 1h`: an export 89 % done said 7 %).
    public func framesAtMost(in range: Range<Int64>) -> Double {
        let step = max(1, stream.frameDuration.nanoseconds ?? 1)
        var (lower, upper) = (range.lowerBound, range.upperBound)
        if let span = try? span() {
            lower = max(lower, span.lowerBound)
            upper = min(upper, span.upperBound.addingSaturating(step))
        }
        guard upper > lower else { return 0 }
        // An estimate for progress only: gaps that cannot be read make it count every nanosecond.
        let empty = ((try? recordedGaps()) ?? []).reduce(0.0) { total, gap in
            guard gap.endNanoseconds > lower, gap.startNanoseconds < upper else { return total }
            return total + Double(min(gap.endNanoseconds, upper)) - Double(max(gap.startNanoseconds, lower))
        }
        return max(0, Double(upper) - Double(lower) - empty) / Double(step)
    }

    /// The pts range of the last `duration`: `(newest − duration, newest]`.
    ///
    /// - Parameter duration: how much of the stream, measured in pts (whole nanoseconds).
    /// - Returns: pts nanoseconds on the stream clock, start inclusive, end exclusive, for ``frames(in:_:)`` and
    ///   ``export(range:format:to:progress:)``; nil when nothing is recorded.
    public func lastRange(_ duration: Duration) throws -> Range<Int64>? {
        guard let span = try span() else { return nil }
        return Range(last: duration, endingAt: span.upperBound)
    }

    /// Turns a command-line time into a pts: nanoseconds on the stream clock.
    ///
    /// Stream times (`12.5s`) are recorder time, the clock every stream of the store shares (for a store's first
    /// stream, its own pts); wall-clock times map to recorder time through the wall-clock time of its 0 (for a
    /// store recorded by an older build, the first frame's wall-clock time minus its pts); a time of day is taken
    /// on the local date of the first frame. Each becomes this stream's pts through its ``clock()``.
    /// - Throws: ``ClipError/noFrames(source:)`` when a wall-clock time is given and the store holds no frame.
    public func resolve(_ time: TimeSpec) throws -> Int64 {
        try clock().pts(atRecorderTime: try ClipSource.recorderTime(time, clock: clock(), span: span()))
    }

    /// Turns a command-line time into recorder time, nanoseconds, through one stream's clock and span.
    ///
    /// - Parameters:
    ///   - time: the time given.
    ///   - clock: the stream's mapping (its ``StreamClock/wallNanoseconds`` is the store's recorder time 0).
    ///   - span: the stream's first and last pts, for a time of day (its date) and to know it holds frames.
    /// - Throws: ``ClipError/noFrames(source:)`` for a wall-clock time when `span` is nil; ``ValueError`` for a
    ///   time of day without a zone that daylight saving time skips or repeats on the first frame's date.
    public static func recorderTime(_ time: TimeSpec, clock: StreamClock, span: ClosedRange<Int64>?) throws
        -> Int64
    {
        switch time {
        case .stream(let nanoseconds):
            return nanoseconds
        case .wall(let wall):
            guard span != nil else { throw ClipError.noFrames(source: "store") }
            // Saturating: a wall time centuries from the recording is simply before or after all of it.
            return wall.addingSaturating(-clock.wallNanoseconds)
        case .timeOfDay(let sinceMidnight, let zone):
            guard let span else { throw ClipError.noFrames(source: "store") }
            let offset = clock.wallNanoseconds
            let firstWall = clock.recorderTime(ofPTS: span.lowerBound) + offset
            // On the first frame's date, in the zone given, else this process's local zone, where it must name one
            // moment (not one daylight saving time skips or repeats).
            if zone == nil, let problem = TimeSpec.timeOfDayProblem(sinceMidnight, onDateOf: firstWall / 1_000_000_000)
            {
                throw problem
            }
            let utc = TimeSpec.utcSeconds(ofTimeOfDay: sinceMidnight, onDateOf: firstWall / 1_000_000_000, zone: zone)
            return utc * 1_000_000_000 + sinceMidnight % 1_000_000_000 - offset
        }
    }
}
