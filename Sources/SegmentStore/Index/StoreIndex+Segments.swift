import CSQLite
import RewindCore
import RewindMigrations
import RewindSQLite
import RewindSystem

extension StoreIndex {
    // MARK: Segments

    /// Records a new, empty, `open` segment.
    ///
    /// - Parameters:
    ///   - streamID: Its stream.
    ///   - fileName: Its file name inside `DIR/segments/` (a `*.partial` name while open).
    ///   - formatVersion: The segment format version written in its header.
    ///   - createdWallNanoseconds: When it was created, Unix epoch nanoseconds.
    /// - Returns: The new segment's id.
    /// - Throws: ``StoreIndexError/fileNameInUse(_:)``, ``StoreIndexError/unknownStream(id:)``, ``SQLiteError``.
    package func insertSegment(
        streamID: Int64, fileName: String, formatVersion: Int, createdWallNanoseconds: Int64
    ) throws -> Int64 {
        try database.write { connection in
            let insert = try connection.statement(
                "INSERT INTO segments (stream_id, file_name, format_version, created_wall_ns) VALUES (?, ?, ?, ?)")
            try insert.bind(streamID, at: 1)
            try insert.bind(fileName, at: 2)
            try insert.bind(Int64(formatVersion), at: 3)
            try insert.bind(createdWallNanoseconds, at: 4)
            do {
                try insert.run()
            } catch let error as SQLiteError where error.extendedCode == SQLiteError.constraintUnique {
                throw StoreIndexError.fileNameInUse(fileName)
            } catch let error as SQLiteError where error.extendedCode == SQLiteError.constraintForeignKey {
                throw StoreIndexError.unknownStream(id: streamID)
            }
            let id = connection.lastInsertRowID
            if let sequence = SegmentFormat.sequence(ofFileName: fileName) {
                let highest = try connection.statement(
                    "INSERT INTO store_info (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = "
                        + "CAST(MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER)) AS TEXT)")
                try highest.bind(Self.highestSequenceKey, at: 1)
                try highest.bind(String(sequence), at: 2)
                try highest.run()
            }
            return id
        }
    }

    /// The `store_info` key of the highest segment number the index ever had: numbers are never used twice, even
    /// after retention deleted the newest segments.
    static let highestSequenceKey = "highest_segment_sequence"

    /// The highest segment number the index ever had a row for (nil for an index made before it was kept).
    ///
    /// - Throws: ``SQLiteError``.
    package func highestSegmentSequence() throws -> UInt64? {
        try info(Self.highestSequenceKey).flatMap { UInt64($0) }
    }

