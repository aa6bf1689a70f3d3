import RewindSystem
import Synchronization

/// A range of a stream kept on disk by a live process (a save waiting for its post-roll) until it is removed;
/// not stored, so it ends with the process. Markers' holds are stored and outlive it.
public struct RetentionHold: Sendable, Hashable {
    /// Its number in the store's table of holds.
    public let id: Int
    /// The stream it holds.
    public let streamName: String
    /// The range kept, pts nanoseconds, start inclusive, end exclusive.
    public let range: Range<Int64>
}

/// The live holds of a store (``RetentionHold``), by id.
struct HoldTable {
    var holds: [Int: RetentionHold] = [:]
    var nextID = 1
}

extension SegmentStore {
    /// Keeps every frame of `streamName` in `range` on disk whatever retention says, until ``removeHold(_:)``.
    ///
    /// - Returns: the hold, to remove later.
    public func addHold(streamName: String, range: Range<Int64>) -> RetentionHold {
        liveHolds.withAnnotatedLock { table in
            let hold = RetentionHold(id: table.nextID, streamName: streamName, range: range)
            table.nextID += 1
            table.holds[hold.id] = hold
            return hold
        }
    }

    /// Lets retention take the frames `hold` kept (unless another hold keeps them).
    public func removeHold(_ hold: RetentionHold) {
        _ = liveHolds.withAnnotatedLock { $0.holds.removeValue(forKey: hold.id) }
    }

    /// Every range retention must keep, by stream id: live holds and markers' holds.
    func heldRanges() throws -> [Int64: [Range<Int64>]] {
        var held: [Int64: [Range<Int64>]] = [:]
        let live = liveHolds.withAnnotatedLock { Array($0.holds.values) }
        if !live.isEmpty {
            let ids = Dictionary(try index.streams().map { ($0.name, $0.id) }, uniquingKeysWith: { first, _ in first })
            for hold in live {
                if let id = ids[hold.streamName] { held[id, default: []].append(hold.range) }
            }
        }
        for marker in try index.markerHolds() {
            if let range = marker.hold { held[marker.streamID, default: []].append(range) }
        }
        return held
    }

    // MARK: Markers

    /// Adds a marker of `streamName` at `at` (pts nanoseconds), holding `hold` on disk when given. It is in the
    /// index and synced to `DIR/markers.journal` when this returns.
    ///
    /// - Throws: ``SegmentStoreError/unknownStream(_:)``; ``SegmentStoreError/io(_:)`` when the journal cannot be
    ///   written (the marker is not added); index errors.
    public func addMarker(streamName: String, at: Int64, label: String, hold: Range<Int64>?) throws -> MarkerRow {
        try SegmentStoreError.translatingIndexErrors {
            try withMarkerJournal { journal in
                let stored = try index.addMarker(
                    MarkerRow(
                        streamID: try streamID(named: streamName), atNanoseconds: at, label: label, hold: hold,
                        createdWallNanoseconds: System.wallClockNanoseconds()))
                do {
                    try appendToJournal([.added(MarkerJournal.Entry(stored, streamName: streamName))], file: &journal)
                } catch {
                    _ = try? index.removeMarker(id: stored.id)
                    throw error
                }
                compactMarkerJournalIfDue(file: &journal)
                return stored
            }
        }
    }

    /// Removes marker `id` and its hold; returns it, or nil when there is none. The removal is synced to
    /// `DIR/markers.journal` before the index's row goes, so an index that loses the removal has it done again.
    ///
    /// - Throws: ``SegmentStoreError/io(_:)`` when the journal cannot be written (the marker stays); index errors.
    public func removeMarker(id: Int64) throws -> MarkerRow? {
        try SegmentStoreError.translatingIndexErrors {
            try withMarkerJournal { journal in
                guard try index.marker(id: id) != nil else { return nil }
                try appendToJournal([.removed(id)], file: &journal)
                let removed = try index.removeMarker(id: id)
                compactMarkerJournalIfDue(file: &journal)
                return removed
            }
        }
    }

    /// The markers of one stream (or all) whose time lies in `range`, by time.
    ///
    /// - Throws: ``SegmentStoreError/unknownStream(_:)``; index errors.
    /// - Complexity: O(log n + markers in the range).
    public func markers(streamName: String? = nil, in range: Range<Int64> = Int64.min..<Int64.max) throws
        -> [MarkerRow]
    {
        try SegmentStoreError.translatingIndexErrors {
            let id = try streamName.map { try streamID(named: $0) }
            let rows = try index.markers(streamID: id, in: range)
            guard isReadOnly else { return rows }
            return try addingJournalOnlyMarkers(to: rows, streamID: id) { range.contains($0.atNanoseconds) }
                .sorted { ($0.atNanoseconds, $0.id) < ($1.atNanoseconds, $1.id) }
        }
    }

    /// The markers of one stream (or all) whose time lies in `range` or whose hold overlaps it, by time then id: what
    /// a view of `range` shows (a marker before the view may hold frames inside it).
    ///
    /// - Throws: ``SegmentStoreError/unknownStream(_:)``; index errors.
    /// - Complexity: O(log n + markers in the range + markers that hold a range).
    public func markers(streamName: String? = nil, touching range: Range<Int64>) throws -> [MarkerRow] {
        try SegmentStoreError.translatingIndexErrors {
            let id = try streamName.map { try streamID(named: $0) }
            var rows = try index.markers(streamID: id, in: range)
            let listed = Set(rows.map(\.id))
            rows += try index.markerHolds().filter { row in
                guard id == nil || row.streamID == id, !listed.contains(row.id), let hold = row.hold else {
                    return false
                }
                return hold.overlaps(range)
            }
            rows = try addingJournalOnlyMarkers(to: rows, streamID: id) { row in
                range.contains(row.atNanoseconds) || row.hold.map { $0.overlaps(range) } == true
            }
            return rows.sorted { ($0.atNanoseconds, $0.id) < ($1.atNanoseconds, $1.id) }
        }
    }

    /// The bytes of sealed and open segment files of `streamName` overlapping any of `ranges`: what holds keep, as
    /// retention counts them (the files' sizes, headers and all: ``fileBytes(of:)``).
    ///
    /// - Throws: index errors.
    public func heldBytes(streamName: String, ranges: [Range<Int64>]) throws -> Int64 {
        try SegmentStoreError.translatingIndexErrors {
            let id = try streamID(named: streamName)
            return try index.segments(streamID: id).filter { row in
                guard row.state != .deleting, let first = row.firstPTS, let last = row.lastPTS else { return false }
                return ranges.contains { $0.overlaps(first...last) }
            }.reduce(0) { $0 + fileBytes(of: $1) }
        }
    }
}
