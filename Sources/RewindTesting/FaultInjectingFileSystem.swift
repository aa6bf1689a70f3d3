import RewindCore
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A ``FileSystem`` that passes calls to a real one but fails the ones it is told to: the Nth write with an errno,
/// a short write, every write while the "disk" is full, the Nth read, the next `fdatasync`; or slows every write
/// down, or holds syncs until released.
///
/// Used by tests and by soak runs (`disk=full` and `disk=slow` events) to exercise the failure paths of the store,
/// the exporters and the file inputs without a real full or slow disk. Writes (`pwrite`, `writev`) are counted from
/// 1 in the order they reach the file system, and so are reads (`pread`, `read`), separately. While the disk is
/// full, reserving blocks fails with `ENOSPC` too.
public final class FaultInjectingFileSystem: FileSystem {
    /// What to do to one write.
    public enum WriteFault: Sendable, Hashable {
        /// Fail with this errno, writing nothing.
        case error(Int32)
        /// Write only this many bytes (a short write), then report that count.
        case short(Int)
    }

    private struct State {
        var writes = 0
        var faults: [Int: WriteFault] = [:]
        var diskFullErrno: Int32?
        var syncFaults: [Int32] = []
        var syncsHeld = false
        var syncs = 0
        var syncsByName: [String: Int] = [:]
        var heldSyncs = 0
        var failedWrites = 0
        var writeDelay: Int64 = 0
        var renameFaults: [String: Int32] = [:]
        var reads = 0
        var readFaults: [Int: Int32] = [:]
        var capacity: (bytes: Int64, directory: String)?
        var beforeOpen: [String: @Sendable () -> Void] = [:]
    }

    private let base: any FileSystem
    private let state = Mutex(State())

    /// Runs `body` under the state's lock (announced to ThreadSanitizer: two readers decoding in parallel through this
    /// file system are ordered by the lock, not racing).
    private func locked<Result: Sendable>(_ body: (inout State) -> Result) -> Result {
        state.withAnnotatedLock { body(&$0) }
    }

    /// - Parameter base: the file system that does the real work (POSIX by default).
    public init(base: any FileSystem = POSIXFileSystem()) {
        self.base = base
    }

    /// Writes seen so far (including failed ones).
    public var writeCount: Int { locked { $0.writes } }
    /// Writes that were failed or shortened.
    public var failedWriteCount: Int { locked { $0.failedWrites } }

    /// Reads seen so far (including failed ones).
    public var readCount: Int { locked { $0.reads } }

    /// Fails read number `number` (counted from 1 across all files) with `code`, reading nothing.
    public func failRead(number: Int, with code: Int32 = EIO) {
        locked { $0.readFaults[number] = code }
    }

    /// Fails the read after the last one seen with `code`.
    public func failNextRead(with code: Int32 = EIO) {
        locked { $0.readFaults[$0.reads + 1] = code }
    }

    /// Applies `fault` to write number `number` (counted from 1 across all files).
    public func failWrite(number: Int, with fault: WriteFault) {
        locked { $0.faults[number] = fault }
    }

    /// Applies `fault` to the write after the last one seen.
    public func failNextWrite(with fault: WriteFault) {
        locked { $0.faults[$0.writes + 1] = fault }
    }

    /// While full, every write fails with `ENOSPC` (or `code`); `false` makes writes succeed again.
    public func setDiskFull(_ full: Bool, code: Int32 = ENOSPC) {
        locked { $0.diskFullErrno = full ? code : nil }
    }

    /// Makes every write that succeeds take at least `delay` longer (a slow disk); `.zero` restores full speed.
    public func setWriteDelay(_ delay: Duration) {
        precondition(delay >= .zero, "write delay must not be negative, got \(delay)")
        let nanoseconds = delay.nanosecondsClamped
        locked { $0.writeDelay = nanoseconds }
    }

    /// Fails the next rename of the file named `fileName` (the last component of its path) with `code`.
    public func failNextRename(of fileName: String, with code: Int32 = EIO) {
        locked { $0.renameFaults[fileName] = code }
    }

    /// Makes ``availableBytes(_:)`` of `directory` report `bytes` minus the sizes of the files in it, a small disk
    /// holding only that directory (nil: the real file system's answer). Writes are not limited by it.
    public func setCapacity(_ bytes: Int64?, of directory: String) {
        locked { $0.capacity = bytes.map { ($0, directory) } }
    }

