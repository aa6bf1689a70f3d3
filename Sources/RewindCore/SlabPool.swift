import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The address of a mapped slab, passed between threads.
///
/// A pointer is not `Sendable` by itself; this one may cross threads because the pool's reference counting (under
/// the ring's lock) decides who may touch the bytes: one writer while reserved, any number of readers while held
/// in the ring, by an evicted-frame handle or by pins, and nobody after it is freed.
struct SlabAddress: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer
}

/// Names one slab record in the pool's table.
struct SlabID: Hashable, Sendable {
    let index: Int32
}

/// A slab whose pages must be given back to the system with `munmap`, outside the lock.
struct SlabUnmap: Sendable {
    let id: SlabID
    let address: SlabAddress
    let size: Int
}

/// The buffer pool: page-rounded slabs mapped with `mmap`, reused frame after frame, and the hard memory budget.
///
/// The pool is bookkeeping only: it runs under the ring's lock and never makes a system call. When it decides a
/// slab must be mapped or unmapped it says so, the caller does it outside the lock and reports back
/// (``finishMapping(_:address:)``, ``finishUnmapping(_:)``). Bytes being mapped or unmapped count as mapped until
/// the system call is done, so the mapped total never exceeds the budget, even for a moment.
///
/// ## Implementation Notes
///
/// Every slab has a record in a table allocated once (``slabCapacity`` records). A record is in one place and may
/// additionally carry pins:
///
///                  take (reuse)                      commit                 leaves the ring
///     ┌──────┐ ───────────────────▶ ┌──────────┐ ─────────────▶ ┌──────┐ ─────────────────▶ ┌─────────┐
///     │ free │                      │ reserved │                │ ring │                    │ outside │
///     └──────┘ ◀─────────────────── └──────────┘                └──────┘                    └─────────┘
///        ▲  │      handle dropped        ▲ take (map)              pins ±                   pins ±  │
///        │  │ budget shrank              │                                                         │
///        │  ▼                       ┌────────┐     handle dropped and no pins, within the budget     │
///        │ ┌───────────┐            │ unused │ ◀────────────────────────────────────────────┐        │
///        │ │ unmapping │ ─────────▶ └────────┘                                              │        │
///        │ └───────────┘  munmap done                  over the budget: unmapping ◀───────┘        │
///        └──────────────────────────────────────────────────────────────────────────────────────────┘
///
/// - `free`: mapped, owned by nobody, on the free stack, ready for reuse by a frame of the same slab size.
/// - `reserved`: owned by one `ReservedSlab`, being filled.
/// - `ring`: holds a frame in the ring.
/// - `outside`: left the ring; held by a live `EvictedFrame` and/or by pins.
/// - `unmapping`: handed to `munmap`, still counted as mapped until it returns.
///
/// A slab whose holder lets go (``release(_:)``, ``unpin(_:)``) returns to `free` when it has no pins left, or is
/// unmapped at once when the pool is over its budget. A pinned slab is never reused.
///
/// Byte accounting, kept incrementally so statistics are O(1):
///
///     mapped = free + reserved + ring + outside + unmapping   ≤ budget  (except: pinned or held slabs
///                                                                        that outlive a budget cut)
///
/// A slab is `size = byteCount` of its layout rounded up to whole pages. Free slabs of the wrong size for a
/// request are unmapped to make room; the free stack is searched from the top, so in the steady state (one
/// layout) the first entry matches.
struct SlabPool: ~Copyable {
    enum Place: UInt8 {
        case unused, free, reserved, ring, outside, unmapping
    }

    struct Record {
        var address: SlabAddress?
        var size: Int
        var place: Place
        var pins: Int32
        /// Whether an owner (the ring slot, a `ReservedSlab` or an `EvictedFrame`) still holds the slab.
        var isHeld: Bool
    }

