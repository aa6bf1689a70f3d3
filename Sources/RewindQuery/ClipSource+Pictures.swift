import RewindCapture
import RewindCore
import RewindMedia
import SegmentStore

extension ClipSource {
    /// Where ``framePTS(_:_:)`` looks from a time.
    public enum FrameStep: Sendable, Hashable {
        /// The last frame at or before the time: the frame on screen at that instant.
        case atOrBefore
        /// The last frame strictly before the time: one step back.
        case before
        /// The first frame strictly after the time: one step forward.
        case after
    }

    /// The pts of the recorded frame nearest `time` in the direction `step` says, across memory and disk; nil
    /// when there is none that way.
    ///
    /// - Parameters:
    ///   - step: at or before, before, or after.
    ///   - time: nanoseconds on the stream clock.
    /// - Complexity: O(log n) on disk (one seek of the index); in memory, pins of at most a few frames.
    public func framePTS(_ step: FrameStep, _ time: Int64) throws -> Int64? {
        var candidates: [Int64] = []
        if let live, let inMemory = ClipSource.ringPTS(live.ring, step, time) {
            candidates.append(inMemory)
        }
        if let (store, row) = try storedStream() {
            let indexStep: StoreIndex.FrameStep =
                switch step {
                case .atOrBefore: .atOrBefore
                case .before: .before
                case .after: .after
                }
            let onDisk = try SegmentStoreError.translatingIndexErrors {
                try store.index.framePTS(streamID: row.id, indexStep, time)
            }
            if let onDisk { candidates.append(onDisk) }
        }
        return step == .after ? candidates.min() : candidates.max()
    }

    /// A picture of the frame at or before `time` (memory or disk), scaled to `width`, or nil when no frame is at or
    /// before it. Its height shows the frame at its shape (the stream's pixel aspect applied).
    ///
    /// - Parameters:
    ///   - time: nanoseconds on the stream clock.
    ///   - width: the picture's width, up to the frame's; nil keeps the frame's.
    ///   - format: JPEG or PNG.
    /// - Throws: ``FrameImageError`` for a bad width; store errors (a damaged frame is an error, never a picture).
    public func picture(at time: Int64, width: Int?, format: FrameImage.Format) throws -> FrameImage? {
        guard let pts = try framePTS(.atOrBefore, time) else { return nil }
        var picture: FrameImage?
        try frames(in: pts..<pts + 1) { frame in
            picture = try FrameImage(frame: frame, width: width, pixelAspect: stream.pixelAspect, format: format)
            return false
        }
        return picture
    }

    /// The pts of the ring's frame nearest `time` in the direction `step` says.
    private static func ringPTS(_ ring: RingStore, _ step: FrameStep, _ time: Int64) -> Int64? {
        let statistics = ring.statistics
        guard let first = statistics.firstPTSNanoseconds, let last = statistics.lastPTSNanoseconds else { return nil }
        switch step {
        case .after:
            guard time < last else { return nil }
            let snapshot = ring.pin(time + 1..<Int64.max, limit: 1)
            defer { snapshot.release() }
            return snapshot.firstPTSNanoseconds
        case .atOrBefore, .before:
            if step == .atOrBefore ? time >= last : time > last { return last }
            let end = step == .atOrBefore ? time + 1 : time  // exclusive; time < last here, so no overflow
            guard end > first else { return nil }
            // Look back in growing windows: frames are usually one frame duration apart.
            var window: Int64 = 1 << 26  // 67 ms
            while true {
                let start = max(first, end - window)
                let snapshot = ring.pin(start..<end, limit: .max)
                let found = snapshot.lastPTSNanoseconds
                snapshot.release()
                if let found { return found }
                if start == first { return nil }
                window = window > Int64.max / 4 ? Int64.max / 2 : window * 4
            }
        }
    }
}
