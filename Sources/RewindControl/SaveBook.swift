import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import SegmentStore
import Synchronization

/// The saves and clips of one live recorder: their states, and the exports that write them.
///
/// A save is `waiting` until the recorder clock (the newest pts recorded) passes its end and an export slot is
/// free, then `exporting` on a thread of its own, then `done`, `failed` or `cancelled`. While it is not final its
/// range from the start on is held against retention (``SegmentStore/addHold(streamName:range:)``), so its
/// pre-roll cannot be deleted while its post-roll is recorded. Decisions are made under the book's lock; exports,
/// file removal and callbacks run outside it. The producer never waits for any of this.
final class SaveBook: Sendable {
    /// One save's bookkeeping.
    /// What a save exports: one stream, or every stream of the recorder into one file (`.mkv`) or a file each.
    enum Target: Sendable {
        case one(RecorderStream)
        case all([RecorderStream])
        /// A stream of the recorder's store that it does not record (a clip of it is read from the disk).
        case stored(StreamRow, SegmentStore)

        /// The `stream` a save object names: the stream's name, or `all`.
        var name: String {
            switch self {
            case .one(let stream): stream.name
            case .all: "all"
            case .stored(let row, _): row.name
            }
        }

        /// Whether it is a stream the recorder does not record (its frames all on disk: nothing to wait for).
        var isStored: Bool {
            if case .stored = self { true } else { false }
        }

        /// The recorded streams (none for a stored one).
        var streams: [RecorderStream] {
            switch self {
            case .one(let stream): [stream]
            case .all(let streams): streams
            case .stored: []
            }
        }
    }

    struct Entry {
        var object: SaveObject
        /// The path asked for (or made): the file, or for `.y4m`/`.mp4` of several streams the name each stream's
        /// file is made from (``StreamSet/fileName(for:stream:)``), which `object.files` lists.
        var path: String
        var target: Target
        var exportFormat: ExportFormat
        /// How an `mp4` export is encoded.
        var quality: ExportQuality = .fast
        /// A clip (`POST /v1/clips`), not a save: `since_last_save` does not go on from it.
        var isClip = false
        /// A save of `since_last_save` from right where the last one ended: what retention deleted of its range
        /// before it was written is said in `lost`, since the saves would otherwise miss it unseen.
        var followsLastSave = false
        /// Whether the export makes its directory (`DIR/exports`, the recorder's own); a path the client gave is
        /// written only into the directory that was there when it asked.
        var makesDirectory = false
        /// Where `since_last_save` stood for each stream before this save, done, moved it (nil: nowhere), and
        /// where it moved it: a DELETE of the done save (its client could not deliver it) puts it back.
        var movedEnds: [(name: String, before: Int64?, after: Int64)] = []
        var holds: [RetentionHold] = []
        /// Without a store memory is the only copy: each stream's frames of the range recorded so far, pinned when
        /// the save was made and then as they arrive while it waits (oldest first), by stream name.
        var memoryPins: [String: [RingSnapshot]] = [:]

        /// Every pin, of every stream.
        var allPins: [RingSnapshot] { memoryPins.values.flatMap { $0 } }

        /// The source of `stream`'s frames for the export: its pinned frames first when it has any.
        func source(_ stream: RecorderStream) -> ClipSource {
            memoryPins[stream.name].map { .pinned(stream, $0) } ?? .recorderStream(stream)
        }
        var cancelRequested = false
        /// The recorder stopped, or memory is full of this save's pinned frames: export what there is now.
        var isForced = false
        /// Frames the save's streams had dropped as `pinned frames` when it was made (without a store).
        var pinnedDropsAtStart = 0
        /// Each written file's device and inode when the export finished: a download checks that the file at the
        /// path is still the one written (a later export to the same path replaces it).
        var fileIdentities: [FileIdentity] = []
        /// `object.files` as ``SaveBook/samePath(_:)`` resolves them (none for a file the recorder names itself,
        /// `DIR/exports/save-…-ID`): a later save to one of them while this one is pending is a conflict.
        var claimedFiles: [String] = []
    }

    struct State {
        var entries: [Int: Entry] = [:]
        var nextID = 1
        var exporting = 0
        /// Where the last finished save of each stream ended (exclusive), for `since_last_save`.
        var lastSavedEnd: [String: Int64] = [:]
        var stopping = false
        /// When the saves were last looked at: a longer pause (the whole process stopped, Ctrl-Z) is no stall.
        var lastLook = System.monotonicNanoseconds()
        /// Each recorded stream's newest frame (recorder time) when last seen, and when it last moved (monotonic
        /// nanoseconds): a save waiting for a post-roll its streams do not send is cut short once none of them has
        /// moved for ``stallAllowance(of:)``, and a save of one stream waits for that stream alone (another stream's
        /// frames move the shared clock).
        var streamsSeen: [String: (newest: Int64?, movedAt: Int64)] = [:]
        /// Each stream's frames arrived (``RecorderStream/framesArrived``) when last seen, and when its input was
        /// last seen sending (they grew, or its producer waited for the disk): a stream whose newest frame stands
        /// still while its input sends is held back by the disk, not stalled.
        var inputsSeen: [String: (arrived: UInt64, activeAt: Int64)] = [:]
    }

    /// The recorder time of `stream`'s newest frame, or nil before its first.
    private static func newest(of stream: RecorderStream) -> Int64? {
        guard let clock = stream.clock, let last = try? stream.newestPTS() else { return nil }
        return clock.recorderTime(ofPTS: last)
    }

