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
    case recorder(Recorder)
    case store(SegmentStore, stream: StreamRow)

    /// The stream the clip's frames belong to.
    public var stream: StreamDescription {
        switch self {
        case .recorder(let recorder): recorder.stream
        case .store(_, let row): row.description
        }
    }

    /// Calls `body` with every frame in `range`, in pts order.
    ///
    /// - Parameters:
    ///   - range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    ///   - body: receives each frame (valid only during the call); returns false to stop.
    public func frames(in range: Range<Int64>, _ body: (FrameView) throws -> Bool) throws {
        switch self {
        case .recorder(let recorder):
            try recorder.frames(in: range, body)
        case .store(let store, let row):
            try store.frames(streamName: row.name, in: range, body)
        }
    }

    /// Whether any frame lies in `range`, from the ring and the index alone (nothing is decoded).
    ///
    /// - Parameter range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    public func hasFrames(in range: Range<Int64>) throws -> Bool {
        switch self {
        case .recorder(let recorder):
            let snapshot = recorder.ring.pin(range, limit: 1)
            defer { snapshot.release() }
            if !snapshot.isEmpty { return true }
            guard let store = recorder.store,
                let row = try store.streams().first(where: { $0.name == recorder.configuration.streamName })
            else { return false }
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
        case .recorder(let recorder):
            var first = recorder.ring.statistics.firstPTSNanoseconds
            var last = recorder.ring.statistics.lastPTSNanoseconds
            if let store = recorder.store {
                let summary = try store.summary(streamName: recorder.configuration.streamName)
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

    /// The pts range of the last `duration`: `(newest − duration, newest]`.
    ///
    /// - Parameter duration: how much of the stream, measured in pts (whole nanoseconds).
    /// - Returns: pts nanoseconds on the stream clock, start inclusive, end exclusive, for ``frames(in:_:)`` and
    ///   ``export(range:format:to:progress:)``; nil when nothing is recorded.
    public func lastRange(_ duration: Duration) throws -> Range<Int64>? {
        guard let span = try span() else { return nil }
        return Range(last: duration, endingAt: span.upperBound)
    }

    /// Wall-clock time of the first frame minus its pts: maps wall-clock times to pts.
    func wallOffset() throws -> Int64? {
        guard let span = try span() else { return nil }
        var offset: Int64?
        try frames(in: span.lowerBound..<(span.lowerBound + 1)) { view in
            offset = view.info.wallNanoseconds - view.info.ptsNanoseconds
            return false
        }
        return offset
    }

    /// Turns a command-line time into a pts: nanoseconds on the stream clock.
    ///
    /// Stream times are pts. Wall-clock times map to pts through the first frame's wall-clock time; a time of day
    /// is taken on the local date of the first frame.
    /// - Throws: ``ClipError/noFrames(source:)`` when a wall-clock time is given and the store holds no frame.
    public func resolve(_ time: TimeSpec) throws -> Int64 {
        switch time {
        case .stream(let nanoseconds):
            return nanoseconds
        case .wall(let wall):
            guard let offset = try wallOffset() else { throw ClipError.noFrames(source: "store") }
            return wall - offset
        case .timeOfDay(let sinceMidnight):
            guard let offset = try wallOffset(), let span = try span() else {
                throw ClipError.noFrames(source: "store")
            }
            let firstWall = span.lowerBound + offset
            let localSeconds =
                firstWall / 1_000_000_000
                + TimeSpec.localUTCOffsetSeconds(atUTCSeconds: firstWall / 1_000_000_000)
            let midnightLocal = (localSeconds - ((localSeconds % 86_400) + 86_400) % 86_400)
            let midnightUTC = midnightLocal - TimeSpec.localUTCOffsetSeconds(atUTCSeconds: midnightLocal)
            return midnightUTC * 1_000_000_000 + sinceMidnight - offset
        }
    }
}
