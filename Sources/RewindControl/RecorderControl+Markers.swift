import Foundation
import RewindCapture
import RewindCore
import RewindQuery
import SegmentStore

extension RecorderControl {
    /// The store markers live in; a recorder with spill `off` keeps none.
    private func markerStore() throws -> SegmentStore {
        guard let store = recorder.store else {
            throw APIError(
                .conflict,
                "markers are kept in the store, and this recorder records without one (spill off): record with a "
                    + "store to mark; 'rewind unmark' changes a store no recorder runs on")
        }
        return store
    }

    /// Adds a marker at `at` (recorder time; default: now) to the stream named, or to every stream (`all`, or
    /// none given): one row per stream, each at its own pts, holding `hold` against retention when asked.
    func addMarkers(_ request: MarkerRequest) throws -> MarkerList {
        let store = try markerStore()
        let target = try target(request.stream)
        let label: String
        switch MarkerRequest.checkedLabel(request.label) {
        case .success(let checked): label = checked
        case .failure(let problem): throw APIError(.badRequest, problem.message)
        }
        let at: Int64
        if let text = request.at {
            var time = try momentTime(text, field: "at")
            // Times are shown to the millisecond: the store's start as `info` prints it (its wall-clock time cut to
            // the millisecond) is its start.
            if time < 0 && time > -1_000_000 { time = 0 }
            at = time
            // Recorder time starts at the store's first frame: a marker before it marks nothing (`-5s` is not "5 s
            // ago", which a wall-clock time says).
            guard at >= 0 else {
                throw APIError(
                    .badRequest,
                    "at: \(formatSecondsApart(at, 0).0) lies before recorder time 0, where the store's recording began: "
                        + "a marker's time is recorder time (such as 12.5s) or a wall-clock time (such as 14:03:07)")
            }
        } else {
            guard let clock = book.clock else { throw APIError(.empty, "nothing is recorded yet: no time to mark") }
            at = clock
        }
        var hold: Range<Int64>?
        if let requested = request.hold {
            func length(_ text: String?, _ field: String) throws -> Int64 {
                guard let text else { return 0 }
                return try duration(text, field: "hold.\(field)")
            }
            let before = try length(requested.before, "before")
            let after = try length(requested.after, "after")
            guard before + after > 0 else { throw APIError(.badRequest, "a hold needs before or after above 0s") }
            hold = (at - before)..<(at + after + 1)
        }
        let members = target.streams.compactMap { stream in stream.clock.map { (stream.name, $0) } }
        guard !members.isEmpty else { throw APIError(.empty, "nothing is recorded yet: no time to mark") }
        func add() throws -> MarkerList {
            var markers: [MarkerBody] = []
            for (name, clock) in members {
                let row = try store.addMarker(
                    streamName: name, at: clock.pts(atRecorderTime: at), label: label, hold: hold.map(clock.ptsRange))
                // Under on-evict the held frames in memory would reach the disk only when evicted: a process killed
                // before then would lose what the hold said it kept.
                if let held = row.hold { recorder.stream(named: name)?.writeAtOnce(through: held.upperBound - 1) }
                let marker = MarkerBody(row, stream: name, clock: clock)
                events.publish("marker", marker)
                markers.append(marker)
            }
            return MarkerList(markers: markers)
        }
        guard let hold else { return try add() }
        // Whether a hold fits and keeping it are one step: two holds checked at once would each fit alone.
        return try holdAdmission.withAnnotatedLock { _ in
            for stream in target.streams {
                guard let clock = stream.clock else { continue }
                try checkHoldKeepsSomething(hold, clock: clock, store: store, stream: stream)
            }
            try checkHoldsFit(
                Dictionary(members.map { ($0.0, $0.1.ptsRange(hold)) }, uniquingKeysWith: { first, _ in first }),
                store: store)
            return try add()
        }
    }

