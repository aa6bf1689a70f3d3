import Foundation
import RewindCore

// The typed protocol of a recorder's HTTP API under /v1: request and response bodies, shared by the server
// (RecorderControl) and the client (ControlClient). JSON keys are snake_case; times and durations in requests are
// written as on the command line (`5s`, `1500ms`, ISO-8601); times in responses are integer nanoseconds (`*_ns`)
// on the recorder clock every stream shares (a stream's own pts are `*_pts_ns`). Every request and object names its
// `stream`, so a recorder of several streams speaks the same protocol. `API/openapi.json` describes it all.

/// The body of `POST /v1/saves`: the last seconds, or seconds before and after now.
///
///     {"before": "10s", "after": "5s", "format": "mkv", "path": "/abs/out.mkv", "wait": false}
public struct SaveRequest: Sendable, Hashable, Codable {
    /// The stream to save (a name, or `all`); nil: the recorder's only stream.
    public var stream: String?
    /// `before` with `after: 0`.
    public var last: String?
    /// Pre-roll: how much before now.
    public var before: String?
    /// Post-roll: how much after now; the save waits for it.
    public var after: String?
    /// `mkv`, `y4m` or `mp4`; nil: the path's extension, or `mkv`.
    public var format: String?
    /// An absolute path to write; nil: `DIR/exports/save-….ext`.
    public var path: String?
    /// Answer only when the save ended (200), rather than at once (202).
    public var wait: Bool?
    /// Start where the previous finished save of the stream ended.
    public var sinceLastSave: Bool?
    /// How `mp4` is encoded: `fast`, `balanced` or `lossless` (``ExportQuality``); nil: `fast`. The uncompressed
    /// formats ignore it.
    public var quality: String?

    /// Makes a request; each parameter is the field of the same name.
    public init(
        stream: String? = nil, last: String? = nil, before: String? = nil, after: String? = nil,
        format: String? = nil, path: String? = nil, wait: Bool? = nil, sinceLastSave: Bool? = nil,
        quality: String? = nil
    ) {
        self.stream = stream
        self.last = last
        self.before = before
        self.after = after
        self.format = format
        self.path = path
        self.wait = wait
        self.sinceLastSave = sinceLastSave
        self.quality = quality
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case stream, last, before, after, format, path, wait, quality
        case sinceLastSave = "since_last_save"
    }
}

/// The body of `POST /v1/clips`: any past range.
///
///     {"from": "12.5s", "to": "2026-11-30T14:03:09Z", "format": "mkv"}
public struct ClipRequest: Sendable, Hashable, Codable {
    /// The stream; nil: the recorder's only stream.
    public var stream: String?
    /// Start, inclusive: `12.5s`, `1500ms`, ISO-8601 or `HH:MM:SS.fff`.
    public var from: String
    /// End, exclusive.
    public var to: String
    /// `mkv`, `y4m` or `mp4`; nil: the path's extension, or `mkv`.
    public var format: String?
    /// An absolute path to write; nil: `DIR/exports/clip-….ext`.
    public var path: String?
    /// Answer only when the clip is written (200), rather than at once (202).
    public var wait: Bool?
    /// How `mp4` is encoded: `fast`, `balanced` or `lossless` (``ExportQuality``); nil: `fast`. The uncompressed
    /// formats ignore it.
    public var quality: String?

    /// Makes a request; each parameter is the field of the same name.
    public init(
        stream: String? = nil, from: String, to: String, format: String? = nil, path: String? = nil,
        wait: Bool? = nil, quality: String? = nil
    ) {
        self.stream = stream
        self.from = from
        self.to = to
        self.format = format
        self.path = path
        self.wait = wait
        self.quality = quality
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case stream, from, to, format, path, wait, quality
    }
}

/// The body of `POST /v1/saves/{id}/extend`: a waiting save's post-roll grows by `after`.
public struct ExtendRequest: Sendable, Hashable, Codable {
    /// How much longer to record after the save's current end.
    public var after: String

    /// Makes a request.
    public init(after: String) { self.after = after }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case after
    }
}

/// Where a save is in its life: `waiting` → `exporting` → `done` | `failed` | `cancelled`.
public enum SaveState: String, Sendable, Hashable, Codable, CaseIterable {
    /// Its post-roll is still being recorded, or it waits for an export slot.
    case waiting
    /// Being written.
    case exporting
    /// Written completely.
    case done
    /// Failed; `error` says why and no file is left.
    case failed
    /// Cancelled (`DELETE`); no file is left.
    case cancelled

    /// Whether the save has ended (done, failed or cancelled).
    public var isFinal: Bool { self == .done || self == .failed || self == .cancelled }
}

/// Why a save ended before the end it was asked for (its `to_ns` moved back to just after the last frame it holds),
/// or some of its streams did (``SaveObject/stalledStreams``).
public enum SaveCut: String, Sendable, Hashable, Codable {
    /// The recorder stopped while the save waited for its post-roll.
    case recorderStopped = "recorder_stopped"
    /// Without a store, memory could not hold the rest of its post-roll (its streams dropped frames its pins held).
    case noMemory = "no_memory"
    /// No frame came while it waited for its post-roll, for ``SaveBook/stallAllowance(of:)``: its inputs stalled.
    case inputStalled = "input_stalled"
    /// No frame reached the recorder's memory for as long while its inputs went on sending: the disk fell behind,
    /// and their frames were dropped.
    case diskBehind = "disk_behind"
}

