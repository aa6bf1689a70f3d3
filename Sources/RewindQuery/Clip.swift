import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import SegmentStore
import Synchronization

/// Where a clip's frames come from: a live recorder (memory + disk) or a store on disk.
public enum ClipSource: Sendable {
    case recorder(Recorder)
    case store(SegmentStore, stream: StreamRow)

    /// The stream the clip's frames belong to.
    public var stream: StreamDescription {
        switch self {
        case .recorder(let recorder): recorder.stream
        case .store(_, let row): row.description
        }
    }

    /// Calls `body` with every frame in `range` (nanoseconds of pts, start inclusive, end exclusive), in pts order.
    public func frames(in range: Range<Int64>, _ body: (FrameView) throws -> Bool) throws {
        switch self {
        case .recorder(let recorder):
            try recorder.frames(in: range, body)
        case .store(let store, let row):
            try store.frames(streamName: row.name, in: range, body)
        }
    }

    /// Whether any frame lies in `range`, from the ring and the index alone (nothing is decoded).
    public func hasFrames(in range: Range<Int64>) throws -> Bool {
        switch self {
        case .recorder(let recorder):
            let snapshot = recorder.ring.pin(range, limit: 1)
            defer { snapshot.release() }
            if !snapshot.isEmpty { return true }
            guard let store = recorder.store,
                let row = try store.streams().first(where: { $0.name == recorder.configuration.streamName })
            else { return false }
            return try ClipSource.store(store, stream: row).hasFrames(in: range)
        case .store(let store, let row):
            var found = false
            try store.index.frames(streamID: row.id, in: range) { _ in
                found = true
                return false
            }
            return found
        }
    }

    /// The first and last pts recorded, nanoseconds; nil when nothing is.
    public func span() throws -> ClosedRange<Int64>? {
        switch self {
        case .recorder(let recorder):
            var first = recorder.ring.statistics.firstPTSNanoseconds
            var last = recorder.ring.statistics.lastPTSNanoseconds
            if let store = recorder.store {
                let summary = try store.summary(streamName: recorder.configuration.streamName)
                if let diskFirst = summary.firstPTS { first = min(first ?? diskFirst, diskFirst) }
                if let diskLast = summary.lastPTS { last = max(last ?? diskLast, diskLast) }
            }
            guard let first, let last else { return nil }
            return first...last
        case .store(let store, let row):
            let summary = try store.summary(streamName: row.name)
            guard let first = summary.firstPTS, let last = summary.lastPTS else { return nil }
            return first...last
        }
    }

    /// The range of the last `duration`: `(newest − duration, newest]`; nil when nothing is recorded.
    public func lastRange(_ duration: Int64) throws -> Range<Int64>? {
        guard let span = try span() else { return nil }
        return (span.upperBound - duration + 1)..<(span.upperBound + 1)
    }

    /// Wall-clock time of the first frame minus its pts: maps wall-clock times to pts.
    func wallOffset() throws -> Int64? {
        guard let span = try span() else { return nil }
        var offset: Int64?
        try frames(in: span.lowerBound..<(span.lowerBound + 1)) { view in
            offset = view.info.wallNanoseconds - view.info.ptsNanoseconds
            return false
        }
        return offset
    }

    /// Turns a command-line time into a pts in nanoseconds.
    ///
    /// Stream times are pts. Wall-clock times map to pts through the first frame's wall-clock time; a time of day
    /// is taken on the local date of the first frame.
    /// - Throws: ``ClipError/empty(_:)`` when a wall-clock time is given and the store holds no frame.
    public func resolve(_ time: TimeSpec) throws -> Int64 {
        switch time {
        case .stream(let nanoseconds):
            return nanoseconds
        case .wall(let wall):
            guard let offset = try wallOffset() else { throw ClipError.empty("the store holds no frames") }
            return wall - offset
        case .timeOfDay(let sinceMidnight):
            guard let offset = try wallOffset(), let span = try span() else {
                throw ClipError.empty("the store holds no frames")
            }
            let firstWall = span.lowerBound + offset
            let localSeconds =
                firstWall / 1_000_000_000
                + TimeSpec.localUTCOffsetSeconds(atUTCSeconds: firstWall / 1_000_000_000)
            let midnightLocal = (localSeconds - ((localSeconds % 86_400) + 86_400) % 86_400)
            let midnightUTC = midnightLocal - TimeSpec.localUTCOffsetSeconds(atUTCSeconds: midnightLocal)
            return midnightUTC * 1_000_000_000 + sinceMidnight - offset
        }
    }
}

/// Why a clip could not be made.
public enum ClipError: Error, Sendable, CustomStringConvertible {
    /// The range holds no frame; the message says what the store does hold.
    case empty(String)
    /// The range is backwards or empty.
    case badRange(String)

    public var description: String {
        switch self {
        case .empty(let message), .badRange(let message): message
        }
    }
}

/// Formats nanoseconds as seconds with millisecond precision: `12.500s`.
public func formatSeconds(_ nanoseconds: Int64) -> String {
    let sign = nanoseconds < 0 ? "-" : ""
    let magnitude = nanoseconds.magnitude
    return sign + String(format: "%llu.%03llus", magnitude / 1_000_000_000, (magnitude % 1_000_000_000) / 1_000_000)
}