    /// Refuses a hold that ends before the oldest frame the stream has on disk (in memory, while nothing is on disk
    /// yet), or lies in a hole retention left: retention deleted all of it, and the hold would keep nothing while
    /// saying it did.
    private func checkHoldKeepsSomething(
        _ hold: Range<Int64>, clock: StreamClock, store: SegmentStore, stream: RecorderStream
    ) throws {
        let summary = try store.summary(streamName: stream.name)
        let memory = stream.memoryStatistics
        let held = clock.ptsRange(hold)
        // All of it before the newest frame on disk, and none of it there: retention deleted it after a hold kept
        // older frames (a hole; what the ring still has of it is written no more), or the stream had no frames there.
        func onDisk() throws -> Bool {
            guard let row = try store.index.stream(named: stream.name) else { return false }
            var found = false
            try store.index.frames(streamID: row.id, in: held) { _ in
                found = true
                return false
            }
            return found
        }
        // Frames the ring still has of it are not kept by a hold (retention deleted their disk copies): a save
        // keeps them, while the ring does.
        let inMemory =
            memory.firstPTSNanoseconds.flatMap { first in
                held.upperBound > first
                    ? " (the ring still holds frames of it, from \(formatSeconds(clock.recorderTime(ofPTS: first))): "
                        + "save them instead while it does)" : nil
            } ?? ""
        if let first = summary.firstPTS, let newest = summary.lastPTS, held.upperBound <= newest,
            held.upperBound > first, try !onDisk()
        {
            throw APIError(
                .conflict,
                "nothing of the hold [\(formatSeconds(hold.lowerBound)), \(formatSeconds(hold.upperBound))) of "
                    + "'\(stream.name)' is stored: the stream has no frames on disk there (retention deleted them, or "
                    + "it was not recording)\(inMemory); hold a range that holds frames")
        }
        // The oldest frame a hold can keep: on disk (the ring's older frames, when it has any, are past keeping).
        guard let oldestOnDisk = summary.firstPTS ?? memory.firstPTSNanoseconds, held.upperBound <= oldestOnDisk
        else { return }
        let kept = clock.recorderTime(ofPTS: oldestOnDisk)
        throw APIError(
            .conflict,
            "nothing of the hold [\(formatSeconds(hold.lowerBound)), \(formatSeconds(hold.upperBound))) of '\(stream.name)' "
                + "is stored: its oldest frame \(summary.firstPTS == nil ? "" : "on disk ")is at \(formatSeconds(kept)) "
                + "(the stream starts there, or retention deleted what came before)\(inMemory); hold a later range")
    }

    /// Refuses new holds (`added`: pts ranges by stream) when they, with every hold already kept, would need more than
    /// the segment files can take (``SegmentStore/segmentCapacity()``: the disk budget, or without one what the disk
    /// has above the free-space floor): it covers every stream's segments together, so the holds of all streams count.
    ///
    /// - Parameter save: whether the new holds are a save's range, held while it waits for its post-roll (the
    ///   message then says what to change for a save).
    func checkHoldsFit(_ added: [String: Range<Int64>], store: SegmentStore, save: Bool = false) throws {
        guard let capacity = try store.segmentCapacity() else { return }
        let budget = capacity.bytes
        // Everything retention must keep already: markers' holds, and the ranges of saves waiting for their
        // post-roll or exporting.
        let saves = book.pendingRanges()
        /// What `holds` of `stream` need: what is stored of them and what is still to be recorded.
        func bytes(_ holds: [Range<Int64>], of stream: String) throws -> Int64 {
            guard !holds.isEmpty else { return 0 }
            return try store.heldBytes(streamName: stream, ranges: holds)
                + bytesToCome(in: holds, store: store, stream: stream)
        }
        let rows = try store.streams()
        var needed: Int64 = 0
        for row in rows {
            let existing = try store.markers(streamName: row.name).compactMap(\.hold) + (saves[row.name] ?? [])
            needed += try bytes(existing + (added[row.name].map { [$0] } ?? []), of: row.name)
        }
        let reserve = try recordingReserve(store: store)
        guard needed + reserve <= budget else {
            let bound =
                (capacity.byFreeSpace
                    ? "the disk can give the store above its free-space floor (\(budget) bytes: the segment files and "
                        + "the space free above the floor)"
                    : "the disk budget of \(budget) bytes")
                + (reserve > 0
                    ? " less the \(reserve) bytes the recorded streams keep for what they record (two segments each)"
                    : "")
            // What takes the room (each part alone; overlapping parts share bytes): said, with what can free it.
            var (own, markers, pending): (Int64, Int64, Int64) = (0, 0, 0)
            for row in rows {
                let held = try store.markers(streamName: row.name).compactMap(\.hold)
                own += try bytes(added[row.name].map { [$0] } ?? [], of: row.name)
                markers += try bytes(held, of: row.name)
                pending += try bytes(saves[row.name] ?? [], of: row.name)
            }
            let names = book.pendingNames()
            let inProgress = names.map { "\($0.name) \($0.state.rawValue)" }.joined(separator: ", ")
            let parts =
                "\(needed) bytes with the holds already kept (of every stream), more than \(bound); of them its own "
                + "range \(own), markers' holds \(markers)"
                + (names.isEmpty ? "" : ", saves and clips in progress \(pending) (\(inProgress))")
                + (own + markers + pending > needed ? " (each alone: segments they share count once in the total)" : "")
            let saveAdvice =
                names.isEmpty
                ? "" : ", or wait for or cancel " + (names.count == 1 ? names[0].name : "those saves and clips")
            if save {
                throw APIError(
                    .conflict,
                    "the save cannot be held on disk while it waits for its post-roll: it needs \(parts); save a "
                        + "shorter range (less after)" + (markers > 0 ? ", delete a marker" : "") + saveAdvice)
            }
            throw APIError(
                .conflict,
                "the hold cannot fit: it needs \(parts); hold less" + (markers > 0 ? ", delete a marker" : "")
                    + saveAdvice)
        }
    }

