import Testing

@testable import RewindCore

@Suite struct RingBufferTests {
    /// Makes a buffer of `capacity` whose head sits at storage index `head`, holding `count` elements
    /// `first, first + 1, …`.
    static func makeBuffer(capacity: Int, head: Int, count: Int, first: Int = 100) -> RingBuffer<Int> {
        var buffer = RingBuffer<Int>(capacity: capacity)
        for value in 0..<head {
            buffer.append(value)
            _ = buffer.removeFirst()
        }
        for value in 0..<count { buffer.append(first + value) }
        return buffer
    }

    @Test(arguments: [1, 2, 3, 5, 10])
    func everyWrapAroundLayout(capacity: Int) {
        for head in 0..<capacity {
            for count in 0...capacity {
                var buffer = Self.makeBuffer(capacity: capacity, head: head, count: count)
                #expect(buffer.head == head)
                #expect(buffer.count == count)
                #expect(buffer.isEmpty == (count == 0))
                #expect(buffer.isFull == (count == capacity))
                #expect(buffer.freeCapacity == capacity - count)
                #expect(buffer.tail == (head + count) % capacity)
                #expect((0..<count).map { buffer[$0] } == Array(100..<100 + count))
                #expect(buffer.first == (count > 0 ? 100 : nil))
                #expect(buffer.last == (count > 0 ? 100 + count - 1 : nil))
                for split in 0...count {
                    #expect(buffer.partitioningIndex { $0 < 100 + split } == split)
                }
                // Turn the whole buffer over once more: still in order through the wrap.
                var removed: [Int] = []
                for step in 0..<capacity {
                    if buffer.isFull { removed.append(buffer.removeFirst()) }
                    buffer.append(100 + count + step)
                }
                while !buffer.isEmpty { removed.append(buffer.removeFirst()) }
                #expect(removed == Array(100..<100 + count + capacity))
                #expect(buffer.isEmpty && buffer.freeCapacity == capacity)
            }
        }
    }

    final class Tracked {
        let onDeinit: () -> Void
        init(_ onDeinit: @escaping () -> Void) { self.onDeinit = onDeinit }
        deinit { onDeinit() }
    }

    @Test(arguments: [1, 3, 5])
    func deinitReleasesExactlyTheStoredElements(capacity: Int) {
        for head in 0..<capacity {
            var released = 0
            do {
                var buffer = RingBuffer<Tracked>(capacity: capacity)
                for _ in 0..<head {
                    buffer.append(Tracked { released += 1 })
                    _ = buffer.removeFirst()
                }
                #expect(released == head)
                for _ in 0..<capacity { buffer.append(Tracked { released += 1 }) }
                #expect(released == head)
            }
            #expect(released == head + capacity)
        }
    }

    @Test func appendingToAFullBufferTraps() async {
        await #expect(processExitsWith: .failure) {
            var buffer = RingBuffer<Int>(capacity: 2)
            buffer.append(1)
            buffer.append(2)
            buffer.append(3)
        }
    }
}