/// A save or clip as the API shows it.
public struct SaveObject: Sendable, Hashable, Codable {
    /// Its number, unique while the recorder runs (`/v1/saves/{id}`).
    public var id: Int
    /// Its state.
    public var state: SaveState
    /// The stream it saves.
    public var stream: String
    /// The range's start, inclusive, recorder time in nanoseconds.
    public var fromNanoseconds: Int64
    /// The range's end, exclusive, recorder time in nanoseconds (grows with `extend`).
    public var toNanoseconds: Int64
    /// The export format's file extension.
    public var format: String
    /// The files written (one per stream); listed from the start, complete once `done`, empty once `failed` or
    /// `cancelled` (nothing is left of them).
    public var files: [String]
    /// Frames written so far.
    public var frames: Int
    /// Bytes written, once done.
    public var bytes: Int64
    /// The pts of the first frame the file holds (stream clock, nanoseconds), once done; for a save of several
    /// streams, the earliest first frame of any of its files on the recorder clock. Nil before, or with no frame.
    /// With ``lastPTSNanoseconds``, the range actually covered: retention or gaps may have left less than
    /// `from_ns`…`to_ns`.
    public var firstPTSNanoseconds: Int64?
    /// The pts of the last frame the file holds, once done; for several streams the latest last frame on the
    /// recorder clock; nil like ``firstPTSNanoseconds``.
    public var lastPTSNanoseconds: Int64?
    /// Of ``frames``, how many repeat the frame before them to fill gaps at a constant frame rate (`.y4m`; 0 for
    /// the other formats), once done; nil before.
    public var repeatedFrames: Int?
    /// For a `.mkv` of several streams, once done: the streams that have a track in it (those with frames in the
    /// range), in track order; nil otherwise.
    public var tracks: [String]?
    /// How far the export is, 0…1.
    public var progress: Double
    /// Why it failed, when it did.
    public var error: APIError.Detail?
    /// Once done: the gaps of its streams where frames were lost (not a source's own pauses, not retention) that
    /// reach into `from_ns`…`to_ns`, on the recorder clock, by start: the file holds no frame of them. Nil before;
    /// empty when the range lost nothing; nil once done when they could not be read (``lostUnknown`` says why).
    public var lost: [GapObject]?
    /// Once done, when the gaps of its range could not be read (the index failed: damaged, locked, its `gaps` table
    /// unreadable): why, as the store said it. The file is written and kept, but whether it lacks frames is unknown,
    /// so ``lost`` is nil rather than empty. Nil otherwise.
    public var lostUnknown: String?
    /// For a clip of `all` (or of no stream named): the streams of the store that the recorder does not record (a
    /// camera of an earlier run) with frames in the range asked for. Its files do not hold them: clip each by name,
    /// which reads it from the disk. Nil when there are none.
    public var notRecorded: [String]?
    /// Why it ended before the `to_ns` asked for (moved back to just after its last frame), or, for a save of
    /// several streams, why some of its streams' files end before it (``stalledStreams``); nil when it was not cut.
    public var cutShort: SaveCut?
    /// With ``SaveCut/inputStalled``: the streams that sent no frame for the rest of its post-roll (their files end
    /// at their last frame, while those of streams that kept sending reach `to_ns`); nil otherwise.
    public var stalledStreams: [String]?

    /// Makes a save object; each parameter is the field of the same name.
    public init(
        id: Int, state: SaveState, stream: String, fromNanoseconds: Int64, toNanoseconds: Int64, format: String,
        files: [String], frames: Int = 0, bytes: Int64 = 0, progress: Double = 0, error: APIError.Detail? = nil
    ) {
        self.id = id
        self.state = state
        self.stream = stream
        self.fromNanoseconds = fromNanoseconds
        self.toNanoseconds = toNanoseconds
        self.format = format
        self.files = files
        self.frames = frames
        self.bytes = bytes
        self.progress = progress
        self.error = error
    }

    enum CodingKeys: String, CodingKey {
        case id, state, stream, format, files, frames, bytes, progress, error
        case fromNanoseconds = "from_ns"
        case toNanoseconds = "to_ns"
        case firstPTSNanoseconds = "first_pts_ns"
        case lastPTSNanoseconds = "last_pts_ns"
        case repeatedFrames = "repeated_frames"
        case tracks, lost
        case lostUnknown = "lost_unknown"
        case notRecorded = "not_recorded"
        case cutShort = "cut_short"
        case stalledStreams = "stalled_streams"
    }
}

