import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore
import Synchronization

/// One bit per camera frame index, allocated once.
struct FrameBitset: Sendable {
    private var words: [UInt64]
    let count: Int

    init(count: Int) {
        self.count = count
        words = [UInt64](repeating: 0, count: (count + 63) / 64)
    }

    subscript(index: Int) -> Bool {
        get { words[index >> 6] & (1 << UInt64(index & 63)) != 0 }
        set {
            if newValue {
                words[index >> 6] |= 1 << UInt64(index & 63)
            } else {
                words[index >> 6] &= ~(1 << UInt64(index & 63))
            }
        }
    }

    /// Calls `body` with every index set here and not in `other`, in order.
    func forEach(notIn other: FrameBitset, _ body: (Int) -> Void) {
        for word in words.indices {
            var bits = words[word] & ~other.words[word]
            while bits != 0 {
                body(word * 64 + bits.trailingZeroBitCount)
                bits &= bits - 1
            }
        }
    }
}

/// What reading the frames back found: which camera frames were read intact, from disk or from memory, and which
/// were not.
struct Readback: Sendable {
    /// Camera frames read back bit-exact at least once (from disk or memory).
    var verified: FrameBitset
    /// Camera frames of which a copy was not intact (or could not be read).
    var damaged: FrameBitset
    var framesVerified = 0
    var copiesFromDisk = 0
    var copiesFromMemory = 0
    /// Copies that were not bit-exact (or carried another frame's pts, or could not be read at all).
    var corruptCopies = 0
    /// The first problems, described (at most ``maximumProblems``).
    var problems: [String] = []
    /// The next pts to read from the store.
    var diskCursor: Int64 = 0
    /// The pts of the first frame ever read from the store.
    var firstDiskPTS: Int64?
    /// Every gap row seen on a pass, by start and reason, with the furthest end seen: retention deletes a gap with
    /// the segments around it once their frames are read back, but the frames it stands for were still lost.
    private var gapsSeen: [GapStart: GapRow] = [:]
    let frameDuration: FrameTime
    let sabotage: SoakConfiguration.Sabotage?
    /// The frame the `lose-frame` sabotage pretends never to have seen.
    var ignoredIndex: Int?
    /// Where the `corrupt-frame` sabotage damages a copy (allocated when needed).
    private var scratch: [UInt8] = []

    static let maximumProblems = 10

    init(frameCount: Int, frameDuration: FrameTime, sabotage: SoakConfiguration.Sabotage?) {
        verified = FrameBitset(count: frameCount)
        damaged = FrameBitset(count: frameCount)
        self.frameDuration = frameDuration
        self.sabotage = sabotage
    }

    enum Origin: String {
        case disk
        case memory
    }

    /// Checks one copy of a frame: its mark must be intact and name a frame of this run whose pts is the copy's.
    mutating func check(_ view: FrameView, from origin: Origin) {
        let pts = view.info.ptsNanoseconds
        if origin == .disk && copiesFromDisk == 0 && corruptCopies == 0 {
            switch sabotage {
            case .corruptFrame:
                // Deliberately damage the first copy read from disk: one bit, in a copy.
                scratch = Array(view.bytes)
                scratch[scratch.count / 2] ^= 0x10
                let damaged = scratch.withUnsafeBytes { bytes in
                    SyntheticCamera.verify(FrameView(layout: view.layout, info: view.info, bytes: bytes))
                }
                if damaged == nil {
                    noteCorrupt(
                        at: pts, "frame at pts \(formatSeconds(pts)) read from disk is not bit-exact (sabotaged)")
                    return
                }
            case .loseFrame:
                if ignoredIndex == nil, let mark = SyntheticCamera.verify(view) {
                    ignoredIndex = Int(mark.index)
                }
            case .retainBuffers, nil:
                break
            }
        }
        guard let mark = SyntheticCamera.verify(view), mark.index >= 0, mark.index < Int64(verified.count),
            FrameTime.frame(mark.index, duration: frameDuration)?.nanoseconds == pts
        else {
            noteCorrupt(at: pts, "frame at pts \(formatSeconds(pts)) read from \(origin.rawValue) is not bit-exact")
            return
        }
        switch origin {
        case .disk: copiesFromDisk += 1
        case .memory: copiesFromMemory += 1
        }
        let index = Int(mark.index)
        if index != ignoredIndex && !verified[index] {
            verified[index] = true
            framesVerified += 1
        }
    }

    /// Counts a copy that is not intact; the frame it stands for (by its pts) is marked damaged, not missing.
    mutating func noteCorrupt(at pts: Int64?, _ problem: String) {
        corruptCopies += 1
        if let pts, let index = frameIndex(ofPTS: pts) { damaged[index] = true }
        note(problem)
    }

    /// The index of the camera frame of this run whose pts is `pts`, if there is one.
    func frameIndex(ofPTS pts: Int64) -> Int? {
        guard pts >= 0, frameDuration.value > 0 else { return nil }
        let guess = Int128(pts) * Int128(frameDuration.timescale) / (Int128(frameDuration.value) * 1_000_000_000)
        for candidate in [guess, guess + 1] where candidate < Int128(verified.count) {
            if FrameTime.frame(Int64(candidate), duration: frameDuration)?.nanoseconds == pts { return Int(candidate) }
        }
        return nil
    }

