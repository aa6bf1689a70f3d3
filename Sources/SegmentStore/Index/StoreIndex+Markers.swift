import RewindSQLite

extension StoreIndex {
    // MARK: Markers

    private static let markerColumns =
        "SELECT id, stream_id, at_pts_ns, label, hold_from_ns, hold_to_ns, created_wall_ns FROM markers"

    /// Adds a marker and returns it with its id.
    ///
    /// - Throws: ``SQLiteError``.
    package func addMarker(_ marker: MarkerRow) throws -> MarkerRow { try insertMarker(marker, id: nil) }

    /// Stores a marker under its own id (one the journal brought back): the ids given after it go past it.
    ///
    /// - Throws: ``SQLiteError`` (a constraint error when the id is taken).
    package func restoreMarker(_ marker: MarkerRow) throws { _ = try insertMarker(marker, id: marker.id) }

    /// Inserts `marker` under `id`, or under the next id when nil.
    private func insertMarker(_ marker: MarkerRow, id: Int64?) throws -> MarkerRow {
        try database.write { connection in
            let insert = try connection.statement(
                "INSERT INTO markers (id, stream_id, at_pts_ns, label, hold_from_ns, hold_to_ns, created_wall_ns) "
                    + "VALUES (?, ?, ?, ?, ?, ?, ?)")
            try insert.bind(id, at: 1)
            try insert.bind(marker.streamID, at: 2)
            try insert.bind(marker.atNanoseconds, at: 3)
            try insert.bind(marker.label, at: 4)
            try insert.bind(marker.hold?.lowerBound, at: 5)
            try insert.bind(marker.hold?.upperBound, at: 6)
            try insert.bind(marker.createdWallNanoseconds, at: 7)
            try insert.run()
            var stored = marker
            stored.id = connection.lastInsertRowID
            return stored
        }
    }

    /// The highest marker id ever given (0 when none was).
    ///
    /// - Throws: ``SQLiteError``.
    package func highestMarkerIDGiven() throws -> Int64 {
        try database.withConnection { connection in
            let select = try connection.statement("SELECT seq FROM sqlite_sequence WHERE name = 'markers'")
            defer { select.reset() }
            return try select.step() ? select.int64(0) : 0
        }
    }

    /// Makes the next marker id given higher than `id` (ids a journal names were given, even when their markers
    /// were removed since).
    ///
    /// - Throws: ``SQLiteError``.
    package func giveMarkerIDsAbove(_ id: Int64) throws {
        guard try highestMarkerIDGiven() < id else { return }
        try database.write { connection in
            let update = try connection.statement("UPDATE sqlite_sequence SET seq = ? WHERE name = 'markers'")
            try update.bind(id, at: 1)
            try update.run()
            if connection.changes == 0 {
                let insert = try connection.statement("INSERT INTO sqlite_sequence (name, seq) VALUES ('markers', ?)")
                try insert.bind(id, at: 1)
                try insert.run()
            }
        }
    }

    /// Marker `id`, or nil when there is none.
    ///
    /// - Throws: ``SQLiteError``.
    package func marker(id: Int64) throws -> MarkerRow? {
        try database.withConnection { connection in
            let select = try connection.statement("\(Self.markerColumns) WHERE id = ?")
            defer { select.reset() }
            try select.bind(id, at: 1)
            return try select.step() ? Self.markerRow(select) : nil
        }
    }

    /// Every marker of every stream, by id.
    ///
    /// - Throws: ``SQLiteError``.
    package func allMarkers() throws -> [MarkerRow] {
        try database.withConnection { connection in
            let select = try connection.statement("\(Self.markerColumns) ORDER BY id")
            defer { select.reset() }
            var rows: [MarkerRow] = []
            while try select.step() { rows.append(Self.markerRow(select)) }
            return rows
        }
    }

    /// Removes a marker (and its hold); returns whether it existed.
    ///
    /// - Throws: ``SQLiteError``.
    package func removeMarker(id: Int64) throws -> MarkerRow? {
        try database.write { connection in
            let select = try connection.statement("\(Self.markerColumns) WHERE id = ?")
            defer { select.reset() }
            try select.bind(id, at: 1)
            guard try select.step() else { return nil }
            let row = Self.markerRow(select)
            select.reset()
            let delete = try connection.statement("DELETE FROM markers WHERE id = ?")
            try delete.bind(id, at: 1)
            try delete.run()
            return row
        }
    }

    /// The markers of one stream (or all) whose time lies in `range`, by time then id.
    ///
    /// - Throws: ``SQLiteError``.
    package func markers(streamID: Int64?, in range: Range<Int64>) throws -> [MarkerRow] {
        try database.withConnection { connection in
            let select =
                streamID == nil
                ? try connection.statement(
                    "\(Self.markerColumns) WHERE at_pts_ns >= ? AND at_pts_ns < ? ORDER BY at_pts_ns, id")
                : try connection.statement(
                    "\(Self.markerColumns) WHERE at_pts_ns >= ? AND at_pts_ns < ? AND stream_id = ? "
                        + "ORDER BY at_pts_ns, id")
            defer { select.reset() }
            try select.bind(range.lowerBound, at: 1)
            try select.bind(range.upperBound, at: 2)
            if let streamID { try select.bind(streamID, at: 3) }
            var rows: [MarkerRow] = []
            while try select.step() { rows.append(Self.markerRow(select)) }
            return rows
        }
    }

    /// Every marker that holds a range, any stream.
    ///
    /// - Throws: ``SQLiteError``.
    package func markerHolds() throws -> [MarkerRow] {
        try database.withConnection { connection in
            let select = try connection.statement("\(Self.markerColumns) WHERE hold_from_ns IS NOT NULL")
            defer { select.reset() }
            var rows: [MarkerRow] = []
            while try select.step() { rows.append(Self.markerRow(select)) }
            return rows
        }
    }

    private static func markerRow(_ select: SQLiteStatement) -> MarkerRow {
        let from = select.optionalInt64(4)
        let to = select.optionalInt64(5)
        return MarkerRow(
            id: select.int64(0), streamID: select.int64(1), atNanoseconds: select.int64(2), label: select.text(3),
            hold: from.flatMap { from in to.map { from..<$0 } }, createdWallNanoseconds: select.int64(6))
    }
}
