import Glibc
import RewindCore
import RewindSystem

/// A buffered writer over a file descriptor: small writes gather in a buffer, large ones go straight to the file.
///
///     buffer: | pending (count bytes) | free ... capacity |
///     bytesWritten counts every byte accepted, pending or not.
///
/// Every system call goes through a ``FileSystem``, so faults injected there reach exports. Owns the buffer, the
/// three `iovec`s every `writev` reuses, and the descriptor when it opened it (from a path): ``close()`` flushes
/// and closes; `deinit` closes without flushing.
final class OutputFile {
    let name: String
    let descriptor: Int32
    private let fileSystem: any FileSystem
    private let ownsDescriptor: Bool
    /// Whether earlier bytes can be read back with ``read(at:into:)`` (a regular file opened read-write).
    let isReadable: Bool
    /// Whether the output is a regular file (so it can be patched with ``patch(at:_:)``).
    let isRegularFile: Bool
    private let buffer: UnsafeMutableRawBufferPointer
    /// The pieces of one `writev`: pending bytes, then up to two caller buffers.
    private let vectors: UnsafeMutableBufferPointer<iovec>
    private var count = 0
    private var isClosed = false
    /// Disk blocks are reserved up to this offset; released again by ``close()``.
    private var reservedEnd: Int64 = 0
    private var canReserve: Bool
    private(set) var bytesWritten: Int64 = 0
    /// The descriptor's status flags before a pipe or FIFO was made non-blocking (restored when done); nil when it
    /// was not. A full pipe is then waited for with `poll`, which an ``Interruption`` ends: a reader that stops
    /// reading cannot hold an interrupted export for ever.
    private var blockingFlags: Int32?

    /// Opens `destination`: creates or truncates a path (mode 0644), or adopts a descriptor the caller keeps.
    ///
    /// - Parameters:
    ///   - destination: the path or descriptor to write.
    ///   - fileSystem: where the system calls go.
    ///   - capacity: the buffer's size in bytes.
    /// - Throws: ``ExportError`` with the system's reason when the path cannot be opened.
    init(_ destination: ExportDestination, fileSystem: any FileSystem, capacity: Int = 1 << 20) throws(ExportError) {
        self.fileSystem = fileSystem
        switch destination {
        case .path(let path):
            // Something other than a regular file (a FIFO, a device) is opened write-only: a FIFO then waits for
            // its reader, and a reader that leaves makes the writes fail (EPIPE) instead of filling the pipe for ever.
            var info = stat()
            let isSpecial = stat(path, &info) == 0 && (info.st_mode & S_IFMT) != S_IFREG
            let fd: Int32
            do {
                fd = try fileSystem.open(
                    path, flags: isSpecial ? O_WRONLY : O_RDWR | O_CREAT | O_TRUNC, mode: 0o644)
            } catch {
                throw ExportError(
                    destination: path, reason: .system(action: "cannot create the file", Errno(rawValue: error.code)))
            }
            descriptor = fd
            name = path
            ownsDescriptor = true
            isReadable = !isSpecial
        case .fileDescriptor(let fd, let label):
            descriptor = fd.rawValue
            name = label
            ownsDescriptor = false
            isReadable = false
        }
        isRegularFile = (try? fileSystem.isRegularFile(descriptor, path: name)) ?? false
        canReserve = ownsDescriptor && isRegularFile
        buffer = .allocate(byteCount: capacity, alignment: 16)
        vectors = .allocate(capacity: 3)
        blockingFlags = Interruption.makeNonBlockingIfPipe(descriptor)
    }

    deinit {
        buffer.deallocate()
        vectors.deallocate()
        restoreBlocking()
        if ownsDescriptor && !isClosed { fileSystem.close(descriptor) }
    }

    /// Gives a pipe or FIFO its own status flags back (a descriptor the caller keeps, such as stdout, may be shared
    /// with other processes).
    private func restoreBlocking() {
        guard let flags = blockingFlags else { return }
        blockingFlags = nil
        _ = fcntl(descriptor, F_SETFL, flags)
    }

