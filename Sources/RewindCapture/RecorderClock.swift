import RewindCore
import RewindSystem
import Synchronization

/// The recorder clock of one recording: the one clock every stream is mapped to.
///
/// It runs with the wall clock — read once when the recording starts, then advanced by the monotonic clock, so a
/// wall-clock step during the recording does not move it — and counts from the store's recorder time 0
/// (``epochWallNanoseconds``): the wall-clock time the store's streams' mappings share, or, for a store without
/// one, the time that puts the first stream's first frame at its own pts (so a store of one stream has recorder
/// time = pts).
final class RecorderClock: Sendable {
    private let startInstant = ContinuousClock.now
    private let startWall = System.wallClockNanoseconds()
    private let epoch: Mutex<Int64?>

    /// - Parameter epochWallNanoseconds: the store's recorder time 0 as a wall-clock time, nil for a store
    ///   without one (the first frame decides).
    init(epochWallNanoseconds: Int64?) {
        epoch = Mutex(epochWallNanoseconds)
    }

    /// The wall-clock time now as this clock runs: the start's wall time plus the monotonic time since.
    func nowWall() -> Int64 {
        let elapsed = ContinuousClock.now - startInstant
        return startWall &+ elapsed.nanosecondsClamped
    }

    /// The store's recorder time 0 (a wall-clock time), set to `candidate` when it has none yet.
    func epochWallNanoseconds(orSet candidate: Int64) -> Int64 {
        epoch.withLock { epoch in
            if let epoch { return epoch }
            epoch = candidate
            return candidate
        }
    }

    /// Recorder time now, nanoseconds; nil before the first frame of a store without a recorder clock.
    var now: Int64? {
        let wall = nowWall()
        return epoch.withLock { $0.map { wall - $0 } }
    }
}

/// How one stream's source pts become stream pts (stored) and recorder time, decided at its first frame.
///
/// A stream new to the store keeps its source's pts, and is placed on the recorder clock where its first frame
/// arrived. A stream the store already holds keeps its stored mapping: its first frame goes where the recorder
/// clock is now (after a `recorder stopped` gap), or right after its last stored frame if the clock is not past
/// it (a file recorded faster than real time), so the stream's pts keep rising across recordings.
final class StreamClockMapping: Sendable {
    let recorderClock: RecorderClock
    /// The mapping the store holds for the stream (or derives for an older build's stream), if any.
    let storedClock: StreamClock?
    /// The pts of the stream's newest stored frame, if any: the next recording continues after it.
    let lastStoredPTS: Int64?
    private let frameDuration: Int64
    private let isDecided = Atomic<Bool>(false)
    private let offset = Atomic<Int64>(0)
    private let decision = Mutex<Decision?>(nil)

    private struct Decision {
        var sessionOffset: Int64
        var clock: StreamClock
        var needsStoring: Bool
    }

    init(recorderClock: RecorderClock, storedClock: StreamClock?, lastStoredPTS: Int64?, frameDuration: Int64) {
        self.recorderClock = recorderClock
        self.storedClock = storedClock
        self.lastStoredPTS = lastStoredPTS
        self.frameDuration = max(1, frameDuration)
    }

    /// Puts a source frame on the stream clock (the first frame decides the mapping; later ones read one atomic).
    @inline(__always)
    func map(_ info: FrameInfo) -> FrameInfo {
        if !isDecided.load(ordering: .acquiring) { decide(first: info) }
        let offset = offset.load(ordering: .relaxed)
        guard offset != 0 else { return info }
        var mapped = info
        mapped.ptsNanoseconds = info.ptsNanoseconds &+ offset
        mapped.pts = FrameTime(nanoseconds: mapped.ptsNanoseconds)
        return mapped
    }

    /// Decides the mapping at the stream's first frame: it is placed on the recorder clock at its own wall-clock
    /// time (the capture time the frame carries, which is what its `wall_ns` stores), so wall-clock queries find
    /// exactly the frames captured then; a frame without one is placed at the time it arrived.
    private func decide(first: FrameInfo) {
        let firstPTS = first.ptsNanoseconds
        decision.withLock { decision in
            guard decision == nil else { return }
            let wall = first.wallNanoseconds > 0 ? first.wallNanoseconds : recorderClock.nowWall()
            let epoch = recorderClock.epochWallNanoseconds(orSet: wall - firstPTS)
            let now = wall - epoch
            if let storedClock {
                // The stored mapping counts from its own recorder time 0 (the same as the store's, unless an older
                // build's streams were derived from different first frames).
                var first = storedClock.pts(atRecorderTime: wall - storedClock.wallNanoseconds)
                if let lastStoredPTS { first = max(first, lastStoredPTS + frameDuration) }
                decision = Decision(
                    sessionOffset: first - firstPTS, clock: storedClock, needsStoring: true)
            } else {
                var sessionOffset: Int64 = 0
                if let lastStoredPTS, firstPTS <= lastStoredPTS {
                    sessionOffset = lastStoredPTS + frameDuration - firstPTS
                }
                let clock = StreamClock(
                    offsetNanoseconds: now - (firstPTS + sessionOffset), wallNanoseconds: epoch)
                decision = Decision(sessionOffset: sessionOffset, clock: clock, needsStoring: true)
            }
            offset.store(decision!.sessionOffset, ordering: .relaxed)
        }
        isDecided.store(true, ordering: .releasing)
    }

    /// Where the stream's pts lie on the recorder clock: decided at its first frame, or the stored mapping before.
    var clock: StreamClock? { decision.withLock { $0?.clock } ?? storedClock }

    /// What this recording adds to its source's pts; nil before the first frame.
    var sessionOffset: Int64? { decision.withLock { $0?.sessionOffset } }

    /// The mapping to store with the stream, once (the spill thread stores it before the first frame it writes).
    func takeClockToStore() -> StreamClock? {
        guard isDecided.load(ordering: .acquiring) else { return nil }
        return decision.withLock { decision in
            guard decision?.needsStoring == true else { return nil }
            decision?.needsStoring = false
            return decision?.clock
        }
    }
}
