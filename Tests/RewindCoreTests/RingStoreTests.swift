import Testing

@testable import RewindCore

@Suite struct RingStoreTests {
    static let small = layout(.nv12, 64, 48)  // 4 608 bytes: two pages per slab
    static let slab = SlabPool.systemPageSize * 2

    static func makeRing(
        slabs: Int, window: Duration = .seconds(1000), policy: PinPolicy = .evictOldestUnpinned,
        minimumSlabs: Int = 1, log: EvictionLog
    ) -> RingStore {
        RingStore(
            configuration: RingConfiguration(
                window: window, memoryBudget: slabs * slab, minimumBudget: minimumSlabs * slab, pinPolicy: policy),
            onEvict: log.handler)
    }

    @discardableResult
    static func append(_ ring: RingStore, _ pts: Int64, layout: FrameLayout = small, padding: Int = 0)
        throws(FrameError) -> AppendOutcome
    {
        let source = SourceFrame(layout: layout, seed: pts, padding: padding)
        return try ring.append(copying: source.planes, layout: layout, info: makeInfo(pts))
    }

    static func canReserve(_ ring: RingStore) -> Bool {
        guard let slab = ring.reserve(small) else { return false }
        _ = consume slab
        return true
    }

    static func contents(of snapshot: RingSnapshot) -> [(pts: Int64, sequence: UInt64, intact: Bool)] {
        (0..<snapshot.count).map { index in
            snapshot.withFrame(at: index) { view, sequence in
                (view.info.ptsNanoseconds, sequence, matchesPattern(view.bytes, seed: view.info.ptsNanoseconds))
            }
        }
    }

