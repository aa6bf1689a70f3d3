import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The markers' journal, `DIR/markers.journal`: every marker added and removed, in order, each record checksummed and
/// synced before the change is acknowledged. The index holds the markers; the journal brings them back when the index
/// loses them (deleted and rebuilt from the segment files, restored from a copy, or a damaged `-wal` that took its
/// last commits with it), and makes a deletion the index lost happen again.
///
/// Format, little-endian: an 8-byte header, `RWMJ` and a `UInt32` version (1); then records, each a `UInt32` payload
/// length, the payload's CRC-32C (`UInt32`) and the payload: a `UInt8` kind and the marker's `Int64` id, then for
/// ``Record/added(_:)`` its time, creation wall time, a `UInt8` 1 when it holds a range and the range's two ends
/// (`Int64` each, 0 when it holds nothing), then the stream's name and the label, each a `UInt16` byte count and
/// UTF-8. ``Record/idsUsed(_:)`` keeps the highest id ever given when a rewrite leaves out removed markers.
package enum MarkerJournal {
    /// The journal's name in the store's directory.
    package static let fileName = "markers.journal"
    static let magic: [UInt8] = Array("RWMJ".utf8)

    /// A marker as the journal keeps it: by its stream's name, which an index rebuilt from the files gives the same
    /// stream under another id.
    package struct Entry: Sendable, Hashable {
        package var id: Int64
        package var streamName: String
        package var atNanoseconds: Int64
        package var label: String
        package var hold: Range<Int64>?
        package var createdWallNanoseconds: Int64

        package init(_ row: MarkerRow, streamName: String) {
            id = row.id
            self.streamName = streamName
            atNanoseconds = row.atNanoseconds
            label = row.label
            hold = row.hold
            createdWallNanoseconds = row.createdWallNanoseconds
        }

        /// The index row of this marker, for the stream the index now gives `streamID`.
        package func row(streamID: Int64) -> MarkerRow {
            MarkerRow(
                id: id, streamID: streamID, atNanoseconds: atNanoseconds, label: label, hold: hold,
                createdWallNanoseconds: createdWallNanoseconds)
        }
    }

    package enum Record: Sendable, Hashable {
        case added(Entry)
        case removed(Int64)
        /// Ids up to this one were given (a rewrite keeps the highest so that no id is given twice).
        case idsUsed(Int64)
    }

    /// What a journal file holds.
    package struct Contents: JournalContents {
        /// The markers added and not removed, by id.
        package var live: [Int64: Entry] = [:]
        /// The ids of markers removed.
        package var removed: Set<Int64> = []
        /// The highest id it names (0 when none).
        package var highestID: Int64 = 0
        /// Records read.
        package var records = 0
        package var scan = JournalFraming.Scan()
        package static var fileName: String { MarkerJournal.fileName }
        package static var magic: [UInt8] { MarkerJournal.magic }

        package init() {}

        package static func decode(_ payload: UnsafeRawBufferPointer) -> Record? { MarkerJournal.decode(payload) }

        package mutating func apply(_ record: Record) {
            records += 1
            switch record {
            case .added(let entry):
                live[entry.id] = entry
                removed.remove(entry.id)
                highestID = max(highestID, entry.id)
            case .removed(let id):
                live[id] = nil
                removed.insert(id)
                highestID = max(highestID, id)
            case .idsUsed(let id):
                highestID = max(highestID, id)
            }
        }
    }

    // MARK: Encoding

    static func header() -> [UInt8] { JournalFraming.header(magic: magic) }

    /// The bytes of one record: length, checksum, payload.
    package static func encode(_ record: Record) -> [UInt8] {
        var payload: [UInt8] = []
        switch record {
        case .added(let entry):
            payload.append(1)
            payload.put(entry.id)
            payload.put(entry.atNanoseconds)
            payload.put(entry.createdWallNanoseconds)
            payload.append(entry.hold == nil ? 0 : 1)
            payload.put(entry.hold?.lowerBound ?? 0)
            payload.put(entry.hold?.upperBound ?? 0)
            payload.put(entry.streamName)
            payload.put(entry.label)
        case .removed(let id):
            payload.append(2)
            payload.put(id)
        case .idsUsed(let id):
            payload.append(3)
            payload.put(id)
        }
        return JournalFraming.frame(payload)
    }

    // MARK: Decoding

    fileprivate static func decode(_ payload: UnsafeRawBufferPointer) -> Record? {
        guard payload.count >= 9, let base = payload.baseAddress else { return nil }
        let id = base.get(Int64.self, at: 1)
        switch payload[0] {
        case 1:
            guard payload.count >= 42 else { return nil }
            let at = base.get(Int64.self, at: 9)
            let created = base.get(Int64.self, at: 17)
            let holds = payload[25]
            let from = base.get(Int64.self, at: 26)
            let to = base.get(Int64.self, at: 34)
            var offset = 42
            guard holds <= 1, holds == 0 || from < to,
                let streamName = JournalFraming.text(payload, at: &offset),
                let label = JournalFraming.text(payload, at: &offset),
                offset == payload.count
            else { return nil }
            let row = MarkerRow(
                id: id, streamID: 0, atNanoseconds: at, label: label, hold: holds == 1 ? from..<to : nil,
                createdWallNanoseconds: created)
            return .added(Entry(row, streamName: streamName))
        case 2 where payload.count == 9: return .removed(id)
        case 3 where payload.count == 9: return .idsUsed(id)
        default: return nil
        }
    }
}

/// An open journal a store appends to (``MarkerJournal``, ``LossJournal``), under its lock.
struct JournalFile: ~Copyable {
    var fd: Int32 = -1
    /// Where the next record goes.
    var length: Int64 = 0
    /// Bytes reserved on disk from the start of the file, so that a record can still be written when the disk fills.
    var reserved: Int64 = 0
    /// The file's length when it was opened or last written anew.
    var compactedLength: Int64 = 0

    /// Whether the journal has grown since it was opened or last written anew by 64 KiB and to twice its length then:
    /// a recorder that runs for months, with segments deleted and markers removed all along, rewrites it with what
    /// stands now and then (each time at most twice as long as before plus 64 KiB, so the cost per record stays
    /// constant), instead of only when the store is next opened.
    var isDueForCompaction: Bool { length >= 2 * compactedLength + 65_536 }
}