    /// How long `streams` may send no frame while a save of them waits for its post-roll before the save is cut
    /// short (``SaveCut/inputStalled``): 10 s, or four of the slowest stream's frames when they are longer apart (a
    /// time-lapse camera's frames come that far apart).
    static func stallAllowance(of streams: [RecorderStream]) -> Int64 {
        let slowest = streams.map { $0.stream.frameDuration.nanoseconds ?? 0 }.max() ?? 0
        return max(10_000_000_000, slowest.multipliedReportingOverflow(by: 4).overflow ? .max : 4 * slowest)
    }

    /// How long each stream, by name, has sent no frame, monotonic nanoseconds (pauses of the whole process left
    /// out), as saves waiting for it see it: past ``stallAllowance(of:)`` its input stalled. Nil before the control's
    /// thread first looked at the stream.
    func idleNanoseconds(of stream: String) -> Int64? {
        let now = System.monotonicNanoseconds()
        return state.withAnnotatedLock { state in state.inputsSeen[stream].map { max(0, now - $0.activeAt) } }
    }

    /// Saves not yet final beyond which new ones get 429.
    static let maximumPending = 64
    /// Finished saves the book remembers (``HTTPLimits/finishedSavesKept``).
    let finishedKept: Int

    let recorder: Recorder
    let concurrentExports: Int
    private let state = Mutex(State())
    /// Signalled at each state change, for `wait: true` requests and ``stop()``.
    private let changed = Mutex<[DispatchSemaphore]>([])
    private let events: EventHub
    private let onFinish: @Sendable (Result<ExportSummary, any Error>, SaveObject?, _ isClip: Bool) -> Void

    init(
        recorder: Recorder, concurrentExports: Int, events: EventHub, finishedKept: Int = 1000,
        onFinish: @escaping @Sendable (Result<ExportSummary, any Error>, SaveObject?, _ isClip: Bool) -> Void
    ) {
        self.recorder = recorder
        self.finishedKept = max(1, finishedKept)
        self.concurrentExports = concurrentExports
        self.events = events
        self.onFinish = onFinish
        // Where the last saves of a previous run ended: `since_last_save` goes on from there after a restart.
        if let index = recorder.store?.index {
            var ends: [String: Int64] = [:]
            for stream in recorder.streams {
                if let text = try? index.info(Self.lastSavedEndKey(stream.name)), let end = Int64(text) {
                    ends[stream.name] = end
                }
            }
            state.withAnnotatedLock { $0.lastSavedEnd = ends }
        }
    }

    /// The `store_info` key under which the end of the last finished save of stream `name` is kept (recorder time).
    static func lastSavedEndKey(_ name: String) -> String { "last_saved_end_ns:\(name)" }

    /// Keeps each stream's `since_last_save` end in the store for the next run (an empty value: none). Best effort:
    /// on a full disk the next run starts at the window.
    private func storeLastSavedEnds(_ ends: [(name: String, end: Int64?)]) {
        for (name, end) in ends {
            try? recorder.store?.index.setInfo(Self.lastSavedEndKey(name), to: end.map(String.init) ?? "")
        }
    }

    /// The recorder clock as the frames show it: the recorder time of the newest frame of any stream (in memory,
    /// or on disk); nil before the first frame.
    var clock: Int64? { recorder.streams.compactMap(Self.newest(of:)).max() }

    /// Where the last finished saves of `streams` ended (each stream's, saved alone or in a save of `all`), for
    /// `since_last_save`: the earliest end among the streams that have frames after theirs, so a save of several
    /// streams starts where the one saved least recently ended and misses no frame of any. A stream never saved,
    /// and one with nothing after its end (its input ended after its last frame was saved), hold no other stream
    /// back; when every stream saved has nothing after its end, the newest of their ends and `anythingNew` false.
    /// Nil when none of them was saved.
    func sinceLastSave(streams: [RecorderStream]) -> (end: Int64, anythingNew: Bool)? {
        let ends = state.withAnnotatedLock { state in streams.map { state.lastSavedEnd[$0.name] } }
        var earliest: Int64?
        var newestEnd: Int64?
        for (stream, end) in zip(streams, ends) {
            guard let end else { continue }
            newestEnd = max(newestEnd ?? end, end)
            guard let clock = stream.clock, let last = try? stream.newestPTS(),
                clock.recorderTime(ofPTS: last) >= end
            else { continue }
            earliest = min(earliest ?? end, end)
        }
        if let earliest { return (earliest, true) }
        return newestEnd.map { ($0, false) }
    }

