import RewindCore
import RewindSQLite
import RewindSystem

/// One stored frame as the index knows it: where its bytes are and what they are.
///
/// Times are integer nanoseconds. `fileOffset` is the frame record's byte offset in its segment file.
public struct FrameRow: Sendable, Hashable {
    /// `flags` bit 0: the frame is a key frame (decodable without any other frame).
    public static let keyFrameFlag: UInt8 = 1

    /// Presentation time, nanoseconds on the stream's clock. Unique per stream.
    public var ptsNanoseconds: Int64
    /// Wall-clock capture time, Unix epoch nanoseconds.
    public var wallNanoseconds: Int64
    /// The segment whose file holds the frame.
    public var segmentID: Int64
    /// Byte offset of the frame's record in the segment file.
    public var fileOffset: Int64
    /// Bytes stored in the segment (after compression).
    public var storedLength: Int
    /// Bytes of the raw frame.
    public var rawLength: Int
    /// Bit 0: key frame (``keyFrameFlag``). Other bits belong to the segment format.
    public var flags: UInt8
    /// The frame codec id written in the segment file.
    public var codec: UInt8

    /// Describes a stored frame; each argument sets the property of the same name.
    ///
    /// - Parameters:
    ///   - ptsNanoseconds: presentation time, nanoseconds on the stream's clock.
    ///   - wallNanoseconds: capture time, Unix epoch nanoseconds.
    ///   - segmentID: the id of the ``SegmentRow`` whose file holds the frame.
    ///   - fileOffset: byte offset of the frame's record in that file.
    ///   - storedLength: bytes of the record's payload as stored (after compression).
    ///   - rawLength: bytes of the raw frame.
    ///   - flags: bit 0 set for a key frame (``keyFrameFlag``).
    ///   - codec: the ``FrameCodec`` raw value of the record.
    public init(
        ptsNanoseconds: Int64, wallNanoseconds: Int64, segmentID: Int64, fileOffset: Int64, storedLength: Int,
        rawLength: Int, flags: UInt8, codec: UInt8
    ) {
        self.ptsNanoseconds = ptsNanoseconds
        self.wallNanoseconds = wallNanoseconds
        self.segmentID = segmentID
        self.fileOffset = fileOffset
        self.storedLength = storedLength
        self.rawLength = rawLength
        self.flags = flags
        self.codec = codec
    }

    /// Whether the frame decodes alone (`flags` bit 0).
    public var isKeyFrame: Bool { flags & Self.keyFrameFlag != 0 }
}

/// One segment file as the index knows it.
public struct SegmentRow: Sendable, Hashable {
    /// Where a segment is in its life: written to (`open`, file `*.partial`), final and durable (`sealed`), or
    /// being removed by retention (`deleting`, its frame rows already gone).
    public enum State: String, Sendable, Hashable, CaseIterable {
        /// Being written: frames are appended to its `*.partial` file.
        case open
        /// Closed, footer written, synced and renamed to its final name: never written again.
        case sealed
        /// Chosen by retention: its frame rows are gone and its file is being removed.
        case deleting
    }

    /// The segment's row id in the index, unique in the store.
    public var id: Int64
    /// The id of the ``StreamRow`` whose frames the segment holds.
    public var streamID: Int64
    /// The file's name inside `DIR/segments/`.
    public var fileName: String
    /// Where the segment is in its life: `open`, `sealed` or `deleting`.
    public var state: State
    /// The segment file format version written in its header.
    public var formatVersion: Int
    /// The pts of its first frame, nanoseconds; nil while it has no frames.
    public var firstPTS: Int64?
    /// The pts of its last frame, nanoseconds; nil while it has no frames.
    public var lastPTS: Int64?
    /// Frames of the segment with rows in the index (for an open segment, those made durable by a sync).
    public var frameCount: Int
    /// Sum of the frames' raw lengths.
    public var rawBytes: Int64
    /// Sum of the frames' stored lengths.
    public var storedBytes: Int64
    /// When the segment was created, Unix epoch nanoseconds.
    public var createdWallNanoseconds: Int64
    /// When it was sealed, Unix epoch nanoseconds; nil unless sealed.
    public var sealedWallNanoseconds: Int64?
}

/// A stream: its name and what its frames are.
public struct StreamRow: Sendable, Hashable {
    /// The stream's row id in the index.
    public var id: Int64
    /// The stream's name, unique in the store (`camera`).
    public var name: String
    /// What every frame of the stream is: its layout, colour and nominal frame duration, fixed when the
    /// stream is created.
    public var description: StreamDescription
    /// Where the stream's pts lie on the recorder clock every stream of the store shares; nil until a recorder
    /// mapped it (streams recorded by older builds: see ``SegmentStore/clock(of:)``).
    public var clock: StreamClock? = nil
}

/// An interval `[startNanoseconds, endNanoseconds)` of a stream's pts clock with no frames where frames were
/// expected.
public struct GapRow: Sendable, Hashable {
    /// The id of the ``StreamRow`` the gap belongs to.
    public var streamID: Int64
    /// The start of the gap, inclusive: nanoseconds of pts on the stream's clock.
    public var startNanoseconds: Int64
    /// The end of the gap, exclusive: nanoseconds of pts on the stream's clock (at least `startNanoseconds`).
    public var endNanoseconds: Int64
    /// Why: the reason of the drops that left it, or ``LossReason/inputInterval`` when the source itself left it.
    public var reason: LossReason

