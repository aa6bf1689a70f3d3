import CSQLite
import RewindCore
import RewindMigrations
import RewindSQLite
import RewindSystem
import Synchronization

/// The SQLite index of a segment store (`DIR/index.sqlite`): streams, segment files and one row per stored frame.
///
/// The index answers "which frames overlap [t0, t1)" with one range scan of the `frames` primary key
/// `(stream_id, pts_ns)`, so the time to the first frame of a range is O(log n) however large the store grows.
/// The segment files stay the source of truth: every row here can be rebuilt from them.
///
/// Thread-safe: all calls share one connection behind a lock. Other processes may open the same file with
/// `readOnly: true` while a recorder writes (WAL mode): they never see "database is locked".
package final class StoreIndex: Sendable {
    /// The underlying connection.
    package let database: SQLiteDatabase
    /// Hears every change to the gaps and drop counters once it is committed (``observeLosses(_:)``).
    let lossObserver = Mutex<LossObserver?>(nil)
    /// `SELECT` of every column of a ``StreamRow``; read-only over a store not yet migrated to keep chroma siting and
    /// pixel aspect (migration 7), it reads them as not known.
    let streamColumns: String

    /// Opens the index at `path`, creating it and applying migrations unless `readOnly`.
    ///
    /// - Parameters:
    ///   - path: The database file, normally `DIR/index.sqlite`.
    ///   - readOnly: Open with `SQLITE_OPEN_READONLY` (never creates or migrates; a schema that is not exactly
    ///     this build's is refused).
    ///   - migrations: The migrations to apply; the shipped ones unless a test injects others.
    /// - Throws: ``SQLiteError`` when the file cannot be opened or is corrupt; ``MigrationError`` when the schema
    ///   is newer than this build, was changed, is outdated (read-only), or a migration fails.
    package init(path: String, readOnly: Bool = false, migrations: [Migration] = Migration.all) throws {
        // A database in rollback-journal mode is none a store made (they are WAL from their first write): read as it
        // is first, so that another program's is refused before the write open switches it to WAL.
        if !readOnly, SQLiteDatabase.usesRollbackJournal(path) {
            do {
                try MigrationRunner.checkSchemaIsRecorded(try SQLiteDatabase(path: path, readOnly: true))
            } catch let error as SQLiteError where error.extendedCode == SQLiteDatabase.readOnlyRollback {
                // An unfinished transaction's journal beside it (an administrator's write cut short): only the write
                // open can roll it back, and the migrations' own check then runs (the read refused the store).
            }
        }
        // A read of a database in WAL mode with nothing beside it (another program's, or a store's index copied
        // alone) first reads it as an immutable file: a read-only open of it leaves a `-shm` and an empty `-wal`
        // beside another program's database it then refuses.
        if readOnly, SQLiteDatabase.usesWALAlone(path) {
            try MigrationRunner.checkSchemaIsRecorded(try SQLiteDatabase(immutable: path))
        }
        database = try SQLiteDatabase(path: path, readOnly: readOnly)
        let runner = MigrationRunner(migrations: migrations)
        if readOnly {
            try runner.validate(database)
        } else {
            try runner.migrate(database)
        }
        let (shaped, hasStreams) = try database.withConnection { connection in
            (
                try connection.scalarInt64(
                    "SELECT count(*) FROM pragma_table_info('streams') WHERE name = 'chroma_siting'"),
                try connection.scalarInt64(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'streams'")
            )
        }
        streamColumns = Self.streamColumns(shaped: shaped == 1)
        // Streams are found by name through their unique index: a damaged entry of it hid a stream, so a recording
        // added a second stream of the same name. A handful of rows, checked at every open.
        if hasStreams == 1 { try checkIntegrity(of: "streams") }
    }

    /// The database file.
    package var path: String { database.path }

    /// Checks every page of the index (SQLite's `integrity_check`: b-tree structure, records, and every index's
    /// entries against its table's rows, which `quick_check` does not compare: a damaged entry of an index left
    /// reads failing while the check said clean, or let a second stream of one name in); damage in a table that
    /// reading has not touched yet shows here.
    ///
    /// - Throws: ``SQLiteError`` with `SQLITE_CORRUPT` naming what the check found (at most its first three lines).
    /// - Complexity: O(rows × log rows).
    package func checkIntegrity() throws {
        try checkIntegrity(of: nil)
        if let contradiction = try contradiction() { throw StoreIndexError.contradictsItself(detail: contradiction) }
    }

    /// SQLite's `integrity_check` of `table` and its indexes, or of the whole database when nil.
    ///
    /// - Throws: ``SQLiteError`` with `SQLITE_CORRUPT` naming what the check found (at most its first three lines).
    private func checkIntegrity(of table: String?) throws {
        let sql = table.map { "PRAGMA integrity_check(\($0))" } ?? "PRAGMA integrity_check(3)"
        let found = try database.withConnection { connection in
            let check = try connection.statement(sql)
            defer { check.reset() }
            var lines: [String] = []
            while try check.step(), lines.count < 3 { lines.append(check.text(0)) }
            return lines
        }
        guard found == ["ok"] else {
            throw SQLiteError(
                code: SQLITE_CORRUPT, message: "SQLite's integrity_check: " + found.joined(separator: "; "),
                sql: sql, path: path)
        }
    }

    /// Where the index's rows disagree with one another, which no change the store makes leaves (each is one
    /// transaction, and foreign keys are on): a row naming a row that is not there, a segment's times or sizes other
    /// than its frame rows' (a count other than theirs is rows missing or added, which the files settle), frame rows
    /// of a segment marked deleted. Nil when they agree.
    ///
    /// - Complexity: O(rows).
    private func contradiction() throws -> String? {
        try database.withConnection { connection in
            var found: [String] = []
            let orphans = try connection.statement(
                "SELECT \"table\", parent, count(*) FROM pragma_foreign_key_check GROUP BY 1, 2 ORDER BY 1, 2")
            defer { orphans.reset() }
            while try orphans.step() {
                let count = orphans.int64(2)
                found.append(
                    "\(count) row\(count == 1 ? " of table \(orphans.text(0)) names" : "s of table \(orphans.text(0)) name") "
                        + "a row of table \(orphans.text(1)) it does not have")
            }
            // total(): a sum that cannot overflow, whatever a row says.
            let totals = try connection.statement(
                """
                SELECT s.id, s.file_name, s.state, s.frame_count, coalesce(t.c, 0) FROM segments s
                LEFT JOIN (
                    SELECT segment_id, count(*) AS c, min(pts_ns) AS f, max(pts_ns) AS l, total(raw_length) AS r,
                        total(stored_length) AS st
                    FROM frames GROUP BY segment_id) t ON t.segment_id = s.id
                WHERE (s.state = 'deleting' AND t.c > 0)
                    OR (s.state != 'deleting' AND s.frame_count = coalesce(t.c, 0) AND (s.first_pts_ns IS NOT t.f
                        OR s.last_pts_ns IS NOT t.l OR s.raw_bytes != coalesce(t.r, 0)
                        OR s.stored_bytes != coalesce(t.st, 0)))
                ORDER BY s.id LIMIT 3
                """)
            defer { totals.reset() }
            while try totals.step() {
                let (name, rows) = (totals.text(1), totals.int64(4))
                found.append(
                    totals.text(2) == SegmentRow.State.deleting.rawValue
                        ? "segment \(name) is marked deleted, but \(rows) frame row\(rows == 1 ? " is" : "s are") left"
                        : "the row of segment \(name) gives other times or sizes than its \(rows) frame row"
                            + (rows == 1 ? "" : "s"))
            }
            return found.isEmpty ? nil : found.joined(separator: "; ")
        }
    }

    // MARK: Streams

    /// Returns the stream called `name`, creating it with `description` if it does not exist.
    ///
    /// A stream that does not know its chroma siting or pixel aspect takes them from a `description` that says
    /// (``StreamDescription/filled(from:)``).
    ///
    /// - Parameters:
    ///   - name: The stream's unique name, e.g. `camera`.
    ///   - description: What its frames are.
    /// - Returns: The stored stream.
    /// - Throws: ``StoreIndexError/streamDescriptionMismatch(name:stored:requested:)`` when the stream exists with
    ///   another description (``StreamDescription/agrees(with:)``); ``SQLiteError``.
    package func stream(named name: String, description: StreamDescription) throws -> StreamRow {
        if let stored = try stream(named: name), stored.description.agrees(with: description),
            stored.description.filled(from: description) == stored.description
        {
            return stored
        }
        return try database.write { connection in
            // Another process may have created it since the read above.
            if let stored = try findStream(named: name, connection) {
                if stored.description.agrees(with: description) {
                    var filled = stored
                    filled.description = stored.description.filled(from: description)
                    guard filled != stored else { return stored }
                    let update = try connection.statement(
                        """
                        UPDATE streams SET chroma_siting = ?, pixel_aspect_num = ?, pixel_aspect_den = ?
                        WHERE id = ?
                        """)
                    defer { update.reset() }
                    try Self.bindShape(of: filled.description, to: update, from: 1)
                    try update.bind(stored.id, at: 4)
                    try update.run()
                    return filled
                }
                guard try Self.isUnused(stored.id, connection) else {
                    return try Self.checked(stored, against: description)
                }
                // A stream that never stored a frame (an input that sent its header and nothing more) takes the
                // format it is recorded with now.
                let update = try connection.statement(
                    """
                    UPDATE streams SET pixel_format = ?, width = ?, height = ?, frame_duration_value = ?,
                        frame_duration_timescale = ?, color_matrix = ?, color_range = ?, chroma_siting = ?,
                        pixel_aspect_num = ?, pixel_aspect_den = ?, clock_offset_ns = NULL, clock_wall_ns = NULL
                    WHERE id = ?
                    """)
                defer { update.reset() }
                try Self.bind(description, to: update, from: 1)
                try update.bind(stored.id, at: 11)
                try update.run()
                return StreamRow(id: stored.id, name: name, description: description)
            }
            let insert = try connection.statement(
                """
                INSERT INTO streams (name, pixel_format, width, height, frame_duration_value,
                    frame_duration_timescale, color_matrix, color_range, chroma_siting, pixel_aspect_num,
                    pixel_aspect_den, created_wall_ns)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            try insert.bind(name, at: 1)
            try Self.bind(description, to: insert, from: 2)
            try insert.bind(System.wallClockNanoseconds(), at: 12)
            try insert.run()
            return StreamRow(id: connection.lastInsertRowID, name: name, description: description)
        }
    }

    /// Sets what the frames of stream `id` are, keeping its name and clock: for a repair that found the row
    /// changed while every segment file of the stream says otherwise.
    ///
    /// - Throws: ``SQLiteError``.
    package func replaceDescription(ofStream id: Int64, with description: StreamDescription) throws {
        try database.write { connection in
            let update = try connection.statement(
                """
                UPDATE streams SET pixel_format = ?, width = ?, height = ?, frame_duration_value = ?,
                    frame_duration_timescale = ?, color_matrix = ?, color_range = ?, chroma_siting = ?,
                    pixel_aspect_num = ?, pixel_aspect_den = ?
                WHERE id = ?
                """)
            defer { update.reset() }
            try Self.bind(description, to: update, from: 1)
            try update.bind(id, at: 11)
            try update.run()
        }
    }

    /// The stream called `name`, if it exists (works on a read-only index).
    ///
    /// - Throws: ``StoreIndexError/invalidStreamRow(id:detail:)``, ``SQLiteError``.
    package func stream(named name: String) throws -> StreamRow? {
        try database.withConnection { connection in try findStream(named: name, connection) }
    }

    func findStream(named name: String, _ connection: SQLiteConnection) throws -> StreamRow? {
        let select = try connection.statement("\(streamColumns) WHERE name = ?")
        defer { select.reset() }
        try select.bind(name, at: 1)
        return try select.step() ? try Self.streamRow(select) : nil
    }

    /// Binds a stream's description to the 10 parameters from `first` on: pixel format, width, height, frame
    /// duration value and timescale, colour matrix and range, chroma siting, pixel aspect numerator and denominator
    /// (the `streams` columns in that order).
    private static func bind(_ description: StreamDescription, to statement: SQLiteStatement, from first: Int32)
        throws
    {
        try statement.bind(description.layout.format.name, at: first)
        try statement.bind(Int64(description.layout.width), at: first + 1)
        try statement.bind(Int64(description.layout.height), at: first + 2)
        try statement.bind(description.frameDuration.value, at: first + 3)
        try statement.bind(Int64(description.frameDuration.timescale), at: first + 4)
        try statement.bind(description.color.matrix.name, at: first + 5)
        try statement.bind(description.color.range.name, at: first + 6)
        try bindShape(of: description, to: statement, from: first + 7)
    }

    /// Binds a stream's chroma siting, pixel aspect numerator and denominator to the 3 parameters from `first` on.
    private static func bindShape(of description: StreamDescription, to statement: SQLiteStatement, from first: Int32)
        throws
    {
        try statement.bind(description.chromaSiting.name, at: first)
        try statement.bind(Int64(description.pixelAspect.numerator), at: first + 1)
        try statement.bind(Int64(description.pixelAspect.denominator), at: first + 2)
    }

    /// Whether stream `id` has never stored a frame: no segment, no newest pts ever recorded, no marker.
    static func isUnused(_ id: Int64, _ connection: SQLiteConnection) throws -> Bool {
        let select = try connection.statement(
            """
            SELECT newest_pts_ns IS NULL AND NOT EXISTS (SELECT 1 FROM segments WHERE stream_id = streams.id)
                AND NOT EXISTS (SELECT 1 FROM markers WHERE stream_id = streams.id)
            FROM streams WHERE id = ?
            """)
        defer { select.reset() }
        try select.bind(id, at: 1)
        return try select.step() && select.int64(0) == 1
    }

    /// Whether the stream called `name` exists and has never stored a frame (``isUnused(_:_:)``): recording it
    /// with another format replaces its description.
    ///
    /// - Throws: ``SQLiteError``.
    package func streamIsUnused(named name: String) throws -> Bool {
        try database.withConnection { connection in
            guard let stored = try findStream(named: name, connection) else { return false }
            return try Self.isUnused(stored.id, connection)
        }
    }

    static func checked(_ stored: StreamRow, against description: StreamDescription) throws -> StreamRow {
        guard stored.description.agrees(with: description) else {
            throw StoreIndexError.streamDescriptionMismatch(
                name: stored.name, stored: stored.description, requested: description)
        }
        return stored
    }

    /// Stores where a stream's pts lie on the recorder clock (set once, at its first recorded frame).
    ///
    /// - Throws: ``StoreIndexError/unknownStream(id:)``, ``SQLiteError``.
    package func setClock(_ clock: StreamClock, streamID: Int64) throws {
        try database.write { connection in
            let update = try connection.statement(
                "UPDATE streams SET clock_offset_ns = ?, clock_wall_ns = ? WHERE id = ?")
            defer { update.reset() }
            try update.bind(clock.offsetNanoseconds, at: 1)
            try update.bind(clock.wallNanoseconds, at: 2)
            try update.bind(streamID, at: 3)
            try update.run()
            guard connection.changes == 1 else { throw StoreIndexError.unknownStream(id: streamID) }
        }
    }

    /// Every stream, by id.
    ///
    /// - Throws: ``StoreIndexError/invalidStreamRow(id:detail:)``, ``SQLiteError``.
    package func streams() throws -> [StreamRow] {
        try database.withConnection { connection in
            let select = try connection.statement("\(streamColumns) ORDER BY id")
            defer { select.reset() }
            var rows: [StreamRow] = []
            while try select.step() { rows.append(try Self.streamRow(select)) }
            return rows
        }
    }
}