    /// Adds a save of `range` (recorder time) of `target`, to be written to `path`, waiting until the recorder clock
    /// passes its end. Its frames are held at once: on disk against retention, from the start on, and (without a
    /// store, one stream) pinned in memory.
    ///
    /// - Parameter makesDirectory: the save goes to `DIR/exports`, made if missing: `path` is its file's name without
    ///   the save's id and extension, which follow (`save-<time>-<id>.mkv`).
    /// - Throws: ``APIError`` 429 when too many saves are pending, 503 when stopping.
    func add(
        target: Target, range: Range<Int64>, format: ExportFormat, quality: ExportQuality = .fast, path: String,
        isClip: Bool = false, makesDirectory: Bool = false, followsLastSave: Bool = false, notRecorded: [String] = []
    ) throws(APIError) -> SaveObject {
        let stream = target.name
        var holds: [RetentionHold] = []
        for member in target.streams {
            guard let store = member.store, let clock = member.clock else { continue }
            holds.append(
                store.addHold(
                    streamName: member.name, range: clock.pts(atRecorderTime: range.lowerBound)..<Int64.max))
        }
        if case .stored(let row, let store) = target, let clock = try? ClipSource.store(store, stream: row).clock() {
            holds.append(
                store.addHold(streamName: row.name, range: clock.pts(atRecorderTime: range.lowerBound)..<Int64.max))
        }
        // Without a store, the frames already recorded stay pinned in memory until they are written.
        var memoryPins: [String: [RingSnapshot]] = [:]
        for member in target.streams where member.store == nil {
            guard let clock = member.clock else { continue }
            memoryPins[member.name] = [member.ring.pin(clock.ptsRange(range))]
        }
        let pinnedDrops = memoryPins.isEmpty ? 0 : Self.pinnedDrops(target.streams)
        // The files a path the client gave stands for, links followed, before the lock (the file system may be
        // slow): one that another pending save or clip writes is a conflict below.
        let claimed = makesDirectory ? [] : Self.files(for: path, target: target, format: format).map(Self.samePath)
        let result: Result<SaveObject, APIError> = state.withAnnotatedLock { state in
            if state.stopping { return .failure(APIError(.stopping, "the recorder is stopping")) }
            let pending = state.entries.values.filter { !$0.object.state.isFinal }.count
            guard pending < Self.maximumPending else {
                return .failure(
                    APIError(.tooMany, "\(pending) saves are waiting or exporting (at most \(Self.maximumPending))"))
            }
            let id = state.nextID
            let path = makesDirectory ? "\(path)-\(id).\(format.fileExtension)" : path
            let files = Self.files(for: path, target: target, format: format)
            // A file another save or clip still writes: the later would replace it (both said `done`, one file).
            let pendingByID = state.entries.values.filter { !$0.object.state.isFinal }.sorted {
                $0.object.id < $1.object.id
            }
            for other in pendingByID {
                guard let index = other.claimedFiles.firstIndex(where: claimed.contains) else { continue }
                let file = other.object.files[index]
                return .failure(
                    APIError(
                        .conflict,
                        "\(other.isClip ? "clip" : "save") \(other.object.id) is writing \(file) still: wait for it "
                            + "(GET /v1/saves/\(other.object.id)) or give another path"))
            }
            state.nextID += 1
            // A recorder that runs for months keeps the newest finished saves only (their files stay on disk).
            let finished = state.entries.values.filter { $0.object.state.isFinal }.map(\.object.id).sorted()
            for old in finished.prefix(max(0, finished.count - finishedKept + 1)) { state.entries[old] = nil }
            var object = SaveObject(
                id: id, state: .waiting, stream: stream, fromNanoseconds: range.lowerBound,
                toNanoseconds: range.upperBound, format: format.fileExtension, files: files)
            object.notRecorded = notRecorded.isEmpty ? nil : notRecorded
            state.entries[id] = Entry(
                object: object, path: path, target: target, exportFormat: format, quality: quality, isClip: isClip,
                followsLastSave: followsLastSave, makesDirectory: makesDirectory, holds: holds, memoryPins: memoryPins,
                pinnedDropsAtStart: pinnedDrops, claimedFiles: claimed)
            // Published under the lock: the control's thread may start its export as soon as it is let go, and its
            // `exporting` event came before this `waiting` one.
            events.publish("save", object)
            return .success(object)
        }
        switch result {
        case .success(let object):
            return object
        case .failure(let error):
            for hold in holds { recorder.store?.removeHold(hold) }
            for pin in memoryPins.values.flatMap({ $0 }) { pin.release() }
            throw error
        }
    }

    /// The save `id`, or nil.
    func object(_ id: Int) -> SaveObject? { state.withAnnotatedLock { $0.entries[id]?.object } }

    /// What file `index` of save `id` was when the export finished, if it is done.
    func fileIdentity(_ id: Int, index: Int) -> FileIdentity? {
        state.withAnnotatedLock { state in
            guard let identities = state.entries[id]?.fileIdentities, identities.indices.contains(index) else {
                return nil
            }
            return identities[index]
        }
    }

    /// Every save, oldest first.
    var objects: [SaveObject] { state.withAnnotatedLock { $0.entries.values.map(\.object).sorted { $0.id < $1.id } } }

    /// Counts of waiting and exporting saves.
    var counts: (waiting: Int, exporting: Int) {
        state.withAnnotatedLock { state in
            let values = state.entries.values
            return (values.filter { $0.object.state == .waiting }.count, state.exporting)
        }
    }

    /// Lengthens a waiting save's post-roll by `nanoseconds`.
    ///
    /// - Throws: ``APIError`` 404 for an unknown id, 409 when the save is no longer waiting.
    func extend(_ id: Int, by nanoseconds: Int64) throws(APIError) -> SaveObject {
        let result: Result<SaveObject, APIError> = state.withAnnotatedLock { state in
            guard var entry = state.entries[id] else { return .failure(APIError(.notFound, "no save \(id)")) }
            guard entry.object.state == .waiting, !entry.isForced else {
                return .failure(
                    APIError(.conflict, "save \(id) is \(entry.object.state.rawValue): only a waiting save can grow"))
            }
            let (end, overflow) = entry.object.toNanoseconds.addingReportingOverflow(nanoseconds)
            guard !overflow, end.magnitude <= 2 * RecorderControl.longestSpan else {
                return .failure(APIError(.badRequest, "save \(id) would end more than 200 years from now"))
            }
            entry.object.toNanoseconds = end
            state.entries[id] = entry
            // Under the lock, as a new save's: before the `exporting` event of the export it may start at once.
            events.publish("save", entry.object)
            return .success(entry.object)
        }
        return try result.get()
    }

