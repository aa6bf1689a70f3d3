import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindTesting
import SegmentStore

extension SoakRun {
    /// Fills the report from what the run, the read-back and the memory monitor found, and judges each invariant.
    mutating func summarize(_ readback: Readback, _ findings: MemoryMonitor.Findings) throws {
        let statistics = recorder.statistics
        let configuration = self.configuration
        report.budgetBytes = configuration.memoryBudget
        report.limitBytes = configuration.memoryLimit
        report.criticalBudgetBytes = recorder.memoryBudget(under: .critical)
        report.maxRSSBytes = findings.maxRSS
        report.maxRSSWallNanoseconds = findings.maxRSSWall
        report.sampleCount = findings.sampleCount
        report.samples = findings.samples.map {
            SoakReport.Sample(
                wallNanoseconds: $0.wall, streamNanoseconds: $0.stream, rssBytes: $0.rss, ringBytes: $0.ring,
                isRecording: $0.isRecording)
        }
        for (index, outcome) in findings.pressure where index < report.events.count {
            report.events[index].shedNanoseconds = outcome.shedAfter
        }
        report.framesDurable = statistics.framesDurable
        report.drops = statistics.drops
        if report.lastError == nil { report.lastError = statistics.lastError }
        // With the gaps retention deleted after the read-back passed them: their losses were counted all the same.
        let gaps = readback.gaps(with: try store.gaps(streamName: streamRow.name))
        for gap in gaps { report.gaps[gap.reason, default: 0] += 1 }
        let summary = try store.summary(streamName: streamRow.name)
        report.segments = summary.segments
        report.rawBytes = summary.rawBytes
        report.storedBytes = summary.storedBytes
        report.framesVerified = readback.framesVerified
        report.copiesVerifiedFromDisk = readback.copiesFromDisk
        report.copiesVerifiedFromMemory = readback.copiesFromMemory
        report.corruptFrames = readback.corruptCopies
        report.problems += readback.problems
        account(readback, gaps: gaps)
        measureSlope()

        report.invariants = [
            rssWithinLimit(findings), rssShedAfterPressure(findings), framesBitExact(readback), noFramesLost(),
            rssFlat(),
        ]
    }

    // MARK: Frames

    /// Accounts for every accepted frame that was not read back: a copy was damaged (counted as corrupt), or it
    /// was lost after acceptance — a failed write or an eviction before its write, counted by the recorder and
    /// covered by a gap with that reason (in the store, or seen by a read-back pass before retention deleted it; or
    /// before the first frame the store ever held). Anything else is lost.
    private mutating func account(_ readback: Readback, gaps: [GapRow]) {
        let lossReasons = LossReason.allCases.filter(\.isLossOfAcceptedFrames)
        let lossGaps = gaps.filter(\.reason.isLossOfAcceptedFrames).sorted {
            $0.startNanoseconds < $1.startNanoseconds
        }
        let counted = lossReasons.reduce(0) { $0 + (report.drops[$1] ?? 0) }
        let firstOnDisk = readback.firstDiskPTS ?? .max
        var covered = 0
        var coveredByDiskErrors = 0
        var uncovered = 0
        var gapIndex = 0
        let frameDuration = configuration.frameDuration
        var problems: [String] = []
        accepted.forEach(notIn: readback.verified) { index in
            guard !readback.damaged[index] else { return }
            let pts = FrameTime.frame(Int64(index), duration: frameDuration)!.nanoseconds!
            while gapIndex < lossGaps.count && lossGaps[gapIndex].endNanoseconds <= pts { gapIndex += 1 }
            let inGap =
                gapIndex < lossGaps.count && lossGaps[gapIndex].startNanoseconds < pts
                && pts < lossGaps[gapIndex].endNanoseconds
            if pts < firstOnDisk || inGap {
                covered += 1
                if inGap && lossGaps[gapIndex].reason == .diskError { coveredByDiskErrors += 1 }
            } else {
                uncovered += 1
                if problems.count < Readback.maximumProblems {
                    problems.append(
                        "frame \(index) (pts \(formatSeconds(pts))) was accepted but is neither in the store nor in "
                            + "memory, and no counted loss covers it")
                }
            }
        }
        report.problems += problems
        // Disk errors are an expected loss only where a `disk=full` event made them: else the disk itself failed, and
        // the frames they cost are lost, counted or not.
        let injected = configuration.events.contains { $0.action == .disk(.full) }
        let expected = min(covered, counted)
        let failedDisk = injected ? 0 : min(expected, coveredByDiskErrors)
        report.framesLostToDiskFailure = failedDisk
        report.framesLostToCountedDrops = expected - failedDisk
        report.framesLost = uncovered + max(0, covered - counted) + failedDisk
        if covered > counted {
            report.problems.append(
                "\(covered) accepted frames are missing where losses were recorded, but only \(counted) were counted")
        }
    }

    // MARK: Memory trend

