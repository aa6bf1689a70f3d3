import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import SegmentStore
import Synchronization

/// Several streams of one store or live recorder, queried and exported together on the recorder clock, the one
/// clock every stream of a store is mapped to (``StreamClock``): "the last 5 s" and a `--from/--to` range mean the
/// same instants for every stream.
///
/// One `.mkv` holds every stream, a video track each (its own size, format, colour and exact timestamps on the
/// recorder clock, frames interleaved in time order); `.y4m` and `.mp4` hold one stream each, so each stream goes to
/// its own file, `NAME.STREAM.EXT` (``fileName(for:stream:)``).
public struct StreamSet: Sendable {
    /// One stream of the set: its source and its place on the recorder clock.
    public struct Member: Sendable {
        /// Where the stream's frames come from.
        public var source: ClipSource
        /// Where its pts lie on the recorder clock.
        public var clock: StreamClock
        /// The stream's name in the store.
        public var name: String { source.streamName }
    }

    /// The streams, in the store's order.
    public let members: [Member]

    /// Makes a set of the given streams; each one's clock is read once.
    ///
    /// - Parameter sources: the streams, each a ``ClipSource``; at least one.
    /// - Throws: store errors.
    public init(_ sources: [ClipSource]) throws {
        precondition(!sources.isEmpty, "a stream set needs a stream")
        members = try sources.map { Member(source: $0, clock: try $0.clock()) }
    }

    /// Every stream of a live recorder.
    ///
    /// - Throws: store errors.
    public init(recorder: Recorder) throws {
        try self.init(recorder.streams.map { ClipSource.recorderStream($0) })
    }

    /// Every stream of a store on disk.
    ///
    /// - Throws: ``ClipError/noFrames(source:)`` for a store without streams; store errors.
    public init(store: SegmentStore) throws {
        let rows = try store.streams()
        guard !rows.isEmpty else { throw ClipError.noFrames(source: "store") }
        try self.init(rows.map { ClipSource.store(store, stream: $0) })
    }

    /// The first and last instants recorded by any stream, recorder time nanoseconds; nil when none holds a frame.
    ///
    /// - Throws: store errors.
    public func span() throws -> ClosedRange<Int64>? {
        var result: ClosedRange<Int64>?
        for member in members {
            guard let span = try member.source.span() else { continue }
            let first = member.clock.recorderTime(ofPTS: span.lowerBound)
            let last = member.clock.recorderTime(ofPTS: span.upperBound)
            result = result.map { min($0.lowerBound, first)...max($0.upperBound, last) } ?? first...last
        }
        return result
    }

    /// The last `duration` of the recording, up to the newest frame of any stream: `(newest − duration, newest]`,
    /// recorder time nanoseconds; nil when nothing is recorded.
    ///
    /// - Throws: store errors.
    public func lastRange(_ duration: Duration) throws -> Range<Int64>? {
        guard let span = try span() else { return nil }
        return Range(last: duration, endingAt: span.upperBound)
    }

    /// Turns a command-line time into recorder time (see ``ClipSource/resolve(_:)``), through the first stream
    /// holding frames.
    ///
    /// - Throws: ``ClipError/noFrames(source:)`` for a wall-clock time when no stream holds a frame.
    public func recorderTime(_ time: TimeSpec) throws -> Int64 {
        for member in members {
            if let span = try member.source.span() {
                return try ClipSource.recorderTime(time, clock: member.clock, span: span)
            }
        }
        return try ClipSource.recorderTime(time, clock: members[0].clock, span: nil)
    }

    /// The file a stream of an all-streams `.y4m` or `.mp4` export goes to: `clip.y4m` → `clip.front.y4m`.
    ///
    /// - Parameters:
    ///   - path: the path asked for.
    ///   - stream: the stream's name.
    public static func fileName(for path: String, stream: String) -> String {
        let slash = path.lastIndex(of: "/")
        guard let dot = path.lastIndex(of: "."), slash.map({ dot > $0 }) ?? true else { return path + "." + stream }
        return String(path[..<dot]) + "." + stream + String(path[dot...])
    }

    /// The streams with a frame in `range` (recorder time): those an export of the range writes.
    ///
    /// - Throws: store errors.
    public func members(withFramesIn range: Range<Int64>) throws -> [Member] {
        try members.filter { try $0.source.hasFrames(in: $0.clock.ptsRange(range)) }
    }

    /// Every stream's gaps where frames were lost that reach into `range` (recorder time), moved to the recorder
    /// clock, by start (``ClipSource/lostGaps(in:)`` of each).
    ///
    /// - Throws: store errors when a stream's gaps cannot be read: its losses are then unknown, never taken for none.
    public func lostGaps(in range: Range<Int64>) throws -> [(stream: String, gap: GapRow)] {
        try members.flatMap { member in
            try member.source.lostGaps(in: member.clock.ptsRange(range)).map {
                (member.name, $0.onRecorderClock(member.clock))
            }
        }.sorted { $0.gap.startNanoseconds < $1.gap.startNanoseconds }
    }