    @Test func copiedFramesReadBackBitExactWithSequences() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 8, log: log)
        for index in 0..<5 {
            #expect(try Self.append(ring, Int64(index) * 10) == .stored(sequence: UInt64(index + 1)))
        }
        let snapshot = ring.pin(Int64.min..<Int64.max)
        let frames = Self.contents(of: snapshot)
        #expect(frames.map(\.pts) == [0, 10, 20, 30, 40])
        #expect(frames.map(\.sequence) == [1, 2, 3, 4, 5])
        #expect(frames.allSatisfy { $0.intact })
        #expect(snapshot.sequences == 1...5)
        let stats = ring.statistics
        #expect(stats.frames == 5 && stats.appended == 5 && stats.newestSequence == 5)
        #expect(stats.firstPTSNanoseconds == 0 && stats.lastPTSNanoseconds == 40)
        #expect(stats.bytesInRing == 5 * Self.slab && stats.mappedBytes == 5 * Self.slab)
        expectConsistent(stats)
    }

    @Test(arguments: PixelFormat.allCases, [0, 3, 64])
    func paddedRowsArePackedForEveryFormat(_ format: PixelFormat, padding: Int) throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 16, log: log)
        let frameLayout = layout(format, 33, 17)
        try Self.append(ring, 7, layout: frameLayout, padding: padding)
        let snapshot = ring.pin(fromSequence: 0)
        #expect(snapshot.count == 1)
        snapshot.withFrame(at: 0) { view, _ in
            #expect(view.layout == frameLayout)
            #expect(view.bytes.count == frameLayout.byteCount)
            #expect(matchesPattern(view.bytes, seed: 7))
        }
    }

    @Test func inPlaceReserveAndCommit() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 4, log: log)
        guard let slab = ring.reserve(Self.small) else {
            Issue.record("no slab reserved in an empty ring")
            return
        }
        #expect(ring.statistics.reservedBytes == Self.slab)
        slab.withUnsafeMutableBytes { fillPattern($0, seed: 99) }
        #expect(try ring.commit(slab, info: makeInfo(99)) == .stored(sequence: 1))
        let stats = ring.statistics
        #expect(stats.reservedBytes == 0 && stats.bytesInRing == Self.slab && stats.frames == 1)
        let snapshot = ring.pin(0..<100)
        #expect(Self.contents(of: snapshot).map(\.intact) == [true])
    }

    @Test func anUncommittedSlabGoesBackToThePool() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 4, log: log)
        do {
            guard let slab = ring.reserve(Self.small) else {
                Issue.record("no slab reserved in an empty ring")
                return
            }
            #expect(slab.layout == Self.small)
        }
        var stats = ring.statistics
        #expect(stats.reservedBytes == 0 && stats.freeBytes == Self.slab && stats.frames == 0)
        // The free slab is reused, not a new one mapped.
        try Self.append(ring, 1)
        stats = ring.statistics
        #expect(stats.mappedBytes == Self.slab && stats.freeBytes == 0)
    }

    @Test func steadyStateReusesTheSameSlabs() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 64, window: .nanoseconds(100), log: log)
        for index in 0..<20 { try Self.append(ring, Int64(index) * 10) }
        let mapped = ring.statistics.mappedBytes
        for index in 20..<500 { try Self.append(ring, Int64(index) * 10) }
        let stats = ring.statistics
        #expect(stats.mappedBytes == mapped)
        #expect(stats.frames == 11)  // pts in [newest - 100, newest]
        #expect(stats.lastPTSNanoseconds! - stats.firstPTSNanoseconds! == 100)
        #expect(stats.evicted == 489)
    }

    @Test func everyEvictedFrameReachesTheHandlerOnceInOrderWithItsBytes() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 6, window: .nanoseconds(50), log: log)
        var pts: Int64 = 0
        for index in 0..<300 {
            pts += Int64(1 + index % 7)
            try Self.append(ring, pts)
        }
        ring.setPressure(.critical)  // evicts down to one slab
        let entries = log.all
        let stats = ring.statistics
        #expect(entries.map(\.sequence) == Array(1...UInt64(entries.count)))
        #expect(entries.allSatisfy { $0.bytesMatch })
        #expect(UInt64(entries.count) == stats.evicted)
        #expect(UInt64(entries.count + stats.frames) == stats.appended)
        #expect(stats.frames == 1 && stats.newestSequence == 300)
        expectConsistent(stats)
    }

    @Test func theBudgetEvictsOldestFramesAndDropsWhatNeverFits() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 4, log: log)
        for index in 0..<10 { #expect(try Self.append(ring, Int64(index)) == .stored(sequence: UInt64(index + 1))) }
        var stats = ring.statistics
        #expect(stats.frames == 4 && stats.evicted == 6 && stats.mappedBytes <= stats.budget)
        #expect(stats.firstPTSNanoseconds == 6)
        // A frame larger than the whole budget is dropped without touching the ring.
        #expect(try Self.append(ring, 100, layout: layout(.bgra, 256, 256)) == .dropped(.memoryBudget))
        stats = ring.statistics
        #expect(stats.frames == 4 && stats.dropped.memoryBudget == 1 && stats.dropped.total == 1)
    }

    @Test func aNewLayoutReplacesFreeSlabsOfTheOldOne() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 8, log: log)
        for index in 0..<8 { try Self.append(ring, Int64(index)) }
        let big = layout(.bgra, 64, 64)  // 16 KiB: four pages
        for index in 8..<20 { try Self.append(ring, Int64(index), layout: big) }
        let stats = ring.statistics
        // 8 two-page slabs of budget hold 4 four-page slabs: the old free slabs were unmapped to make room.
        #expect(stats.frames == 4 && stats.mappedBytes == stats.budget && stats.freeBytes == 0)
        #expect(stats.bytesInRing == 4 * 4 * SlabPool.systemPageSize)
        let snapshot = ring.pin(fromSequence: 0)
        #expect(Self.contents(of: snapshot).map(\.pts) == [16, 17, 18, 19])
        #expect(log.all.allSatisfy { $0.bytesMatch })
    }

    @Test func dropNewestKeepsPinnedFrames() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 3, policy: .dropNewest, log: log)
        for index in 0..<3 { try Self.append(ring, Int64(index)) }
        let snapshot = ring.pin(0..<1)  // the oldest frame
        #expect(try Self.append(ring, 3) == .dropped(.pinnedFrames))
        #expect(!Self.canReserve(ring))
        var stats = ring.statistics
        #expect(stats.dropped.pinnedFrames == 2 && stats.frames == 3 && stats.evicted == 0)
        snapshot.release()
        #expect(try Self.append(ring, 4) == .stored(sequence: 4))
        stats = ring.statistics
        #expect(stats.firstPTSNanoseconds == 1 && stats.pinnedFramesInRing == 0)
    }

    @Test func evictOldestUnpinnedDetachesPinnedFramesUntilMemoryIsFreed() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 4, policy: .evictOldestUnpinned, log: log)
        for index in 0..<4 { try Self.append(ring, Int64(index)) }
        let snapshot = ring.pin(0..<2)
        // Budget full: frames 0 and 1 are pinned, so they leave the ring without freeing memory; frame 2 frees.
        #expect(try Self.append(ring, 4) == .stored(sequence: 5))
        var stats = ring.statistics
        #expect(stats.frames == 2 && stats.evicted == 3)
        #expect(stats.pinnedBytesOutsideRing == 2 * Self.slab && stats.mappedBytes == stats.budget)
        #expect(log.all.map(\.sequence) == [1, 2, 3])
        // The pinned frames are intact though they left the ring.
        #expect(Self.contents(of: snapshot).map(\.intact) == [true, true])
        // Everything left is pinned: the new frame is dropped, nothing is evicted.
        let all = ring.pin(fromSequence: 0)
        #expect(try Self.append(ring, 5) == .dropped(.pinnedFrames))
        stats = ring.statistics
        #expect(stats.frames == 2 && stats.evicted == 3 && stats.dropped.pinnedFrames == 1)
        snapshot.release()
        snapshot.release()  // idempotent
        all.release()
        stats = ring.statistics
        #expect(stats.pinnedBytesOutsideRing == 0 && stats.bytesOutsideRing == 0 && stats.pinnedFramesInRing == 0)
        #expect(stats.freeBytes == 2 * Self.slab)
        expectConsistent(stats)
    }

    @Test func slabsHeldByTheHandlerCountAgainstTheBudget() throws {
        let log = EvictionLog(keepsFrames: true)
        let ring = Self.makeRing(slabs: 3, log: log)
        for index in 0..<3 { try Self.append(ring, Int64(index)) }
        // The handler keeps what it receives: evicting frees nothing, so the ring empties and the frame drops.
        #expect(try Self.append(ring, 3) == .dropped(.memoryBudget))
        var stats = ring.statistics
        #expect(stats.frames == 0 && stats.bytesOutsideRing == 3 * Self.slab && stats.mappedBytes == stats.budget)
        log.releaseHeld()
        stats = ring.statistics
        #expect(stats.bytesOutsideRing == 0 && stats.freeBytes == 3 * Self.slab)
        #expect(try Self.append(ring, 4) == .stored(sequence: 4))
    }

    @Test func pinningByRangeIsHalfOpenAndBySequenceStartsAnywhere() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 16, log: log)
        for index in 1...10 { try Self.append(ring, Int64(index) * 100) }
        #expect(Self.contents(of: ring.pin(300..<600)).map(\.pts) == [300, 400, 500])
        #expect(Self.contents(of: ring.pin(301..<601)).map(\.pts) == [400, 500, 600])
        #expect(ring.pin(2000..<3000).isEmpty)
        #expect(ring.pin(500..<500).isEmpty)
        #expect(Self.contents(of: ring.pin(fromSequence: 8)).map(\.sequence) == [8, 9, 10])
        #expect(ring.pin(fromSequence: 11).isEmpty)
        #expect(ring.pin(fromSequence: 0).count == 10)
        let snapshot = ring.pin(100..<1001)
        #expect(snapshot.firstPTSNanoseconds == 100 && snapshot.lastPTSNanoseconds == 1000)
        #expect(ring.statistics.pinnedFramesInRing == 10)
    }

    @Test func pinnedSnapshotsStayBitExactWhileTheRingTurnsOver() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 12, window: .nanoseconds(40), log: log)
        for index in 0..<5 { try Self.append(ring, Int64(index) * 10) }
        let snapshot = ring.pin(0..<50)
        #expect(snapshot.count == 5)
        for index in 5..<500 { try Self.append(ring, Int64(index) * 10) }
        let frames = Self.contents(of: snapshot)
        #expect(frames.map(\.pts) == [0, 10, 20, 30, 40])
        #expect(frames.allSatisfy { $0.intact })
        let stats = ring.statistics
        #expect(stats.pinnedBytesOutsideRing == 5 * Self.slab && stats.mappedBytes <= stats.budget)
        snapshot.release()
        #expect(ring.statistics.pinnedBytesOutsideRing == 0)
    }

    @Test func pressureLevelsSetTheBudget() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 20, minimumSlabs: 4, log: log)
        for index in 0..<20 { try Self.append(ring, Int64(index)) }
        ring.setPressure(.warning)
        var stats = ring.statistics
        #expect(stats.budget == 10 * Self.slab && stats.mappedBytes <= stats.budget && stats.frames == 10)
        ring.setPressure(.critical)
        stats = ring.statistics
        #expect(stats.budget == 4 * Self.slab && stats.mappedBytes <= stats.budget && stats.frames == 4)
        #expect(stats.pressure == .critical)
        ring.setPressure(.normal)
        for index in 20..<40 { try Self.append(ring, Int64(index)) }
        stats = ring.statistics
        #expect(stats.budget == 20 * Self.slab && stats.frames == 20)
        #expect(log.all.map(\.sequence) == Array(1...20))
    }

    @Test func pinsThatOutliveABudgetCutAreShedWhenReleased() throws {
        let log = EvictionLog()
        let ring = Self.makeRing(slabs: 10, minimumSlabs: 2, log: log)
        for index in 0..<10 { try Self.append(ring, Int64(index)) }
        let snapshot = ring.pin(fromSequence: 0)
        ring.setPressure(.critical)
        var stats = ring.statistics
        // Everything is pinned: nothing can go yet, and nothing new may be mapped.
        #expect(stats.mappedBytes == 10 * Self.slab && stats.frames == 10)
        #expect(!Self.canReserve(ring))
        snapshot.release()
        stats = ring.statistics
        #expect(stats.mappedBytes <= stats.budget && stats.frames == 2)
        expectConsistent(stats)
    }

    @Test func criticalPressureLowersResidentMemory() throws {
        let frame = layout(.nv12, 1280, 720)  // 1.38 MB
        let budget = 256 << 20
        let minimum = 16 << 20
        let ring = RingStore(
            configuration: RingConfiguration(
                window: .nanoseconds(Int64.max), memoryBudget: budget, minimumBudget: minimum),
            onEvict: { _ in })
        var pts: Int64 = 0
        while ring.statistics.dropped.total == 0 && ring.statistics.evicted < 4 {
            guard let slab = ring.reserve(frame) else {
                Issue.record("no slab reserved below the budget")
                return
            }
            slab.withUnsafeMutableBytes { bytes in
                bytes.withMemoryRebound(to: UInt8.self) { $0.update(repeating: UInt8(truncatingIfNeeded: pts)) }
            }
            _ = try ring.commit(slab, info: makeInfo(pts))
            pts += 1
        }
        let before = residentBytes()
        let mappedBefore = ring.statistics.mappedBytes
        ring.setPressure(.critical)
        let after = residentBytes()
        let stats = ring.statistics
        let released = mappedBefore - stats.mappedBytes
        #expect(stats.mappedBytes <= minimum)
        #expect(released >= budget - minimum - 2 * SlabPool.systemPageSize * 400)
        #expect(before > 0 && after > 0)
        #expect(before - after >= released / 2, "resident \(before) → \(after), released \(released) bytes")
    }
}

