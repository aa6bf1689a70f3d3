import RewindCore
import SegmentStore

extension Recorder {
    /// Per stream, the share of `configuration`'s memory budget its spill encoder's output buffer takes from the
    /// rings: every buffer's full size when the budget holds them all and four frames of each stream besides, else
    /// 0 for every stream (rings of a few frames keep them all, and the buffers are outside the budget).
    static func encoderShares(
        of configuration: RecorderConfiguration, store: SegmentStore?, streams: [StreamDescription]
    ) -> [Int] {
        guard let store else { return streams.map { _ in 0 } }
        let buffers = streams.map { store.encoderOutputBytes(for: $0.layout) }
        let floors = streams.reduce(0) { $0 + 4 * smallestMemoryBudget(for: $1.layout) }
        return configuration.memoryBudget >= buffers.reduce(0, +) + floors ? buffers : streams.map { _ in 0 }
    }

    /// The memory the recorder's budget allows under `level`: every stream's (``RecorderStream/memoryBudget(under:)``:
    /// its ring's share, plus its encoder's output buffer when that counts in the budget): at most
    /// ``RecorderConfiguration/memoryBudget``, all of it (to rounding) when there is no pressure.
    ///
    /// - Parameter level: a pressure level.
    /// - Returns: bytes.
    public func memoryBudget(under level: MemoryPressure) -> Int {
        streams.reduce(0) { $0 + $1.memoryBudget(under: level) }
    }
}

extension RecorderStream {
    /// The stream's spill encoder's output buffer under `level`: all of it normally, half under warning pressure,
    /// none under critical pressure (chunks are then stored raw, written straight from the ring).
    func encoderCapacity(under level: MemoryPressure) -> Int {
        let full = store?.encoderOutputBytes(for: stream.layout) ?? 0
        switch level {
        case .normal: return full
        case .warning: return full / 2
        case .critical: return 0
        }
    }

    /// The memory this stream's share of the budget allows under `level`: its ring's budget, plus its encoder's
    /// output buffer when it counts in the budget.
    ///
    /// - Parameter level: a pressure level.
    /// - Returns: bytes.
    public func memoryBudget(under level: MemoryPressure) -> Int {
        ring.configuration.budget(under: level) + (encoderBytes > 0 ? encoderCapacity(under: level) : 0)
    }
}