    /// `fsync`/`fdatasync` calls seen so far (including failed and held ones).
    public var syncCount: Int { locked { $0.syncs } }

    /// `fsync`/`fdatasync` calls seen so far of the file named `fileName` (the last component of its path).
    public func syncCount(of fileName: String) -> Int { locked { $0.syncsByName[fileName] ?? 0 } }

    /// `fsync`/`fdatasync` calls waiting because syncs are held (``holdSyncs(_:)``).
    public var heldSyncCount: Int { locked { $0.heldSyncs } }

    /// While held, every `fsync`/`fdatasync` waits (a disk that takes its time to make writes durable) until
    /// `false` lets them go on.
    public func holdSyncs(_ held: Bool) {
        locked { $0.syncsHeld = held }
    }

    /// Fails the next `fsync`/`fdatasync` with `code`.
    public func failNextSync(with code: Int32 = EIO) {
        locked { $0.syncFaults.append(code) }
    }

    /// Runs `action` once, just before the next open of the file named `fileName` (the last component of its path):
    /// what another process does between a caller finding a file and opening it.
    public func beforeNextOpen(of fileName: String, _ action: @escaping @Sendable () -> Void) {
        locked { $0.beforeOpen[fileName] = action }
    }

    public func open(_ path: String, flags: Int32, mode: mode_t) throws(FileSystemError) -> Int32 {
        let name = String(path.split(separator: "/").last ?? "")
        if let action = locked({ $0.beforeOpen.removeValue(forKey: name) }) { action() }
        return try base.open(path, flags: flags, mode: mode)
    }

    public func close(_ fd: Int32) { base.close(fd) }

    public func close(_ fd: Int32, path: String) throws(FileSystemError) { try base.close(fd, path: path) }

    /// Counts a write and decides what happens to it: a fault, or a delay before it goes through.
    private func takeWriteFault() -> (WriteFault?, delay: Int64) {
        locked { s in
            s.writes += 1
            if let code = s.diskFullErrno {
                s.failedWrites += 1
                return (.error(code), 0)
            }
            guard let fault = s.faults.removeValue(forKey: s.writes) else { return (nil, s.writeDelay) }
            s.failedWrites += 1
            return (fault, 0)
        }
    }