@Suite struct RingStoreBadInputTests {
    static let small = RingStoreTests.small

    /// Appends three good frames, then checks that `attempt` throws `expected`, is counted, and changes nothing.
    func expectRejected(
        _ expected: FrameError, poolMayGrow: Bool = false, sourceLocation: SourceLocation = #_sourceLocation,
        _ attempt: (RingStore) throws(FrameError) -> Void
    ) throws {
        let log = EvictionLog()
        let ring = RingStoreTests.makeRing(slabs: 8, log: log)
        for pts: Int64 in [10, 20, 30] { try RingStoreTests.append(ring, pts) }
        let before = ring.statistics
        #expect(throws: expected, sourceLocation: sourceLocation) { try attempt(ring) }
        var after = ring.statistics
        #expect(after.rejected.count(of: expected) == 1, sourceLocation: sourceLocation)
        #expect(after.rejected.total == 1, sourceLocation: sourceLocation)
        after.rejected = before.rejected
        if poolMayGrow {
            // A slab reserved before the rejection stays in the pool, free.
            #expect(after.freeBytes == after.mappedBytes - before.mappedBytes, sourceLocation: sourceLocation)
            (after.mappedBytes, after.freeBytes) = (before.mappedBytes, before.freeBytes)
        }
        #expect(after == before, sourceLocation: sourceLocation)
        let frames = RingStoreTests.contents(of: ring.pin(fromSequence: 0))
        #expect(frames.map(\.pts) == [10, 20, 30] && frames.allSatisfy { $0.intact }, sourceLocation: sourceLocation)
        #expect(log.all.isEmpty, sourceLocation: sourceLocation)
        // The ring still works and the next sequence follows on.
        #expect(try RingStoreTests.append(ring, 40) == .stored(sequence: 4), sourceLocation: sourceLocation)
    }

