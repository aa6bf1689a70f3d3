import Glibc
import RewindCore
import RewindSystem

/// The losses' journal a store appends to, and the names of the streams it has written of (a stream's id never
/// changes while a store is open).
struct LossJournalState: ~Copyable {
    var file = JournalFile()
    var streamNames: [Int64: String] = [:]
    /// A record could not be written: the journal was removed, and nothing more is written to it until the next
    /// open writes it again from the index.
    var abandoned = false
    /// Records a later change may be merged into in place (``LossJournal/merged(_:_:)``), by what they change (a
    /// stream's counter of a reason, or its gap of a reason ending at a pts), with where they lie: a stretch extended
    /// frame by frame and a counter raised batch by batch grow the journal by one record each, not one per change.
    var mergeable: [LossJournal.MergeKey: (record: LossJournal.Record, offset: Int64)] = [:]
    /// Records were written since the journal was last synced.
    var unsynced = false
}

extension SegmentStore {
    /// `DIR/losses.journal`.
    var lossJournalPath: String { directory + "/" + LossJournal.fileName }

    /// Writes a committed change of the index's gaps or drop counters to the losses' journal (the index's observer:
    /// see ``StoreIndex/observeLosses(_:)``). Not synced here: the next periodic sync of a segment does it
    /// (``syncLossJournalIfWritten()``), and the last writer's close. A journal that cannot take a record (a full disk) is
    /// removed rather than left without it (a removal it missed would bring a gap back), and the next open writes it
    /// again from the index.
    func journalLoss(_ change: LossChange) {
        let fs = fileSystem
        let path = lossJournalPath
        lossJournal.withAnnotatedLock { state in
            guard !state.abandoned else { return }
            let streamID: Int64
            switch change {
            case .gapAdded(let gap), .gapRemoved(let gap): streamID = gap.streamID
            case .gapExtended(let id, _, _, _), .gapsRemoved(let id, _), .dropsAdded(let id, _, _): streamID = id
            }
            if state.streamNames[streamID] == nil, let streams = try? index.streams() {
                for stream in streams { state.streamNames[stream.id] = stream.name }
            }
            guard let stream = state.streamNames[streamID] else { return }
            var record: LossJournal.Record =
                switch change {
                case .gapAdded(let gap): .gapAdded(stream: stream, LossJournal.Gap(gap))
                case .gapRemoved(let gap): .gapRemoved(stream: stream, LossJournal.Gap(gap))
                case .gapExtended(_, let end, let newEnd, let reason):
                    .gapExtended(stream: stream, end: end, newEnd: newEnd, reason: reason)
                case .gapsRemoved(_, let pts): .gapsRemoved(stream: stream, startingBefore: pts)
                case .dropsAdded(_, let reason, let count):
                    .dropsAdded(stream: stream, reason: reason, count: Int64(count))
                }
            var bytes = LossJournal.encode(record)
            var offset: Int64?
            if state.file.fd >= 0, let key = LossJournal.MergeKey(of: record), let target = state.mergeable[key],
                let merged = LossJournal.merged(target.record, record)
            {
                let mergedBytes = LossJournal.encode(merged)
                if mergedBytes.count == LossJournal.encode(target.record).count {
                    // Written over the record it replaces, in place (the same length).
                    (record, bytes, offset) = (merged, mergedBytes, target.offset)
                    state.mergeable[key] = nil
                }
            }
            if case .gapRemoved = record { state.mergeable = state.mergeable.filter { $0.key.stream != stream } }
            if case .gapsRemoved = record { state.mergeable = state.mergeable.filter { $0.key.stream != stream } }
            do {
                if let offset {
                    try overwriteJournalRecord(at: offset, path: path, bytes, file: &state.file)
                } else {
                    try appendToJournal(at: path, magic: LossJournal.magic, bytes, sync: false, file: &state.file)
                    offset = state.file.length - Int64(bytes.count)
                }
                state.unsynced = true
                if let key = LossJournal.MergeKey(after: record), let offset {
                    if state.mergeable.count >= 1024 { state.mergeable = [:] }
                    state.mergeable[key] = (record, offset)
                }
                compactJournalIfDue(LossJournal.Contents.self, file: &state.file, standing: Self.lossRecords)
                // Written anew (or closed trying): no record is where it was.
                if state.file.fd < 0 { state.mergeable = [:] }
            } catch {
                state.abandoned = true
                state.mergeable = [:]
                if state.file.fd >= 0 { fs.close(state.file.fd) }
                state.file = JournalFile()
                try? fs.unlink(path)
            }
        }
    }

    /// Writes `bytes`, a record of the same length as the one at `offset`, over it.
    private func overwriteJournalRecord(at offset: Int64, path: String, _ bytes: [UInt8], file: inout JournalFile)
        throws
    {
        let fs = fileSystem
        let fd = file.fd
        try Self.wrapIO { () throws(FileSystemError) in try fs.writeAll(fd, bytes, offset: offset, path: path) }
    }