    /// What an export leaves free on its file system when it can tell in advance (a gap's repeated frames): the
    /// default free space a recorder with `--disk` keeps, so an export never takes the room a recording needs.
    static let keptFree: Int64 = 256 << 20

    /// The bytes free on the file system of a regular file written by path, less ``keptFree``; nil when that cannot
    /// be told (a descriptor, a device, a failed query).
    func roomLeft() -> Int64? {
        guard ownsDescriptor, isRegularFile else { return nil }
        let slash = name.lastIndex(of: "/")
        let directory = slash.map { String(name[..<$0]) } ?? "."
        guard let free = try? fileSystem.availableBytes(directory.isEmpty ? "/" : directory) else { return nil }
        return free - OutputFile.keptFree
    }

    /// Appends `bytes`.
    ///
    /// - Throws: ``ExportError`` when the system write fails.
    func write(_ bytes: UnsafeRawBufferPointer) throws(ExportError) {
        try write(bytes, UnsafeRawBufferPointer(start: nil, count: 0))
    }

    /// Appends `first`, then `second`. Small pieces gather in the buffer; large ones go out together with the
    /// pending bytes in one `writev(2)`, so a frame header and its planes cost one system call.
    ///
    /// - Throws: ``ExportError`` when the system write fails.
    func write(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) throws(ExportError) {
        let total = first.count + second.count
        guard total > 0 else { return }
        if total >= buffer.count / 2 {
            reserveAhead(total)
            let pending = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            count = 0
            try writeFully(pending, first, second)
        } else {
            if count + total > buffer.count { try flush() }
            append(first)
            append(second)
        }
        bytesWritten += Int64(total)
    }

    /// Makes the file `length` bytes long, its blocks reserved where the file system can (files this writer
    /// created), for ``write(_:at:)`` to fill: the pending bytes are written first, and ``bytesWritten`` becomes
    /// `length`.
    ///
    /// - Throws: ``ExportError`` when the pending bytes cannot be written, or there is no room for `length` bytes.
    func extend(to length: Int64) throws(ExportError) {
        precondition(isRegularFile && isReadable, "output \(name) is not a file to fill in place")
        try flush()
        if canReserve {
            do {
                if try fileSystem.reserve(descriptor, offset: 0, length: length, path: name) { reservedEnd = length }
            } catch {
                throw failure("reserving \(length) bytes", error.code)
            }
        }
        bytesWritten = length
    }

