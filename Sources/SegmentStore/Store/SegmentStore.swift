import RewindCore
import RewindSQLite
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The durable frame store of one directory: segment files in `DIR/segments/` and their index in
/// `DIR/index.sqlite`.
///
/// Writers (``makeWriter(streamName:stream:)``) append frames; readers (``frames(streamName:in:_:)``) stream them
/// back in pts order from the nearest key frame, verifying every checksum. The files are the truth: the index is
/// rebuilt from them when missing, and nothing is ever deleted because the index is missing or empty.
///
/// A store opened with ``open(directory:options:)`` holds an exclusive `flock` on `DIR` so two recorders cannot
/// share it; ``openReadOnly(directory:fileSystem:)`` takes no lock and may run beside a recorder in another process.
public final class SegmentStore: Sendable {
    /// The store's directory (`DIR`), as given to open.
    public let directory: String
    /// Where the segment files are: `DIR/segments`.
    public let segmentsDirectory: String
    /// The SQLite index. Package-only: users read it through the store's methods.
    package let index: StoreIndex
    /// How the store writes: the options it was opened with (for a read-only store, the defaults with one worker
    /// and the file system it was given).
    public let options: StoreOptions
    /// Whether the store was opened with ``openReadOnly(directory:fileSystem:)``: no lock and no recovery at open;
    /// writers, retention and repairs are refused with ``SegmentStoreError/readOnly(_:)``.
    public let isReadOnly: Bool
    /// What recovery found and did when the store was opened (empty for read-only stores).
    public var recovery: VerifyReport { recoveryReport.withAnnotatedLock { $0 } }
    private let recoveryReport = Mutex(VerifyReport())
    private let lockFD: Int32
    private let nextSequence: Mutex<UInt64>
    private let activeStreams = Mutex<Set<String>>([])
    /// Every stream a writer of this store has written since it opened (kept after the writer closes): retention
    /// protects their newest sealed segments, not those of streams of earlier runs.
    let streamsWritten = Mutex<Set<String>>([])
    /// The size each writer given one seals its segments at, by stream name: with a ``StoreOptions/diskBudget``,
    /// retention keeps room for open segments to grow to it (``openSegmentGrowth(rows:sizes:streams:)``).
    let openSegmentLimits = Mutex<[String: Int]>([:])
    private let decodedFrames = Atomic<Int>(0)
    /// Retention gap rows recorded or widened since the store opened, by stream name (``retentionGapChanges``).
    let retentionGapChangeCounts = Mutex<[String: Int]>([:])

    /// How many times retention recorded or widened a `retention` gap row of `stream` since the store opened: a
    /// watcher that sees it change reads the rows again.
    public func retentionGapChanges(of stream: String) -> Int {
        retentionGapChangeCounts.withAnnotatedLock { $0[stream] ?? 0 }
    }

    /// Set when a writer found `segments/` deleted and made it again (``segmentsDirectoryWasMadeAgain``).
    let madeSegmentsDirectoryAgain = Atomic<Bool>(false)

    /// Whether `segments/` was deleted under this store while it recorded, and made again for the segments after:
    /// the files it held before are gone, though the index still names them.
    public var segmentsDirectoryWasMadeAgain: Bool { madeSegmentsDirectoryAgain.load(ordering: .relaxed) }
    /// Ranges live processes keep from retention (``addHold(streamName:range:)``).
    let liveHolds = Mutex(HoldTable())
    /// Held while the index's reserve file is made, topped up or shrunk (``ensureIndexReserve(available:)``).
    let indexReserveLock = Mutex(())
    /// Bytes the index's reserve file holds (``indexRoomToKeep``).
    let indexReserveHeld = Atomic<Int64>(0)
    /// The markers' journal this store appends to (`DIR/markers.journal`), held while a marker is added or removed.
    let markerJournal = Mutex(JournalFile())
    /// The losses' journal this store appends to (`DIR/losses.journal`) as its index's gaps and drop counters change.
    let lossJournal = Mutex(LossJournalState())

