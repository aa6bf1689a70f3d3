import RewindTesting
import Synchronization
import Testing

@testable import RewindCore

#if canImport(Glibc)
    import Glibc
#endif

/// Shared flags and findings of a concurrent run.
final class RunState: Sendable {
    let producerDone = Atomic<Bool>(false)
    let snapshotsRead = Atomic<Int>(0)
    let failures = Mutex<[String]>([])

    func fail(_ message: String) { failures.withAnnotatedLock { $0.append(message) } }
}

@Suite(.timeLimit(.minutes(45))) struct RingStoreConcurrencyTests {
    @Test(arguments: [PinPolicy.evictOldestUnpinned, .dropNewest])
    func readersPinWhileOneProducerAppends(policy: PinPolicy) {
        let frameLayout = layout(.nv12, 32, 24)
        let slab = SlabPool.systemPageSize * 1
        let log = EvictionLog()
        let ring = RingStore(
            configuration: RingConfiguration(
                window: .nanoseconds(300), memoryBudget: 40 * slab, minimumBudget: 6 * slab, pinPolicy: policy),
            onEvict: log.handler)
        let run = RunState()
        let frameCount = 3_000

        let producer = TestThread {
            for index in 0..<frameCount {
                let pts = Int64(index) * 10
                let source = SourceFrame(layout: frameLayout, seed: pts)
                do {
                    _ = try ring.append(copying: source.planes, layout: frameLayout, info: makeInfo(pts))
                } catch {
                    run.fail("frame \(index) rejected: \(error)")
                }
            }
            run.producerDone.store(true, ordering: .releasing)
        }
        let pressure = TestThread {
            var level = 0
            while !run.producerDone.load(ordering: .acquiring) {
                ring.setPressure(MemoryPressure.allCases[level % 3])
                level += 1
                sched_yield()
            }
            ring.setPressure(.normal)
        }
        let readers = (0..<3).map { reader in
            TestThread {
                var rng = SplitMix64(seed: UInt64(reader))
                while !run.producerDone.load(ordering: .acquiring) {
                    let stats = ring.statistics
                    let snapshot: RingSnapshot
                    if Bool.random(using: &rng) {
                        let last = stats.lastPTSNanoseconds ?? 0
                        let start = last - Int64.random(in: 0...400, using: &rng)
                        snapshot = ring.pin(start..<start + Int64.random(in: 0...300, using: &rng))
                    } else {
                        let newest = stats.newestSequence ?? 0
                        snapshot = ring.pin(fromSequence: newest - min(newest, UInt64.random(in: 0...40, using: &rng)))
                    }
                    if !RingStoreRandomizedTests.isIntactAndOrdered(snapshot) {
                        run.fail("reader \(reader): snapshot \(String(describing: snapshot.sequences)) changed")
                    }
                    if Bool.random(using: &rng) { snapshot.release() }
                    run.snapshotsRead.add(1, ordering: .relaxed)
                }
            }
        }
        producer.join()
        pressure.join()
        for reader in readers { reader.join() }

        #expect(run.failures.withAnnotatedLock { $0 } == [])
        #expect(run.snapshotsRead.load(ordering: .relaxed) > 0)
        let stats = ring.statistics
        expectConsistent(stats)
        #expect(stats.appended + stats.dropped.total == UInt64(frameCount))
        #expect(stats.pinnedFramesInRing == 0 && stats.pinnedBytesOutsideRing == 0)
        #expect(stats.mappedBytes <= stats.budget)
        let entries = log.all
        #expect(entries.count == Int(stats.evicted))
        #expect(entries.map(\.sequence) == Array(1..<UInt64(entries.count + 1)))
        #expect(entries.allSatisfy { $0.bytesMatch })
    }
}
