import RewindCore

extension SegmentStore {
    /// Where the pts of stream `row` lie on the recorder clock every stream of the store shares.
    ///
    /// The mapping a recorder stored with the stream; for a stream recorded by an older build (no mapping), offset 0
    /// and recorder time 0 at the wall-clock time of its first frame minus that frame's pts — the mapping the query
    /// layer always used for one stream. Nil when the stream has neither a mapping nor a frame.
    ///
    /// - Parameter row: the stream, as ``streams()`` returns it.
    /// - Throws: index errors.
    /// - Complexity: O(log n) (the first frame's row).
    public func clock(of row: StreamRow) throws -> StreamClock? {
        if let clock = row.clock { return clock }
        return try SegmentStoreError.translatingIndexErrors {
            var first: FrameRow?
            try index.frames(streamID: row.id, in: Int64.min..<Int64.max) { frame in
                first = frame
                return false
            }
            guard let first else { return nil }
            return StreamClock(
                offsetNanoseconds: 0, wallNanoseconds: first.wallNanoseconds - first.ptsNanoseconds)
        }
    }

    /// The pts a new recording of stream `row` continues after (its first frame comes a `frameStep` later): the newest
    /// of the frames it keeps; of the frames it ever stored (retention may have deleted the newest while holds kept
    /// older ones: their pts are not used again, nor is the time they cover taken for time no recorder ran; unknown
    /// for frames stored before migration 0006); and of a lost tail (a gap past the last frame, e.g. `disk error`),
    /// whose end less `frameStep` counts. Nil for a stream that has none of these.
    ///
    /// - Throws: index errors.
    public func continuesAfter(_ row: StreamRow, frameStep: Int64) throws -> Int64? {
        let kept = try summary(streamName: row.name).lastPTS
        let ever = try SegmentStoreError.translatingIndexErrors { try index.newestIndexedPTS(streamID: row.id) }
        let lostTail = try gaps(streamName: row.name).map(\.endNanoseconds).max().map { $0 - frameStep }
        return [kept, ever, lostTail].compactMap { $0 }.max()
    }

    /// The wall-clock time of recorder time 0 for this store: the one its streams' mappings share (the first stream
    /// with a mapping or a frame decides); nil for a store without either.
    ///
    /// - Throws: index errors.
    /// - Complexity: O(streams × log n).
    public func recorderClockWall() throws -> Int64? {
        for row in try streams() {
            if let clock = try clock(of: row) { return clock.wallNanoseconds }
        }
        return nil
    }

    /// The recorder time just after the newest instant any stream of the store covers: a frame step after what
    /// ``continuesAfter(_:frameStep:)`` gives, on the stream's mapping; nil for a store without frames.
    ///
    /// A file recorded faster than real time ends after the wall clock's recorder time: the next recording's
    /// clock starts here, so its streams are placed together after everything stored.
    ///
    /// - Throws: index errors.
    /// - Complexity: O(streams × (log n + gaps)).
    public func recorderTimeEnd() throws -> Int64? {
        var end: Int64?
        for row in try streams() {
            let step = row.description.frameStepNanoseconds
            guard let clock = try clock(of: row), let last = try continuesAfter(row, frameStep: step) else { continue }
            let streamEnd = clock.recorderTime(ofPTS: last.addingSaturating(step))
            end = max(end ?? streamEnd, streamEnd)
        }
        return end
    }

    /// Stores where a stream's pts lie on the recorder clock.
    ///
    /// - Parameters:
    ///   - clock: the mapping.
    ///   - streamName: the stream.
    /// - Throws: ``SegmentStoreError/readOnly(_:)``, ``SegmentStoreError/unknownStream(_:)``; index errors.
    public func setClock(_ clock: StreamClock, streamName: String) throws {
        guard !isReadOnly else { throw SegmentStoreError.readOnly("map the clock of stream '\(streamName)'") }
        try SegmentStoreError.translatingIndexErrors {
            try index.setClock(clock, streamID: try streamID(named: streamName))
        }
    }
}

/// When a stream's stored frames were captured, by the wall clock: Unix-epoch nanoseconds.
///
/// A frame's capture time is the system clock's reading when it came; a clock set back while recording makes later
/// frames (higher pts) read earlier, so the first and last frames need not be the earliest and latest.
public struct CaptureTimes: Sendable, Hashable {
    /// The capture time of the first stored frame (the lowest pts).
    public var first: Int64
    /// The capture time of the last stored frame (the highest pts).
    public var last: Int64
    /// The earliest capture time of any stored frame.
    public var earliest: Int64
    /// The latest capture time of any stored frame.
    public var latest: Int64

    /// Makes capture times; each parameter is the field of the same name.
    public init(first: Int64, last: Int64, earliest: Int64, latest: Int64) {
        self.first = first
        self.last = last
        self.earliest = earliest
        self.latest = latest
    }

    /// Whether the wall clock went back while the frames were recorded, as far as the times tell: a frame was
    /// captured before the first one or after the last one. (A clock set back and forward again between them, by
    /// no more than it had moved on, leaves them the earliest and latest and is not seen.)
    public var wallClockWentBack: Bool { earliest < first || latest > last }
}

extension SegmentStore {
    /// The wall-clock capture times of a stream's stored frames: its first and last frames', and the earliest and
    /// latest of all; nil when it holds none.
    ///
    /// - Parameter streamName: the stream.
    /// - Throws: ``SegmentStoreError/unknownStream(_:)``; index errors.
    /// - Complexity: O(n) for the stream's n frames: wall times have no index, so the earliest and latest are a scan
    ///   of its rows (about 0.2 s a million frames, 4.6 hours at 60 fps).
    public func wallTimes(streamName: String) throws -> CaptureTimes? {
        try SegmentStoreError.translatingIndexErrors {
            let id = try streamID(named: streamName)
            let summary = try index.summary(streamID: id)
            guard let firstPTS = summary.firstPTS, let lastPTS = summary.lastPTS else { return nil }
            var first: Int64?
            var last: Int64?
            try index.frames(streamID: id, in: firstPTS..<(firstPTS + 1)) { row in
                first = row.wallNanoseconds
                return false
            }
            try index.frames(streamID: id, in: lastPTS..<(lastPTS + 1)) { row in
                last = row.wallNanoseconds
                return false
            }
            guard let first, let last else { return nil }
            // The scan covers the first and last frames too.
            let bounds = try index.wallTimeBounds(streamID: id) ?? min(first, last)...max(first, last)
            return CaptureTimes(first: first, last: last, earliest: bounds.lowerBound, latest: bounds.upperBound)
        }
    }
}
