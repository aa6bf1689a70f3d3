import CSQLite
import RewindCore
import RewindMigrations
import RewindSQLite
import RewindSystem

extension StoreIndex {
    // MARK: Frames

    /// Calls `body` with each frame of the stream whose pts is in `[range.lowerBound, range.upperBound)`, in pts
    /// order, until it returns false.
    ///
    /// Reads pages of rows (64 first, then 512) under the lock and calls `body` outside it, so memory stays
    /// bounded, the first frame arrives after one O(log n) seek, and `body` may call the index again. Each page
    /// is one range scan of the primary key; frames added while iterating may or may not be seen.
    ///
    /// - Parameters:
    ///   - streamID: The stream.
    ///   - range: Pts nanoseconds, start inclusive, end exclusive.
    ///   - body: Receives each frame; returns false to stop.
    /// - Throws: What `body` throws, ``SQLiteError``.
    /// - Complexity: O(log n + k) for k frames visited out of n.
    package func frames(streamID: Int64, in range: Range<Int64>, _ body: (FrameRow) throws -> Bool) throws {
        guard !range.isEmpty else { return }
        var lower = range.lowerBound
        var pageSize = 64
        var page: [FrameRow] = []
        page.reserveCapacity(512)
        var coverage = ScanCoverage(sealed: try segments(streamID: streamID, overlapping: range))
        while lower < range.upperBound {
            let limit = pageSize
            let start = lower
            try database.withConnection { connection in
                page.removeAll(keepingCapacity: true)
                let select = try connection.statement(
                    "\(Self.frameColumns) WHERE stream_id = ? AND pts_ns >= ? AND pts_ns < ? ORDER BY pts_ns LIMIT ?")
                defer { select.reset() }
                try select.bind(streamID, at: 1)
                try select.bind(start, at: 2)
                try select.bind(range.upperBound, at: 3)
                try select.bind(Int64(limit), at: 4)
                while try select.step() { page.append(Self.frameRow(select)) }
            }
            for row in page {
                try coverage.note(row)
                guard try body(row) else { return }
            }
            guard page.count == limit, let last = page.last else { break }
            lower = last.ptsNanoseconds + 1
            pageSize = 512
        }
        try coverage.check(range, now: try segments(streamID: streamID, overlapping: range))
    }

    /// What a scan of a stream's rows saw of each segment that was sealed when it started, whose rows never change
    /// but all at once (a deletion): a row missing between two it saw (its file's records follow one another), or at
    /// a segment's first or last frame inside the range, is a row the index lost, in pages a range scan skips or
    /// stops at (SQLite's own check finds them; a scan does not), never frames that are not there.
    struct ScanCoverage {
        /// The file names of the segments sealed at the start, by id.
        private let sealed: [Int64: String]
        /// Per segment seen: the first and last pts, and where in its file the record after the last one starts.
        private var seen: [Int64: (first: Int64, last: Int64, next: Int64)] = [:]
        /// The segment of the row before, and whether it was sealed.
        private var current: (id: Int64, isSealed: Bool)?

        init(sealed segments: [SegmentRow]) {
            sealed = Dictionary(
                segments.filter { $0.state == .sealed }.map { ($0.id, $0.fileName) },
                uniquingKeysWith: { first, _ in first })
        }

        mutating func note(_ row: FrameRow) throws {
            let next = row.fileOffset.addingSaturating(
                Int64(SegmentFormat.recordHeaderLength).addingSaturating(Int64(row.storedLength)))
            if current?.id != row.segmentID {
                current = (row.segmentID, sealed[row.segmentID] != nil)
            }
            guard current!.isSealed else { return }
            guard let before = seen[row.segmentID] else {
                seen[row.segmentID] = (row.ptsNanoseconds, row.ptsNanoseconds, next)
                return
            }
            guard row.fileOffset == before.next else {
                throw StoreIndexError.contradictsItself(
                    detail:
                        "segment \(sealed[row.segmentID] ?? "") has no row for the record at byte \(before.next) of its file, "
                        + "between its frames at pts \(before.last) and \(row.ptsNanoseconds) ns: rows are missing "
                        + "(pages of the index damaged, or rows deleted by another program)")
            }
            seen[row.segmentID] = (before.first, row.ptsNanoseconds, next)
        }

        /// Checks, once the scan of `range` reached its end, each segment sealed at its start and still sealed
        /// (`now`): its first and last frame inside the range were seen.
        func check(_ range: Range<Int64>, now: [SegmentRow]) throws {
            for segment in now where segment.state == .sealed && sealed[segment.id] != nil && segment.frameCount > 0 {
                let ends = [segment.firstPTS, segment.lastPTS].compactMap { $0 }.filter(range.contains)
                let saw = seen[segment.id]
                for end in ends where end != saw?.first && end != saw?.last {
                    throw StoreIndexError.contradictsItself(
                        detail: "a scan of the rows in [\(range.lowerBound), \(range.upperBound)) ns found none for "
                            + "the frame at pts \(end) ns of segment \(segment.fileName), which its segment row has: "
                            + "rows are missing (pages of the index damaged, or rows deleted by another program)")
                }
            }
        }
    }

    /// Where ``framePTS(streamID:_:_:)`` looks from a time.
    package enum FrameStep: Sendable {
        /// The last frame at or before the time.
        case atOrBefore
        /// The last frame strictly before the time.
        case before
        /// The first frame strictly after the time.
        case after
    }