    /// What retention will keep of `holds` of one stream beyond what is stored now: the segments still to be written
    /// that the holds reach into, whole (retention keeps or deletes whole segments), each the size of the stream's
    /// segments (``segmentBytes(of:pace:store:)``), the open one less what its file holds already when a hold reaches
    /// into that (which the stored part counts). Counting only the stretch a hold covers, holds of less than a
    /// segment, each fitting by its own bytes, kept more than `--disk`, and retention deleted every segment after them
    /// as soon as it was sealed.
    private func bytesToCome(in holds: [Range<Int64>], store: SegmentStore, stream: String) throws -> Int64 {
        guard let pace = try recordingPace(of: stream, store: store), pace.rate > 0 else { return 0 }
        let last = pace.last
        let future = holds.filter { $0.upperBound > last }.map { max(last, $0.lowerBound)..<$0.upperBound }
        guard !future.isEmpty else { return 0 }
        // A stream no writer writes (a camera of an earlier run) has nothing more to come.
        guard let written = segmentBytes(of: stream, pace: pace, store: store), written.bytes > 0 else { return 0 }
        // Segments counted from the open one (0), each `span` nanoseconds long.
        let open = try store.segments(streamName: stream).last { $0.state == .open }
        let start = open?.firstPTS ?? last
        let span = written.span
        let indices = future.map { stretch in
            (
                (Double(stretch.lowerBound - start) / span).rounded(.down),
                (Double(stretch.upperBound - 1 - start) / span).rounded(.down)
            )
        }.sorted { $0.0 < $1.0 }
        var segments: Double = 0
        var reached = -Double.infinity
        for (low, high) in indices where high > reached {
            segments += high - max(low, reached + 1) + 1
            reached = high
        }
        var bytes = segments * Double(written.bytes)
        // The open segment's file so far is stored bytes, which a hold reaching into its frames counts already.
        if let open, let first = open.firstPTS, indices.contains(where: { $0.0 <= 0 }),
            holds.contains(where: { $0.lowerBound <= last && $0.upperBound > first })
        {
            bytes -= Double(store.fileBytes(of: open))
        }
        return Int64(min(max(0, bytes), 1e18))
    }

    /// How fast a stream fills the disk: its segment files' bytes per nanosecond of the frames they hold, the time
    /// from one frame to the next, and the pts from which it is still to be written.
    struct RecordingPace {
        var rate: Double
        var interval: Double
        var last: Int64
    }