/// A gap of a stream on the recorder clock: where its frames stop and start again, and why (a ``LossReason``'s
/// name: `spill behind`, `damaged`, `input failed`, …). The `gap` event's data, and a save's `lost` list.
public struct GapObject: Sendable, Hashable, Codable {
    /// The stream's name.
    public var stream: String
    /// The gap's start, inclusive, recorder-clock nanoseconds.
    public var startNanoseconds: Int64
    /// The gap's end, exclusive, recorder-clock nanoseconds.
    public var endNanoseconds: Int64
    /// Why.
    public var reason: String

    /// Makes a gap object; each parameter is the field of the same name.
    public init(stream: String, startNanoseconds: Int64, endNanoseconds: Int64, reason: String) {
        self.stream = stream
        self.startNanoseconds = startNanoseconds
        self.endNanoseconds = endNanoseconds
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey {
        case stream, reason
        case startNanoseconds = "start_ns"
        case endNanoseconds = "end_ns"
    }
}

/// `GET /v1/saves`: every save since the recorder started, oldest first.
public struct SaveList: Sendable, Hashable, Codable {
    /// The saves.
    public var saves: [SaveObject]

    /// Makes a list.
    public init(saves: [SaveObject]) { self.saves = saves }
}

/// One stream of a live recorder: its counters and what its ring holds (`GET /v1/status`).
public struct StreamStatus: Sendable, Hashable, Codable {
    /// The stream's name.
    public var stream: String
    /// The frame layout as text (`nv12 1920x1080`).
    public var layout: String
    /// The stream's exact nominal frame duration, ``frameDurationValue`` / ``frameDurationTimescale`` seconds
    /// (`1001` / `30000` at 30000/1001 fps; a rate as given, not reduced), as `GET /v1/streams` and
    /// `rewind info --json` give it; 0 / 1 when not known.
    public var frameDurationValue: Int64 = 0
    /// The timescale of ``frameDurationValue``: its units per second.
    public var frameDurationTimescale: Int = 1
    /// Frames accepted into the ring since the recorder started.
    public var framesAccepted: UInt64
    /// Frames durable on disk (0 with spill `off`).
    public var framesDurable: Int
    /// Frames lost, by reason (keys: the loss reasons' raw values, such as `spill behind`).
    public var drops: [String: Int]
    /// The ring's time window, nanoseconds.
    public var windowNanoseconds: Int64
    /// Frames in the ring now.
    public var memoryFrames: Int
    /// Bytes of slabs mapped now.
    public var memoryBytes: Int
    /// The stream's memory budget in force, bytes: its ring's share and its compressor's buffer (lowered under
    /// memory pressure).
    public var memoryBudgetBytes: Int
    /// The pts of the oldest frame in memory, or nil when the ring is empty.
    public var memoryFirstPTSNanoseconds: Int64?
    /// The pts of the newest frame in memory (the recorder clock), or nil when the ring is empty.
    public var memoryLastPTSNanoseconds: Int64?
    /// `normal`, `warning` or `critical`.
    public var pressure: String
    /// Pressure level changes since the recorder started.
    public var pressureChanges: Int
    /// Gaps recorded for the stream since the recorder started.
    public var gaps: Int
    /// Recorder time minus pts: where the stream's pts lie on the recorder clock every stream shares; nil before
    /// its first frame.
    public var clockOffsetNanoseconds: Int64?
    /// Recorder time 0 as a wall-clock time, Unix-epoch nanoseconds; nil before the stream's first frame.
    public var clockWallNanoseconds: Int64?
    /// What ended the stream's input, when it failed while the recorder went on; nil while it runs.
    public var inputError: String?
    /// Why the stream's input ended (`end of input`, `duration reached`, `input failed: …`) while the recorder goes
    /// on; nil while it runs.
    public var inputEnded: String?
    /// Frames accepted and not yet written to disk: how far the spill is behind.
    public var spillLagFrames: UInt64 = 0
    /// How long the stream's input has sent no frame (stored or dropped; a producer waiting for the disk counts as
    /// sending), since its last or, before its first, since the recorder started, nanoseconds; nil when not known.
    public var inputIdleNanoseconds: Int64?
    /// Whether the stream's input stalled: it neither ended nor failed, and sent no frame for as long as a save
    /// waits for one (10 s, or four frame durations when longer).
    public var inputStalled = false

    /// Makes a stream status; each parameter is the field of the same name.
    public init(
        stream: String, layout: String, framesAccepted: UInt64, framesDurable: Int, drops: [String: Int],
        windowNanoseconds: Int64, memoryFrames: Int, memoryBytes: Int, memoryBudgetBytes: Int,
        memoryFirstPTSNanoseconds: Int64?, memoryLastPTSNanoseconds: Int64?, pressure: String, pressureChanges: Int,
        gaps: Int = 0, clockOffsetNanoseconds: Int64? = nil, clockWallNanoseconds: Int64? = nil,
        inputError: String? = nil
    ) {
        self.gaps = gaps
        self.clockOffsetNanoseconds = clockOffsetNanoseconds
        self.clockWallNanoseconds = clockWallNanoseconds
        self.inputError = inputError
        self.stream = stream
        self.layout = layout
        self.framesAccepted = framesAccepted
        self.framesDurable = framesDurable
        self.drops = drops
        self.windowNanoseconds = windowNanoseconds
        self.memoryFrames = memoryFrames
        self.memoryBytes = memoryBytes
        self.memoryBudgetBytes = memoryBudgetBytes
        self.memoryFirstPTSNanoseconds = memoryFirstPTSNanoseconds
        self.memoryLastPTSNanoseconds = memoryLastPTSNanoseconds
        self.pressure = pressure
        self.pressureChanges = pressureChanges
    }

