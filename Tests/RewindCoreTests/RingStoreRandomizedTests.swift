import RewindTesting
import Testing

@testable import RewindCore

@Suite struct RingStoreRandomizedTests {
    static func randomLayout(using rng: inout SplitMix64) -> FrameLayout {
        let format = PixelFormat.allCases.randomElement(using: &rng)!
        return layout(format, Int.random(in: 1...64, using: &rng), Int.random(in: 1...48, using: &rng))
    }

    static func isIntactAndOrdered(_ snapshot: RingSnapshot) -> Bool {
        var previous: (pts: Int64, sequence: UInt64)?
        for index in 0..<snapshot.count {
            let ok = snapshot.withFrame(at: index) { view, sequence in
                defer { previous = (view.info.ptsNanoseconds, sequence) }
                if let previous, previous.pts >= view.info.ptsNanoseconds || previous.sequence + 1 != sequence {
                    return false
                }
                return matchesPattern(view.bytes, seed: view.info.ptsNanoseconds)
            }
            if !ok { return false }
        }
        return true
    }

    @Test(arguments: [1, 2, 3, 42, 2026] as [UInt64])
    func randomRunsKeepEveryInvariant(seed: UInt64) throws {
        var rng = SplitMix64(seed: seed)
        let page = SlabPool.systemPageSize
        let budgetPages = Int.random(in: 8...64, using: &rng)
        let configuration = RingConfiguration(
            window: .nanoseconds(Int64.random(in: 50...2_000, using: &rng)), memoryBudget: budgetPages * page,
            minimumBudget: Int.random(in: 1...budgetPages / 2, using: &rng) * page,
            pinPolicy: Bool.random(using: &rng) ? .dropNewest : .evictOldestUnpinned)
        let log = EvictionLog()
        let ring = RingStore(configuration: configuration, onEvict: log.handler)
        var snapshots: [RingSnapshot] = []
        var currentLayout = Self.randomLayout(using: &rng)
        var pts: Int64 = 0
        var expectedRejections: UInt64 = 0
        var lastStoredPTS: Int64?
        var previous = ring.statistics

        for step in 0..<2_000 {
            let choice = Int.random(in: 0..<100, using: &rng)
            switch choice {
            case 0..<55:
                if Int.random(in: 0..<20, using: &rng) == 0 { currentLayout = Self.randomLayout(using: &rng) }
                pts += Int64.random(in: 1...40, using: &rng)
                let source = SourceFrame(
                    layout: currentLayout, seed: pts, padding: Int.random(in: 0...8, using: &rng))
                let outcome = try ring.append(copying: source.planes, layout: currentLayout, info: makeInfo(pts))
                if case .stored(let sequence) = outcome {
                    #expect(sequence == (previous.newestSequence ?? 0) + 1, "step \(step)")
                    lastStoredPTS = pts
                }
            case 55..<70:
                pts += Int64.random(in: 1...40, using: &rng)
                guard let slab = ring.reserve(currentLayout) else { break }
                slab.withUnsafeMutableBytes { fillPattern($0, seed: pts) }
                if Int.random(in: 0..<10, using: &rng) > 0,
                    case .stored = try ring.commit(slab, info: makeInfo(pts))
                {
                    lastStoredPTS = pts
                }
            case 70..<80:
                let snapshot: RingSnapshot
                if Bool.random(using: &rng) {
                    let start = Int64.random(in: max(0, pts - 3_000)...pts + 1, using: &rng)
                    snapshot = ring.pin(start..<start + Int64.random(in: 0...2_000, using: &rng))
                } else {
                    let newest = previous.newestSequence ?? 0
                    snapshot = ring.pin(fromSequence: UInt64.random(in: newest / 2...newest + 1, using: &rng))
                }
                snapshots.append(snapshot)
            case 80..<90:
                guard !snapshots.isEmpty else { break }
                let snapshot = snapshots.remove(at: Int.random(in: 0..<snapshots.count, using: &rng))
                #expect(Self.isIntactAndOrdered(snapshot), "step \(step)")
                snapshot.release()
            case 90..<95:
                ring.setPressure(MemoryPressure.allCases.randomElement(using: &rng)!)
            default:
                expectedRejections += 1
                if let duplicate = lastStoredPTS, Bool.random(using: &rng) {
                    let source = SourceFrame(layout: currentLayout, seed: duplicate)
                    #expect(throws: FrameError.duplicatePTS(nanoseconds: duplicate)) {
                        try ring.append(copying: source.planes, layout: currentLayout, info: makeInfo(duplicate))
                    }
                } else {
                    let source = SourceFrame(layout: layout(.gray8, 4, 4), seed: pts + 1)
                    #expect(throws: FrameError.self) {
                        try ring.append(copying: source.planes, layout: layout(.i420, 4, 4), info: makeInfo(pts + 1))
                    }
                }
            }

            let stats = ring.statistics
            expectConsistent(stats)
            #expect(stats.reservedBytes == 0 && stats.unmappingBytes == 0, "step \(step)")
            #expect(stats.rejected.total == expectedRejections, "step \(step)")
            #expect(stats.appended + stats.dropped.total + stats.rejected.total <= UInt64(step + 1), "step \(step)")
            #expect(stats.evicted + UInt64(stats.frames) == stats.appended, "step \(step)")
            // The budget: nothing is mapped beyond it; only pinned slabs that outlived a cut may stand above it,
            // and then nothing free or unpinned is kept and nothing grows.
            if stats.mappedBytes > stats.budget {
                #expect(stats.freeBytes == 0, "step \(step)")
                #expect(stats.pinnedFramesInRing == stats.frames, "step \(step)")
                #expect(stats.mappedBytes <= max(previous.mappedBytes, previous.budget), "step \(step)")
            }
            if let first = stats.firstPTSNanoseconds, let last = stats.lastPTSNanoseconds {
                #expect(.nanoseconds(last - first) <= configuration.window, "step \(step)")
            }
            previous = stats
        }

        for snapshot in snapshots {
            #expect(Self.isIntactAndOrdered(snapshot))
            snapshot.release()
        }
        let stats = ring.statistics
        #expect(stats.pinnedFramesInRing == 0 && stats.pinnedBytesOutsideRing == 0 && stats.bytesOutsideRing == 0)
        let entries = log.all
        #expect(entries.count == Int(stats.evicted))
        #expect(entries.map(\.sequence) == Array(1..<UInt64(entries.count + 1)))
        #expect(entries.allSatisfy { $0.bytesMatch })
        let remaining = ring.pin(fromSequence: 0)
        #expect(remaining.sequences?.lowerBound ?? stats.newestSequence.map { $0 + 1 } == UInt64(entries.count + 1))
        #expect(Self.isIntactAndOrdered(remaining))
    }
}
