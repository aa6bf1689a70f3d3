import RewindCore
import RewindSQLite
import RewindSystem

extension SegmentStore {
    /// Finds the usable frames after the damage in a segment file and, for a repair, writes them into new segments.
    ///
    /// Past each damaged spot, frames are usable from the next key frame on; each is read with every check and
    /// decoded. A repair first removes the file's index rows after its last valid frame, then appends the usable
    /// frames through a ``StreamWriter`` (new segments, their own footers and index rows), skipping pts the index
    /// already holds (frames salvaged by a repair that stopped before its cut), and closes it, so they are durable
    /// before the caller cuts the damaged file. Then it records a `damaged` gap over each lost stretch (once).
    ///
    /// - Parameters:
    ///   - reader: the damaged file, open.
    ///   - scan: its scan, which stopped at the first damage.
    ///   - segmentID: its index row, if any.
    ///   - write: false for a dry run that changes nothing.
    ///   - report: receives the further damaged spots, and a problem when nothing can be salvaged now.
    /// - Returns: what was found and done; nil when a repair could not salvage (the file must then not be cut).
    /// - Throws: I/O and index errors before anything was written.
    func salvageTail(
        reader: SegmentFileReader, scan: SegmentFileReader.ScanResult, segmentID: Int64?, write: Bool,
        report: inout VerifyReport
    ) throws -> SegmentSalvage? {
        let name = reader.fileName
        let header = reader.header
        let isPartial = name.hasSuffix(SegmentFormat.partialSuffix)
        let tail = try reader.resynchronize(after: scan)
        for damage in tail.damage {
            if case .damaged(let file, let frame, let offset, _) = damage {
                report.damaged.append(SegmentDamage(segment: file, frame: frame, offset: offset, message: "\(damage)"))
            }
        }
        var salvage = SegmentSalvage(segment: name, keptFrames: scan.entries.count)
        // A torn `.partial` with nothing after its tear has nothing to salvage and nothing known lost.
        if isPartial && tail.records.isEmpty { return salvage }

        var writer: StreamWriter?
        if write {
            guard let made = try makeWriterIfIdle(streamName: header.streamName, stream: header.stream) else {
                report.problems.append(
                    "segment \(name) was not repaired: stream '\(header.streamName)' has an open writer; "
                        + "stop recording and run 'rewind verify --repair' again")
                return nil
            }
            writer = made
            if let segmentID {
                let firstDropped = scan.entries.last.map { $0.ptsNanoseconds + 1 } ?? Int64.min
                try index.removeFrames(ofSegment: segmentID, atOrAfter: firstDropped)
            }
        }

        let decoder = FrameDecoder(layout: header.stream.layout, chunkSize: header.chunkSize)
        var usable: [SegmentFileReader.FoundRecord] = []
        var chainEnd: Int?
        do {
            for found in tail.records {
                let continues = chainEnd.map { found.frameNumber == $0 + 1 } ?? false
                guard continues || found.entry.isKey else {
                    chainEnd = nil
                    continue
                }
                let (record, payload) = try reader.readRecord(
                    at: found.entry.offset, frame: found.frameNumber, verifyPayload: true)
                do {
                    try decoder.decode(payload, expectedCRC: record.storedCRC, hasPrevious: continues)
                } catch {
                    let damage = SegmentStoreError.damaged(
                        file: name, frame: found.frameNumber, offset: found.entry.offset, detail: error.description)
                    report.damaged.append(
                        SegmentDamage(
                            segment: name, frame: found.frameNumber, offset: found.entry.offset,
                            message: "\(damage)"))
                    chainEnd = nil
                    continue
                }
                chainEnd = found.frameNumber
                usable.append(found)
                guard let writer else { continue }
                let pts = found.entry.ptsNanoseconds
                if try hasFrame(streamID: writer.stream.id, pts: pts) {
                    salvage.alreadyStoredFrames += 1
                    continue
                }
                let info = try FrameInfo(
                    pts: FrameTime(nanoseconds: pts), wallNanoseconds: found.entry.wallNanoseconds,
                    color: header.stream.color)
                try writer.append(FrameView(layout: header.stream.layout, info: info, bytes: decoder.frame))
                salvage.salvagedFrames += 1
            }
            try writer?.close()
        } catch {
            try? writer?.close()
            report.problems.append(
                "could not salvage the frames after the damage in segment \(name) (\(error)); the file is left as it "
                    + "is: run 'rewind verify --repair' again")
            return nil
        }
        salvage.usableFrames = usable.count
        salvage.salvagedInto = writer?.sealedFileNames ?? []
        salvage.lost = try lostFrames(reader: reader, scan: scan, tail: tail, usable: usable)

        if let writer {
            let duration = header.stream.frameDuration.nanoseconds ?? 0
            let recorded = try index.gaps(streamID: writer.stream.id)
            for lost in salvage.lost {
                guard let start = lost.previousPTS ?? lost.firstPTS ?? lost.nextPTS else { continue }
                let end = lost.nextPTS ?? lost.lastPTS.map { $0 + duration } ?? start + duration * Int64(lost.count)
                let gap = GapRow(
                    streamID: writer.stream.id, startNanoseconds: start, endNanoseconds: end, reason: .damaged)
                if !recorded.contains(gap) { try index.recordGap(gap) }
            }
        }
        return salvage
    }

