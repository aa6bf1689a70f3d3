import CSQLite
import RewindCore
import RewindMigrations
import RewindSQLite
import RewindSystem

/// The SQLite index of a segment store (`DIR/index.sqlite`): streams, segment files and one row per stored frame.
///
/// The index answers "which frames overlap [t0, t1)" with one range scan of the `frames` primary key
/// `(stream_id, pts_ns)`, so the time to the first frame of a range is O(log n) however large the store grows.
/// The segment files stay the source of truth: every row here can be rebuilt from them.
///
/// Thread-safe: all calls share one connection behind a lock. Other processes may open the same file with
/// `readOnly: true` while a recorder writes (WAL mode): they never see "database is locked".
public final class StoreIndex: Sendable {
    /// The underlying connection.
    public let database: SQLiteDatabase

    /// Opens the index at `path`, creating it and applying migrations unless `readOnly`.
    ///
    /// - Parameters:
    ///   - path: The database file, normally `DIR/index.sqlite`.
    ///   - readOnly: Open with `SQLITE_OPEN_READONLY` (never creates or migrates; a schema that is not exactly
    ///     this build's is refused).
    ///   - migrations: The migrations to apply; the shipped ones unless a test injects others.
    /// - Throws: ``SQLiteError`` when the file cannot be opened or is corrupt; ``MigrationError`` when the schema
    ///   is newer than this build, was changed, is outdated (read-only), or a migration fails.
    public init(path: String, readOnly: Bool = false, migrations: [Migration] = Migration.all) throws {
        database = try SQLiteDatabase(path: path, readOnly: readOnly)
        let runner = MigrationRunner(migrations: migrations)
        if readOnly {
            try runner.validate(database)
        } else {
            try runner.migrate(database)
        }
    }

    /// The database file.
    public var path: String { database.path }

    // MARK: Streams

