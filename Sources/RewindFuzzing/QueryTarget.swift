import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore

extension FuzzTarget {
    /// Clips across memory and disk, against a model of what was recorded: the promise that a range gives exactly
    /// the frames recorded in it, each once, in order, bit-exact, wherever each one is at that moment.
    ///
    /// Input: four bytes of settings (spill `eager` or `on-evict`; a window of 1–16 frames; a memory budget of one frame (in whole
    /// pages, the smallest a recorder takes) and up to 31 more; segments of 100–800 ms), then operations, a byte each and their operands: append 1–64 frames (waiting
    /// for the spill's room, as a recorder of a file does), skip 1–64 frame times (a gap), query a range (each end at,
    /// just before or just after a frame's pts, or halfway to the next), set the memory pressure. Holds: every query
    /// answers exactly the frames the model holds in its range, each carrying its own index and intact pixels; at the
    /// end, with everything written, the whole recording comes back from the recorder and from the store on disk;
    /// every frame the recorder counted as dropped is one the model did not keep, and every frame it did keep is
    /// there.
    static let query = FuzzTarget(
        name: "query",
        summary: "clips across memory and disk of a recorder the input drives: gaps, tiny windows, pressure",
        seeds: QuerySeeds.patterns
    ) { input, scratch throws(FuzzFailure) in
        let directory = try scratch.makeFolder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var run = try QueryRun(&input, directory: directory)
        try run.play(&input)
    }
}

/// One recording of the `query` target and the model it is checked against.
/// What a run of the `query` target did: frames recorded, queries made while recording, and where the frames those
/// read came from.
struct QuerySummary: Sendable, Hashable {
    var accepted = 0
    var queries = 0
    var fromMemory = 0
    var fromDisk = 0
}

struct QueryRun {
    let recorder: Recorder
    let store: SegmentStore
    var feed: CameraFeed
    /// The indexes of the frames the recorder accepted, in order.
    var accepted: [Int64] = []
    /// Frames the recorder refused at append (counted as drops by it).
    var refused = 0
    /// What the run did, for the tests of the seeds.
    var summary = QuerySummary()

    init(_ input: inout FuzzInput, directory: String) throws(FuzzFailure) {
        let spill: SpillPolicy = input.byte() & 1 == 0 ? .eager : .onEvict
        let windowFrames = Int64(input.byte() % 16) + 1
        let budgetFrames = Int(input.byte() % 32)
        let segment = Duration.milliseconds(100 * (Int(input.byte() % 8) + 1))
        do {
            feed = try CameraFeed(width: 64, height: 16, fps: 30)
            // The smallest budget a recorder takes (one frame, in whole pages), and up to 31 frames more.
            let budget =
                Recorder.smallestMemoryBudget(for: [feed.stream.layout])
                + feed.stream.layout.byteCount * budgetFrames
            store = try SegmentStore.open(
                directory: directory, options: StoreOptions(segmentMaxDuration: segment, syncInterval: segment))
            let frame = feed.stream.frameStepNanoseconds
            recorder = try Recorder(
                stream: feed.stream, store: store,
                configuration: RecorderConfiguration(
                    window: .nanoseconds(frame * windowFrames), memoryBudget: budget, spill: spill))
        } catch {
            throw FuzzFailure("cannot start the recorder the query target needs: \(error)")
        }
    }

    /// The pts of frame `index`.
    func pts(_ index: Int64) -> Int64 { feed.pts(index) }

    /// Runs the operations of `input`, then the checks of the whole recording.
    ///
    /// - Returns: what the run did.
    @discardableResult
    mutating func play(_ input: inout FuzzInput) throws(FuzzFailure) -> QuerySummary {
        var operations = 0
        while !input.isEmpty && operations < 256 {
            operations += 1
            let operation = input.byte()
            switch operation % 4 {
            case 0, 1:
                for _ in 0...(operation >> 2) { try append() }
            case 2:
                summary.queries += 1
                try check(range(&input), reading: .recorder(recorder))
            default:
                if operation & 0x80 != 0 {
                    feed.index += Int64(operation >> 2 & 0x1F) + 1
                } else {
                    let levels: [MemoryPressure] = [.normal, .warning, .critical]
                    recorder.setPressure(levels[Int(operation >> 2) % 3])
                }
            }
        }
        let everything = (accepted.first.map(pts) ?? 0)..<((accepted.last.map(pts) ?? 0) + 1)
        let statistics: RecorderStatistics
        do { statistics = try recorder.finish() } catch { throw FuzzFailure("the recorder did not finish: \(error)") }
        // Frames accepted and lost after (memory pressure taking frames not yet written) are counted, and are the
        // only ones missing: the model keeps the others.
        var kept: [Int64] = []
        do {
            try ClipSource.recorder(recorder).frames(in: everything) { frame in
                if let mark = SyntheticCamera.verify(frame) { kept.append(mark.index) }
                return true
            }
        } catch {
            throw FuzzFailure("the whole recording cannot be read: \(error)")
        }
        try check(everything, reading: .recorder(recorder))
        let lostAfter = accepted.count - kept.count
        guard statistics.totalDrops == refused + lostAfter else {
            throw FuzzFailure(
                "the recorder counted \(statistics.totalDrops) dropped frames: \(refused) were refused at append and "
                    + "\(lostAfter) accepted are missing: \(statistics.drops)")
        }
        accepted = kept
        let row: StreamRow
        do {
            guard let first = try store.streams().first else {
                guard accepted.isEmpty else {
                    throw FuzzFailure("the store has no stream after \(accepted.count) frames")
                }
                return summary
            }
            row = first
        } catch let failure as FuzzFailure {
            throw failure
        } catch {
            throw FuzzFailure("the store's streams cannot be read: \(error)")
        }
        try check(everything, reading: .store(store, stream: row), exact: true)
        summary.accepted = accepted.count
        return summary
    }