    mutating func note(_ problem: String) {
        if problems.count < Self.maximumProblems { problems.append(problem) }
    }

    private struct GapStart: Hashable {
        let startNanoseconds: Int64
        let reason: LossReason
    }

    /// Notes `rows`, the store's gaps now; a gap seen before with the same start and reason keeps the furthest end.
    mutating func noteGaps(_ rows: [GapRow]) {
        for row in rows {
            let key = GapStart(startNanoseconds: row.startNanoseconds, reason: row.reason)
            if let seen = gapsSeen[key], seen.endNanoseconds >= row.endNanoseconds { continue }
            gapsSeen[key] = row
        }
    }

    /// The store's gaps now (`stored`) and every gap seen on a pass that overlaps none of them (deleted since by
    /// retention), in order of start.
    func gaps(with stored: [GapRow]) -> [GapRow] {
        let deleted = gapsSeen.values.filter { seen in
            !stored.contains {
                $0.startNanoseconds < seen.endNanoseconds && seen.startNanoseconds < $0.endNanoseconds
                    || $0.startNanoseconds == seen.startNanoseconds
            }
        }
        return (stored + deleted).sorted { $0.startNanoseconds < $1.startNanoseconds }
    }

    /// Reads every frame the store holds from ``diskCursor`` on, checking each, then notes the store's gaps.
    ///
    /// A frame the store cannot read (damaged) is counted as corrupt and skipped: the next pass starts after it.
    mutating func readStore(_ store: SegmentStore, stream: StreamRow) {
        // After the frames: the gaps up to the cursor are still held against retention until this pass ends.
        defer { if let rows = try? store.gaps(streamName: stream.name) { noteGaps(rows) } }
        // The cursor is one past the last frame read: the next frame is a frame time later, so only a first stored
        // frame later than that (by more than half a frame time) means unread frames were deleted.
        let frameTime = stream.description.frameDuration.nanoseconds ?? 0
        if firstDiskPTS != nil, let first = try? store.summary(streamName: stream.name).firstPTS,
            first > diskCursor - 1 + frameTime + frameTime / 2
        {
            note(
                "retention deleted the frames from pts \(formatSeconds(diskCursor)) to \(formatSeconds(first)) before "
                    + "they were read back; give a larger --disk")
        }
        do {
            try store.frames(streamName: stream.name, in: diskCursor..<Int64.max) { view in
                if firstDiskPTS == nil { firstDiskPTS = view.info.ptsNanoseconds }
                diskCursor = view.info.ptsNanoseconds + 1
                check(view, from: .disk)
                return true
            }
        } catch {
            var next: Int64?
            try? store.index.frames(streamID: stream.id, in: diskCursor..<Int64.max) { row in
                next = row.ptsNanoseconds
                return false
            }
            let problem = "reading the store from pts \(formatSeconds(diskCursor)): \(error)"
            if let next {
                noteCorrupt(at: next, problem)
                diskCursor = next + 1
            } else {
                // Not a damaged frame (nothing left to read): what was not read counts as missing.
                note(problem)
            }
        }
    }
}

/// Reads frames back from the store while the run goes on, soon after they become durable (before retention may
/// delete their segments), and once more at the end.
///
/// Its ``Readback`` belongs to its thread while it runs and is handed over by ``finish()``.
final class ReadbackThread: Sendable {
    private let store: SegmentStore
    private let stream: StreamRow
    private let initial: Mutex<Readback?>
    private let result = Mutex<Readback?>(nil)
    private let isFinishing = Atomic<Bool>(false)
    private let wakeup = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    /// The time between passes: long enough that re-reading from the key frame before each pass's first frame
    /// (up to the key interval) costs little.
    static let interval = DispatchTimeInterval.seconds(1)

    init(store: SegmentStore, stream: StreamRow, readback: Readback) {
        self.store = store
        self.stream = stream
        initial = Mutex(readback)
    }

    func start() throws(ThreadStartFailed) {
        try Threads.start(named: "rewind-soak-readback") { [self] in
            var readback = initial.withAnnotatedLock { $0.take()! }
            // What is not read back yet is held against retention: at max speed a second of wall time is many
            // segments, which a small --disk would otherwise delete before they are read.
            var hold = store.addHold(streamName: stream.name, range: Int64.min..<Int64.max)
            while true {
                let isLast = isFinishing.load(ordering: .acquiring)
                readback.readStore(store, stream: stream)
                let next = store.addHold(streamName: stream.name, range: readback.diskCursor..<Int64.max)
                store.removeHold(hold)
                hold = next
                if isLast { break }
                _ = wakeup.wait(timeout: .now() + Self.interval)
            }
            store.removeHold(hold)
            result.withAnnotatedLock { $0 = readback }
            done.signal()
        }
    }

    /// Makes a last pass over everything the store holds (call after the recorder finished) and hands the result
    /// over.
    func finish() -> Readback {
        isFinishing.store(true, ordering: .releasing)
        wakeup.signal()
        done.wait()
        return result.withAnnotatedLock { $0.take()! }
    }
}
