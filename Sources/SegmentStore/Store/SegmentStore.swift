import RewindCore
import RewindSQLite
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// How a store writes: compression, segment size, durability cadence, retention, and the file-system seam.
public struct StoreOptions: Sendable {
    /// A key frame (decodable alone) at least every this many frames; random access decodes at most this many.
    public var keyInterval: Int
    /// Threads compressing each frame (including the spill thread itself); all cores by default.
    public var workerCount: Int
    /// A segment is sealed once its frames span this much pts (whole nanoseconds); must be positive.
    public var segmentMaxDuration: Duration {
        get { .nanoseconds(segmentMaxNanoseconds) }
        set { segmentMaxNanoseconds = newValue.nanosecondsClamped }
    }
    /// ``segmentMaxDuration`` in nanoseconds, converted once when it is set; writers compare pts against it.
    package private(set) var segmentMaxNanoseconds: Int64
    /// A segment is sealed once its file reaches this many bytes.
    public var segmentMaxBytes: Int
    /// Retention: the segment files may use at most this many bytes; the oldest sealed segments go first.
    public var diskBudget: Int?
    /// Retention: sealed segments older than this (by ``now``, whole nanoseconds) are deleted.
    public var maxAge: Duration? {
        get { maxAgeNanoseconds.map { .nanoseconds($0) } }
        set { maxAgeNanoseconds = newValue?.nanosecondsClamped }
    }
    /// ``maxAge`` in nanoseconds, converted once when it is set.
    package private(set) var maxAgeNanoseconds: Int64?
    /// A writer `fdatasync`s (and adds its index rows) at least every this much pts (whole nanoseconds).
    public var syncInterval: Duration {
        get { .nanoseconds(syncIntervalNanoseconds) }
        set { syncIntervalNanoseconds = newValue.nanosecondsClamped }
    }
    /// ``syncInterval`` in nanoseconds, converted once when it is set; writers compare pts against it.
    package private(set) var syncIntervalNanoseconds: Int64
    /// The chunk size segment files are written with unless told otherwise: 256 KiB.
    public static let defaultChunkSize = 256 * 1024

    /// The largest piece a frame plane is cut into for compression.
    public var chunkSize: Int
    /// Which codecs may be used; `.automatic` picks the smallest per chunk.
    public var codecPolicy: CodecPolicy
    /// Every system call on files goes through this.
    public var fileSystem: any FileSystem
    /// The wall clock, Unix epoch nanoseconds: when segments are created and sealed, and what ``maxAge`` is
    /// measured against. Tests pass a clock they advance themselves.
    public var now: @Sendable () -> Int64

    /// Makes options; every argument has a default.
    ///
    /// - Parameters:
    ///   - keyInterval: a key frame at least every this many frames; at least 1.
    ///   - workerCount: threads compressing each frame; at least 1.
    ///   - segmentMaxDuration: the pts a segment spans before it is sealed (60 s); positive.
    ///   - segmentMaxBytes: the size a segment file reaches before it is sealed; positive.
    ///   - diskBudget: retention by size, bytes (nil: no limit).
    ///   - maxAge: retention by age, by ``now`` (nil: no limit).
    ///   - syncInterval: the pts between two syncs of a writer (1 s).
    ///   - chunkSize: the largest piece a plane is compressed in.
    ///   - codecPolicy: which codecs may be used.
    ///   - fileSystem: the file-system seam.
    ///   - now: the wall clock, Unix epoch nanoseconds.
    public init(
        keyInterval: Int = 30, workerCount: Int = System.onlineProcessorCount,
        segmentMaxDuration: Duration = .seconds(60), segmentMaxBytes: Int = 512 << 20, diskBudget: Int? = nil,
        maxAge: Duration? = nil, syncInterval: Duration = .seconds(1), chunkSize: Int = StoreOptions.defaultChunkSize,
        codecPolicy: CodecPolicy = .automatic, fileSystem: any FileSystem = POSIXFileSystem(),
        now: @escaping @Sendable () -> Int64 = System.wallClockNanoseconds
    ) {
        precondition(keyInterval >= 1, "key interval must be at least 1")
        precondition(workerCount >= 1, "worker count must be at least 1")
        precondition(
            segmentMaxDuration.nanosecondsClamped > 0 && segmentMaxBytes > 0, "segment limits must be positive")
        self.keyInterval = keyInterval
        self.workerCount = workerCount
        self.segmentMaxNanoseconds = segmentMaxDuration.nanosecondsClamped
        self.segmentMaxBytes = segmentMaxBytes
        self.diskBudget = diskBudget
        self.maxAgeNanoseconds = maxAge?.nanosecondsClamped
        self.syncIntervalNanoseconds = syncInterval.nanosecondsClamped
        self.chunkSize = chunkSize
        self.codecPolicy = codecPolicy
        self.fileSystem = fileSystem
        self.now = now
    }
}

