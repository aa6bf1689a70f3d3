import RewindCore
import RewindSQLite
import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension SegmentStore {
    /// Deletes the oldest sealed segments while the segment files exceed ``StoreOptions/diskBudget``, the file
    /// system has less than ``StoreOptions/minimumFreeBytes`` free (beyond ``StoreOptions/indexReserveBytes``), or
    /// they are older than ``StoreOptions/maxAge``.
    ///
    /// Each delete is restartable: the row is marked `deleting` (its frames vanish from queries), the file is
    /// unlinked and the directory synced, then the row is removed; recovery finishes a delete cut short. A segment
    /// held (``addHold(streamName:range:)``, a marker's hold) is kept and newer ones are deleted instead, leaving a
    /// ``LossReason/retention`` gap where they were. A segment
    /// being read (a reader holds its shared lock), held or not, stops the pass before anything newer is deleted,
    /// which continues on the next call (so the budget may be exceeded while a reader holds the oldest segment, or a
    /// held one). Open segments are never deleted.
    ///
    /// - Returns: what was deleted and skipped.
    /// - Throws: ``SegmentStoreError/readOnly(_:)``; I/O and index errors.
    /// - Complexity: O(segments).
    @discardableResult
    public func enforceRetention() throws -> RetentionReport {
        return try SegmentStoreError.translatingIndexErrors { try enforceRetentionUntranslated(reserving: 0) }
    }

    /// A retention pass that also keeps `bytes` free beyond the floor (the next frame a writer is about to write).
    ///
    /// - Parameter growthRoom: whether the room the open segments may still grow takes sealed history too; not after
    ///   a writer's last seal (the recording stops: every stream seals its last segment in turn, and the room kept
    ///   for those not sealed yet took each stream's last full segment, leaving one a few frames).
    func enforceRetention(reserving bytes: Int64, growthRoom: Bool = true) throws -> RetentionReport {
        try SegmentStoreError.translatingIndexErrors {
            try enforceRetentionUntranslated(reserving: bytes, growthRoom: growthRoom)
        }
    }

    /// The bytes free on the file system holding the segments, or nil when it cannot say.
    func availableSegmentBytes() -> Int64? {
        try? fileSystem.availableBytes(segmentsDirectory)
    }

    private func enforceRetentionUntranslated(reserving bytes: Int64, growthRoom: Bool = true) throws
        -> RetentionReport
    {
        guard !isReadOnly else { throw SegmentStoreError.readOnly("delete old segments") }
        var report = RetentionReport()
        // Oldest first by when their frames start on the recorder clock (streams read at different speeds make
        // their segments in another order than their times), in the order made where that ties or is unknown.
        var offsets: [Int64: Int64] = [:]
        let streams = try index.streams()
        for stream in streams { offsets[stream.id] = stream.clock?.offsetNanoseconds ?? 0 }
        func start(_ row: SegmentRow) -> Int64 {
            guard let first = row.firstPTS else { return .min }
            return first.addingSaturating(offsets[row.streamID] ?? 0)
        }
        let rows = try index.segments().filter { $0.state != .deleting }.sorted {
            (start($0), $0.id) < (start($1), $1.id)
        }
        var sizes: [Int64: Int64] = [:]
        var total: Int64 = 0
        for row in rows {
            let size = fileSystem.fileBytes(segmentsDirectory + "/" + row.fileName) ?? 0
            sizes[row.id] = size
            total += size
        }
        let growth = growthRoom ? openSegmentGrowth(rows: rows, sizes: sizes, streams: streams) : 0
        // The room kept for open segments to grow never takes the newest sealed segment of a stream this store has
        // written since it opened (a budget below a few segments of each stream; also once its writer closed, while
        // the others seal their last): that goes only when the files themselves pass the budget. A stream of an
        // earlier run keeps no such segment: its history goes oldest first like any other's (its one segment was
        // kept whole while the recorded stream lost all but its newest seconds).
        let writing = streamsWritten.withAnnotatedLock { $0 }
        let written = Set(streams.filter { writing.contains($0.name) }.map(\.id))
        var newestSealed: [Int64: SegmentRow] = [:]
        for row in rows where row.state == .sealed && written.contains(row.streamID) {
            newestSealed[row.streamID] = row
        }
        let now = options.now()
        let wantedFree = options.minimumFreeBytes.map { Int64($0) + indexRoomToKeep + bytes }
        var available = wantedFree == nil ? nil : availableSegmentBytes()
        let held = try heldRanges()
        /// Per stream, the first and last frames of each segment deleted.
        var deletedSpans: [Int64: [ClosedRange<Int64>]] = [:]
        /// Held segments passed over since the last one whose lock was asked for: one being read stops the pass
        /// before anything newer is deleted, as an unheld one would (its reader opens the next segment before it
        /// lets go of it, so the next one must stay). Asked only when a deletion would follow, not for every hold.
        var passedHeld: [SegmentRow] = []
        /// Streams with a sealed segment met that is not too old for `--max-age`.
        var youngStreams: Set<Int64> = []
        pass: for row in rows where row.state == .sealed {
            // A `.partial` kept whole for a repair: its row holds only the frames before the damage, so neither its
            // holds nor its size are known until the repair salvages the rest; it stays until then.
            if row.fileName.hasSuffix(SegmentFormat.partialSuffix) { continue }
            // A held segment stays whatever the budget says; newer ones go in its place.
            if let first = row.firstPTS, let last = row.lastPTS,
                held[row.streamID]?.contains(where: { $0.overlaps(first...last) }) == true
            {
                report.keptByHolds.append(row.fileName)
                passedHeld.append(row)
                continue
            }
            let overBudget =
                options.diskBudget.map { budget in
                    total > Int64(budget)
                        || (total + growth > Int64(budget) && newestSealed[row.streamID]?.id != row.id)
                } ?? false
            let shortOfSpace = wantedFree.map { wanted in available.map { $0 < wanted } ?? false } ?? false
            // Age goes oldest first too: a segment not too old keeps every newer one of its stream from going for
            // age, so a clock set back (segments sealed under the hour ahead read as young, later ones as old) never
            // takes the middle of a recording out.
            var tooOld = false
            if let maxAge = options.maxAgeNanoseconds, !youngStreams.contains(row.streamID) {
                // A clock set centuries back or forth (past 64 bits of difference) is very old or very young.
                let sealed = row.sealedWallNanoseconds ?? row.createdWallNanoseconds
                let (age, overflow) = now.subtractingReportingOverflow(sealed)
                tooOld = overflow ? now > sealed : age > maxAge
                if !tooOld { youngStreams.insert(row.streamID) }
            }
            guard overBudget || shortOfSpace || tooOld else { continue }
            // Strictly oldest first: deleting newer segments past a reader would cut holes in what it is about to
            // read. The next pass continues once the reader has moved on.
            for heldRow in passedHeld {
                guard try isBeingRead(heldRow.fileName) else { continue }
                report.skippedInUse.append(heldRow.fileName)
                break pass
            }
            passedHeld.removeAll()
            let path = segmentsDirectory + "/" + row.fileName
            guard let fd = try lockForDeletion(path) else {
                report.skippedInUse.append(row.fileName)
                break
            }
            defer { if fd >= 0 { fileSystem.close(fd) } }
            try index.markDeleting(segmentID: row.id)
            try Self.wrapIO { () throws(FileSystemError) in
                try fileSystem.unlink(path)
                try fileSystem.syncDirectory(segmentsDirectory)
            }
            try index.removeSegment(id: row.id)
            if let first = row.firstPTS, let last = row.lastPTS {
                deletedSpans[row.streamID, default: []].append(first...last)
            }
            let size = sizes[row.id] ?? 0
            total -= size
            report.freedBytes += size
            report.deleted.append(row.fileName)
            if wantedFree != nil { available = availableSegmentBytes() }
        }
        report.remainingBytes = total
        try noteDeletedHistory(deletedSpans)
        return report
    }

    /// Opens a segment file and takes its exclusive lock without waiting: the descriptor holding it (to close once
    /// the file is deleted), -1 when the file is already gone, nil when a reader holds its shared lock.
    private func lockForDeletion(_ path: String) throws -> Int32? {
        let fd: Int32
        do {
            fd = try fileSystem.open(path, flags: O_RDONLY, mode: 0)
        } catch {
            if error.code != ENOENT { throw SegmentStoreError.io(error) }
            return -1
        }
        let free: Bool
        do {
            free = try Self.wrapIO { () throws(FileSystemError) in
                try fileSystem.flock(fd, operation: LOCK_EX | LOCK_NB, path: path)
            }
        } catch {
            fileSystem.close(fd)
            throw error
        }
        if !free { fileSystem.close(fd) }
        return free ? fd : nil
    }

    /// Whether a reader holds the shared lock of a segment kept (a held one): its lock is asked for and let go at
    /// once.
    private func isBeingRead(_ fileName: String) throws -> Bool {
        guard let fd = try lockForDeletion(segmentsDirectory + "/" + fileName) else { return true }
        if fd >= 0 { fileSystem.close(fd) }
        return false
    }

    /// The bytes the segment files of the store take: each live segment's file as it is now (headers, records and
    /// footers; frames written and not yet indexed too), the figure ``StoreOptions/diskBudget`` bounds. The index's
    /// `stored_bytes` count frame payloads alone.
    ///
    /// - Throws: index errors.
    /// - Complexity: O(segments): one `stat` each.
    public func segmentFileBytes() throws -> Int64 {
        try SegmentStoreError.translatingIndexErrors {
            try index.segments().filter { $0.state != .deleting }.reduce(0) {
                $0 + (fileSystem.fileBytes(segmentsDirectory + "/" + $1.fileName) ?? 0)
            }
        }
    }

    /// What the file of segment `row` takes on disk now, headers, frame records and footer included (what retention
    /// counts against ``StoreOptions/diskBudget``; about 80 bytes a frame more than its `stored_bytes`); its frames'
    /// stored bytes when the file cannot be read.
    public func fileBytes(of row: SegmentRow) -> Int64 {
        fileSystem.fileBytes(segmentsDirectory + "/" + row.fileName) ?? row.storedBytes
    }

    /// The most bytes the segment files can take, the bound that holds must fit within: the disk budget
    /// (``StoreOptions/diskBudget``), or, with retention by free space alone (``StoreOptions/minimumFreeBytes``), the
    /// files' bytes now plus what the file system has free above the floor and the index's room; nil with neither
    /// (nothing is deleted to make room, so a hold changes nothing) or when the file system cannot say.
    ///
    /// - Throws: index errors.
    package func segmentCapacity() throws -> SegmentCapacity? {
        if let budget = options.diskBudget { return SegmentCapacity(bytes: Int64(budget), byFreeSpace: false) }
        guard let floor = options.minimumFreeBytes, let available = availableSegmentBytes() else { return nil }
        let room = available - Int64(floor) - indexRoomToKeep
        return SegmentCapacity(bytes: max(0, try segmentFileBytes() + room), byFreeSpace: true)
    }

    /// How much the open segments of the streams being written may still grow before they are sealed: each
    /// writer's seal size (``openSegmentLimits``) less what its open segment holds. Retention keeps that room free of
    /// sealed history, so the segment files stay within ``StoreOptions/diskBudget`` while they grow between seals
    /// (within a frame of each stream: a segment is sealed once a frame takes it past its size), not only just after
    /// one.
    private func openSegmentGrowth(rows: [SegmentRow], sizes: [Int64: Int64], streams: [StreamRow]) -> Int64 {
        let limits = openSegmentLimits.withAnnotatedLock { $0 }
        var growth: Int64 = 0
        for stream in streams {
            guard let limit = limits[stream.name] else { continue }
            let open = rows.filter { $0.streamID == stream.id && $0.state == .open }.reduce(0) {
                $0 + (sizes[$1.id] ?? 0)
            }
            growth += max(0, Int64(limit) - open)
        }
        return growth
    }

    /// Brings each stream's gaps in line with what a pass deleted (`deletedSpans`: the first and last frames of each
    /// segment): the gaps that start before its oldest frame left go (all of them when nothing is left: the time
    /// they describe is no longer in the store), and each stretch of deleted segments that older frames kept by a
    /// hold precede gets a ``LossReason/retention`` gap, from the first frame deleted to the first frame kept after
    /// it (or just past the newest deleted, when none is). A gap of that reason it touches, overlaps or follows
    /// within a frame (one that ended just past the newest frame deleted then) is merged into it: one row per hole,
    /// however many passes made it. The gaps recorded inside the hole stay (they say why frames were missing before).
    private func noteDeletedHistory(_ deletedSpans: [Int64: [ClosedRange<Int64>]]) throws {
        guard !deletedSpans.isEmpty else { return }
        let streams = try index.streams()
        for (streamID, spans) in deletedSpans {
            let frameStep = streams.first { $0.id == streamID }?.description.frameStepNanoseconds ?? 1
            let kept = try index.segments(streamID: streamID).filter { $0.state != .deleting }.compactMap(\.firstPTS)
                .sorted()
            guard let oldestLeft = kept.first else {
                try index.removeGaps(streamID: streamID, startingBefore: spans.map(\.upperBound).max()! + 1)
                continue
            }
            var holes: [Int64: Range<Int64>] = [:]  // by the first frame kept after the hole (or .max)
            for span in spans where span.lowerBound > oldestLeft {
                let resume = kept.first { $0 > span.upperBound }
                let key = resume ?? .max
                let end = resume ?? span.upperBound + 1
                let hole = holes[key].map { min($0.lowerBound, span.lowerBound)..<max($0.upperBound, end) }
                holes[key] = hole ?? span.lowerBound..<end
            }
            for hole in holes.values {
                var start = hole.lowerBound
                var end = hole.upperBound
                let touching = try index.gaps(streamID: streamID, overlapping: (start - frameStep)..<(end + 1))
                for gap in touching where gap.reason == .retention {
                    start = min(start, gap.startNanoseconds)
                    end = max(end, gap.endNanoseconds)
                    try index.removeGap(gap)
                }
                try index.recordGap(
                    GapRow(streamID: streamID, startNanoseconds: start, endNanoseconds: end, reason: .retention))
                if let name = streams.first(where: { $0.id == streamID })?.name {
                    retentionGapChangeCounts.withAnnotatedLock { $0[name, default: 0] += 1 }
                }
            }
            try index.removeGaps(streamID: streamID, startingBefore: oldestLeft)
        }
    }

}

/// What one retention pass did.
public struct RetentionReport: Sendable {
    /// Segment files deleted, oldest first.
    public var deleted: [String] = []
    /// Bytes of the deleted segment files (their sizes when the pass began).
    public var freedBytes: Int64 = 0
    /// Segments retention would have deleted but a hold keeps (a marker's, or a waiting save's pre-roll).
    public var keptByHolds: [String] = []
    /// Segments being read that stopped the pass: one due for deletion, or one kept by a hold with a deletion due
    /// after it (tried again next pass).
    public var skippedInUse: [String] = []
    /// Bytes of segment files left.
    public var remainingBytes: Int64 = 0
}

/// The most bytes a store's segment files can take (``SegmentStore/segmentCapacity()``).
package struct SegmentCapacity: Sendable, Equatable {
    /// The bound, in bytes.
    package var bytes: Int64
    /// Whether it comes from the free space above the floor (no disk budget), which other files on the file
    /// system change, rather than the disk budget.
    package var byFreeSpace: Bool
}
