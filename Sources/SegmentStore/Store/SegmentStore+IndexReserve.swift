import RewindCore
import RewindSQLite
import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Room for the index on a disk that something else fills: `DIR/index.reserve`, a file of
/// ``StoreOptions/indexReserveBytes`` made when a store opens for recording (and again once the disk has room).
///
/// The segment writers already leave that much free (``StreamWriter`` refuses a frame that would take it), but
/// another program can take it too; then the index could not grow (`SQLITE_FULL`), and the rows, gaps and drop
/// counts that say what the full disk cost would be lost with the frames. A write that finds the disk full deletes
/// the file and is tried once more (``SQLiteDatabase/onDiskFull(_:)``), so that bookkeeping is still written.
extension SegmentStore {
    /// The reserve's file name in the store's directory.
    static let indexReserveName = "index.reserve"

    /// The names of the index's files in the store's directory: the database, its WAL files and the reserve.
    public static let indexFileNames = ["index.sqlite", "index.sqlite-wal", "index.sqlite-shm", indexReserveName]

    /// `DIR/index.reserve`.
    var indexReservePath: String { directory + "/" + Self.indexReserveName }

    /// Makes the reserve file when it is missing and the disk has room for it twice over. Best effort: a disk
    /// without that room, or a file system that fails, leaves the store without one until the next try.
    ///
    /// - Parameter available: bytes free on the disk, when the caller has just read them.
    func ensureIndexReserve(available: Int64? = nil) {
        guard !isReadOnly else { return }
        indexReserveLock.withLock { _ in
            let path = indexReservePath
            guard !fileSystem.fileExists(path) else { return }
            let size = StoreOptions.indexReserveBytes
            guard let free = available ?? (try? fileSystem.availableBytes(directory)), free >= 2 * size else { return }
            let temporary = path + ".new"
            do throws(FileSystemError) {
                let fd = try fileSystem.open(temporary, flags: O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode: 0o644)
                defer { fileSystem.close(fd) }
                // Blocks reserved where the file system can (no bytes to write), else written as zeros.
                if try !fileSystem.reserve(fd, offset: 0, length: size, path: temporary) {
                    let zeros = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
                    defer { zeros.deallocate() }
                    zeros.initializeMemory(as: UInt8.self, repeating: 0)
                    for offset in stride(from: Int64(0), to: size, by: 1 << 20) {
                        try fileSystem.writeAll(fd, UnsafeRawBufferPointer(zeros), offset: offset, path: temporary)
                    }
                }
                try fileSystem.ftruncate(fd, length: size, path: temporary)
                try fileSystem.rename(temporary, to: path)
            } catch {
                try? fileSystem.unlink(temporary)
            }
        }
    }

    /// Deletes the reserve file, giving its space to the index.
    ///
    /// - Returns: whether there was one.
    @discardableResult
    func releaseIndexReserve() -> Bool {
        indexReserveLock.withLock { _ in
            guard fileSystem.fileExists(indexReservePath) else { return false }
            return (try? fileSystem.unlink(indexReservePath)) != nil
        }
    }
}