    /// Adds a batch of frames of one stream in one transaction, and updates their segments' counters, first and
    /// last pts.
    ///
    /// Frames must come in strictly increasing pts order within the batch; each frame's key frame (the last key
    /// frame at or before it) is worked out here, from the batch and the frame stored just before it.
    ///
    /// - Parameters:
    ///   - rows: The frames, in increasing pts order; their segments must be `open` segments of `streamID`.
    ///   - streamID: Their stream.
    /// - Throws: ``StoreIndexError/framesNotInPTSOrder(streamID:previous:next:)``,
    ///   ``StoreIndexError/duplicatePTS(streamID:pts:)``, ``StoreIndexError/segmentNotOpen(segmentID:streamID:)``,
    ///   ``SQLiteError``. Nothing of the batch is stored when it throws.
    /// - Complexity: O(k log n) for k rows in an index of n frames.
    package func addFrames(_ rows: [FrameRow], streamID: Int64) throws {
        guard let first = rows.first else { return }
        for (previous, next) in zip(rows, rows.dropFirst()) where next.ptsNanoseconds <= previous.ptsNanoseconds {
            throw StoreIndexError.framesNotInPTSOrder(
                streamID: streamID, previous: previous.ptsNanoseconds, next: next.ptsNanoseconds)
        }
        try database.write { connection in
            // The key frame in force just before the batch.
            let before = try connection.statement(
                "SELECT pts_ns, flags, key_pts_ns FROM frames WHERE stream_id = ? AND pts_ns < ? "
                    + "ORDER BY pts_ns DESC LIMIT 1")
            try before.bind(streamID, at: 1)
            try before.bind(first.ptsNanoseconds, at: 2)
            var keyPTS: Int64? = nil
            if try before.step() {
                keyPTS = before.int64(1) & Int64(FrameRow.keyFrameFlag) != 0 ? before.int64(0) : before.optionalInt64(2)
            }
            before.reset()

            let insert = try connection.statement(
                """
                INSERT INTO frames (stream_id, pts_ns, segment_id, file_offset, stored_length, raw_length, wall_ns,
                    flags, codec, key_pts_ns)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            var totals = SegmentTotals(row: first)
            for row in rows {
                if row.isKeyFrame { keyPTS = row.ptsNanoseconds }
                try insert.bind(streamID, at: 1)
                try insert.bind(row.ptsNanoseconds, at: 2)
                try insert.bind(row.segmentID, at: 3)
                try insert.bind(row.fileOffset, at: 4)
                try insert.bind(Int64(row.storedLength), at: 5)
                try insert.bind(Int64(row.rawLength), at: 6)
                try insert.bind(row.wallNanoseconds, at: 7)
                try insert.bind(Int64(row.flags), at: 8)
                try insert.bind(Int64(row.codec), at: 9)
                try insert.bind(keyPTS, at: 10)
                do {
                    try insert.run()
                } catch let error as SQLiteError where error.extendedCode == SQLiteError.constraintPrimaryKey {
                    throw StoreIndexError.duplicatePTS(streamID: streamID, pts: row.ptsNanoseconds)
                } catch let error as SQLiteError where error.extendedCode == SQLiteError.constraintForeignKey {
                    throw StoreIndexError.segmentNotOpen(segmentID: row.segmentID, streamID: streamID)
                }
                if row.segmentID != totals.segmentID {
                    try Self.apply(totals, streamID: streamID, connection)
                    totals = SegmentTotals(row: row)
                }
                totals.add(row)
            }
            try Self.apply(totals, streamID: streamID, connection)
            try Self.repairKeyFrames(after: rows[rows.count - 1].ptsNanoseconds, key: keyPTS, streamID, connection)
            try Self.raiseNewestPTS(streamID: streamID, to: rows[rows.count - 1].ptsNanoseconds, connection)
        }
    }

    /// Raises the stream's newest pts ever stored to `pts` (never lowers it): for frames a file holds that the
    /// index does not (yet), such as those after the damage in a `.partial` kept for a repair to salvage, so that a
    /// new recording continues after them.
    ///
    /// - Throws: ``SQLiteError``.
    package func raiseNewestPTS(streamID: Int64, to pts: Int64) throws {
        try database.write { connection in try Self.raiseNewestPTS(streamID: streamID, to: pts, connection) }
    }

    private static func raiseNewestPTS(streamID: Int64, to pts: Int64, _ connection: SQLiteConnection) throws {
        let newest = try connection.statement(
            "UPDATE streams SET newest_pts_ns = MAX(COALESCE(newest_pts_ns, ?1), ?1) WHERE id = ?2")
        defer { newest.reset() }
        try newest.bind(pts, at: 1)
        try newest.bind(streamID, at: 2)
        try newest.run()
    }

    /// The newest pts ever indexed for the stream (``addFrames(_:streamID:)`` raises it, nothing lowers it: frames
    /// retention or a repair removed count too); nil before its first frame since migration 0006.
    ///
    /// - Throws: ``SQLiteError``.
    package func newestIndexedPTS(streamID: Int64) throws -> Int64? {
        try database.withConnection { connection in
            let select = try connection.statement("SELECT newest_pts_ns FROM streams WHERE id = ?")
            defer { select.reset() }
            try select.bind(streamID, at: 1)
            return try select.step() ? select.optionalInt64(0) : nil
        }
    }

    /// When a batch lands before frames already stored (recovery re-adding a segment), points the frames after it,
    /// up to the next key frame, at the batch's last key frame. Appending (the usual case) costs one lookup.
    static func repairKeyFrames(
        after last: Int64, key: Int64?, _ streamID: Int64, _ connection: SQLiteConnection
    ) throws {
        guard let key else { return }
        let later = try connection.statement("SELECT 1 FROM frames WHERE stream_id = ? AND pts_ns > ? LIMIT 1")
        try later.bind(streamID, at: 1)
        try later.bind(last, at: 2)
        let hasLater = try later.step()
        later.reset()
        guard hasLater else { return }
        let update = try connection.statement(
            """
            UPDATE frames SET key_pts_ns = ?1
            WHERE stream_id = ?2 AND pts_ns > ?3 AND pts_ns < coalesce(
                (SELECT min(pts_ns) FROM frames WHERE stream_id = ?2 AND pts_ns > ?3 AND flags & 1 = 1),
                9223372036854775807)
            """)
        try update.bind(key, at: 1)
        try update.bind(streamID, at: 2)
        try update.bind(last, at: 3)
        try update.run()
    }

    /// Marks a segment `sealed` under its final file name, durably: the commit is fsynced before this returns.
    ///
    /// Sealing a sealed segment again only renames it; a `deleting` segment cannot be sealed.
    ///
    /// - Parameters:
    ///   - id: The segment.
    ///   - fileName: Its final name (the `.partial` file has been renamed to it).
    ///   - sealedWallNanoseconds: When it was sealed; now when nil.
    /// - Throws: ``StoreIndexError/unknownSegment(id:)``, ``StoreIndexError/segmentIsDeleting(id:)``,
    ///   ``StoreIndexError/fileNameInUse(_:)``, ``SQLiteError``.
    package func sealSegment(id: Int64, fileName: String, sealedWallNanoseconds: Int64? = nil) throws {
        try database.durableWrite { connection in
            let update = try connection.statement(
                "UPDATE segments SET state = 'sealed', file_name = ?, sealed_wall_ns = ? "
                    + "WHERE id = ? AND state != 'deleting'")
            try update.bind(fileName, at: 1)
            try update.bind(sealedWallNanoseconds ?? System.wallClockNanoseconds(), at: 2)
            try update.bind(id, at: 3)
            do {
                try update.run()
            } catch let error as SQLiteError where error.extendedCode == SQLiteError.constraintUnique {
                throw StoreIndexError.fileNameInUse(fileName)
            }
            guard connection.changes == 1 else { throw try Self.missingOrDeleting(id, connection) }
        }
    }

    /// Marks a segment `deleting` and removes its frame rows, so queries stop returning its frames at once; the
    /// file is deleted next, then ``removeSegment(id:)``.
    ///
    /// - Parameter segmentID: The segment.
    /// - Throws: ``StoreIndexError/unknownSegment(id:)``, ``SQLiteError``.
    /// - Complexity: O(k log n) for its k frames.
    package func markDeleting(segmentID: Int64) throws {
        try database.write { connection in
            let update = try connection.statement("UPDATE segments SET state = 'deleting' WHERE id = ?")
            try update.bind(segmentID, at: 1)
            try update.run()
            guard connection.changes == 1 else { throw StoreIndexError.unknownSegment(id: segmentID) }
            let delete = try connection.statement("DELETE FROM frames WHERE segment_id = ?")
            try delete.bind(segmentID, at: 1)
            try delete.run()
        }
    }

    /// Removes a segment row and its frame rows.
    ///
    /// - Parameter id: The segment.
    /// - Throws: ``StoreIndexError/unknownSegment(id:)``, ``SQLiteError``.
    /// - Complexity: O(k log n) for its k frames.
    package func removeSegment(id: Int64) throws {
        try database.write { connection in
            let deleteFrames = try connection.statement("DELETE FROM frames WHERE segment_id = ?")
            try deleteFrames.bind(id, at: 1)
            try deleteFrames.run()
            let delete = try connection.statement("DELETE FROM segments WHERE id = ?")
            try delete.bind(id, at: 1)
            try delete.run()
            guard connection.changes == 1 else { throw StoreIndexError.unknownSegment(id: id) }
        }
    }

    /// Segments of one stream (or all), ordered by first pts (empty segments first), then id.
    ///
    /// - Throws: ``SQLiteError``.
    /// - Complexity: O(s) for s segments.
    package func segments(streamID: Int64? = nil) throws -> [SegmentRow] {
        try database.withConnection { connection in
            let select =
                streamID == nil
                ? try connection.statement("\(Self.segmentColumns) ORDER BY first_pts_ns, id")
                : try connection.statement("\(Self.segmentColumns) WHERE stream_id = ? ORDER BY first_pts_ns, id")
            defer { select.reset() }
            if let streamID { try select.bind(streamID, at: 1) }
            var rows: [SegmentRow] = []
            while try select.step() { rows.append(try Self.segmentRow(select)) }
            return rows
        }
    }

    /// The segments of a stream holding frames in `[range.lowerBound, range.upperBound)`, by first pts.
    ///
    /// Segments of a stream do not overlap in time, so these are the segments starting inside the range plus the
    /// last one starting before it: two range scans of `segments_by_time`.
    ///
    /// - Throws: ``SQLiteError``.
    /// - Complexity: O(log s + k) for k matching segments out of s.
    package func segments(streamID: Int64, overlapping range: Range<Int64>) throws -> [SegmentRow] {
        try database.withConnection { connection in
            var rows: [SegmentRow] = []
            let before = try connection.statement(
                "\(Self.segmentColumns) WHERE stream_id = ? AND first_pts_ns < ? ORDER BY first_pts_ns DESC LIMIT 1")
            try before.bind(streamID, at: 1)
            try before.bind(range.lowerBound, at: 2)
            if try before.step() {
                let row = try Self.segmentRow(before)
                if let last = row.lastPTS, last >= range.lowerBound { rows.append(row) }
            }
            before.reset()
            let inside = try connection.statement(
                "\(Self.segmentColumns) WHERE stream_id = ? AND first_pts_ns >= ? AND first_pts_ns < ? "
                    + "ORDER BY first_pts_ns")
            defer { inside.reset() }
            try inside.bind(streamID, at: 1)
            try inside.bind(range.lowerBound, at: 2)
            try inside.bind(range.upperBound, at: 3)
            while try inside.step() { rows.append(try Self.segmentRow(inside)) }
            return rows
        }
    }

    /// The segment with this id, if any.
    ///
    /// - Throws: ``SQLiteError``.
    package func segment(id: Int64) throws -> SegmentRow? {
        try database.withConnection { connection in
            let select = try connection.statement("\(Self.segmentColumns) WHERE id = ?")
            defer { select.reset() }
            try select.bind(id, at: 1)
            return try select.step() ? try Self.segmentRow(select) : nil
        }
    }

    /// The segment with this file name, if any.
    ///
    /// - Throws: ``SQLiteError``.
    package func segment(fileName: String) throws -> SegmentRow? {
        try database.withConnection { connection in
            let select = try connection.statement("\(Self.segmentColumns) WHERE file_name = ?")
            defer { select.reset() }
            try select.bind(fileName, at: 1)
            return try select.step() ? try Self.segmentRow(select) : nil
        }
    }
}
