import RewindCore
import RewindSystem
import Synchronization

/// The recorder clock of one recording: the one clock every stream is mapped to.
///
/// It runs with the wall clock — read once when the recording starts, then advanced by the monotonic clock, so a
/// wall-clock step during the recording does not move it — and counts from the store's recorder time 0: the
/// wall-clock time the store's streams' mappings share (``StreamClock/wallNanoseconds``). A store without one gets
/// it at the first frame of its first stream, which is placed at its own pts (so a store of one stream has recorder
/// time = pts): recorder time 0 is then that frame's capture time minus its pts for wall-clock queries (as they
/// always mapped), and its arrival minus its pts for placing the other streams' first frames by when they arrive.
///
/// The clock never runs before what the store holds: after a file recorded faster than real time (60 s of frames
/// in one), recorder time by the wall clock would fall inside that file. The recording's first frame then arrives
/// at the store's end, and the clock runs ``lead`` ahead of the wall clock from there — every stream it records,
/// continued or new, placed together after what is stored.
final class RecorderClock: Sendable {
    private let startInstant = ContinuousClock.now
    private let startWall = System.wallClockNanoseconds()
    /// The recorder time just after everything the store holds, if it holds frames.
    private let storedEnd: Int64?
    private let state: Mutex<State>

    private struct State {
        /// Recorder time 0 as the wall-clock time frames arrive by, and as the stored one (capture times).
        var epochs: (arrival: Int64, stored: Int64)?
        /// How far ahead of the wall clock the recording runs, decided at its first frame.
        var lead: Int64?
    }

    /// The largest lead taken: a century, so that wall time plus lead stays far from overflowing.
    static let maximumLead: Int64 = 100 * 366 * 86_400 * 1_000_000_000

    /// - Parameters:
    ///   - epochWallNanoseconds: the store's recorder time 0 as a wall-clock time, nil for a store without one
    ///     (the first frame decides).
    ///   - storedEnd: the recorder time just after everything the store holds (``SegmentStore/recorderTimeEnd()``),
    ///     nil for a store without frames.
    init(epochWallNanoseconds: Int64?, storedEnd: Int64? = nil) {
        state = Mutex(State(epochs: epochWallNanoseconds.map { ($0, $0) }))
        self.storedEnd = storedEnd
    }

    /// The wall-clock time now: the start's wall time plus the monotonic time since.
    private func wallNow() -> Int64 {
        let elapsed = ContinuousClock.now - startInstant
        return startWall &+ elapsed.nanosecondsClamped
    }

    /// How far recorder time on the wall clock at `wall` is behind the store's end (0 when it is not).
    private func lead(at wall: Int64, _ state: State) -> Int64 {
        if let lead = state.lead { return lead }
        guard let storedEnd, let epoch = state.epochs?.arrival else { return 0 }
        return min(max(0, storedEnd.addingSaturating(-(wall &- epoch))), Self.maximumLead)
    }

    /// How far ahead of the wall clock this recording runs, nanoseconds: 0 unless the store ends after recorder
    /// time by the wall clock; until the first frame decides it, what it would be now.
    var lead: Int64 { state.withAnnotatedLock { lead(at: wallNow(), $0) } }

    /// The time a stream's first frame (`pts`, captured at `capture`, 0 when unknown) arrives, on the wall clock
    /// plus the lead (which the recording's first frame decides), and recorder time 0 for placing arrivals and as
    /// stored, set from this frame when the store has none yet.
    ///
    /// The time is read under the lock that sets time 0: a stream whose first frame comes while another's sets it
    /// never arrives before that one did (read outside, it could, by a few nanoseconds: a first frame at recorder
    /// time −108 ns, which no Matroska export can hold).
    func arrival(ofFirstFrameAt pts: Int64, capture: Int64) -> (arrival: Int64, epochs: (arrival: Int64, stored: Int64))
    {
        state.withAnnotatedLock { state in
            let wall = wallNow()
            let lead = lead(at: wall, state)
            state.lead = lead
            let arrival = wall &+ lead
            if let epochs = state.epochs { return (arrival, epochs) }
            let set = (arrival: arrival - pts, stored: (capture > 0 ? capture : arrival) - pts)
            state.epochs = set
            return (arrival, set)
        }
    }