    /// What one segment of `stream` takes on disk, and how long it spans: the frames that start within the store's
    /// segment duration, whole (at 30 fps a 250 ms segment holds 8 frames, not 7.5), or, when that is more, the size
    /// its segments are sealed at (``SegmentStore/segmentSealBytes(ofStream:)``) and the frame that takes the file
    /// past it; nil when the stream has no writer. Reserves and holds counted by the fractional duration fell short
    /// by a frame per segment, and at the stop retention deleted a held stream's last segments to stay in budget.
    private func segmentBytes(of stream: String, pace: RecordingPace, store: SegmentStore)
        -> (bytes: Int64, span: Double)?
    {
        guard let largest = store.segmentSealBytes(ofStream: stream) else { return nil }
        let duration = Double(store.options.segmentMaxNanoseconds)
        guard pace.interval > 0 else {
            let bytes = min(pace.rate * duration, Double(largest))
            return (Int64(bytes.rounded(.up)), bytes / pace.rate)
        }
        let frame = pace.rate * pace.interval
        let frames = min((duration / pace.interval).rounded(.up), Double(store.options.segmentMaxFrames))
        // Frames to come differ from those stored (a few tenths of a percent from segment to segment in a steady
        // scene, more when it changes): a sixteenth more than the newest segments' fastest rate.
        let bytes = min(frames * frame * 17 / 16, Double(largest) + frame)
        return (Int64(min(bytes.rounded(.up), 1e18)), bytes / pace.rate)
    }

    /// How fast `stream` fills the disk (``RecordingPace``): the file bytes per nanosecond of the fastest of its
    /// newest segments (each over its own span: the store's first and last frames would span what retention deleted
    /// between holds, and the rate fall with each deletion); before the index has two frames of it (the spill stage commits its rows in
    /// batches), the ring's raw bytes per nanosecond and a frame record's headers, which stored frames never exceed
    /// by much. Nil before either can say.
    private func recordingPace(of stream: String, store: SegmentStore) throws -> RecordingPace? {
        let summary = try store.summary(streamName: stream)
        if let newest = summary.lastPTS {
            var rate: Double = 0
            var (covered, intervals): (Double, Double) = (0, 0)
            let recent = try store.segments(streamName: stream).filter { $0.frameCount > 1 }
                .sorted { ($0.lastPTS ?? 0) < ($1.lastPTS ?? 0) }.suffix(4)
            for segment in recent {
                guard let first = segment.firstPTS, let last = segment.lastPTS, last > first else { continue }
                // Its frames cover one frame more than first to last.
                let span = Double(last - first) * Double(segment.frameCount) / Double(segment.frameCount - 1)
                rate = max(rate, Double(store.fileBytes(of: segment)) / span)
                covered += Double(last - first)
                intervals += Double(segment.frameCount - 1)
            }
            if rate > 0 { return RecordingPace(rate: rate, interval: covered / intervals, last: newest) }
        }
        if let memory = recorder.streams.first(where: { $0.name == stream })?.memoryStatistics,
            let first = memory.firstPTSNanoseconds, let newest = memory.lastPTSNanoseconds, newest > first,
            memory.frames > 1
        {
            // The ring's slab bytes cover `frames` frames; its pts span, one frame fewer.
            let interval = Double(newest - first) / Double(memory.frames - 1)
            let record = SegmentFormat.recordHeaderLength + SegmentFormat.footerEntryLength
            let rate = (Double(memory.bytesInRing) / Double(memory.frames) + Double(record)) / interval
            return RecordingPace(rate: rate, interval: interval, last: summary.lastPTS ?? first)
        }
        return nil
    }

    /// The disk every stream the recorder records keeps for itself, whatever the holds take: two segments of it (the
    /// one being written and the last one sealed, each ``segmentBytes(of:pace:store:)``), so that holds of one
    /// stream, each fitting when it was made, cannot leave retention deleting every other stream's frames as soon as
    /// their segments are sealed.
    func recordingReserve(store: SegmentStore) throws -> Int64 {
        var reserve: Int64 = 0
        for stream in recorder.streams {
            guard let pace = try recordingPace(of: stream.name, store: store),
                let segment = segmentBytes(of: stream.name, pace: pace, store: store)
            else { continue }
            reserve += 2 * segment.bytes
        }
        return reserve
    }

