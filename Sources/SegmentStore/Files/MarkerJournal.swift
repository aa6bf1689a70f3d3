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
    static let version: UInt32 = 1
    static let headerSize = 8
    /// The largest payload a record may declare: a marker with the longest label and stream name is far smaller.
    static let largestPayload = 1 << 20

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
        package var validLength = Int64(headerSize)
        /// Why the records stop before the end of the file when valid bytes follow the damage (nil when they run to
        /// the end, or stop at an unfinished last record: ``tornTail``).
        package var damage: String?
        /// The file ends inside its last record, or in one whose checksum fails with nothing after it: a change that
        /// was being written when the process stopped, never acknowledged.
        package var tornTail = false
    }

    // MARK: Encoding

    static func header() -> [UInt8] {
        var bytes = magic
        append(version, to: &bytes)
        return bytes
    }

    /// The bytes of one record: length, checksum, payload.
    package static func encode(_ record: Record) -> [UInt8] {
        var payload: [UInt8] = []
        switch record {
        case .added(let entry):
            payload.append(1)
            append(entry.id, to: &payload)
            append(entry.atNanoseconds, to: &payload)
            append(entry.createdWallNanoseconds, to: &payload)
            payload.append(entry.hold == nil ? 0 : 1)
            append(entry.hold?.lowerBound ?? 0, to: &payload)
            append(entry.hold?.upperBound ?? 0, to: &payload)
            appendText(entry.streamName, to: &payload)
            appendText(entry.label, to: &payload)
        case .removed(let id):
            payload.append(2)
            append(id, to: &payload)
        case .idsUsed(let id):
            payload.append(3)
            append(id, to: &payload)
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(8 + payload.count)
        append(UInt32(payload.count), to: &bytes)
        append(payload.withUnsafeBytes { CRC32C.checksum($0) }, to: &bytes)
        bytes += payload
        return bytes
    }

    private static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    private static func appendText(_ text: String, to bytes: inout [UInt8]) {
        // Labels are at most 256 characters and stream names short: far below the 65 535 bytes a length holds.
        let utf8 = Array(text.utf8.prefix(Int(UInt16.max)))
        append(UInt16(utf8.count), to: &bytes)
        bytes += utf8
    }

    // MARK: Decoding

    /// Reads the journal at `path`.
    ///
    /// - Returns: what it holds, or nil when there is no file.
    /// - Throws: ``FileSystemError`` when it cannot be read; a file that is not a journal is returned with
    ///   ``Contents/damage`` set and nothing in it.
    package static func read(path: String, fileSystem: any FileSystem) throws(FileSystemError) -> Contents? {
        guard fileSystem.fileExists(path) else { return nil }
        let fd = try fileSystem.open(path, flags: O_RDONLY, mode: 0)
        defer { fileSystem.close(fd) }
        let size = try fileSystem.size(fd, path: path)
        var bytes = [UInt8](repeating: 0, count: Int(size))
        var failure: FileSystemError?
        let count = bytes.withUnsafeMutableBytes { buffer in
            do throws(FileSystemError) {
                return try fileSystem.readAll(fd, into: buffer, offset: 0, path: path)
            } catch {
                failure = error
                return 0
            }
        }
        if let failure { throw failure }
        return parse(Array(bytes.prefix(count)))
    }

    /// What the bytes of a journal file hold.
    package static func parse(_ bytes: [UInt8]) -> Contents {
        var contents = Contents()
        guard bytes.count >= headerSize else {
            // A journal being created when the process stopped: nothing in it was acknowledged.
            contents.validLength = 0
            contents.tornTail = !bytes.isEmpty
            if !bytes.isEmpty && !magic.starts(with: bytes.prefix(4)) {
                contents.damage = "it does not start with the journal's header"
                contents.tornTail = false
            }
            return contents
        }
        guard Array(bytes[0..<4]) == magic else {
            contents.validLength = 0
            contents.damage = "it does not start with the journal's header"
            return contents
        }
        let fileVersion = bytes.withUnsafeBytes { $0.baseAddress!.get(UInt32.self, at: 4) }
        guard fileVersion == version else {
            contents.validLength = 0
            contents.damage = "its version is \(fileVersion), this build reads version \(version)"
            return contents
        }
        var offset = headerSize
        bytes.withUnsafeBytes { raw in
            let base = raw.baseAddress!
            while offset < bytes.count {
                guard bytes.count - offset >= 8 else {
                    contents.tornTail = true
                    return
                }
                let length = Int(base.get(UInt32.self, at: offset))
                let checksum = base.get(UInt32.self, at: offset + 4)
                let end = offset + 8 + length
                guard length <= largestPayload else {
                    contents.damage = "the record at byte \(offset) declares \(length) bytes"
                    return
                }
                guard end <= bytes.count else {
                    contents.tornTail = true
                    return
                }
                let payload = UnsafeRawBufferPointer(rebasing: raw[(offset + 8)..<end])
                guard CRC32C.checksum(payload) == checksum, let record = decode(payload) else {
                    if end == bytes.count {
                        contents.tornTail = true
                    } else {
                        contents.damage = "the record at byte \(offset) fails its checksum"
                    }
                    return
                }
                apply(record, to: &contents)
                offset = end
                contents.validLength = Int64(offset)
            }
        }
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
                let streamName = text(payload, at: &offset), let label = text(payload, at: &offset),
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

    private static func text(_ payload: UnsafeRawBufferPointer, at offset: inout Int) -> String? {
        guard payload.count - offset >= 2 else { return nil }
        let count = Int(payload.baseAddress!.get(UInt16.self, at: offset))
        guard payload.count - offset - 2 >= count else { return nil }
        let bytes = UnsafeRawBufferPointer(rebasing: payload[(offset + 2)..<(offset + 2 + count)])
        offset += 2 + count
        return String(validating: bytes, as: UTF8.self)
    }
}

/// The open journal a store appends to, under the store's lock for marker changes.
struct MarkerJournalFile: ~Copyable {
    var fd: Int32 = -1
    /// Where the next record goes.
    var length: Int64 = 0
    /// Bytes reserved on disk from the start of the file, so that a marker can still be written when the disk fills.
    var reserved: Int64 = 0
}
