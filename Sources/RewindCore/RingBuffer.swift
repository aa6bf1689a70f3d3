/// A fixed-capacity circular buffer of elements: the slots of the ring store.
///
/// It never grows. Appending to a full buffer is a programming error and traps; callers check ``isFull`` and evict
/// (explicitly, and counted) first.
///
/// ## Implementation Notes
///
/// The elements live in one allocation of `capacity` slots, made once. `head` is the storage index of the oldest
/// element and `count` how many there are; the newest is at `(head + count - 1) % capacity`, and the next append
/// goes to `tail = (head + count) % capacity`. Logical index `i` (0 = oldest) is storage index
/// `(head + i) % capacity`.
///
/// Contiguous (`head + count <= capacity`):
///
///     storage:  [ . | . | A | B | C | D | . | . ]
///                       ^head           ^tail         count = 4
///
/// Wrapped (`head + count > capacity`): the oldest elements sit at the end of storage, the newest at its start.
///
///     storage:  [ E | F | . | . | . | A | B | C | D ]
///                       ^tail       ^head               count = 6
///
/// Full: `tail == head` and `count == capacity`; empty: `count == 0`. Only the slots in `head ..< head + count`
/// (mod capacity) are initialized; `removeFirst` deinitializes the slot it leaves.
struct RingBuffer<Element>: ~Copyable {
    private let storage: UnsafeMutablePointer<Element>
    /// The number of slots, fixed at creation.
    let capacity: Int
    /// Storage index of the oldest element.
    private(set) var head = 0
    /// Number of elements stored.
    private(set) var count = 0

    /// Makes an empty buffer of `capacity` slots (at least one).
    init(capacity: Int) {
        precondition(capacity > 0, "ring capacity must be positive, got \(capacity)")
        self.capacity = capacity
        self.storage = UnsafeMutablePointer<Element>.allocate(capacity: capacity)
    }

    deinit {
        var index = head
        for _ in 0..<count {
            (storage + index).deinitialize(count: 1)
            index = index + 1 == capacity ? 0 : index + 1
        }
        storage.deallocate()
    }

    var isEmpty: Bool { count == 0 }
    var isFull: Bool { count == capacity }
    /// How many more elements fit before the buffer is full.
    var freeCapacity: Int { capacity - count }
    /// Storage index where the next append goes.
    var tail: Int { storageIndex(count) }

    private func storageIndex(_ logical: Int) -> Int {
        let raw = head + logical
        return raw >= capacity ? raw - capacity : raw
    }

    /// The element at logical index `index` (0 = oldest).
    subscript(index: Int) -> Element {
        get {
            precondition(index >= 0 && index < count, "ring index \(index) out of range 0..<\(count)")
            return storage[storageIndex(index)]
        }
    }

    /// The oldest element, if any.
    var first: Element? { isEmpty ? nil : storage[head] }
    /// The newest element, if any.
    var last: Element? { isEmpty ? nil : storage[storageIndex(count - 1)] }

    /// Appends `element` as the newest. The buffer must not be full.
    mutating func append(_ element: Element) {
        precondition(!isFull, "ring buffer overflow: capacity \(capacity) reached; evict before appending")
        (storage + storageIndex(count)).initialize(to: element)
        count += 1
    }

    /// Removes and returns the oldest element. The buffer must not be empty.
    mutating func removeFirst() -> Element {
        precondition(!isEmpty, "removeFirst on an empty ring buffer")
        let element = (storage + head).move()
        head = head + 1 == capacity ? 0 : head + 1
        count -= 1
        return element
    }

    /// The first logical index whose element is not `isBelow` (elements must be partitioned: all that are below
    /// come first), or `count`.
    ///
    /// - Complexity: O(log count).
    func partitioningIndex(where isBelow: (Element) -> Bool) -> Int {
        var low = 0
        var high = count
        while low < high {
            let middle = low + (high - low) / 2
            if isBelow(storage[storageIndex(middle)]) { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
