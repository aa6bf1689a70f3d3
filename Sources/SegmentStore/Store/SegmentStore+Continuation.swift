import RewindCore
import RewindSQLite
import RewindSystem

extension SegmentStore {
    /// Repairs a segment file whose frames the index cannot take because its stream already holds frames at their
    /// pts: a later recording that started the stream's clock again (older builds did, and failed on the first
    /// duplicate). Its frames are decoded and written after the stream's newest frame — where a recording now
    /// continues a stream — with a ``LossReason/recorderStopped`` gap before them, made durable, and only then is
    /// the file (and its row, which holds no frame) removed. A file whose every frame the stream already holds at
    /// the same pts, capture time and size is a copy of one of its segments, not a recording: it is moved aside as
    /// `NAME.duplicate` (which the store ignores and nothing deletes), out of the index.
    ///
    /// - Parameters:
    ///   - fileName: the sealed file, in `segments/`.
    ///   - header: its header.
    ///   - scan: its valid records.
    ///   - segmentID: its index row, if any.
    ///   - report: receives what was done, or why not.
    /// - Returns: whether the file was moved.
    /// - Throws: I/O and index errors before anything was written.
    func continueAfterStream(
        fileName: String, header: SegmentHeader, scan: SegmentFileReader.ScanResult, segmentID: Int64?,
        report: inout VerifyReport
    ) throws -> Bool {
        guard let first = scan.entries.first, let last = scan.entries.last else { return false }
        if try isCopyOfIndexedFrames(
            scan, streamName: header.streamName, pts: first.ptsNanoseconds...last.ptsNanoseconds)
        {
            let aside = try moveAside(fileName, as: "duplicate")
            if let segmentID { try index.removeSegment(id: segmentID) }
            report.repaired.append(
                "moved segments/\(fileName) aside as \(aside): its \(Self.frames(scan.entries.count)) repeat frames "
                    + "stream '\(header.streamName)' holds at the same pts, capture times and sizes (a copy of one of "
                    + "its segments); nothing is lost")
            report.segments -= 1
            return true
        }
        guard let writer = try makeWriterIfIdle(streamName: header.streamName, stream: header.stream) else {
            report.problems.append(
                "segment \(fileName) was not repaired: stream '\(header.streamName)' has an open writer; "
                    + "stop recording and run 'rewind verify --repair' again")
            return false
        }
        let path = segmentsDirectory + "/" + fileName
        let streamID = writer.stream.id
        let duration = max(1, header.stream.frameDuration.nanoseconds ?? 1)
        let newest = try continuesAfter(writer.stream, frameStep: duration)
        let start = (newest.map { $0 + duration } ?? first.ptsNanoseconds)
        let offset = start - first.ptsNanoseconds
        do {
            let reader = try SegmentFileReader(path: path, fileSystem: fileSystem)
            defer { reader.close() }
            let decoder = FrameDecoder(layout: header.stream.layout, chunkSize: header.chunkSize)
            for (number, entry) in scan.entries.enumerated() {
                let (record, payload) = try reader.readRecord(at: entry.offset, frame: number, verifyPayload: true)
                try decoder.decode(payload, expectedCRC: record.storedCRC, hasPrevious: number > 0)
                let info = try FrameInfo(
                    pts: FrameTime(nanoseconds: entry.ptsNanoseconds + offset), wallNanoseconds: entry.wallNanoseconds,
                    color: header.stream.color)
                try writer.append(FrameView(layout: header.stream.layout, info: info, bytes: decoder.frame))
            }
            try writer.close()
        } catch {
            try? writer.close()
            report.problems.append(
                "could not move the frames of segment \(fileName) after the stream's newest frame (\(error)); the "
                    + "file is left as it is: run 'rewind verify --repair' again")
            return false
        }
        if let newest {
            try index.recordGap(
                GapRow(streamID: streamID, startNanoseconds: newest, endNanoseconds: start, reason: .recorderStopped))
        }
        try Self.wrapIO { () throws(FileSystemError) in
            try fileSystem.unlink(path)
            try fileSystem.syncDirectory(segmentsDirectory)
        }
        if let segmentID { try index.removeSegment(id: segmentID) }
        // Gaps that recording left among the stream's frames (its failed writes, at the pts it repeated) are
        // contradicted by the frames there: a gap holds none.
        for gap in try index.gaps(streamID: streamID)
        where gap.reason.isLoss && gap.endNanoseconds > gap.startNanoseconds + 1 {
            var holdsFrame = false
            try index.frames(streamID: streamID, in: (gap.startNanoseconds + 1)..<gap.endNanoseconds) { _ in
                holdsFrame = true
                return false
            }
            guard holdsFrame else { continue }
            try index.removeGap(gap)
            report.repaired.append(
                "removed the '\(gap.reason.rawValue)' gap \(gap.startNanoseconds)…\(gap.endNanoseconds) ns of stream "
                    + "'\(header.streamName)': the stream holds frames inside it")
        }
        report.repaired.append(
            "moved the \(scan.entries.count) frames of segment \(fileName), which repeated pts stream "
                + "'\(header.streamName)' already holds (a later recording that started its clock again), after the "
                + "stream's newest frame into \(writer.sealedFileNames.joined(separator: ", ")) (pts shifted by "
                + "\(offset) ns, a 'recorder stopped' gap before them), and removed the file")
        return true
    }

    /// Whether the stream already holds every frame of `scan` at the same pts, capture time and stored size.
    private func isCopyOfIndexedFrames(
        _ scan: SegmentFileReader.ScanResult, streamName: String, pts: ClosedRange<Int64>
    ) throws -> Bool {
        guard let stream = try index.stream(named: streamName) else { return false }
        var indexed: [Int64: FrameRow] = [:]
        try index.frames(streamID: stream.id, in: pts.lowerBound..<pts.upperBound.addingSaturating(1)) { row in
            indexed[row.ptsNanoseconds] = row
            return true
        }
        return scan.entries.allSatisfy { entry in
            guard let row = indexed[entry.ptsNanoseconds] else { return false }
            return row.wallNanoseconds == entry.wallNanoseconds && row.storedLength == entry.storedLength
        }
    }
}
