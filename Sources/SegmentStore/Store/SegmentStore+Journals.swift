import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension SegmentStore {
    /// Appends `records` (framed records) to the journal at `path`, made with `magic`'s header when new, and with
    /// `sync` syncs them; on failure the journal is cut back to where it was.
    ///
    /// - Throws: ``SegmentStoreError/io(_:)``.
    func appendToJournal(at path: String, magic: [UInt8], _ records: [UInt8], sync: Bool, file: inout JournalFile)
        throws
    {
        let fs = fileSystem
        let directory = directory
        var bytes = records
        try Self.wrapIO { () throws(FileSystemError) in
            if file.fd < 0 {
                let fd = try fs.open(path, flags: O_RDWR | O_CREAT | O_CLOEXEC, mode: 0o644)
                let size: Int64
                do throws(FileSystemError) { size = try fs.size(fd, path: path) } catch {
                    fs.close(fd)
                    throw error
                }
                file.fd = fd
                file.length = size
                file.reserved = 0
            }
            let creating = file.length < Int64(JournalFraming.headerSize)
            if creating {
                // A new journal (or one of which not even the header was written): the header goes first.
                file.length = 0
                bytes = JournalFraming.header(magic: magic) + bytes
            }
            let end = file.length + Int64(bytes.count)
            if end > file.reserved {
                // Blocks reserved ahead, so that markers can still be changed when segments fill the disk.
                let reserve = (end + 65_536) & ~65_535
                if (try? fs.reserve(file.fd, offset: 0, length: reserve, path: path)) == true {
                    file.reserved = reserve
                }
            }
            do throws(FileSystemError) {
                try fs.writeAll(file.fd, bytes, offset: file.length, path: path)
                if sync || creating { try fs.fdatasync(file.fd, path: path) }
                if creating { try fs.syncDirectory(directory) }
            } catch {
                // The kernel may have dropped what it could not write: nothing after the last good record stays.
                try? fs.ftruncate(file.fd, length: file.length, path: path)
                throw error
            }
            file.length = end
        }
    }

    /// Writes the journal at `path` anew with `records` (framed records) after `magic`'s header, through
    /// `PATH.new`, synced and renamed over it.
    ///
    /// - Throws: ``SegmentStoreError/io(_:)``.
    func rewriteJournal(at path: String, magic: [UInt8], _ records: [UInt8], file: inout JournalFile) throws {
        let temporary = path + ".new"
        let fs = fileSystem
        let directory = directory
        let bytes = JournalFraming.header(magic: magic) + records
        if file.fd >= 0 {
            fs.close(file.fd)
            file = JournalFile()
        }
        try Self.wrapIO { () throws(FileSystemError) in
            let fd = try fs.open(temporary, flags: O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode: 0o644)
            do throws(FileSystemError) {
                try fs.writeAll(fd, bytes, offset: 0, path: temporary)
                try fs.fdatasync(fd, path: temporary)
                try fs.close(fd, path: temporary)
            } catch {
                fs.close(fd)
                try? fs.unlink(temporary)
                throw error
            }
            try fs.rename(temporary, to: path)
            try fs.syncDirectory(directory)
        }
    }
}