    /// What ``take(size:)`` decided.
    enum Take {
        /// Reuse this free slab, already mapped.
        case reuse(SlabID, SlabAddress)
        /// Map a new slab of the requested size for this record, then call ``finishMapping(_:address:)``.
        case map(SlabID)
        /// Unmap these free slabs of another size first, then ask again.
        case unmapFirst([SlabUnmap])
        /// No memory under the budget without evicting frames.
        case exhausted
    }

    /// The size of a memory page, the unit slabs are rounded up to.
    static var systemPageSize: Int { System.pageSize }

    let pageSize: Int
    /// How many slabs can exist at once.
    let slabCapacity: Int
    private let records: UnsafeMutableBufferPointer<Record>
    private let unusedStack: UnsafeMutableBufferPointer<Int32>
    private var unusedCount: Int
    private let freeStack: UnsafeMutableBufferPointer<Int32>
    private var freeCount = 0

    /// The current hard budget in bytes.
    private(set) var budget: Int
    /// What the pool keeps to since the system last refused a mapping (strict overcommit, a lowered `ulimit -v`):
    /// the bytes then mapped, less ``systemHeadroom(_:)``; nil until then, and again once the budget is set anew. The
    /// pool maps no more than this meanwhile and unmaps the slabs it gets back above it: it reuses its slabs, as if
    /// its budget were what the system let it have.
    private(set) var systemLimit: Int?
    /// The bytes new slabs may bring the pool to: the budget, or the system's limit when lower.
    private var mappingLimit: Int { min(budget, systemLimit ?? .max) }
    private(set) var mappedBytes = 0
    private(set) var freeBytes = 0
    private(set) var reservedBytes = 0
    private(set) var ringBytes = 0
    private(set) var outsideBytes = 0
    private(set) var unmappingBytes = 0
    /// Bytes of slabs outside the ring that carry pins.
    private(set) var pinnedOutsideBytes = 0
    /// How many slabs in the ring carry pins.
    private(set) var pinnedRingSlabs = 0

    /// Makes an empty pool.
    ///
    /// - Parameters:
    ///   - budget: the hard limit on mapped bytes.
    ///   - slabCapacity: the most slabs that may exist at once (the record table is allocated once, now).
    init(budget: Int, slabCapacity: Int) {
        precondition(budget >= 0, "memory budget must not be negative")
        precondition(slabCapacity > 0, "slab capacity must be positive")
        self.pageSize = SlabPool.systemPageSize
        self.budget = budget
        self.slabCapacity = slabCapacity
        records = .allocate(capacity: slabCapacity)
        records.initialize(repeating: Record(address: nil, size: 0, place: .unused, pins: 0, isHeld: false))
        unusedStack = .allocate(capacity: slabCapacity)
        freeStack = .allocate(capacity: slabCapacity)
        for index in 0..<slabCapacity { unusedStack[index] = Int32(slabCapacity - 1 - index) }
        unusedCount = slabCapacity
    }

    deinit {
        for record in records {
            if let address = record.address { SlabPool.unmap(address, size: record.size) }
        }
        records.deallocate()
        unusedStack.deallocate()
        freeStack.deallocate()
    }

    /// `byteCount` rounded up to whole pages (at least one page).
    func slabSize(for byteCount: Int) -> Int {
        let pages = max(1, (byteCount + pageSize - 1) / pageSize)
        return pages * pageSize
    }

    func record(_ id: SlabID) -> Record { records[Int(id.index)] }

    /// Bytes that stay mapped once the unmaps in flight finish.
    var committedBytes: Int { mappedBytes - unmappingBytes }

    // MARK: Taking a slab