    public func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, offset: Int64, path: String)
        throws(FileSystemError) -> Int
    {
        let (fault, delay) = takeWriteFault()
        switch fault {
        case nil:
            if delay > 0 { System.sleep(for: .nanoseconds(delay)) }
            return try base.pwrite(fd, bytes, offset: offset, path: path)
        case .error(let code):
            throw FileSystemError(operation: "pwrite", path: path, code: code)
        case .short(let count):
            let n = max(0, min(count, bytes.count))
            if n == 0 { throw FileSystemError(operation: "pwrite", path: path, code: ENOSPC) }
            return try base.pwrite(fd, UnsafeRawBufferPointer(rebasing: bytes[..<n]), offset: offset, path: path)
        }
    }

    public func writev(_ fd: Int32, _ buffers: UnsafeBufferPointer<iovec>, offset: Int64?, path: String)
        throws(FileSystemError) -> Int
    {
        let (fault, delay) = takeWriteFault()
        let operation = offset == nil ? "writev" : "pwritev"
        switch fault {
        case nil:
            if delay > 0 { System.sleep(for: .nanoseconds(delay)) }
            return try base.writev(fd, buffers, offset: offset, path: path)
        case .error(let code):
            throw FileSystemError(operation: operation, path: path, code: code)
        case .short(let count):
            // The first `count` bytes of the pieces: whole pieces, then part of the next.
            var prefix: [iovec] = []
            var left = count
            for piece in buffers where left > 0 {
                prefix.append(iovec(iov_base: piece.iov_base, iov_len: min(piece.iov_len, left)))
                left -= prefix[prefix.count - 1].iov_len
            }
            if prefix.isEmpty { throw FileSystemError(operation: operation, path: path, code: ENOSPC) }
            return try prefix.withUnsafeBufferPointer { (shortened) throws(FileSystemError) -> Int in
                try base.writev(fd, shortened, offset: offset, path: path)
            }
        }
    }

    /// Counts a read; the errno to fail it with, if any.
    private func takeReadFault() -> Int32? {
        locked { s in
            s.reads += 1
            return s.readFaults.removeValue(forKey: s.reads)
        }
    }

    public func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, path: String) throws(FileSystemError)
        -> Int
    {
        if let code = takeReadFault() { throw FileSystemError(operation: "read", path: path, code: code) }
        return try base.read(fd, into: buffer, path: path)
    }

    public func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, offset: Int64, path: String)
        throws(FileSystemError) -> Int
    {
        if let code = takeReadFault() { throw FileSystemError(operation: "pread", path: path, code: code) }
        return try base.pread(fd, into: buffer, offset: offset, path: path)
    }

    private func takeSyncFault(path: String) -> Int32? {
        let name = String(path.split(separator: "/").last ?? "")
        let held = locked { s in
            s.syncs += 1
            s.syncsByName[name, default: 0] += 1
            if s.syncsHeld { s.heldSyncs += 1 }
            return s.syncsHeld
        }
        if held {
            while locked({ $0.syncsHeld }) { usleep(500) }
            locked { $0.heldSyncs -= 1 }
        }
        return locked { $0.syncFaults.isEmpty ? nil : $0.syncFaults.removeFirst() }
    }

    public func fsync(_ fd: Int32, path: String) throws(FileSystemError) {
        if let code = takeSyncFault(path: path) { throw FileSystemError(operation: "fsync", path: path, code: code) }
        try base.fsync(fd, path: path)
    }

    public func fdatasync(_ fd: Int32, path: String) throws(FileSystemError) {
        if let code = takeSyncFault(path: path) {
            throw FileSystemError(operation: "fdatasync", path: path, code: code)
        }
        try base.fdatasync(fd, path: path)
    }

    public func ftruncate(_ fd: Int32, length: Int64, path: String) throws(FileSystemError) {
        try base.ftruncate(fd, length: length, path: path)
    }

    public func startWriteback(_ fd: Int32, offset: Int64, length: Int64) {
        base.startWriteback(fd, offset: offset, length: length)
    }

    public func reserve(_ fd: Int32, offset: Int64, length: Int64, path: String) throws(FileSystemError) -> Bool {
        if let code = locked({ $0.diskFullErrno }) {
            throw FileSystemError(operation: "fallocate", path: path, code: code)
        }
        return try base.reserve(fd, offset: offset, length: length, path: path)
    }

    public func size(_ fd: Int32, path: String) throws(FileSystemError) -> Int64 {
        try base.size(fd, path: path)
    }

    public func isRegularFile(_ fd: Int32, path: String) throws(FileSystemError) -> Bool {
        try base.isRegularFile(fd, path: path)
    }

    public func rename(_ from: String, to: String) throws(FileSystemError) {
        let name = String(from.split(separator: "/").last ?? Substring(from))
        if let code = locked({ $0.renameFaults.removeValue(forKey: name) }) {
            throw FileSystemError(operation: "rename", path: from, code: code)
        }
        try base.rename(from, to: to)
    }
    public func unlink(_ path: String) throws(FileSystemError) { try base.unlink(path) }
    public func makeDirectory(_ path: String, mode: mode_t) throws(FileSystemError) {
        try base.makeDirectory(path, mode: mode)
    }

    public func contentsOfDirectory(_ path: String) throws(FileSystemError) -> [String] {
        try base.contentsOfDirectory(path)
    }

    public func flock(_ fd: Int32, operation: Int32, path: String) throws(FileSystemError) -> Bool {
        try base.flock(fd, operation: operation, path: path)
    }

    public func availableBytes(_ path: String) throws(FileSystemError) -> Int64 {
        let (isFull, capacity) = locked { ($0.diskFullErrno != nil, $0.capacity) }
        if isFull { return 0 }
        guard let capacity, capacity.directory == path else { return try base.availableBytes(path) }
        var used: Int64 = 0
        for name in try base.contentsOfDirectory(path) {
            let fd = try base.open(path + "/" + name, flags: O_RDONLY, mode: 0)
            defer { base.close(fd) }
            used += try base.size(fd, path: path + "/" + name)
        }
        return max(0, capacity.bytes - used)
    }

    public func fileExists(_ path: String) -> Bool { base.fileExists(path) }
}