    enum CodingKeys: String, CodingKey {
        case stream, layout, drops, pressure, gaps
        case frameDurationValue = "frame_duration_value"
        case frameDurationTimescale = "frame_duration_timescale"
        case clockOffsetNanoseconds = "clock_offset_ns"
        case clockWallNanoseconds = "clock_wall_ns"
        case inputError = "input_error"
        case inputEnded = "input_ended"
        case spillLagFrames = "spill_lag_frames"
        case inputIdleNanoseconds = "input_idle_ns"
        case inputStalled = "input_stalled"
        case framesAccepted = "frames_accepted"
        case framesDurable = "frames_durable"
        case windowNanoseconds = "window_ns"
        case memoryFrames = "memory_frames"
        case memoryBytes = "memory_bytes"
        case memoryBudgetBytes = "memory_budget_bytes"
        case memoryFirstPTSNanoseconds = "memory_first_pts_ns"
        case memoryLastPTSNanoseconds = "memory_last_pts_ns"
        case pressureChanges = "pressure_changes"
    }

    /// Encodes every field; absent pts are `null`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(stream, forKey: .stream)
        try container.encode(layout, forKey: .layout)
        try container.encode(frameDurationValue, forKey: .frameDurationValue)
        try container.encode(frameDurationTimescale, forKey: .frameDurationTimescale)
        try container.encode(drops, forKey: .drops)
        try container.encode(pressure, forKey: .pressure)
        try container.encode(framesAccepted, forKey: .framesAccepted)
        try container.encode(framesDurable, forKey: .framesDurable)
        try container.encode(windowNanoseconds, forKey: .windowNanoseconds)
        try container.encode(memoryFrames, forKey: .memoryFrames)
        try container.encode(memoryBytes, forKey: .memoryBytes)
        try container.encode(memoryBudgetBytes, forKey: .memoryBudgetBytes)
        try container.encode(memoryFirstPTSNanoseconds, forKey: .memoryFirstPTSNanoseconds)
        try container.encode(memoryLastPTSNanoseconds, forKey: .memoryLastPTSNanoseconds)
        try container.encode(pressureChanges, forKey: .pressureChanges)
        try container.encode(gaps, forKey: .gaps)
        try container.encode(clockOffsetNanoseconds, forKey: .clockOffsetNanoseconds)
        try container.encode(clockWallNanoseconds, forKey: .clockWallNanoseconds)
        try container.encode(inputError, forKey: .inputError)
        try container.encode(inputEnded, forKey: .inputEnded)
        try container.encode(spillLagFrames, forKey: .spillLagFrames)
        try container.encode(inputIdleNanoseconds, forKey: .inputIdleNanoseconds)
        try container.encode(inputStalled, forKey: .inputStalled)
    }
}

/// `GET /v1/status`: the recorder's streams and its saves.
public struct StatusResponse: Sendable, Hashable, Codable {
    /// One entry per stream.
    public var streams: [StreamStatus]
    /// Saves waiting for their post-roll or an export slot.
    public var savesWaiting: Int
    /// Saves being written.
    public var savesExporting: Int
    /// Whether the recorder is stopping.
    public var stopping: Bool
    /// Bytes the store's segment files take on disk now (every stream; the figure `--disk` bounds), as opposed to
    /// the frames' stored payload; nil without a store.
    public var diskBytes: Int64?
    /// The store's disk budget (`--disk`), bytes; nil without one.
    public var diskBudgetBytes: Int?
    /// Segment files the store holds; nil without a store.
    public var segments: Int?
    /// The memory budget in force for the whole recorder, bytes: the sum of the streams' `memory_budget_bytes`
    /// (lowered under memory pressure). The process's resident size stays within it plus 48 MiB.
    public var memoryBudgetBytes: Int?
    /// The recorder process's resident size (its pages in RAM, as the kernel counts them: the rings' frames, the
    /// heap, code), bytes; nil where `/proc` cannot be read.
    public var residentBytes: Int?
    /// What the process's own allocations hold (malloc's heaps and its large blocks; the rings' frames are mapped
    /// apart and not in it), bytes; nil where the C library cannot say or malloc is not its own (a sanitizer's).
    public var heapBytes: Int?
    /// What SQLite holds for the store's index (page caches, prepared statements; part of `heap_bytes`), bytes.
    public var indexMemoryBytes: Int?

