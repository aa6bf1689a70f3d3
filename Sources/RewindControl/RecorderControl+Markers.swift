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
                .conflict, "markers are kept in the store, and this recorder records without one (spill off)")
        }
        return store
    }

    private func time(_ text: String, field: String) throws -> Int64 {
        do {
            return try ClipSource.recorder(recorder).resolve(try TimeSpec(parsing: text))
        } catch let error as ValueError {
            throw APIError(.badRequest, "\(field): \(error)")
        }
    }

    /// `POST /v1/markers`: one marker per stream named (today, the one).
    func addMarkers(_ request: MarkerRequest) throws -> MarkerList {
        let store = try markerStore()
        let stream = recorder.configuration.streamName
        if let name = request.stream, name != "all", name != stream {
            throw APIError(.notFound, "unknown stream '\(name)': this recorder records '\(stream)'")
        }
        let label = request.label.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !label.isEmpty, label.count <= 256 else {
            throw APIError(.badRequest, "label must be 1 to 256 characters")
        }
        let at: Int64
        if let text = request.at {
            at = try time(text, field: "at")
        } else {
            guard let clock = book.clock else { throw APIError(.empty, "nothing is recorded yet: no time to mark") }
            at = clock
        }
        var hold: Range<Int64>?
        if let requested = request.hold {
            func length(_ text: String?, _ field: String) throws -> Int64 {
                guard let text else { return 0 }
                do {
                    return try Values.duration(text).nanosecondsClamped
                } catch {
                    throw APIError(.badRequest, "hold.\(field): \(error)")
                }
            }
            let before = try length(requested.before, "before")
            let after = try length(requested.after, "after")
            guard before + after > 0 else { throw APIError(.badRequest, "a hold needs before or after above 0s") }
            hold = (at - before)..<(at + after + 1)
            try checkHoldFits(hold!, store: store, stream: stream)
        }
        let row = try store.addMarker(streamName: stream, at: at, label: label, hold: hold)
        let marker = body(row, stream: stream)
        events.publish("marker", marker)
        return MarkerList(markers: [marker])
    }

    /// Refuses (409) a hold that, with the holds already kept, needs more than the disk budget: the bytes of the
    /// segments it covers, and for the part still to come, the stream's recent bytes per second.
    private func checkHoldFits(_ hold: Range<Int64>, store: SegmentStore, stream: String) throws {
        guard let budget = store.options.diskBudget else { return }
        let existing = try store.markers(streamName: stream).compactMap(\.hold)
        let held = try store.heldBytes(streamName: stream, ranges: existing + [hold])
        var toCome: Int64 = 0
        let summary = try store.summary(streamName: stream)
        if let first = summary.firstPTS, let last = summary.lastPTS, last > first, hold.upperBound > last {
            let rate = Double(summary.storedBytes) / Double(last - first)
            toCome = Int64(rate * Double(hold.upperBound - max(last, hold.lowerBound)))
        }
        let needed = held + toCome
        guard needed <= Int64(budget) else {
            throw APIError(
                .conflict,
                "the hold cannot fit: with the holds already kept it needs \(needed) bytes on disk, more than the "
                    + "disk budget of \(budget) bytes; hold less, or delete a marker")
        }
    }

    /// `GET /v1/markers?from=&to=`.
    func markers(query: [String: String]) throws -> MarkerList {
        let store = try markerStore()
        let from = try query["from"].map { try time($0, field: "from") } ?? .min
        let to = try query["to"].map { try time($0, field: "to") } ?? .max
        let stream = recorder.configuration.streamName
        return MarkerList(markers: try store.markers(in: from..<to).map { body($0, stream: stream) })
    }

    /// `DELETE /v1/markers/{id}`: the marker and its hold go.
    func removeMarker(_ id: Int64) throws -> MarkerBody {
        guard let row = try markerStore().removeMarker(id: id) else {
            throw APIError(.notFound, "no marker \(id)")
        }
        return body(row, stream: recorder.configuration.streamName)
    }

    private func body(_ row: MarkerRow, stream: String) -> MarkerBody {
        MarkerBody(
            id: row.id, atNanoseconds: row.atNanoseconds, label: row.label, stream: stream,
            holdFromNanoseconds: row.hold?.lowerBound, holdToNanoseconds: row.hold?.upperBound)
    }
}

/// Turns a recorder's counters into events, read every 250 ms on the control's thread: `drops` (at most once a
/// second), `pressure`, `gap`, `segment` (sealed) and `disk_error`.
struct CounterWatcher {
    let recorder: Recorder
    private var drops: [String: Int] = [:]
    private var lastDropsEvent = ContinuousClock.now - .seconds(2)
    private var pressure = MemoryPressure.normal
    private var gaps = 0
    private var lastError: String?
    private var sealedSegments: Int?
    private var ticks = 0

    init(recorder: Recorder) {
        self.recorder = recorder
        pressure = recorder.memoryStatistics.pressure
        let statistics = recorder.statistics
        drops = statistics.drops.keyedByRawValue
        gaps = statistics.gaps
        lastError = statistics.lastError
    }

    private struct DropsEvent: Encodable {
        var stream: String
        var drops: [String: Int]
    }

    private struct PressureEvent: Encodable {
        var stream: String
        var level: String
    }

    private struct GapEvent: Encodable {
        var stream: String
        var startNanoseconds: Int64
        var endNanoseconds: Int64
        var reason: String

        enum CodingKeys: String, CodingKey {
            case stream, reason
            case startNanoseconds = "start_ns"
            case endNanoseconds = "end_ns"
        }
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

    mutating func publishChanges(to events: EventHub) {
        let stream = recorder.configuration.streamName
        let statistics = recorder.statistics
        let currentDrops = statistics.drops.keyedByRawValue
        if currentDrops != drops, ContinuousClock.now - lastDropsEvent >= .seconds(1) {
            drops = currentDrops
            lastDropsEvent = .now
            events.publish("drops", DropsEvent(stream: stream, drops: currentDrops))
        }
        let level = recorder.memoryStatistics.pressure
        if level != pressure {
            pressure = level
            events.publish("pressure", PressureEvent(stream: stream, level: level.name))
        }
        if statistics.lastError != lastError, let message = statistics.lastError {
            events.publish("disk_error", DiskErrorEvent(stream: stream, message: message))
        }
        lastError = statistics.lastError
        guard let store = recorder.store else { return }
        if statistics.gaps != gaps {
            let added = statistics.gaps - gaps
            gaps = statistics.gaps
            if let rows = try? store.gaps(streamName: stream) {
                for gap in rows.suffix(max(0, added)) {
                    events.publish(
                        "gap",
                        GapEvent(
                            stream: stream, startNanoseconds: gap.startNanoseconds, endNanoseconds: gap.endNanoseconds,
                            reason: gap.reason.rawValue))
                }
            }
        }
        ticks += 1
        guard ticks % 4 == 0, events.count > 0 || sealedSegments == nil,
            let rows = try? store.segments(streamName: stream)
        else { return }
        let sealed = rows.filter { $0.state == .sealed }
        if let known = sealedSegments, sealed.count > known {
            for row in sealed.sorted(by: { $0.id < $1.id }).suffix(sealed.count - known) {
                events.publish(
                    "segment",
                    SegmentEvent(
                        stream: stream, file: row.fileName, frames: row.frameCount, firstPTSNanoseconds: row.firstPTS,
                        lastPTSNanoseconds: row.lastPTS))
            }
        }
        sealedSegments = sealed.count
    }
}