    /// The pts ranges of the saves not finished yet (waiting or exporting), by stream name: what they keep from
    /// retention (from their start on) as far as they need it, for a new hold's check against `--disk`.
    func pendingRanges() -> [String: [Range<Int64>]] {
        state.withAnnotatedLock { state in
            var ranges: [String: [Range<Int64>]] = [:]
            for entry in state.entries.values where !entry.object.state.isFinal {
                let range = entry.object.fromNanoseconds..<entry.object.toNanoseconds
                for stream in entry.target.streams {
                    if let clock = stream.clock { ranges[stream.name, default: []].append(clock.ptsRange(range)) }
                }
            }
            return ranges
        }
    }

    /// For a save that goes on from the last one: each stream whose oldest frame kept (on disk or in memory) comes
    /// after the range's start, where retention deleted what was recorded since that save before this one took it,
    /// as a `retention` gap from the start to that frame (recorder time).
    ///
    /// - Throws: store errors when the stream's oldest frame or its `retention` gaps cannot be read: what retention
    ///   took is then unknown, never taken for nothing.
    static func deletedSinceLastSave(_ streams: [RecorderStream], range: Range<Int64>) throws -> [GapObject] {
        try streams.flatMap { stream -> [GapObject] in
            guard let clock = stream.clock, let store = stream.store,
                let stored = try store.summary(streamName: stream.name).firstPTS
            else { return [] }
            var deleted: [GapObject] = []
            let kept = clock.recorderTime(ofPTS: min(stored, stream.memoryStatistics.firstPTSNanoseconds ?? stored))
            if kept > range.lowerBound {
                deleted.append(
                    GapObject(
                        stream: stream.name, startNanoseconds: range.lowerBound,
                        endNanoseconds: min(kept, range.upperBound), reason: LossReason.retention.rawValue))
            }
            // Holes retention left after older frames a hold keeps: its `retention` gap rows within the range.
            let rows = try store.gaps(streamName: stream.name).filter { $0.reason == .retention }
            for row in rows {
                let start = max(clock.recorderTime(ofPTS: row.startNanoseconds), range.lowerBound, kept)
                var end = min(clock.recorderTime(ofPTS: row.endNanoseconds), range.upperBound)
                guard start < end else { continue }
                // To the first frame the recorder still has there (its memory may hold frames the disk lost); frames
                // that cannot be read leave the gap whole, which says more lost, never less.
                var first: Int64?
                try? ClipSource.recorderStream(stream).frames(in: clock.ptsRange(start..<end)) { view in
                    first = view.info.ptsNanoseconds
                    return false
                }
                if let first { end = min(end, clock.recorderTime(ofPTS: first)) }
                guard start < end else { continue }
                deleted.append(
                    GapObject(
                        stream: stream.name, startNanoseconds: start, endNanoseconds: end,
                        reason: LossReason.retention.rawValue))
            }
            return deleted
        }
    }

    /// The saves and clips whose ranges retention keeps, oldest first: each named for a person (`clip 5`), and its
    /// state.
    func pendingNames() -> [(name: String, state: SaveState)] {
        state.withAnnotatedLock { state in
            state.entries.values.filter { !$0.object.state.isFinal }.sorted { $0.object.id < $1.object.id }.map {
                ("\($0.isClip ? "clip" : "save") \($0.object.id)", $0.object.state)
            }
        }
    }

    /// Cancels a save: a waiting one ends at once, an exporting one at its next frame (its partial file removed).
    ///
    /// - Throws: ``APIError`` 404 for an unknown id.
    func cancel(_ id: Int) throws(APIError) -> SaveObject {
        enum Action {
            case ended(SaveObject, [RetentionHold], [RingSnapshot])
            case asked
            case final(SaveObject, restored: [(name: String, end: Int64?)])
        }
        let action: Action = try state.withAnnotatedLock { state throws(APIError) in
            guard var entry = state.entries[id] else { throw APIError(.notFound, "no save \(id)") }
            switch entry.object.state {
            case .waiting:
                entry.object.state = .cancelled
                // It wrote nothing: `files` lists what a save wrote once it is final.
                entry.object.files = []
                let holds = entry.holds
                let pins = entry.allPins
                entry.holds = []
                entry.memoryPins = [:]
                state.entries[id] = entry
                return .ended(entry.object, holds, pins)
            case .exporting:
                entry.cancelRequested = true
                state.entries[id] = entry
                return .asked
            case .done:
                // Its client could not deliver it: it no longer counts for `since_last_save`, where no later save
                // moved the end since.
                var restored: [(name: String, end: Int64?)] = []
                for moved in entry.movedEnds where state.lastSavedEnd[moved.name] == moved.after {
                    state.lastSavedEnd[moved.name] = moved.before
                    restored.append((moved.name, moved.before))
                }
                entry.movedEnds = []
                state.entries[id] = entry
                return .final(entry.object, restored: restored)
            case .failed, .cancelled:
                return .final(entry.object, restored: [])
            }
        }
        switch action {
        case .ended(let object, let holds, let pins):
            for hold in holds { recorder.store?.removeHold(hold) }
            for pin in pins { pin.release() }
            events.publish("save", object)
            signalChange()
            return object
        case .final(let object, let restored):
            storeLastSavedEnds(restored)
            return object
        case .asked:
            let object = try waitUntilFinal(id)
            return object
        }
    }

