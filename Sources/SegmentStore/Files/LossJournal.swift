import RewindCore
import RewindSystem

/// The losses' journal, `DIR/losses.journal`: every change to the index's gaps and drop counters, in order, so that
/// what the store lost is still counted when the index is lost (rebuilt from the segment files, put back from a copy,
/// or a damaged `-wal` that took its last commits with it). Records are written as the index changes, without a sync
/// of their own: they are synced when the last writer closes and after a repair, as durable as the index's own rows
/// (which a power cut may take back to the last checkpoint too).
///
/// ``JournalFraming`` with magic `RWLJ`; payloads, little-endian: a `UInt8` kind, the stream's name (texts as in the
/// framing), then for `1` gap added and `3` gap removed the gap's start, end and reason; `2` gap extended: the end it
/// had, the new end, the reason; `4` gaps removed that start before a pts: the pts; `5` drops added: the reason and
/// an `Int64` count.
package enum LossJournal {
    /// The journal's name in the store's directory.
    package static let fileName = "losses.journal"
    static let magic: [UInt8] = Array("RWLJ".utf8)

    /// A gap as the journal keeps it (its stream is the key it is kept under).
    package struct Gap: Sendable, Hashable {
        package var start: Int64
        package var end: Int64
        package var reason: LossReason

        package init(start: Int64, end: Int64, reason: LossReason) {
            self.start = start
            self.end = end
            self.reason = reason
        }

        package init(_ row: GapRow) {
            self.init(start: row.startNanoseconds, end: row.endNanoseconds, reason: row.reason)
        }
    }

    package enum Record: Sendable, Hashable {
        case gapAdded(stream: String, Gap)
        case gapExtended(stream: String, end: Int64, newEnd: Int64, reason: LossReason)
        case gapRemoved(stream: String, Gap)
        case gapsRemoved(stream: String, startingBefore: Int64)
        case dropsAdded(stream: String, reason: LossReason, count: Int64)
    }

    /// What a journal file holds: the gaps and drop counts of each stream, by name, as its records leave them.
    package struct Contents: JournalContents {
        /// Each stream's gaps (the same gap may be there twice, as in the index), by start, once ``finish()`` ran.
        package private(set) var gaps: [String: [Gap]] = [:]
        /// Gaps removed, with how many times each was.
        package var removedGaps: [String: [Gap: Int]] = [:]
        /// The pts before which a stream's gaps were removed (the highest such).
        package var removedBefore: [String: Int64] = [:]
        /// Each stream's dropped frames by reason.
        package var drops: [String: [LossReason: Int64]] = [:]
        /// Records read.
        package var records = 0
        package var scan = JournalFraming.Scan()
        private var replays: [String: GapReplay] = [:]
        package static var fileName: String { LossJournal.fileName }
        package static var magic: [UInt8] { LossJournal.magic }

        package init() {}

        package static func decode(_ payload: UnsafeRawBufferPointer) -> Record? { LossJournal.decode(payload) }

        /// Works out ``gaps`` from the records applied.
        package mutating func finish() { gaps = replays.mapValues { $0.standing() } }

        /// Applies `record` as the index applied the change it records.
        package mutating func apply(_ record: Record) {
            records += 1
            switch record {
            case .gapAdded(let stream, let gap):
                replays[stream, default: GapReplay()].add(gap, at: records)
            case .gapExtended(let stream, let end, let newEnd, let reason):
                replays[stream]?.extend(endingAt: end, to: newEnd, reason: reason)
            case .gapRemoved(let stream, let gap):
                replays[stream]?.remove(gap, at: records)
                removedGaps[stream, default: [:]][gap, default: 0] += 1
            case .gapsRemoved(let stream, let pts):
                replays[stream]?.removeAll(startingBefore: pts, at: records)
                removedBefore[stream] = max(removedBefore[stream] ?? .min, pts)
            case .dropsAdded(let stream, let reason, let count):
                // Saturating: counts that add past 64 bits (only damage with intact checksums can say so) stay the
                // most there can be rather than trap.
                let (sum, overflow) = drops[stream, default: [:]][reason, default: 0].addingReportingOverflow(count)
                drops[stream, default: [:]][reason] = overflow ? .max : sum
            }
        }
    }

    /// One stream's gaps as the records replay them, each change in time independent of how many gaps there are (a
    /// long recording may have many): gaps by id with the record that added them, found by end and reason for an
    /// extension or a removal; a removal of every gap starting before a pts is noted and applied to the gaps added
    /// before it when the replay ends.
    struct GapReplay: Sendable {
        private struct EndKey: Hashable, Sendable {
            var end: Int64
            var reason: LossReason
        }
        private var gaps: [Int: (gap: Gap, added: Int)] = [:]
        private var byEnd: [EndKey: [Int]] = [:]
        private var nextID = 0
        /// Removals of the gaps starting before a pts: (record number, pts).
        private var removals: [(record: Int, pts: Int64)] = []

        mutating func add(_ gap: Gap, at record: Int) {
            gaps[nextID] = (gap, record)
            byEnd[EndKey(end: gap.end, reason: gap.reason), default: []].append(nextID)
            nextID += 1
        }

        mutating func extend(endingAt end: Int64, to newEnd: Int64, reason: LossReason) {
            guard end != newEnd, let ids = byEnd.removeValue(forKey: EndKey(end: end, reason: reason)) else { return }
            for id in ids { gaps[id]?.gap.end = newEnd }
            byEnd[EndKey(end: newEnd, reason: reason), default: []].append(contentsOf: ids)
        }

        /// Removes the first gap equal to `gap` that is still there at `record`.
        mutating func remove(_ gap: Gap, at record: Int) {
            let key = EndKey(end: gap.end, reason: gap.reason)
            guard var ids = byEnd[key],
                let i = ids.firstIndex(where: { gaps[$0]?.gap == gap && !removedBefore(gaps[$0]!, at: record) })
            else { return }
            gaps[ids[i]] = nil
            ids.remove(at: i)
            byEnd[key] = ids.isEmpty ? nil : ids
        }

        mutating func removeAll(startingBefore pts: Int64, at record: Int) { removals.append((record, pts)) }

        /// Whether a removal of the gaps starting before a pts took `entry` before `record`.
        private func removedBefore(_ entry: (gap: Gap, added: Int), at record: Int) -> Bool {
            removals.contains { $0.record > entry.added && $0.record < record && entry.gap.start < $0.pts }
        }

        /// The gaps left, by start.
        func standing() -> [Gap] {
            // The highest pts removed after each record: a gap is gone when one after its own record passes its start.
            var after: [(record: Int, pts: Int64)] = []
            var highest = Int64.min
            for removal in removals.reversed() {
                highest = max(highest, removal.pts)
                after.append((removal.record, highest))
            }
            after.reverse()
            return gaps.values.filter { entry in
                // The first removal after the gap was added.
                var low = 0
                var high = after.count
                while low < high {
                    let mid = (low + high) / 2
                    if after[mid].record > entry.added { high = mid } else { low = mid + 1 }
                }
                return low == after.count || entry.gap.start >= after[low].pts
            }.map(\.gap).sorted { ($0.start, $0.end) < ($1.start, $1.end) }
        }
    }

    /// What a record changes that a later record may change again: a stream's drop counter of a reason, or its gap
    /// of a reason that ends at a pts.
    package struct MergeKey: Hashable, Sendable {
        package var stream: String
        package var reason: LossReason
        /// The gap's end; nil for a counter.
        package var gapEnd: Int64?

        /// The key of the record `record` would be merged into (an extension's gap by the end it had, a counter).
        package init?(of record: Record) {
            switch record {
            case .gapExtended(let stream, let end, _, let reason): self.init(stream, reason, end)
            case .dropsAdded(let stream, let reason, _): self.init(stream, reason, nil)
            default: return nil
            }
        }

        /// The key a later record finds `record` under (the gap by the end it has now, a counter).
        package init?(after record: Record) {
            switch record {
            case .gapAdded(let stream, let gap): self.init(stream, gap.reason, gap.end)
            case .gapExtended(let stream, _, let newEnd, let reason): self.init(stream, reason, newEnd)
            case .dropsAdded(let stream, let reason, _): self.init(stream, reason, nil)
            default: return nil
            }
        }

        private init(_ stream: String, _ reason: LossReason, _ gapEnd: Int64?) {
            self.stream = stream
            self.reason = reason
            self.gapEnd = gapEnd
        }
    }

    /// The one record that does what `previous` then `next` do, when there is one: a gap's extension merged into the
    /// record that added or last extended it, drops added to the same counter summed. Replayed, it gives what the two
    /// give, except where two gaps of the stream and reason share an end (the same gap recorded twice), of which the
    /// merged record extends only the one.
    package static func merged(_ previous: Record, _ next: Record) -> Record? {
        switch (previous, next) {
        case (.gapAdded(let stream, let gap), .gapExtended(let other, let end, let newEnd, let reason))
        where stream == other && gap.end == end && gap.reason == reason && newEnd >= gap.start:
            return .gapAdded(stream: stream, Gap(start: gap.start, end: newEnd, reason: reason))
        case (
            .gapExtended(let stream, let first, let end, let reason),
            .gapExtended(let other, let from, let newEnd, let again)
        )
        where stream == other && end == from && reason == again:
            return .gapExtended(stream: stream, end: first, newEnd: newEnd, reason: reason)
        case (.dropsAdded(let stream, let reason, let count), .dropsAdded(let other, let again, let more))
        where stream == other && reason == again:
            let (sum, overflow) = count.addingReportingOverflow(more)
            return overflow ? nil : .dropsAdded(stream: stream, reason: reason, count: sum)
        default:
            return nil
        }
    }

    /// The bytes of one record.
    package static func encode(_ record: Record) -> [UInt8] {
        var payload: [UInt8] = []
        switch record {
        case .gapAdded(let stream, let gap), .gapRemoved(let stream, let gap):
            if case .gapAdded = record { payload.append(1) } else { payload.append(3) }
            payload.put(stream)
            payload.put(gap.start)
            payload.put(gap.end)
            payload.put(gap.reason.rawValue)
        case .gapExtended(let stream, let end, let newEnd, let reason):
            payload.append(2)
            payload.put(stream)
            payload.put(end)
            payload.put(newEnd)
            payload.put(reason.rawValue)
        case .gapsRemoved(let stream, let pts):
            payload.append(4)
            payload.put(stream)
            payload.put(pts)
        case .dropsAdded(let stream, let reason, let count):
            payload.append(5)
            payload.put(stream)
            payload.put(reason.rawValue)
            payload.put(count)
        }
        return JournalFraming.frame(payload)
    }

    fileprivate static func decode(_ payload: UnsafeRawBufferPointer) -> Record? {
        guard let base = payload.baseAddress, payload.count >= 1 else { return nil }
        var offset = 1
        func integer() -> Int64? {
            guard payload.count - offset >= 8 else { return nil }
            defer { offset += 8 }
            return base.get(Int64.self, at: offset)
        }
        func reason() -> LossReason? { JournalFraming.text(payload, at: &offset).map(LossReason.init(stored:)) }
        guard let stream = JournalFraming.text(payload, at: &offset) else { return nil }
        let record: Record
        switch payload[0] {
        case 1, 3:
            guard let start = integer(), let end = integer(), end >= start, let reason = reason() else { return nil }
            let gap = Gap(start: start, end: end, reason: reason)
            record = payload[0] == 1 ? .gapAdded(stream: stream, gap) : .gapRemoved(stream: stream, gap)
        case 2:
            guard let end = integer(), let newEnd = integer(), let reason = reason() else { return nil }
            record = .gapExtended(stream: stream, end: end, newEnd: newEnd, reason: reason)
        case 4:
            guard let pts = integer() else { return nil }
            record = .gapsRemoved(stream: stream, startingBefore: pts)
        case 5:
            guard let reason = reason(), let count = integer(), count >= 0 else { return nil }
            record = .dropsAdded(stream: stream, reason: reason, count: count)
        default:
            return nil
        }
        return offset == payload.count ? record : nil
    }
}
