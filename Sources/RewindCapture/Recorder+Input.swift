import Foundation
import RewindCore
import RewindSystem
import SegmentStore

/// How ``Recorder/record(from:options:shouldStop:progress:)`` reads its source.
public struct RecordLoopOptions: Sendable {
    /// Pace frames at their pts (a file played as if live). Otherwise read as fast as the pipeline allows.
    public var realtime: Bool
    /// Stop before the first frame whose pts is this far past the first frame's, nanoseconds.
    public var duration: Int64?
    /// When the spill stage falls behind, wait instead of dropping (for files; a live source must not wait).
    public var waitsForSpill: Bool

    public init(realtime: Bool = false, duration: Int64? = nil, waitsForSpill: Bool? = nil) {
        self.realtime = realtime
        self.duration = duration
        self.waitsForSpill = waitsForSpill ?? !realtime
    }
}

/// What a record loop read.
public struct RecordLoopResult: Sendable {
    /// Frames read from the source.
    public var framesRead = 0
    /// Frames the ring accepted.
    public var framesStored = 0
    /// Frames dropped on arrival (the recorder's statistics say why: spill behind, memory budget, pinned frames).
    public var framesDropped = 0
    /// Why the loop ended.
    public var endReason = "end of input"

    public init() {}
}

extension Recorder {
    /// Reads `source` frame by frame straight into pooled slabs (the zero-copy path) until it ends, `duration` is
    /// reached or `shouldStop` returns true.
    ///
    /// - Throws: the source's error (malformed or truncated input). Frames stored before it stay stored; call
    ///   ``finish()`` afterwards either way.
    @discardableResult
    public func record<Source: FrameSource>(
        from source: inout Source, options: RecordLoopOptions = .init(), shouldStop: () -> Bool = { false },
        progress: ((RecordLoopResult, Int64) -> Void)? = nil
    ) throws -> RecordLoopResult {
        precondition(source.stream.layout == stream.layout, "source layout \(source.stream.layout) != \(stream.layout)")
        var result = RecordLoopResult()
        var firstPTS: Int64?
        var startInstant: ContinuousClock.Instant?
        // Where a frame goes when the ring has no slab for it: read (to keep the input in step) and discarded.
        var scratch: [UInt8] = []
        while true {
            if shouldStop() {
                result.endReason = "stopped"
                break
            }
            if options.waitsForSpill { waitForSpillRoom(until: shouldStop) }
            /// Counts the frame and applies the duration limit and pacing; false ends the loop.
            func admit(_ info: FrameInfo) -> Bool {
                result.framesRead += 1
                let pts = info.ptsNanoseconds
                let first = firstPTS ?? pts
                firstPTS = first
                if let duration = options.duration, pts - first >= duration {
                    result.framesRead -= 1
                    result.endReason = "duration reached"
                    return false
                }
                if options.realtime {
                    let start = startInstant ?? ContinuousClock.now
                    startInstant = start
                    System.sleep(until: start + .nanoseconds(pts - first))
                }
                return true
            }
            if let reserved = reserve() {
                guard let info = try reserved.withUnsafeMutableBytes({ try source.readFrame(into: $0) }),
                    admit(info)
                else { break }
                switch try commit(reserved, info: info) {
                case .stored: result.framesStored += 1
                case .dropped: result.framesDropped += 1
                }
                progress?(result, info.ptsNanoseconds)
            } else {
                if scratch.isEmpty { scratch = [UInt8](repeating: 0, count: stream.layout.byteCount) }
                guard let info = try scratch.withUnsafeMutableBytes({ try source.readFrame(into: $0) }), admit(info)
                else { break }
                result.framesDropped += 1
                progress?(result, info.ptsNanoseconds)
            }
        }
        return result
    }

}
