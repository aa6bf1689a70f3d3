import Testing

@testable import RewindCore

@Suite(.timeLimit(.minutes(45))) struct SlabPoolTests {
    static let slab = SlabPool.systemPageSize * 2

    /// Maps `count` slabs, each left reserved (held by its taker).
    static func mapSlabs(_ count: Int, in pool: inout SlabPool) -> [(SlabID, SlabAddress)] {
        var slabs: [(SlabID, SlabAddress)] = []
        for _ in 0..<count {
            guard case .map(let id) = pool.take(size: slab), let address = SlabPool.map(size: slab) else {
                Issue.record("slab \(slabs.count) was not mapped")
                break
            }
            pool.finishMapping(id, address: address)
            slabs.append((id, address))
        }
        return slabs
    }

    /// Takes the next slab, which the budget allows, as if the system refused to map it.
    static func refuseNextMapping(in pool: inout SlabPool) {
        guard case .map(let refused) = pool.take(size: slab) else {
            Issue.record("the budget allows another slab")
            return
        }
        pool.finishMapping(refused, address: nil)
    }

    /// A mapping the system refuses (`mmap` failing) leaves the process's address space or commit charge exhausted
    /// for everything else it allocates: the pool gives back an eighth of what it has mapped, unmapping the slabs
    /// it gets back above that, and keeps to the rest.
    @Test func aRefusedMappingGivesBackAnEighthOfThePool() {
        var pool = SlabPool(budget: 100 * Self.slab, slabCapacity: 200)
        let slabs = Self.mapSlabs(16, in: &pool)
        Self.refuseNextMapping(in: &pool)
        #expect(pool.systemLimit == 14 * Self.slab, "16 slabs mapped, less an eighth")
        // The two slabs given back first are unmapped; the third is kept for reuse.
        for (index, (id, _)) in slabs.prefix(3).enumerated() {
            let unmap = pool.release(id)
            #expect((unmap != nil) == (index < 2), "slab \(index)")
            if let unmap {
                SlabPool.unmap(unmap.address, size: unmap.size)
                pool.finishUnmapping(unmap.id)
            }
        }
        #expect(pool.mappedBytes == 14 * Self.slab)
        guard case .reuse = pool.take(size: Self.slab) else {
            Issue.record("the slab kept is reused")
            return
        }
        #expect(
            { if case .exhausted = pool.take(size: Self.slab) { true } else { false } }(),
            "nothing more is mapped within the system's limit")
        // A new budget lifts the limit.
        #expect(pool.setBudget(100 * Self.slab).isEmpty)
        #expect(pool.systemLimit == nil)
    }

    /// A pool of one slab keeps it when the system refuses the next: a ring must hold a frame.
    @Test func aRefusedMappingKeepsOneSlab() {
        var pool = SlabPool(budget: 10 * Self.slab, slabCapacity: 10)
        let slabs = Self.mapSlabs(1, in: &pool)
        Self.refuseNextMapping(in: &pool)
        #expect(pool.systemLimit == Self.slab)
        #expect(pool.release(slabs[0].0) == nil, "the one slab is kept")
    }
}