    /// The lost stretches: frame numbers missing between the kept and usable frames, and after the last of them.
    private func lostFrames(
        reader: SegmentFileReader, scan: SegmentFileReader.ScanResult, tail: SegmentFileReader.TailScan,
        usable: [SegmentFileReader.FoundRecord]
    ) throws -> [SegmentSalvage.LostFrames] {
        // Every pts the file still tells: its footer (when intact) and every valid record.
        let footer = try? reader.readFooter()
        var knownPTS: [Int: Int64] = [:]
        for (number, entry) in (footer ?? []).enumerated() { knownPTS[number] = entry.ptsNanoseconds }
        for (number, entry) in scan.entries.enumerated() { knownPTS[number] = entry.ptsNanoseconds }
        for found in tail.records { knownPTS[found.frameNumber] = found.entry.ptsNanoseconds }
        // How many frames the file held: its footer says; else every record seen, and the damaged one unless the
        // damage is the footer itself.
        let damagedIsRecord = try !reader.isFooter(at: scan.validEnd)
        let total =
            footer?.count
            ?? max((tail.records.last?.frameNumber ?? -1) + 1, scan.entries.count + (damagedIsRecord ? 1 : 0))

        var lost: [SegmentSalvage.LostFrames] = []
        var previous = scan.entries.count - 1
        var previousPTS = scan.entries.last?.ptsNanoseconds
        func addLost(upTo next: Int, nextPTS: Int64?) {
            guard next > previous + 1 else { return }
            lost.append(
                SegmentSalvage.LostFrames(
                    firstFrame: previous + 1, count: next - previous - 1, firstPTS: knownPTS[previous + 1],
                    lastPTS: knownPTS[next - 1], previousPTS: previousPTS, nextPTS: nextPTS))
        }
        for found in usable {
            addLost(upTo: found.frameNumber, nextPTS: found.entry.ptsNanoseconds)
            previous = found.frameNumber
            previousPTS = found.entry.ptsNanoseconds
        }
        addLost(upTo: total, nextPTS: nil)
        return lost
    }

    /// Whether the index holds a frame of the stream at `pts`.
    private func hasFrame(streamID: Int64, pts: Int64) throws -> Bool {
        var found = false
        try index.frames(streamID: streamID, in: pts..<(pts + 1)) { _ in
            found = true
            return false
        }
        return found
    }
}

extension SegmentSalvage {
    /// One line for a report: what was lost and what was (or would be) salvaged where.
    func summary(dryRun: Bool) -> String {
        var line: String
        if dryRun {
            line =
                "a repair would keep \(keptFrames) frames of segment \(segment) and salvage \(usableFrames) after "
                + "the damage"
        } else {
            line = "salvaged \(usableFrames) frames after the damage in segment \(segment)"
            if !salvagedInto.isEmpty {
                line += " (\(salvagedFrames) written into \(salvagedInto.joined(separator: ", ")))"
            }
            if alreadyStoredFrames > 0 { line += " (\(alreadyStoredFrames) were already stored by an earlier repair)" }
        }
        line += dryRun ? "; it would lose \(lostFrameCount) frames" : "; lost \(lostFrameCount) frames"
        if !lost.isEmpty { line += ": " + lost.map(\.summary).joined(separator: ", ") }
        return line
    }
}

extension SegmentSalvage.LostFrames {
    /// `frames 43…49 (pts 1433333333…1633333333 ns)`.
    var summary: String {
        let frames = count == 1 ? "frame \(firstFrame)" : "frames \(firstFrame)…\(lastFrame)"
        if let firstPTS, let lastPTS {
            return frames + (count == 1 ? " (pts \(firstPTS) ns)" : " (pts \(firstPTS)…\(lastPTS) ns)")
        }
        let after = previousPTS.map { "after pts \($0) ns" }
        let before = nextPTS.map { "before pts \($0) ns" }
        let bounds = [after, before].compactMap { $0 }
        return bounds.isEmpty ? frames : frames + " (" + bounds.joined(separator: ", ") + ")"
    }
}