    /// Exports every stream's frames in `range` (recorder time): one `.mkv` with a track per stream, or for `.y4m`
    /// and `.mp4` a file per stream (``fileName(for:stream:)``; a stream without frames in the range gets none).
    ///
    /// - Parameters:
    ///   - range: recorder time nanoseconds, start inclusive, end exclusive.
    ///   - format: the file format.
    ///   - destination: a path; a descriptor only for `.mkv`.
    ///   - quality: how `.mp4` files are encoded (``ExportQuality``; the uncompressed formats ignore it).
    ///   - fileSystem: where the output files' system calls go.
    ///   - progress: called after each frame written with the count so far, of every stream; an error it throws
    ///     ends the export (partial files are removed) and is rethrown.
    /// - Returns: one summary per file written (for `.mkv`, one: frames of every track, first and last cluster
    ///   timestamps on the recorder clock).
    /// - Throws: ``ClipError/empty(range:held:)`` when no stream has a frame in the range (nothing is written);
    ///   ``ExportError`` and store errors (a partial file is removed).
    public func export(
        range: Range<Int64>, format: ExportFormat, to destination: ExportDestination, quality: ExportQuality = .fast,
        fileSystem: any FileSystem = POSIXFileSystem(), progress: ((Int) throws -> Void)? = nil
    ) throws -> [ExportSummary] {
        try exportFiles(
            range: range, format: format, to: destination, quality: quality, fileSystem: fileSystem,
            progress: progress
        ).map(\.summary)
    }

    /// The first and last frames of an export's files on the recorder clock: the earliest first and the latest
    /// last over the files; nil when they hold no frame.
    ///
    /// - Parameter files: what ``exportFiles(range:format:to:quality:fileSystem:progress:)`` returned.
    package static func recorderTimeSpan(of files: [(member: Member?, summary: ExportSummary)]) -> ClosedRange<Int64>? {
        var span: ClosedRange<Int64>?
        for (member, summary) in files {
            guard let first = summary.firstPTSNanoseconds, let last = summary.lastPTSNanoseconds else { continue }
            let times = member.map { ($0.clock.recorderTime(ofPTS: first), $0.clock.recorderTime(ofPTS: last)) }
            let (from, to) = times ?? (first, last)
            span = span.map { min($0.lowerBound, from)...max($0.upperBound, to) } ?? from...to
        }
        return span
    }

    /// ``export(range:format:to:quality:fileSystem:progress:)``, each summary with the stream whose file it is
    /// (nil for the one `.mkv`, whose first and last timestamps are already recorder time).
    package func exportFiles(
        range: Range<Int64>, format: ExportFormat, to destination: ExportDestination, quality: ExportQuality = .fast,
        fileSystem: any FileSystem = POSIXFileSystem(), progress: ((Int) throws -> Void)? = nil
    ) throws -> [(member: Member?, summary: ExportSummary)] {
        guard !range.isEmpty else { throw ClipError.badRange(from: range.lowerBound, to: range.upperBound) }
        let holding = try members(withFramesIn: range)
        guard !holding.isEmpty else {
            // Refused either way: gaps that cannot be read leave out only the words on lost frames.
            throw ClipError.empty(range: range, held: try span(), lost: ((try? lostGaps(in: range)) ?? []).map(\.gap))
        }
        switch format {
        case .matroska:
            let staging = try StagedExport(destination, fileSystem: fileSystem)
            do {
                let summary = try exportMatroska(
                    holding, range: range, to: staging.writtenDestination, fileSystem: fileSystem,
                    progress: progress)
                return [(nil, try staging.complete(summary))]
            } catch {
                throw staging.abandon(after: error)
            }
        case .y4m, .mp4:
            guard case .path(let path) = destination else {
                throw ExportError(
                    destination: destination.description,
                    reason: .system(
                        action: "write several streams to one descriptor (use .mkv)", Errno(rawValue: EINVAL)))
            }
            // All the files or none: each stream's file is written under a temporary name, and they are renamed
            // into place together once every one is complete, so a failure (or a cancel) leaves every earlier file
            // of those names as it was.
            var written = 0
            let stagings = try holding.map { member in
                try StagedExport(.path(Self.fileName(for: path, stream: member.name)), fileSystem: fileSystem)
            }
            var summaries: [(member: Member?, summary: ExportSummary)] = []
            do {
                for (member, staging) in zip(holding, stagings) {
                    let before = written
                    let summary = try member.source.export(
                        range: member.clock.ptsRange(range), format: format, to: staging.writtenDestination,
                        quality: quality, fileSystem: fileSystem
                    ) { count, _ in
                        written = before + count
                        try progress?(written)
                    }
                    summaries.append((member, summary))
                }
                return try zip(summaries, stagings).map { written, staging in
                    (written.member, try staging.complete(written.summary))
                }
            } catch {
                // Every partial file goes; the error names the requested file, not its temporary name.
                var named = error
                for staging in stagings { named = staging.abandon(after: named) }
                throw named
            }
        }
    }

