import RewindCore
import RewindSQLite
import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Room for the index on a disk that something else fills: `DIR/index.reserve`, a file of up to
/// ``StoreOptions/indexReserveBytes`` made when a store opens for recording and topped up whenever the disk has room.
///
/// The index needs that much room on a full disk to record the rows, gaps and drop counts that say what the full
/// disk cost. The segment writers leave it free (``StreamWriter`` refuses a frame that would take it), counting
/// what the file holds as part of it, so the file costs no extra space; but free space, unlike the file, another
/// program can take. A write that finds the disk full (`SQLITE_FULL`) shrinks the file by ``indexReserveSlice`` and
/// is tried once more (``SQLiteDatabase/onDiskFull(_:)``): the index gets room a slice at a time, and the rest stays
/// in the file, out of other programs' reach, for the next time.
extension SegmentStore {
    /// The reserve's file name in the store's directory.
    static let indexReserveName = "index.reserve"

    /// The names of the index's files in the store's directory: the database, its WAL files, the reserve, and the
    /// journals of what only the index holds (with the files they are rewritten through).
    public static let indexFileNames =
        ["index.sqlite", "index.sqlite-wal", "index.sqlite-shm", indexReserveName]
        + [MarkerJournal.fileName, LossJournal.fileName].flatMap { [$0, $0 + ".new"] }

    /// What one index write that finds the disk full gets back from the reserve file: 512 KiB, room for many
    /// commits of gaps and counters.
    static let indexReserveSlice: Int64 = 512 << 10

    /// Free space to leave beyond the reserve when making it: 1 MiB.
    private static let indexReserveMargin: Int64 = 1 << 20

    /// `DIR/index.reserve`.
    var indexReservePath: String { directory + "/" + Self.indexReserveName }

    /// Free space the segment writers leave for the index: ``StoreOptions/indexReserveBytes`` less what the reserve
    /// file holds.
    var indexRoomToKeep: Int64 { max(0, StoreOptions.indexReserveBytes - indexReserveHeld.load(ordering: .relaxed)) }

    /// Makes the reserve file, or tops it up, when the disk has room for what is missing (and 1 MiB more): room the
    /// writers would otherwise leave free. Best effort: a disk without that room, or a file system that fails,
    /// leaves it as it is until the next try.
    ///
    /// - Parameter available: bytes free on the disk, when the caller has just read them.
    func ensureIndexReserve(available: Int64? = nil) {
        // Full already (as this process made or found it): nothing to look at.
        guard !isReadOnly, indexReserveHeld.load(ordering: .relaxed) < StoreOptions.indexReserveBytes else { return }
        indexReserveLock.withAnnotatedLock { _ in
            let path = indexReservePath
            let full = StoreOptions.indexReserveBytes
            var held: Int64 = 0
            if fileSystem.fileExists(path) {
                guard let size = fileSystem.fileBytes(path) else { return }
                held = size
            }
            indexReserveHeld.store(min(held, full), ordering: .relaxed)
            guard held < full,
                let free = available ?? (try? fileSystem.availableBytes(directory)),
                free >= full - held + Self.indexReserveMargin
            else { return }
            do throws(FileSystemError) {
                let fd = try fileSystem.open(path, flags: O_WRONLY | O_CREAT | O_CLOEXEC, mode: 0o644)
                defer { fileSystem.close(fd) }
                do throws(FileSystemError) {
                    // Blocks reserved where the file system can (no bytes to write), else written as zeros.
                    if try !fileSystem.reserve(fd, offset: held, length: full - held, path: path) {
                        let zeros = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
                        defer { zeros.deallocate() }
                        zeros.initializeMemory(as: UInt8.self, repeating: 0)
                        var offset = held
                        while offset < full {
                            let piece = UnsafeRawBufferPointer(rebasing: zeros[..<Int(min(1 << 20, full - offset))])
                            try fileSystem.writeAll(fd, piece, offset: offset, path: path)
                            offset += Int64(piece.count)
                        }
                    }
                    try fileSystem.ftruncate(fd, length: full, path: path)
                    indexReserveHeld.store(full, ordering: .relaxed)
                } catch {
                    // Whatever was reserved past what the file held goes back.
                    try? fileSystem.ftruncate(fd, length: held, path: path)
                }
            } catch {
                return
            }
        }
    }

    /// Gives the index ``indexReserveSlice`` of the reserve file's room (the whole file when that is all it holds).
    ///
    /// - Returns: whether there was any to give.
    @discardableResult
    func releaseIndexReserve() -> Bool {
        indexReserveLock.withAnnotatedLock { _ in
            let held = indexReserveHeld.load(ordering: .relaxed)
            guard let kept = Self.shrinkReserveFile(indexReservePath, holding: held, fileSystem: fileSystem) else {
                return false
            }
            indexReserveHeld.store(kept, ordering: .relaxed)
            return true
        }
    }

    /// Takes ``indexReserveSlice`` off the reserve file at `path`, which holds `held` bytes (removing the file when
    /// that is all it holds).
    ///
    /// - Returns: what the file holds now; nil when there was nothing to take, or the file could not be changed.
    static func shrinkReserveFile(_ path: String, holding held: Int64, fileSystem: any FileSystem) -> Int64? {
        guard held > 0, fileSystem.fileExists(path) else { return nil }
        let kept = held > indexReserveSlice ? held - indexReserveSlice : 0
        do throws(FileSystemError) {
            if kept == 0 {
                try fileSystem.unlink(path)
            } else {
                let fd = try fileSystem.open(path, flags: O_WRONLY | O_CLOEXEC, mode: 0)
                defer { fileSystem.close(fd) }
                try fileSystem.ftruncate(fd, length: kept, path: path)
            }
        } catch {
            return nil
        }
        return kept
    }

    /// Opens the index for writing on a disk that may be full: its `-wal` and `-shm` files need room before any
    /// row is read, so while the open fails for want of it, the reserve file (kept for the index's room on a full
    /// disk) gives back a slice at a time, and the store opens to record what the full disk costs and, with
    /// retention, to make room by deleting old segments.
    static func openIndexMakingRoom(directory: String, fileSystem: any FileSystem) throws -> StoreIndex {
        let path = directory + "/" + indexReserveName
        while true {
            do {
                return try StoreIndex(path: directory + "/index.sqlite", readOnly: false)
            } catch let error as SQLiteError where error.isFull || error.codeName == "SQLITE_IOERR" {
                guard (try? fileSystem.availableBytes(directory)).map({ $0 < indexReserveSlice }) == true else {
                    throw error
                }
                guard let held = fileSystem.fileBytes(path),
                    shrinkReserveFile(path, holding: held, fileSystem: fileSystem) != nil
                else {
                    throw error
                }
            }
        }
    }
}