    @Test func duplicatePTS() throws {
        try expectRejected(.duplicatePTS(nanoseconds: 30)) { ring throws(FrameError) in
            try RingStoreTests.append(ring, 30)
        }
    }

    @Test func nonMonotonicPTS() throws {
        try expectRejected(.nonMonotonicPTS(previousNanoseconds: 30, nanoseconds: 25)) { ring throws(FrameError) in
            try RingStoreTests.append(ring, 25)
        }
    }

    @Test func ptsOutOfRange() throws {
        let pts = FrameTime(value: Int64.max, timescale: 1)
        try expectRejected(.ptsOutOfRange(pts)) { ring throws(FrameError) in
            var info = makeInfo(40)
            info.pts = pts
            let source = SourceFrame(layout: Self.small, seed: 40)
            _ = try ring.append(copying: source.planes, layout: Self.small, info: info)
        }
    }

    @Test func planeCountMismatch() throws {
        try expectRejected(.planeCountMismatch(expected: 2, actual: 1)) { ring throws(FrameError) in
            let source = SourceFrame(layout: Self.small, seed: 40)
            _ = try ring.append(copying: PlaneSources(source.source(0)), layout: Self.small, info: makeInfo(40))
        }
        try expectRejected(.planeCountMismatch(expected: 1, actual: 3)) { ring throws(FrameError) in
            let source = SourceFrame(layout: layout(.i420, 8, 8), seed: 40)
            _ = try ring.append(copying: source.planes, layout: layout(.gray8, 8, 8), info: makeInfo(40))
        }
    }