    /// Returns the stream called `name`, creating it with `description` if it does not exist.
    ///
    /// - Parameters:
    ///   - name: The stream's unique name, e.g. `camera`.
    ///   - description: What its frames are.
    /// - Returns: The stored stream.
    /// - Throws: ``StoreIndexError/streamDescriptionMismatch(name:stored:requested:)`` when the stream exists with
    ///   another description; ``SQLiteError``.
    public func stream(named name: String, description: StreamDescription) throws -> StreamRow {
        if let stored = try stream(named: name) { return try Self.checked(stored, against: description) }
        return try database.write { connection in
            // Another process may have created it since the read above.
            if let stored = try Self.findStream(named: name, connection) {
                return try Self.checked(stored, against: description)
            }
            let insert = try connection.statement(
                """
                INSERT INTO streams (name, pixel_format, width, height, frame_duration_value,
                    frame_duration_timescale, color_matrix, color_range, created_wall_ns)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            try insert.bind(name, at: 1)
            try insert.bind(description.layout.format.name, at: 2)
            try insert.bind(Int64(description.layout.width), at: 3)
            try insert.bind(Int64(description.layout.height), at: 4)
            try insert.bind(description.frameDuration.value, at: 5)
            try insert.bind(Int64(description.frameDuration.timescale), at: 6)
            try insert.bind(description.color.matrix.name, at: 7)
            try insert.bind(description.color.range.name, at: 8)
            try insert.bind(System.wallClockNanoseconds(), at: 9)
            try insert.run()
            return StreamRow(id: connection.lastInsertRowID, name: name, description: description)
        }
    }

    /// The stream called `name`, if it exists (works on a read-only index).
    ///
    /// - Throws: ``StoreIndexError/invalidStreamRow(id:detail:)``, ``SQLiteError``.
    public func stream(named name: String) throws -> StreamRow? {
        try database.withConnection { connection in try Self.findStream(named: name, connection) }
    }

    private static func findStream(named name: String, _ connection: SQLiteConnection) throws -> StreamRow? {
        let select = try connection.statement("\(streamColumns) WHERE name = ?")
        defer { select.reset() }
        try select.bind(name, at: 1)
        return try select.step() ? try streamRow(select) : nil
    }

    private static func checked(_ stored: StreamRow, against description: StreamDescription) throws -> StreamRow {
        guard stored.description == description else {
            throw StoreIndexError.streamDescriptionMismatch(
                name: stored.name, stored: stored.description, requested: description)
        }
        return stored
    }

    /// Every stream, by id.
    ///
    /// - Throws: ``StoreIndexError/invalidStreamRow(id:detail:)``, ``SQLiteError``.
    public func streams() throws -> [StreamRow] {
        try database.withConnection { connection in
            let select = try connection.statement("\(Self.streamColumns) ORDER BY id")
            defer { select.reset() }
            var rows: [StreamRow] = []
            while try select.step() { rows.append(try Self.streamRow(select)) }
            return rows
        }
    }

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
    public func insertSegment(
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
            return connection.lastInsertRowID
        }
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
    public func addFrames(_ rows: [FrameRow], streamID: Int64) throws {
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
        }
    }

    /// When a batch lands before frames already stored (recovery re-adding a segment), points the frames after it,
    /// up to the next key frame, at the batch's last key frame. Appending (the usual case) costs one lookup.
    private static func repairKeyFrames(
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
    public func sealSegment(id: Int64, fileName: String, sealedWallNanoseconds: Int64? = nil) throws {
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
    public func markDeleting(segmentID: Int64) throws {
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
    public func removeSegment(id: Int64) throws {
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
    public func segments(streamID: Int64? = nil) throws -> [SegmentRow] {
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
    public func segments(streamID: Int64, overlapping range: Range<Int64>) throws -> [SegmentRow] {
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
    public func segment(id: Int64) throws -> SegmentRow? {
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
    public func segment(fileName: String) throws -> SegmentRow? {
        try database.withConnection { connection in
            let select = try connection.statement("\(Self.segmentColumns) WHERE file_name = ?")
            defer { select.reset() }
            try select.bind(fileName, at: 1)
            return try select.step() ? try Self.segmentRow(select) : nil
        }
    }

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
    public func frames(streamID: Int64, in range: Range<Int64>, _ body: (FrameRow) throws -> Bool) throws {
        var lower = range.lowerBound
        var pageSize = 64
        var page: [FrameRow] = []
        page.reserveCapacity(512)
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
            for row in page where try !body(row) { return }
            guard page.count == limit, let last = page.last else { return }
            lower = last.ptsNanoseconds + 1
            pageSize = 512
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
    public func keyFrame(streamID: Int64, atOrBefore pts: Int64) throws -> FrameRow? {
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
    public func frames(ofSegment id: Int64) throws -> [FrameRow] {
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
    public func removeFrames(ofSegment id: Int64, atOrAfter pts: Int64) throws -> Int {
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

    // MARK: Gaps and drops

    /// Records a gap.
    ///
    /// - Throws: ``SQLiteError`` (a constraint error when `endNanoseconds < startNanoseconds`).
    public func recordGap(_ gap: GapRow) throws {
        try database.write { connection in
            let insert = try connection.statement(
                "INSERT INTO gaps (stream_id, start_ns, end_ns, reason) VALUES (?, ?, ?, ?)")
            try insert.bind(gap.streamID, at: 1)
            try insert.bind(gap.startNanoseconds, at: 2)
            try insert.bind(gap.endNanoseconds, at: 3)
            try insert.bind(gap.reason, at: 4)
            try insert.run()
        }
    }

    /// The gaps of one stream (or all), by stream then start.
    ///
    /// - Throws: ``SQLiteError``.
    public func gaps(streamID: Int64? = nil) throws -> [GapRow] {
        try database.withConnection { connection in
            let columns = "SELECT stream_id, start_ns, end_ns, reason FROM gaps"
            let select =
                streamID == nil
                ? try connection.statement("\(columns) ORDER BY stream_id, start_ns, id")
                : try connection.statement("\(columns) WHERE stream_id = ? ORDER BY start_ns, id")
            defer { select.reset() }
            if let streamID { try select.bind(streamID, at: 1) }
            var rows: [GapRow] = []
            while try select.step() {
                rows.append(
                    GapRow(
                        streamID: select.int64(0), startNanoseconds: select.int64(1), endNanoseconds: select.int64(2),
                        reason: select.text(3)))
            }
            return rows
        }
    }

    /// Adds `count` to the stream's drop counter for `reason`.
    ///
    /// - Throws: ``SQLiteError``.
    public func addDrops(streamID: Int64, reason: String, count: Int) throws {
        precondition(count >= 0, "drop count must not be negative, got \(count)")
        try database.write { connection in
            let upsert = try connection.statement(
                "INSERT INTO drops (stream_id, reason, count) VALUES (?, ?, ?) "
                    + "ON CONFLICT (stream_id, reason) DO UPDATE SET count = count + excluded.count")
            try upsert.bind(streamID, at: 1)
            try upsert.bind(reason, at: 2)
            try upsert.bind(Int64(count), at: 3)
            try upsert.run()
        }
    }

    /// Dropped frames by reason, for one stream or summed over all.
    ///
    /// - Throws: ``SQLiteError``.
    public func drops(streamID: Int64? = nil) throws -> [String: Int] {
        try database.withConnection { connection in
            let select =
                streamID == nil
                ? try connection.statement("SELECT reason, sum(count) FROM drops GROUP BY reason")
                : try connection.statement("SELECT reason, count FROM drops WHERE stream_id = ?")
            defer { select.reset() }
            if let streamID { try select.bind(streamID, at: 1) }
            var counts: [String: Int] = [:]
            while try select.step() { counts[select.text(0)] = Int(select.int64(1)) }
            return counts
        }
    }

    // MARK: Summary and maintenance

    /// Totals over the live (not `deleting`) segments of one stream or of all.
    ///
    /// - Throws: ``SQLiteError``.
    /// - Complexity: O(s) for s segments (computed from segment counters, not frame rows).
    public func summary(streamID: Int64? = nil) throws -> IndexSummary {
        try database.withConnection { connection in
            let aggregate = """
                SELECT count(*), coalesce(sum(frame_count), 0), min(first_pts_ns), max(last_pts_ns),
                    coalesce(sum(raw_bytes), 0), coalesce(sum(stored_bytes), 0)
                FROM segments WHERE state != 'deleting'
                """
            let select =
                streamID == nil
                ? try connection.statement(aggregate)
                : try connection.statement(aggregate + " AND stream_id = ?")
            defer { select.reset() }
            if let streamID { try select.bind(streamID, at: 1) }
            try select.step()
            return IndexSummary(
                frames: Int(select.int64(1)), firstPTS: select.optionalInt64(2), lastPTS: select.optionalInt64(3),
                rawBytes: select.int64(4), storedBytes: select.int64(5), segments: Int(select.int64(0)))
        }
    }

    /// Copies the WAL into the database file without blocking readers or writers (`wal_checkpoint(PASSIVE)`).
    ///
    /// - Throws: ``SQLiteError``.
    public func checkpoint() throws {
        try database.checkpoint()
    }

    // MARK: Store information

    /// The value stored under `key` in `store_info` (e.g. a store id or the creating version), if any.
    ///
    /// - Throws: ``SQLiteError``.
    public func info(_ key: String) throws -> String? {
        try database.withConnection { connection in
            let select = try connection.statement("SELECT value FROM store_info WHERE key = ?")
            defer { select.reset() }
            try select.bind(key, at: 1)
            return try select.step() ? select.text(0) : nil
        }
    }

    /// Stores `value` under `key` in `store_info`, replacing any previous value.
    ///
    /// - Throws: ``SQLiteError``.
    public func setInfo(_ key: String, to value: String) throws {
        try database.write { connection in
            let upsert = try connection.statement(
                "INSERT INTO store_info (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            )
            try upsert.bind(key, at: 1)
            try upsert.bind(value, at: 2)
            try upsert.run()
        }
    }

    // MARK: Row decoding

    private static func missingOrDeleting(_ id: Int64, _ connection: SQLiteConnection) throws -> StoreIndexError {
        let select = try connection.statement("SELECT state FROM segments WHERE id = ?")
        defer { select.reset() }
        try select.bind(id, at: 1)
        return try select.step() ? .segmentIsDeleting(id: id) : .unknownSegment(id: id)
    }

    private static let streamColumns = """
        SELECT id, name, pixel_format, width, height, frame_duration_value, frame_duration_timescale,
            color_matrix, color_range FROM streams
        """

    private static let segmentColumns = """
        SELECT id, stream_id, file_name, state, format_version, first_pts_ns, last_pts_ns, frame_count, raw_bytes,
            stored_bytes, created_wall_ns, sealed_wall_ns FROM segments
        """

    private static let frameFields = "pts_ns, wall_ns, segment_id, file_offset, stored_length, raw_length, flags, codec"

    private static let frameColumns = "SELECT \(frameFields) FROM frames"

    private static func streamRow(_ row: SQLiteStatement) throws -> StreamRow {
        let id = row.int64(0)
        let formatName = row.text(2)
        guard let format = PixelFormat(name: formatName) else {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "unknown pixel format '\(formatName)'")
        }
        let matrixName = row.text(7)
        guard let matrix = ColorInfo.Matrix.allCases.first(where: { $0.name == matrixName }) else {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "unknown colour matrix '\(matrixName)'")
        }
        let rangeName = row.text(8)
        guard let range = ColorInfo.Range.allCases.first(where: { $0.name == rangeName }) else {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "unknown colour range '\(rangeName)'")
        }
        let width = Int(row.int64(3))
        let height = Int(row.int64(4))
        let layout: FrameLayout
        do {
            layout = try FrameLayout(format: format, width: width, height: height)
        } catch {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "\(error)")
        }
        let durationValue = row.int64(5)
        let timescale = row.int64(6)
        guard durationValue > 0, timescale > 0, timescale <= Int64(Int32.max) else {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "frame duration \(durationValue)/\(timescale)")
        }
        let description = StreamDescription(
            layout: layout, frameDuration: FrameTime(value: durationValue, timescale: Int32(timescale)),
            color: ColorInfo(matrix: matrix, range: range))
        return StreamRow(id: id, name: row.text(1), description: description)
    }

    private static func segmentRow(_ row: SQLiteStatement) throws -> SegmentRow {
        let stateName = row.text(3)
        guard let state = SegmentRow.State(rawValue: stateName) else {
            throw StoreIndexError.invalidStreamRow(id: row.int64(1), detail: "segment state '\(stateName)'")
        }
        return SegmentRow(
            id: row.int64(0), streamID: row.int64(1), fileName: row.text(2), state: state,
            formatVersion: Int(row.int64(4)), firstPTS: row.optionalInt64(5), lastPTS: row.optionalInt64(6),
            frameCount: Int(row.int64(7)), rawBytes: row.int64(8), storedBytes: row.int64(9),
            createdWallNanoseconds: row.int64(10), sealedWallNanoseconds: row.optionalInt64(11))
    }

    private static func frameRow(_ row: SQLiteStatement) -> FrameRow {
        FrameRow(
            ptsNanoseconds: row.int64(0), wallNanoseconds: row.int64(1), segmentID: row.int64(2),
            fileOffset: row.int64(3), storedLength: Int(row.int64(4)), rawLength: Int(row.int64(5)),
            flags: UInt8(truncatingIfNeeded: row.int64(6)), codec: UInt8(truncatingIfNeeded: row.int64(7)))
    }

    /// The counters one batch adds to one segment.
    private struct SegmentTotals {
        var segmentID: Int64
        var firstPTS: Int64
        var lastPTS: Int64
        var count: Int64 = 0
        var rawBytes: Int64 = 0
        var storedBytes: Int64 = 0

        init(row: FrameRow) {
            segmentID = row.segmentID
            firstPTS = row.ptsNanoseconds
            lastPTS = row.ptsNanoseconds
        }

        mutating func add(_ row: FrameRow) {
            lastPTS = row.ptsNanoseconds
            count += 1
            rawBytes += Int64(row.rawLength)
            storedBytes += Int64(row.storedLength)
        }
    }

    private static func apply(_ totals: SegmentTotals, streamID: Int64, _ connection: SQLiteConnection) throws {
        let update = try connection.statement(
            """
            UPDATE segments SET
                first_pts_ns = CASE WHEN first_pts_ns IS NULL OR ?1 < first_pts_ns THEN ?1 ELSE first_pts_ns END,
                last_pts_ns = CASE WHEN last_pts_ns IS NULL OR ?2 > last_pts_ns THEN ?2 ELSE last_pts_ns END,
                frame_count = frame_count + ?3, raw_bytes = raw_bytes + ?4, stored_bytes = stored_bytes + ?5
            WHERE id = ?6 AND stream_id = ?7 AND state = 'open'
            """)
        try update.bind(totals.firstPTS, at: 1)
        try update.bind(totals.lastPTS, at: 2)
        try update.bind(totals.count, at: 3)
        try update.bind(totals.rawBytes, at: 4)
        try update.bind(totals.storedBytes, at: 5)
        try update.bind(totals.segmentID, at: 6)
        try update.bind(streamID, at: 7)
        try update.run()
        guard connection.changes == 1 else {
            throw StoreIndexError.segmentNotOpen(segmentID: totals.segmentID, streamID: streamID)
        }
    }
}
