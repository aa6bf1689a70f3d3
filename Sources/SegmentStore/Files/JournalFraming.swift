import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The framing the store's journals share (``MarkerJournal``, ``LossJournal``): an 8-byte header, four magic bytes
/// and a `UInt32` version (1); then records, each a `UInt32` payload length, the payload's CRC-32C (`UInt32`) and the
/// payload, little-endian. Texts in payloads are a `UInt16` byte count and UTF-8.
package enum JournalFraming {
    static let version: UInt32 = 1
    static let headerSize = 8
    /// The largest payload a record may declare: every record is far smaller.
    static let largestPayload = 1 << 20
    /// Versions above this are no build's: a header that says one is damaged, not a later build's journal.
    static let latestPlausibleVersion: UInt32 = 1000

    /// What a scan of a journal's bytes found besides its records.
    package struct Scan: Sendable {
        /// Where the valid records end (0 when even the header is not).
        package var validLength: Int64 = 0
        /// Why the records stop before the end of the file when valid bytes follow the damage.
        package var damage: String?
        /// The file ends inside its last record (or its header), or in one whose checksum fails with nothing after
        /// it: a record that was being written when the process stopped, never acknowledged.
        package var tornTail = false
    }

    package static func header(magic: [UInt8]) -> [UInt8] {
        var bytes = magic
        bytes.put(version)
        return bytes
    }

    /// A record: length, checksum, `payload`.
    static func frame(_ payload: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(8 + payload.count)
        bytes.put(UInt32(payload.count))
        bytes.put(payload.withUnsafeBytes { CRC32C.checksum($0) })
        bytes += payload
        return bytes
    }

    /// The bytes of the file at `path`, or nil when there is none.
    static func readFile(path: String, fileSystem: any FileSystem) throws(FileSystemError) -> [UInt8]? {
        guard fileSystem.fileExists(path) else { return nil }
        let fd = try fileSystem.open(path, flags: O_RDONLY | O_CLOEXEC, mode: 0)
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
        return Array(bytes.prefix(count))
    }

    /// Hands each valid record's payload to `take` in order (which returns false for one it cannot decode: damage
    /// like a failed checksum), and says where and why the records stop.
    package static func scan(_ bytes: [UInt8], magic: [UInt8], _ take: (UnsafeRawBufferPointer) -> Bool) -> Scan {
        var scan = Scan()
        guard bytes.count >= headerSize else {
            // A journal being created when the process stopped: nothing in it was acknowledged.
            if magic.starts(with: bytes.prefix(magic.count)) {
                scan.tornTail = !bytes.isEmpty
            } else {
                scan.damage = "it does not start with the journal's header"
            }
            return scan
        }
        let fileVersion = bytes.withUnsafeBytes { $0.baseAddress!.get(UInt32.self, at: 4) }
        let magicHolds = Array(bytes[0..<magic.count]) == magic
        if magicHolds && fileVersion != version && fileVersion <= latestPlausibleVersion {
            scan.damage = "its version is \(fileVersion), this build reads version \(version)"
            return scan
        }
        // A header damaged in place (its magic, or a version no build ever wrote) with a whole record right after
        // it: the records are read all the same.
        let damagedHeader = !magicHolds || fileVersion != version
        if damagedHeader {
            scan.damage = "it does not start with the journal's header"
            let recordFollows = bytes.withUnsafeBytes { firstValidRecord(in: $0, after: headerSize) == headerSize }
            guard recordFollows else { return scan }
        }
        var offset = headerSize
        if !damagedHeader { scan.validLength = Int64(offset) }
        bytes.withUnsafeBytes { raw in
            let base = raw.baseAddress!
            while offset < bytes.count {
                guard bytes.count - offset >= 8 else {
                    scan.tornTail = true
                    return
                }
                let length = Int(base.get(UInt32.self, at: offset))
                let checksum = base.get(UInt32.self, at: offset + 4)
                let end = offset + 8 + length
                guard length <= largestPayload, end <= bytes.count else {
                    // A write cut short ends the file inside its record; a length damaged in the middle of the
                    // journal says more than the file holds too (or more than any record), but whole records follow
                    // it: they are read from there, so a rebuilt index loses that one change alone.
                    guard let next = firstValidRecord(in: raw, after: offset + 8) else {
                        if length > largestPayload {
                            let found = "the record at byte \(offset) declares \(length) bytes"
                            scan.damage = scan.damage.map { $0 + "; " + found } ?? found
                        } else if scan.damage == nil {
                            scan.tornTail = true
                        }
                        return
                    }
                    let found =
                        "the record at byte \(offset) declares \(length) bytes, "
                        + (length > largestPayload ? "more than any record" : "past the end of the file")
                        + ", and a whole record follows at byte \(next)"
                    scan.damage = scan.damage.map { $0 + "; " + found } ?? found
                    offset = next
                    continue
                }
                let payload = UnsafeRawBufferPointer(rebasing: raw[(offset + 8)..<end])
                guard CRC32C.checksum(payload) == checksum, take(payload) else {
                    if end == bytes.count {
                        scan.tornTail = true
                        return
                    }
                    // One record damaged inside: the records after it (from the next whole one, right after it
                    // when its length held) are read too, so a rebuilt index loses that one change alone.
                    let skipped = "the record at byte \(offset) fails its checksum"
                    scan.damage = scan.damage.map { $0 + "; " + skipped } ?? skipped
                    guard let next = firstValidRecord(in: raw, after: offset + 8) else { return }
                    offset = next
                    continue
                }
                offset = end
                if scan.damage == nil { scan.validLength = Int64(offset) }
            }
        }
        return scan
    }

    /// The offset of the first whole record (its length inside the file, its checksum right) at or after `start`,
    /// if any: what tells damage in the middle of a journal from a last record cut short.
    ///
    /// - Complexity: O(bytes × the records' lengths), for the journals' size (kilobytes) and only once damage shows.
    static func firstValidRecord(in raw: UnsafeRawBufferPointer, after start: Int) -> Int? {
        guard raw.count >= 8 else { return nil }
        let base = raw.baseAddress!
        var offset = start
        while offset <= raw.count - 8 {
            let length = Int(base.get(UInt32.self, at: offset))
            if length > 0, length <= largestPayload, offset + 8 + length <= raw.count,
                CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[(offset + 8)..<(offset + 8 + length)]))
                    == base.get(UInt32.self, at: offset + 4)
            {
                return offset
            }
            offset += 1
        }
        return nil
    }

    /// The text at `offset` of a payload (a `UInt16` byte count and UTF-8), moving `offset` past it; nil when the
    /// payload ends first or the bytes are not UTF-8.
    static func text(_ payload: UnsafeRawBufferPointer, at offset: inout Int) -> String? {
        guard payload.count - offset >= 2 else { return nil }
        let count = Int(payload.baseAddress!.get(UInt16.self, at: offset))
        guard payload.count - offset - 2 >= count else { return nil }
        let bytes = UnsafeRawBufferPointer(rebasing: payload[(offset + 2)..<(offset + 2 + count)])
        offset += 2 + count
        return String(validating: bytes, as: UTF8.self)
    }
}

