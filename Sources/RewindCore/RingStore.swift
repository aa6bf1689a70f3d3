import RewindSystem
import Synchronization

/// The in-memory rewind buffer: the most recent frames, in pts order, in pooled slabs, bounded by a time window
/// and a hard memory budget.
///
/// One producer appends (``append(copying:layout:info:)``, or ``reserve(_:)`` then ``commit(_:info:)``); any
/// number of readers pin frames concurrently (``pin(_:)``, ``pin(fromSequence:)``). Frames leave the ring oldest
/// first, and each one that leaves is handed, by move, to the eviction handler.
///
/// All state sits behind one `Mutex`. Each operation decides under the lock and acts outside it: copying pixels,
/// calling the eviction handler and mapping or unmapping slabs never happen while the lock is held.
///
/// ## Implementation Notes
///
/// The ring is a ``RingBuffer`` of slots allocated once (capacity: one slot per page of the budget, at most
/// ``RingConfiguration/maximumFrames``). A slot names a slab of the pool and carries the frame's layout, timing
/// and sequence number; the pixels stay in the slab.
///
///     slots (capacity 8, wrapped):
///     [ s6 | s7 | s8 | .  | .  | s3 | s4 | s5 ]          head = 5, count = 6, sequences s3 … s8
///       │    │    │              │    │    │
///       ▼    ▼    ▼              ▼    ▼    ▼
///     slabs (mmap, page-rounded; the pool owns them; pins keep them alive after they leave the ring)
///
/// An append, in the steady state (one layout, window full):
///
/// 1. lock: check the pts; the oldest frame is past the window, so it leaves the ring; unlock.
///    Outside the lock the eviction handler gets it; when the handler lets go, its slab returns to the pool.
/// 2. lock: the pool hands out that free slab (`reserved`); unlock. Copy the planes into it.
/// 3. lock: append a slot, assign the next sequence number; unlock.
///
/// No step allocates: slots, slab records and the free list are fixed tables, handles are non-copyable values.
public final class RingStore: Sendable {
    /// The configuration the ring was made with (budgets under pressure derive from it).
    public let configuration: RingConfiguration
    private let state: Mutex<RingState>
    /// Held (never together with `state` the other way round) from the moment a frame leaves the ring until the
    /// eviction handler has it, so frames reach the handler in order even when several threads evict.
    private let evictionOrder = Mutex<Void>(())
    private let onEvict: @Sendable (consuming EvictedFrame) -> Void

    /// Makes an empty ring; no memory is mapped until the first frame.
    ///
    /// - Parameters:
    ///   - configuration: window, budgets and pin policy.
    ///   - onEvict: receives every frame that leaves the ring, in order, exactly once, never under the ring's
    ///     lock, on the thread that evicts it (the producer, a caller of `setPressure`, or a thread releasing a
    ///     snapshot after a budget cut). Letting go of the ``EvictedFrame`` returns its slab to the pool; keeping it keeps the slab
    ///     counted against the budget. It may pin and release snapshots and read statistics, but must not call
    ///     `append`, `reserve`, `commit` or `setPressure` (they would wait for the handler to return).
    public init(configuration: RingConfiguration, onEvict: @escaping @Sendable (consuming EvictedFrame) -> Void) {
        configuration.validate()
        self.configuration = configuration
        self.onEvict = onEvict
        let pageSize = SlabPool.systemPageSize
        let pagesInBudget = max(1, configuration.memoryBudget / pageSize)
        let frameCapacity = min(configuration.maximumFrames, pagesInBudget)
        let slabCapacity = min(pagesInBudget, 2 * frameCapacity + 16)
        state = Mutex(
            RingState(
                pool: SlabPool(budget: configuration.memoryBudget, slabCapacity: slabCapacity),
                slots: RingBuffer(capacity: frameCapacity),
                configuration: configuration))
    }

    // MARK: Appending

