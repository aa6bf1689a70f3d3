import CSQLite
import RewindCore
import RewindMigrations
import RewindSQLite
import RewindSystem

/// A committed change to the index's gaps or drop counters: what ``StoreIndex/observeLosses(_:)`` hears.
package enum LossChange: Sendable, Hashable {
    case gapAdded(GapRow)
    case gapExtended(streamID: Int64, end: Int64, newEnd: Int64, reason: LossReason)
    case gapRemoved(GapRow)
    case gapsRemoved(streamID: Int64, startingBefore: Int64)
    case dropsAdded(streamID: Int64, reason: LossReason, count: Int)
}

/// What ``StoreIndex/observeLosses(_:)`` keeps: the closure in a struct. A bare closure kept in a `Mutex` is taken
/// out and put back through a generic `inout`, and each time comes back wrapped in two more reabstraction thunks: a
/// store announcing a loss a second grew a chain of them that each call ran through, until the spill thread's stack
/// overflowed.
struct LossObserver: Sendable {
    let hear: @Sendable (LossChange) -> Void
}

extension StoreIndex {
    // MARK: Gaps and drops

    /// Has `observer` hear every committed change to the gaps and drop counters (on the thread that made it, after
    /// the commit), except those made with `announcing: false`.
    package func observeLosses(_ observer: @escaping @Sendable (LossChange) -> Void) {
        lossObserver.withAnnotatedLock { $0 = LossObserver(hear: observer) }
    }

    private func announce(_ change: LossChange) {
        if let observer = lossObserver.withAnnotatedLock({ $0 }) { observer.hear(change) }
    }

    /// Records a gap.
    ///
    /// - Parameter announcing: false for a gap that is not news (put back from the losses' journal).
    /// - Throws: ``SQLiteError`` (a constraint error when `endNanoseconds < startNanoseconds`).
    package func recordGap(_ gap: GapRow, announcing: Bool = true) throws {
        try database.write { connection in
            let insert = try connection.statement(
                "INSERT INTO gaps (stream_id, start_ns, end_ns, reason) VALUES (?, ?, ?, ?)")
            try insert.bind(gap.streamID, at: 1)
            try insert.bind(gap.startNanoseconds, at: 2)
            try insert.bind(gap.endNanoseconds, at: 3)
            try insert.bind(gap.reason.rawValue, at: 4)
            try insert.run()
        }
        if announcing { announce(.gapAdded(gap)) }
    }

    /// Moves the end of the stream's gap of `reason` that ends at `end` to `newEnd`: one row for a stretch of gaps
    /// that follow each other (a source running at a lower frame rate for a while).
    ///
    /// - Returns: whether such a gap was there (and now ends at `newEnd`).
    /// - Throws: ``SQLiteError``.
    package func extendGap(streamID: Int64, endingAt end: Int64, to newEnd: Int64, reason: LossReason) throws -> Bool {
        let extended = try database.write { connection in
            let update = try connection.statement(
                "UPDATE gaps SET end_ns = ? WHERE stream_id = ? AND end_ns = ? AND reason = ?")
            try update.bind(newEnd, at: 1)
            try update.bind(streamID, at: 2)
            try update.bind(end, at: 3)
            try update.bind(reason.rawValue, at: 4)
            try update.run()
            return connection.changes > 0
        }
        if extended { announce(.gapExtended(streamID: streamID, end: end, newEnd: newEnd, reason: reason)) }
        return extended
    }

    /// The gaps of one stream (or all), by stream then start. A reason this build does not know reads as
    /// ``LossReason/unrecognized``.
    ///
    /// - Throws: ``SQLiteError``.
    package func gaps(streamID: Int64? = nil) throws -> [GapRow] {
        try database.withConnection { connection in
            let columns = "SELECT stream_id, start_ns, end_ns, reason FROM gaps"
            let select =
                streamID == nil
                ? try connection.statement("\(columns) ORDER BY stream_id, start_ns, id")
                : try connection.statement("\(columns) WHERE stream_id = ? ORDER BY start_ns, id")
            defer { select.reset() }
            if let streamID { try select.bind(streamID, at: 1) }
            return try Self.gapRows(select)
        }
    }

    /// The rows of a `SELECT stream_id, start_ns, end_ns, reason FROM gaps …` statement.
    private static func gapRows(_ select: SQLiteStatement) throws -> [GapRow] {
        var rows: [GapRow] = []
        while try select.step() {
            rows.append(
                GapRow(
                    streamID: select.int64(0), startNanoseconds: select.int64(1), endNanoseconds: select.int64(2),
                    reason: LossReason(stored: select.text(3))))
        }
        return rows
    }

