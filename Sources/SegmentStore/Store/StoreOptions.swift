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
    /// A segment is sealed once it holds this many frames: the open segment keeps an entry of every frame in memory
    /// (its footer's table, about 100 bytes with its pending index row), so a stream of thousands of tiny frames a
    /// second is sealed more often than ``segmentMaxDuration`` says rather than growing outside the memory budget
    /// (65 536 by default: about 6 MiB).
    public var segmentMaxFrames = 1 << 16
    /// Retention: the segment files may use at most this many bytes; the oldest sealed segments go first.
    public var diskBudget: Int?
    /// Retention by free space: the oldest sealed segments are deleted while the file system holding the segments
    /// has less than this many bytes free beyond what the next frame and the index need (nil: free space alone
    /// deletes nothing). A floor near the disk's size deletes every sealed segment; keep it well below.
    public var minimumFreeBytes: Int?
    /// Bytes of free space no segment write may use, so the index can still record gaps, drop counters and seals
    /// on a disk that segments filled: 4 MiB. A store open for recording also holds this much in
    /// `DIR/index.reserve`, which the index takes when something else filled the disk.
    public static let indexReserveBytes: Int64 = 4 << 20
    /// Whether retention runs at all: a disk budget, a free-space floor or a maximum age is set.
    package var hasRetention: Bool { diskBudget != nil || minimumFreeBytes != nil || maxAgeNanoseconds != nil }
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
    /// The chunk size segment files are written with unless told otherwise: 128 KiB. Smaller chunks share a frame
    /// out to the workers more evenly (at 256 KiB a 720p frame was six chunks for two workers), and with the prefix
    /// dictionary they compress as well; at 64 KiB deltas, which have no dictionary, lose too much.
    public static let defaultChunkSize = 128 * 1024

    /// Chunk sizes earlier versions wrote by default, which a damaged header is tried with (256 KiB).
    package static let earlierDefaultChunkSizes = [256 * 1024]

    /// The largest piece a frame plane is cut into for compression.
    public var chunkSize: Int
    /// Which codecs may be used; `.automatic` picks the smallest per chunk.
    public var codecPolicy: CodecPolicy
    /// Every system call on files goes through this.
    public var fileSystem: any FileSystem
    /// The wall clock, Unix epoch nanoseconds: when segments are created and sealed, and what ``maxAge`` is
    /// measured against. Tests pass a clock they advance themselves.
    public var now: @Sendable () -> Int64
    /// Called by the encoder before it compresses a chunk, on the compressing thread: tests hold compression back
    /// with it to make the writer fall behind (nil: nothing is called).
    package var beforeCompressingChunk: (@Sendable () -> Void)?

    /// Makes options; every argument has a default.
    ///
    /// - Parameters:
    ///   - keyInterval: a key frame at least every this many frames; at least 1.
    ///   - workerCount: threads compressing each frame; at least 1.
    ///   - segmentMaxDuration: the pts a segment spans before it is sealed (60 s); positive.
    ///   - segmentMaxBytes: the size a segment file reaches before it is sealed; positive.
    ///   - diskBudget: retention by size, bytes (nil: no limit).
    ///   - minimumFreeBytes: retention by free space, bytes kept free on the file system (nil: none).
    ///   - maxAge: retention by age, by ``now`` (nil: no limit).
    ///   - syncInterval: the pts between two syncs of a writer (1 s).
    ///   - chunkSize: the largest piece a plane is compressed in.
    ///   - codecPolicy: which codecs may be used.
    ///   - fileSystem: the file-system seam.
    ///   - now: the wall clock, Unix epoch nanoseconds.
    public init(
        keyInterval: Int = 30, workerCount: Int = System.onlineProcessorCount,
        segmentMaxDuration: Duration = .seconds(60), segmentMaxBytes: Int = 512 << 20, diskBudget: Int? = nil,
        minimumFreeBytes: Int? = nil, maxAge: Duration? = nil, syncInterval: Duration = .seconds(1),
        chunkSize: Int = StoreOptions.defaultChunkSize,
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
        self.minimumFreeBytes = minimumFreeBytes
        self.maxAgeNanoseconds = maxAge?.nanosecondsClamped
        self.syncIntervalNanoseconds = syncInterval.nanosecondsClamped
        self.chunkSize = chunkSize
        self.codecPolicy = codecPolicy
        self.fileSystem = fileSystem
        self.now = now
    }

    /// The size a stream's segments are sealed at: with a ``diskBudget``, an eighth of the stream's share of it (at
    /// least 256 KiB, never above ``segmentMaxBytes``), so retention, which deletes whole sealed segments oldest
    /// first, deletes in steps that leave every stream its newest history (a minute's segment can outgrow a small
    /// budget, and at a stop every stream's last segment is sealed at once); ``segmentMaxBytes`` without one.
    ///
    /// - Parameter share: the stream's part of the bytes the streams recorded together write (0...1; 1 alone),
    ///   e.g. its part of their raw bytes per second, so that each stream's segments span about as long.
    public func segmentMaxBytes(forShareOfBudget share: Double) -> Int {
        guard let diskBudget else { return segmentMaxBytes }
        let bytes = Double(diskBudget) * min(1, max(0, share)) / 8
        return min(segmentMaxBytes, max(256 << 10, Int(bytes)))
    }
}
