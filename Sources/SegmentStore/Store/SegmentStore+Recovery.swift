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
        return try reconcile(mode: repair ? .repair : .verify, streamName: streamName)
    }

    func reconcile(mode: ReconcileMode, streamName: String? = nil) throws -> VerifyReport {
        let onlyStreamID = try streamName.map { try streamID(named: $0) }
        var report = VerifyReport()
        let names = try Self.wrapIO { () throws(FileSystemError) in
            try fileSystem.contentsOfDirectory(segmentsDirectory)
        }
        var files: [UInt64: String] = [:]
        for name in names {
            guard let sequence = SegmentFormat.sequence(ofFileName: name) else { continue }
            if let other = files[sequence] {
                // Both names: a crash between writing the sealed file and removing the partial cannot happen with
                // rename, so this is a copy; prefer the sealed one and report the other.
                report.problems.append("segments/\(name) and segments/\(other) have the same number")
                if name.hasSuffix(SegmentFormat.sealedSuffix) { files[sequence] = name }
            } else {
                files[sequence] = name
            }
        }
        var rows: [UInt64: SegmentRow] = [:]
        for row in try index.segments() where onlyStreamID == nil || row.streamID == onlyStreamID {
            guard let sequence = SegmentFormat.sequence(ofFileName: row.fileName) else {
                report.problems.append("index row \(row.id) has an unexpected file name '\(row.fileName)'")
                continue
            }
            rows[sequence] = row
        }

        // Rows first: finish deletes, report rows without files.
        for (sequence, row) in rows.sorted(by: { $0.key < $1.key }) {
            if row.state == .deleting {
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
            } else if files[sequence] == nil {
                report.problems.append(
                    "index row for segment \(row.fileName) (\(row.frameCount) frames) has no file in segments/")
                if mode == .repair {
                    try index.removeSegment(id: row.id)
                    report.repaired.append("removed the index row of missing segment \(row.fileName)")
                }
                rows[sequence] = nil
            }
        }

        for (sequence, name) in files.sorted(by: { $0.key < $1.key }) {
            try reconcileFile(name: name, row: rows[sequence], mode: mode, onlyStream: streamName, report: &report)
        }
        return report
    }

    /// The size of a `.partial` file that ends before its header does (so it holds no frame), or nil.
    private func headerlessPartialSize(_ path: String) throws -> Int64? {
        try Self.wrapIO { () throws(FileSystemError) -> Int64? in
            let fd = try fileSystem.open(path, flags: O_RDONLY, mode: 0)
            defer { fileSystem.close(fd) }
            let size = try fileSystem.size(fd, path: path)
            let nameLengthOffset = SegmentFormat.fixedHeaderLength - 6
            guard size >= Int64(nameLengthOffset + 2) else { return size }
            let lengthBytes = UnsafeMutableRawBufferPointer.allocate(byteCount: 2, alignment: 1)
            defer { lengthBytes.deallocate() }
            let read = try fileSystem.pread(fd, into: lengthBytes, offset: Int64(nameLengthOffset), path: path)
            guard read == 2 else { return size }
            let nameLength = Int64(lengthBytes[0]) | Int64(lengthBytes[1]) << 8
            return size < Int64(SegmentFormat.fixedHeaderLength) + nameLength ? size : nil
        }
    }

    private func reconcileFile(
        name: String, row: SegmentRow?, mode: ReconcileMode, onlyStream: String? = nil, report: inout VerifyReport
    ) throws {
        let path = segmentsDirectory + "/" + name
        let isPartial = name.hasSuffix(SegmentFormat.partialSuffix)
        report.segments += 1
        let reader: SegmentFileReader
        do {
            reader = try SegmentFileReader(path: path, fileSystem: fileSystem)
        } catch {
            if isPartial, let size = try headerlessPartialSize(path) {
                // Killed before its header was complete: it cannot hold a frame, so nothing is lost by removing it.
                if mode.changes {
                    try Self.wrapIO { () throws(FileSystemError) in
                        try fileSystem.unlink(path)
                        try fileSystem.syncDirectory(segmentsDirectory)
                    }
                    if let row, row.frameCount == 0 { try index.removeSegment(id: row.id) }
                    report.repaired.append(
                        "removed segments/\(name): its header was never completed (\(size) bytes, no frames)")
                    report.segments -= 1
                    return
                }
            }
            report.damaged.append(SegmentDamage(segment: name, frame: -1, offset: 0, message: "\(error)"))
            return
        }
        defer { reader.close() }
        if let onlyStream, reader.header.streamName != onlyStream {
            report.segments -= 1
            return
        }

        // Fast path at open: a sealed file whose footer agrees with its sealed row.
        if !mode.scansEverything, !isPartial, let row, row.state == .sealed, row.fileName == name,
            let footer = try? reader.readFooter(), footer.count == row.frameCount
        {
            report.frames += footer.count
            return
        }

        let scan = try reader.scan(verifyPayload: true)
        report.frames += scan.entries.count
        var needsCut = false
        if case .damaged(let file, let frame, let offset, _)? = scan.damage {
            needsCut = true
            let tornTail = isPartial && !scan.hasFooter
            if tornTail && mode == .recover {
                report.repaired.append(
                    "segment \(file) was torn at byte \(offset) (frame \(frame)); kept \(scan.entries.count) frames")
            } else {
                report.damaged.append(
                    SegmentDamage(segment: file, frame: frame, offset: offset, message: "\(scan.damage!)"))
            }
        } else if !isPartial && !scan.hasFooter {
            needsCut = true
            report.damaged.append(
                SegmentDamage(
                    segment: name, frame: scan.entries.count, offset: scan.validEnd,
                    message: "segment \(name) has no valid footer after byte \(scan.validEnd)"))
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
            compareRows(name: name, row: row, scan: scan, report: &report)
            return
        }
        // A damaged sealed file is cut only by an explicit repair; until then the index holds its valid frames.
        if !isPartial && needsCut && mode != .repair {
            try reconcileRows(fileName: name, header: header, row: row, scan: scan, report: &report)
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
            report.repaired.append(
                "sealed segment \(name) as \(finalName) with \(scan.entries.count) frames (cut at byte \(scan.validEnd))"
            )
        }
        try reconcileRows(fileName: finalName, header: header, row: row, scan: scan, mode: mode, report: &report)
    }

    /// Dry run: says how the index differs from the file.
    private func compareRows(
        name: String, row: SegmentRow?, scan: SegmentFileReader.ScanResult, report: inout VerifyReport
    ) {
        guard let row else {
            report.problems.append("segment \(name) (\(scan.entries.count) frames) has no index row")
            return
        }
        if row.frameCount != scan.entries.count {
            report.problems.append(
                "index has \(row.frameCount) frames for segment \(name), the file \(scan.entries.count)")
        }
    }

    /// Makes the index rows of one (sealed) file match it.
    private func reconcileRows(
        fileName: String, header: SegmentHeader, row: SegmentRow?, scan: SegmentFileReader.ScanResult,
        mode: ReconcileMode = .recover, report: inout VerifyReport
    ) throws {
        var row = row
        if let existing = row,
            existing.frameCount > scan.entries.count
                || existing.state != .open
                    && existing.frameCount != scan.entries.count
        {
            // Rows the file does not back (or a sealed row that disagrees): rebuild from the file.
            try index.removeSegment(id: existing.id)
            row = nil
        }
        let segmentID: Int64
        let firstMissing: Int
        if let row {
            segmentID = row.id
            firstMissing = row.frameCount
            if firstMissing == scan.entries.count && row.state == .sealed && row.fileName == fileName { return }
        } else {
            let stream = try index.stream(named: header.streamName, description: header.stream)
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
                report.repaired.append("added \(missing.count) index rows for segment \(fileName) from its file")
            } catch StoreIndexError.duplicatePTS where mode == .repair && firstMissing == 0 {
                // A later recording that started the stream's clock again: its frames go after the stream's.
                if try continueAfterStream(
                    fileName: fileName, header: header, scan: scan, segmentID: segmentID, report: &report)
                {
                    return
                }
            } catch {
                report.problems.append("could not index segment \(fileName): \(error)")
            }
        }
        try index.sealSegment(id: segmentID, fileName: fileName, sealedWallNanoseconds: options.now())
    }
}
