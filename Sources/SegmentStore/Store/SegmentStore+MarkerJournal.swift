import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension SegmentStore {
    /// `DIR/markers.journal`.
    var markerJournalPath: String { directory + "/" + MarkerJournal.fileName }

    /// Runs `body` with the journal held: every marker change, so that the journal's records come in the order the
    /// index's changes did.
    ///
    /// - Throws: ``SegmentStoreError/readOnly(_:)``; what `body` throws.
    func withMarkerJournal<Result: Sendable>(_ body: (inout JournalFile) throws -> Result) throws -> Result {
        guard !isReadOnly else { throw SegmentStoreError.readOnly("change markers") }
        return try markerJournal.withAnnotatedLock { file throws -> Result in try body(&file) }
    }

    /// Appends `records` to the markers' journal and syncs them; on failure the journal is cut back to where it was.
    ///
    /// - Throws: ``SegmentStoreError/io(_:)``.
    func appendToJournal(_ records: [MarkerJournal.Record], file: inout JournalFile) throws {
        try appendToJournal(
            at: markerJournalPath, magic: MarkerJournal.magic, records.flatMap(MarkerJournal.encode), sync: true,
            file: &file)
    }

    /// Writes the markers' journal anew: `entries`, and the highest id given so that no id is given twice.
    ///
    /// - Throws: ``SegmentStoreError/io(_:)``.
    func rewriteJournal(_ entries: [MarkerJournal.Entry], highestID: Int64, file: inout JournalFile) throws {
        try rewriteJournal(
            at: markerJournalPath, magic: MarkerJournal.magic, Self.journalRecords(entries, highestID: highestID),
            file: &file)
    }

    /// The records of a markers' journal written anew: the highest id given, then `entries` by id.
    private static func journalRecords(_ entries: [MarkerJournal.Entry], highestID: Int64) -> [UInt8] {
        var records: [UInt8] = []
        if highestID > 0 { records += MarkerJournal.encode(.idsUsed(highestID)) }
        for entry in entries.sorted(by: { $0.id < $1.id }) { records += MarkerJournal.encode(.added(entry)) }
        return records
    }

    /// Writes the markers' journal anew from what it holds when markers removed have grown it enough
    /// (``compactJournalIfDue(_:file:standing:)``).
    func compactMarkerJournalIfDue(file: inout JournalFile) {
        compactJournalIfDue(MarkerJournal.Contents.self, file: &file) { journal in
            Self.journalRecords(Array(journal.live.values), highestID: journal.highestID)
        }
    }

    /// Brings the index's markers and the journal into step (at open and in `verify`):
    /// - markers the journal has and the index lacks (an index rebuilt from the segment files, restored from a copy,
    ///   or a damaged `-wal` that lost its last commits) are put back with their ids;
    /// - markers the journal says were removed are removed from the index again;
    /// - markers the index has and the journal lacks (the process stopped between the two writes) are added to it.
    ///
    /// A damaged journal gives way to the index (and is written again from it), except when the index was just
    /// rebuilt: then the markers before the damage are all there is. A dry run (`verify`) only reports.
    func reconcileMarkers(mode: ReconcileMode, rebuildingIndex: Bool, report: inout VerifyReport) throws {
        try markerJournal.withAnnotatedLock { file throws in
            try reconcileJournal(
                MarkerJournal.Contents.self, mode: mode, rebuildingIndex: rebuildingIndex,
                file: &file, report: &report, what: "markers",
                indexHolds: { "the index's \(Self.markers(try index.allMarkers().count))" },
                writeFromIndex: { damaged, file in
                    let indexed = try index.allMarkers()
                    let highestID = max(damaged?.highestID ?? 0, try index.highestMarkerIDGiven())
                    try rewriteJournal(try journalEntries(indexed), highestID: highestID, file: &file)
                    return indexed.isEmpty ? nil : "the index's \(Self.markers(indexed.count))"
                },
                bringInStep: { journal, file, report in
                    try bringIndexInStep(with: journal, mode: mode, file: &file, report: &report)
                })
        }
    }

    private func bringIndexInStep(
        with journal: MarkerJournal.Contents, mode: ReconcileMode, file: inout JournalFile,
        report: inout VerifyReport
    ) throws {
        let name = MarkerJournal.fileName
        let streamIDs = Dictionary(
            try index.streams().map { ($0.name, $0.id) }, uniquingKeysWith: { first, _ in first })
        var indexed = Dictionary(try index.allMarkers().map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        let rewrite =
            journal.damage != nil || journal.tornTail
            || journal.live.values.contains { indexed[$0.id] == nil && streamIDs[$0.streamName] == nil }
        if journal.tornTail && mode.changes {
            report.repaired.append(
                "cut the unfinished last record of \(name) (a marker change being written when the process stopped)")
        }

        // A journal cut short at its end lost its last record, or more read as unfinished: when that was a removal
        // the index made after it (the journal is synced first), the records before the cut still have the marker.
        // One the index gave and no longer has was removed: it stays removed. (An index that lost its last commits
        // lost the ids it gave with them, so what it never gave comes back.)
        let given = journal.tornTail ? try index.highestMarkerIDGiven() : 0
        let lost = journal.live.values.filter { indexed[$0.id] == nil && !(journal.tornTail && $0.id <= given) }
            .sorted { $0.id < $1.id }
        let orphans = lost.filter { streamIDs[$0.streamName] == nil }
        for entry in orphans {
            // Nothing is left for it to mark or hold: a repair drops it from the journal.
            report.append(
                "marker \(entry.id) ('\(entry.label)') of stream '\(entry.streamName)' is in \(name), but the store "
                    + "has no stream '\(entry.streamName)' (no frame of it is left): "
                    + (mode.changes ? "dropped from the journal" : "'rewind verify --repair' drops it"),
                asProblem: !mode.changes)
        }
        let restorable = lost.filter { streamIDs[$0.streamName] != nil }
        if !restorable.isEmpty {
            if mode.changes {
                for entry in restorable {
                    let row = entry.row(streamID: streamIDs[entry.streamName]!)
                    try index.restoreMarker(row)
                    indexed[row.id] = row
                }
                report.repaired.append(
                    "restored \(Self.markers(restorable.count)) the index had lost from \(name) "
                        + "(\(Self.idList(restorable.map(\.id))))"
                        + (!restorable.contains { $0.hold != nil }
                            ? "" : restorable.count == 1 ? ", with its hold" : ", with their holds"))
            } else {
                report.problems.append(
                    "the index lacks \(Self.markers(restorable.count)) \(name) has (\(Self.idList(restorable.map(\.id)))"
                        + "): 'rewind verify --repair' restores them")
            }
        }

        let removedAgain = indexed.keys.filter { journal.removed.contains($0) }.sorted()
        if !removedAgain.isEmpty {
            if mode.changes {
                for id in removedAgain {
                    _ = try index.removeMarker(id: id)
                    indexed[id] = nil
                }
                report.repaired.append(
                    "removed \(Self.markers(removedAgain.count)) \(name) says were deleted (the index had lost the "
                        + "deletion: \(Self.idList(removedAgain)))")
            } else {
                report.problems.append(
                    "the index has \(Self.markers(removedAgain.count)) \(name) says were deleted "
                        + "(\(Self.idList(removedAgain))): 'rewind verify --repair' removes them")
            }
        }

        let unjournaled = indexed.values.filter { journal.live[$0.id] == nil && !journal.removed.contains($0.id) }
            .sorted { $0.id < $1.id }
        if !unjournaled.isEmpty {
            if mode.changes {
                if !rewrite { try appendToJournal(try journalEntries(unjournaled).map { .added($0) }, file: &file) }
                report.repaired.append(
                    "added \(Self.markers(unjournaled.count)) the index had to \(name) "
                        + "(\(Self.idList(unjournaled.map(\.id))))")
            } else {
                report.problems.append(
                    "\(name) lacks \(Self.markers(unjournaled.count)) the index has "
                        + "(\(Self.idList(unjournaled.map(\.id)))): 'rewind verify --repair' adds them")
            }
        }
        guard mode.changes else { return }
        let highestID = max(journal.highestID, try index.highestMarkerIDGiven())
        try index.giveMarkerIDsAbove(highestID)
        // A journal of many removed markers, one cut or damaged, or one with markers of streams the store no longer
        // has, is written again with what stands.
        let kept = try journalEntries(Array(indexed.values))
        if rewrite || journal.records > 2 * kept.count + 64 {
            try rewriteJournal(kept, highestID: highestID, file: &file)
        }
    }

    /// The markers of the index, `rows` (those of stream `streamID`, or of all, that `wanted` takes), as the next open
    /// for writing will have them, in a store opened read-only, which brings nothing into step: with the markers
    /// `DIR/markers.journal` has and the index lost (an index put back from a copy, or rebuilt, since the last open
    /// for writing), and without those it says were deleted. A damaged journal, or one that cannot be read, gives
    /// way to the index, as at open; a journal cut short never brings back a marker the index gave and no longer
    /// has. Beside a recorder, the journal may name a marker being deleted (it is written before the index) or lack
    /// one being added (it is written after): the view is the one the change is about to give. Unsorted.
    func addingJournalOnlyMarkers(
        to rows: [MarkerRow], streamID: Int64?, where wanted: (MarkerRow) -> Bool
    ) throws -> [MarkerRow] {
        guard isReadOnly else { return rows }
        let path = directory + "/" + MarkerJournal.fileName
        let fs = fileSystem
        guard let journal = try? MarkerJournal.Contents.read(path: path, fileSystem: fs), journal.damage == nil
        else { return rows }
        var view = rows.filter { !journal.removed.contains($0.id) }
        let listed = Set(rows.map(\.id))
        let given = journal.tornTail ? try index.highestMarkerIDGiven() : 0
        var streamIDs: [String: Int64]?
        for entry in journal.live.values.sorted(by: { $0.id < $1.id })
        where !listed.contains(entry.id) && !(journal.tornTail && entry.id <= given) {
            if streamIDs == nil {
                streamIDs = Dictionary(try index.streams().map { ($0.name, $0.id) }, uniquingKeysWith: { a, _ in a })
            }
            guard let id = streamIDs?[entry.streamName], streamID == nil || streamID == id else { continue }
            let row = entry.row(streamID: id)
            guard wanted(row), try index.marker(id: entry.id) == nil else { continue }
            view.append(row)
        }
        return view
    }

    /// The journal's entries of index rows (by their streams' names).
    private func journalEntries(_ rows: [MarkerRow]) throws -> [MarkerJournal.Entry] {
        let names = Dictionary(try index.streams().map { ($0.id, $0.name) }, uniquingKeysWith: { first, _ in first })
        return rows.compactMap { row in names[row.streamID].map { MarkerJournal.Entry(row, streamName: $0) } }
    }

    static func markers(_ count: Int) -> String { "\(count) marker" + (count == 1 ? "" : "s") }

    /// "id 3" or "ids 3, 4, 9, … (12 in all)".
    static func idList(_ ids: [Int64]) -> String {
        let shown = ids.prefix(8).map(String.init).joined(separator: ", ")
        return (ids.count == 1 ? "id " : "ids ") + shown + (ids.count > 8 ? ", … (\(ids.count) in all)" : "")
    }
}