    /// Blocks until save `id` is final and returns it.
    func waitUntilFinal(_ id: Int) throws(APIError) -> SaveObject {
        let semaphore = DispatchSemaphore(value: 0)
        changed.withAnnotatedLock { $0.append(semaphore) }
        defer { changed.withAnnotatedLock { $0.removeAll { $0 === semaphore } } }
        while true {
            guard let object = object(id) else { throw APIError(.notFound, "no save \(id)") }
            if object.state.isFinal { return object }
            _ = semaphore.wait(timeout: .now() + .milliseconds(200))
        }
    }

    private func signalChange() {
        for semaphore in changed.withAnnotatedLock({ $0 }) { semaphore.signal() }
    }

    /// Starts the exports that are due: waiting saves whose end the clock has passed (or all, when stopping),
    /// while slots are free. Called by the control's thread every few milliseconds while saves wait.
    ///
    /// - Returns: whether saves are still waiting.
    @discardableResult
    func startDueExports() -> Bool {
        if recorder.store == nil { pinArrivedFrames() }
        let monotonic = System.monotonicNanoseconds()
        let streamNewest = recorder.streams.map { ($0.name, Self.newest(of: $0)) }
        let inputs = recorder.streams.map { ($0.name, $0.framesArrived, $0.isWaitingForDisk) }
        let inputsRunning = recorder.streams.contains { $0.inputEnded == nil }
        // The recorder clock as the streams' frames have moved it.
        let clockReached = streamNewest.compactMap(\.1).max()
        var due: [Entry] = []
        let stillWaiting: Bool = state.withAnnotatedLock { state in
            let paused = monotonic - state.lastLook > 1_000_000_000 ? monotonic - state.lastLook : 0
            state.lastLook = monotonic
            // Watched whether saves wait or not: a save of a stream stalled long before it came is cut at once (it
            // waited the whole allowance first).
            for (name, newest) in streamNewest {
                if let seen = state.streamsSeen[name], seen.newest == newest {
                    state.streamsSeen[name]?.movedAt += paused
                } else {
                    state.streamsSeen[name] = (newest, monotonic)
                }
            }
            for (name, arrived, waitingForDisk) in inputs {
                if let seen = state.inputsSeen[name], seen.arrived == arrived, !waitingForDisk {
                    state.inputsSeen[name]?.activeAt += paused
                } else {
                    state.inputsSeen[name] = (arrived, monotonic)
                }
                // A producer held back by the disk sends its frames once the disk takes them: not a stall.
                if waitingForDisk { state.streamsSeen[name]?.movedAt = monotonic }
            }
            let waiting = state.entries.values.filter { $0.object.state == .waiting }.sorted {
                $0.object.id < $1.object.id
            }
            for var entry in waiting where state.exporting < concurrentExports {
                // Every frame of a stream before the end is in once its newest frame reaches the last nanosecond of
                // the range; a stored stream's are on disk already. Each stream goes by its own frames: the shared
                // clock, moved by another stream, passed the end while a stream sent nothing (it was written
                // without its post-roll, exit 0). A stream whose input ended while others go on has every frame it
                // will (once every input has ended the recorder stops, which ends the saves waiting as it does).
                // A stream with no frame yet places its first where it arrives: after the end, once another stream's
                // frames have passed it (a save of every stream waited for a camera that had not started, then said
                // its input stalled).
                let end = entry.object.toNanoseconds - 1
                let targets = entry.target.streams
                let lagging = targets.filter {
                    let newest = state.streamsSeen[$0.name]?.newest ?? nil
                    if newest == nil, let clockReached, clockReached >= end { return false }
                    return ($0.inputEnded == nil || !inputsRunning) && (newest ?? .min) < end
                }
                var ready = entry.isForced || entry.target.isStored || lagging.isEmpty
                // The streams it still waits for stalled: it ends after its newest frame, written now (a client
                // waited without end), and says which stalled.
                let allowance = Self.stallAllowance(of: targets)
                if !ready, let newest = targets.compactMap({ state.streamsSeen[$0.name]?.newest }).max(),
                    lagging.allSatisfy({ monotonic - (state.streamsSeen[$0.name]?.movedAt ?? monotonic) > allowance })
                {
                    // Not cut to nothing: a range wholly after the stalled frames keeps its end, and says it has
                    // no frames there (it read "no frames in [21.300s, 21.300s)").
                    if newest + 1 > entry.object.fromNanoseconds {
                        entry.object.toNanoseconds = min(entry.object.toNanoseconds, newest + 1)
                    }
                    // Inputs that went on sending while the newest frame stood still: their frames were dropped as the
                    // disk fell behind (it blamed the input).
                    let sending = lagging.contains { stream in
                        state.inputsSeen[stream.name].map { monotonic - $0.activeAt <= allowance } ?? false
                    }
                    entry.object.cutShort = sending ? .diskBehind : .inputStalled
                    entry.object.stalledStreams = lagging.map(\.name)
                    entry.isForced = true
                    ready = true
                }
                guard ready else { continue }
                entry.object.state = .exporting
                state.entries[entry.object.id] = entry
                state.exporting += 1
                due.append(entry)
            }
            return state.entries.values.contains { $0.object.state == .waiting }
        }
        for entry in due {
            events.publish("save", entry.object)
            do {
                try Threads.start(named: "rewind-save", priority: .background) { [self] in
                    export(entry)
                    // The export's buffers are free: the holes they leave in malloc's heaps go back at once.
                    ResidentMemory.trimHeap()
                }
            } catch {
                // Without a thread of its own the save fails at once, saying why (its pins and holds go).
                export(entry, refused: error)
            }
        }
        return stillWaiting
    }