    /// Syncs what the losses' journal was given (when the last writer closes).
    func syncLossJournal() {
        let fs = fileSystem
        let path = lossJournalPath
        lossJournal.withAnnotatedLock { state in
            if state.file.fd >= 0 { try? fs.fdatasync(state.file.fd, path: path) }
            state.unsynced = false
        }
    }

    /// Syncs the losses' journal if records were written since its last sync: on a segment's sync thread, after
    /// the segment's own sync. The sync goes through a duplicate of the journal's descriptor, outside the lock, so
    /// that the spill thread recording a loss meanwhile never waits for the disk. One that fails is tried again at
    /// the next (and at the last writer's close).
    func syncLossJournalIfWritten() {
        let fs = fileSystem
        let path = lossJournalPath
        let fd: Int32 = lossJournal.withAnnotatedLock { state in
            guard state.unsynced, state.file.fd >= 0 else { return -1 }
            let duplicate = dup(state.file.fd)
            if duplicate >= 0 { state.unsynced = false }
            return duplicate
        }
        guard fd >= 0 else { return }
        defer { Glibc.close(fd) }
        do throws(FileSystemError) {
            try fs.fdatasync(fd, path: path)
        } catch {
            lossJournal.withAnnotatedLock { $0.unsynced = true }
        }
    }

    /// Brings the index's gaps and drop counters and the losses' journal into step, as
    /// ``reconcileMarkers(mode:rebuildingIndex:report:)`` does for markers: what the journal has and the index lacks
    /// is put back, gaps the journal removed are removed again, and what the index has beyond the journal (the
    /// process stopped between the two writes, or the journal could not be written) is added to the journal.
    func reconcileLosses(mode: ReconcileMode, rebuildingIndex: Bool, report: inout VerifyReport) throws {
        let path = lossJournalPath
        try lossJournal.withAnnotatedLock { state throws in
            // The journal may be written again: its records move.
            state.mergeable = [:]
            try reconcileJournal(
                LossJournal.Contents.self, mode: mode, rebuildingIndex: rebuildingIndex, file: &state.file,
                report: &report, what: "gaps and drop counts", indexHolds: { "the index's gaps and drop counts" },
                writeFromIndex: { _, file in
                    try rewriteJournal(
                        at: path, magic: LossJournal.magic, try lossRecordsOfIndex().flatMap(LossJournal.encode),
                        file: &file)
                    return nil
                },
                bringInStep: { journal, file, report in
                    try bringLossesInStep(with: journal, mode: mode, file: &file, report: &report)
                })
        }
    }

