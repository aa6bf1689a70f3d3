import Glibc
import RewindSystem
import Testing

/// What the recorder's requests and exports leave in malloc's heaps goes back to the system.
@Suite struct ResidentMemoryTests {
    /// Buffers freed between small allocations that stay leave holes `free` does not give back (only a heap's top
    /// goes back); their pages stay resident until ``ResidentMemory/trimHeap()`` releases them.
    @Test func trimmingTheHeapGivesBackTheHolesFreedBuffersLeave() throws {
        // Other tests trim the heap too (after requests and saves): a round in which one did before this one's
        // `before` was measured shows nothing, and is tried again.
        var rounds: [(before: Double, after: Double)] = []
        while rounds.count < 20 {
            let round = try Self.holesBeforeAndAfterATrim()
            rounds.append(round)
            if round.before > 0.8 { break }
        }
        let shown = try #require(rounds.last)
        #expect(shown.before > 0.8, "the freed holes stay resident until the heap is trimmed: \(rounds)")
        // Other tests running meanwhile may take some of the holes again: most of them, not all, go back.
        #expect(shown.after < 0.5, "trimming gave them back: \(rounds)")
    }

    /// Frees 256 buffers of 64 KiB, each followed by one kept meanwhile, and trims the heap: the
    /// share of the buffers' whole pages (past each chunk's header and free-list links) resident before and after.
    static func holesBeforeAndAfterATrim() throws -> (before: Double, after: Double) {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let size = 64 << 10  // below any mmap threshold: from the heap
        var holes: [UnsafeMutableRawPointer] = []
        var keepers: [UnsafeMutableRawPointer] = []
        // Every other buffer stays meanwhile: a small allocation could come from anywhere (malloc's caches of small
        // freed chunks), and the freed buffers would then merge into one free stretch at the heap's top.
        for index in 0..<512 {
            let block = try #require(malloc(size))
            memset(block, 1, size)
            if index % 2 == 0 { holes.append(block) } else { keepers.append(block) }
        }
        defer { for keeper in keepers { free(keeper) } }
        let addresses = holes.map { Int(bitPattern: $0) }
        for hole in holes { free(hole) }
        var vector = [UInt8](repeating: 0, count: size / page + 1)
        func residentShare() -> Double {
            var resident = 0
            var total = 0
            for address in addresses {
                let first = (address + 2 * page - 1) / page * page
                let end = (address + size) / page * page
                guard end > first else { continue }
                let pages = (end - first) / page
                guard mincore(UnsafeMutableRawPointer(bitPattern: first), end - first, &vector) == 0 else { continue }
                total += pages
                resident += vector[0..<pages].filter { $0 & 1 == 1 }.count
            }
            return total == 0 ? 0 : Double(resident) / Double(total)
        }
        let before = residentShare()
        ResidentMemory.trimHeap()
        return (before, residentShare())
    }

    /// The trim after a request runs at most once in its interval, whichever thread asks.
    @Test func aTrimThatIsNotDueDoesNothing() {
        ResidentMemory.trimHeap()
        #expect(!ResidentMemory.trimHeapIfDue(every: .seconds(3600)))
        // Due at once with no interval (another thread trimming at the same moment may take a turn).
        #expect((0..<100).contains { _ in ResidentMemory.trimHeapIfDue(every: .zero) })
    }
}