    /// The markers of every stream whose time lies in [`from`, `to`) (recorder time) or whose hold overlaps it, by
    /// time.
    func markers(query: [String: String]) throws -> MarkerList {
        let store = try markerStore()
        let range: Range<Int64>
        if let from = query["from"], let to = query["to"] {
            do {
                range = try recorderRange(from: from, to: to)
            } catch let error as APIError where error.code == .empty {
                return MarkerList(markers: [])  // beyond every time a marker can have
            }
        } else {
            let from = try query["from"].map { try recorderTime($0, field: "from") } ?? .min
            let to = try query["to"].map { try recorderTime($0, field: "to") } ?? .max
            guard from < to else { throw APIError(.badRequest, "to must be after from") }
            range = from..<to
        }
        return MarkerList(markers: try MarkerBody.list(in: store, range: range))
    }

    /// Deletes a marker (and its hold).
    func removeMarker(_ id: Int64) throws -> MarkerBody {
        let store = try markerStore()
        guard let row = try store.removeMarker(id: id) else {
            throw APIError(.notFound, "no marker \(id)")
        }
        let marker = try MarkerBody(row, in: store)
        events.publish("marker_removed", marker)
        return marker
    }
}

extension MarkerBody {
    /// A marker row as the API shows it: times on the recorder clock, through its stream's `clock`.
    init(_ row: MarkerRow, stream: String, clock: StreamClock) {
        self.init(
            id: row.id, atNanoseconds: clock.recorderTime(ofPTS: row.atNanoseconds), label: row.label,
            stream: stream, holdFromNanoseconds: row.hold.map { clock.recorderTime(ofPTS: $0.lowerBound) },
            holdToNanoseconds: row.hold.map { clock.recorderTime(ofPTS: $0.upperBound) })
    }

    /// A marker row of `store` (one just removed too: its stream stays) as the API shows it.
    ///
    /// - Throws: store errors.
    public init(_ row: MarkerRow, in store: SegmentStore) throws {
        let stream = try store.streams().first { $0.id == row.streamID }
        self.init(row, stream: stream?.name ?? "", clock: try stream.flatMap { try store.clock(of: $0) } ?? .identity)
    }

    /// The markers of every stream of `store` whose time lies in `range` (recorder time) or whose hold overlaps it,
    /// as the API shows them, in time order: what `GET /v1/markers`, `rewind markers` and `rewind info` list.
    ///
    /// - Throws: store errors.
    /// - Complexity: O(streams × (log n + markers in the range + markers that hold a range)).
    public static func list(in store: SegmentStore, range: Range<Int64> = Int64.min..<Int64.max) throws
        -> [MarkerBody]
    {
        var markers: [MarkerBody] = []
        for row in try store.streams() {
            let clock = try store.clock(of: row) ?? .identity
            for marker in try store.markers(streamName: row.name, touching: clock.ptsRange(range)) {
                markers.append(MarkerBody(marker, stream: row.name, clock: clock))
            }
        }
        return markers.sorted { ($0.atNanoseconds, $0.id) < ($1.atNanoseconds, $1.id) }
    }
}

/// Turns a recorder's counters into events, read every 250 ms on the control's thread: `drops` (at most once a
/// second), `pressure`, `gap`, `segment` (sealed), `disk_error` and `input_failed`.
struct CounterWatcher: Sendable {
    let recorder: Recorder
    /// What was last published, per stream (in the recorder's order).
    private var seen: [Seen]
    private var ticks = 0

