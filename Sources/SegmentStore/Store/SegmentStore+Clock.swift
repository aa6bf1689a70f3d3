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

    /// The newest pts ever stored for stream `row`, its frames since deleted by retention or lost to damage
    /// included: where a new recording of the stream continues after. Nil before its first frame (and for frames
    /// stored before migration 0006: then the newest frame kept stands in).
    ///
    /// - Throws: index errors.
    public func newestPTSEverStored(of row: StreamRow) throws -> Int64? {
        try SegmentStoreError.translatingIndexErrors { try index.newestIndexedPTS(streamID: row.id) }
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

extension SegmentStore {
    /// The wall-clock capture times of a stream's first and last stored frames, Unix-epoch nanoseconds; nil when it
    /// holds none.
    ///
    /// - Parameter streamName: the stream.
    /// - Throws: ``SegmentStoreError/unknownStream(_:)``; index errors.
    /// - Complexity: O(segments + log n).
    public func wallTimes(streamName: String) throws -> (first: Int64, last: Int64)? {
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
            return (first, last)
        }
    }
}