    @Test func aPlaneWithTooFewBytes() throws {
        let chroma = Self.small.plane(1)
        try expectRejected(.planeSizeMismatch(plane: 1, expected: chroma.byteCount, actual: chroma.byteCount - 1)) {
            ring throws(FrameError) in
            let source = SourceFrame(layout: Self.small, seed: 40)
            let planes = PlaneSources(source.source(0), source.source(1, byteCount: chroma.byteCount - 1))
            _ = try ring.append(copying: planes, layout: Self.small, info: makeInfo(40))
        }
    }

    @Test func aRowStrideShorterThanTheRow() throws {
        try expectRejected(.planeSizeMismatch(plane: 0, expected: 64, actual: 63)) { ring throws(FrameError) in
            let source = SourceFrame(layout: Self.small, seed: 40)
            let planes = PlaneSources(source.source(0, bytesPerRow: 63), source.source(1))
            _ = try ring.append(copying: planes, layout: Self.small, info: makeInfo(40))
        }
    }

    @Test func aCommitWithABadPTSReturnsTheSlab() throws {
        try expectRejected(.duplicatePTS(nanoseconds: 30), poolMayGrow: true) { ring throws(FrameError) in
            guard let slab = ring.reserve(Self.small) else { return }
            _ = try ring.commit(slab, info: makeInfo(30))
        }
    }
}