    private struct Seen {
        let stream: RecorderStream
        var drops: [String: Int] = [:]
        var lastDropsEvent = ContinuousClock.now - .seconds(2)
        var pressure = MemoryPressure.normal
        var gaps = 0
        /// ``RecorderStatistics/gaps`` plus ``RecorderStatistics/gapExtensions`` at the last look.
        var gapChanges = 0
        /// The end each recent gap was last sent with, by its start (pts): a gap whose end moved since is sent again.
        var sentGapEnds: [Int64: Int64] = [:]
        var lastError: String?
        var inputError: String?
        /// The highest id of a sealed segment of the stream seen, while someone listened (nil: nobody did at the
        /// last look, so the next look only notes where it is).
        var highestSealedID: Int64?
        /// ``SegmentStore/retentionGapChanges(of:)`` at the last look, and the `retention` gap rows as they stood
        /// (start and end, recorder time): a row new or widened since is sent.
        var retentionChanges = 0
        var retentionGaps: Set<[Int64]> = []
    }

    init(recorder: Recorder) {
        self.recorder = recorder
        seen = recorder.streams.map { stream in
            let statistics = stream.statistics
            var seen = Seen(
                stream: stream, drops: statistics.drops.keyedByRawValue, pressure: stream.memoryStatistics.pressure,
                gaps: statistics.gaps, gapChanges: statistics.gaps + statistics.gapExtensions,
                lastError: statistics.lastError, inputError: stream.inputError)
            if let store = recorder.store {
                seen.retentionChanges = store.retentionGapChanges(of: stream.name)
                seen.retentionGaps = Self.retentionGaps(of: stream, in: store)
            }
            return seen
        }
    }

    /// The `retention` gap rows of `stream` in `store`, as start and end on the recorder clock.
    private static func retentionGaps(of stream: RecorderStream, in store: SegmentStore) -> Set<[Int64]> {
        let clock = stream.clock ?? .identity
        let rows = ((try? store.gaps(streamName: stream.name)) ?? []).filter { $0.reason == .retention }
        return Set(
            rows.map { [clock.recorderTime(ofPTS: $0.startNanoseconds), clock.recorderTime(ofPTS: $0.endNanoseconds)] })
    }

    private struct DropsEvent: Encodable {
        var stream: String
        var drops: [String: Int]
    }

    private struct PressureEvent: Encodable {
        var stream: String
        var level: String
    }

    private struct SegmentEvent: Encodable {
        var stream: String
        var file: String
        var frames: Int
        var firstPTSNanoseconds: Int64?
        var lastPTSNanoseconds: Int64?

        enum CodingKeys: String, CodingKey {
            case stream, file, frames
            case firstPTSNanoseconds = "first_pts_ns"
            case lastPTSNanoseconds = "last_pts_ns"
        }
    }

    private struct DiskErrorEvent: Encodable {
        var stream: String
        var message: String
    }

    private struct InputFailedEvent: Encodable {
        var stream: String
        var message: String
        var lastPTSNanoseconds: Int64?

        enum CodingKeys: String, CodingKey {
            case stream, message
            case lastPTSNanoseconds = "last_pts_ns"
        }
    }

    /// Publishes what changed since the last call; `final` (the recorder stops) looks at the seals now too, which
    /// are otherwise looked at every fourth call.
    mutating func publishChanges(to events: EventHub, final: Bool = false) {
        ticks += 1
        for index in seen.indices { publishChanges(of: &seen[index], to: events, final: final) }
    }