    /// Frames decoded by readers of this store so far, including those decoded only to reach a range's start
    /// from its key frame: the measure of random-access work.
    public var framesDecoded: Int { decodedFrames.load(ordering: .relaxed) }

    func countDecodedFrame() { decodedFrames.add(1, ordering: .relaxed) }

    var fileSystem: any FileSystem { options.fileSystem }

    private init(directory: String, index: StoreIndex, options: StoreOptions, readOnly: Bool, lockFD: Int32) {
        self.directory = directory
        self.segmentsDirectory = directory + "/segments"
        self.index = index
        self.options = options
        self.isReadOnly = readOnly
        self.lockFD = lockFD
        self.nextSequence = Mutex(1)
    }

    deinit {
        if lockFD >= 0 { options.fileSystem.close(lockFD) }
        for fd in [markerJournal.withAnnotatedLock { $0.fd }, lossJournal.withAnnotatedLock { $0.file.fd }]
        where fd >= 0 {
            options.fileSystem.close(fd)
        }
    }

    /// Opens (creating if needed) the store in `directory` for recording, and recovers it.
    ///
    /// Recovery is non-destructive: torn `.partial` files are cut at their last valid record and sealed, index rows
    /// missing for frames in files are added (a missing or empty index is rebuilt from the files), half-done
    /// deletes are finished, and index rows whose files are gone are reported in ``recovery``.
    ///
    /// - Throws: ``SegmentStoreError/storeLocked(directory:)`` when another process records here;
    ///   ``SegmentStoreError/io(_:)``; the index's errors as ``SegmentStoreError`` (`damagedIndex`, `index` with
    ///   `locked`, `schemaNewerThanThisBuild`, …).
    /// - Complexity: O(segments) plus a scan of every `.partial` file and of files the index does not know.
    public static func open(directory: String, options: StoreOptions = .init()) throws -> SegmentStore {
        return try SegmentStoreError.translatingIndexErrors {
            try openUntranslated(directory: directory, options: options)
        }
    }

    private static func openUntranslated(directory: String, options: StoreOptions = .init()) throws -> SegmentStore {
        let fs = options.fileSystem
        try wrapIO { () throws(FileSystemError) in
            // The owner's alone, as its socket and token are: the frames of a camera are nobody else's to read.
            try fs.makeDirectory(directory, mode: 0o700)
        }
        // A store this process may not write is refused now, not when its first frames are written: SQLite would
        // open a read-only index without a word.
        for path in [directory, directory + "/segments", directory + "/index.sqlite", directory + "/index.sqlite-wal"]
        where fs.fileExists(path) && access(path, W_OK) != 0 {
            throw SegmentStoreError.io(FileSystemError(operation: "open for writing", path: path, code: errno))
        }
        let lockFD = try wrapIO { () throws(FileSystemError) in
            try fs.open(directory, flags: O_RDONLY | O_DIRECTORY, mode: 0)
        }
        var storeOwnsLock = false
        do {
            // A store of this process that was just let go may still be held for a moment by a thread finishing
            // (its spill or encoder threads): the lock is tried for up to two seconds before it counts as taken.
            let lockDeadline = ContinuousClock.now + .seconds(2)
            while try !wrapIO({ () throws(FileSystemError) in
                try fs.flock(lockFD, operation: LOCK_EX | LOCK_NB, path: directory)
            }) {
                guard ContinuousClock.now < lockDeadline else {
                    throw SegmentStoreError.storeLocked(directory: directory)
                }
                System.sleep(for: .milliseconds(10))
            }
            let index = try openIndexMakingRoom(directory: directory, fileSystem: fs)
            // Made once the index opens: a store refused for its index (not a database, a newer schema) is left as
            // it was found.
            try wrapIO { () throws(FileSystemError) in try fs.makeDirectory(directory + "/segments") }
            let store = SegmentStore(
                directory: directory, index: index, options: options, readOnly: false, lockFD: lockFD)
            storeOwnsLock = true
            // The index may use the reserve's room when the disk is full; the store makes the file again later.
            index.database.onDiskFull { [weak store] in store?.releaseIndexReserve() ?? false }
            index.observeLosses { [weak store] change in store?.journalLoss(change) }
            store.ensureIndexReserve()
            let report = try store.reconcile(mode: .recover)
            store.recoveryReport.withAnnotatedLock { $0 = report }
            let highest = try store.highestSequence()
            store.nextSequence.withAnnotatedLock { $0 = highest + 1 }
            return store
        } catch {
            if !storeOwnsLock { fs.close(lockFD) }
            throw error
        }
    }