    /// Recorder time now, nanoseconds; nil before the first frame of a store that had no recorder clock.
    var now: Int64? {
        state.withAnnotatedLock { state in
            let wall = wallNow()
            return state.epochs.map { wall &+ lead(at: wall, state) - $0.arrival }
        }
    }
}

/// How one stream's source pts become stream pts (stored) and recorder time, decided at its first frame.
///
/// A stream new to the store keeps its source's pts, and is placed on the recorder clock where its first frame
/// arrived. A stream the store already holds keeps its stored mapping: its first frame goes where the recorder
/// clock is now (after a `recorder stopped` gap; the clock never runs before the store's end), and never before a
/// frame after its last stored one, so the stream's pts keep rising across recordings.
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
    ///
    /// - Throws: ``FrameError/ptsOutOfRange(_:)`` for a frame the stream clock would put past
    ///   ``FrameInfo/longestStreamTimeNanoseconds`` (a source's own time, or a recording continuing a stream).
    @inline(__always)
    func map(_ info: FrameInfo) throws(FrameError) -> FrameInfo {
        if !isDecided.load(ordering: .acquiring) { decide(firstPTS: info.ptsNanoseconds, wall: info.wallNanoseconds) }
        let offset = offset.load(ordering: .relaxed)
        let pts = info.ptsNanoseconds.addingSaturating(offset)
        guard pts <= FrameInfo.longestStreamTimeNanoseconds else {
            throw .ptsOutOfRange(FrameTime(nanoseconds: pts))
        }
        guard offset != 0 else { return info }
        var mapped = info
        mapped.ptsNanoseconds = pts
        mapped.pts = FrameTime(nanoseconds: mapped.ptsNanoseconds)
        return mapped
    }

    /// Decides the mapping at the first frame, placed on the recorder clock when it arrives (`frameWall`, its
    /// capture time, sets the store's recorder time 0 for wall-clock queries when the store has none).
    private func decide(firstPTS: Int64, wall frameWall: Int64) {
        decision.withAnnotatedLock { decision in
            guard decision == nil else { return }
            let (arrival, epochs) = recorderClock.arrival(ofFirstFrameAt: firstPTS, capture: frameWall)
            if let storedClock {
                // The stored mapping counts from its own recorder time 0 (the same as the store's, unless an older
                // build's streams were derived from different first frames).
                var first = storedClock.pts(atRecorderTime: arrival - storedClock.wallNanoseconds)
                if let lastStoredPTS { first = max(first, lastStoredPTS.addingSaturating(frameDuration)) }
                decision = Decision(
                    sessionOffset: first.addingSaturating(-firstPTS), clock: storedClock, needsStoring: true)
            } else {
                var sessionOffset: Int64 = 0
                if let lastStoredPTS, firstPTS <= lastStoredPTS {
                    sessionOffset = lastStoredPTS.addingSaturating(frameDuration).addingSaturating(-firstPTS)
                }
                let clock = StreamClock(
                    offsetNanoseconds: (arrival - epochs.arrival).addingSaturating(
                        -firstPTS.addingSaturating(sessionOffset)),
                    wallNanoseconds: epochs.stored)
                decision = Decision(sessionOffset: sessionOffset, clock: clock, needsStoring: true)
            }
            offset.store(decision!.sessionOffset, ordering: .relaxed)
        }
        isDecided.store(true, ordering: .releasing)
    }

    /// Where the stream's pts lie on the recorder clock: decided at its first frame, or the stored mapping before.
    var clock: StreamClock? { decision.withAnnotatedLock { $0?.clock } ?? storedClock }

    /// What this recording adds to its source's pts; nil before the first frame.
    var sessionOffset: Int64? { decision.withAnnotatedLock { $0?.sessionOffset } }

    /// The mapping to store with the stream, once (the spill thread stores it before the first frame it writes).
    func takeClockToStore() -> StreamClock? {
        guard isDecided.load(ordering: .acquiring) else { return nil }
        return decision.withAnnotatedLock { decision in
            guard decision?.needsStoring == true else { return nil }
            decision?.needsStoring = false
            return decision?.clock
        }
    }
}
