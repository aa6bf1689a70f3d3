/// A pooled slab reserved for one frame, to be filled in place and committed to the ring: the zero-copy path.
///
/// It has one owner. Committing it (``RingStore/commit(_:info:)``) moves it into the ring; dropping it uncommitted
/// returns the slab to the pool. Its bytes are uninitialized or hold an older frame until written.
public struct ReservedSlab: ~Copyable, Sendable {
    // Unmanaged (retained once at creation, released once) so the value can be discarded when committed.
    private let store: Unmanaged<RingStore>
    private let slab: SlabID
    let address: SlabAddress
    /// The layout the slab was reserved for; it holds exactly `layout.byteCount` usable bytes.
    public let layout: FrameLayout

    init(store: RingStore, slab: SlabID, address: SlabAddress, layout: FrameLayout) {
        self.store = Unmanaged.passRetained(store)
        self.slab = slab
        self.address = address
        self.layout = layout
    }

    deinit {
        let store = store.takeRetainedValue()
        store.releaseHold(slab)
    }

    /// Calls `body` with the slab's `layout.byteCount` writable bytes; the pointer must not escape.
    public func withUnsafeMutableBytes<Result, Failure: Error>(
        _ body: (UnsafeMutableRawBufferPointer) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try body(UnsafeMutableRawBufferPointer(start: address.pointer, count: layout.byteCount))
    }

    /// Gives up ownership without returning the slab; the caller takes over the store's retain and the slab.
    consuming func disarm() -> (Unmanaged<RingStore>, SlabID, SlabAddress, FrameLayout) {
        let parts = (store, slab, address, layout)
        discard self
        return parts
    }
}

/// A frame that left the ring, handed by move to the eviction handler: its pixels, not a copy of them.
///
/// While this value lives, its slab stays out of the pool (and counts against the budget); when it is dropped the
/// slab returns to the pool, unless snapshots still pin it.
public struct EvictedFrame: ~Copyable, Sendable {
    private let store: Unmanaged<RingStore>
    private let slot: Slot

    init(store: RingStore, slot: Slot) {
        self.store = Unmanaged.passRetained(store)
        self.slot = slot
    }

    deinit {
        let store = store.takeRetainedValue()
        store.releaseHold(slot.slab)
    }

    /// The frame's sequence number in the ring.
    public var sequence: UInt64 { slot.sequence }
    /// The frame's format, size and plane layout in its slab.
    public var layout: FrameLayout { slot.layout }
    /// The frame's pts, wall-clock capture time and colour.
    public var info: FrameInfo { slot.info }

    /// Calls `body` with a view of the frame; the view must not escape.
    public func withView<Result, Failure: Error>(_ body: (FrameView) throws(Failure) -> Result) throws(Failure)
        -> Result
    {
        try body(slot.view)
    }
}

extension Slot {
    /// A read-only view of the frame's bytes in its slab.
    var view: FrameView {
        FrameView(
            layout: layout, info: info,
            bytes: UnsafeRawBufferPointer(start: UnsafeRawPointer(address.pointer), count: layout.byteCount))
    }
}