    /// Frames `streams` dropped on arrival because memory was held by pins.
    private static func pinnedDrops(_ streams: [RecorderStream]) -> Int {
        streams.reduce(0) { $0 + ($1.statistics.drops[.pinnedFrames] ?? 0) }
    }

    /// Without a store, a waiting save that can no longer get every frame of its post-roll is cut short: it ends
    /// after the last frame it holds and is written now, instead of waiting for ever or with a hole. That happens
    /// when its streams drop frames for want of memory its pins hold (the recorder clock then stops with the
    /// frames), or when frames left the ring before they were pinned (memory full of pins).
    private func cutShort(_ ids: Set<Int>) {
        state.withAnnotatedLock { state in
            for id in ids {
                guard var entry = state.entries[id], entry.object.state == .waiting, !entry.isForced else { continue }
                let ends = entry.target.streams.compactMap { stream -> Int64? in
                    guard let clock = stream.clock,
                        let last = entry.memoryPins[stream.name]?.last(where: { !$0.isEmpty })?.lastPTSNanoseconds
                    else { return nil }
                    return clock.recorderTime(ofPTS: last) + 1
                }
                if let end = ends.min(), end < entry.object.toNanoseconds {
                    entry.object.toNanoseconds = end
                    entry.object.cutShort = .noMemory
                }
                entry.isForced = true
                state.entries[id] = entry
            }
        }
    }

    /// Without a store: pins the frames that arrived since each waiting save's last pin, before the window lets
    /// them go (this runs every few milliseconds while saves wait); cuts short the saves that cannot get them all.
    private func pinArrivedFrames() {
        let wanted: [(id: Int, stream: RecorderStream, range: Range<Int64>, after: UInt64?)] = state.withAnnotatedLock {
            state in
            state.entries.values.flatMap { entry in
                entry.target.streams.compactMap { stream in
                    guard entry.object.state == .waiting, !entry.isForced, let clock = stream.clock else { return nil }
                    let end = clock.pts(atRecorderTime: entry.object.toNanoseconds)
                    let last = entry.memoryPins[stream.name]?.last(where: { !$0.isEmpty })
                    let next =
                        last?.lastPTSNanoseconds.map { $0 + 1 }
                        ?? clock.pts(atRecorderTime: entry.object.fromNanoseconds)
                    let sequence = last.map { pin in pin.withFrame(at: pin.count - 1) { _, sequence in sequence } }
                    return (entry.object.id, stream, next..<max(next, end), sequence)
                }
            }
        }
        var short = Set<Int>()
        for (id, stream, range, after) in wanted where !range.isEmpty {
            let pin = stream.ring.pin(range)
            guard !pin.isEmpty else {
                pin.release()
                continue
            }
            // Ring sequence numbers count every frame accepted: a jump means frames left before they were pinned.
            if let after, pin.withFrame(at: 0, { _, sequence in sequence }) != after + 1 {
                pin.release()
                short.insert(id)
                continue
            }
            let kept = state.withAnnotatedLock { state in
                guard state.entries[id]?.object.state == .waiting else { return false }
                state.entries[id]!.memoryPins[stream.name, default: []].append(pin)
                return true
            }
            if !kept { pin.release() }
        }
        let dropping: [(id: Int, streams: [RecorderStream], start: Int)] = state.withAnnotatedLock { state in
            state.entries.values.compactMap { entry in
                guard entry.object.state == .waiting, !entry.isForced, !entry.memoryPins.isEmpty else { return nil }
                return (entry.object.id, entry.target.streams, entry.pinnedDropsAtStart)
            }
        }
        for (id, streams, start) in dropping where Self.pinnedDrops(streams) > start { short.insert(id) }
        if !short.isEmpty { cutShort(short) }
    }

    /// Waiting saves export what there is now; new saves are refused.
    func forceAll() {
        // A waiting save ends with the newest frame now: its `to_ns` says so (and where `since_last_save` goes on).
        let now = clock
        state.withAnnotatedLock { state in
            state.stopping = true
            for id in state.entries.keys where state.entries[id]!.object.state == .waiting {
                state.entries[id]!.isForced = true
                if let now, now < Int64.max, state.entries[id]!.object.toNanoseconds > now + 1 {
                    state.entries[id]!.object.toNanoseconds = max(state.entries[id]!.object.fromNanoseconds, now + 1)
                    state.entries[id]!.object.cutShort = .recorderStopped
                }
            }
        }
    }

    /// Whether every save is final.
    var isIdle: Bool {
        state.withAnnotatedLock { state in state.entries.values.allSatisfy { $0.object.state.isFinal } }
    }

    private struct Cancelled: Error {}

