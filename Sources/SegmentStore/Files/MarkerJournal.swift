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
    package struct Contents: Sendable {
        /// The markers added and not removed, by id.
        package var live: [Int64: Entry] = [:]
        /// The ids of markers removed.
        package var removed: Set<Int64> = []
        /// The highest id it names (0 when none).
        package var highestID: Int64 = 0
        /// Records read.
        package var records = 0
        /// Where the valid records end.
        package var validLength = Int64(JournalFraming.headerSize)
        /// Why the records stop before the end of the file when valid bytes follow the damage (nil when they run to
        /// the end, or stop at an unfinished last record: ``tornTail``).
        package var damage: String?
        /// The file ends inside its last record, or in one whose checksum fails with nothing after it: a change that
        /// was being written when the process stopped, never acknowledged.
        package var tornTail = false
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

    /// Reads the journal at `path`.
    ///
    /// - Returns: what it holds, or nil when there is no file.
    /// - Throws: ``FileSystemError`` when it cannot be read; a file that is not a journal is returned with
    ///   ``Contents/damage`` set and nothing in it.
    package static func read(path: String, fileSystem: any FileSystem) throws(FileSystemError) -> Contents? {
        try JournalFraming.readFile(path: path, fileSystem: fileSystem).map(parse)
    }

    /// What the bytes of a journal file hold.
    package static func parse(_ bytes: [UInt8]) -> Contents {
        var contents = Contents()
        let scan = JournalFraming.scan(bytes, magic: magic) { payload in
            guard let record = decode(payload) else { return false }
            apply(record, to: &contents)
            return true
        }
        contents.validLength = scan.validLength
        contents.damage = scan.damage
        contents.tornTail = scan.tornTail
        return contents
    }

    private static func apply(_ record: Record, to contents: inout Contents) {
        contents.records += 1
        switch record {
        case .added(let entry):
            contents.live[entry.id] = entry
            contents.removed.remove(entry.id)
            contents.highestID = max(contents.highestID, entry.id)
        case .removed(let id):
            contents.live[id] = nil
            contents.removed.insert(id)
            contents.highestID = max(contents.highestID, id)
        case .idsUsed(let id):
            contents.highestID = max(contents.highestID, id)
        }
    }

    private static func decode(_ payload: UnsafeRawBufferPointer) -> Record? {
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
}
