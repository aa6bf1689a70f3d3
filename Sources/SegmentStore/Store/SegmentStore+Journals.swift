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
                file.compactedLength = size
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

    /// Writes the journal of `Contents` anew with `standing`'s records of what it holds, when it is due
    /// (``JournalFile/isDueForCompaction``): what was removed since goes, the order of what stands is kept. Read from
    /// the journal itself, not the index, whose changes other threads may have committed and not yet journaled. A
    /// journal that cannot be read whole, or written anew, is left as it is (valid; the next open brings it into step
    /// with the index), and not tried again before it has doubled once more.
    func compactJournalIfDue<Contents: JournalContents>(
        _ contents: Contents.Type, file: inout JournalFile, standing: (Contents) -> [UInt8]
    ) {
        guard file.fd >= 0, file.isDueForCompaction else { return }
        let path = directory + "/" + Contents.fileName
        let fs = fileSystem
        let read = { () throws(FileSystemError) in try Contents.read(path: path, fileSystem: fs) }
        guard let journal = try? Self.wrapIO(read), journal.damage == nil, !journal.tornTail,
            journal.validLength == file.length
        else {
            file.compactedLength = file.length
            return
        }
        do {
            try rewriteJournal(at: path, magic: Contents.magic, standing(journal), file: &file)
        } catch {
            // The journal was closed for the rewrite: reopened at the next record, with what it holds then.
        }
    }

    /// Brings a journal and the index into step (``reconcileMarkers(mode:rebuildingIndex:report:)``,
    /// ``reconcileLosses(mode:rebuildingIndex:report:)``) around the journal's own comparison: a missing journal is
    /// written from the index (so that one missing later means it was lost), a damaged one gives way to the index
    /// unless the index was just rebuilt, when the records before the damage are all there is; then `bringInStep`
    /// compares the two.
    ///
    /// - Parameters:
    ///   - what: what the journal keeps, in words ("markers", "gaps and drop counts").
    ///   - indexHolds: what the index holds of it now, in words ("the index's 3 markers").
    ///   - writeFromIndex: writes the journal anew from the index (given the damaged journal's contents, if any);
    ///     returns what it wrote in words when a report should say so, nil otherwise.
    func reconcileJournal<Contents: JournalContents>(
        _ contents: Contents.Type, mode: ReconcileMode, rebuildingIndex: Bool,
        file: inout JournalFile, report: inout VerifyReport, what: String, indexHolds: () throws -> String,
        writeFromIndex: (Contents?, inout JournalFile) throws -> String?,
        bringInStep: (Contents, inout JournalFile, inout VerifyReport) throws -> Void
    ) throws {
        let name = Contents.fileName
        let path = directory + "/" + name
        let fs = fileSystem
        let read = { () throws(FileSystemError) in try Contents.read(path: path, fileSystem: fs) }
        guard let journal = try Self.wrapIO(read) else {
            // No journal: a new store, or one an older build made (or whose journal was deleted).
            if mode.changes, let written = try writeFromIndex(nil, &file) {
                report.repaired.append("wrote \(name) from \(written) (there was no journal)")
            }
            if rebuildingIndex {
                report.repaired.append("there is no \(name), so the \(what) the lost index held, if any, are gone")
            }
            return
        }
        if let damage = journal.damage, !rebuildingIndex {
            report.problems.append(
                "\(name) is damaged (\(damage)): \(try indexHolds()) stand; "
                    + (mode.changes
                        ? "the journal is written again from them"
                        : "'rewind verify --repair' writes the journal again from them"))
            if mode.changes {
                _ = try writeFromIndex(journal, &file)
                report.repaired.append("wrote the damaged \(name) again from the index")
            }
            return
        }
        if let damage = journal.damage {
            // Said with what the rebuild did (an open's problems are not a repair's), so that it is never silent.
            let said =
                "\(name) is damaged (\(damage)): the \(what) of its whole records are restored; the change of a "
                + "damaged one, and of any after damage that hides where records start, is lost"
            if mode.changes { report.repaired.append(said) } else { report.problems.append(said) }
        }
        try bringInStep(journal, &file, &report)
    }
}