/// What a journal's records add up to (``MarkerJournal/Contents``, ``LossJournal/Contents``), and where they stop.
package protocol JournalContents: Sendable {
    associatedtype Record
    /// The journal's name in the store's directory.
    static var fileName: String { get }
    /// The magic of the journal's header.
    static var magic: [UInt8] { get }
    /// The record of a payload, or nil when it holds none (damage, like a failed checksum).
    static func decode(_ payload: UnsafeRawBufferPointer) -> Record?
    /// Nothing read yet.
    init()
    /// Applies the next record.
    mutating func apply(_ record: Record)
    /// Called once after the last record.
    mutating func finish()
    /// Where the records stop, and why.
    var scan: JournalFraming.Scan { get set }
}

extension JournalContents {
    package mutating func finish() {}

    /// Where the valid records end.
    package var validLength: Int64 { scan.validLength }
    /// Why the records stop before the end of the file when valid bytes follow the damage (nil when they run to the
    /// end, or stop at an unfinished last record: ``tornTail``).
    package var damage: String? { scan.damage }
    /// The file ends inside its last record: one being written when the process stopped, never acknowledged.
    package var tornTail: Bool { scan.tornTail }

    /// Reads the journal at `path`.
    ///
    /// - Returns: what it holds, or nil when there is no file.
    /// - Throws: ``FileSystemError`` when it cannot be read; a file that is not a journal is returned with
    ///   ``damage`` set and nothing in it.
    package static func read(path: String, fileSystem: any FileSystem) throws(FileSystemError) -> Self? {
        try JournalFraming.readFile(path: path, fileSystem: fileSystem).map(parse)
    }

    /// What the bytes of a journal file hold.
    package static func parse(_ bytes: [UInt8]) -> Self {
        var contents = Self()
        contents.scan = JournalFraming.scan(bytes, magic: magic) { payload in
            guard let record = decode(payload) else { return false }
            contents.apply(record)
            return true
        }
        contents.finish()
        return contents
    }
}

extension [UInt8] {
    /// Appends `value` little-endian.
    mutating func put<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }

    /// Appends `text` as a `UInt16` byte count and its UTF-8 (cut at 65 535 bytes: labels are at most 256
    /// characters, stream names and reasons short).
    mutating func put(_ text: String) {
        let utf8 = Array(text.utf8.prefix(Int(UInt16.max)))
        put(UInt16(utf8.count))
        append(contentsOf: utf8)
    }
}