    /// Stores a frame by copying caller-owned planes into a pooled slab (one copy, done outside the lock).
    ///
    /// Frames past the window leave the ring first; if the budget still has no room, older frames are evicted as
    /// the pin policy allows, or the frame is dropped.
    ///
    /// - Parameters:
    ///   - planes: the frame's planes, each with its own row stride.
    ///   - layout: the frame's geometry.
    ///   - info: pts, wall time and colour.
    /// - Returns: the sequence number given to the frame, or why it was dropped (counted).
    /// - Throws: ``FrameError`` for bad input (wrong plane count or sizes, pts out of range, not after the last
    ///   stored pts). The rejection is counted and the ring is unchanged.
    /// - Complexity: O(frame bytes) for the copy, plus O(1) per frame evicted.
    public func append(copying planes: PlaneSources, layout: FrameLayout, info: FrameInfo) throws(FrameError)
        -> AppendOutcome
    {
        do {
            try planes.validate(for: layout)
        } catch {
            locked { $0.rejected.record(error) }
            throw error
        }
        try evictExpired(before: info)
        var reason = DropReason.memoryBudget
        guard let slab = makeReservation(layout, dropReason: &reason) else { return .dropped(reason.lossReason) }
        planes.copy(into: slab.address.pointer, layout: layout)
        return try commit(slab, info: info)
    }

    /// Reserves a pooled slab for a frame of `layout`, to be filled in place and then committed.
    ///
    /// Evicts older frames if the budget needs it (as the pin policy allows).
    ///
    /// - Returns: the slab, or nil when there is no memory under the budget and policy (counted as a drop).
    public func reserve(_ layout: FrameLayout) -> ReservedSlab? {
        var reason = DropReason.memoryBudget
        return reserve(layout, dropReason: &reason)
    }

    /// Reserves a pooled slab like ``reserve(_:)``, and says why when there is none.
    ///
    /// - Parameters:
    ///   - dropReason: set to why the frame is dropped when the result is nil; unchanged otherwise.
    ///   - countsDrop: whether a nil result counts the drop now; false leaves it to ``countDrop(_:)`` once the frame
    ///     proves to be one (a producer that reserves before it reads: an input that ends gives no frame to lose).
    /// - Returns: the slab, or nil when there is no memory under the budget and policy.
    public func reserve(_ layout: FrameLayout, dropReason: inout DropReason, countsDrop: Bool = true) -> ReservedSlab? {
        makeReservation(layout, dropReason: &dropReason, countsDrop: countsDrop)
    }

    /// Counts a frame dropped for `reason` that a reservation left uncounted (``reserve(_:dropReason:countsDrop:)``).
    public func countDrop(_ reason: DropReason) {
        locked { $0.dropped[reason] += 1 }
    }

    /// Adds a filled slab to the ring as the newest frame.
    ///
    /// - Parameters:
    ///   - slab: a slab from ``reserve(_:)`` of this ring, holding the frame's packed planes.
    ///   - info: the frame's pts, wall time and colour.
    /// - Returns: the frame's sequence number, or ``LossReason/pinnedFrames`` when the ring is full of slots and
    ///   pinned frames may not be evicted (the slab goes back to the pool).
    /// - Throws: ``FrameError`` when the pts is out of range or not after the last stored pts; the slab goes back
    ///   to the pool and the ring is unchanged.
    public func commit(_ slab: consuming ReservedSlab, info: FrameInfo) throws(FrameError) -> AppendOutcome {
        let (owner, id, address, layout) = slab.disarm()
        precondition(owner.toOpaque() == Unmanaged.passUnretained(self).toOpaque(), "slab from another ring")
        owner.release()
        while true {
            let step = decide { state -> CommitStep in
                if let error = state.check(info) {
                    state.rejected.record(error)
                    return .reject(error, state.pool.release(id))
                }
                if let oldest = state.slots.first, state.isExpired(oldest, newest: info.ptsNanoseconds) {
                    return .evict(state.removeOldest())
                }
                if state.slots.isFull {
                    if state.pool.isPinned(state.slots.first!.slab)
                        && (state.configuration.pinPolicy == .dropNewest || state.allPinned)
                    {
                        state.dropped.pinnedFrames += 1
                        return .drop(.pinnedFrames, state.pool.release(id))
                    }
                    return .evict(state.removeOldest())
                }
                let sequence = state.nextSequence
                state.nextSequence += 1
                state.lastStoredPTS = info.ptsNanoseconds
                state.appended += 1
                state.pool.enterRing(id)
                state.slots.append(Slot(slab: id, address: address, layout: layout, info: info, sequence: sequence))
                return .stored(sequence)
            }
            switch step {
            case .stored(let sequence):
                return .stored(sequence: sequence)
            case .evict:
                continue
            case .drop(let reason, let unmap):
                if let unmap { perform(unmap) }
                return .dropped(reason.lossReason)
            case .reject(let error, let unmap):
                if let unmap { perform(unmap) }
                throw error
            }
        }
    }