    /// The slope of the resident size over wall-clock time, from the samples taken while recording after warm-up.
    ///
    /// Memory pressure legitimately moves the ring's size, and so does a camera speeding up again after a thermal
    /// slowdown when the window, not the budget, limits the ring (it refills at the faster rate; slower frames and
    /// disk events leave its slabs mapped). The samples form one stretch per such change, each starting once the ring
    /// has turned over after it (refilled, or shed and settled); the slope is fitted with one intercept per stretch.
    private mutating func measureSlope() {
        let frameNanoseconds = configuration.frameDuration.nanoseconds ?? 1
        let slab = (configuration.layout.byteCount + 4095) / 4096 * 4096
        let framesInBudget = Int64(max(1, configuration.memoryBudget / slab))
        /// Stream time for the ring to hold only frames that arrived after a change, at one frame in `divisor`.
        func turnover(_ divisor: Int) -> Int64 {
            // Saturating: a budget of petabytes holds more frames than 64 bits of nanoseconds count.
            let (perFrame, over) = frameNanoseconds.multipliedReportingOverflow(by: Int64(divisor))
            let (time, overAll) = framesInBudget.multipliedReportingOverflow(by: perFrame)
            return over || overAll ? configuration.windowNanoseconds : min(configuration.windowNanoseconds, time)
        }
        // Warm-up: at least 1 s of stream time, and until the ring has filled at the rate the camera starts with.
        var divisor = 1
        for event in configuration.events where event.at == 0 {
            if case .thermal(let state) = event.action { divisor = state.frameDivisor }
        }
        let warmUp = max(1_000_000_000, turnover(divisor))
        var starts: [Int64] = [0]
        var settledAt: [Int64] = [warmUp]
        divisor = 1
        for event in configuration.events {
            switch event.action {
            case .thermal(let state):
                // A faster camera refills a ring its window limits (memory grows until it is full again): measure
                // afresh once it has turned over at the new rate.
                let faster = state.frameDivisor < divisor
                divisor = state.frameDivisor
                if faster {
                    starts.append(event.at)
                    settledAt.append(max(warmUp, event.at + turnover(divisor)))
                }
            case .pressure:
                starts.append(event.at)
                settledAt.append(max(warmUp, event.at + turnover(divisor)))
            case .disk:
                break
            }
        }
        var stretches = [[(x: Double, y: Double)]](repeating: [], count: starts.count)
        for sample in report.samples where sample.isRecording {
            let stretch = starts.lastIndex { $0 <= sample.streamNanoseconds } ?? 0
            guard sample.streamNanoseconds >= settledAt[stretch] else { continue }
            stretches[stretch].append((Double(sample.wallNanoseconds) / 1e9, Double(sample.rssBytes)))
        }
        report.slopeSampleCount = stretches.filter { $0.count >= 2 }.reduce(0) { $0 + $1.count }
        report.rssSlopeBytesPerSecond = MemoryTrend.slope(stretches)
        let measured = stretches.filter { $0.count >= 2 }.reduce(0.0) { $0 + ($1.last!.x - $1.first!.x) }
        report.rssSlopeLimitBytesPerSecond = Self.slopeLimit(measuredSeconds: measured)
    }

    /// The largest slope accepted as flat, bytes per second: growth that, kept up for as long again as the run was
    /// measured, would use up the whole 48 MiB allowance. Memory that levels off (caches filling up) passes as
    /// runs get longer; memory that keeps growing fails, and the longer the run, the smaller the leak it catches.
    static func slopeLimit(measuredSeconds: Double) -> Double {
        Double(SoakConfiguration.processAllowance) / max(measuredSeconds, 1)
    }

    // MARK: Invariants

    private func rssWithinLimit(_ findings: MemoryMonitor.Findings) -> SoakReport.Invariant {
        let name = SoakInvariant.rssWithinLimit.rawValue
        let limit = "limit \(formatBytes(Int64(report.limitBytes))) (\(configuration.memoryLimitTerms))"
        guard findings.sampleCount > 0 else {
            return .init(name: name, passed: false, detail: "no sample: /proc/self/statm could not be read")
        }
        guard let first = findings.firstOverLimit else {
            return .init(
                name: name, passed: true,
                detail:
                    "max RSS \(formatBytes(Int64(findings.maxRSS))) ≤ \(limit) in all \(findings.sampleCount) samples")
        }
        return .init(
            name: name, passed: false,
            detail: "\(findings.samplesOverLimit) of \(findings.sampleCount) samples above the \(limit); the first at "
                + "\(formatSeconds(first.wall)): \(formatBytes(Int64(first.rss))); max \(formatBytes(Int64(findings.maxRSS)))"
        )
    }