    /// Appends the next frame, as a recorder of a file does: waiting for the spill's room first.
    private mutating func append() throws(FuzzFailure) {
        recorder.waitForSpillRoom()
        let index = feed.index
        do {
            switch try feed.appendNext(to: recorder) {
            case .stored: accepted.append(index)
            case .dropped: refused += 1
            }
        } catch {
            throw FuzzFailure("frame \(index) was refused: \(error)")
        }
    }

    /// A range whose ends lie at a frame's pts (of one recorded, or about to be), just before or after it, or
    /// halfway to the next.
    private func range(_ input: inout FuzzInput) -> Range<Int64> {
        let last = feed.index + 2
        func end() -> Int64 {
            let index = Int64(input.byte()) * last / 256
            let step = feed.stream.frameStepNanoseconds
            switch input.byte() % 4 {
            case 0: return pts(index)
            case 1: return pts(index) - 1
            case 2: return pts(index) + 1
            default: return pts(index) + step / 2
            }
        }
        let (a, b) = (end(), end())
        return min(a, b)..<max(a, b)
    }

    /// The frames `source` gives for `range` must be the model's in it, each once, in order, intact; a frame the
    /// model has and the answer lacks must be one the recorder counted as dropped since it was accepted (memory
    /// pressure may take frames not yet written), and `exact` (everything written) allows none.
    private mutating func check(_ range: Range<Int64>, reading source: ClipSource, exact: Bool = false)
        throws(FuzzFailure)
    {
        let expected = accepted.filter { range.contains(pts($0)) }
        var got: [Int64] = []
        var damaged: [Int64] = []
        let read = { (frame: FrameView) -> Bool in
            guard let mark = SyntheticCamera.verify(frame), self.pts(mark.index) == frame.info.ptsNanoseconds else {
                damaged.append(frame.info.ptsNanoseconds)
                return true
            }
            got.append(mark.index)
            return true
        }
        do {
            if case .recorder(let recorder) = source {
                let split = try recorder.frames(in: range, read)
                summary.fromMemory += split.fromMemory
                summary.fromDisk += split.fromDisk
            } else {
                try source.frames(in: range, read)
            }
        } catch {
            throw FuzzFailure("the query of \(range) failed: \(error)")
        }
        guard damaged.isEmpty else { throw FuzzFailure("\(range): frames at pts \(damaged) are not intact") }
        // `got` must be `expected` with some frames left out.
        var next = expected.startIndex
        for index in got {
            guard let found = expected[next...].firstIndex(of: index) else {
                throw FuzzFailure(
                    "\(range) from \(source.kind): frame \(index) is not where it belongs: got \(got.prefix(40)) "
                        + "(\(got.count)), expected \(expected.prefix(40)) (\(expected.count))")
            }
            next = found + 1
        }
        let missing = expected.count - got.count
        let lost = recorder.statistics.totalDrops - refused
        guard missing == 0 || (!exact && missing <= lost) else {
            throw FuzzFailure(
                "\(range) from \(source.kind): \(missing) of \(expected.count) frames missing, \(lost) counted lost "
                    + "after they were accepted: got \(got.prefix(40)), expected \(expected.prefix(40))")
        }
    }
}

extension ClipSource {
    /// Where the frames came from, for a failure's message.
    fileprivate var kind: String {
        switch self {
        case .store: "the store"
        default: "the recorder"
        }
    }
}

/// Patterns for the `query` target: each setting, appends, gaps, queries of every kind of end, pressure.
enum QuerySeeds {
    @Sendable static func patterns() -> [[UInt8]] {
        // Operations (``QueryRun/play(_:)``): 0x3C appends 16 frames and 0x7C 32; 0x83 skips a frame time, 0x87 two
        // and 0xFF 32; 0x02 queries a range (two ends of two bytes each); 0x03, 0x07 and 0x0B set the pressure to
        // normal, warning and critical.
        let query: [UInt8] = [0x02, 0x00, 0x00, 0xFF, 0x01]
        let middle: [UInt8] = [0x02, 0x40, 0x02, 0xC0, 0x03]
        let patterns: [[UInt8]] = [
            [0, 3, 8, 1] + [0x3C, 0x3C] + query + middle,
            [1, 0, 0, 0] + [0x3C, 0x83, 0x3C, 0x87, 0x3C] + query + middle,
            [0, 15, 31, 7] + [0x7C, 0x0B, 0x3C, 0x07, 0x3C, 0x03] + query + middle,
            [1, 7, 2, 2] + [0x3C, 0xFF, 0x3C] + middle + [0x3C] + query,
        ]
        return patterns
    }
}