    // MARK: Pressure

    /// Changes the budget to the one for `level` and, when it shrinks, frees memory at once: free slabs are
    /// unmapped, then oldest frames are evicted (pinned ones detached, whatever the pin policy) until the pool
    /// is within the budget or only pinned frames remain. Evicted slabs are unmapped as their handlers let go.
    ///
    /// - Complexity: O(frames evicted + free slabs).
    public func setPressure(_ level: MemoryPressure) {
        let unmaps = locked { state -> [SlabUnmap] in
            state.pressure = level
            return state.pool.setBudget(state.configuration.budget(under: level))
        }
        for unmap in unmaps { perform(unmap) }
        shedExcess()
    }

    /// Evicts oldest frames (detaching pinned ones) while the pool is over its budget and some frame in the ring
    /// is unpinned, so memory falls to the budget as soon as pins allow.
    private func shedExcess() {
        inEvictionOrder { shedExcessInOrder() }
    }

    private func shedExcessInOrder() {
        while true {
            let slot = locked { state -> Slot? in
                guard state.pool.committedBytes > state.pool.budget, !state.slots.isEmpty, !state.allPinned else {
                    return nil
                }
                return state.removeOldest()
            }
            guard let slot else { return }
            deliver(slot)
        }
    }

    /// The ring's counters and byte accounting, read at one moment.
    public var statistics: RingStatistics {
        locked { $0.statistics }
    }

    /// The pts of the oldest frame in the ring whose sequence number is `sequence` or later, without pinning it;
    /// nil when the ring holds none.
    public func firstPTSNanoseconds(fromSequence sequence: UInt64) -> Int64? {
        locked { state -> Int64? in
            let index = state.slots.framesBefore(sequence: sequence)
            return index < state.slots.count ? state.slots[index].info.ptsNanoseconds : nil
        }
    }

    // MARK: Internals shared with handles and snapshots

    /// Hands a frame that left the ring to the eviction handler (outside the lock).
    private func deliver(_ slot: Slot) {
        onEvict(EvictedFrame(store: self, slot: slot))
    }

    /// An owner of a slab outside the ring (a `ReservedSlab` or an `EvictedFrame`) lets go of it.
    func releaseHold(_ id: SlabID) {
        if let unmap = locked({ $0.pool.release(id) }) { perform(unmap) }
    }

    /// Pins the frames at logical ring indices chosen by `range` (computed under the lock).
    func pinSlots(_ selectRange: (borrowing RingBuffer<Slot>) -> Range<Int>) -> [Slot] {
        locked { state -> [Slot] in
            let range = selectRange(state.slots)
            var pinned: [Slot] = []
            pinned.reserveCapacity(range.count)
            for index in range {
                let slot = state.slots[index]
                state.pool.pin(slot.slab)
                pinned.append(slot)
            }
            return pinned
        }
    }

    /// Removes the pins of a snapshot; while the pool is over its budget (after a cut), unmaps what that frees
    /// and evicts frames that are no longer pinned.
    func unpin(_ slots: [Slot]) {
        let unmaps = locked { state -> [SlabUnmap] in
            var unmaps: [SlabUnmap] = []
            for slot in slots {
                if let unmap = state.pool.unpin(slot.slab) { unmaps.append(unmap) }
            }
            return unmaps
        }
        for unmap in unmaps { perform(unmap) }
        // Called from inside the eviction handler, the order lock is taken: leave the shedding to the evictor.
        evictionOrder.withAnnotatedLockIfAvailable { _ in
            shedExcessInOrder()
        }
    }

    /// Runs one decision under the state lock; when it takes a frame out of the ring, hands that frame to the
    /// eviction handler (outside the state lock) before any other thread can take the next one.
    private func decide<Step: EvictionStep>(_ body: (inout RingState) -> Step) -> Step {
        inEvictionOrder {
            let step = locked { body(&$0) }
            if let slot = step.evictedSlot { deliver(slot) }
            return step
        }
    }