    /// Writes `bytes` at `offset` of a file made long enough by ``extend(to:)``. Safe to call from several threads
    /// at once (the descriptor's position is not used).
    ///
    /// - Throws: ``ExportError`` when the system write fails.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(ExportError) {
        do {
            try fileSystem.writeAll(descriptor, bytes, offset: offset, path: name)
        } catch {
            throw failure("writing", error.code)
        }
    }

    private func append(_ part: UnsafeRawBufferPointer) {
        guard part.count > 0 else { return }
        (buffer.baseAddress! + count).copyMemory(from: part.baseAddress!, byteCount: part.count)
        count += part.count
    }

    func write(_ bytes: [UInt8]) throws(ExportError) {
        let result = bytes.withUnsafeBytes { raw in Result { () throws(ExportError) in try write(raw) } }
        try result.get()
    }

    /// Writes out the pending bytes.
    func flush() throws(ExportError) {
        guard count > 0 else { return }
        let pending = count
        count = 0
        try writeFully(UnsafeRawBufferPointer(rebasing: buffer[0..<pending]))
    }

    /// Reads back bytes already written (the pending ones are flushed first).
    ///
    /// - Throws: ``ExportError`` when reading fails or comes up short.
    func read(at offset: Int64, into destination: UnsafeMutableRawBufferPointer) throws(ExportError) {
        precondition(isReadable, "output \(name) cannot be read back")
        try flush()
        let done: Int
        do {
            done = try fileSystem.readAll(descriptor, into: destination, offset: offset, path: name)
        } catch {
            throw failure("reading back", error.code)
        }
        guard done == destination.count else { throw failure("reading back", EIO) }
    }

    /// Overwrites bytes already written (or made room for by ``extend(to:)``), without moving the write position
    /// (regular files only).
    func patch(at offset: Int64, _ bytes: [UInt8]) throws(ExportError) {
        precondition(isRegularFile, "output \(name) cannot be patched")
        try flush()
        do {
            try fileSystem.writeAll(descriptor, bytes, offset: offset, path: name)
        } catch {
            throw failure("patching", error.code)
        }
    }

    /// How far ahead of the write position disk blocks are reserved.
    static let reservationWindow: Int64 = 128 << 20

    /// Keeps disk blocks reserved up to a window past what is written (files this writer created only), so the
    /// writes skip block allocation: about a third less time per byte on ext4. Best effort: where the file system
    /// cannot reserve, nothing happens; when it has no room, what was reserved is released at once and the writes
    /// then fail (or not) on their own. ``close()`` releases what was reserved and not written.
    private func reserveAhead(_ upcoming: Int) {
        guard canReserve, bytesWritten + Int64(upcoming) > reservedEnd else { return }
        let end = bytesWritten + Int64(upcoming) + OutputFile.reservationWindow
        do {
            if try fileSystem.reserve(descriptor, offset: 0, length: end, path: name) {
                reservedEnd = end
            } else {
                canReserve = false
            }
        } catch {
            canReserve = false
            if error.code == ENOSPC {
                // Release what was reserved: cut back to the bytes on disk (the pending ones are not yet).
                try? fileSystem.ftruncate(descriptor, length: bytesWritten - Int64(count), path: name)
            }
        }
    }

    /// Flushes and, when the descriptor is owned, closes it.
    func close() throws(ExportError) {
        guard !isClosed else { return }
        try flush()
        isClosed = true
        restoreBlocking()
        // Truncating to the current size frees reserved blocks past the end.
        if reservedEnd > bytesWritten {
            do {
                try fileSystem.ftruncate(descriptor, length: bytesWritten, path: name)
            } catch {
                if ownsDescriptor { fileSystem.close(descriptor) }
                throw failure("truncating", error.code)
            }
        }
        guard ownsDescriptor else { return }
        do {
            try fileSystem.close(descriptor, path: name)
        } catch {
            throw failure("closing", error.code)
        }
    }

    private func writeFully(_ bytes: UnsafeRawBufferPointer) throws(ExportError) {
        try writeFully(
            bytes, UnsafeRawBufferPointer(start: nil, count: 0), UnsafeRawBufferPointer(start: nil, count: 0))
    }

    /// Writes the three pieces in order with `writev(2)` at the descriptor's position, resuming after short writes.
    private func writeFully(
        _ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, _ c: UnsafeRawBufferPointer
    ) throws(ExportError) {
        var used = 0
        func add(_ part: UnsafeRawBufferPointer) {
            guard part.count > 0 else { return }
            vectors[used] = iovec(iov_base: UnsafeMutableRawPointer(mutating: part.baseAddress!), iov_len: part.count)
            used += 1
        }
        add(a)
        add(b)
        add(c)
        var first = 0
        while first < used {
            let written: Int
            do {
                let pieces = UnsafeBufferPointer(rebasing: vectors[first..<used])
                written = try fileSystem.writev(descriptor, pieces, offset: nil, path: name)
            } catch {
                guard error.code == EAGAIN && blockingFlags != nil else { throw failure("writing", error.code) }
                // A full pipe: wait for its reader (or for an interruption).
                guard Interruption.waitUntilWritable(descriptor) else {
                    throw ExportError(destination: name, reason: .interrupted(waiting: "its reader to take more"))
                }
                continue
            }
            guard written > 0 else { throw failure("writing", EIO) }
            var left = written
            while first < used && left >= vectors[first].iov_len {
                left -= vectors[first].iov_len
                first += 1
            }
            if left > 0 {
                vectors[first].iov_base += left
                vectors[first].iov_len -= left
            }
        }
    }

    private func failure(_ action: String, _ code: Int32) -> ExportError {
        ExportError(destination: name, reason: .system(action: "\(action) failed", Errno(rawValue: code)))
    }
}