    /// Makes a status; each parameter is the field of the same name.
    public init(
        streams: [StreamStatus], savesWaiting: Int, savesExporting: Int, stopping: Bool, diskBytes: Int64? = nil,
        diskBudgetBytes: Int? = nil, segments: Int? = nil, memoryBudgetBytes: Int? = nil, residentBytes: Int? = nil,
        heapBytes: Int? = nil, indexMemoryBytes: Int? = nil
    ) {
        self.streams = streams
        self.savesWaiting = savesWaiting
        self.savesExporting = savesExporting
        self.stopping = stopping
        self.diskBytes = diskBytes
        self.diskBudgetBytes = diskBudgetBytes
        self.segments = segments
        self.memoryBudgetBytes = memoryBudgetBytes
        self.residentBytes = residentBytes
        self.heapBytes = heapBytes
        self.indexMemoryBytes = indexMemoryBytes
    }

    enum CodingKeys: String, CodingKey {
        case streams, stopping, segments
        case savesWaiting = "saves_waiting"
        case savesExporting = "saves_exporting"
        case diskBytes = "disk_bytes"
        case diskBudgetBytes = "disk_budget_bytes"
        case memoryBudgetBytes = "memory_budget_bytes"
        case residentBytes = "resident_bytes"
        case heapBytes = "heap_bytes"
        case indexMemoryBytes = "index_memory_bytes"
    }
}

/// `GET /v1/health`: `ok` while recording, `stopping` (with 503) once it stops.
public struct HealthResponse: Sendable, Hashable, Codable {
    /// `ok` or `stopping`.
    public var status: String

    /// Makes a health answer.
    public init(status: String) { self.status = status }
}

/// One stream a recorder records (`GET /v1/streams`).
public struct StreamDescriptionBody: Sendable, Hashable, Codable {
    /// Its name.
    public var name: String
    /// Pixel format (`nv12`, `i420`, …).
    public var format: String
    /// Width in pixels.
    public var width: Int
    /// Height in pixels.
    public var height: Int
    /// Nominal frame duration, whole nanoseconds (rounded down: 33366666 at 30000/1001 fps), for older clients;
    /// ``frameDurationValue`` / ``frameDurationTimescale`` seconds is exact, and what a pts computed as a frame
    /// index times the duration must use (the nanoseconds drift 72 µs an hour at 30000/1001 fps).
    public var frameDurationNanoseconds: Int64
    /// The exact nominal frame duration, ``frameDurationValue`` / ``frameDurationTimescale`` seconds (`1001` /
    /// `30000` at 30000/1001 fps; a rate as given, not reduced), as `rewind info --json` gives it.
    public var frameDurationValue: Int64
    /// The timescale of ``frameDurationValue``: its units per second.
    public var frameDurationTimescale: Int
    /// The colour matrix (`bt709`, `unspecified`, …); nil from a recorder that did not say.
    public var colorMatrix: String?
    /// The colour range, `video` or `full`; nil from a recorder that did not say.
    public var colorRange: String?
    /// Where chroma samples sit: `unspecified`, `center`, `left` or `topleft`; nil from a recorder that did not say.
    public var chromaSiting: String?
    /// The pixel aspect (`10:11`); nil when not known.
    public var pixelAspect: String?
    /// Whether the recorder records it; false for a stream its store holds from an earlier recording (its timeline
    /// and frames are read from the disk; `rewind clip --store DIR --stream NAME` exports it).
    public var recording: Bool

    /// Makes a description; each parameter is the field of the same name.
    public init(
        name: String, format: String, width: Int, height: Int, frameDuration: FrameTime,
        colorMatrix: String? = nil, colorRange: String? = nil, chromaSiting: String? = nil, pixelAspect: String? = nil,
        recording: Bool = true
    ) {
        self.name = name
        self.format = format
        self.width = width
        self.height = height
        self.frameDurationNanoseconds = frameDuration.nanoseconds ?? 0
        self.frameDurationValue = frameDuration.value
        self.frameDurationTimescale = Int(frameDuration.timescale)
        self.colorMatrix = colorMatrix
        self.colorRange = colorRange
        self.chromaSiting = chromaSiting
        self.pixelAspect = pixelAspect
        self.recording = recording
    }

    enum CodingKeys: String, CodingKey {
        case name, format, width, height, recording
        case frameDurationNanoseconds = "frame_duration_ns"
        case frameDurationValue = "frame_duration_value"
        case frameDurationTimescale = "frame_duration_timescale"
        case colorMatrix = "color_matrix"
        case colorRange = "color_range"
        case chromaSiting = "chroma_siting"
        case pixelAspect = "pixel_aspect"
    }

    /// Decodes a description; one without `recording` (from a recorder that listed only what it records) is
    /// recorded, and one without the exact frame duration (from an older recorder) lasts its nanoseconds.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        format = try container.decode(String.self, forKey: .format)
        width = try container.decode(Int.self, forKey: .width)
        height = try container.decode(Int.self, forKey: .height)
        frameDurationNanoseconds = try container.decode(Int64.self, forKey: .frameDurationNanoseconds)
        frameDurationValue =
            try container.decodeIfPresent(Int64.self, forKey: .frameDurationValue) ?? frameDurationNanoseconds
        frameDurationTimescale =
            try container.decodeIfPresent(Int.self, forKey: .frameDurationTimescale)
            ?? Int(FrameTime.nanosecondsPerSecond)
        colorMatrix = try container.decodeIfPresent(String.self, forKey: .colorMatrix)
        colorRange = try container.decodeIfPresent(String.self, forKey: .colorRange)
        chromaSiting = try container.decodeIfPresent(String.self, forKey: .chromaSiting)
        pixelAspect = try container.decodeIfPresent(String.self, forKey: .pixelAspect)
        recording = try container.decodeIfPresent(Bool.self, forKey: .recording) ?? true
    }
}