    /// Runs `body` under the state lock.
    private func locked<Result: Sendable>(_ body: (inout RingState) -> Result) -> Result {
        state.withAnnotatedLock { body(&$0) }
    }

    /// Runs `body` holding the eviction-order lock.
    private func inEvictionOrder<Result: Sendable>(_ body: () -> Result) -> Result {
        evictionOrder.withAnnotatedLock { _ in body() }
    }

    private func perform(_ unmap: SlabUnmap) {
        SlabPool.unmap(unmap.address, size: unmap.size)
        locked { $0.pool.finishUnmapping(unmap.id) }
    }

    /// Validates `info` against the last stored frame and evicts the frames it pushes out of the window.
    private func evictExpired(before info: FrameInfo) throws(FrameError) {
        while true {
            let step = decide { state -> ExpireStep in
                if let error = state.check(info) {
                    state.rejected.record(error)
                    return .reject(error)
                }
                guard let oldest = state.slots.first, state.isExpired(oldest, newest: info.ptsNanoseconds) else {
                    return .done
                }
                return .evict(state.removeOldest())
            }
            switch step {
            case .done: return
            case .evict: continue
            case .reject(let error): throw error
            }
        }
    }

    /// Finds a slab for `layout`: reuses a free one, maps a new one within the budget, or evicts older frames
    /// as the pin policy allows.
    private func makeReservation(_ layout: FrameLayout, dropReason: inout DropReason, countsDrop: Bool = true)
        -> ReservedSlab?
    {
        while true {
            let step = decide { state -> ReserveStep in
                let size = state.pool.slabSize(for: layout.byteCount)
                if size > state.pool.budget { return state.drop(.memoryBudget, counting: countsDrop) }
                switch state.pool.take(size: size) {
                case .reuse(let id, let address):
                    return .reserved(id, address)
                case .map(let id):
                    return .map(id, size)
                case .unmapFirst(let unmaps):
                    return .unmap(unmaps)
                case .exhausted:
                    guard let oldest = state.slots.first else {
                        return state.drop(
                            state.pool.pinnedOutsideBytes > 0 ? .pinnedFrames : .memoryBudget, counting: countsDrop)
                    }
                    if state.pool.isPinned(oldest.slab)
                        && (state.configuration.pinPolicy == .dropNewest || state.allPinned)
                    {
                        return state.drop(.pinnedFrames, counting: countsDrop)
                    }
                    return .evict(state.removeOldest())
                }
            }
            switch step {
            case .reserved(let id, let address):
                return ReservedSlab(store: self, slab: id, address: address, layout: layout)
            case .map(let id, let size):
                let address = SlabPool.map(size: size)
                locked { state in
                    state.pool.finishMapping(id, address: address)
                    if address == nil { state.refusedMappings += 1 }
                }
                // Refused by the system: the pool keeps to what it has mapped, and the frame gets a slab as under a
                // full budget (a free one, or the oldest frame's).
                guard let address else { continue }
                return ReservedSlab(store: self, slab: id, address: address, layout: layout)
            case .unmap(let unmaps):
                for unmap in unmaps { perform(unmap) }
            case .evict:
                continue
            case .drop(let reason):
                dropReason = reason
                return nil
            }
        }
    }
}

// MARK: - State

/// One frame in the ring: which slab holds its pixels, and everything else about it.
extension RingBuffer where Element == Slot {
    /// How many of the ring's frames come before the one numbered `sequence` (all of them when it is past the
    /// newest): the index of the oldest frame numbered `sequence` or later.
    func framesBefore(sequence: UInt64) -> Int {
        guard let first else { return 0 }
        return sequence <= first.sequence ? 0 : Int(min(UInt64(count), sequence - first.sequence))
    }
}

struct Slot: Sendable {
    let slab: SlabID
    let address: SlabAddress
    let layout: FrameLayout
    let info: FrameInfo
    let sequence: UInt64
}

/// A decision that may have taken a frame out of the ring.
private protocol EvictionStep: Sendable {
    var evictedSlot: Slot? { get }
}

private enum ExpireStep: EvictionStep {
    case done
    case evict(Slot)
    case reject(FrameError)
}

