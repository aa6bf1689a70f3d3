import Dispatch
import Foundation
import Glibc
import RewindCapture
import RewindControl
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore
import Synchronization
import Testing

/// The synthetic frame indexes in an exported file, decoded by ffmpeg to raw NV12; records an issue for any frame
/// that is not bit-exact.
func exportedIndexes(_ path: String, layout: FrameLayout) throws -> [Int64] {
    let raw = try ExternalTools.run(
        "ffmpeg", ["-hide_banner", "-loglevel", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "nv12", "-"])
    #expect(raw.count % layout.byteCount == 0)
    var indexes: [Int64] = []
    try raw.withUnsafeBytes { bytes in
        for offset in stride(from: 0, to: bytes.count - layout.byteCount + 1, by: layout.byteCount) {
            let frame = UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + layout.byteCount)])
            let info = try FrameInfo(pts: FrameTime(nanoseconds: 0), wallNanoseconds: 0, color: .bt709Video)
            guard let mark = SyntheticCamera.verify(FrameView(layout: layout, info: info, bytes: frame)) else {
                Issue.record("\(path): frame \(offset / layout.byteCount) is not bit-exact")
                continue
            }
            indexes.append(mark.index)
        }
    }
    return indexes
}

/// Follows a recorder's events (`GET /v1/events`) on a thread of its own, keeping each as it comes; `ended` is
/// signalled when the stream ends, and `ending` says how.
final class EventFollower: Sendable {
    /// Every event so far: its name and its data (JSON text), in order.
    let received = Mutex<[(name: String, data: String)]>([])
    let ended = DispatchSemaphore(value: 0)
    /// How the stream ended (the client's error, or that it ended cleanly); nil while it goes on.
    let ending = Mutex<String?>(nil)

    /// Starts following `client`'s events.
    init(_ client: ControlClient) {
        Thread { [self] in
            let how: String
            do {
                let served = try client.events { name, data, _ in
                    received.withAnnotatedLock { $0.append((name, data)) }
                    return true
                }
                how = served ? "the recorder ended the stream" : "no recorder served the events"
            } catch {
                how = "\(error)"
            }
            ending.withAnnotatedLock { $0 = how }
            ended.signal()
        }.start()
    }

    /// The names of the events so far.
    var names: [String] { received.withAnnotatedLock { $0.map(\.name) } }

    /// Waits until an event called `name` has come; returns the first one's data, decoded. A stream that ended
    /// without it fails at once, saying how it ended.
    func first(_ name: String) throws -> [String: Any] {
        try event(name, number: 0)
    }

    /// Waits until `number + 1` events called `name` have come; returns the data of the one numbered `number` (from
    /// 0), decoded. A stream that ended before fails at once, saying how it ended.
    func event(_ name: String, number: Int) throws -> [String: Any] {
        func named() -> [(name: String, data: String)] { received.withAnnotatedLock { $0.filter { $0.name == name } } }
        try waitUntil("event \(number) called \(name) comes") {
            if named().count > number { return true }
            if let how = ending.withAnnotatedLock({ $0 }) {
                throw StreamEnded(event: name, how: how, names: names)
            }
            return false
        }
        let event = named()[number]
        return try #require(try JSONSerialization.jsonObject(with: Data(event.data.utf8)) as? [String: Any])
    }

    /// The event stream ended before the awaited event came.
    struct StreamEnded: Error, CustomStringConvertible {
        var event: String
        var how: String
        var names: [String]
        var description: String { "the event stream ended before a \(event) event (\(how)); it had: \(names)" }
    }
}

/// A recorder with 3 s (180 frames at 60 fps) recorded, its HTTP API serving, and a producer that can keep
/// appending, as fast as it can or at the camera's pace.
final class LiveRecorder: @unchecked Sendable {
    let directory: String
    let recorder: Recorder
    let control: RecorderControl
    let feed: CameraFeed
    /// What the control reported for each finished save: the summary, or nil for a failure.
    final class SaveLog: Sendable {
        let summaries = Mutex<[ExportSummary?]>([])
    }
    let log = SaveLog()
    /// The index of the next frame the producer appends.
    let nextIndex = Atomic<Int64>(180)
    private let stopProducer = Atomic<Bool>(false)
    private let producerDone = DispatchSemaphore(value: 0)
    private let isProducing = Atomic<Bool>(false)

    var client: ControlClient { ControlClient(directory: directory) }