    /// The longest full path (in bytes, symbolic links resolved) a store's directory may have: SQLite opens a
    /// database only when its path and its journal's (`DIR/index.sqlite-journal`) fit in 512 bytes.
    public static let longestDirectoryPath = 512 - "/index.sqlite-journal".utf8.count

    /// The bytes the indexes of every store open in this process hold in memory (SQLite's page caches, prepared
    /// statements and schemas, for all its connections).
    public static var indexMemoryInUse: Int { SQLiteDatabase.memoryInUse }

    /// Whether a process holds the store open for recording (its lock on the directory), looked at without taking
    /// the lock for more than a moment.
    public static func isOpenForRecording(directory: String) -> Bool {
        let fd = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        // False when another process holds the lock exclusively; the shared lock, if taken, goes with the close.
        let taken = try? POSIXFileSystem().flock(fd, operation: LOCK_SH | LOCK_NB, path: directory)
        return taken == false
    }

    /// Whether `directory` holds any of a store's files besides its index: `segments/` or a journal. An index
    /// without them that no migration made is another program's database, not a damaged store's.
    public static func holdsStoreFiles(directory: String) -> Bool {
        ["segments", MarkerJournal.fileName, LossJournal.fileName].contains {
            access(directory + "/" + $0, F_OK) == 0
        }
    }

    /// Opens an existing store for reading while another process may be recording into it.
    ///
    /// - Throws: index errors when `DIR/index.sqlite` is missing or unreadable.
    public static func openReadOnly(directory: String, fileSystem: any FileSystem = POSIXFileSystem()) throws
        -> SegmentStore
    {
        return try SegmentStoreError.translatingIndexErrors {
            try openReadOnlyUntranslated(directory: directory, fileSystem: fileSystem)
        }
    }

    private static func openReadOnlyUntranslated(directory: String, fileSystem: any FileSystem = POSIXFileSystem())
        throws
        -> SegmentStore
    {
        // A -wal the read finds no whole schema in (the reader may remove it as it closes): said before the open.
        let holdsWAL = SegmentStoreError.hasWAL(directory + "/index.sqlite")
        let index: StoreIndex
        do {
            index = try openIndex(directory: directory, readOnly: true)
        } catch SegmentStoreError.index(let path, .schemaOutdated(0, _), _) where holdsWAL {
            throw SegmentStoreError.index(path: path, problem: .unfinished, detail: "")
        }
        return SegmentStore(
            directory: directory, index: index, options: StoreOptions(workerCount: 1, fileSystem: fileSystem),
            readOnly: true, lockFD: -1)
    }

    /// Opens `DIR/index.sqlite`; a file that is not a database, or a corrupt one, is
    /// ``SegmentStoreError/damagedIndex(path:isDatabase:detail:)``.
    private static func openIndex(directory: String, readOnly: Bool) throws -> StoreIndex {
        try SegmentStoreError.translatingIndexErrors {
            try StoreIndex(path: directory + "/index.sqlite", readOnly: readOnly)
        }
    }

    static func wrapIO<T>(_ body: () throws(FileSystemError) -> T) throws(SegmentStoreError) -> T {
        do { return try body() } catch { throw .io(error) }
    }

