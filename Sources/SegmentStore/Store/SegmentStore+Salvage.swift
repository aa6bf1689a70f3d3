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
        // The pts the index has for the file's frames, read before a repair removes the rows after the damage: they
        // tell what was lost where the file no longer can (a file cut short).
        let indexPTS = try segmentID.map { try index.frames(ofSegment: $0).map(\.ptsNanoseconds) } ?? []
        // A torn `.partial` with nothing after its tear, and no frame the index had there, has nothing to salvage
        // and nothing known lost.
        if isPartial && tail.records.isEmpty && indexPTS.count <= scan.entries.count { return salvage }

        var writer: StreamWriter?
        // The first pts whose index row a repair removes (the file's rows after its last valid frame).
        let firstDropped = scan.entries.last.map { $0.ptsNanoseconds + 1 } ?? Int64.min
        if write {
            guard let made = try makeWriterIfIdle(streamName: header.streamName, stream: header.stream) else {
                report.problems.append(
                    "segment \(name) was not repaired: stream '\(header.streamName)' has an open writer; "
                        + "stop recording and run 'rewind verify --repair' again")
                return nil
            }
            writer = made
            if let segmentID {
                // A process killed from here on leaves the index without the rows past the damage and the salvage
                // unfinished: a `damaged` gap over those rows first (trimmed around the frames salvaged, once they
                // are), and a note of the unfinished repair that `info`, clips and saves report until one finishes.
                let dropped = indexPTS.filter { $0 >= firstDropped }
                if let first = dropped.min(), let last = dropped.max() {
                    try index.setInfo(Self.unfinishedRepairKey, to: name)
                    try recordDamagedGap(
                        streamID: made.stream.id, over: first...last,
                        frameDuration: max(header.stream.frameDuration.nanoseconds ?? 1, 1))
                }
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
            if write { try? index.setInfo(Self.unfinishedRepairKey, to: "") }
            // What it stored before it stopped, as the index holds it now.
            let salvagedPTS =
                writer.map { writer in
                    usable.map(\.entry.ptsNanoseconds).filter {
                        (try? hasFrame(streamID: writer.stream.id, pts: $0)) == true
                    }
                } ?? []
            // A `damaged` gap recorded before (when the store was opened) covers those too: it keeps its parts
            // around them (a clip of them said their frames were lost).
            if let writer, let first = salvagedPTS.first, let last = salvagedPTS.last {
                try? trimDamagedGaps(
                    streamID: writer.stream.id, around: first...last, frameDuration: header.stream.frameDuration)
            }
            // The rows past the damage are gone and the file keeps its frames: as after an open that let go of
            // them, a `damaged` gap says where they are missing until a repair salvages them.
            var missing = ""
            if let writer,
                let count = try? recordLostFrames(
                    streamID: writer.stream.id, lost: indexPTS.filter { $0 >= firstDropped }), count > 0
            {
                missing =
                    "; the index leaves out its \(Self.frames(count)) from the damage on (a 'damaged' gap) until then"
            }
            // What it stored before it stopped stays (sealed by the close, or found by the next open): reported
            // with the failure, as the frames the index holds now.
            var stopped = salvage
            stopped.usableFrames = usable.count
            stopped.salvagedInto = writer?.sealedFileNames ?? []
            stopped.salvagedFrames = salvagedPTS.count - salvage.alreadyStoredFrames
            stopped.failure = "\(error)"
            report.salvage.append(stopped)
            let kept =
                stopped.salvagedFrames > 0
                ? "; the \(Self.frames(stopped.salvagedFrames)) salvaged before it stopped stay stored" : ""
            report.problems.append(
                "could not salvage the frames after the damage in segment \(name) (\(error)); the file is left as it "
                    + "is: free space or fix the error, then run 'rewind verify --repair' again" + missing + kept)
            return nil
        }
        salvage.usableFrames = usable.count
        salvage.salvagedInto = writer?.sealedFileNames ?? []
        let (lost, lostPTS) = try lostFrames(reader: reader, scan: scan, tail: tail, usable: usable, indexPTS: indexPTS)
        salvage.lost = lost
        // Stretches whose pts nothing tells any more, in a file with nothing valid after its damage (cut short), inside
        // a `damaged` gap already recorded: an earlier open let go of their index rows and counted them then. (A file
        // with valid records after the damage was kept whole by the open, which counted nothing: the salvage counts
        // what it cannot save.) A stretch lies between the frames before and after it, or, where no frame of the file
        // tells (a file damaged in its first record), between the stream's segments before and after the file.
        let streamID =
            try segmentID.flatMap({ try index.segment(id: $0) })?.streamID
            ?? index.stream(named: header.streamName)?.id
        if let streamID, tail.records.isEmpty,
            salvage.lost.contains(where: { $0.firstPTS == nil && $0.lastPTS == nil })
        {
            let neighbours = try neighbouringSegments(of: header.sequence, streamID: streamID)
            for (number, stretch) in salvage.lost.enumerated()
            where stretch.firstPTS == nil && stretch.lastPTS == nil {
                let after = stretch.previousPTS ?? neighbours.lastPTSBefore ?? Int64.min
                let before = stretch.nextPTS ?? neighbours.firstPTSAfter ?? Int64.max
                guard after < before, after > Int64.min || before < Int64.max else { continue }
                let range = (after == Int64.min ? after : after + 1)..<before
                salvage.lost[number].countedBefore = try index.gaps(streamID: streamID, overlapping: range)
                    .contains { $0.reason == .damaged }
            }
        }

        if let writer {
            // A `damaged` gap recorded before the salvage (when the store was opened and its index let go of the
            // frames past the damage) covers the frames just salvaged too: it keeps only its part before them, and
            // after them where more than a frame is missing; the lost stretches get their own gaps below.
            if let first = usable.first?.entry.ptsNanoseconds, let last = usable.last?.entry.ptsNanoseconds {
                try trimDamagedGaps(
                    streamID: writer.stream.id, around: first...last, frameDuration: header.stream.frameDuration)
            }
            try recordLostFrames(streamID: writer.stream.id, lost: lostPTS)
            // Stretches whose pts nothing tells any more: from the frame before to the frame after.
            let duration = header.stream.frameDuration.nanoseconds ?? 0
            for lost in salvage.lost where lost.firstPTS == nil && lost.lastPTS == nil && !lost.countedBefore {
                guard let start = lost.previousPTS ?? lost.nextPTS else { continue }
                try recordDamagedGap(
                    streamID: writer.stream.id, start, lost.nextPTS ?? start + duration * Int64(lost.count))
            }
            try index.setInfo(Self.unfinishedRepairKey, to: "")
        }
        return salvage
    }

    /// The `store_info` key naming the segment a repair is salvaging, until it is done (empty when none is).
    static let unfinishedRepairKey = "unfinished_repair_segment"

    /// The segment file (name in `segments/`) whose salvage a repair began and did not finish: the process was
    /// killed, so the index leaves out the frames past its damage that were not salvaged yet (a `damaged` gap covers
    /// them) until `rewind verify --repair` runs again. Nil when none.
    ///
    /// - Throws: index errors.
    public func unfinishedRepair() throws -> String? {
        guard let name = try index.info(Self.unfinishedRepairKey), !name.isEmpty else { return nil }
        return name
    }

    /// Cuts the stream's `damaged` gaps out of `frames` (pts of frames the index holds again: salvaged, or indexed
    /// again from a file that came back): each keeps its part before them and its part after them only where a
    /// frame is missing there (more than a frame and a half from its bound to theirs; pts on a grid of 1/30 s are
    /// not exactly a frame apart).
    func trimDamagedGaps(streamID: Int64, around frames: ClosedRange<Int64>, frameDuration: FrameTime) throws {
        let (first, last) = (frames.lowerBound, frames.upperBound)
        let duration = max(1, frameDuration.nanoseconds ?? 1)
        for gap in try index.gaps(streamID: streamID, overlapping: first..<(last + 1)) where gap.reason == .damaged {
            try index.removeGap(gap)
            let oneAndAHalf = duration + duration / 2
            if first - gap.startNanoseconds > oneAndAHalf {
                try index.recordGap(
                    GapRow(
                        streamID: gap.streamID, startNanoseconds: gap.startNanoseconds, endNanoseconds: first,
                        reason: .damaged))
            }
            if gap.endNanoseconds - last > oneAndAHalf {
                try index.recordGap(
                    GapRow(
                        streamID: gap.streamID, startNanoseconds: last, endNanoseconds: gap.endNanoseconds,
                        reason: .damaged))
            }
        }
    }

    /// The newest frame of the stream's segments numbered before `sequence`, and the oldest of those numbered after
    /// it: where the frames of segment `sequence` lie in time when nothing else tells.
    private func neighbouringSegments(of sequence: UInt64, streamID: Int64) throws -> (
        lastPTSBefore: Int64?, firstPTSAfter: Int64?
    ) {
        var before: (sequence: UInt64, pts: Int64)?
        var after: (sequence: UInt64, pts: Int64)?
        for segment in try index.segments(streamID: streamID) {
            guard let number = SegmentFormat.sequence(ofFileName: segment.fileName), number != sequence else {
                continue
            }
            if number < sequence, let last = segment.lastPTS, number > before?.sequence ?? 0 {
                before = (number, last)
            }
            if number > sequence, let first = segment.firstPTS, number < after?.sequence ?? .max {
                after = (number, first)
            }
        }
        return (before?.pts, after?.pts)
    }

    /// The lost stretches: frame numbers missing between the kept and usable frames, and after the last of them;
    /// and the pts of every lost frame whose pts is known.
    ///
    /// - Parameter indexPTS: the pts of the file's frames in the index, in order: used where the file no longer
    ///   tells (its footer and records gone), when the index agrees with the file's kept frames.
    private func lostFrames(
        reader: SegmentFileReader, scan: SegmentFileReader.ScanResult, tail: SegmentFileReader.TailScan,
        usable: [SegmentFileReader.FoundRecord], indexPTS: [Int64]
    ) throws -> (stretches: [SegmentSalvage.LostFrames], pts: [Int64]) {
        // Every pts the file still tells: its footer (when intact) and every valid record; then the index's.
        let footer = try? reader.readFooter()
        var knownPTS: [Int: Int64] = [:]
        let indexAgrees =
            indexPTS.count >= scan.entries.count
            && zip(indexPTS, scan.entries).allSatisfy { $0 == $1.ptsNanoseconds }
        if indexAgrees { for (number, pts) in indexPTS.enumerated() { knownPTS[number] = pts } }
        for (number, entry) in (footer ?? []).enumerated() { knownPTS[number] = entry.ptsNanoseconds }
        for (number, entry) in scan.entries.enumerated() { knownPTS[number] = entry.ptsNanoseconds }
        for found in tail.records { knownPTS[found.frameNumber] = found.entry.ptsNanoseconds }
        // How many frames the file held: its footer says; else every record seen, and the damaged one unless the
        // damage is the footer itself; at least as many as the index had.
        let damagedIsRecord = try !reader.isFooter(at: scan.validEnd)
        let total = max(
            footer?.count
                ?? max((tail.records.last?.frameNumber ?? -1) + 1, scan.entries.count + (damagedIsRecord ? 1 : 0)),
            indexAgrees ? indexPTS.count : 0)

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
        let pts = lost.flatMap { stretch in
            (stretch.firstFrame..<stretch.firstFrame + stretch.count).compactMap { knownPTS[$0] }
        }
        return (lost, pts)
    }

    /// Records a `damaged` gap over each stretch of `lost` pts that the stream no longer has: from the stream's frame
    /// before the stretch to the one after it (one frame duration past the stretch's last pts when none follows). A
    /// `damaged` gap already recorded across that span (an earlier repair's) is merged into it.
    ///
    /// - Returns: how many of `lost` the stream no longer has.
    @discardableResult
    func recordLostFrames(streamID: Int64, lost: [Int64]) throws -> Int {
        var missing: [Int64] = []
        for pts in Set(lost).sorted() where try !hasFrame(streamID: streamID, pts: pts) { missing.append(pts) }
        guard !missing.isEmpty else { return 0 }
        let stream = try index.streams().first { $0.id == streamID }
        let duration = max(stream?.description.frameDuration.nanoseconds ?? 1, 1)
        var i = 0
        while i < missing.count {
            let first = missing[i]
            let previous = try index.framePTS(streamID: streamID, .before, first)
            let next = try index.framePTS(streamID: streamID, .after, first)
            var last = first
            while i < missing.count, next.map({ missing[i] < $0 }) ?? true {
                last = missing[i]
                i += 1
            }
            try recordDamagedGap(
                streamID: streamID, previous ?? first,
                Self.damagedGapEnd(last: last, next: next, frameDuration: duration))
        }
        return missing.count
    }

    /// Records a `damaged` gap over the frames whose pts lie in `frames`, as ``recordLostFrames`` does for a run of
    /// lost frames: from the frame before them (or the first) to ``damagedGapEnd(last:next:frameDuration:)``.
    private func recordDamagedGap(streamID: Int64, over frames: ClosedRange<Int64>, frameDuration: Int64) throws {
        let previous = try index.framePTS(streamID: streamID, .before, frames.lowerBound)
        let next = try index.framePTS(streamID: streamID, .after, frames.upperBound)
        try recordDamagedGap(
            streamID: streamID, previous ?? frames.lowerBound,
            Self.damagedGapEnd(last: frames.upperBound, next: next, frameDuration: frameDuration))
    }

    /// Where a `damaged` gap over lost frames up to `last` ends: at the stream's `next` frame, or one frame past the
    /// last lost one where the next frame is further (a later recording's, after time the recorder was stopped).
    private static func damagedGapEnd(last: Int64, next: Int64?, frameDuration: Int64) -> Int64 {
        next.map { $0 - last <= 2 * frameDuration ? $0 : last + frameDuration } ?? last + frameDuration
    }

    /// Records a `damaged` gap `[start, end)`, merged with the stream's `damaged` gaps it overlaps.
    private func recordDamagedGap(streamID: Int64, _ start: Int64, _ end: Int64) throws {
        var (start, end) = (start, max(end, start))
        for gap in try index.gaps(streamID: streamID, overlapping: start..<max(end, start + 1))
        where gap.reason == .damaged {
            start = min(start, gap.startNanoseconds)
            end = max(end, gap.endNanoseconds)
            try index.removeGap(gap)
        }
        try index.recordGap(GapRow(streamID: streamID, startNanoseconds: start, endNanoseconds: end, reason: .damaged))
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
        let counted = lost.filter(\.countedBefore)
        let new = lost.filter { !$0.countedBefore }
        let newCount = lostFrameCount
        if !new.isEmpty || counted.isEmpty {
            let frames = SegmentStore.frames(newCount)
            line += dryRun ? "; it would lose \(frames)" : "; lost \(frames)"
            if !new.isEmpty { line += ": " + new.map(\.summary).joined(separator: ", ") }
        }
        for stretch in counted {
            line +=
                "; the frames from \(stretch.firstFrame) on were counted lost already (a 'damaged' gap "
                + (stretch.previousPTS.map { "after pts \($0) ns)" } ?? "where the index had them)")
        }
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