/// `GET /v1/streams`: every stream of the recorder, then the other streams of its store.
public struct StreamList: Sendable, Hashable, Codable {
    /// The streams.
    public var streams: [StreamDescriptionBody]

    /// Makes a list.
    public init(streams: [StreamDescriptionBody]) { self.streams = streams }
}

/// The body of `POST /v1/markers`.
///
///     {"label": "goal", "at": "12.5s", "hold": {"before": "30s", "after": "30s"}}
public struct MarkerRequest: Sendable, Hashable, Codable {
    /// What the moment is.
    public var label: String
    /// When: a time as on the command line; nil: now (the recorder clock).
    public var at: String?
    /// The stream (a name, or `all`); nil: the recorder's only stream.
    public var stream: String?
    /// Keep the frames around the marker on disk whatever retention says.
    public var hold: Hold?

    /// How much around a marker is held.
    public struct Hold: Sendable, Hashable, Codable {
        /// Before the marker.
        public var before: String?
        /// After the marker.
        public var after: String?

        /// Makes a hold.
        public init(before: String? = nil, after: String? = nil) {
            self.before = before
            self.after = after
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case before, after
        }
    }

    /// Makes a request; each parameter is the field of the same name.
    public init(label: String, at: String? = nil, stream: String? = nil, hold: Hold? = nil) {
        self.label = label
        self.at = at
        self.stream = stream
        self.hold = hold
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case label, at, stream, hold
    }

    /// The most characters a label may have.
    public static let maximumLabelLength = 256

    /// `label` as a marker keeps it (without leading and trailing white space), or what is wrong with it: a label
    /// is 1 to ``maximumLabelLength`` characters on one line. The recorder checks every request with it, and
    /// `rewind mark` before it sends one (a label too long for a request body is then told what a label may be).
    public static func checkedLabel(_ label: String) -> Result<String, LabelProblem> {
        let trimmed = label.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.isEmpty && !label.isEmpty {
            // A label of spaces is 1 character or more, and still none a marker keeps.
            return .failure(LabelProblem(message: "label must hold more than white space (it is trimmed)"))
        }
        // Characters as a reader counts them, and bytes: one letter under thousands of combining marks is one
        // character, and no label of 256 characters needs more than 4 bytes each.
        guard !trimmed.isEmpty, trimmed.count <= maximumLabelLength, trimmed.utf8.count <= 4 * maximumLabelLength
        else {
            return .failure(
                LabelProblem(
                    message: "label must be 1 to \(maximumLabelLength) characters, at most "
                        + "\(4 * maximumLabelLength) bytes in UTF-8"))
        }
        // A line of its own wherever it is listed: a newline or another control character would break the line
        // (and SQLite would keep a label only up to a NUL).
        guard !trimmed.holdsLineBreakingCharacters else {
            return .failure(
                LabelProblem(message: "label must not hold control characters (newlines, tabs, NUL): give one line"))
        }
        return .success(trimmed)
    }

    /// What is wrong with a marker's label.
    public struct LabelProblem: Error, Sendable, Hashable {
        /// Says what a label may be.
        public var message: String
    }
}

/// `GET /v1/markers`: markers in a range, oldest first.
public struct MarkerList: Sendable, Hashable, Codable {
    /// The markers.
    public var markers: [MarkerBody]

    /// Makes a list.
    public init(markers: [MarkerBody]) { self.markers = markers }
}

/// A marker as the API shows it.
public struct MarkerBody: Sendable, Hashable, Codable {
    /// Its number in the store.
    public var id: Int64
    /// Its time, recorder time in nanoseconds.
    public var atNanoseconds: Int64
    /// Its label.
    public var label: String
    /// Its stream.
    public var stream: String
    /// The held range's start, or nil without a hold.
    public var holdFromNanoseconds: Int64?
    /// The held range's end, exclusive, or nil without a hold.
    public var holdToNanoseconds: Int64?

    /// Makes a marker body; each parameter is the field of the same name.
    public init(
        id: Int64, atNanoseconds: Int64, label: String, stream: String, holdFromNanoseconds: Int64?,
        holdToNanoseconds: Int64?
    ) {
        self.id = id
        self.atNanoseconds = atNanoseconds
        self.label = label
        self.stream = stream
        self.holdFromNanoseconds = holdFromNanoseconds
        self.holdToNanoseconds = holdToNanoseconds
    }

    enum CodingKeys: String, CodingKey {
        case id, label, stream
        case atNanoseconds = "at_ns"
        case holdFromNanoseconds = "hold_from_ns"
        case holdToNanoseconds = "hold_to_ns"
    }

