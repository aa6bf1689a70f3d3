import RewindCore
import RewindSQLite
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

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
    /// Files a repair came back to after the others (their frames' pts were held by rows of files not yet
    /// rebuilt): see ``SegmentStore`` reconciliation.
    var revisit: [String] = []
    /// Rows a repair removed from files that another file had replaced: the frames' pts, counted lost at the end of
    /// the pass when no file holds them.
    var displaced: [(fileName: String, streamID: Int64, pts: [Int64])] = []
    /// The segments the index had at the start of the pass, by when their files were created (Unix epoch
    /// nanoseconds, from their headers): a file under a known name created at none of them is not the store's, and
    /// one created at another's time is that segment's file (files swapped or renamed).
    var indexedCreations: [Int64: String] = [:]
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
        /// Whether these frames were counted lost before this check: their pts are no longer known, and a `damaged`
        /// gap already covers the time after ``previousPTS`` (recorded when the store was opened and its index
        /// let go of the frames the cut-short file no longer holds, with their number). ``count`` is then only
        /// what the file still shows (the damaged record).
        public var countedBefore = false

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
    /// Why a repair's salvage stopped part way (a full disk, say); nil when it did not. The frames it stored before
    /// (``salvagedFrames``, in ``salvagedInto``) stay, the damaged file is left whole, ``lost`` is not worked out,
    /// and the next repair salvages the rest.
    public var failure: String?

    /// Frames lost in all the stretches together, except those counted lost before this check
    /// (``LostFrames/countedBefore``).
    ///
    /// - Complexity: O(stretches).
    public var lostFrameCount: Int { lost.reduce(0) { $0 + ($1.countedBefore ? 0 : $1.count) } }
}