/// One damaged record (or file) found by a scan.
public struct SegmentDamage: Sendable, Hashable, CustomStringConvertible {
    /// The segment file name.
    public var segment: String
    /// The frame number within the segment (-1 for the file header or footer).
    public var frame: Int
    /// The byte offset of the damaged record.
    public var offset: Int64
    /// What is wrong with the record, in words (the description of the error the scan found).
    public var message: String

    /// The ``message``.
    public var description: String { message }
}

/// What a verify (or the recovery run at open) found and did.
public struct VerifyReport: Sendable {
    /// No damage and nothing out of step between files and index.
    public var clean: Bool { damaged.isEmpty && problems.isEmpty }
    /// Segment files looked at.
    public var segments = 0
    /// Valid frames found in them.
    public var frames = 0
    /// Damaged records, precisely located.
    public var damaged: [SegmentDamage] = []
    /// Other findings: index rows without files, files without rows, unsealed segments.
    public var problems: [String] = []
    /// What was fixed.
    public var repaired: [String] = []
    /// Damaged segment files with frames after the damage: what a repair lost and salvaged (or, in a dry run,
    /// would lose and salvage).
    public var salvage: [SegmentSalvage] = []
}

/// The frames after the damage in one segment file: which are lost, and which were salvaged into new segments.
///
/// Frames after a damaged record are usable from the next valid key frame on (a delta frame needs its
/// predecessor); a repair decodes them and writes them into new segments before it cuts the damaged file.
public struct SegmentSalvage: Sendable, Hashable {
    /// Consecutive frames of the file that are lost: damaged, or delta frames whose predecessor is.
    public struct LostFrames: Sendable, Hashable {
        /// The first lost frame's number in the segment.
        public var firstFrame: Int
        /// How many consecutive frames are lost, at least 1.
        public var count: Int
        /// The first lost frame's pts, nanoseconds on the stream's clock; nil when neither the footer nor its record
        /// still says it.
        public var firstPTS: Int64?
        /// The last lost frame's pts, nanoseconds on the stream's clock; nil when neither the footer nor its record
        /// still says it.
        public var lastPTS: Int64?
        /// The pts of the kept frame just before the loss; nil when the loss starts the file.
        public var previousPTS: Int64?
        /// The pts of the kept frame just after the loss; nil when the loss ends the file.
        public var nextPTS: Int64?

        /// The last lost frame's number in the segment.
        public var lastFrame: Int { firstFrame + count - 1 }
    }

    /// The damaged segment file.
    public var segment: String
    /// Frames before the first damage, kept in the file.
    public var keptFrames: Int
    /// The lost stretches, in file order.
    public var lost: [LostFrames] = []
    /// Frames after the damage that decode (each from a key frame on, every check passed).
    public var usableFrames = 0
    /// Of those, frames written into new segments (none in a dry run).
    public var salvagedFrames = 0
    /// Of those, frames already stored in another segment (by a repair that stopped before the cut).
    public var alreadyStoredFrames = 0
    /// The new segments holding the salvaged frames.
    public var salvagedInto: [String] = []

    /// Frames lost in all the stretches together.
    ///
    /// - Complexity: O(stretches).
    public var lostFrameCount: Int { lost.reduce(0) { $0 + $1.count } }
}