    /// Encodes every field; absent hold bounds are `null`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(label, forKey: .label)
        try container.encode(stream, forKey: .stream)
        try container.encode(atNanoseconds, forKey: .atNanoseconds)
        try container.encode(holdFromNanoseconds, forKey: .holdFromNanoseconds)
        try container.encode(holdToNanoseconds, forKey: .holdToNanoseconds)
    }
}

/// A request body the API decodes strictly: one JSON object of known fields (see
/// ``APICoding/decodeRequest(_:from:fields:nested:)``).
package protocol APIRequestBody: Decodable {
    /// The fields the body may have.
    static var fields: [String] { get }
    /// The fields of the objects nested in it, by the field that holds each.
    static var nestedFields: [String: [String]] { get }
}

extension APIRequestBody {
    package static var nestedFields: [String: [String]] { [:] }

    /// Decodes `body` (empty: `{}`).
    ///
    /// - Throws: ``APIError`` (400) naming what is wrong: not JSON, not an object, an unknown or repeated field, a
    ///   field of the wrong type or a NUL in a string.
    package static func decode(_ body: [UInt8]) throws(APIError) -> Self {
        try APICoding.decodeRequest(Self.self, from: body, fields: fields, nested: nestedFields)
    }
}

extension SaveRequest: APIRequestBody {
    package static var fields: [String] { CodingKeys.allCases.map(\.rawValue) }
}

extension ClipRequest: APIRequestBody {
    package static var fields: [String] { CodingKeys.allCases.map(\.rawValue) }
}

extension ExtendRequest: APIRequestBody {
    package static var fields: [String] { CodingKeys.allCases.map(\.rawValue) }
}

extension MarkerRequest: APIRequestBody {
    package static var fields: [String] { CodingKeys.allCases.map(\.rawValue) }
    package static var nestedFields: [String: [String]] { ["hold": Hold.CodingKeys.allCases.map(\.rawValue)] }
}

