import CPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A failed system call: which call, on which path, and the `errno` it returned.
public struct FileSystemError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The call that failed (`open`, `pwrite`, `fdatasync`, …).
    public let operation: String
    /// The file or directory it was about.
    public let path: String
    /// The error number (`ENOSPC`, `EIO`, …).
    public let code: Int32
    /// What was found instead of a failed call, when the library refused on its own (a free-space check: `4 KiB
    /// free, a frame needs 160 KiB`); nil for a call that failed.
    public let detail: String?

    /// Describes a failed call, or a refusal with the error number it stands for (`detail`).
    ///
    /// - Parameters:
    ///   - operation: the system call's name, as it appears in messages (`open`, `pwrite`, …).
    ///   - path: the file or directory the call was about, or a name for a descriptor it did not open.
    ///   - code: the `errno` the call left.
    ///   - detail: what was found, when no call failed.
    public init(operation: String, path: String, code: Int32, detail: String? = nil) {
        self.operation = operation
        self.path = path
        self.code = code
        self.detail = detail
    }

    /// Whether the error means the disk (or quota) is full.
    public var isDiskFull: Bool { code == ENOSPC || code == EDQUOT }

    /// The call, the path, the C library's words for the error and its number, on one line
    /// (`pwrite 'a.seg' failed: No space left on device (errno 28)`).
    public var description: String {
        if let detail { return "'\(path)': \(detail): \(Errno(rawValue: code)) (errno \(code))" }
        return "\(operation) '\(path)' failed: \(Errno(rawValue: code)) (errno \(code))"
    }
}

/// The thin seam between the library and the operating system: every system call the segment store, the exporters
/// and the file inputs make on files goes through one of these methods, so tests can inject full disks, I/O errors
/// and short writes.
///
/// A method may be given a descriptor it did not open (standard output, a pipe, a file the caller opened); `path`
/// then only names it in errors.
///
/// Implementations retry `EINTR` themselves; every other failure throws ``FileSystemError``.
public protocol FileSystem: Sendable {
    /// `open(2)`; returns the descriptor.
    func open(_ path: String, flags: Int32, mode: mode_t) throws(FileSystemError) -> Int32
    /// `close(2)`; errors are ignored (the descriptor is gone either way).
    func close(_ fd: Int32)
    /// `close(2)`, reporting its error (a delayed write error on some file systems). The descriptor is gone either
    /// way, so an interrupted close is not retried.
    func close(_ fd: Int32, path: String) throws(FileSystemError)
    /// One `pwrite(2)`; returns the bytes written, which may be fewer than asked.
    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, offset: Int64, path: String) throws(FileSystemError)
        -> Int
    /// One `writev(2)` at the descriptor's position (`offset` nil: pipes, standard output, appending) or one
    /// `pwritev(2)` at `offset`; returns the bytes written, which may be fewer than asked.
    ///
    /// - Parameter buffers: the pieces, written in order as one contiguous run of bytes.
    func writev(_ fd: Int32, _ buffers: UnsafeBufferPointer<iovec>, offset: Int64?, path: String)
        throws(FileSystemError) -> Int
    /// One `read(2)` at the descriptor's position; returns the bytes read (0 at end of input).
    func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, path: String) throws(FileSystemError) -> Int
    /// One `pread(2)`; returns the bytes read (0 at end of file).
    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, offset: Int64, path: String)
        throws(FileSystemError) -> Int
    /// `fsync(2)`: data and metadata durable.
    func fsync(_ fd: Int32, path: String) throws(FileSystemError)
    /// `fdatasync(2)`: data (and the size) durable.
    func fdatasync(_ fd: Int32, path: String) throws(FileSystemError)
    /// `ftruncate(2)`.
    func ftruncate(_ fd: Int32, length: Int64, path: String) throws(FileSystemError)
    /// Starts writing the bytes `offset ..< offset + length` of a file to the disk without waiting for them
    /// (`sync_file_range(2)` with `SYNC_FILE_RANGE_WRITE`), so that a later `fdatasync` has less to wait for. Best
    /// effort: it makes nothing durable and reports nothing (a failed write shows at the next sync).
    func startWriteback(_ fd: Int32, offset: Int64, length: Int64)
    /// Reserves disk blocks for the bytes `offset ..< offset + length` without changing the file's size
    /// (`fallocate(2)` with `FALLOC_FL_KEEP_SIZE`), so later writes into the range skip block allocation.
    ///
    /// - Returns: false where the file system or platform cannot reserve blocks.
    /// - Throws: ``FileSystemError`` for any other failure (`ENOSPC`: blocks may be reserved in part).
    func reserve(_ fd: Int32, offset: Int64, length: Int64, path: String) throws(FileSystemError) -> Bool
    /// The size of an open file (`fstat(2)`).
    func size(_ fd: Int32, path: String) throws(FileSystemError) -> Int64
    /// Whether an open descriptor is a regular file, not a pipe, socket or device (`fstat(2)`).
    func isRegularFile(_ fd: Int32, path: String) throws(FileSystemError) -> Bool
    /// `rename(2)`.
    func rename(_ from: String, to: String) throws(FileSystemError)
    /// `unlink(2)`; a missing file is not an error.
    func unlink(_ path: String) throws(FileSystemError)
    /// `mkdir(2)` with `mode` (less the umask); an existing directory is not an error (and keeps its mode).
    func makeDirectory(_ path: String, mode: mode_t) throws(FileSystemError)
    /// The names in a directory, without `.` and `..`.
    func contentsOfDirectory(_ path: String) throws(FileSystemError) -> [String]
    /// `flock(2)`; returns false when a non-blocking lock is held elsewhere.
    func flock(_ fd: Int32, operation: Int32, path: String) throws(FileSystemError) -> Bool
    /// Bytes available to an unprivileged writer on the filesystem holding `path` (`statvfs(3)`).
    func availableBytes(_ path: String) throws(FileSystemError) -> Int64
    /// Whether `path` exists.
    func fileExists(_ path: String) -> Bool
}