    private func publishChanges(of seen: inout Seen, to events: EventHub, final: Bool) {
        let stream = seen.stream.name
        let statistics = seen.stream.statistics
        let currentDrops = statistics.drops.keyedByRawValue
        if currentDrops != seen.drops, ContinuousClock.now - seen.lastDropsEvent >= .seconds(1) {
            seen.drops = currentDrops
            seen.lastDropsEvent = .now
            events.publish("drops", DropsEvent(stream: stream, drops: currentDrops))
        }
        let level = seen.stream.memoryStatistics.pressure
        if level != seen.pressure {
            seen.pressure = level
            events.publish("pressure", PressureEvent(stream: stream, level: level.name))
        }
        if statistics.lastError != seen.lastError, let message = statistics.lastError {
            events.publish("disk_error", DiskErrorEvent(stream: stream, message: message))
        }
        seen.lastError = statistics.lastError
        if seen.inputError == nil, let message = seen.stream.inputError {
            seen.inputError = message
            events.publish(
                "input_failed",
                InputFailedEvent(
                    stream: stream, message: message, lastPTSNanoseconds: (try? seen.stream.newestPTS()) ?? nil))
        }
        guard let store = recorder.store else { return }
        let gapChanges = statistics.gaps + statistics.gapExtensions
        if gapChanges != seen.gapChanges {
            let added = max(0, statistics.gaps - seen.gaps)
            seen.gaps = statistics.gaps
            seen.gapChanges = gapChanges
            if let rows = try? store.gaps(streamName: stream) {
                // Gap rows are in the stream's pts; events speak recorder time, like every `*_ns` of the API.
                let clock = seen.stream.clock ?? .identity
                // The rows recorded since the last look, and recent ones sent before whose end moved since (a
                // stretch that went on): each sent with its end as it is now, so the last event of a stream's gap
                // (by its start) is the gap as it stands.
                let recent = rows.suffix(added + 8)
                var sent: [Int64: Int64] = [:]
                for (offset, gap) in recent.enumerated() {
                    let isNew = offset >= recent.count - added
                    let before = seen.sentGapEnds[gap.startNanoseconds]
                    if isNew || (before != nil && before != gap.endNanoseconds) {
                        events.publish("gap", GapObject(stream: stream, gap.onRecorderClock(clock)))
                    }
                    if isNew || before != nil { sent[gap.startNanoseconds] = gap.endNanoseconds }
                }
                seen.sentGapEnds = sent
            }
        }
        // Holes retention left behind held segments (recorded by the store, not the recorder): each new or widened
        // row sent as it stands.
        let retentionChanges = store.retentionGapChanges(of: stream)
        if retentionChanges != seen.retentionChanges {
            seen.retentionChanges = retentionChanges
            let now = Self.retentionGaps(of: seen.stream, in: store)
            for gap in now.subtracting(seen.retentionGaps).sorted(by: { $0[0] < $1[0] }) {
                events.publish(
                    "gap",
                    GapObject(
                        stream: stream, startNanoseconds: gap[0], endNanoseconds: gap[1],
                        reason: LossReason.retention.rawValue))
            }
            seen.retentionGaps = now
        }
        // Seals, by segment id (a count would miss seals while retention deletes segments): one event each, when it
        // happens. Nobody listening, nothing is read; a client that arrives then gets only seals after it came.
        guard ticks % 4 == 0 || final else { return }
        guard events.count > 0 else {
            seen.highestSealedID = nil
            events.notePublishedSeals(stream: stream, upTo: nil)
            return
        }
        guard let sealed = try? Self.sealedSegments(of: stream, in: store) else { return }
        // From the last look, or, the first time clients listen, from where the earliest of them came in: each
        // client gets the seals after it came (its own mark), none missed between its coming and this look.
        if let known = seen.highestSealedID ?? events.lowestSealedBefore(stream: stream) {
            for row in sealed where row.id > known {
                events.publish(
                    "segment",
                    SegmentEvent(
                        stream: stream, file: row.fileName, frames: row.frameCount, firstPTSNanoseconds: row.firstPTS,
                        lastPTSNanoseconds: row.lastPTS)
                ) { row.id > ($0.sealedBefore[stream] ?? 0) }
            }
        }
        seen.highestSealedID = max(seen.highestSealedID ?? 0, sealed.last?.id ?? 0)
        events.notePublishedSeals(stream: stream, upTo: seen.highestSealedID)
    }

    /// The sealed segments of `stream` in `store`, by id (the order they were sealed in).
    static func sealedSegments(of stream: String, in store: SegmentStore) throws -> [SegmentRow] {
        try store.segments(streamName: stream).filter { $0.state == .sealed }.sorted { $0.id < $1.id }
    }
}

extension GapObject {
    /// The object of a gap row of `stream`, its times as the row has them (moved to the recorder clock first where
    /// the API speaks it).
    public init(stream: String, _ gap: GapRow) {
        self.init(
            stream: stream, startNanoseconds: gap.startNanoseconds, endNanoseconds: gap.endNanoseconds,
            reason: gap.reason.rawValue)
    }
}