    /// Describes a gap; each argument sets the property of the same name.
    ///
    /// - Parameters:
    ///   - streamID: the stream's row id.
    ///   - startNanoseconds: the first pts of the gap, inclusive, nanoseconds on the stream's clock.
    ///   - endNanoseconds: the pts where frames resume, exclusive, nanoseconds on the stream's clock.
    ///   - reason: why there are no frames.
    public init(streamID: Int64, startNanoseconds: Int64, endNanoseconds: Int64, reason: LossReason) {
        self.streamID = streamID
        self.startNanoseconds = startNanoseconds
        self.endNanoseconds = endNanoseconds
        self.reason = reason
    }
}

/// Totals over the live (not `deleting`) segments of one stream or of the whole store: what `rewind info` shows.
public struct IndexSummary: Sendable, Hashable {
    /// Frames with rows in the index.
    public var frames: Int
    /// The earliest pts, nanoseconds; nil when there are no frames.
    public var firstPTS: Int64?
    /// The latest pts, nanoseconds; nil when there are no frames.
    public var lastPTS: Int64?
    /// Bytes the frames take raw (the sum of their raw lengths).
    public var rawBytes: Int64
    /// Bytes the frames take in the segment files (the sum of their stored lengths, without headers and
    /// footers).
    public var storedBytes: Int64
    /// Segments counted (`open` and `sealed`), including any without frames yet.
    public var segments: Int
}

/// Why the index refused a request.
public enum StoreIndexError: Error, Sendable, CustomStringConvertible {
    /// A stream of that name exists with a different description.
    case streamDescriptionMismatch(name: String, stored: StreamDescription, requested: StreamDescription)
    /// A stored stream row cannot be read back (unknown pixel format or colour name).
    case invalidStreamRow(id: Int64, detail: String)
    /// A stored segment row cannot be read back (unknown state, a file name that is no segment's).
    case invalidSegmentRow(id: Int64, detail: String)
    /// The index's rows disagree with one another (frame rows of a segment it does not have, a segment's totals
    /// other than its rows'): rows changed by another program, or pages damaged in a way SQLite's own check does not
    /// see. The segment files are intact, and the index can be rebuilt from them.
    case contradictsItself(detail: String)
    /// Frames were added to a segment that does not exist, belongs to another stream, or is not open.
    case segmentNotOpen(segmentID: Int64, streamID: Int64)
    /// No segment has that id.
    case unknownSegment(id: Int64)
    /// No stream has that id.
    case unknownStream(id: Int64)
    /// The segment is being deleted and cannot be sealed.
    case segmentIsDeleting(id: Int64)
    /// Another segment already has this file name.
    case fileNameInUse(String)
    /// A batch of frames was not in strictly increasing pts order.
    case framesNotInPTSOrder(streamID: Int64, previous: Int64, next: Int64)
    /// A frame with this pts is already stored for the stream.
    case duplicatePTS(streamID: Int64, pts: Int64)

    /// Whether the index's own rows are damaged (a row that cannot be read, rows that contradict one another):
    /// the segment files are intact, and a repair rebuilds the index from them.
    public var isDamage: Bool {
        switch self {
        case .invalidStreamRow, .invalidSegmentRow, .contradictsItself: true
        default: false
        }
    }

    /// One line naming the stream, segment or pts concerned and what the index expected instead.
    public var description: String {
        switch self {
        case .streamDescriptionMismatch(let name, let stored, let requested):
            return "stream '\(name)' is stored as \(stored), not \(requested)"
        case .invalidStreamRow(let id, let detail):
            return "stream \(id) in the index cannot be read (\(detail))"
        case .invalidSegmentRow(let id, let detail):
            return "segment \(id) in the index cannot be read (\(detail))"
        case .contradictsItself(let detail):
            return "the index contradicts itself: \(detail); it can be rebuilt from the segment files"
        case .segmentNotOpen(let segmentID, let streamID):
            return "segment \(segmentID) is not an open segment of stream \(streamID); frames can only be added there"
        case .unknownSegment(let id):
            return "no segment \(id) in the index"
        case .unknownStream(let id):
            return "no stream \(id) in the index"
        case .segmentIsDeleting(let id):
            return "segment \(id) is being deleted and cannot be sealed"
        case .fileNameInUse(let fileName):
            return "another segment in the index is already named '\(fileName)': segment file names must be unique"
        case .framesNotInPTSOrder(let streamID, let previous, let next):
            return "frames of stream \(streamID) must be added in increasing pts order: \(next) ns came after "
                + "\(previous) ns"
        case .duplicatePTS(let streamID, let pts):
            return "stream \(streamID) already has a frame at pts \(pts) ns; duplicate pts are rejected"
        }
    }
}

/// A marker: a labelled moment of a stream, and the range it holds on disk whatever retention says.
public struct MarkerRow: Sendable, Hashable {
    /// Its row id (0 until stored).
    public var id: Int64
    /// The id of the ``StreamRow`` it marks.
    public var streamID: Int64
    /// Its time: nanoseconds of pts on the stream's clock.
    public var atNanoseconds: Int64
    /// What the moment is.
    public var label: String
    /// The range kept on disk (start inclusive, end exclusive, pts nanoseconds), or nil when it holds nothing.
    public var hold: Range<Int64>?
    /// When it was made: Unix nanoseconds.
    public var createdWallNanoseconds: Int64

    /// Describes a marker; each argument sets the property of the same name.
    public init(
        id: Int64 = 0, streamID: Int64, atNanoseconds: Int64, label: String, hold: Range<Int64>?,
        createdWallNanoseconds: Int64
    ) {
        self.id = id
        self.streamID = streamID
        self.atNanoseconds = atNanoseconds
        self.label = label
        self.hold = hold
        self.createdWallNanoseconds = createdWallNanoseconds
    }
}