    /// A recorder whose disk budget (256 KiB, segments of 250 ms of about 72 KB) makes retention delete frames as
    /// it records, with room for a held segment beside the two the stream keeps for itself.
    static func onASmallDisk() throws -> LiveRecorder {
        var options = StoreOptions()
        options.diskBudget = 256 << 10
        options.segmentMaxDuration = .milliseconds(250)
        return try LiveRecorder(options: options)
    }

    init(
        window: Duration = .seconds(2), options: StoreOptions = StoreOptions(), limits: HTTPLimits = HTTPLimits(),
        listen: RecorderControl.Listen? = nil, directory: String? = nil, prefill: Int = 180,
        spill: SpillPolicy = .eager, allowedHosts: [String] = []
    ) throws {
        var feed = try CameraFeed()
        self.directory = try directory ?? TemporaryDirectory.store()
        let store = spill == .off ? nil : try SegmentStore.open(directory: self.directory, options: options)
        recorder = try Recorder(
            stream: feed.stream, store: store,
            configuration: RecorderConfiguration(window: window, memoryBudget: 64 << 20, spill: spill))
        for _ in 0..<prefill {
            recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: recorder)
        }
        nextIndex.store(Int64(prefill), ordering: .relaxed)
        self.feed = feed
        let saves = log
        control = try RecorderControl(
            recorder: recorder, directory: self.directory, limits: limits, listen: listen, allowedHosts: allowedHosts
        ) { result, _, _ in
            let summary = try? result.get()
            saves.summaries.withAnnotatedLock { $0.append(summary) }
        }
    }

    /// Keeps appending frames on another thread until ``finish(producing:)``: at the camera's pace (`realtime`:
    /// frame n at start + its pts, as a live camera delivers them, never waiting for the disk), or with a 2 ms pause
    /// between frames, waiting for the spill stage when it is behind.
    func startProducer(realtime: Bool = false) {
        isProducing.store(true, ordering: .relaxed)
        let thread = Thread { [self, feed] in
            var feed = feed
            let start = ContinuousClock.now
            let first = feed.pts(feed.index)
            while !stopProducer.load(ordering: .acquiring) {
                if realtime {
                    let due = start + .nanoseconds(feed.pts(feed.index) - first)
                    let wait = due - ContinuousClock.now
                    if wait > .zero {
                        Thread.sleep(
                            forTimeInterval: Double(wait.components.attoseconds) / 1e18
                                + Double(wait.components.seconds))
                    }
                } else {
                    usleep(2000)
                }
                // A live camera never waits for the disk: frames that find no room are dropped (and counted).
                if !realtime { recorder.waitForSpillRoom() }
                _ = try? feed.appendNext(to: recorder)
                nextIndex.store(feed.index, ordering: .releasing)
            }
            producerDone.signal()
        }
        thread.start()
    }

    func finish() throws {
        if isProducing.load(ordering: .relaxed) {
            stopProducer.store(true, ordering: .releasing)
            try wait(for: producerDone, until: "the producer thread stops")
        }
        // As `rewind record` stops: the recorder's last seals, then the control.
        defer { control.stop() }
        _ = try recorder.finish()
    }

    /// The index of the frame at `pts` (frames are 1/60 s apart from pts 0).
    func index(atPTS pts: Int64) -> Int64 {
        var index = pts * 60 / 1_000_000_000
        while feed.pts(index) < pts { index += 1 }
        while index > 0 && feed.pts(index - 1) >= pts { index -= 1 }
        return index
    }

    /// The indexes of the frames whose pts lie in [`from`, `to`).
    func indexes(from: Int64, to: Int64) -> [Int64] {
        Array(index(atPTS: from)..<index(atPTS: to))
    }
}

/// Runs curl against a recorder's socket: the status and body of one request.
func curl(
    _ socket: String, _ method: String, _ path: String, body: String? = nil, extra: [String] = []
) throws -> (status: Int, body: String) {
    var arguments = [
        "-s", "--max-time", "60", "--unix-socket", socket, "-X", method, "-o", "-", "-w", "\n%{http_code}",
    ]
    if let body { arguments += ["-H", "Content-Type: application/json", "--data-binary", body] }
    arguments += extra + ["http://rewind" + path]
    let output = String(decoding: try ExternalTools.run("curl", arguments), as: UTF8.self)
    let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
    return (Int(lines.last ?? "") ?? -1, lines.dropLast().joined(separator: "\n"))
}

/// Decodes a JSON body.
func decode<T: Decodable>(_ type: T.Type, _ body: String) throws -> T {
    try JSONDecoder().decode(T.self, from: Data(body.utf8))
}