    /// Finds a slab of `size` bytes (a ``slabSize(for:)``) for a new frame, within the budget.
    ///
    /// - Complexity: O(free slabs) in the worst case; O(1) when the newest free slab has the right size.
    mutating func take(size: Int) -> Take {
        var position = freeCount - 1
        while position >= 0 {
            let index = Int(freeStack[position])
            if records[index].size == size {
                freeStack[position] = freeStack[freeCount - 1]
                freeCount -= 1
                let id = SlabID(index: Int32(index))
                move(id, to: .reserved)
                records[index].isHeld = true
                return .reuse(id, records[index].address!)
            }
            position -= 1
        }
        if mappedBytes + size <= mappingLimit, unusedCount > 0 {
            unusedCount -= 1
            let index = Int(unusedStack[unusedCount])
            records[index] = Record(address: nil, size: size, place: .unused, pins: 0, isHeld: true)
            mappedBytes += size
            move(SlabID(index: Int32(index)), to: .reserved)
            return .map(SlabID(index: Int32(index)))
        }
        if freeCount > 0 && (committedBytes - freeBytes + size <= mappingLimit || unusedCount == 0) {
            // Slabs of another size are in the way: give them back, oldest first, until the new one fits.
            var unmaps: [SlabUnmap] = []
            while freeCount > 0 && (committedBytes + size > mappingLimit || unusedCount == 0 && unmaps.isEmpty) {
                let index = Int(freeStack[0])
                freeStack[0] = freeStack[freeCount - 1]
                freeCount -= 1
                unmaps.append(beginUnmapping(SlabID(index: Int32(index))))
            }
            return .unmapFirst(unmaps)
        }
        return .exhausted
    }

    /// Records the result of mapping a slab that ``take(size:)`` asked for: its address, or nil when `mmap`
    /// failed (the record is forgotten and its bytes no longer count, and what stays mapped, less
    /// ``systemHeadroom(_:)``, becomes the ``systemLimit``).
    mutating func finishMapping(_ id: SlabID, address: SlabAddress?) {
        let index = Int(id.index)
        precondition(records[index].place == .reserved && records[index].address == nil, "slab \(id) not mapping")
        if let address {
            records[index].address = address
        } else {
            let size = records[index].size
            move(id, to: .unused)
            mappedBytes -= size
            recycleRecord(index)
            // Room for the process's other allocations (the runtime's, a request's, an export's), which would find
            // the address space exhausted too; one slab of the refused size stays, when that much was mapped.
            let committed = committedBytes
            systemLimit = max(committed - SlabPool.systemHeadroom(committed), min(committed, size))
        }
    }

    /// What the pool gives back when the system refuses a mapping, out of the `committed` bytes it then has mapped:
    /// an eighth, at most 16 MiB.
    static func systemHeadroom(_ committed: Int) -> Int { min(16 << 20, committed / 8) }

    /// Records that `munmap` of a slab returned: its bytes no longer count.
    mutating func finishUnmapping(_ id: SlabID) {
        let index = Int(id.index)
        precondition(records[index].place == .unmapping, "slab \(id) was not being unmapped")
        move(id, to: .unused)
        mappedBytes -= records[index].size
        recycleRecord(index)
    }

    // MARK: Holding, pinning and letting go

    /// A reserved slab now holds a frame in the ring.
    mutating func enterRing(_ id: SlabID) {
        precondition(records[Int(id.index)].place == .reserved, "only a reserved slab can enter the ring")
        move(id, to: .ring)
    }

    /// A slab leaves the ring, still held by the `EvictedFrame` handed to the eviction handler.
    mutating func leaveRing(_ id: SlabID) {
        precondition(records[Int(id.index)].place == .ring, "slab \(id) is not in the ring")
        move(id, to: .outside)
    }

    /// The owner of a reserved or evicted slab lets go of it.
    ///
    /// - Returns: the slab to unmap (outside the lock) when the pool is over its budget and nobody else holds it.
    mutating func release(_ id: SlabID) -> SlabUnmap? {
        let index = Int(id.index)
        precondition(records[index].isHeld && records[index].place != .ring, "slab \(id) released twice")
        records[index].isHeld = false
        return recycleIfUnused(id)
    }