/// What one retention pass did.
public struct RetentionReport: Sendable {
    /// Segment files deleted, oldest first.
    public var deleted: [String] = []
    /// Bytes of the deleted segment files (their sizes when the pass began).
    public var freedBytes: Int64 = 0
    /// Segments due for deletion but being read (tried again next pass).
    public var skippedInUse: [String] = []
    /// Bytes of segment files left.
    public var remainingBytes: Int64 = 0
}

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
    public var recovery: VerifyReport { recoveryReport.withLock { $0 } }
    private let recoveryReport = Mutex(VerifyReport())
    private let lockFD: Int32
    private let nextSequence: Mutex<UInt64>
    private let activeStreams = Mutex<Set<String>>([])
    private let decodedFrames = Atomic<Int>(0)

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
            try fs.makeDirectory(directory)
            try fs.makeDirectory(directory + "/segments")
        }
        let lockFD = try wrapIO { () throws(FileSystemError) in
            try fs.open(directory, flags: O_RDONLY | O_DIRECTORY, mode: 0)
        }
        var storeOwnsLock = false
        do {
            guard
                try wrapIO({ () throws(FileSystemError) in
                    try fs.flock(lockFD, operation: LOCK_EX | LOCK_NB, path: directory)
                })
            else { throw SegmentStoreError.storeLocked(directory: directory) }
            let index = try openIndex(directory: directory, readOnly: false)
            let store = SegmentStore(
                directory: directory, index: index, options: options, readOnly: false, lockFD: lockFD)
            storeOwnsLock = true
            let report = try store.reconcile(mode: .recover)
            store.recoveryReport.withLock { $0 = report }
            let highest = try store.highestSequence()
            store.nextSequence.withLock { $0 = highest + 1 }
            return store
        } catch {
            if !storeOwnsLock { fs.close(lockFD) }
            throw error
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
        let index = try openIndex(directory: directory, readOnly: true)
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

    /// The highest segment sequence number among the files and the index rows (0 when there are none).
    func highestSequence() throws -> UInt64 {
        var highest: UInt64 = 0
        for name in try Self.wrapIO({ () throws(FileSystemError) in
            try fileSystem.contentsOfDirectory(segmentsDirectory)
        }) {
            if let sequence = SegmentFormat.sequence(ofFileName: name) { highest = max(highest, sequence) }
        }
        for row in try index.segments() {
            if let sequence = SegmentFormat.sequence(ofFileName: row.fileName) { highest = max(highest, sequence) }
        }
        return highest
    }

    func allocateSequence() -> UInt64 {
        nextSequence.withLock { next in
            defer { next += 1 }
            return next
        }
    }

    /// Makes the writer of one stream. One writer per stream at a time; it is used by one thread.
    ///
    /// - Parameters:
    ///   - streamName: the stream's name (created in the index if new).
    ///   - stream: what its frames are; must match the stored description of an existing stream.
    /// - Throws: ``SegmentStoreError/readOnly(_:)``;
    ///   ``StoreIndexError/streamDescriptionMismatch(name:stored:requested:)``.
    public func makeWriter(streamName: String, stream: StreamDescription) throws -> StreamWriter {
        return try SegmentStoreError.translatingIndexErrors {
            try makeWriterUntranslated(streamName: streamName, stream: stream)
        }
    }

    private func makeWriterUntranslated(streamName: String, stream: StreamDescription) throws -> StreamWriter {
        guard !isReadOnly else { throw SegmentStoreError.readOnly("write stream '\(streamName)'") }
        let row = try index.stream(named: streamName, description: stream)
        let inserted = activeStreams.withLock { $0.insert(streamName).inserted }
        precondition(inserted, "stream '\(streamName)' already has a writer")
        return StreamWriter(store: self, stream: row)
    }

    /// Makes the writer of one stream like ``makeWriter(streamName:stream:)``, or returns nil when the stream
    /// already has one.
    func makeWriterIfIdle(streamName: String, stream: StreamDescription) throws -> StreamWriter? {
        guard !isReadOnly else { throw SegmentStoreError.readOnly("write stream '\(streamName)'") }
        let row = try index.stream(named: streamName, description: stream)
        guard activeStreams.withLock({ $0.insert(streamName).inserted }) else { return nil }
        return StreamWriter(store: self, stream: row)
    }

    func writerClosed(streamName: String) {
        _ = activeStreams.withLock { $0.remove(streamName) }
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