    /// Writes one save: on its own thread, a frame at a time from the recorder (memory and disk), under a temporary
    /// name renamed into place when complete. With `refused` (no thread could be started for it) the save fails
    /// with that error, on the caller's thread.
    private func export(_ entry: Entry, refused: (any Error)? = nil) {
        let id = entry.object.id
        let path = entry.path
        let range = entry.object.fromNanoseconds..<entry.object.toNanoseconds
        var result: Result<ExportSummary, any Error>
        // Each recorded stream's last frame written (recorder time): where `since_last_save` goes on for it.
        var lastWritten: [String: Int64] = [:]
        do {
            if let refused { throw refused }
            let parent = System.parentDirectory(of: path)
            if entry.makesDirectory, let (failed, error) = System.makeParentDirectories(of: path) {
                throw APIError(.failed, "could not make the directory '\(failed)' to write '\(path)' in: \(error)")
            }
            var isDirectory: ObjCBool = false
            let exists = FileManager.default.fileExists(atPath: parent, isDirectory: &isDirectory)
            if exists && !isDirectory.boolValue {
                throw APIError(
                    .failed,
                    "'\(parent)' is not a directory, so '\(path)' cannot be written in it: move what is there away, "
                        + "or give the save a path")
            }
            // The directory was there when the save was asked for: one removed since (or a mount point whose file
            // system went away) is not made again behind the client's back.
            guard exists || entry.makesDirectory else {
                throw APIError(
                    .notFound,
                    "the directory '\(parent)' to write '\(path)' in was removed after the save was asked for; "
                        + "nothing was written")
            }
            switch entry.target {
            case .one(let stream):
                let summary = try exportOne(
                    entry, source: entry.source(stream), stream: stream.stream, range: range, path: path)
                if let last = summary.lastPTSNanoseconds, let clock = stream.clock {
                    lastWritten[stream.name] = clock.recorderTime(ofPTS: last)
                }
                result = .success(summary)
            case .stored(let row, let store):
                result = .success(
                    try exportOne(
                        entry, source: .store(store, stream: row), stream: row.description, range: range, path: path))
            case .all(let streams):
                if state.withAnnotatedLock({ $0.entries[id]?.cancelRequested ?? false }) { throw Cancelled() }
                let set = try StreamSet(streams.map { entry.source($0) })
                let expected = max(
                    1,
                    streams.reduce(0.0) { total, stream in
                        let source = entry.source(stream)
                        return total + source.framesAtMost(in: (try? source.clock())?.ptsRange(range) ?? range)
                    })
                let files = try set.exportFiles(
                    range: range, format: entry.exportFormat, to: .path(path), quality: entry.quality
                ) { count in
                    guard count % 8 == 0 else { return }
                    let cancelled = self.state.withAnnotatedLock { state in
                        state.entries[id]?.object.frames = count
                        state.entries[id]?.object.progress = min(0.99, Double(count) / expected)
                        return state.entries[id]?.cancelRequested ?? false
                    }
                    if cancelled { throw Cancelled() }
                }
                let summaries = files.map(\.summary)
                for (member, summary) in files {
                    if let member, let last = summary.lastPTSNanoseconds {
                        lastWritten[member.name] = member.clock.recorderTime(ofPTS: last)
                    }
                }
                lastWritten.merge(summaries[0].lastTimestampByTrack) { $1 }
                var combined = summaries[0]
                combined.path = summaries.compactMap(\.path).joined(separator: ", ")
                combined.frames = summaries.reduce(0) { $0 + $1.frames }
                combined.filledFrames = summaries.reduce(0) { $0 + $1.filledFrames }
                combined.bytes = summaries.reduce(0) { $0 + $1.bytes }
                // The pts the files cover, on the recorder clock every stream shares.
                let span = StreamSet.recorderTimeSpan(of: files)
                combined.firstPTSNanoseconds = span?.lowerBound
                combined.lastPTSNanoseconds = span?.upperBound
                let paths = summaries.compactMap(\.path)
                state.withAnnotatedLock { $0.entries[id]?.object.files = paths }
                result = .success(combined)
            }
        } catch {
            result = .failure(error)
        }
        // Each stream's own end, whether it was saved alone or in a save of `all`: after its last frame written, so
        // that its frames that come in late (a stream behind the others), with times before the save's end, go into
        // the next save rather than none; a stream with none in the range, after its newest frame. A clip moves no
        // end.
        var streamEnds: [(name: String, end: Int64)] = []
        if case .success = result, !entry.isClip {
            for stream in entry.target.streams {
                let newest = stream.clock.flatMap { clock in
                    ((try? stream.newestPTS()) ?? nil).map { clock.recorderTime(ofPTS: $0) }
                }
                let after = (lastWritten[stream.name] ?? newest).map { $0 + 1 } ?? entry.object.toNanoseconds
                streamEnds.append((stream.name, min(entry.object.toNanoseconds, after)))
            }
        }
        // Where the range lost frames: the file holds none of them, and the save says so. Gaps that cannot be read
        // (the index failing) leave the losses unknown, said with why, never an empty list: the file is kept.
        var lost: [GapObject]?
        var lostUnknown: String?
        if case .success = result {
            let sources: [ClipSource] =
                switch entry.target {
                case .stored(let row, let store): [.store(store, stream: row)]
                case .one, .all: entry.target.streams.map(entry.source)
                }
            do {
                let gaps = try StreamSet(sources).lostGaps(in: range).map(GapObject.init)
                let deleted =
                    entry.followsLastSave ? try Self.deletedSinceLastSave(entry.target.streams, range: range) : []
                lost = deleted + gaps
            } catch {
                lostUnknown = "\(error)"
            }
        }
        var finished: SaveObject?
        var movedEnds: [(name: String, before: Int64?, after: Int64)] = []
        let holds: [RetentionHold] = state.withAnnotatedLock { state in
            guard var entry = state.entries[id] else { return [] }
            switch result {
            case .success(let summary):
                entry.fileIdentities = entry.object.files.map(FileIdentity.init(path:))
                entry.object.state = .done
                entry.object.frames = summary.writtenFrames
                entry.object.bytes = summary.bytes
                entry.object.repeatedFrames = summary.filledFrames
                entry.object.lost = lost
                entry.object.lostUnknown = lostUnknown
                if entry.exportFormat == .matroska && entry.target.streams.count > 1 {
                    entry.object.tracks = entry.target.streams.map(\.name).filter {
                        summary.lastTimestampByTrack[$0] != nil
                    }
                }
                entry.object.firstPTSNanoseconds = summary.firstPTSNanoseconds
                entry.object.lastPTSNanoseconds = summary.lastPTSNanoseconds
                entry.object.progress = 1
                for (name, written) in streamEnds {
                    let before = state.lastSavedEnd[name]
                    let end = max(before ?? .min, written)
                    state.lastSavedEnd[name] = end
                    movedEnds.append((name, before, end))
                }
                entry.movedEnds = movedEnds
            case .failure(let error):
                entry.object.state = error is Cancelled ? .cancelled : .failed
                entry.object.files = []
                if !(error is Cancelled) { entry.object.error = APIError(error).detail }
            }
            state.exporting -= 1
            let holds = entry.holds
            entry.holds = []
            state.entries[id] = entry
            finished = entry.object
            return holds
        }
        for hold in holds { recorder.store?.removeHold(hold) }
        for pin in entry.allPins { pin.release() }
        storeLastSavedEnds(movedEnds.map { ($0.name, $0.after) })
        if let finished { events.publish("save", finished) }
        signalChange()
        if case .failure(let error) = result, error is Cancelled { return }
        onFinish(result, finished, entry.isClip)
    }