    /// The highest segment sequence number among the files (those moved aside as unreadable too), the index rows and
    /// the segments the index had before retention deleted them (0 when there are none).
    func highestSequence() throws -> UInt64 {
        var highest: UInt64 = try index.highestSegmentSequence() ?? 0
        for name in try Self.wrapIO({ () throws(FileSystemError) in
            try fileSystem.contentsOfDirectory(segmentsDirectory)
        }) {
            if let sequence = SegmentFormat.sequence(ofFileName: name) ?? SegmentFormat.sequence(ofMovedAsideName: name)
            {
                highest = max(highest, sequence)
            }
        }
        for row in try index.segments() {
            if let sequence = SegmentFormat.sequence(ofFileName: row.fileName) { highest = max(highest, sequence) }
        }
        return highest
    }

    func allocateSequence() -> UInt64 {
        nextSequence.withAnnotatedLock { next in
            defer { next += 1 }
            return next
        }
    }

    /// Gives back a number from ``allocateSequence()`` whose file was never made (or removed with nothing in it and
    /// no index row), so a failed attempt does not burn it; a number allocated after it stays burned.
    func releaseSequence(_ sequence: UInt64) {
        nextSequence.withAnnotatedLock { next in
            if next == sequence + 1 { next = sequence }
        }
    }

    /// The number the next segment would get, without taking it.
    var upcomingSequence: UInt64 { nextSequence.withAnnotatedLock { $0 } }

    /// Makes the writer of one stream. One writer per stream at a time; it is used by one thread.
    ///
    /// - Parameters:
    ///   - streamName: the stream's name (created in the index if new).
    ///   - stream: what its frames are; must match the stored description of an existing stream.
    ///   - other: a writer whose encoder worker threads this one uses too (one thread then writes both, one frame
    ///     at a time: a recorder's spill thread writing several streams); nil for workers of its own.
    ///   - segmentMaxBytes: the size its segments are sealed at (``StoreOptions/segmentMaxBytes(forShareOfBudget:)``);
    ///     nil for ``StoreOptions/segmentMaxBytes``. Given, with a ``StoreOptions/diskBudget``, retention keeps room
    ///     for the open segment to grow to it, so the files stay within the budget between seals too.
    /// - Throws: ``SegmentStoreError/readOnly(_:)``;
    ///   ``StoreIndexError/streamDescriptionMismatch(name:stored:requested:)``.
    public func makeWriter(
        streamName: String, stream: StreamDescription, sharingWorkersWith other: StreamWriter? = nil,
        segmentMaxBytes: Int? = nil
    ) throws -> StreamWriter {
        return try SegmentStoreError.translatingIndexErrors {
            guard !isReadOnly else { throw SegmentStoreError.readOnly("write stream '\(streamName)'") }
            let row = try index.stream(named: streamName, description: stream)
            let inserted = activeStreams.withAnnotatedLock { $0.insert(streamName).inserted }
            precondition(inserted, "stream '\(streamName)' already has a writer")
            streamsWritten.withAnnotatedLock { _ = $0.insert(streamName) }
            if let segmentMaxBytes { openSegmentLimits.withAnnotatedLock { $0[streamName] = segmentMaxBytes } }
            return StreamWriter(
                store: self, stream: row, sharingWorkersWith: other,
                segmentMaxBytes: segmentMaxBytes ?? options.segmentMaxBytes)
        }
    }

    /// Makes the writer of one stream like ``makeWriter(streamName:stream:)``, or returns nil when the stream
    /// already has one.
    func makeWriterIfIdle(streamName: String, stream: StreamDescription) throws -> StreamWriter? {
        guard !isReadOnly else { throw SegmentStoreError.readOnly("write stream '\(streamName)'") }
        let row = try index.stream(named: streamName, description: stream)
        guard activeStreams.withAnnotatedLock({ $0.insert(streamName).inserted }) else { return nil }
        streamsWritten.withAnnotatedLock { _ = $0.insert(streamName) }
        return StreamWriter(store: self, stream: row, segmentMaxBytes: options.segmentMaxBytes)
    }