extension FileSystem {
    /// `mkdir(2)` with mode `0o755`, as `mkdir` makes a directory; an existing directory is not an error.
    public func makeDirectory(_ path: String) throws(FileSystemError) { try makeDirectory(path, mode: 0o755) }

    /// The size of the file at `path` in bytes (opened, measured, closed); nil when it cannot be opened or measured
    /// (gone, or a limit of the system).
    public func fileBytes(_ path: String) -> Int64? {
        guard let fd = try? open(path, flags: O_RDONLY | O_CLOEXEC, mode: 0) else { return nil }
        defer { close(fd) }
        return try? size(fd, path: path)
    }

    /// Does nothing: a file system that cannot start writeback early lets the next sync do all the work.
    public func startWriteback(_ fd: Int32, offset: Int64, length: Int64) {}

    /// Writes all of `bytes` at `offset`, looping over short writes.
    ///
    /// - Throws: ``FileSystemError`` from the first failing write; a write that makes no progress is `EIO`.
    ///   Some bytes may have been written before the failure.
    public func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, offset: Int64, path: String)
        throws(FileSystemError)
    {
        var done = 0
        while done < bytes.count {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[done...])
            let n = try pwrite(fd, rest, offset: offset + Int64(done), path: path)
            if n <= 0 { throw FileSystemError(operation: "pwrite", path: path, code: EIO) }
            done += n
        }
    }

    /// Writes all of an array's bytes at `offset`, looping over short writes.
    ///
    /// - Throws: ``FileSystemError`` from the first failing write; some bytes may have been written before it.
    public func writeAll(_ fd: Int32, _ bytes: [UInt8], offset: Int64, path: String) throws(FileSystemError) {
        var failure: FileSystemError?
        bytes.withUnsafeBytes { raw in
            do throws(FileSystemError) { try writeAll(fd, raw, offset: offset, path: path) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    /// Reads exactly `buffer.count` bytes at `offset`, looping over short reads.
    ///
    /// - Returns: the bytes actually read, fewer than `buffer.count` only at end of file.
    /// - Throws: ``FileSystemError`` from the first failing read.
    public func readAll(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, offset: Int64, path: String)
        throws(FileSystemError) -> Int
    {
        var done = 0
        while done < buffer.count {
            let rest = UnsafeMutableRawBufferPointer(rebasing: buffer[done...])
            let n = try pread(fd, into: rest, offset: offset + Int64(done), path: path)
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Makes a directory entry change (create, rename, unlink) durable by syncing the directory itself.
    ///
    /// - Parameter path: the directory that holds the changed entry, not the entry.
    /// - Throws: ``FileSystemError`` from opening or syncing the directory.
    public func syncDirectory(_ path: String) throws(FileSystemError) {
        let fd = try open(path, flags: O_RDONLY | O_DIRECTORY, mode: 0)
        defer { close(fd) }
        try fsync(fd, path: path)
    }
}

private func systemFlock(_ fd: Int32, _ operation: Int32) -> Int32 { flock(fd, operation) }
private func systemStatvfs(_ path: String, _ info: inout statvfs) -> Int32 { statvfs(path, &info) }

/// The real file system: direct POSIX calls, retrying `EINTR`.
public struct POSIXFileSystem: FileSystem {
    /// Makes the file system; it holds no state, so every value is the same.
    public init() {}

    @inline(__always)
    private func retrying<T: BinaryInteger>(_ operation: String, _ path: String, _ call: () -> T)
        throws(FileSystemError) -> T
    {
        let result = System.retryingInterrupts(call)
        if result >= 0 { return result }
        throw FileSystemError(operation: operation, path: path, code: errno)
    }

    /// `open(2)` with `O_CLOEXEC` added to `flags`, so descriptors never leak into child processes.
    ///
    /// - Parameters:
    ///   - path: the file to open.
    ///   - flags: `O_RDONLY`, `O_RDWR`, `O_CREAT`, … as for `open(2)`.
    ///   - mode: the permission bits for a file `O_CREAT` makes; ignored otherwise.
    /// - Returns: the new descriptor; the caller closes it.
    /// - Throws: ``FileSystemError`` with the call's `errno` (`ENOENT`, `EACCES`, …).
    public func open(_ path: String, flags: Int32, mode: mode_t) throws(FileSystemError) -> Int32 {
        try retrying("open", path) { Glibc.open(path, flags | O_CLOEXEC, mode) }
    }

    /// `close(2)`, ignoring its result: the descriptor is released either way.
    public func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// `close(2)`, reporting its error; `EINTR` is not an error (Linux releases the descriptor before it can be
    /// interrupted), so it is neither retried nor thrown.
    ///
    /// - Throws: ``FileSystemError`` for `EIO` and other delayed write errors.
    public func close(_ fd: Int32, path: String) throws(FileSystemError) {
        if Glibc.close(fd) != 0 && errno != EINTR {
            throw FileSystemError(operation: "close", path: path, code: errno)
        }
    }

    /// One `pwrite(2)` of `bytes` at byte `offset`, retried on `EINTR`; the descriptor's position does not move.
    ///
    /// - Returns: the bytes written, which may be fewer than `bytes.count`; `writeAll` loops over
    ///   short writes.
    /// - Throws: ``FileSystemError`` (`ENOSPC`, `EIO`, …).
    public func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, offset: Int64, path: String)
        throws(FileSystemError) -> Int
    {
        try retrying("pwrite", path) { Glibc.pwrite(fd, bytes.baseAddress, bytes.count, off_t(offset)) }
    }

    /// One gathered write, retried on `EINTR`: `pwritev(2)` at byte `offset`, or `writev(2)` at the descriptor's
    /// position when `offset` is nil.
    ///
    /// - Returns: the bytes written, which may be fewer than the buffers hold together.
    /// - Throws: ``FileSystemError`` naming `pwritev` or `writev`.
    public func writev(_ fd: Int32, _ buffers: UnsafeBufferPointer<iovec>, offset: Int64?, path: String)
        throws(FileSystemError) -> Int
    {
        let count = Int32(buffers.count)
        if let offset {
            return try retrying("pwritev", path) { Glibc.pwritev(fd, buffers.baseAddress, count, off_t(offset)) }
        }
        return try retrying("writev", path) { Glibc.writev(fd, buffers.baseAddress, count) }
    }

    /// One `read(2)` of up to `buffer.count` bytes at the descriptor's position, retried on `EINTR`.
    ///
    /// - Returns: the bytes read; 0 at end of input.
    /// - Throws: ``FileSystemError`` (`EIO`, `EAGAIN` on a non-blocking descriptor, …).
    public func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, path: String) throws(FileSystemError)
        -> Int
    {
        try retrying("read", path) { Glibc.read(fd, buffer.baseAddress, buffer.count) }
    }

    /// One `pread(2)` of up to `buffer.count` bytes at byte `offset`, retried on `EINTR`; the position does not move.
    ///
    /// - Returns: the bytes read, fewer than asked only at end of file or on a short read; 0 at end of file.
    /// - Throws: ``FileSystemError`` (`EIO`, …).
    public func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, offset: Int64, path: String)
        throws(FileSystemError) -> Int
    {
        try retrying("pread", path) { Glibc.pread(fd, buffer.baseAddress, buffer.count, off_t(offset)) }
    }

    /// `fsync(2)`, retried on `EINTR`: the file's data and metadata reach stable storage before it returns.
    ///
    /// - Throws: ``FileSystemError``; after `EIO` the unwritten data may be lost, so do not assume a retry helps.
    public func fsync(_ fd: Int32, path: String) throws(FileSystemError) {
        _ = try retrying("fsync", path) { Glibc.fsync(fd) }
    }

    /// `fdatasync(2)`, retried on `EINTR`: the file's data and its size reach stable storage, other metadata may not.
    ///
    /// - Throws: ``FileSystemError``; after `EIO` the unwritten data may be lost.
    public func fdatasync(_ fd: Int32, path: String) throws(FileSystemError) {
        _ = try retrying("fdatasync", path) { Glibc.fdatasync(fd) }
    }

    /// `sync_file_range(2)` with `SYNC_FILE_RANGE_WRITE` on Linux (writeback starts, nothing waits); nothing
    /// elsewhere. Errors are left to the next sync.
    public func startWriteback(_ fd: Int32, offset: Int64, length: Int64) {
        _ = rewind_start_writeback(fd, offset, length)
    }

    /// `ftruncate(2)`, retried on `EINTR`: cuts the file to, or extends it with zeros to, `length` bytes.
    ///
    /// - Throws: ``FileSystemError``.
    public func ftruncate(_ fd: Int32, length: Int64, path: String) throws(FileSystemError) {
        _ = try retrying("ftruncate", path) { Glibc.ftruncate(fd, off_t(length)) }
    }

    /// Reserves disk blocks for bytes `offset ..< offset + length` with `fallocate(2)` and `FALLOC_FL_KEEP_SIZE`;
    /// the file's size is unchanged.
    ///
    /// - Returns: true when the blocks are reserved (or `length` is not positive); false when the file system or
    ///   platform does not support it (`EOPNOTSUPP`, `ENOSYS`).
    /// - Throws: ``FileSystemError`` for any other failure (`ENOSPC`: blocks may be reserved in part).
    public func reserve(_ fd: Int32, offset: Int64, length: Int64, path: String) throws(FileSystemError) -> Bool {
        guard length > 0 else { return true }
        do {
            _ = try retrying("fallocate", path) { rewind_reserve_blocks(fd, offset, length) }
            return true
        } catch  where error.code == EOPNOTSUPP || error.code == ENOSYS {
            return false
        }
    }

    /// The open file's size in bytes, from `fstat(2)`.
    ///
    /// - Throws: ``FileSystemError`` naming `fstat`.
    public func size(_ fd: Int32, path: String) throws(FileSystemError) -> Int64 {
        var info = stat()
        _ = try retrying("fstat", path) { Glibc.fstat(fd, &info) }
        return Int64(info.st_size)
    }

    /// Whether the descriptor is a regular file (`S_IFREG` from `fstat(2)`), not a pipe, socket, device or directory.
    ///
    /// - Throws: ``FileSystemError`` naming `fstat`.
    public func isRegularFile(_ fd: Int32, path: String) throws(FileSystemError) -> Bool {
        var info = stat()
        _ = try retrying("fstat", path) { Glibc.fstat(fd, &info) }
        return (info.st_mode & S_IFMT) == S_IFREG
    }

    /// `rename(2)`, retried on `EINTR`: atomically replaces `to` with `from` (same file system only). Sync the
    /// directory (``syncDirectory(_:)``) to make the change durable.
    ///
    /// - Throws: ``FileSystemError`` naming `from`.
    public func rename(_ from: String, to: String) throws(FileSystemError) {
        _ = try retrying("rename", from) { Glibc.rename(from, to) }
    }

    /// `unlink(2)`; a file that does not exist (`ENOENT`) counts as removed.
    ///
    /// - Throws: ``FileSystemError`` for any other failure.
    public func unlink(_ path: String) throws(FileSystemError) {
        if Glibc.unlink(path) != 0 && errno != ENOENT {
            throw FileSystemError(operation: "unlink", path: path, code: errno)
        }
    }

    /// `mkdir(2)` with `mode` (less the umask); an existing entry at `path` (`EEXIST`) counts as made, and parent
    /// directories are not created.
    ///
    /// - Throws: ``FileSystemError`` naming `mkdir` for any other failure.
    public func makeDirectory(_ path: String, mode: mode_t) throws(FileSystemError) {
        if Glibc.mkdir(path, mode) != 0 && errno != EEXIST {
            throw FileSystemError(operation: "mkdir", path: path, code: errno)
        }
    }

    /// The names in a directory (`opendir(3)`, `readdir(3)`), without `.` and `..`, in the order the file system
    /// returns them (unsorted).
    ///
    /// - Throws: ``FileSystemError`` naming `opendir`.
    /// - Complexity: O(entries).
    public func contentsOfDirectory(_ path: String) throws(FileSystemError) -> [String] {
        guard let dir = opendir(path) else { throw FileSystemError(operation: "opendir", path: path, code: errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = String(cString: System.directoryEntryName(entry))
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// `flock(2)`, retried on `EINTR`.
    ///
    /// - Parameter operation: `LOCK_SH`, `LOCK_EX` or `LOCK_UN`, with `LOCK_NB` not to wait.
    /// - Returns: true when the operation succeeded; false when `LOCK_NB` was given and another open file
    ///   description holds a conflicting lock (`EWOULDBLOCK`).
    /// - Throws: ``FileSystemError`` for any other failure.
    public func flock(_ fd: Int32, operation: Int32, path: String) throws(FileSystemError) -> Bool {
        if System.retryingInterrupts({ systemFlock(fd, operation) }) == 0 { return true }
        if errno == EWOULDBLOCK { return false }
        throw FileSystemError(operation: "flock", path: path, code: errno)
    }

    /// Bytes available to an unprivileged writer on the file system holding `path`: `f_bavail × f_frsize` from
    /// `statvfs(3)`.
    ///
    /// - Throws: ``FileSystemError`` naming `statvfs`.
    public func availableBytes(_ path: String) throws(FileSystemError) -> Int64 {
        var info = Glibc.statvfs()
        _ = try retrying("statvfs", path) { systemStatvfs(path, &info) }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    /// Whether anything (file, directory, link target) exists at `path`, by `access(2)` with `F_OK`; false also when
    /// the path cannot be searched.
    public func fileExists(_ path: String) -> Bool {
        access(path, F_OK) == 0
    }
}
