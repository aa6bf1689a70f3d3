/// Why frames are missing: the one vocabulary of drop counters, gaps, append outcomes and every report.
///
/// A drop and the gap it leaves use the same word. The raw values are what the store's `drops` and `gaps` tables
/// hold and what `rewind info` and `rewind record` print; they never change, so stores written by older builds read
/// unchanged.
///
/// | case | raw value | frames | meaning |
/// |---|---|---|---|
/// | ``memoryBudget`` | `memory budget` | offered, dropped on arrival | no memory under the ring's budget |
/// | ``pinnedFrames`` | `pinned frames` | offered, dropped on arrival | the memory that could be freed is pinned |
/// | ``spillBehind`` | `spill behind` | offered, dropped on arrival | the spill stage was too far behind (`drop-newest`) |
/// | ``evictedBeforeSpill`` | `evicted before spill` | accepted, then lost | left the ring before it was written |
/// | ``diskError`` | `disk error` | accepted, then lost | its write to the segment store failed |
/// | ``damaged`` | `damaged` | written, then lost | salvage found its record unreadable |
/// | ``inputInterval`` | `input interval` | none: not a loss | the source left a longer interval between frames |
/// | ``recorderStopped`` | `recorder stopped` | none: not a loss | no recorder ran between two recordings of a stream |
/// | ``inputFailed`` | `input failed` | none offered | the stream's input failed (malformed, truncated) and ended |
/// | ``retention`` | `retention` | written, then deleted by design | retention deleted them while a hold kept older ones |
/// | ``droppedOnArrival`` | `frames dropped on arrival` | offered, dropped on arrival | older builds' gaps only |
/// | ``unrecognized`` | `unrecognized` | unknown | a stored reason this build does not know |
///
/// When one hole in a stream has several causes, its gap is named by the first that applies:
/// 1. a loss of accepted frames (``evictedBeforeSpill``, ``diskError``): the first of them to happen;
/// 2. frames dropped on arrival: ``spillBehind``, then ``pinnedFrames``, then ``memoryBudget``
///    (``arrivalPrecedence``);
/// 3. ``inputInterval``.
public enum LossReason: String, Sendable, Hashable, CaseIterable, Codable {
    /// Offered frames dropped on arrival: no memory under the ring's budget (the frame is larger than the budget,
    /// or the slabs are held outside the ring). A loss.
    case memoryBudget = "memory budget"
    /// Offered frames dropped on arrival: the memory that could be freed is pinned by snapshots. A loss.
    case pinnedFrames = "pinned frames"
    /// Offered frames dropped on arrival because the spill stage was so far behind that storing them could push
    /// unwritten frames out of the ring (backpressure `drop-newest`). A loss.
    case spillBehind = "spill behind"
    /// Accepted frames that left the ring before the spill stage wrote them (backpressure
    /// `drop-oldest-unspilled`, or memory pressure). A loss.
    case evictedBeforeSpill = "evicted before spill"
    /// Accepted frames whose write to the segment store failed (disk full, I/O error). A loss.
    case diskError = "disk error"
    /// The source itself left a longer interval than one frame between two frames: nothing offered is missing.
    /// Gaps only; not a loss.
    case inputInterval = "input interval"
    /// No recorder ran: the stretch between the last frame of one recording of a stream and the first of the next
    /// (the next recording continues the stream's timeline after the stored frames). Gaps only; not a loss.
    case recorderStopped = "recorder stopped"
    /// The stream's input failed (a malformed or truncated frame, a read error) and ended while the recorder went
    /// on with its other streams: from the last frame to when the recording stopped. Gaps only; not a loss of
    /// offered frames.
    case inputFailed = "input failed"
    /// Written frames that salvage found unreadable and cut out of a segment. Gaps only; a loss.
    case damaged = "damaged"
    /// Written frames that retention deleted (the disk budget, the maximum age, the free-space floor) while a hold
    /// kept older frames of the stream: the hole between kept segments. Gaps only; not a loss (the store's own
    /// limits deleted them, as it deletes the oldest history without a gap).
    case retention = "retention"
    /// The reason of gaps left by frames dropped on arrival in stores written by older builds, which did not say
    /// why. Kept only so those rows still read: new gaps name the actual reason (``spillBehind``,
    /// ``pinnedFrames`` or ``memoryBudget``). A loss.
    case droppedOnArrival = "frames dropped on arrival"
    /// A stored reason this build does not know (a store written by a newer build); see ``init(stored:)``. Never
    /// written. Counted as a loss, so a newer build's losses are not hidden.
    case unrecognized = "unrecognized"

    /// Reads a reason as the store holds it; text this build does not know reads as ``unrecognized``, so one
    /// row from a newer build never fails a whole read.
    ///
    /// - Parameter text: the stored reason.
    public init(stored text: String) {
        self = LossReason(rawValue: text) ?? .unrecognized
    }

    /// Decodes a reason from its raw value; unknown text decodes as ``unrecognized`` (see ``init(stored:)``).
    ///
    /// - Throws: `DecodingError` when the value is not a string.
    public init(from decoder: any Decoder) throws {
        self.init(stored: try decoder.singleValueContainer().decode(String.self))
    }

    /// Whether frames that were offered or accepted are missing: true for every reason but ``inputInterval``,
    /// ``recorderStopped`` and ``inputFailed`` (no frame was offered there), and ``retention`` (deleted by the
    /// store's limits).
    public var isLoss: Bool {
        switch self {
        case .inputInterval, .recorderStopped, .inputFailed, .retention: false
        default: true
        }
    }

    /// Whether frames the recorder had accepted were lost afterwards (``evictedBeforeSpill``, ``diskError``), as
    /// opposed to dropped on arrival or cut out by salvage.
    public var isLossOfAcceptedFrames: Bool {
        switch self {
        case .evictedBeforeSpill, .diskError: true
        default: false
        }
    }

    /// Reasons frames are dropped on arrival, in the order that names a gap with several of them: the first
    /// present wins.
    public static let arrivalPrecedence: [LossReason] = [.spillBehind, .pinnedFrames, .memoryBudget]
}

extension DropReason {
    /// The loss reason of a frame the ring dropped for this reason.
    public var lossReason: LossReason {
        switch self {
        case .memoryBudget: .memoryBudget
        case .pinnedFrames: .pinnedFrames
        }
    }
}

extension Dictionary where Key == LossReason {
    /// The same entries keyed by each reason's raw value, as JSON reports and text output show them.
    ///
    /// - Complexity: O(n).
    public var keyedByRawValue: [String: Value] {
        [String: Value](uniqueKeysWithValues: map { ($0.key.rawValue, $0.value) })
    }
}