    /// How many streams have a writer now.
    var writerCount: Int { activeStreams.withAnnotatedLock { $0.count } }

    /// The size the segments of `streamName` are sealed at while a writer writes it (``openSegmentLimits``, or the
    /// store's ``StoreOptions/segmentMaxBytes`` for a writer made without a size of its own); nil when none does.
    package func segmentSealBytes(ofStream streamName: String) -> Int? {
        if let limit = openSegmentLimits.withAnnotatedLock({ $0[streamName] }) { return limit }
        return activeStreams.withAnnotatedLock { $0.contains(streamName) } ? options.segmentMaxBytes : nil
    }

    /// Forgets the writer of `streamName`. When it was the last one, the WAL's pages are copied into the index
    /// file (best effort, without waiting for readers): a process ends without closing its connections, which
    /// would leave the last stretch of a recording in `index.sqlite-wal` alone, so that a copy of `index.sqlite`
    /// (the one file a user might take) would miss it.
    func writerClosed(streamName: String) {
        openSegmentLimits.withAnnotatedLock { $0[streamName] = nil }
        let idle = activeStreams.withAnnotatedLock { active in
            active.remove(streamName)
            return active.isEmpty
        }
        if idle {
            try? index.checkpoint()
            syncLossJournal()
        }
    }

    /// The streams in the store, by id (the order they were created in).
    ///
    /// - Throws: ``StoreIndexError/invalidStreamRow(id:detail:)``; index errors.
    public func streams() throws -> [StreamRow] { try SegmentStoreError.translatingIndexErrors { try index.streams() } }

    /// Totals over the live segments of the whole store, or of one stream.
    ///
    /// - Parameter streamName: the stream, or nil for the whole store.
    /// - Throws: ``SegmentStoreError/unknownStream(_:)``; index errors.
    /// - Complexity: O(segments).
    public func summary(streamName: String? = nil) throws -> IndexSummary {
        try SegmentStoreError.translatingIndexErrors {
            try index.summary(streamID: streamName.map { try streamID(named: $0) })
        }
    }

    /// The segment files of one stream or all (`deleting` ones included, with their state), by first pts (segments
    /// without frames first), then id.
    ///
    /// - Parameter streamName: the stream, or nil for every stream.
    /// - Throws: ``SegmentStoreError/unknownStream(_:)``; index errors.
    /// - Complexity: O(segments).
    public func segments(streamName: String? = nil) throws -> [SegmentRow] {
        try SegmentStoreError.translatingIndexErrors {
            try index.segments(streamID: streamName.map { try streamID(named: $0) })
        }
    }

    /// Recorded gaps of one stream (by start) or all (by stream, then start).
    ///
    /// - Parameter streamName: the stream, or nil for every stream.
    /// - Throws: ``SegmentStoreError/unknownStream(_:)``; index errors.
    /// - Complexity: O(gaps).
    public func gaps(streamName: String? = nil) throws -> [GapRow] {
        try SegmentStoreError.translatingIndexErrors {
            try index.gaps(streamID: streamName.map { try streamID(named: $0) })
        }
    }

    /// Dropped-frame counts by reason, for one stream or summed over all; reasons this build does not know are
    /// summed under ``LossReason/unrecognized``.
    ///
    /// - Parameter streamName: the stream, or nil for every stream.
    /// - Throws: ``SegmentStoreError/unknownStream(_:)``; index errors.
    public func drops(streamName: String? = nil) throws -> [LossReason: Int] {
        try SegmentStoreError.translatingIndexErrors {
            try index.drops(streamID: streamName.map { try streamID(named: $0) })
        }
    }

    func streamID(named name: String) throws -> Int64 {
        guard let row = try index.streams().first(where: { $0.name == name }) else {
            throw SegmentStoreError.unknownStream(name)
        }
        return row.id
    }
}