    /// Writes the streams into one Matroska file, a track each, frames in recorder-time order: each stream is read
    /// on a thread of its own and hands its frames over one at a time (no copy: the view stays valid while its
    /// reader waits), and this thread writes the earliest of the frames on offer.
    private func exportMatroska(
        _ members: [Member], range: Range<Int64>, to destination: ExportDestination, fileSystem: any FileSystem,
        progress: ((Int) throws -> Void)?
    ) throws -> ExportSummary {
        // Markers of every stream in the range, as chapters on the recorder clock (a marker of all streams once).
        var chapters: [ExportChapter] = []
        for member in members {
            for chapter in member.source.chapters(in: member.clock.ptsRange(range)) {
                let moved = ExportChapter(
                    ptsNanoseconds: member.clock.recorderTime(ofPTS: chapter.ptsNanoseconds), title: chapter.title)
                if !chapters.contains(moved) { chapters.append(moved) }
            }
        }
        chapters.sort { $0.ptsNanoseconds < $1.ptsNanoseconds }
        let writer = try MatroskaWriter(
            tracks: members.map { (name: $0.name, stream: $0.source.stream) }, destination: destination,
            fileSystem: fileSystem, chapters: chapters)
        let lanes = members.map { _ in HandoffLane() }
        var failure: (any Error)?
        for (index, (member, lane)) in zip(members, lanes).enumerated() {
            let source = member.source
            let clock = member.clock
            let ptsRange = clock.ptsRange(range)
            do {
                try Threads.start(named: "rewind-export-\(member.name)") {
                    do {
                        try source.frames(in: ptsRange) { view in
                            lane.offer(view, at: clock.recorderTime(ofPTS: view.info.ptsNanoseconds))
                        }
                    } catch {
                        lane.fail(error)
                    }
                    lane.end()
                }
            } catch {
                // The export cannot read every stream: the readers started stop below, the others never ran.
                failure = error
                for unstarted in lanes[index...] { unstarted.end() }
                break
            }
        }
        var written = 0
        // Each stream's last timestamp written, for the summary.
        var lastWritten = [Int64?](repeating: nil, count: members.count)
        while failure == nil {
            var earliest: (index: Int, time: Int64)?
            for (index, lane) in lanes.enumerated() {
                guard let time = lane.waitForOffer() else { continue }
                if earliest.map({ time < $0.time }) ?? true { earliest = (index, time) }
            }
            guard let earliest else { break }
            do {
                try lanes[earliest.index].withOffer { view in
                    try writer.write(view, track: earliest.index, timestampNanoseconds: earliest.time)
                }
                lastWritten[earliest.index] = earliest.time
                written += 1
                try progress?(written)
            } catch {
                failure = error
            }
        }
        for lane in lanes { lane.cancelAndWait() }
        if failure == nil { failure = lanes.lazy.compactMap(\.error).first }
        if let failure {
            _ = try? writer.finish()
            if case .path(let path) = destination { try? fileSystem.unlink(path) }
            throw failure
        }
        var summary = try writer.finish()
        for (member, last) in zip(members, lastWritten) {
            if let last { summary.lastTimestampByTrack[member.name] = last }
        }
        return summary
    }
}

/// One stream's hand-over to the thread writing an interleaved export: its reader offers a frame and waits until
/// it is taken (the frame's view stays valid meanwhile), or the export is cancelled.
private final class HandoffLane: @unchecked Sendable {
    private let condition = NSCondition()
    private var offered: FrameView?
    private var time: Int64 = 0
    private var isEnded = false
    private var isCancelled = false
    private(set) var error: (any Error)?

    /// Reader side: offers `view` at recorder time `time` and waits until it is written; false when cancelled.
    func offer(_ view: FrameView, at time: Int64) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !isCancelled else { return false }
        offered = view
        self.time = time
        condition.broadcast()
        while offered != nil && !isCancelled { condition.wait() }
        return !isCancelled
    }

    /// Reader side: the read failed.
    func fail(_ error: any Error) {
        condition.lock()
        self.error = error
        condition.unlock()
    }

    /// Reader side: no more frames.
    func end() {
        condition.lock()
        isEnded = true
        offered = nil
        condition.broadcast()
        condition.unlock()
    }

    /// Writer side: waits for the next frame; its recorder time, or nil when the reader has ended.
    func waitForOffer() -> Int64? {
        condition.lock()
        defer { condition.unlock() }
        while offered == nil && !isEnded { condition.wait() }
        return offered == nil ? nil : time
    }

    /// Writer side: passes the offered frame to `body`, then lets the reader go on.
    func withOffer(_ body: (FrameView) throws -> Void) throws {
        condition.lock()
        let view = offered
        condition.unlock()
        defer {
            condition.lock()
            offered = nil
            condition.broadcast()
            condition.unlock()
        }
        if let view { try body(view) }
    }

    /// Writer side: stops the reader and waits until it has ended.
    func cancelAndWait() {
        condition.lock()
        isCancelled = true
        condition.broadcast()
        while !isEnded { condition.wait() }
        condition.unlock()
    }
}
