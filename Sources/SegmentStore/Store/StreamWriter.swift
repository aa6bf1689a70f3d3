import RewindCore
import RewindSQLite
import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Appends the frames of one stream to a store: encodes each frame (on the store's worker threads), writes its
/// record to the open segment, and adds index rows when the file is synced.
///
/// Used by one thread (the spill thread), never by the capture producer. The durability contract: a frame is
/// durable once a ``sync()`` that returned after its ``append(_:)`` succeeded; ``durableFrameCount`` and
/// ``lastDurablePTS`` say how far that is. Automatic syncs start every ``StoreOptions/syncInterval`` of pts and run
/// on the writer's own sync thread while it goes on compressing and writing, so the disk's latency never holds up
/// the next frame: their frames count as durable, and get their index rows, at the first append or sync after the
/// `fdatasync` returned. A sync still running when the next one is due is not doubled; the next append starts it.
///
/// When a write fails (a full disk, an I/O error), the open segment is cut back to its last good record and
/// sealed (or left as a valid `.partial` for recovery when even that fails), the error is thrown, and the next
/// `append` starts a new segment.
///
/// Room: before each frame the writer asks the file system how much is free. A frame that would leave less than
/// ``StoreOptions/indexReserveBytes`` is not written (``SegmentStoreError/diskFull(file:durableFrames:durablePTS:cause:)``
/// with `ENOSPC`, the open segment untouched), so the index can still record the gap, the drop counters and the
/// seal. With retention by free space (``StoreOptions/minimumFreeBytes``) the oldest sealed segments are deleted
/// first, and when only the open segment is left it is sealed so that it can go too.
///
/// A segment's index row is added with its first durable frames, and a segment number is given back when its
/// file could not be made or held no frame: a failed attempt leaves neither a row nor a hole in the numbers.
public final class StreamWriter {
    /// The store the frames go to.
    public let store: SegmentStore
    /// The stream being written, as the index knows it (its id, name and frame description).
    public let stream: StreamRow
    private let encoder: FrameEncoder
    private var segment: SegmentFileWriter?
    /// Runs the automatic syncs of the open segment.
    private let syncThread = SyncThread()
    /// The open segment's index row; nil until its first frames are durable and indexed.
    private var segmentID: Int64?
    /// Index rows of the open segment not yet added (frames written, not yet synced).
    private var pendingRows: [FrameRow] = []
    /// Frames of the open segment whose rows are in the index.
    private var indexedCount = 0
    /// Segments closed by a failure whose seal did not finish: (row id, writer).
    private var unsealed: [(Int64?, SegmentFileWriter)] = []
    private var lastPTS: Int64?
    private var lastSyncPTS: Int64?
    private var framesSinceKey = 0
    private var durableBefore = 0
    private var closed = false
    /// Free bytes on the file system as last read, less what frames may have taken since (an upper bound per frame),
    /// so `statvfs` runs only near the floor or every ``freeSpaceCheckInterval`` frames, not for every frame.
    private var estimatedAvailable: Int64?
    private var framesSinceFreeSpaceCheck = 0
    /// Frames between two reads of the free space while far from the floor (other processes may write too).
    static let freeSpaceCheckInterval = 64
    /// How far above what a frame needs the estimate must stay to skip a read.
    static let freeSpaceSlack: Int64 = 256 << 20
    /// Without a disk budget, under `--min-free`: the size segments are sealed at so that retention can keep the floor
    /// by deleting old ones (an eighth of this writer's share of the room the segment files have: their bytes and
    /// the free space above the floor), worked out at the first read of the free space after every
    /// ``roomSealInterval``-th seal; nil until then, or without a floor. A segment of a minute outgrew a small disk's
    /// room, and retention, with nothing sealed to delete, let the free space fall far below the floor and then
    /// deleted the whole recording.
    private var roomSealBytes: Int64?
    /// Seals since ``roomSealBytes`` was worked out; at ``roomSealInterval`` (as at the start) it is worked out again.
    private var sealsSinceRoomSeal = StreamWriter.roomSealInterval
    /// Seals between two sums of the segment files' sizes (a `stat` each) for ``roomSealBytes``: a store of many
    /// short segments would otherwise pay for all of them at every seal, on the spill thread.
    static let roomSealInterval = 16
    /// The pts of the newest durable frame, nanoseconds on the stream's clock; nil until a sync makes one durable.
    public private(set) var lastDurablePTS: Int64?
    /// The segments this writer sealed, in order.
    public private(set) var sealedFileNames: [String] = []
    /// Bytes of frames written stored as raw chunks (incompressible, or stored raw while the writer fell behind).
    public private(set) var rawChunkBytes: Int64 = 0
    /// Time spent in the segment files' system calls: writes, writeback starts, syncs and seals.
    package let ioTimer = IOTimer()
    /// Frames whose append had returned but that a later failure cut off (written since the last successful sync,
    /// when a sync failed), since the writer was made; ``lastCutBack`` says which the latest were.
    public private(set) var framesCutBack = 0
    /// The pts of the first and last frames the latest cut removed, nanoseconds on the stream's clock.
    public private(set) var lastCutBack: (firstPTS: Int64, lastPTS: Int64)?
    /// The last error of a retention pass run after a seal (retention never fails an append).
    public private(set) var lastRetentionError: (any Error)?

    /// The size a segment file reaches before it is sealed (or its frames span ``StoreOptions/segmentMaxDuration``).
    public let segmentMaxBytes: Int

    init(store: SegmentStore, stream: StreamRow, sharingWorkersWith other: StreamWriter? = nil, segmentMaxBytes: Int) {
        self.store = store
        self.stream = stream
        self.segmentMaxBytes = max(1, segmentMaxBytes)
        encoder = FrameEncoder(
            layout: stream.description.layout, workerCount: store.options.workerCount,
            chunkSize: store.options.chunkSize, headerSpace: SegmentFormat.recordHeaderLength,
            policy: store.options.codecPolicy, sharingWorkersWith: other?.encoder)
        encoder.beforeCompressingChunk = store.options.beforeCompressingChunk
        pendingRows.reserveCapacity(1024)
    }

    deinit {
        if !closed { try? close() }
    }

    /// Frames durable since the writer was made.
    public var durableFrameCount: Int { durableBefore + (segment?.durableCount ?? 0) }

    /// The worker threads compressing frames.
    public var workerCount: Int { encoder.workerCount }

    /// Encodes and writes one frame (durable at the next ``sync()``).
    ///
    /// - Parameter frame: the next frame: pts strictly after the previous one's, the stream's layout.
    /// - Throws: ``SegmentStoreError/frame(_:)`` for a bad frame (nothing written);
    ///   ``SegmentStoreError/diskFull(file:durableFrames:durablePTS:cause:)`` or
    ///   ``SegmentStoreError/writeFailed(file:durableFrames:durablePTS:cause:)`` when the write failed (the segment is
    ///   closed at its last good record; the next append starts a new one); index errors.
    /// - Complexity: O(frame bytes), spread over ``workerCount`` threads.
    public func append(_ frame: FrameView) throws {
        try SegmentStoreError.translatingIndexErrors { try appendUntranslated(frame, previous: nil, keepsCopy: true) }
    }

    /// Encodes and writes one frame like ``append(_:)``, with the frame appended just before it still at hand, so
    /// the encoder keeps no copy of its own (without it the frame is a key frame), and a share of the frame
    /// stored raw when the caller falls behind.
    ///
    /// - Parameters:
    ///   - frame: the next frame.
    ///   - previous: the frame appended just before, its bytes unchanged (checked by pts); nil when it is gone.
    ///   - compressedChunks: at most this many chunks (the first of the frame) are compressed, the rest stored
    ///     raw; `.max` for all.
    /// - Throws: like ``append(_:)``.
    package func append(_ frame: FrameView, previous: FrameView?, compressedChunks: Int = .max) throws {
        try SegmentStoreError.translatingIndexErrors {
            try appendUntranslated(
                frame, previous: previous, keepsCopy: false, compressedChunks: compressedChunks)
        }
    }

    /// Makes the frames of an automatic sync that has finished durable and adds their index rows; does nothing when
    /// none has finished (it never waits). For a caller with no frame to append for a while, so that the last frames
    /// before a pause do not wait for the next one to be indexed.
    ///
    /// - Throws: like ``append(_:)`` when the sync failed (the frames it covered are then cut off: see
    ///   ``framesCutBack``).
    public func collectFinishedSync() throws {
        try SegmentStoreError.translatingIndexErrors { try collectSync(waiting: false) }
    }

    /// Starts an automatic sync of every frame written that is not durable yet, unless one is running: for a
    /// caller whose frames stopped coming, so that the last ones become durable without waiting for the next frame
    /// (``collectFinishedSync()`` then indexes them). Never waits.
    public func startSyncIfNeeded() {
        guard let open = segment, !open.isSyncing, open.durableCount < open.frameCount else { return }
        // The losses recorded since the last sync become durable with the frames (the index's WAL is synced only at
        // its checkpoints): a power cut then loses neither.
        open.startSync(on: syncThread) { [store] in store.syncLossJournalIfWritten() }
        lastSyncPTS = lastPTS
    }

    /// Chunks a frame is cut into (see ``append(_:previous:compressedChunks:)``).
    package var chunkCount: Int { encoder.plan.count }

    /// The encoder's output buffer at full capacity, in bytes: what encoding keeps resident besides the frames.
    package var encoderOutputBytes: Int { encoder.outputBytes }

    /// Limits the encoder's output buffer to `bytes` (chunks beyond are stored raw) and gives the rest back to
    /// the system; ``encoderOutputBytes`` restores it.
    package func setEncoderOutputCapacity(_ bytes: Int) { encoder.setOutputCapacity(bytes) }

    /// Gives the encoder's memory back to the system until the next frame (while idle).
    package func releaseEncoderMemory() { encoder.releaseMemory() }

    private func appendUntranslated(
        _ frame: FrameView, previous: FrameView?, keepsCopy: Bool, compressedChunks: Int = .max
    ) throws {
        precondition(!closed, "append to a closed StreamWriter")
        let pts = frame.info.ptsNanoseconds
        guard frame.layout == stream.description.layout else {
            throw SegmentStoreError.frame(.layoutMismatch(expected: stream.description.layout, actual: frame.layout))
        }
        if let lastPTS {
            if pts == lastPTS { throw SegmentStoreError.frame(.duplicatePTS(nanoseconds: pts)) }
            if pts < lastPTS {
                throw SegmentStoreError.frame(.nonMonotonicPTS(previousNanoseconds: lastPTS, nanoseconds: pts))
            }
        }
        try collectSync(waiting: false)
        if let open = segment, let first = open.firstPTS,
            pts - first >= store.options.segmentMaxNanoseconds
                || open.endOffset >= min(Int64(segmentMaxBytes), roomSealBytes ?? .max)
                || open.frameCount >= store.options.segmentMaxFrames
        {
            try sealCurrent()
        }
        try ensureRoom(forRawBytes: frame.bytes.count)
        if segment == nil { try startSegment() }
        guard let open = segment else { return }
        let key = open.frameCount == 0 || framesSinceKey + 1 >= store.options.keyInterval
        if open.frameCount == 0 { encoder.reset() }
        // The caller's copy of the previous frame serves the delta only when it is the frame appended just before.
        let reference =
            open.frameCount > 0 && previous != nil && previous?.info.ptsNanoseconds == lastPTS
                && previous?.bytes.count == frame.bytes.count ? previous?.bytes.baseAddress : nil
        let encoded: EncodedFrame
        do {
            encoded = try encoder.encode(
                frame.bytes, key: key, previous: reference, keepsCopy: keepsCopy, compressedChunks: compressedChunks,
                writingTo: open)
        } catch {
            open.abandonRecord()
            try fail(error)
        }
        let entry: SegmentFrameEntry
        do {
            entry = try open.append(
                pieces: encoder.pieces, ptsNanoseconds: pts, wallNanoseconds: frame.info.wallNanoseconds,
                encoded: encoded, streamedBytes: encoder.streamedBytes)
        } catch {
            try fail(error)
        }
        framesSinceKey = encoded.isKey ? 0 : framesSinceKey + 1
        rawChunkBytes += Int64(encoded.rawChunkBytes)
        lastPTS = pts
        pendingRows.append(
            FrameRow(
                ptsNanoseconds: pts, wallNanoseconds: entry.wallNanoseconds, segmentID: segmentID ?? 0,
                fileOffset: entry.offset, storedLength: entry.storedLength, rawLength: entry.rawLength,
                flags: entry.flags, codec: entry.codec))
        if let lastSyncPTS {
            if pts - lastSyncPTS >= store.options.syncIntervalNanoseconds { startSyncIfNeeded() }
        } else {
            lastSyncPTS = pts
        }
    }

    /// Makes everything appended so far durable: `fdatasync` of the segment, then its index rows.
    ///
    /// - Returns: the pts of the last durable frame (nanoseconds on the stream clock), or nil when none is.
    /// - Throws: like ``append(_:)`` when the sync fails (frames since the previous sync are then dropped and the
    ///   segment closed); index errors (the rows are kept and added at the next sync, or rebuilt by recovery).
    @discardableResult
    public func sync() throws -> Int64? {
        return try SegmentStoreError.translatingIndexErrors { try syncUntranslated() }
    }

    private func syncUntranslated() throws -> Int64? {
        lastSyncPTS = lastPTS
        try collectSync(waiting: true)
        guard let open = segment else { return lastDurablePTS }
        do {
            try open.sync()
        } catch {
            try fail(error, syncFailed: true)
        }
        lastDurablePTS = open.lastDurablePTS ?? lastDurablePTS
        try flushRows()
        return lastDurablePTS
    }

    /// Seals the open segment and stops the writer.
    ///
    /// - Throws: like ``sync()``; the writer is closed anyway.
    public func close() throws {
        try SegmentStoreError.translatingIndexErrors { try closeUntranslated() }
    }

    /// After ``close()``: copies the rows written since (the gaps of the recording's end, its drop counters) from
    /// the index's WAL into `index.sqlite`, unless another writer of the store is still open (best effort), so the
    /// index file alone holds every row once recording stops.
    public func checkpointAfterClose() {
        guard closed else { return }
        store.writerClosed(streamName: stream.name)
    }

    private func closeUntranslated() throws {
        guard !closed else { return }
        closed = true
        defer {
            syncThread.stop()
            store.writerClosed(streamName: stream.name)
        }
        if segment != nil { try sealCurrent(closing: true) }
        retryUnsealed()
    }

    /// Records an interval with no frames where frames were expected; durable when this returns.
    ///
    /// - Parameters:
    ///   - start: the first pts of the gap, inclusive, nanoseconds on the stream's clock.
    ///   - end: the pts where frames resume, exclusive, nanoseconds on the stream's clock; at least `start`.
    ///   - reason: why there are no frames (``LossReason/inputInterval`` when the source itself left the gap).
    /// - Throws: ``SegmentStoreError/index(path:problem:detail:)``, also when `end` is before `start`.
    public func recordGap(start: Int64, end: Int64, reason: LossReason) throws {
        try SegmentStoreError.translatingIndexErrors {
            try store.index.recordGap(
                GapRow(streamID: stream.id, startNanoseconds: start, endNanoseconds: end, reason: reason))
        }
    }

    /// Moves the end of the stream's gap of `reason` that ends at `end` to `newEnd` (a stretch of losses that went
    /// on after its gap was first recorded).
    ///
    /// - Returns: whether there was such a gap.
    /// - Throws: ``SegmentStoreError/index(path:problem:detail:)``.
    public func extendGap(endingAt end: Int64, to newEnd: Int64, reason: LossReason) throws -> Bool {
        try SegmentStoreError.translatingIndexErrors {
            try store.index.extendGap(streamID: stream.id, endingAt: end, to: newEnd, reason: reason)
        }
    }

    /// Records a gap like ``recordGap(start:end:reason:)``, or, when the stream's gap of `reason` recorded last ends
    /// at `start`, moves that gap's end to `end`: a stretch of gaps that follow each other is one row.
    ///
    /// - Returns: whether an existing gap was extended (false: a new one was recorded).
    /// - Throws: ``SegmentStoreError/index(path:problem:detail:)``.
    @discardableResult
    public func recordOrExtendGap(start: Int64, end: Int64, reason: LossReason) throws -> Bool {
        try SegmentStoreError.translatingIndexErrors {
            if try store.index.extendGap(streamID: stream.id, endingAt: start, to: end, reason: reason) {
                return true
            }
            try store.index.recordGap(
                GapRow(streamID: stream.id, startNanoseconds: start, endNanoseconds: end, reason: reason))
            return false
        }
    }

    /// Adds `count` dropped frames to the stream's counter for `reason`; durable when this returns.
    ///
    /// - Throws: ``SegmentStoreError/index(path:problem:detail:)``.
    public func addDrops(reason: LossReason, count: Int) throws {
        try SegmentStoreError.translatingIndexErrors {
            try store.index.addDrops(streamID: stream.id, reason: reason, count: count)
        }
    }

    // MARK: Segments

    private func startSegment() throws {
        let header = SegmentHeader(
            stream: stream.description, streamName: stream.name, sequence: store.allocateSequence(),
            keyInterval: store.options.keyInterval, chunkSize: store.options.chunkSize,
            createdWallNanoseconds: store.options.now())
        let writer: SegmentFileWriter
        do {
            do {
                writer = try SegmentFileWriter(
                    directory: store.segmentsDirectory, header: header, fileSystem: store.fileSystem, ioTimer: ioTimer)
            } catch  where error.code == ENOENT && !store.fileSystem.fileExists(store.segmentsDirectory) {
                // `segments/` deleted under the recording: made again, so what comes next is kept (the files it
                // held are gone; the record command says so when it ends).
                try store.fileSystem.makeDirectory(store.segmentsDirectory)
                store.madeSegmentsDirectoryAgain.store(true, ordering: .relaxed)
                writer = try SegmentFileWriter(
                    directory: store.segmentsDirectory, header: header, fileSystem: store.fileSystem, ioTimer: ioTimer)
            }
        } catch {
            store.releaseSequence(header.sequence)
            let name = SegmentFormat.fileName(sequence: header.sequence, partial: true)
            // The segment holds nothing; the stream's earlier frames stay durable.
            throw error.isDiskFull
                ? SegmentStoreError.diskFull(file: name, durableFrames: 0, durablePTS: lastDurablePTS, cause: error)
                : SegmentStoreError.writeFailed(file: name, durableFrames: 0, durablePTS: lastDurablePTS, cause: error)
        }
        segment = writer
        segmentID = nil
        pendingRows.removeAll(keepingCapacity: true)
        indexedCount = 0
        framesSinceKey = 0
        retryUnsealed()
    }

    /// The open segment's row, added to the index now if it is not there yet.
    private func indexedSegmentID(_ open: SegmentFileWriter) throws -> Int64 {
        if let segmentID { return segmentID }
        let id = try store.index.insertSegment(
            streamID: stream.id, fileName: open.fileName, formatVersion: Int(SegmentFormat.version),
            createdWallNanoseconds: open.header.createdWallNanoseconds)
        segmentID = id
        return id
    }

    /// Adds index rows for the first `count` pending frames of the open segment (and the segment's row first).
    private func indexPending(_ open: SegmentFileWriter, count: Int) throws {
        let id = try indexedSegmentID(open)
        var rows = Array(pendingRows.prefix(count))
        for i in rows.indices { rows[i].segmentID = id }
        try store.index.addFrames(rows, streamID: stream.id)
        pendingRows.removeFirst(rows.count)
        indexedCount += rows.count
    }

    /// Makes room for a frame of `raw` bytes, or throws ``SegmentStoreError/diskFull(file:durableFrames:durablePTS:cause:)``
    /// without writing anything when the file system cannot hold it and keep ``StoreOptions/indexReserveBytes`` for
    /// the index (less what its reserve file holds: ``SegmentStore/indexRoomToKeep``).
    private func ensureRoom(forRawBytes raw: Int) throws {
        // A record is never larger than the raw frame plus its header and chunk table.
        let frameNeed = Int64(raw) + Int64(SegmentFormat.recordHeaderLength) + (64 << 10)
        let need = frameNeed + store.indexRoomToKeep
        let floor = Int64(store.options.minimumFreeBytes ?? 0)
        if let estimate = estimatedAvailable, framesSinceFreeSpaceCheck < Self.freeSpaceCheckInterval,
            estimate >= need + floor + Self.freeSpaceSlack
        {
            estimatedAvailable = estimate - frameNeed
            framesSinceFreeSpaceCheck += 1
            return
        }
        framesSinceFreeSpaceCheck = 0
        estimatedAvailable = nil
        guard var available = store.availableSegmentBytes() else { return }
        defer { estimatedAvailable = available - frameNeed }
        if sealsSinceRoomSeal >= Self.roomSealInterval, store.options.diskBudget == nil,
            let floor = store.options.minimumFreeBytes
        {
            sealsSinceRoomSeal = 0
            let free = available - Int64(floor) - store.indexRoomToKeep
            // Free space alone that seals at the largest size needs no sum of the files.
            let writers = Int64(max(1, store.writerCount))
            let files = free / writers / 8 >= Int64(segmentMaxBytes) ? 0 : ((try? store.segmentFileBytes()) ?? 0)
            let room = files + free
            let seal = max(256 << 10, room / writers / 8)
            roomSealBytes = seal
            // Holds count the segments to come at the size they are sealed at.
            store.openSegmentLimits.withAnnotatedLock { $0[stream.name] = Int(min(Int64(segmentMaxBytes), seal)) }
        }
        // The index's reserve file, taken when something else filled the disk, is made again once there is room.
        store.ensureIndexReserve(available: available - frameNeed - floor)
        if let floor = store.options.minimumFreeBytes, available < need + Int64(floor) {
            do {
                _ = try store.enforceRetention(reserving: frameNeed)
                lastRetentionError = nil
            } catch {
                lastRetentionError = error
            }
            available = store.availableSegmentBytes() ?? available
            if available < need, let open = segment, open.frameCount > 0 {
                // Only the open segment is left to delete: seal it, and retention may take it.
                try sealCurrent(reserving: frameNeed)
                available = store.availableSegmentBytes() ?? available
            }
        }
        guard available < need else { return }
        // The error says how much is durable: everything written is made so first (a background sync may still be
        // running, or not yet started for the newest frames).
        _ = try syncUntranslated()
        let file =
            segment?.fileName ?? SegmentFormat.fileName(sequence: store.upcomingSequence, partial: true)
        var wanted = "a frame needs \(need >> 10) KiB with the index's reserve"
        if let floor = store.options.minimumFreeBytes { wanted += " above --min-free \(Int64(floor) >> 10) KiB" }
        let cause = FileSystemError(
            operation: "statvfs", path: store.segmentsDirectory, code: ENOSPC,
            detail: "\(max(0, available) >> 10) KiB free, \(wanted)")
        throw SegmentStoreError.diskFull(
            file: file, durableFrames: segment?.durableCount ?? 0,
            durablePTS: segment?.lastDurablePTS ?? lastDurablePTS,
            cause: cause)
    }

    /// Collects the open segment's automatic sync once it has finished (`waiting`: once it finishes): its frames
    /// are durable and get their index rows; a failed one fails the segment like a failed write.
    private func collectSync(waiting: Bool) throws {
        guard let open = segment, let outcome = open.finishSync(waiting: waiting) else { return }
        switch outcome {
        case .success:
            lastDurablePTS = open.lastDurablePTS ?? lastDurablePTS
            try flushRows()
        case .failure(let error):
            try fail(error, syncFailed: true)
        }
    }

    private func flushRows() throws {
        guard let open = segment, !pendingRows.isEmpty else { return }
        let durable = open.durableCount - indexedCount
        guard durable > 0 else { return }
        try indexPending(open, count: durable)
    }

    /// - Parameter closing: the writer's last seal: nothing it writes needs room any more, and retention after it
    ///   deletes only past the budget itself (``SegmentStore/enforceRetention(reserving:growthRoom:)``).
    private func sealCurrent(reserving bytes: Int64 = 0, closing: Bool = false) throws {
        try sync()
        guard let open = segment else { return }
        guard open.frameCount > 0 else {
            open.close()
            try? store.fileSystem.unlink(open.path)
            store.releaseSequence(open.header.sequence)
            segment = nil
            return
        }
        let sealedName: String
        do {
            sealedName = try open.seal()
        } catch {
            try fail(error)
        }
        durableBefore += open.frameCount
        segment = nil
        try store.index.sealSegment(
            id: try indexedSegmentID(open), fileName: sealedName, sealedWallNanoseconds: store.options.now())
        sealedFileNames.append(sealedName)
        sealsSinceRoomSeal += 1
        if store.options.hasRetention {
            do {
                _ = try store.enforceRetention(reserving: bytes, growthRoom: !closing)
                lastRetentionError = nil
            } catch {
                lastRetentionError = error
            }
        }
    }

    /// Handles a failed write or sync: keeps what is durable (syncing what was written when possible, but not after
    /// a failed sync, whose lost pages a second `fdatasync` may not report), seals the segment or leaves it a valid
    /// `.partial`, and throws the error that says so.
    private func fail(_ error: FileSystemError, syncFailed: Bool = false) throws -> Never {
        guard let open = segment else { throw SegmentStoreError.io(error) }
        let fileName = open.fileName
        var syncFailed = syncFailed
        if case .failure = open.finishSync(waiting: true) { syncFailed = true }
        if syncFailed || (try? open.sync()) == nil {
            if open.durableCount < open.frameCount {
                framesCutBack += open.frameCount - open.durableCount
                lastCutBack = (open.entries[open.durableCount].ptsNanoseconds, open.entries.last!.ptsNanoseconds)
            }
            open.rollBackToDurable()
        }
        lastDurablePTS = open.lastDurablePTS ?? lastDurablePTS
        let durableRows = open.durableCount - indexedCount
        if durableRows > 0 { try? indexPending(open, count: durableRows) }
        pendingRows.removeAll(keepingCapacity: true)
        durableBefore += open.durableCount
        segment = nil
        lastPTS = lastDurablePTS
        if open.frameCount == 0 {
            // Nothing in it and (rows come with the first durable frames) no index row: as if never made.
            open.close()
            try? store.fileSystem.unlink(open.path)
            if segmentID == nil { store.releaseSequence(open.header.sequence) }
        } else if let sealedName = try? open.seal() {
            // Without a row (the index failed too), recovery at the next open adds it from the file.
            if let segmentID {
                try? store.index.sealSegment(
                    id: segmentID, fileName: sealedName, sealedWallNanoseconds: store.options.now())
            }
        } else {
            open.close()
            unsealed.append((segmentID, open))
        }
        let durable = open.durableCount
        let pts = open.lastDurablePTS
        throw error.isDiskFull
            ? SegmentStoreError.diskFull(file: fileName, durableFrames: durable, durablePTS: pts, cause: error)
            : SegmentStoreError.writeFailed(file: fileName, durableFrames: durable, durablePTS: pts, cause: error)
    }

    /// Seals segments a failure left as `.partial`, now that writes work again.
    private func retryUnsealed() {
        unsealed.removeAll { id, writer in
            guard let reader = try? SegmentFileReader(path: writer.path, fileSystem: store.fileSystem),
                let scan = try? reader.scan(verifyPayload: false)
            else { return false }
            reader.close()
            guard
                let name = try? sealRecoveredPartial(
                    directory: store.segmentsDirectory, fileName: writer.fileName, header: writer.header, scan: scan,
                    fileSystem: store.fileSystem)
            else { return false }
            guard let id else { return true }
            return (try? store.index.sealSegment(id: id, fileName: name, sealedWallNanoseconds: store.options.now()))
                != nil
        }
    }
}

extension SegmentStore {
    /// The bytes a stream writer's encoder keeps for compressed output with frames of `layout` (its memory besides
    /// the frames themselves).
    ///
    /// - Parameter layout: the stream's frame layout.
    /// - Returns: bytes, whole pages.
    package func encoderOutputBytes(for layout: FrameLayout) -> Int {
        FrameEncoder.outputBytes(
            layout: layout, chunkSize: options.chunkSize, headerSpace: SegmentFormat.recordHeaderLength,
            policy: options.codecPolicy)
    }
}
