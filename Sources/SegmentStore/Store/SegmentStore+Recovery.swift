import RewindCore
import RewindSQLite
import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension SegmentStore {
    /// What a reconcile pass may do.
    enum ReconcileMode {
        /// At open: seal torn `.partial` files, add missing index rows, finish deletes; report the rest. Sealed files
        /// the index knows with the right frame count are not rescanned.
        case recover
        /// `verify` dry run: scan every record of every file, change nothing.
        case verify
        /// `verify --repair`: scan everything and fix what can be fixed.
        case repair

        var changes: Bool { self != .verify }
        var scansEverything: Bool { self != .recover }
    }

    /// Checks every segment file record by record (all checksums) and compares files with index rows.
    ///
    /// - Parameters:
    ///   - repair: false for a dry run that changes nothing. True cuts damaged or torn files at their last valid
    ///     record and seals them, adds missing index rows, replaces rows that disagree with their file, and removes
    ///     rows whose files are gone. Never deletes a file because the index lacks it.
    ///   - streamName: check only this stream's segment files and rows; nil for every stream.
    /// - Returns: what was found (each damaged record with segment, frame and offset) and what was repaired.
    /// - Throws: ``SegmentStoreError/readOnly(_:)`` for a repair on a read-only store; I/O and index errors.
    /// - Complexity: O(bytes of all segment files).
    public func verify(repair: Bool, streamName: String? = nil) throws -> VerifyReport {
        return try SegmentStoreError.translatingIndexErrors {
            try verifyUntranslated(repair: repair, streamName: streamName)
        }
    }

    private func verifyUntranslated(repair: Bool, streamName: String?) throws -> VerifyReport {
        if repair && isReadOnly { throw SegmentStoreError.readOnly("repair") }
        // Damage in a part of the index the check would not read (markers, gaps, another table's pages) is found
        // first: it is a damaged index, which a repair's caller moves aside and rebuilds.
        try index.checkIntegrity()
        return try reconcile(mode: repair ? .repair : .verify, streamName: streamName)
    }

    func reconcile(mode: ReconcileMode, streamName: String? = nil) throws -> VerifyReport {
        let onlyStreamID = try streamName.map { try streamID(named: $0) }
        var report = VerifyReport()
        // Every segment the index knows, by when its file was created: a file under a known name created at
        // another time, and at none of these, was put there from elsewhere.
        report.indexedCreations = Dictionary(
            try index.segments().map { ($0.createdWallNanoseconds, $0.fileName) },
            uniquingKeysWith: { first, _ in first })
        let names = try segmentFileNames()
        if let (segments, files) = try indexDescribesOtherFiles(names: names ?? []) {
            // Every file would be set aside as foreign and every frame of the index counted lost: the index is the
            // odd one out, kept aside and rebuilt from the files by a repair's caller.
            throw SegmentStoreError.foreignIndex(path: index.path, segments: segments, files: files)
        }
        if names == nil {
            // The directory itself is gone (deleted, or a copy without it): every segment the index has is missing;
            // a repair makes it again, so the store records on.
            if mode == .repair {
                try Self.wrapIO { () throws(FileSystemError) in try fileSystem.makeDirectory(segmentsDirectory) }
                report.repaired.append("made segments/ again: it was missing")
            } else {
                let listed = try index.segments().count
                report.problems.append(
                    listed == 0
                        ? "segments/ is missing: the index lists no segment, so no frame is lost; 'rewind verify "
                            + "--repair' makes it again"
                        : "segments/ is missing: every segment file of the store is gone (the index lists \(listed))")
            }
        }
        var files: [UInt64: String] = [:]
        for name in names ?? [] {
            guard let sequence = SegmentFormat.sequence(ofFileName: name) else { continue }
            if let other = files[sequence] {
                // Both names: a crash between writing the sealed file and removing the partial cannot happen with
                // rename, so this is a copy; prefer the sealed one, and a repair keeps the other aside.
                let (kept, spare) = name.hasSuffix(SegmentFormat.sealedSuffix) ? (name, other) : (other, name)
                let same = "segments/\(spare) and segments/\(kept) have the same number"
                if mode == .repair {
                    report.repaired.append(
                        same + ": moved \(spare) aside as \(try moveAside(spare, as: "duplicate")) (a copy; the sealed "
                            + "file stands)")
                } else {
                    report.problems.append(
                        same + "; 'rewind verify --repair' moves \(spare) aside as \(spare).duplicate (the sealed file "
                            + "stands)")
                }
                files[sequence] = kept
            } else {
                files[sequence] = name
            }
        }
        var rows: [UInt64: SegmentRow] = [:]
        for row in try index.segments() where onlyStreamID == nil || row.streamID == onlyStreamID {
            guard let sequence = SegmentFormat.sequence(ofFileName: row.fileName) else {
                // The store names every file itself: a row under another name was changed by another program.
                throw StoreIndexError.invalidSegmentRow(
                    id: row.id, detail: "file name '\(row.fileName)' is no segment's")
            }
            rows[sequence] = row
        }
        // An index that knows none of the segment files was lost (deleted, or made new beside old files): their
        // frames come back from the files, and markers, gaps and drop counts from their journals.
        let knowsNoStream = try index.streams().isEmpty
        let rebuildingIndex = mode.changes && onlyStreamID == nil && rows.isEmpty && !files.isEmpty && knowsNoStream
        if rebuildingIndex {
            report.repaired.append(
                "the index knew none of the segment files (\(files.count == 1 ? "one" : "\(files.count)") there; it was "
                    + "missing, or set aside): their frames are indexed again from the files, and the streams' places on the recorder "
                    + "clock restored from their frames' capture times")
        }

        // Files no row names, by the sequence and creation time their headers give: a row without a file whose file
        // is among them was renamed to a number of its own, not lost.
        let unindexed = files.filter { rows[$0.key] == nil }
        struct Origin: Hashable {
            let sequence: UInt64
            let created: Int64
        }
        var renamed: [Origin: (sequence: UInt64, name: String)]?
        func renamedFile(of row: SegmentRow, sequence: UInt64) -> (sequence: UInt64, name: String)? {
            if renamed == nil {
                renamed = [:]
                for (other, name) in unindexed {
                    guard
                        let reader = try? SegmentFileReader(
                            path: segmentsDirectory + "/" + name, fileSystem: fileSystem)
                    else { continue }
                    let origin = Origin(sequence: reader.header.sequence, created: reader.header.createdWallNanoseconds)
                    renamed?[origin] = (other, name)
                    reader.close()
                }
            }
            return renamed?[Origin(sequence: sequence, created: row.createdWallNanoseconds)]
        }

        // Rows first: finish deletes, report rows without files.
        for (sequence, row) in rows.sorted(by: { $0.key < $1.key }) {
            if row.state == .deleting {
                // Marking a delete removes the segment's frame rows in the same transaction: rows left mean the index
                // was changed by another program, and the file is kept until a repair rebuilds the index from it.
                let left = try index.frames(ofSegment: row.id).count
                guard left == 0 else {
                    throw StoreIndexError.contradictsItself(
                        detail: "segment \(row.fileName) is marked deleted, but \(left) frame rows are left")
                }
                if mode.changes {
                    if let name = files[sequence] {
                        try Self.wrapIO { () throws(FileSystemError) in
                            try fileSystem.unlink(segmentsDirectory + "/" + name)
                            try fileSystem.syncDirectory(segmentsDirectory)
                        }
                        files[sequence] = nil
                    }
                    try index.removeSegment(id: row.id)
                    report.repaired.append("finished deleting segment \(row.fileName)")
                } else {
                    report.problems.append("segment \(row.fileName) is half deleted")
                }
                rows[sequence] = nil
            } else if files[sequence] == nil, let (other, name) = renamedFile(of: row, sequence: sequence),
                name.hasSuffix(SegmentFormat.sealedSuffix) == row.fileName.hasSuffix(SegmentFormat.sealedSuffix)
            {
                // Its file under another number (renamed): named back, every frame kept.
                let found = "segments/\(name) is the file of the index's segment \(row.fileName) (renamed)"
                files[other] = nil
                if mode.changes {
                    try Self.wrapIO { () throws(FileSystemError) in
                        try fileSystem.rename(
                            segmentsDirectory + "/" + name, to: segmentsDirectory + "/" + row.fileName)
                        try fileSystem.syncDirectory(segmentsDirectory)
                    }
                    files[sequence] = row.fileName
                    report.repaired.append(found + ": named it back, nothing lost")
                } else {
                    // Checked against the row under the name it has now.
                    files[sequence] = name
                    report.problems.append(found + "; 'rewind verify --repair' names it back, nothing lost")
                }
            } else if files[sequence] == nil {
                // A repair settles it (what it did is its report); anything else reports it.
                if mode != .repair {
                    report.problems.append(
                        "index row for segment \(row.fileName) (\(row.frameCount) frames) has no file in segments/")
                }
                if mode == .repair {
                    let lost = try index.frames(ofSegment: row.id).map(\.ptsNanoseconds)
                    try index.removeSegment(id: row.id)
                    try recordLostFrames(streamID: row.streamID, lost: lost)
                    report.repaired.append(
                        "removed the index row of missing segment \(row.fileName)"
                            + (lost.isEmpty ? "" : ": its \(lost.count) frames are lost"))
                }
                rows[sequence] = nil
            }
        }

        if mode.scansEverything {
            try reconcileStreamDescriptions(files: files, rows: rows, mode: mode, report: &report)
        }
        for (sequence, name) in files.sorted(by: { $0.key < $1.key }) {
            try reconcileFile(
                name: name, row: rows[sequence], mode: mode, onlyStream: streamName, continuesAfterStream: false,
                report: &report)
        }
        // Files whose frames' pts the rows of later files still held (files swapped or renamed: those rows were
        // rebuilt since): indexed now, and only what still repeats pts the stream holds goes after its frames.
        let revisit = report.revisit
        report.revisit = []
        let counted = (report.segments, report.frames)
        for name in revisit {
            try reconcileFile(
                name: name, row: try index.segment(fileName: name), mode: mode, onlyStream: streamName,
                report: &report)
        }
        (report.segments, report.frames) = counted
        for (fileName, streamID, pts) in report.displaced {
            // A row whose pts was off by less than half a frame (edited, say) is the frame the file holds beside it.
            let stream = try index.streams().first { $0.id == streamID }
            let half = max(1, (stream?.description.frameDuration.nanoseconds ?? 2) / 2)
            var missing: [Int64] = []
            for time in pts {
                var near = false
                try index.frames(
                    streamID: streamID, in: time.addingSaturating(-half)..<max(time, time.addingSaturating(half))
                ) { _ in
                    near = true
                    return false
                }
                if !near { missing.append(time) }
            }
            let count = try recordLostFrames(streamID: streamID, lost: missing)
            guard count > 0 else { continue }
            report.repaired.append(
                "\(Self.frames(count)) the index had in segment \(fileName) are in no file now (another file is in its "
                    + "place): lost (a 'damaged' gap)")
        }
        report.displaced = []
        if rebuildingIndex { try restoreClocks() }
        // A dry run beside a recorder would catch it between its index's change and its journal's; that recorder
        // brought them in step when it opened the store.
        if onlyStreamID == nil && !(mode == .verify && Self.isOpenForRecording(directory: directory)) {
            // A journal that cannot be read or written (a full disk) leaves the index as the pass made it: the next
            // pass tries again.
            for (name, reconcileJournal) in [
                (MarkerJournal.fileName, reconcileMarkers), (LossJournal.fileName, reconcileLosses),
            ] {
                do {
                    try reconcileJournal(mode, rebuildingIndex, &report)
                } catch SegmentStoreError.io(let failure) {
                    report.problems.append(
                        "\(name) could not be brought in step with the index (\(failure)): free space, or move away "
                            + "what is in its place; the next open tries again")
                }
            }
        }
        return report
    }

    /// Compares each stream's row with the headers of its segment files: a row that disagrees with all of them,
    /// while they agree with each other, was changed (by another program, or a bad edit), and every frame of the
    /// stream would read as damaged. A dry run reports it; a repair sets the row from the files. Files that disagree
    /// among themselves are left to the checks of each file (a file of another recording put in).
    private func reconcileStreamDescriptions(
        files: [UInt64: String], rows: [UInt64: SegmentRow], mode: ReconcileMode, report: inout VerifyReport
    ) throws {
        for stream in try index.streams() {
            var said: [StreamDescription] = []
            for (sequence, row) in rows where row.streamID == stream.id {
                guard let name = files[sequence],
                    let reader = try? SegmentFileReader(path: segmentsDirectory + "/" + name, fileSystem: fileSystem)
                else { continue }
                if reader.header.streamName == stream.name { said.append(reader.header.stream) }
                reader.close()
            }
            guard let first = said.first, said.allSatisfy({ $0.agrees(with: first) }),
                !stream.description.agrees(with: first)
            else { continue }
            let fromFiles = said.dropFirst().reduce(first) { $0.filled(from: $1) }
            let files = said.count == 1 ? "its segment file says" : "its \(said.count) segment files say"
            let found =
                "the index says stream '\(stream.name)' holds \(stream.description), but \(files) \(fromFiles)"
            if mode == .repair {
                try index.replaceDescription(ofStream: stream.id, with: fromFiles)
                report.repaired.append(found + ": the index now says what the files do")
            } else {
                report.problems.append(found + "; 'rewind verify --repair' sets the index from the files")
            }
        }
    }

    /// Places the streams of an index rebuilt from the segment files on one recorder clock again, from when their
    /// segments were created and their frames captured (what a recorder stored is gone with the index). The stream
    /// whose first frame was captured first keeps recorder time = pts, recorder time 0 at that frame's capture time
    /// less its pts. Each other stream's first frame is placed where the first stream's frame captured nearest it
    /// lies, moved by the difference of their capture times, or not moved at all when that leaves it less than one of
    /// its frames from pts (streams started together); that frame is looked for in the first stream's segment
    /// created nearest the other's first segment, its own recording. Streams recorded together share capture times
    /// whether they were recorded in real time (a camera: a stream that joined later comes back where it joined) or
    /// faster (files, whose capture times run ahead: a recording after the stored ones comes back after them, as the
    /// recorder placed it).
    private func restoreClocks() throws {
        var firsts: [(row: StreamRow, frame: FrameRow, segment: SegmentRow)] = []
        for row in try index.streams() {
            var first: FrameRow?
            try index.frames(streamID: row.id, in: Int64.min..<Int64.max) { frame in
                first = frame
                return false
            }
            guard let first, let segment = try index.segment(id: first.segmentID) else { continue }
            firsts.append((row, first, segment))
        }
        guard let reference = firsts.min(by: { $0.frame.wallNanoseconds < $1.frame.wallNanoseconds }) else { return }
        let origin = reference.frame.wallNanoseconds.subtractingReportingOverflow(reference.frame.ptsNanoseconds)
        guard !origin.overflow else { return }
        let referenceSegments = try index.segments(streamID: reference.row.id).filter { $0.frameCount > 0 }
        for (row, first, segment) in firsts {
            var offset: Int64 = 0
            // The first stream's segment created nearest this stream's first: its recording.
            if row.id != reference.row.id,
                let together = referenceSegments.min(by: {
                    Self.distance($0.createdWallNanoseconds, segment.createdWallNanoseconds)
                        < Self.distance($1.createdWallNanoseconds, segment.createdWallNanoseconds)
                }),
                let near = try index.frames(ofSegment: together.id).min(by: {
                    Self.distance($0.wallNanoseconds, first.wallNanoseconds)
                        < Self.distance($1.wallNanoseconds, first.wallNanoseconds)
                })
            {
                // Saturating throughout: the times come from files, whatever they hold.
                let time = near.ptsNanoseconds.addingSaturating(
                    first.wallNanoseconds.subtractingSaturating(near.wallNanoseconds))
                // Capture times centuries apart place no stream farther than a clock may be.
                let farthest = StreamClock.farthestOffsetNanoseconds
                offset = min(max(time.subtractingSaturating(first.ptsNanoseconds), -farthest), farthest)
                if offset.magnitude < UInt64(max(1, row.description.frameStepNanoseconds)) { offset = 0 }
            }
            try setClock(
                StreamClock(offsetNanoseconds: offset, wallNanoseconds: origin.partialValue), streamName: row.name)
        }
    }

    /// How far apart two times are, for any two (no overflow).
    static func distance(_ a: Int64, _ b: Int64) -> UInt64 {
        a > b ? UInt64(bitPattern: a &- b) : UInt64(bitPattern: b &- a)
    }

    /// A file whose header cannot be read:
    /// - a `.partial` that ends before its header does, with no frame in the index (killed while it was being
    ///   created): removed, at open too, since it cannot hold a frame;
    /// - a damaged header the index can rebuild (the file's row names its stream, and valid records follow where
    ///   the rebuilt header ends): reported; a repair writes the rebuilt header over the damaged one, then
    ///   reconciles the file as usual;
    /// - anything else (not a segment, cut inside its header, no valid record after it): reported; a repair
    ///   records the frames the index had in it as lost (`damaged` gaps), removes its rows and renames it
    ///   `NAME.unreadable`, which the store ignores and nothing deletes.
    private func reconcileUnreadableFile(
        name: String, row: SegmentRow?, error: SegmentStoreError, mode: ReconcileMode, onlyStream: String?,
        report: inout VerifyReport
    ) throws {
        let path = segmentsDirectory + "/" + name
        let detail: String
        if case .notASegment(_, let why) = error { detail = why } else { detail = error.description }
        let indexedFrames = row?.frameCount ?? 0
        if name.hasSuffix(SegmentFormat.partialSuffix), indexedFrames == 0, let size = try headerlessPartialSize(path) {
            guard mode.changes else {
                report.damaged.append(
                    SegmentDamage(
                        segment: name, frame: -1, offset: 0,
                        message: "segment \(name) ends inside its header (\(size) bytes, no frames)"))
                return
            }
            try Self.wrapIO { () throws(FileSystemError) in
                try fileSystem.unlink(path)
                try fileSystem.syncDirectory(segmentsDirectory)
            }
            if let row { try index.removeSegment(id: row.id) }
            report.repaired.append(
                "removed segments/\(name): its header was never completed (\(size) bytes, no frames)")
            report.segments -= 1
            return
        }
        let stream = try row.flatMap { row in try index.streams().first { $0.id == row.streamID } }
        if let onlyStream, stream?.name != onlyStream {
            report.segments -= 1
            return
        }
        if let row, let stream, let rebuilt = try rebuiltHeader(path: path, name: name, row: row, stream: stream) {
            guard mode == .repair else {
                noteLeftForRepair(
                    SegmentDamage(
                        segment: name, frame: -1, offset: 0,
                        message: "segment \(name) has a damaged header (\(detail)); 'rewind verify --repair' rebuilds "
                            + "it from the index (\(rebuilt.frames) valid frames follow it)"), atOpen: mode == .recover,
                    report: &report)
                // Its frames past the index's last (written after the last sync) are where a new recording of the
                // stream must not go before the repair.
                if mode.changes, let newest = rebuilt.newestPTS {
                    try index.raiseNewestPTS(streamID: stream.id, to: newest)
                }
                return
            }
            let bytes = rebuilt.header.encoded()
            try Self.wrapIO { () throws(FileSystemError) in
                let fd = try fileSystem.open(path, flags: O_WRONLY, mode: 0)
                defer { fileSystem.close(fd) }
                try fileSystem.writeAll(fd, bytes, offset: 0, path: path)
                try fileSystem.fsync(fd, path: path)
            }
            report.repaired.append("rebuilt the damaged header of segment \(name) from the index (\(detail))")
            report.segments -= 1
            try reconcileFile(name: name, row: row, mode: mode, onlyStream: onlyStream, report: &report)
            return
        }
        let lostNote = indexedFrames > 0 ? " and records its \(indexedFrames) indexed frames as lost" : ""
        guard mode == .repair else {
            noteLeftForRepair(
                SegmentDamage(
                    segment: name, frame: -1, offset: 0,
                    message: "segments/\(name) cannot be read (\(detail)); 'rewind verify --repair' moves it aside"
                        + lostNote), atOpen: mode == .recover, report: &report)
            return
        }
        let lost = try row.map { try index.frames(ofSegment: $0.id).map(\.ptsNanoseconds) } ?? []
        let aside = try moveAside(name, as: "unreadable")
        if let row {
            try index.removeSegment(id: row.id)
            try recordLostFrames(streamID: row.streamID, lost: lost)
        }
        report.repaired.append(
            "moved segments/\(name) aside as \(aside): it cannot be read (\(detail))"
                + (lost.isEmpty ? "" : "; its \(lost.count) indexed frames are lost"))
        report.segments -= 1
    }

    /// Notes a file left damaged for a repair: among the damage found, and, at open (`atOpen`), among the problems
    /// too (what a recording that goes on beside it says), followed by `advice` when its message has none.
    private func noteLeftForRepair(
        _ damage: SegmentDamage, atOpen: Bool, advice: String? = nil, report: inout VerifyReport
    ) {
        report.damaged.append(damage)
        if atOpen { report.problems.append(damage.message + (advice.map { "; \($0)" } ?? "")) }
    }

    /// Why repairs set files aside: the suffixes ``moveAside(_:as:)`` gives them.
    static let setAsideSuffixes = ["unreadable", "duplicate", "foreign"]

    /// The files repairs set aside in `segments/` (`NAME.unreadable`, `.duplicate`, `.foreign`, each maybe `-2`, …),
    /// with their sizes, by name: out of the store (no frame of theirs is read, and retention does not count or
    /// delete them), kept for their owner to look at, move or delete.
    ///
    /// - Throws: I/O errors listing the directory.
    public func setAsideFiles() throws -> [(name: String, bytes: Int64)] {
        let names = try Self.wrapIO { () throws(FileSystemError) in
            try fileSystem.contentsOfDirectory(segmentsDirectory)
        }
        return names.filter { name in
            guard let dot = name.lastIndex(of: "."), SegmentFormat.sequence(ofFileName: String(name[..<dot])) != nil
            else { return false }
            let suffix = name[name.index(after: dot)...].split(separator: "-", maxSplits: 1)
            return suffix.first.map { Self.setAsideSuffixes.contains(String($0)) } == true
                && (suffix.count == 1 || Int(suffix[1]) != nil)
        }.sorted().map { name in
            (name, fileSystem.fileBytes(segmentsDirectory + "/" + name) ?? 0)
        }
    }

    /// The names in `segments/`; nil when the directory itself is missing.
    ///
    /// - Throws: ``SegmentStoreError/io(_:)`` for any other failure to list it.
    private func segmentFileNames() throws -> [String]? {
        do {
            return try fileSystem.contentsOfDirectory(segmentsDirectory)
        } catch  where error.code == ENOENT {
            return nil
        } catch {
            throw SegmentStoreError.io(error)
        }
    }

    /// Whether the index describes other segment files than those `names` lists: none of the readable files was
    /// created when any of the index's segments was, and at least one lies under a number the index gives one of its
    /// own (so they are not files a recorder made since the rows were read). A store in step answers at its first
    /// file whose creation the index knows: one header read.
    ///
    /// - Returns: nil, or how many segments the index has and how many of the files could be read.
    /// - Throws: index errors.
    func indexDescribesOtherFiles(names: [String]) throws -> (segments: Int, files: Int)? {
        let rows = try index.segments().filter { $0.state != .deleting }
        guard !rows.isEmpty else { return nil }
        let creations = Set(rows.map(\.createdWallNanoseconds))
        let numbers = Set(rows.compactMap { SegmentFormat.sequence(ofFileName: $0.fileName) })
        var readable = 0
        var underIndexedNumber = false
        for name in names.sorted() {
            guard let sequence = SegmentFormat.sequence(ofFileName: name),
                let reader = try? SegmentFileReader(path: segmentsDirectory + "/" + name, fileSystem: fileSystem)
            else { continue }
            let created = reader.header.createdWallNanoseconds
            reader.close()
            if creations.contains(created) { return nil }
            readable += 1
            if numbers.contains(sequence) { underIndexedNumber = true }
        }
        return readable > 0 && underIndexedNumber ? (rows.count, readable) : nil
    }

    /// Whether `DIR/index.sqlite` describes other segment files than those in `segments/`
    /// (``indexDescribesOtherFiles(names:)``), for `info`: nil when they belong together, or the error a recorder or
    /// a check would meet.
    ///
    /// - Throws: I/O errors listing the directory; index errors.
    public func foreignIndexProblem() throws -> SegmentStoreError? {
        guard let (segments, files) = try indexDescribesOtherFiles(names: segmentFileNames() ?? []) else { return nil }
        return .foreignIndex(path: index.path, segments: segments, files: files)
    }

    /// Where `segments/` and the index disagree, seen from a listing of the directory alone (no file is read, so it
    /// is cheap enough for `info`): segments the index holds frames in whose file is gone, and segment files the
    /// index has no row for (an index that lost rows, a `-wal` damaged or deleted). A recorder may be writing: a row
    /// counts as missing its file only when the index still has it after the listing, and files are compared with
    /// rows read after the listing, so only segments made since can be left out.
    ///
    /// - Returns: the missing files with the frames the index has in them, and the unindexed file names, by name.
    /// - Throws: I/O errors listing the directory; index errors.
    public func segmentFilesOutOfStep() throws -> (missing: [(fileName: String, frames: Int)], unindexed: [String]) {
        let names = try segmentFileNames() ?? []  // segments/ itself gone: every file is missing
        let listed = Set(names.compactMap { SegmentFormat.sequence(ofFileName: $0) })
        let rows = try index.segments()
        let indexed = Set(rows.compactMap { SegmentFormat.sequence(ofFileName: $0.fileName) })
        var missing: [(fileName: String, frames: Int)] = []
        // An open segment without frames may be a recorder's newest, its file about to be made.
        for row in rows where row.state != .deleting && !(row.state == .open && row.frameCount == 0) {
            guard let sequence = SegmentFormat.sequence(ofFileName: row.fileName), !listed.contains(sequence),
                let now = try index.segment(id: row.id), now.state != .deleting,
                !fileSystem.fileExists(segmentsDirectory + "/" + now.fileName)
            else { continue }
            missing.append((now.fileName, now.frameCount))
        }
        let unindexed = names.filter { name in
            SegmentFormat.sequence(ofFileName: name).map { !indexed.contains($0) } == true
        }
        return (missing.sorted { $0.fileName < $1.fileName }, unindexed.sorted())
    }

    /// Frames in the file of each open segment past the last frame the index lists: those a recorder wrote after
    /// its last sync when it stopped without sealing (killed, the machine down). No read returns them until a repair
    /// or the next recording indexes them. Meaningful only while no recorder writes the store.
    ///
    /// Found by the record headers after the index's last frame (its offset and stored length): no payload is read.
    ///
    /// - Returns: one entry per open segment whose file holds such frames, by file name.
    /// - Throws: ``SegmentStoreError`` when the index cannot be read; a file that cannot be opened or read is skipped
    ///   (``segmentFilesOutOfStep()`` and `verify` report it).
    /// - Complexity: a query per open segment, and a read of one record header per frame past the index.
    public func framesPastIndex() throws -> [FramesPastIndex] {
        var found: [FramesPastIndex] = []
        for row in try index.segments() where row.state == .open {
            let path = segmentsDirectory + "/" + row.fileName
            guard fileSystem.fileExists(path),
                let reader = try? SegmentFileReader(path: path, fileSystem: fileSystem)
            else { continue }
            defer { reader.close() }
            var start = Int64(reader.header.length)
            if let last = row.lastPTS, row.frameCount > 0 {
                var lastRow: FrameRow?
                try index.frames(streamID: row.streamID, in: last..<last + 1) { frame in
                    lastRow = frame
                    return false
                }
                guard let lastRow, lastRow.segmentID == row.id else { continue }
                start = lastRow.fileOffset + Int64(SegmentFormat.recordHeaderLength) + Int64(lastRow.storedLength)
            }
            guard let headers = try? reader.recordHeaders(from: start, after: row.lastPTS),
                let first = headers.first, let last = headers.last
            else { continue }
            found.append(
                FramesPastIndex(
                    fileName: row.fileName, frames: headers.count, firstPTS: first.ptsNanoseconds,
                    lastPTS: last.ptsNanoseconds))
        }
        return found.sorted { $0.fileName < $1.fileName }
    }

    /// Renames `segments/NAME` to `NAME.SUFFIX` (`NAME.SUFFIX-2`, … when taken), which the store ignores and
    /// nothing deletes, durably; returns the new name.
    func moveAside(_ name: String, as suffix: String) throws -> String {
        var aside = name + "." + suffix
        var attempt = 1
        while fileSystem.fileExists(segmentsDirectory + "/" + aside) {
            attempt += 1
            aside = name + ".\(suffix)-\(attempt)"
        }
        try Self.wrapIO { () throws(FileSystemError) in
            try fileSystem.rename(segmentsDirectory + "/" + name, to: segmentsDirectory + "/" + aside)
            try fileSystem.syncDirectory(segmentsDirectory)
        }
        return aside
    }

    /// The header a file of `stream` whose own header is damaged must have had, and how many valid frames follow
    /// it; nil unless at least one does. The header's length follows from the stream's name and its creation time
    /// is the segment row's (`row`); the key interval is taken from the damaged header where it is plausible, and
    /// the chunk size that reads the most records wins (the store's, the default, then the damaged header's).
    private func rebuiltHeader(path: String, name: String, row: SegmentRow, stream: StreamRow) throws -> (
        header: SegmentHeader, frames: Int, newestPTS: Int64?
    )? {
        guard let sequence = SegmentFormat.sequence(ofFileName: name) else { return nil }
        var fields = [UInt8](repeating: 0, count: SegmentFormat.fixedHeaderLength)
        if let fd = try? fileSystem.open(path, flags: O_RDONLY, mode: 0) {
            defer { fileSystem.close(fd) }
            _ = fields.withUnsafeMutableBytes { raw in try? fileSystem.readAll(fd, into: raw, offset: 0, path: path) }
        }
        let (recordedKeyInterval, recordedChunkSize) = fields.withUnsafeBytes { raw in
            let p = raw.baseAddress!
            return (Int(p.get(UInt32.self, at: 36)), Int(p.get(UInt32.self, at: 40)))
        }
        let created = row.createdWallNanoseconds
        let keyInterval = (1...100_000).contains(recordedKeyInterval) ? recordedKeyInterval : options.keyInterval
        var chunkSizes = [options.chunkSize, StoreOptions.defaultChunkSize] + StoreOptions.earlierDefaultChunkSizes
        // The damaged header's own value last: a flipped bit there can still read small frames.
        if recordedChunkSize >= 4096 && recordedChunkSize <= 1 << 28 { chunkSizes.append(recordedChunkSize) }
        var best: (header: SegmentHeader, frames: Int, newestPTS: Int64?)?
        var tried = Set<Int>()
        for chunkSize in chunkSizes where tried.insert(chunkSize).inserted {
            let header = SegmentHeader(
                stream: stream.description, streamName: stream.name, sequence: sequence, keyInterval: keyInterval,
                chunkSize: chunkSize, createdWallNanoseconds: created)
            guard let reader = try? SegmentFileReader(path: path, fileSystem: fileSystem, assumedHeader: header),
                let scan = try? reader.scan(verifyPayload: true)
            else { continue }
            reader.close()
            if scan.entries.count > (best?.frames ?? 0) {
                best = (header, scan.entries.count, scan.entries.last?.ptsNanoseconds)
            }
        }
        return best
    }

    /// The size of a `.partial` file that ends before its header does (so it holds no frame), or nil.
    ///
    /// Only what a write cut inside the header leaves counts: the header's start (the segment magic, or as much of
    /// it as there is), or zeros where its bytes never reached the disk. Any other bytes are not a segment's: such a
    /// file is set aside, never deleted (a few KiB of another program's data, whose bytes at the name length's place
    /// read as a long name, were removed as an unfinished header).
    private func headerlessPartialSize(_ path: String) throws -> Int64? {
        try Self.wrapIO { () throws(FileSystemError) -> Int64? in
            let fd = try fileSystem.open(path, flags: O_RDONLY, mode: 0)
            defer { fileSystem.close(fd) }
            let size = try fileSystem.size(fd, path: path)
            let head = UnsafeMutableRawBufferPointer.allocate(
                byteCount: SegmentFormat.fixedHeaderLength, alignment: 1)
            defer { head.deallocate() }
            let wanted = Int(min(size, Int64(SegmentFormat.fixedHeaderLength)))
            let read = try fileSystem.pread(
                fd, into: UnsafeMutableRawBufferPointer(rebasing: head[..<wanted]), offset: 0, path: path)
            let bytes = head[..<read]
            let magic = SegmentFormat.magic
            let startsAsAHeader = bytes.prefix(magic.count).elementsEqual(magic.prefix(min(read, magic.count)))
            guard startsAsAHeader || bytes.allSatisfy({ $0 == 0 }) else { return nil }
            let nameLengthOffset = SegmentFormat.fixedHeaderLength - 6
            guard read >= nameLengthOffset + 2 else { return size }
            let nameLength = Int64(head[nameLengthOffset]) | Int64(head[nameLengthOffset + 1]) << 8
            return size < Int64(SegmentFormat.fixedHeaderLength) + nameLength ? size : nil
        }
    }

    /// - Parameter continuesAfterStream: whether a file whose frames repeat pts the stream's rows hold is moved
    ///   after the stream's frames now (false: it is put in ``VerifyReport/revisit``, to come back to once every
    ///   file's rows are rebuilt).
    private func reconcileFile(
        name: String, row: SegmentRow?, mode: ReconcileMode, onlyStream: String? = nil,
        continuesAfterStream: Bool = true, report: inout VerifyReport
    ) throws {
        let path = segmentsDirectory + "/" + name
        let isPartial = name.hasSuffix(SegmentFormat.partialSuffix)
        report.segments += 1
        let reader: SegmentFileReader
        do {
            reader = try SegmentFileReader(path: path, fileSystem: fileSystem)
        } catch {
            try reconcileUnreadableFile(
                name: name, row: row, error: error, mode: mode, onlyStream: onlyStream, report: &report)
            return
        }
        defer { reader.close() }
        if let onlyStream, reader.header.streamName != onlyStream {
            report.segments -= 1
            return
        }
        // Created at another time than the segment the index knows by this name, and than any it knows: perhaps
        // not the store's file (its frames decide, below).
        let foreignSuspect =
            row.map { $0.createdWallNanoseconds != reader.header.createdWallNanoseconds } == true
            && report.indexedCreations[reader.header.createdWallNanoseconds] == nil

        // Fast path at open: a sealed file whose footer agrees with its sealed row.
        if !mode.scansEverything, !isPartial, !foreignSuspect, let row, row.state == .sealed, row.fileName == name,
            let footer = try? reader.readFooter(), footer.count == row.frameCount
        {
            report.frames += footer.count
            return
        }

        // The store writes a file's number into its header and its name alike: a `.partial` whose header says
        // another number was made under another name (another store's, or renamed), and is not sealed, indexed or
        // read as this one's (sealing it would take the name its header gives, perhaps another file's).
        if isPartial, let sequence = SegmentFormat.sequence(ofFileName: name), reader.header.sequence != sequence,
            row == nil
        {
            reader.close()
            report.segments -= 1
            let said =
                "segments/\(name) says in its header that it is segment \(reader.header.sequence): it was made "
                + "under another name (another store's file, or one renamed)"
            guard mode == .repair else {
                report.problems.append(said + "; 'rewind verify --repair' moves it aside as \(name).foreign")
                return
            }
            report.repaired.append(said + "; moved it aside as \(try moveAside(name, as: "foreign"))")
            return
        }
        let scan = try reader.scan(verifyPayload: true)
        if foreignSuspect, let row,
            let difference = try firstDisagreement(segment: row, header: reader.header, scan: scan)
        {
            reader.close()
            try reconcileForeignFile(
                name: name, row: row, header: reader.header, difference: difference, mode: mode, report: &report)
            return
        }
        report.frames += scan.entries.count
        var needsCut = false
        // A `.partial` damaged before its end (valid records follow the damage) was not torn by a crash: at open it
        // is kept whole, like a damaged sealed file, so a repair can salvage the frames after the damage.
        var damagedBeforeItsEnd = false
        /// The newest pts of the valid records after the damage of such a file (which the index may not hold).
        var newestAfterDamage: Int64?
        if case .damaged(let file, let frame, let offset, _)? = scan.damage {
            needsCut = true
            if isPartial && !scan.hasFooter && mode == .recover {
                let records = (try? reader.resynchronize(after: scan).records) ?? []
                damagedBeforeItsEnd = !records.isEmpty
                newestAfterDamage = records.map(\.entry.ptsNanoseconds).max()
            }
            let tornTail = isPartial && !scan.hasFooter && !damagedBeforeItsEnd
            if tornTail && mode == .recover {
                report.repaired.append(
                    "segment \(file) was torn at byte \(offset) (frame \(frame)); kept \(scan.entries.count) frames")
            } else {
                // A `.partial` damaged before its end gets a problem of its own below.
                noteLeftForRepair(
                    SegmentDamage(segment: file, frame: frame, offset: offset, message: "\(scan.damage!)"),
                    atOpen: mode == .recover && !damagedBeforeItsEnd,
                    advice: "run 'rewind verify --repair', which keeps the frames before the damage and salvages "
                        + "those after it", report: &report)
            }
        } else if !isPartial && !scan.hasFooter {
            needsCut = true
            noteLeftForRepair(
                SegmentDamage(
                    segment: name, frame: scan.entries.count, offset: scan.validEnd,
                    message: "segment \(name) has no valid footer after byte \(scan.validEnd)"),
                atOpen: mode == .recover,
                advice: "run 'rewind verify --repair', which seals it again after its last valid frame",
                report: &report)
        }
        let header = reader.header
        var row = row
        // verify and repair look past the damage: a repair salvages the usable frames there before the cut.
        if scan.damage != nil && mode.scansEverything {
            let salvage = try salvageTail(
                reader: reader, scan: scan, segmentID: row?.id, write: mode == .repair, report: &report)
            if let segmentID = row?.id { row = try index.segment(id: segmentID) }
            guard let salvage else {
                // Nothing salvaged now: the file keeps its tail; the index holds its valid frames.
                reader.close()
                try reconcileRows(fileName: name, header: header, row: row, scan: scan, report: &report)
                return
            }
            if !salvage.lost.isEmpty || salvage.usableFrames > 0 {
                report.salvage.append(salvage)
                if mode == .repair {
                    report.repaired.append(salvage.summary(dryRun: false))
                } else {
                    report.problems.append(salvage.summary(dryRun: true))
                }
            }
        }
        reader.close()

        guard mode.changes else {
            if isPartial { report.problems.append("segment \(name) is not sealed") }
            try compareRows(name: name, header: reader.header, row: row, scan: scan, report: &report)
            return
        }
        // A damaged sealed file is cut only by an explicit repair; until then the index holds its valid frames.
        if (!isPartial || damagedBeforeItsEnd) && needsCut && mode != .repair {
            if damagedBeforeItsEnd {
                report.problems.append(
                    "segment \(name) is damaged before its end, with valid frames after the damage: it is left as it is; "
                        + "run 'rewind verify --repair' to salvage them")
            }
            try reconcileRows(
                fileName: name, header: header, row: row, scan: scan, framesAfterDamage: damagedBeforeItsEnd,
                report: &report)
            // A new recording of the stream continues after the frames the repair will salvage, not among them.
            if let newestAfterDamage, let stream = try index.stream(named: header.streamName) {
                try index.raiseNewestPTS(streamID: stream.id, to: newestAfterDamage)
            }
            return
        }

        var finalName = name
        if isPartial || needsCut {
            do {
                if !isPartial {
                    // Re-seal in place: rename back to a partial first so a crash leaves a recoverable file.
                    let partial = SegmentFormat.fileName(sequence: header.sequence, partial: true)
                    try fileSystem.rename(path, to: segmentsDirectory + "/" + partial)
                    finalName = partial
                }
                finalName = try sealRecoveredPartial(
                    directory: segmentsDirectory, fileName: finalName, header: header, scan: scan,
                    fileSystem: fileSystem)
            } catch {
                report.problems.append("could not seal segment \(name): \(error)")
                return
            }
            let frames = Self.frames(scan.entries.count)
            report.repaired.append(
                finalName == name
                    ? "cut segment \(name) at byte \(scan.validEnd), after its last valid frame, and sealed it again with "
                        + frames
                    : "sealed segment \(name) as \(finalName) with \(frames) (cut at byte \(scan.validEnd))")
        }
        try reconcileRows(
            fileName: finalName, header: header, row: row, scan: scan, mode: mode,
            continuesAfterStream: continuesAfterStream, report: &report)
    }

    /// A file under the name of a segment the index knows that is not that segment's file: created at another
    /// time than its row says, and than any segment the index had (another store's file, or another recording's,
    /// copied over it), and its frames differ from the rows (`difference`; frames captured at other times, say,
    /// whatever their pts, stream and sizes). A repair moves it aside as `NAME.foreign` (which the store ignores and
    /// nothing deletes) and counts the index's frames of it as lost unless another file holds them (a `damaged`
    /// gap); until then it is reported and left as it is (a read of its rows refuses what it finds there).
    private func reconcileForeignFile(
        name: String, row: SegmentRow, header: SegmentHeader, difference: String, mode: ReconcileMode,
        report: inout VerifyReport
    ) throws {
        let created =
            "the file was created \(Self.utcText(header.createdWallNanoseconds)), the index's segment "
            + "\(Self.utcText(row.createdWallNanoseconds)); \(difference)"
        guard mode == .repair else {
            report.problems.append(
                "segment \(name) is not the file the index knew under that name (\(created)): another store's or "
                    + "another recording's file was put in its place; 'rewind verify --repair' moves it aside as "
                    + "\(name).foreign and counts the index's \(Self.frames(row.frameCount)) of it as lost unless another "
                    + "file holds them")
            return
        }
        let pts = try index.frames(ofSegment: row.id).map(\.ptsNanoseconds)
        let aside = try moveAside(name, as: "foreign")
        try index.removeSegment(id: row.id)
        report.displaced.append((name, row.streamID, pts))
        report.repaired.append(
            "moved segments/\(name) aside as \(aside): it is not the file the index knew under that name (\(created))")
        report.segments -= 1
    }

    /// `2026-12-04 06:10:00.123 UTC`, or `2026-12-04T06:10:00.123Z` (`iso8601`, as `--from` takes it), for a wall
    /// time in Unix epoch nanoseconds; the milliseconds truncated, so a time read is never after its frame.
    package static func utcText(_ nanoseconds: Int64, iso8601: Bool = false) -> String {
        let (whole, fraction) = nanoseconds.quotientAndRemainder(dividingBy: 1_000_000_000)
        // Before 1970 the remainder is negative: a second earlier, the fraction counted up from it.
        let milliseconds = (fraction < 0 ? fraction + 1_000_000_000 : fraction) / 1_000_000
        return utcText(seconds: fraction < 0 ? whole - 1 : whole, milliseconds: milliseconds, iso8601: iso8601)
            ?? "\(nanoseconds) ns after 1970"
    }

    /// `2263-01-01 00:00:00 UTC` (with `.123` when `milliseconds` are given; `2263-01-01T00:00:00Z` for `iso8601`)
    /// for any second since 1970 the system can break down into a date, years past 2262 included; nil otherwise.
    package static func utcText(seconds: Int64, milliseconds: Int64? = nil, iso8601: Bool = false) -> String? {
        var time = time_t(seconds)
        var parts = tm()
        guard gmtime_r(&time, &parts) != nil else { return nil }
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = milliseconds.map { ms in ms < 10 ? ".00\(ms)" : ms < 100 ? ".0\(ms)" : ".\(ms)" } ?? ""
        return "\(Int64(parts.tm_year) + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))\(iso8601 ? "T" : " ")"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))\(millis)\(iso8601 ? "Z" : " UTC")"
    }

    /// Dry run: says how the index differs from the file.
    private func compareRows(
        name: String, header: SegmentHeader, row: SegmentRow?, scan: SegmentFileReader.ScanResult,
        report: inout VerifyReport
    ) throws {
        guard let row else {
            if let stream = try index.stream(named: header.streamName), !stream.description.agrees(with: header.stream)
            {
                report.problems.append(
                    foreignFileProblem(name, stream: stream.name, stored: stream.description, found: header.stream))
            } else {
                report.problems.append("segment \(name) (\(scan.entries.count) frames) has no index row")
            }
            return
        }
        if row.createdWallNanoseconds != header.createdWallNanoseconds,
            let other = report.indexedCreations[header.createdWallNanoseconds]
        {
            report.problems.append(
                "segments/\(name) is the file of the index's segment \(other) (files swapped or renamed): 'rewind "
                    + "verify --repair' indexes each file at its own frames' times")
        } else if row.frameCount != scan.entries.count {
            // A damaged file holds more than its readable records before the damage (the repair salvages after it).
            report.problems.append(
                "the index has \(row.frameCount) frames for segment \(name), its file holds \(scan.entries.count)"
                    + (scan.damage == nil ? "" : " readable before the damage"))
        } else if let difference = try firstDisagreement(segment: row, header: header, scan: scan) {
            report.problems.append(
                "the index rows of segment \(name) disagree with its file (\(difference)); 'rewind verify --repair' "
                    + "rebuilds them from the file")
        }
    }

    /// Where the index's rows of a segment first differ from its file (the stream, then each frame's pts, byte
    /// offset, stored length and capture time), or nil when they agree.
    private func firstDisagreement(segment: SegmentRow, header: SegmentHeader, scan: SegmentFileReader.ScanResult)
        throws -> String?
    {
        if let indexed = try index.streams().first(where: { $0.id == segment.streamID }),
            indexed.name != header.streamName
        {
            return "the index lists it under stream '\(indexed.name)', the file holds stream '\(header.streamName)'"
        }
        let rows = try index.frames(ofSegment: segment.id)
        guard rows.count == scan.entries.count else {
            return "\(rows.count) frame rows for \(scan.entries.count) frames"
        }
        for (number, (row, entry)) in zip(rows, scan.entries).enumerated() {
            if row.ptsNanoseconds != entry.ptsNanoseconds || row.fileOffset != entry.offset {
                return "frame \(number): the index has pts \(row.ptsNanoseconds) ns at byte \(row.fileOffset), the "
                    + "file pts \(entry.ptsNanoseconds) ns at byte \(entry.offset)"
            }
            if row.storedLength != entry.storedLength {
                return "frame \(number) at byte \(entry.offset): the index has \(row.storedLength) stored bytes, the "
                    + "file \(entry.storedLength)"
            }
            if row.wallNanoseconds != entry.wallNanoseconds {
                return "frame \(number) at byte \(entry.offset): the index has it captured "
                    + "\(Self.utcText(row.wallNanoseconds)), the file \(Self.utcText(entry.wallNanoseconds))"
            }
        }
        return nil
    }

    /// What is wrong with a segment file whose stream has the name of one of the store's but another format: it is
    /// another store's, and stays out of the index.
    private func foreignFileProblem(
        _ fileName: String, stream: String, stored: StreamDescription, found: StreamDescription
    ) -> String {
        "segment \(fileName) holds stream '\(stream)' as \(found), but this store's '\(stream)' is \(stored): the file "
            + "is not this store's and is left out of the index; move it out of \(segmentsDirectory)"
    }

    /// `1 frame`, `12 frames`.
    static func frames(_ count: Int) -> String { "\(count) frame" + (count == 1 ? "" : "s") }

    /// Makes the index rows of one (sealed) file match it.
    ///
    /// - Parameter framesAfterDamage: whether valid records follow the file's damage (kept for a repair to salvage):
    ///   the rows let go of past the damage are then not all lost, and the report says so.
    private func reconcileRows(
        fileName: String, header: SegmentHeader, row: SegmentRow?, scan: SegmentFileReader.ScanResult,
        mode: ReconcileMode = .recover, framesAfterDamage: Bool = false, continuesAfterStream: Bool = true,
        report: inout VerifyReport
    ) throws {
        var row = row
        var lost: (streamID: Int64, pts: [Int64])?
        /// Why the file's rows were removed and are added again from the file, if they were.
        var rebuilt: String?
        if let existing = row {
            let disagreement =
                mode.scansEverything && existing.state == .sealed && existing.frameCount == scan.entries.count
                ? try firstDisagreement(segment: existing, header: header, scan: scan) : nil
            if existing.frameCount > scan.entries.count
                || existing.state != .open && existing.frameCount != scan.entries.count || disagreement != nil
            {
                // Rows the file does not back (or a sealed row that disagrees): rebuild from the file. Frames the
                // index had beyond the file's are lost, and get a gap once the rows are rebuilt.
                let pts = try index.frames(ofSegment: existing.id).map(\.ptsNanoseconds)
                // Another of the store's files under this name (files swapped or renamed): the rows' frames are in
                // that file's place, indexed later in this pass.
                let anotherFile = existing.createdWallNanoseconds != header.createdWallNanoseconds
                if pts.count > scan.entries.count && !anotherFile {
                    lost = (existing.streamID, pts)
                } else if disagreement != nil || anotherFile {
                    // Another file in its place (files swapped, or copied in): the frames the rows had may be in
                    // another file, indexed later in this pass; those that are in none are lost, counted at its end.
                    report.displaced.append((fileName, existing.streamID, pts))
                }
                try index.removeSegment(id: existing.id)
                if anotherFile, let other = report.indexedCreations[header.createdWallNanoseconds] {
                    rebuilt = "it is the file of the index's segment \(other): files swapped or renamed"
                } else {
                    rebuilt = disagreement.map { "they disagreed: \($0)" } ?? "the index had \(existing.frameCount)"
                }
                row = nil
            }
        }
        defer {
            if let lost {
                do {
                    let count = try recordLostFrames(streamID: lost.streamID, lost: lost.pts)
                    if count > 0 && framesAfterDamage {
                        report.repaired.append(
                            "the index had \(lost.pts.count) frames of segment \(fileName), its file \(scan.entries.count) "
                                + "valid ones before the damage: the index leaves out the \(Self.frames(count)) from "
                                + "the damage on (a 'damaged' gap) until 'rewind verify --repair' salvages the readable ones"
                        )
                    } else if count > 0 {
                        report.repaired.append(
                            "the index had \(lost.pts.count) frames of segment \(fileName), its file \(scan.entries.count) "
                                + "valid ones: \(Self.frames(count)) \(count == 1 ? "is" : "are") lost (a 'damaged' gap)"
                        )
                    }
                } catch {
                    report.problems.append("could not record the frames segment \(fileName) lost as a gap: \(error)")
                }
            }
        }
        let segmentID: Int64
        let firstMissing: Int
        if let row {
            segmentID = row.id
            firstMissing = row.frameCount
            if firstMissing == scan.entries.count && row.state == .sealed && row.fileName == fileName { return }
        } else {
            let stream: StreamRow
            do {
                stream = try index.stream(named: header.streamName, description: header.stream)
            } catch StoreIndexError.streamDescriptionMismatch(let name, let stored, let found) {
                // A file of another store (copied in, say): left where it is, out of the index, and said.
                report.problems.append(foreignFileProblem(fileName, stream: name, stored: stored, found: found))
                return
            }
            segmentID = try index.insertSegment(
                streamID: stream.id, fileName: fileName, formatVersion: Int(header.formatVersion),
                createdWallNanoseconds: header.createdWallNanoseconds)
            firstMissing = 0
        }
        let streamID = try index.segment(id: segmentID)!.streamID
        if firstMissing < scan.entries.count {
            let missing = scan.entries[firstMissing...].map { entry in
                FrameRow(
                    ptsNanoseconds: entry.ptsNanoseconds, wallNanoseconds: entry.wallNanoseconds, segmentID: segmentID,
                    fileOffset: entry.offset, storedLength: entry.storedLength, rawLength: entry.rawLength,
                    flags: entry.flags, codec: entry.codec)
            }
            do {
                try index.addFrames(missing, streamID: streamID)
                // Frames back in the index are no longer missing: a file moved away and put back, say.
                if let first = missing.first?.ptsNanoseconds, let last = missing.last?.ptsNanoseconds {
                    try trimDamagedGaps(
                        streamID: streamID, around: first...last, frameDuration: header.stream.frameDuration)
                }
                let rows = "\(missing.count) index row" + (missing.count == 1 ? "" : "s")
                report.repaired.append(
                    rebuilt.map {
                        "rebuilt the index rows of segment \(fileName) from its file: \(Self.frames(missing.count)) ("
                            + $0 + ")"
                    } ?? "added \(rows) for segment \(fileName) from its file")
            } catch StoreIndexError.duplicatePTS(let stream, let pts) where mode.changes && firstMissing == 0 {
                // Rows of a file not yet rebuilt may hold these pts (files swapped): come back to it after them.
                guard continuesAfterStream else {
                    report.revisit.append(fileName)
                    return
                }
                // A later recording that started the stream's clock again: a repair moves its frames after the
                // stream's.
                if mode == .repair {
                    if try continueAfterStream(
                        fileName: fileName, header: header, scan: scan, segmentID: segmentID, report: &report)
                    {
                        return
                    }
                } else {
                    report.problems.append(
                        "could not index segment \(fileName): \(StoreIndexError.duplicatePTS(streamID: stream, pts: pts))"
                    )
                }
            } catch {
                report.problems.append("could not index segment \(fileName): \(error)")
            }
        }
        try index.sealSegment(id: segmentID, fileName: fileName, sealedWallNanoseconds: options.now())
    }
}

/// Frames an open segment's file holds past the last the index lists (``SegmentStore/framesPastIndex()``).
public struct FramesPastIndex: Sendable, Hashable {
    /// The file's name in `segments/` (`NNNNNN.seg.partial`).
    public var fileName: String
    /// How many whole records follow the index's last frame.
    public var frames: Int
    /// The pts of the first of them, nanoseconds.
    public var firstPTS: Int64
    /// The pts of the last of them, nanoseconds.
    public var lastPTS: Int64
}