/// The JSON settings both ends share, and the strict decoding of request bodies.
enum APICoding {
    /// `value` as JSON; a value JSON cannot carry (a number that is not finite) throws.
    static func encoded(_ value: some Encodable) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try Array(encoder.encode(value))
    }

    /// `value` as JSON, or an error object saying it could not be encoded (for bodies that have no status to
    /// change: events, requests, error bodies).
    static func encode(_ value: some Encodable) -> [UInt8] {
        (try? encoded(value)) ?? Array(#"{"error":{"code":"failed","message":"encoding"}}"#.utf8)
    }

    /// Decodes a request body, refusing a body that is not one JSON object, an unknown field (a typo must not be
    /// ignored), and a field of the wrong type, each with a 400 naming it.
    static func decodeRequest<T: Decodable>(
        _ type: T.Type, from body: [UInt8], fields: [String], nested: [String: [String]] = [:]
    ) throws(APIError) -> T {
        let text = body.isEmpty ? Array("{}".utf8) : body
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: Data(text))
        } catch {
            // What the parser found (invalid UTF-8, a lone surrogate, nesting past its 512 levels, a cut body).
            let detail = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String
            throw APIError(
                .badRequest,
                "the body is not valid JSON (\(detail ?? "\(error)")): '\(excerpt(body))'; send one JSON object")
        }
        // Foundation's parser takes a comma before a closing bracket, which JSON does not allow.
        if let comma = trailingCommaOffset(in: text) {
            throw APIError(
                .badRequest,
                "the body is not valid JSON (a comma before the closing bracket at byte \(comma)): "
                    + "'\(excerpt(body))'; send one JSON object")
        }
        guard let object = parsed as? [String: Any] else {
            throw APIError(.badRequest, "the body is not a JSON object: '\(excerpt(body))'")
        }
        if let unknown = object.keys.sorted().first(where: { !fields.contains($0) }) {
            throw APIError(
                .badRequest, "unknown field '\(unknown)': this request takes \(fields.joined(separator: ", "))")
        }
        if let repeated = firstRepeatedKey(in: text) {
            throw APIError(.badRequest, "field '\(repeated)' is given twice: give each field once")
        }
        // A NUL would cut a path or a label where C and SQLite read it, after it was checked whole.
        if let field = firstFieldWithNUL(object) {
            throw APIError(.badRequest, "field '\(field)' holds a NUL character (\\u0000), which no path or label may")
        }
        for (key, allowed) in nested {
            guard let inner = object[key] as? [String: Any] else { continue }
            if let unknown = inner.keys.sorted().first(where: { !allowed.contains($0) }) {
                throw APIError(
                    .badRequest,
                    "unknown field '\(key).\(unknown)': '\(key)' takes \(allowed.joined(separator: ", "))")
            }
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(text))
        } catch let DecodingError.typeMismatch(type, context), let DecodingError.valueNotFound(type, context) {
            let field = context.codingPath.map(\.stringValue).joined(separator: ".")
            throw APIError(.badRequest, "field '\(field)' must be \(Self.kind(of: type, field: field))")
        } catch let DecodingError.keyNotFound(key, _) {
            throw APIError(.badRequest, "missing field '\(key.stringValue)'")
        } catch {
            throw APIError(.badRequest, "the body is not a valid request: \(error)")
        }
    }

    /// What a request field of `type` takes, in words (`a string, a time such as "5s"`).
    static func kind(of type: Any.Type, field: String) -> String {
        switch type {
        case is String.Type:
            // Lengths (a pre-roll, a hold) take durations; moments take times of day and wall-clock times too.
            let durations: Set<Substring> = ["last", "before", "after"]
            let moments: Set<Substring> = ["from", "to", "at"]
            let name = field.split(separator: ".").last ?? ""
            if durations.contains(name) { return "a string: a duration such as \"5s\"" }
            return moments.contains(name) ? "a string: a time such as \"5s\" or \"12:00:00\"" : "a string"
        case is Bool.Type: return "true or false"
        case is Int.Type, is Int64.Type, is Double.Type: return "a number"
        case is [String: Any].Type:
            return field == "hold" ? "an object such as {\"before\": \"5s\", \"after\": \"5s\"}" : "an object"
        default: return "of another type (the API document, GET /v1/openapi.json, gives each field's)"
        }
    }

    /// The byte offset of the first comma that an object or array closes after (`{"a":1,}`, `[1,]`), which JSON
    /// does not allow; nil when there is none. Strings are skipped.
    ///
    /// - Complexity: O(n) in the bytes of `json`.
    static func trailingCommaOffset(in json: [UInt8]) -> Int? {
        var comma: Int?
        var index = 0
        while index < json.count {
            switch json[index] {
            case UInt8(ascii: "\""):
                comma = nil
                index += 1
                while index < json.count && json[index] != UInt8(ascii: "\"") {
                    index += json[index] == UInt8(ascii: "\\") ? 2 : 1
                }
            case UInt8(ascii: ","): comma = index
            case UInt8(ascii: "}"), UInt8(ascii: "]"): if let comma { return comma }
            case UInt8(ascii: " "), 0x09, 0x0A, 0x0D: break
            default: comma = nil
            }
            index += 1
        }
        return nil
    }

    /// The first key that appears twice in one object of `json` (valid JSON), in order; nil when none does. Keys
    /// are compared as decoded, so `"a"` and `"\u0061"` are the same key.
    ///
    /// - Complexity: O(n) in the bytes of `json`.
    static func firstRepeatedKey(in json: [UInt8]) -> String? {
        // Per open container: whether it is an object, its keys so far, and whether its next string is a key.
        var open: [(isObject: Bool, keys: Set<String>, expectsKey: Bool)] = []
        var index = 0
        while index < json.count {
            switch json[index] {
            case UInt8(ascii: "{"): open.append((true, [], true))
            case UInt8(ascii: "["): open.append((false, [], false))
            case UInt8(ascii: "}"), UInt8(ascii: "]"): _ = open.popLast()
            case UInt8(ascii: ","): if open.last?.isObject == true { open[open.count - 1].expectsKey = true }
            case UInt8(ascii: "\""):
                let start = index
                index += 1
                while index < json.count && json[index] != UInt8(ascii: "\"") {
                    index += json[index] == UInt8(ascii: "\\") ? 2 : 1
                }
                guard let last = open.last, last.isObject, last.expectsKey else { break }
                let literal = Data(json[start...min(index, json.count - 1)])
                let key =
                    (try? JSONSerialization.jsonObject(with: literal, options: .fragmentsAllowed)) as? String
                    ?? String(decoding: literal, as: UTF8.self)
                open[open.count - 1].expectsKey = false
                guard open[open.count - 1].keys.insert(key).inserted else { return key }
            default: break
            }
            index += 1
        }
        return nil
    }

    /// The first field (dotted, in key order) of `object` or of an object or array in it whose string holds a NUL.
    static func firstFieldWithNUL(_ value: Any, path: String = "") -> String? {
        switch value {
        case let text as String:
            return text.unicodeScalars.contains("\0") ? path : nil
        case let object as [String: Any]:
            for key in object.keys.sorted() {
                if let found = firstFieldWithNUL(object[key]!, path: path.isEmpty ? key : "\(path).\(key)") {
                    return found
                }
            }
            return nil
        case let array as [Any]:
            for (index, element) in array.enumerated() {
                if let found = firstFieldWithNUL(element, path: "\(path)[\(index)]") { return found }
            }
            return nil
        default:
            return nil
        }
    }

    static func excerpt(_ bytes: [UInt8]) -> String {
        String(decoding: bytes.prefix(80), as: UTF8.self)
    }
}

extension String {
    /// Whether the text holds a control character (a newline, a tab, an escape, NUL) or a line or paragraph
    /// separator: text that would not stay one line where it is listed or logged.
    package var holdsLineBreakingCharacters: Bool {
        let breaksLines: Set<Unicode.GeneralCategory> = [.control, .lineSeparator, .paragraphSeparator]
        return unicodeScalars.contains { breaksLines.contains($0.properties.generalCategory) }
    }
}
