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

@Suite(.timeLimit(.minutes(15))) struct RecorderControlTests {
    /// A recorder with 3 s (180 frames) recorded, its control serving, and a producer that keeps appending.
    final class LiveRecorder: @unchecked Sendable {
        let directory: String
        let recorder: Recorder
        let control: RecorderControl
        let feed: CameraFeed
        /// What the control reported for each save: the summary, or nil for a failure.
        final class SaveLog: Sendable {
            let summaries = Mutex<[ExportSummary?]>([])
        }
        let saves = SaveLog()
        private let stopProducer = Atomic<Bool>(false)
        private let producerDone = DispatchSemaphore(value: 0)

        init() throws {
            var feed = try CameraFeed()
            directory = try TemporaryDirectory.store()
            let store = try SegmentStore.open(directory: directory)
            recorder = try Recorder(
                stream: feed.stream, store: store,
                configuration: RecorderConfiguration(window: .seconds(2), memoryBudget: 64 << 20))
            for _ in 0..<180 {
                recorder.waitForSpillRoom()
                _ = try feed.appendNext(to: recorder)
            }
            self.feed = feed
            let saves = self.saves
            control = try RecorderControl(recorder: recorder, directory: directory, requestTimeoutSeconds: 1) {
                result in
                let summary = try? result.get()
                saves.summaries.withLock { $0.append(summary) }
            }
        }

        /// Keeps appending frames on another thread until ``finish()``.
        func startProducer() {
            let thread = Thread { [self, feed] in
                var feed = feed
                while !stopProducer.load(ordering: .acquiring) {
                    recorder.waitForSpillRoom()
                    _ = try? feed.appendNext(to: recorder)
                    usleep(2000)
                }
                producerDone.signal()
            }
            thread.start()
        }

        func finish(producing: Bool) throws {
            if producing {
                stopProducer.store(true, ordering: .releasing)
                try wait(for: producerDone, until: "the producer thread stops")
            }
            control.stop()
            _ = try recorder.finish()
        }
    }

    @Test func overlappingSavesEachGetTheirOwnBitExactFileWhileRecordingGoesOn() throws {
        let live = try LiveRecorder()
        live.startProducer()
        let paths = (0..<3).map { "\(live.directory)/clip-\($0).mkv" }
        struct Reply: Sendable {
            let ok: Bool
            let path: String?
            let frames: Int?
        }
        let replies = Mutex<[Int: Reply]>([:])
        let failures = Mutex<[String]>([])
        let group = DispatchGroup()
        for (number, path) in paths.enumerated() {
            DispatchQueue.global().async(group: group) {
                do {
                    let reply = try ControlClient.save(
                        directory: live.directory, last: .seconds(1), to: .path(path), format: nil)
                    let summary = Reply(ok: reply != nil, path: reply?.path, frames: reply?.frames)
                    replies.withLock { $0[number] = summary }
                } catch {
                    let message = "\(error)"
                    failures.withLock { $0.append(message) }
                }
            }
        }
        try wait(for: group, until: "three overlapping saves are answered")
        try live.finish(producing: true)
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        for (number, path) in paths.enumerated() {
            let reply = try #require(replies.withLock { $0[number] })
            #expect(reply.ok)
            #expect(reply.path == path)
            // One second at 60 fps: 60 consecutive frames, bit-exact, the newest at the time of the request.
            let indexes = try exportedIndexes(path, layout: live.feed.stream.layout)
            #expect(indexes.count == 60 && reply.frames == 60)
            #expect(indexes == Array((indexes.first ?? 0)..<((indexes.first ?? 0) + 60)))
            #expect((indexes.first ?? 0) >= 120)
            #expect(try ExternalTools.probe(path, ["-show_entries", "stream=pix_fmt"]) == [["nv12"]])
        }
        #expect(live.saves.summaries.withLock { $0 }.compactMap { $0 }.count == 3)
    }

    @Test func saveToADescriptorAndToTheExportsFolder() throws {
        let live = try LiveRecorder()
        defer { try? live.finish(producing: false) }
        // A descriptor travels with the request; the recorder writes YUV4MPEG2 into it.
        let path = "\(live.directory)/through-descriptor.y4m"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        try #require(fd >= 0)
        let reply = try #require(
            try ControlClient.save(
                directory: live.directory, last: .milliseconds(500),
                to: .fileDescriptor(FileDescriptor(rawValue: fd), name: "file"), format: .y4m))
        close(fd)
        #expect(reply.frames == 30)
        #expect(reply.path == nil)
        let frames = try ExternalTools.probe(path, ["-count_frames", "-show_entries", "stream=nb_read_frames"])
        #expect(frames == [["30"]])

        // No path: DIR/exports/save-….mkv, and requestSave() (SIGUSR1) saves the whole window there.
        let named = try #require(
            try ControlClient.save(directory: live.directory, last: .milliseconds(250), to: nil, format: nil))
        let namedPath = try #require(named.path)
        #expect(namedPath.hasPrefix(live.directory + "/exports/save-") && namedPath.hasSuffix(".mkv"))
        #expect(try exportedIndexes(namedPath, layout: live.feed.stream.layout) == Array(165..<180))
        live.control.requestSave()
        var windowSave: ExportSummary?
        try waitUntil("requestSave() has written the window into a file") {
            windowSave = live.saves.summaries.withLock { saves in
                saves.compactMap { $0 }.first { $0.path != namedPath && $0.format == .matroska }
            }
            return windowSave != nil
        }
        let window = try #require(windowSave, "requestSave() made no file")
        #expect(window.frames == 120)
        #expect(try exportedIndexes(window.path!, layout: live.feed.stream.layout) == Array(60..<180))
    }

    /// A clip through the socket spans disk and memory: the 2 s window holds frames 59…179, the store all of them.
    @Test func clipAcrossDiskAndMemoryAndItsErrors() throws {
        let live = try LiveRecorder()
        defer { try? live.finish(producing: false) }
        let path = "\(live.directory)/span.mkv"
        let reply = try #require(
            try ControlClient.clip(
                directory: live.directory, from: "500ms", to: "2.5s", destination: .path(path), format: nil))
        #expect(reply.frames == 120)
        #expect(try exportedIndexes(path, layout: live.feed.stream.layout) == Array(30..<150))
        #expect(throws: ControlError.self) {
            try ControlClient.clip(directory: live.directory, from: "10s", to: "11s", destination: nil, format: nil)
        }
        do {
            _ = try ControlClient.clip(directory: live.directory, from: "2s", to: "1s", destination: nil, format: nil)
            Issue.record("a backwards range was accepted")
        } catch {
            #expect("\(error)".contains("the range [2.000s, 1.000s) is empty"), "\(error)")
            #expect(
                (error as? ControlError).map { if case .refused(.badRange, _) = $0 { true } else { false } } == true)
        }
        do {
            _ = try ControlClient.clip(
                directory: live.directory, from: "soon", to: "1s", destination: nil, format: nil)
            Issue.record("a bad time was accepted")
        } catch {
            #expect("\(error)".contains("from:"))
        }
        #expect(!FileManager.default.fileExists(atPath: live.directory + "/exports"))
    }

    @Test(arguments: [
        (#"{"command": "fly"}"#, "unknown command 'fly'"),
        (#"{"command": "clip", "to": "1s"}"#, "a clip needs 'from'"),
        (#"{"command": "save", "last_ns": -5}"#, "last_ns must be a whole number"),
        (#"{"command": "save", "path": "relative.mkv"}"#, "path must be absolute"),
        (#"{"command": "save", "path": "/tmp/clip.avi"}"#, "must end in .y4m, .mkv or .mp4"),
        (#"{"command": "save", "stream": "other"}"#, "records stream 'camera', not 'other'"),
        (#"{"command": "save", "format": "gif"}"#, "unknown format 'gif'"),
        ("hello", "not a JSON object"),
    ])
    func badRequestsGetAnErrorReplyAndChangeNothing(request: String, error: String) throws {
        let live = try LiveRecorder()
        defer { try? live.finish(producing: false) }
        let reply = try rawExchange(live.control.socketPath, request)
        #expect(reply["ok"] as? Bool == false)
        #expect((reply["error"] as? String)?.contains(error) == true, "\(reply)")
        #expect(!FileManager.default.fileExists(atPath: live.directory + "/exports"))
        let status = try #require(try ControlClient.status(directory: live.directory))
        #expect(status.framesAccepted == 180)
        // The 2 s window keeps the frames from newest − 2 s to newest, both ends included: 121 at 60 fps.
        #expect(status.memoryFrames == 121)
    }

    /// A client that connects and sends nothing is dropped after the request timeout, so it cannot hold the
    /// recorder's shutdown; the other clients are served meanwhile.
    @Test func aSilentClientDoesNotBlockOthersOrShutdown() throws {
        let live = try LiveRecorder()
        let silent = try connectRaw(live.control.socketPath)
        defer { close(silent) }
        #expect(try ControlClient.status(directory: live.directory)?.framesAccepted == 180)
        // A second control for the same folder is refused while the first answers.
        #expect(throws: ControlError.self) {
            _ = try RecorderControl(recorder: live.recorder, directory: live.directory)
        }
        try live.finish(producing: false)
        // The silent connection got an error reply (or was closed) once its time was up.
        var reply = [UInt8](repeating: 0, count: 4096)
        let count = read(silent, &reply, reply.count)
        #expect(count >= 0)
        if count > 0 { #expect(String(decoding: reply[0..<count], as: UTF8.self).contains("\"ok\":false")) }
    }

    @Test func stoppedOrStaleSocketMeansNoLiveRecorder() throws {
        let live = try LiveRecorder()
        try live.finish(producing: false)
        #expect(!FileManager.default.fileExists(atPath: live.control.socketPath))
        #expect(try ControlClient.status(directory: live.directory) == nil)
        // A file left where the socket was (a recorder that was killed): nobody answers.
        #expect(FileManager.default.createFile(atPath: live.control.socketPath, contents: Data()))
        #expect(
            try ControlClient.save(directory: live.directory, last: .seconds(1), to: nil, format: nil) == nil)
    }

    /// A plain connection to the control socket, made without the client library.
    func connectRaw(_ socketPath: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: Array(socketPath.utf8).prefix(raw.count - 1))
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if connected != 0 { close(fd) }
        try #require(connected == 0)
        // A reply that never comes fails the read after 30 s instead of hanging the test.
        var limit = timeval(tv_sec: 30, tv_usec: 0)
        try #require(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size)) == 0)
        return fd
    }

    /// Sends one raw line and reads the JSON reply.
    func rawExchange(_ socketPath: String, _ line: String) throws -> [String: Any] {
        let fd = try connectRaw(socketPath)
        defer { close(fd) }
        let message = Array((line + "\n").utf8)
        #expect(write(fd, message, message.count) == message.count)
        var reply = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(fd, &chunk, chunk.count)
            if count <= 0 { break }
            reply += chunk[0..<count]
        }
        return try #require(try JSONSerialization.jsonObject(with: Data(reply)) as? [String: Any])
    }
}