    private func bringLossesInStep(
        with journal: LossJournal.Contents, mode: ReconcileMode, file: inout JournalFile, report: inout VerifyReport
    ) throws {
        let name = LossJournal.fileName
        var restoredGaps = 0
        var restoredDrops: Int64 = 0
        var removedGaps = 0
        var behind: [LossJournal.Record] = []
        let streams = try index.streams()
        for stream in streams {
            // The journal's gaps the index lacks, and the index's the journal lacks (multisets, counted: a long
            // recording may have many).
            var missing: [LossJournal.Gap: Int] = [:]
            for gap in journal.gaps[stream.name] ?? [] { missing[gap, default: 0] += 1 }
            var extra: [LossJournal.Gap] = []
            for gap in try index.gaps(streamID: stream.id).map(LossJournal.Gap.init) {
                if let count = missing[gap] { missing[gap] = count > 1 ? count - 1 : nil } else { extra.append(gap) }
            }
            for (gap, count) in missing.sorted(by: { ($0.key.start, $0.key.end) < ($1.key.start, $1.key.end) }) {
                restoredGaps += count
                guard mode.changes else { continue }
                for _ in 0..<count {
                    try index.recordGap(row(of: gap, streamID: stream.id), announcing: false)
                }
            }
            var removed = journal.removedGaps[stream.name] ?? [:]
            for gap in extra {
                let removedBefore = journal.removedBefore[stream.name].map { gap.start < $0 } ?? false
                if let count = removed[gap], count > 0 {
                    removed[gap] = count - 1
                } else if !removedBefore {
                    behind.append(.gapAdded(stream: stream.name, gap))
                    continue
                }
                removedGaps += 1
                if mode.changes { try index.removeGap(row(of: gap, streamID: stream.id), announcing: false) }
            }
            let indexed = try index.drops(streamID: stream.id)
            let journaled = journal.drops[stream.name] ?? [:]
            for reason in Set(indexed.keys).union(journaled.keys).sorted(by: { $0.rawValue < $1.rawValue }) {
                let inIndex = Int64(indexed[reason] ?? 0)
                let inJournal = journaled[reason] ?? 0
                if inJournal > inIndex {
                    restoredDrops += inJournal - inIndex
                    if mode.changes {
                        try index.addDrops(
                            streamID: stream.id, reason: reason, count: Int(inJournal - inIndex), announcing: false)
                    }
                } else if inIndex > inJournal {
                    behind.append(.dropsAdded(stream: stream.name, reason: reason, count: inIndex - inJournal))
                }
            }
        }
        // Nothing is left of a stream the store no longer has: a repair drops what the journal holds of it.
        let known = Set(streams.map(\.name))
        let orphans = Set(journal.gaps.keys).union(journal.drops.keys).subtracting(known).sorted().filter { stream in
            !(journal.gaps[stream] ?? []).isEmpty || (journal.drops[stream] ?? [:]).values.contains { $0 > 0 }
        }
        for stream in orphans {
            report.append(
                "\(name) has gaps or drop counts of stream '\(stream)', but the store has no stream '\(stream)' (no "
                    + "frame of it is left): "
                    + (mode.changes ? "dropped from the journal" : "'rewind verify --repair' drops them"),
                asProblem: !mode.changes)
        }
        var parts: [String] = []
        if restoredGaps > 0 { parts.append("\(restoredGaps) gap" + (restoredGaps == 1 ? "" : "s")) }
        if restoredDrops > 0 { parts.append("\(restoredDrops) dropped frame" + (restoredDrops == 1 ? "" : "s")) }
        if !parts.isEmpty {
            report.append(
                mode.changes
                    ? "restored from \(name) what the index had lost: " + parts.joined(separator: " and ")
                    : "the index lacks " + parts.joined(separator: " and ") + " \(name) has: 'rewind verify --repair' "
                        + "restores them", asProblem: !mode.changes)
        }
        if removedGaps > 0 {
            let gaps = "\(removedGaps) gap" + (removedGaps == 1 ? "" : "s")
            report.append(
                mode.changes
                    ? "removed \(gaps) \(name) says were removed (the index had lost the removal)"
                    : "the index has \(gaps) \(name) says were removed: 'rewind verify --repair' removes them",
                asProblem: !mode.changes)
        }
        guard mode.changes else { return }
        // Kept as the index has them: a journal cut or damaged, or of many more changes than what stands, is written
        // again from the index (now in step with it).
        let standing = try lossRecordsOfIndex()
        if journal.damage != nil || journal.tornTail || !orphans.isEmpty
            || journal.records + behind.count > 2 * standing.count + 64
        {
            if journal.tornTail {
                report.repaired.append(
                    "cut the unfinished last record of \(name) (a change being written when the process stopped)")
            }
            try rewriteJournal(
                at: lossJournalPath, magic: LossJournal.magic, standing.flatMap(LossJournal.encode), file: &file)
        } else if !behind.isEmpty {
            try appendToJournal(
                at: lossJournalPath, magic: LossJournal.magic, behind.flatMap(LossJournal.encode), sync: true,
                file: &file)
        }
    }

    /// The records that make the index's gaps and drop counts from nothing.
    private func lossRecordsOfIndex() throws -> [LossJournal.Record] {
        var records: [LossJournal.Record] = []
        for stream in try index.streams() {
            for gap in try index.gaps(streamID: stream.id) {
                records.append(.gapAdded(stream: stream.name, LossJournal.Gap(gap)))
            }
            for (reason, count) in try index.drops(streamID: stream.id).sorted(by: { $0.key.rawValue < $1.key.rawValue }
            )
            where count > 0 {
                records.append(.dropsAdded(stream: stream.name, reason: reason, count: Int64(count)))
            }
        }
        return records
    }

    /// The records that make what a losses' journal holds from nothing, stream by stream.
    private static func lossRecords(of journal: LossJournal.Contents) -> [UInt8] {
        var records: [UInt8] = []
        for stream in Set(journal.gaps.keys).union(journal.drops.keys).sorted() {
            for gap in journal.gaps[stream] ?? [] { records += LossJournal.encode(.gapAdded(stream: stream, gap)) }
            for (reason, count) in (journal.drops[stream] ?? [:]).sorted(by: { $0.key.rawValue < $1.key.rawValue })
            where count > 0 {
                records += LossJournal.encode(.dropsAdded(stream: stream, reason: reason, count: count))
            }
        }
        return records
    }

    private func row(of gap: LossJournal.Gap, streamID: Int64) -> GapRow {
        GapRow(streamID: streamID, startNanoseconds: gap.start, endNanoseconds: gap.end, reason: gap.reason)
    }
}

extension VerifyReport {
    /// Adds `line` to ``problems`` or ``repaired``.
    mutating func append(_ line: String, asProblem: Bool) {
        if asProblem { problems.append(line) } else { repaired.append(line) }
    }
}
