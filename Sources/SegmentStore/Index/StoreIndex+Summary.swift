import CSQLite
import RewindCore
import RewindMigrations
import RewindSQLite
import RewindSystem

extension StoreIndex {
    // MARK: Summary and maintenance

    /// Totals over the live (not `deleting`) segments of one stream or of all.
    ///
    /// - Throws: ``SQLiteError``.
    /// - Complexity: O(s) for s segments (computed from segment counters, not frame rows).
    package func summary(streamID: Int64? = nil) throws -> IndexSummary {
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
    package func checkpoint() throws {
        try database.checkpoint()
    }

    // MARK: Store information

    /// The value stored under `key` in `store_info` (e.g. a store id or the creating version), if any.
    ///
    /// - Throws: ``SQLiteError``.
    package func info(_ key: String) throws -> String? {
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
    package func setInfo(_ key: String, to value: String) throws {
        try database.write { connection in
            let upsert = try connection.statement(
                "INSERT INTO store_info (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            )
            try upsert.bind(key, at: 1)
            try upsert.bind(value, at: 2)
            try upsert.run()
        }
    }
}