/// Formats a byte count with a binary unit: `1.5 GiB`.
public func formatBytes(_ bytes: Int64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024 && unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
}

extension ClipSource {
    /// Throws ``ClipError/empty(_:)``, saying what the source holds, when no frame lies in `range`.
    public func requireFrames(in range: Range<Int64>) throws {
        guard try !hasFrames(in: range) else { return }
        let held = try span().map {
            "the store holds \(formatSeconds($0.lowerBound)) … \(formatSeconds($0.upperBound))"
        }
        throw ClipError.empty(
            "no frames in [\(formatSeconds(range.lowerBound)), \(formatSeconds(range.upperBound))); "
                + (held ?? "the store holds no frames") + "; nothing was written")
    }

    /// Exports every frame in `range` to `destination`.
    ///
    /// - Parameters:
    ///   - range: pts nanoseconds, start inclusive, end exclusive.
    ///   - format: the file format.
    ///   - destination: a path or standard output.
    ///   - progress: called after each frame with the count so far and the frame's pts.
    /// - Returns: what was written.
    /// - Throws: ``ClipError/empty(_:)`` when no frame lies in the range (nothing is written);
    ///   ``ExportError`` and store errors. A partial file is removed when the export fails.
    public func export(
        range: Range<Int64>, format: ExportFormat, to destination: ExportDestination,
        progress: ((Int, Int64) -> Void)? = nil
    ) throws -> ExportSummary {
        guard !range.isEmpty else {
            throw ClipError.badRange(
                "the range [\(formatSeconds(range.lowerBound)), \(formatSeconds(range.upperBound))) is empty: "
                    + "--to must be after --from")
        }
        try requireFrames(in: range)
        var exporter = try makeExporter(format: format, stream: stream, destination: destination)
        do {
            var count = 0
            let write = { (view: FrameView) throws -> Bool in
                try exporter.write(view)
                count += 1
                progress?(count, view.info.ptsNanoseconds)
                return true
            }
            if case .store(let store, let row) = self {
                // Frames from disk: decode on a second thread while this one writes.
                try DecodePipeline(layout: stream.layout).run(store: store, stream: row.name, range: range, write)
            } else {
                try frames(in: range, write)
            }
            return try exporter.finish()
        } catch {
            if case .path(let path) = destination { try? FileManager.default.removeItem(atPath: path) }
            throw error
        }
    }
}

/// Overlaps reading and decoding frames from the segment store (on its own thread) with writing them (on the
/// caller's). Frames are decoded straight into `depth + 2` buffers allocated once per export and handed over
/// without a copy, two consecutive frames at a time on two threads where there are two cores: the decoder writes
/// frames k + depth + 1 and k + depth + 2 into the buffers of frames k and k + 1 only after the writer is done with
/// them.
///
///     reader thread (+ a decode helper): frames(in:into: buffers) ──filled──▶ caller: write(frame k) ──free──▶ reader
final class DecodePipeline: @unchecked Sendable {
    private static let depth = 3
    private let buffers: DecodeBuffers
    /// One slot per frame in flight: the reader fills slot k before signalling `filled`, the writer empties it
    /// before signalling `free` (raw memory, so the two threads never share an array's storage).
    private let views: UnsafeMutableBufferPointer<FrameView?>
    private let free = DispatchSemaphore(value: DecodePipeline.depth)
    private let filled = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    // Written by the reader before it signals `filled` (or `finished`); read by the writer after waiting.
    private var readerError: (any Error)?
    private let isCancelled = Atomic<Bool>(false)

    init(layout: FrameLayout) {
        buffers = DecodeBuffers(byteCount: layout.byteCount, count: Self.depth + 2)
        views = .allocate(capacity: Self.depth)
        views.initialize(repeating: nil)
    }

    deinit {
        views.deinitialize()
        views.deallocate()
    }

    /// Streams `range` of `stream` in `store` through `write` (which returns false to stop), in pts order.
    func run(
        store: SegmentStore, stream: String, range: Range<Int64>, _ write: (FrameView) throws -> Bool
    ) throws {
        let reader = Thread { [self] in
            var slot = 0
            do {
                let threads = min(2, System.onlineProcessorCount)
                try store.frames(streamName: stream, in: range, into: buffers, decodeThreads: threads) { view in
                    free.wait()
                    if isCancelled.load(ordering: .acquiring) { return false }
                    views[slot] = view
                    filled.signal()
                    slot = (slot + 1) % Self.depth
                    return true
                }
            } catch {
                readerError = error
            }
            filled.signal()
            finished.signal()
        }
        reader.name = "rewind-export-read"
        reader.start()
        defer {
            isCancelled.store(true, ordering: .releasing)
            for _ in 0..<Self.depth { free.signal() }
            finished.wait()
        }
        var slot = 0
        while true {
            filled.wait()
            guard let view = views[slot] else {
                // Only the end marker arrives with no frame in the slot.
                if let readerError { throw readerError }
                return
            }
            views[slot] = nil
            let keepGoing = try write(view)
            free.signal()
            if !keepGoing { return }
            slot = (slot + 1) % Self.depth
        }
    }
}