    mutating func pin(_ id: SlabID) {
        let index = Int(id.index)
        precondition(records[index].place == .ring || records[index].place == .outside, "pinning a dead slab")
        account(id, sign: -1)
        // Read, then write: an in-place `+=` through the buffer subscript miscompiles under TSan (Swift 6.3).
        records[index].pins = records[index].pins + 1
        account(id, sign: 1)
    }

    /// Removes one pin.
    ///
    /// - Returns: the slab to unmap when this was the last hold and the pool is over its budget.
    mutating func unpin(_ id: SlabID) -> SlabUnmap? {
        let index = Int(id.index)
        precondition(records[index].pins > 0, "slab \(id) unpinned more often than pinned")
        account(id, sign: -1)
        records[index].pins = records[index].pins - 1
        account(id, sign: 1)
        return recycleIfUnused(id)
    }

    /// Whether a slab in the ring carries pins.
    func isPinned(_ id: SlabID) -> Bool { records[Int(id.index)].pins > 0 }

    // MARK: Budget

    /// Sets the hard budget and picks the free slabs to unmap at once so mapped bytes fall toward it.
    ///
    /// - Returns: the slabs to unmap outside the lock.
    /// - Complexity: O(free slabs).
    mutating func setBudget(_ newBudget: Int) -> [SlabUnmap] {
        precondition(newBudget >= 0, "memory budget must not be negative")
        budget = newBudget
        systemLimit = nil
        var unmaps: [SlabUnmap] = []
        while committedBytes > budget && freeCount > 0 {
            freeCount -= 1
            unmaps.append(beginUnmapping(SlabID(index: freeStack[freeCount])))
        }
        return unmaps
    }

    // MARK: System calls (outside the lock)

    /// Maps `size` bytes of private anonymous memory, its pages faulted in at once: the slab is about to be filled
    /// with a frame, and faulting a 12 MB slab's pages in one call costs about 4 ms against 5–7 ms one page at a
    /// time as the frame is written (a 4K ring's first fill is 165 of them while the camera runs).
    static func map(size: Int) -> SlabAddress? {
        let pointer = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0)
        guard let pointer, pointer != MAP_FAILED else { return nil }
        return SlabAddress(pointer: pointer)
    }

    static func unmap(_ address: SlabAddress, size: Int) {
        let result = munmap(address.pointer, size)
        precondition(result == 0, "munmap of a pool slab failed (errno \(errno))")
    }

    // MARK: Private

    private mutating func recycleIfUnused(_ id: SlabID) -> SlabUnmap? {
        let index = Int(id.index)
        guard !records[index].isHeld && records[index].pins == 0 else { return nil }
        if committedBytes > mappingLimit { return beginUnmapping(id) }
        move(id, to: .free)
        freeStack[freeCount] = id.index
        freeCount += 1
        return nil
    }

    private mutating func beginUnmapping(_ id: SlabID) -> SlabUnmap {
        let record = records[Int(id.index)]
        move(id, to: .unmapping)
        return SlabUnmap(id: id, address: record.address!, size: record.size)
    }

    private mutating func recycleRecord(_ index: Int) {
        records[index] = Record(address: nil, size: 0, place: .unused, pins: 0, isHeld: false)
        unusedStack[unusedCount] = Int32(index)
        unusedCount += 1
    }

    private mutating func move(_ id: SlabID, to place: Place) {
        account(id, sign: -1)
        records[Int(id.index)].place = place
        account(id, sign: 1)
    }

    /// Adds (`sign` 1) or removes (`sign` -1) a record's share of the byte counters.
    private mutating func account(_ id: SlabID, sign: Int) {
        let record = records[Int(id.index)]
        let bytes = sign * record.size
        switch record.place {
        case .unused: break
        case .free: freeBytes += bytes
        case .reserved: reservedBytes += bytes
        case .ring:
            ringBytes += bytes
            if record.pins > 0 { pinnedRingSlabs += sign }
        case .outside:
            outsideBytes += bytes
            if record.pins > 0 { pinnedOutsideBytes += bytes }
        case .unmapping: unmappingBytes += bytes
        }
    }
}