private enum ReserveStep: EvictionStep {
    case reserved(SlabID, SlabAddress)
    case map(SlabID, Int)
    case unmap([SlabUnmap])
    case evict(Slot)
    case drop(DropReason)
}

private enum CommitStep: EvictionStep {
    case stored(UInt64)
    case evict(Slot)
    case drop(DropReason, SlabUnmap?)
    case reject(FrameError, SlabUnmap?)
}

/// Everything behind the ring's lock.
struct RingState: ~Copyable {
    var pool: SlabPool
    var slots: RingBuffer<Slot>
    let configuration: RingConfiguration
    var pressure = MemoryPressure.normal
    var nextSequence: UInt64 = 1
    /// The pts of the newest frame ever stored (it may have left the ring): the next must be later.
    var lastStoredPTS: Int64?
    var appended: UInt64 = 0
    var evicted: UInt64 = 0
    var dropped = DropCounts()
    /// Slabs the system refused to map (``SlabPool/systemLimit``).
    var refusedMappings: UInt64 = 0
    var rejected = RejectionCounts()

    init(pool: consuming SlabPool, slots: consuming RingBuffer<Slot>, configuration: RingConfiguration) {
        self.pool = pool
        self.slots = slots
        self.configuration = configuration
    }

    /// Whether every frame in the ring is pinned (so evicting frees nothing).
    var allPinned: Bool { pool.pinnedRingSlabs == slots.count }

    /// The error `info` would be rejected with, if any.
    func check(_ info: FrameInfo) -> FrameError? {
        guard let nanoseconds = info.pts.nanoseconds else { return .ptsOutOfRange(info.pts) }
        precondition(
            nanoseconds == info.ptsNanoseconds,
            "FrameInfo.ptsNanoseconds \(info.ptsNanoseconds) disagrees with pts \(info.pts); build it with init")
        guard let last = lastStoredPTS else { return nil }
        if nanoseconds == last { return .duplicatePTS(nanoseconds: nanoseconds) }
        if nanoseconds < last { return .nonMonotonicPTS(previousNanoseconds: last, nanoseconds: nanoseconds) }
        return nil
    }

    /// Whether `slot` is older than the window before a frame at `newest`.
    func isExpired(_ slot: Slot, newest: Int64) -> Bool {
        let (threshold, overflow) = newest.subtractingReportingOverflow(configuration.windowNanoseconds)
        return !overflow && slot.info.ptsNanoseconds < threshold
    }

    /// Takes the oldest frame out of the ring; its slab stays held for the `EvictedFrame` made from it.
    mutating func removeOldest() -> Slot {
        let slot = slots.removeFirst()
        pool.leaveRing(slot.slab)
        evicted += 1
        return slot
    }

    fileprivate mutating func drop(_ reason: DropReason, counting: Bool) -> ReserveStep {
        if counting { dropped[reason] += 1 }
        return .drop(reason)
    }

    var statistics: RingStatistics {
        RingStatistics(
            frames: slots.count, frameCapacity: slots.capacity, pinnedFramesInRing: pool.pinnedRingSlabs,
            bytesInRing: pool.ringBytes, bytesOutsideRing: pool.outsideBytes,
            pinnedBytesOutsideRing: pool.pinnedOutsideBytes, reservedBytes: pool.reservedBytes,
            freeBytes: pool.freeBytes, unmappingBytes: pool.unmappingBytes, mappedBytes: pool.mappedBytes,
            budget: pool.budget, systemLimit: pool.systemLimit, refusedMappings: refusedMappings, pressure: pressure,
            appended: appended, evicted: evicted, dropped: dropped,
            rejected: rejected, firstPTSNanoseconds: slots.first?.info.ptsNanoseconds,
            lastPTSNanoseconds: slots.last?.info.ptsNanoseconds,
            newestSequence: nextSequence > 1 ? nextSequence - 1 : nil)
    }
}

extension ExpireStep {
    var evictedSlot: Slot? {
        if case .evict(let slot) = self { return slot }
        return nil
    }
}

extension ReserveStep {
    var evictedSlot: Slot? {
        if case .evict(let slot) = self { return slot }
        return nil
    }
}

extension CommitStep {
    var evictedSlot: Slot? {
        if case .evict(let slot) = self { return slot }
        return nil
    }
}