    private func rssShedAfterPressure(_ findings: MemoryMonitor.Findings) -> SoakReport.Invariant {
        let name = SoakInvariant.rssShedAfterPressure.rawValue
        var lines: [String] = []
        var passed = true
        for index in findings.pressure.keys.sorted() where index < report.events.count {
            let outcome = findings.pressure[index]!
            let event = report.events[index]
            let what = "\(SoakEvent.formatTime(event.at)):\(event.event)"
            let limit = formatBytes(Int64(outcome.limit))
            if let violation = outcome.violation {
                passed = false
                let after = formatSeconds(violation.wall - event.wallNanoseconds)
                let (rss, over) = formatBytesApart(Int64(violation.rss), Int64(outcome.limit))
                lines.append(
                    outcome.shedAfter == nil
                        ? "\(what): RSS \(rss) still above \(over) \(after) after it"
                        : "\(what): RSS rose to \(rss), above \(over), \(after) after it")
            } else if let shed = outcome.shedAfter {
                lines.append("\(what): RSS ≤ \(limit) \(formatMilliseconds(shed)) after it, and stayed there")
            } else {
                lines.append("\(what): not measured (the next pressure change came within 1 s)")
            }
        }
        if lines.isEmpty { lines.append("no pressure cut in this run") }
        return .init(name: name, passed: passed, detail: lines.joined(separator: "; "))
    }

    private func framesBitExact(_ readback: Readback) -> SoakReport.Invariant {
        let copies = readback.copiesFromDisk + readback.copiesFromMemory
        // A run that read nothing back checked nothing: it does not pass, unless it was stopped before its first
        // frame was read back (then it is a stopped run, as any other).
        guard copies + readback.corruptCopies > 0 else {
            let stopped = report.endReason == .stopped
            return .init(
                name: SoakInvariant.framesBitExact.rawValue, passed: stopped,
                detail: "no frame was read back (\(report.framesAccepted) accepted, \(report.framesDurable) durable): "
                    + "nothing was checked" + (stopped ? " before the run was stopped" : ""))
        }
        let detail =
            readback.corruptCopies == 0
            ? "\(copies) copies read back (\(readback.copiesFromDisk) from disk, \(readback.copiesFromMemory) from "
                + "memory), all bit-exact"
            : "\(readback.corruptCopies) \(readback.corruptCopies == 1 ? "copy" : "copies") not bit-exact or unreadable "
                + "(of \(copies + readback.corruptCopies)); "
                + (readback.problems.first ?? "")
        return .init(name: SoakInvariant.framesBitExact.rawValue, passed: readback.corruptCopies == 0, detail: detail)
    }

    private func noFramesLost() -> SoakReport.Invariant {
        let losses = [LossReason.diskError, .evictedBeforeSpill].compactMap { reason in
            report.drops[reason].map { "\(reason.rawValue): \($0)" }
        }
        var detail =
            "\(report.framesAccepted) frame\(report.framesAccepted == 1 ? "" : "s") accepted, "
            + "\(report.framesVerified) read back bit-exact, "
            + "\(report.framesLostToCountedDrops) missing where counted losses were recorded"
        if !losses.isEmpty { detail += " (\(losses.joined(separator: ", ")))" }
        if report.framesLost > 0 { detail += "; \(report.framesLost) lost" }
        // Disk errors are an expected loss only where a `disk=full` event made them: else the disk itself failed.
        let injected = configuration.events.contains { $0.action == .disk(.full) }
        let realDiskErrors = injected ? 0 : report.drops[.diskError] ?? 0
        if realDiskErrors > 0 {
            detail +=
                " (\(report.framesLostToDiskFailure) of them to the disk: \(realDiskErrors) disk errors counted that no "
                + "disk=full event made"
                + (report.framesLostToDiskFailure < realDiskErrors ? ", the other frames read back from memory" : "")
                + ")" + (report.lastError.map { " (\($0))" } ?? "")
        }
        return .init(
            name: SoakInvariant.noFramesLost.rawValue, passed: report.framesLost == 0 && realDiskErrors == 0,
            detail: detail)
    }

    private func rssFlat() -> SoakReport.Invariant {
        let name = SoakInvariant.rssFlat.rawValue
        let limit = "\(formatRate(report.rssSlopeLimitBytesPerSecond))"
        guard let slope = report.rssSlopeBytesPerSecond else {
            return .init(
                name: name, passed: true,
                detail: "not measured: too few samples after warm-up and after each event (run longer)")
        }
        return .init(
            name: name, passed: slope < report.rssSlopeLimitBytesPerSecond,
            detail: "slope \(formatRate(slope)) over \(report.slopeSampleCount) samples; limit \(limit)")
    }

    private func formatRate(_ bytesPerSecond: Double) -> String {
        let sign = bytesPerSecond < 0 ? "-" : ""
        return sign + formatBytes(Int64(abs(bytesPerSecond).rounded())) + "/s"
    }

    private func formatMilliseconds(_ nanoseconds: Int64) -> String {
        String(format: "%.1f ms", Double(nanoseconds) / 1e6)
    }
}