    /// The files a save to `path` writes: one, or for `all` (also of one recorded stream of a store of several) one
    /// per stream, `NAME.STREAM.EXT`, in formats with a single track.
    static func files(for path: String, target: Target, format: ExportFormat) -> [String] {
        if case .all(let streams) = target, format != .matroska {
            return streams.map { StreamSet.fileName(for: path, stream: $0.name) }
        }
        return [path]
    }

    /// `path` as two requests naming one file compare: absolute, `.` and `..` resolved, and symbolic links followed
    /// as the export follows them (its directory's, and the file's own, to a file that may not exist yet).
    private static func samePath(_ path: String) -> String {
        var url = URL(fileURLWithPath: path).standardizedFileURL
        // A link to a link…: followed a few times at most (a loop is left as it is: the export fails on it).
        for _ in 0..<8 {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: url.path) else { break }
            url = URL(fileURLWithPath: target, relativeTo: url.deletingLastPathComponent()).standardizedFileURL
        }
        let directory = url.deletingLastPathComponent().path
        guard let real = realpath(directory, nil) else { return url.path }
        defer { free(real) }
        return URL(fileURLWithPath: String(cString: real)).appendingPathComponent(url.lastPathComponent).path
    }

    /// Writes a save of one stream: the pinned pre-roll first (memory only), then what came after it.
    private func exportOne(
        _ entry: Entry, source: ClipSource, stream: StreamDescription, range: Range<Int64>, path: String
    ) throws -> ExportSummary {
        let id = entry.object.id
        let clock = try source.clock()
        let ptsRange = clock.ptsRange(range)
        let expected = max(1, source.framesAtMost(in: ptsRange))
        try source.requireFrames(in: ptsRange)
        let staging = try StagedExport(.path(path), fileSystem: POSIXFileSystem())
        do {
            // Markers in the range become chapters (Matroska).
            var exporter = try makeExporter(
                format: entry.exportFormat, stream: stream, destination: staging.writtenDestination,
                quality: entry.quality, chapters: source.chapters(in: ptsRange))
            var count = 0
            let write = { (view: FrameView) throws -> Bool in
                if count % 8 == 0, self.state.withAnnotatedLock({ $0.entries[id]?.cancelRequested ?? false }) {
                    throw Cancelled()
                }
                try exporter.write(view)
                count += 1
                if count % 8 == 0 {
                    self.state.withAnnotatedLock { state in
                        state.entries[id]?.object.frames = count
                        state.entries[id]?.object.progress = min(0.99, Double(count) / expected)
                    }
                }
                return true
            }
            try source.frames(in: ptsRange, write)
            return try staging.complete(exporter.finish())
        } catch {
            throw staging.abandon(after: error)
        }
    }
}

/// A file's device and inode (nil fields when it could not be read): the same path may later hold another file.
struct FileIdentity: Hashable {
    var device: UInt64?
    var inode: UInt64?
    /// The size and the kernel's change time: a file made later under the path can get the same inode number (its
    /// file system reuses them), never the same change time.
    var size: Int64?
    var changed: timespec?

    init(path: String) {
        var info = stat()
        self.init(stat(path, &info) == 0 ? info : nil)
    }

    init(descriptor: Int32) {
        var info = stat()
        self.init(fstat(descriptor, &info) == 0 ? info : nil)
    }

    /// A regular file's identity; none (nil fields) for anything else, which is never the export it was.
    private init(_ info: stat?) {
        guard let info, info.st_mode & S_IFMT == S_IFREG else { return }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        changed = info.st_ctim
    }

    static func == (a: FileIdentity, b: FileIdentity) -> Bool {
        a.device != nil && a.device == b.device && a.inode == b.inode && a.size == b.size
            && a.changed?.tv_sec == b.changed?.tv_sec && a.changed?.tv_nsec == b.changed?.tv_nsec
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(device)
        hasher.combine(inode)
    }
}
