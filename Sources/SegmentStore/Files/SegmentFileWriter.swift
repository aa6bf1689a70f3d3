import RewindCore
import RewindSQLite
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Time spent in a stream's segment file system calls (writes, writeback starts, syncs, seals), summed over its
/// segment files: how much of writing a frame waits for the disk (or the page cache), as opposed to compressing it.
/// Added to by whichever thread writes (an encoder's workers write a record's chunks, one at a time).
package final class IOTimer: Sendable {
    private let total = Atomic<Int64>(0)
    private let written = Atomic<Int64>(0)

    package init() {}

    /// Nanoseconds spent so far.
    package var nanoseconds: Int64 { total.load(ordering: .relaxed) }

    /// Bytes written so far.
    package var bytes: Int64 { written.load(ordering: .relaxed) }

    func count(bytes: Int) { written.add(Int64(bytes), ordering: .relaxed) }

    /// Runs `body` and adds the time it took.
    @inline(__always)
    func time<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        let start = ContinuousClock.now
        defer { total.add((ContinuousClock.now - start).nanosecondsClamped, ordering: .relaxed) }
        return try body()
    }
}

/// Appends records to one `NNNNNN.seg.partial` file and seals it into `NNNNNN.seg`.
///
/// Life of a file: `create` writes the header; `append` writes whole records at the end; `sync` makes everything
/// appended durable (`fdatasync`, plus the directory once so the new name survives), or `startSync` does that on a
/// ``SyncThread`` while appends go on and `finishSync` collects it; `seal` writes the footer and trailer, `fsync`s,
/// renames to `.seg` and `fsync`s the directory. A failed append cuts the file back to its last complete record, so
/// the file stays valid. Not thread-safe: one owner.
package final class SegmentFileWriter {
    package let header: SegmentHeader
    package let directory: String
    private let fileSystem: any FileSystem
    private var fd: Int32
    /// The current file name (`.seg.partial` until sealed).
    package private(set) var fileName: String
    /// The end of the last complete record: where the next one goes.
    package private(set) var endOffset: Int64
    /// Every complete record, in order.
    package private(set) var entries: [SegmentFrameEntry] = []
    /// Records made durable by the last successful ``sync()``.
    package private(set) var durableCount = 0
    package private(set) var isSealed = false
    private var directorySynced = false
    /// Where the bytes not yet handed to writeback start: every ``writebackBatch`` appended bytes are, so a sync
    /// finds most of them on their way to the disk already.
    private var writebackStart: Int64 = 0
    static let writebackBatch: Int64 = 2 << 20
    /// Whether appends start writeback. Starting it waits when the disk's queue is full; a start that took longer
    /// than ``slowWriteback`` leaves the rest to the next sync, after which appends start it again.
    private var startsWriteback = true
    static let slowWriteback: Duration = .milliseconds(1)

    /// Where the time spent in system calls goes.
    private let ioTimer: IOTimer
    /// A sync running on a ``SyncThread`` (``startSync(on:)``): the records and bytes it covers.
    private var runningSync: (thread: SyncThread, count: Int, end: Int64, syncsDirectory: Bool)?

    package var path: String { directory + "/" + fileName }
    package var frameCount: Int { entries.count }
    package var firstPTS: Int64? { entries.first?.ptsNanoseconds }
    package var lastPTS: Int64? { entries.last?.ptsNanoseconds }
    package var lastDurablePTS: Int64? { durableCount > 0 ? entries[durableCount - 1].ptsNanoseconds : nil }

    /// Creates `directory/NNNNNN.seg.partial` (it must not exist) and writes the header.
    ///
    /// - Throws: ``FileSystemError``; nothing is left behind when the header cannot be written.
    package init(
        directory: String, header: SegmentHeader, fileSystem: any FileSystem, ioTimer: IOTimer = IOTimer()
    ) throws(FileSystemError) {
        self.header = header
        self.ioTimer = ioTimer
        self.directory = directory
        self.fileSystem = fileSystem
        fileName = SegmentFormat.fileName(sequence: header.sequence, partial: true)
        let path = directory + "/" + fileName
        fd = try fileSystem.open(path, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
        let bytes = header.encoded()
        do {
            try fileSystem.writeAll(fd, bytes, offset: 0, path: path)
        } catch {
            fileSystem.close(fd)
            try? fileSystem.unlink(path)
            throw error
        }
        endOffset = Int64(bytes.count)
        entries.reserveCapacity(4096)
    }

    deinit { close() }

    /// Closes the descriptor without sealing (the file stays a `.partial`, valid up to its last record). A sync
    /// still running is waited for first, and its outcome forgotten: the records it covered count as not durable.
    package func close() {
        if let running = runningSync {
            _ = running.thread.wait()
            runningSync = nil
        }
        if fd >= 0 {
            fileSystem.close(fd)
            fd = -1
        }
    }

    /// Appends one record with one gathered write: `pieces` are the record in order, and the first starts with
    /// ``SegmentFormat/recordHeaderLength`` bytes of space that this call fills in, followed by the payload.
    ///
    /// - Parameters:
    ///   - pieces: the record's pieces (``FrameEncoder/pieces``); changed by the call (short writes are resumed by
    ///     moving their starts).
    ///   - streamedBytes: bytes at the end of the record already written through ``writeRecordBytes(_:atRecordOffset:)``
    ///     (the encoder wrote its chunks while compressing); `pieces` are the record's start, written last.
    /// - Returns: the new entry (its offset is what the index stores).
    /// - Throws: ``FileSystemError``; the file is then cut back to its previous end (best effort) and is still valid.
    @discardableResult
    package func append(
        pieces: UnsafeMutableBufferPointer<iovec>, ptsNanoseconds: Int64, wallNanoseconds: Int64,
        encoded: EncodedFrame, streamedBytes: Int = 0
    ) throws(FileSystemError) -> SegmentFrameEntry {
        precondition(!isSealed && fd >= 0, "append to a sealed or closed segment")
        let recordLength = SegmentFormat.recordHeaderLength + encoded.storedLength
        precondition(
            pieces.reduce(0) { $0 + $1.iov_len } + streamedBytes == recordLength, "pieces do not add up to the record")
        precondition(pieces[0].iov_len >= SegmentFormat.recordHeaderLength, "no room for the record header")
        let header = RecordHeader(
            frameNumber: UInt32(entries.count), ptsNanoseconds: ptsNanoseconds, wallNanoseconds: wallNanoseconds,
            rawLength: self.header.stream.layout.byteCount, storedLength: encoded.storedLength,
            flags: encoded.isKey ? SegmentFormat.keyFlag : 0, codec: encoded.codec.rawValue,
            storedCRC: encoded.storedCRC)
        header.write(to: pieces[0].iov_base!)
        do {
            try writeAll(pieces, offset: endOffset)
        } catch {
            try? fileSystem.ftruncate(fd, length: endOffset, path: path)
            throw error
        }
        let entry = SegmentFrameEntry(
            offset: endOffset, ptsNanoseconds: ptsNanoseconds, wallNanoseconds: wallNanoseconds,
            rawLength: header.rawLength, storedLength: encoded.storedLength, flags: header.flags, codec: header.codec)
        entries.append(entry)
        endOffset += Int64(recordLength)
        if startsWriteback && endOffset - writebackStart >= Self.writebackBatch {
            let started = ContinuousClock.now
            ioTimer.time { fileSystem.startWriteback(fd, offset: writebackStart, length: endOffset - writebackStart) }
            writebackStart = endOffset
            if ContinuousClock.now - started > Self.slowWriteback { startsWriteback = false }
        }
        return entry
    }

    /// Cuts off whatever was written of a record that will not be appended (its chunks, written while it was
    /// encoded, when a later write failed); best effort, like the cut after a failed ``append``.
    package func abandonRecord() {
        guard fd >= 0 else { return }
        try? fileSystem.ftruncate(fd, length: endOffset, path: path)
    }

    /// Writes every piece at `offset` in order, with `pwritev` of at most 1024 pieces at a time, resuming short
    /// writes; a write that makes no progress is `EIO`.
    private func writeAll(_ pieces: UnsafeMutableBufferPointer<iovec>, offset: Int64) throws(FileSystemError) {
        try ioTimer.time { () throws(FileSystemError) in try writeAllUntimed(pieces, offset: offset) }
    }

    private func writeAllUntimed(_ pieces: UnsafeMutableBufferPointer<iovec>, offset: Int64) throws(FileSystemError) {
        var index = 0
        var position = offset
        while index < pieces.count {
            if pieces[index].iov_len == 0 {
                index += 1
                continue
            }
            let batch = UnsafeBufferPointer(rebasing: pieces[index..<min(pieces.count, index + 1024)])
            var written = try fileSystem.writev(fd, batch, offset: position, path: path)
            if written <= 0 { throw FileSystemError(operation: "pwritev", path: path, code: EIO) }
            position += Int64(written)
            ioTimer.count(bytes: written)
            while written > 0 {
                let length = pieces[index].iov_len
                if written >= length {
                    written -= length
                    pieces[index].iov_len = 0
                    index += 1
                } else {
                    pieces[index].iov_base = pieces[index].iov_base! + written
                    pieces[index].iov_len = length - written
                    written = 0
                }
            }
        }
    }

    /// Whether a sync started by ``startSync(on:)`` has not been collected by ``finishSync(waiting:)`` yet.
    package var isSyncing: Bool { runningSync != nil }

    /// Starts making every record appended so far durable on `thread` (`fdatasync`, and the directory the first
    /// time), while appends go on, then runs `alsoSync` on the same thread (after a sync that succeeded).
    /// ``finishSync(waiting:)`` collects the outcome; until then only appends may follow (``sync()``, ``seal()`` and
    /// ``rollBackToDurable()`` need it collected first).
    package func startSync(on thread: SyncThread, then alsoSync: (@Sendable () -> Void)? = nil) {
        precondition(runningSync == nil && fd >= 0 && !isSealed, "sync started twice, or on a closed segment")
        let (fd, path, directory, fileSystem, ioTimer) = (fd, path, directory, fileSystem, ioTimer)
        let syncsDirectory = !directorySynced
        runningSync = (thread, entries.count, endOffset, syncsDirectory)
        thread.start {
            do throws(FileSystemError) {
                try ioTimer.time { () throws(FileSystemError) in try fileSystem.fdatasync(fd, path: path) }
                if syncsDirectory { try fileSystem.syncDirectory(directory) }
                alsoSync?()
                return nil
            } catch {
                return error
            }
        }
    }

    /// Collects the sync started by ``startSync(on:)``: the records it covered are durable when it succeeded.
    ///
    /// - Parameter waiting: whether to wait for a sync still running (else nil is returned at once).
    /// - Returns: nil when no sync was started or it is still running and `waiting` is false; else its outcome.
    ///   After a failure nothing more of the file counts as durable than before it: a later `fdatasync` may report
    ///   success for pages whose write-back failed, so the caller must not retry but cut back (``rollBackToDurable()``).
    package func finishSync(waiting: Bool) -> Result<Void, FileSystemError>? {
        guard let running = runningSync, waiting || !running.thread.isRunning else { return nil }
        let failure = running.thread.wait()
        runningSync = nil
        if let failure { return .failure(failure) }
        durableCount = max(durableCount, running.count)
        if running.syncsDirectory { directorySynced = true }
        if running.end > writebackStart { writebackStart = running.end }
        startsWriteback = true
        return .success(())
    }

    /// Makes every appended record durable.
    ///
    /// - Throws: ``FileSystemError``. After a failed sync nothing since the last good sync can be trusted: the
    ///   caller should ``rollBackToDurable()``.
    package func sync() throws(FileSystemError) {
        precondition(fd >= 0 && runningSync == nil, "sync of a closed segment, or with a sync running")
        try ioTimer.time { () throws(FileSystemError) in try fileSystem.fdatasync(fd, path: path) }
        writebackStart = endOffset
        startsWriteback = true
        if !directorySynced {
            try fileSystem.syncDirectory(directory)
            directorySynced = true
        }
        durableCount = entries.count
    }

    /// Forgets records written after the last successful sync and cuts the file there.
    package func rollBackToDurable() {
        precondition(runningSync == nil, "cut back with a sync running")
        guard durableCount < entries.count else { return }
        let end =
            durableCount == 0
            ? Int64(header.length)
            : entries[durableCount - 1].offset
                + Int64(entries[durableCount - 1].recordLength)
        entries.removeSubrange(durableCount...)
        endOffset = end
        if fd >= 0 { try? fileSystem.ftruncate(fd, length: end, path: path) }
    }

    /// Seals the file: footer and trailer after the last record, `fsync`, rename to `.seg`, `fsync` the directory.
    ///
    /// - Returns: the sealed file name.
    /// - Throws: ``FileSystemError``; the file is then cut back to its last record and stays a valid `.partial`
    ///   (recovery seals it later).
    @discardableResult
    package func seal() throws(FileSystemError) -> String {
        precondition(!isSealed && fd >= 0 && runningSync == nil, "seal of a sealed or closed segment, or while syncing")
        let bytes = SegmentFormat.footerAndTrailer(entries: entries, footerOffset: endOffset)
        let partialPath = path
        do {
            try ioTimer.time { () throws(FileSystemError) in
                try fileSystem.writeAll(fd, bytes, offset: endOffset, path: partialPath)
                try fileSystem.fsync(fd, path: partialPath)
            }
        } catch {
            try? fileSystem.ftruncate(fd, length: endOffset, path: partialPath)
            throw error
        }
        let sealedName = SegmentFormat.fileName(sequence: header.sequence, partial: false)
        try fileSystem.rename(partialPath, to: directory + "/" + sealedName)
        fileName = sealedName
        isSealed = true
        durableCount = entries.count
        close()
        try fileSystem.syncDirectory(directory)
        return sealedName
    }
}

extension SegmentFileWriter: RecordSink {
    /// Writes part of the record that the next ``append(pieces:ptsNanoseconds:wallNanoseconds:encoded:streamedBytes:)``
    /// appends, `offset` bytes into it (after the end of the last complete record).
    package func writeRecordBytes(_ pieces: UnsafeMutableBufferPointer<iovec>, atRecordOffset offset: Int)
        throws(FileSystemError)
    {
        precondition(!isSealed && fd >= 0, "write to a sealed or closed segment")
        try writeAll(pieces, offset: endOffset + Int64(offset))
    }
}

/// Seals an existing `.partial` file found by recovery: cuts it at its last valid record, writes the footer and
/// trailer, `fsync`s, renames to `.seg`, `fsync`s the directory.
///
/// - Parameters:
///   - scan: the result of scanning the file (its entries and valid end).
/// - Returns: the sealed file name.
func sealRecoveredPartial(
    directory: String, fileName: String, header: SegmentHeader, scan: SegmentFileReader.ScanResult,
    fileSystem: any FileSystem
) throws(FileSystemError) -> String {
    let path = directory + "/" + fileName
    let fd = try fileSystem.open(path, flags: O_WRONLY, mode: 0)
    defer { fileSystem.close(fd) }
    try fileSystem.ftruncate(fd, length: scan.validEnd, path: path)
    let bytes = SegmentFormat.footerAndTrailer(entries: scan.entries, footerOffset: scan.validEnd)
    do {
        try fileSystem.writeAll(fd, bytes, offset: scan.validEnd, path: path)
        try fileSystem.fsync(fd, path: path)
    } catch {
        try? fileSystem.ftruncate(fd, length: scan.validEnd, path: path)
        throw error
    }
    // Under its own number (a file another store made says another in its header), and never over a file there:
    // rename would replace it, and its frames with it.
    let sealedName = SegmentFormat.fileName(
        sequence: SegmentFormat.sequence(ofFileName: fileName) ?? header.sequence, partial: false)
    guard !fileSystem.fileExists(directory + "/" + sealedName) else {
        throw FileSystemError(
            operation: "rename", path: directory + "/" + sealedName, code: EEXIST,
            detail: "\(sealedName) is there already; \(fileName) is left as it is")
    }
    try fileSystem.rename(path, to: directory + "/" + sealedName)
    try fileSystem.syncDirectory(directory)
    return sealedName
}