    /// The pts of the stream's stored frame nearest `time` in the direction `step` says, or nil when there is none.
    ///
    /// - Throws: ``SQLiteError``.
    /// - Complexity: O(log n): one seek of the primary key.
    package func framePTS(streamID: Int64, _ step: FrameStep, _ time: Int64) throws -> Int64? {
        try database.withConnection { connection in
            let condition =
                switch step {
                case .atOrBefore: "pts_ns <= ? ORDER BY pts_ns DESC"
                case .before: "pts_ns < ? ORDER BY pts_ns DESC"
                case .after: "pts_ns > ? ORDER BY pts_ns"
                }
            let select = try connection.statement(
                "SELECT pts_ns FROM frames WHERE stream_id = ? AND \(condition) LIMIT 1")
            defer { select.reset() }
            try select.bind(streamID, at: 1)
            try select.bind(time, at: 2)
            return try select.step() ? select.int64(0) : nil
        }
    }

    /// The earliest and latest wall-clock capture times of the stream's frames, Unix-epoch nanoseconds; nil when it
    /// has none.
    ///
    /// - Throws: ``SQLiteError``.
    /// - Complexity: O(n) for the stream's n frames: one scan of its rows (wall times have no index).
    package func wallTimeBounds(streamID: Int64) throws -> ClosedRange<Int64>? {
        try database.withConnection { connection in
            let select = try connection.statement("SELECT min(wall_ns), max(wall_ns) FROM frames WHERE stream_id = ?")
            defer { select.reset() }
            try select.bind(streamID, at: 1)
            guard try select.step(), let earliest = select.optionalInt64(0), let latest = select.optionalInt64(1)
            else { return nil }
            return earliest...latest
        }
    }

    /// The key frame at or before `pts`: where decoding of the frame at `pts` starts.
    ///
    /// - Parameters:
    ///   - streamID: The stream.
    ///   - pts: Nanoseconds.
    /// - Returns: The key frame, or nil when no frame at or before `pts` has a key frame before it.
    /// - Throws: ``SQLiteError``.
    /// - Complexity: O(log n): two primary-key lookups. If the recorded key frame was removed since, a backward
    ///   scan to the nearest remaining key frame.
    package func keyFrame(streamID: Int64, atOrBefore pts: Int64) throws -> FrameRow? {
        try database.withConnection { connection in
            let select = try connection.statement(
                "SELECT \(Self.frameFields), key_pts_ns FROM frames WHERE stream_id = ? AND pts_ns <= ? "
                    + "ORDER BY pts_ns DESC LIMIT 1")
            try select.bind(streamID, at: 1)
            try select.bind(pts, at: 2)
            guard try select.step() else {
                select.reset()
                return nil
            }
            let row = Self.frameRow(select)
            let keyPTS = select.optionalInt64(8)
            select.reset()
            if row.isKeyFrame { return row }
            guard let keyPTS else { return nil }
            let key = try connection.statement("\(Self.frameColumns) WHERE stream_id = ? AND pts_ns = ?")
            try key.bind(streamID, at: 1)
            try key.bind(keyPTS, at: 2)
            let found = try key.step() ? Self.frameRow(key) : nil
            key.reset()
            if let found { return found }
            // The recorded key frame was removed (a truncated or deleted segment): search backwards for one.
            let search = try connection.statement(
                "\(Self.frameColumns) WHERE stream_id = ? AND pts_ns <= ? AND flags & 1 = 1 "
                    + "ORDER BY pts_ns DESC LIMIT 1")
            defer { search.reset() }
            try search.bind(streamID, at: 1)
            try search.bind(row.ptsNanoseconds, at: 2)
            return try search.step() ? Self.frameRow(search) : nil
        }
    }

    /// The frames of one segment, in pts order: what recovery and `rewind verify` compare with the file.
    ///
    /// - Parameter id: The segment.
    /// - Returns: Its frame rows (empty for an unknown segment).
    /// - Throws: ``SQLiteError``.
    /// - Complexity: O(log n + k) for its k frames (the `frames_by_segment` index).
    package func frames(ofSegment id: Int64) throws -> [FrameRow] {
        try database.withConnection { connection in
            let select = try connection.statement(
                "\(Self.frameColumns) WHERE segment_id = ? ORDER BY stream_id, pts_ns")
            defer { select.reset() }
            try select.bind(id, at: 1)
            var rows: [FrameRow] = []
            while try select.step() { rows.append(Self.frameRow(select)) }
            return rows
        }
    }

    /// Removes a segment's frames from `pts` on and recounts the segment: for recovery, when the file holds
    /// fewer frames than the index (e.g. a `.partial` file cut short by a crash).
    ///
    /// - Parameters:
    ///   - id: The segment.
    ///   - pts: The first pts to remove, nanoseconds; `Int64.min` removes every frame.
    /// - Returns: How many frame rows were removed.
    /// - Throws: ``StoreIndexError/unknownSegment(id:)``, ``SQLiteError``.
    /// - Complexity: O(k log n) for its k frames.
    @discardableResult
    package func removeFrames(ofSegment id: Int64, atOrAfter pts: Int64) throws -> Int {
        try database.write { connection in
            let delete = try connection.statement("DELETE FROM frames WHERE segment_id = ? AND pts_ns >= ?")
            try delete.bind(id, at: 1)
            try delete.bind(pts, at: 2)
            try delete.run()
            let removed = connection.changes
            let recount = try connection.statement(
                """
                UPDATE segments SET (frame_count, first_pts_ns, last_pts_ns, raw_bytes, stored_bytes) = (
                    SELECT count(*), min(pts_ns), max(pts_ns), coalesce(sum(raw_length), 0),
                        coalesce(sum(stored_length), 0)
                    FROM frames WHERE segment_id = ?1)
                WHERE id = ?1
                """)
            try recount.bind(id, at: 1)
            try recount.run()
            guard connection.changes == 1 else { throw StoreIndexError.unknownSegment(id: id) }
            return removed
        }
    }
}
