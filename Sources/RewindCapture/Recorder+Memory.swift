import RewindCore
import SegmentStore

extension Recorder {
    /// The share of `configuration`'s memory budget the spill encoder's output buffer takes from the ring: the
    /// buffer's full size when the budget holds it and four frames besides, else 0 (a ring of a few frames keeps
    /// them all, and the buffer is outside the budget).
    static func encoderShare(
        of configuration: RecorderConfiguration, store: SegmentStore?, layout: FrameLayout, slabBytes: Int
    ) -> Int {
        guard let store else { return 0 }
        let bytes = store.encoderOutputBytes(for: layout)
        return configuration.memoryBudget >= bytes + 4 * slabBytes ? bytes : 0
    }

    /// The spill encoder's output buffer under `level`: all of it normally, half under warning pressure, none
    /// under critical pressure (chunks are then stored raw, written straight from the ring).
    func encoderCapacity(under level: MemoryPressure) -> Int {
        let full = store?.encoderOutputBytes(for: stream.layout) ?? 0
        switch level {
        case .normal: return full
        case .warning: return full / 2
        case .critical: return 0
        }
    }

    /// The memory the recorder's budget allows under `level`: the ring's budget, plus the encoder's output buffer
    /// when it counts in the budget (``RecorderConfiguration/memoryBudget`` when there is no pressure).
    ///
    /// - Parameter level: a pressure level.
    /// - Returns: bytes.
    public func memoryBudget(under level: MemoryPressure) -> Int {
        ring.configuration.budget(under: level) + (encoderBytes > 0 ? encoderCapacity(under: level) : 0)
    }
}