    /// The gaps of one stream that overlap `[range.lowerBound, range.upperBound)`, by start.
    ///
    /// - Throws: ``SQLiteError``.
    /// - Complexity: O(log g + k) for k gaps starting before the range's end out of g (one scan of `gaps_by_time`).
    package func gaps(streamID: Int64, overlapping range: Range<Int64>) throws -> [GapRow] {
        try database.withConnection { connection in
            let select = try connection.statement(
                "SELECT stream_id, start_ns, end_ns, reason FROM gaps "
                    + "WHERE stream_id = ? AND start_ns < ? AND end_ns > ? ORDER BY start_ns, id")
            defer { select.reset() }
            try select.bind(streamID, at: 1)
            try select.bind(range.upperBound, at: 2)
            try select.bind(range.lowerBound, at: 3)
            return try Self.gapRows(select)
        }
    }

    /// Removes one recorded gap (the first row equal to `gap`).
    ///
    /// - Parameter announcing: false for a removal that is not news (one the losses' journal has).
    /// - Throws: ``SQLiteError``.
    package func removeGap(_ gap: GapRow, announcing: Bool = true) throws {
        let removed = try database.write { connection in
            let delete = try connection.statement(
                """
                DELETE FROM gaps WHERE id = (SELECT id FROM gaps WHERE stream_id = ? AND start_ns = ? AND end_ns = ?
                    AND reason = ? ORDER BY id LIMIT 1)
                """)
            defer { delete.reset() }
            try delete.bind(gap.streamID, at: 1)
            try delete.bind(gap.startNanoseconds, at: 2)
            try delete.bind(gap.endNanoseconds, at: 3)
            try delete.bind(gap.reason.rawValue, at: 4)
            try delete.run()
            return connection.changes > 0
        }
        if removed && announcing { announce(.gapRemoved(gap)) }
    }

    /// Removes the stream's gaps that start before `pts`: history whose frames retention deleted.
    ///
    /// - Returns: how many were removed.
    /// - Throws: ``SQLiteError``.
    @discardableResult
    package func removeGaps(streamID: Int64, startingBefore pts: Int64) throws -> Int {
        let removed = try database.write { connection in
            let delete = try connection.statement("DELETE FROM gaps WHERE stream_id = ? AND start_ns < ?")
            defer { delete.reset() }
            try delete.bind(streamID, at: 1)
            try delete.bind(pts, at: 2)
            try delete.run()
            return connection.changes
        }
        if removed > 0 { announce(.gapsRemoved(streamID: streamID, startingBefore: pts)) }
        return removed
    }

    /// Adds `count` to the stream's drop counter for `reason`.
    ///
    /// - Parameter announcing: false for drops that are not news (put back from the losses' journal).
    /// - Throws: ``SQLiteError``.
    package func addDrops(streamID: Int64, reason: LossReason, count: Int, announcing: Bool = true) throws {
        precondition(count >= 0, "drop count must not be negative, got \(count)")
        try database.write { connection in
            let upsert = try connection.statement(
                "INSERT INTO drops (stream_id, reason, count) VALUES (?, ?, ?) "
                    + "ON CONFLICT (stream_id, reason) DO UPDATE SET count = count + excluded.count")
            try upsert.bind(streamID, at: 1)
            try upsert.bind(reason.rawValue, at: 2)
            try upsert.bind(Int64(count), at: 3)
            try upsert.run()
        }
        if count > 0 && announcing { announce(.dropsAdded(streamID: streamID, reason: reason, count: count)) }
    }

    /// Dropped frames by reason, for one stream or summed over all. Reasons this build does not know are summed
    /// under ``LossReason/unrecognized``.
    ///
    /// - Throws: ``SQLiteError``.
    package func drops(streamID: Int64? = nil) throws -> [LossReason: Int] {
        try database.withConnection { connection in
            let select =
                streamID == nil
                ? try connection.statement("SELECT reason, sum(count) FROM drops GROUP BY reason")
                : try connection.statement("SELECT reason, count FROM drops WHERE stream_id = ?")
            defer { select.reset() }
            if let streamID { try select.bind(streamID, at: 1) }
            var counts: [LossReason: Int] = [:]
            while try select.step() { counts[LossReason(stored: select.text(0)), default: 0] += Int(select.int64(1)) }
            return counts
        }
    }
}
