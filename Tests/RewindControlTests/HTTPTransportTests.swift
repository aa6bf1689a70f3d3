import Dispatch
import Foundation
import Glibc
import RewindCapture
import RewindControl
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Synchronization
import Testing

/// A raw connection to a Unix socket: what a fuzzing client sends, byte for byte.
final class RawConnection {
    let fd: Int32

    init(_ path: String) throws {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: Array(path.utf8).prefix(raw.count - 1))
        }
        fd = try Self.connected(to: address, family: AF_UNIX, naming: path)
    }

    /// A connection to `port` on 127.0.0.1.
    init(port: UInt16) throws {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        fd = try Self.connected(to: address, family: AF_INET, naming: "port \(port)")
    }

    /// A stream socket of `family` connected to `address`, whose reads fail after 30 s (a reply that never comes
    /// fails the test instead of hanging it).
    private static func connected<Address>(to address: Address, family: Int32, naming name: String) throws -> Int32 {
        let fd = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        var address = address
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<Address>.size))
            }
        }
        guard result == 0 else {
            let error = Errno(rawValue: errno)
            close(fd)
            try #require(Bool(false), "connect to \(name): \(error)")
            return -1
        }
        var limit = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    deinit { close(fd) }

    /// Sends `bytes`; false when the server closed the connection first.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    /// Everything the server sends until it closes the connection (or 30 s pass).
    func readAll() -> String { String(decoding: readAllBytes(), as: UTF8.self) }

    /// Every byte the server sends until it closes the connection (or 30 s pass).
    func readAllBytes() -> [UInt8] {
        var reply: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count <= 0 { break }
            reply += chunk[0..<count]
        }
        return reply
    }

    /// The status code of the response, or nil when the server closed without one.
    func status() -> Int? {
        let reply = readAll()
        guard reply.hasPrefix("HTTP/1.1 ") else { return nil }
        return Int(reply.dropFirst(9).prefix(3))
    }
}

/// The API over HTTP, driven by curl and by raw sockets: every endpoint answers with the right status, and no
/// request, however malformed, slow or large, costs capture a frame.
@Suite(.timeLimit(.minutes(45))) struct HTTPTransportTests {
    @Test func curlDrivesEveryEndpoint() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let socket = live.control.socketPath
        var mode = stat()
        #expect(stat(socket, &mode) == 0 && mode.st_mode & 0o777 == 0o600, "the socket is the owner's only")

        let health = try curl(socket, "GET", "/v1/health")
        #expect(health.status == 200 && health.body == #"{"status":"ok"}"#)
        let status = try decode(StatusResponse.self, try curl(socket, "GET", "/v1/status").body)
        #expect(status.streams.first?.framesAccepted == 180)
        let streams = try decode(StreamList.self, try curl(socket, "GET", "/v1/streams").body)
        #expect(streams.streams.map(\.name) == ["camera"] && streams.streams[0].width == 160)

        // A save with wait: 200 and the finished object; without: 202 and a waiting one.
        let path = "\(live.directory)/curl.mkv"
        let saved = try curl(socket, "POST", "/v1/saves", body: #"{"last":"500ms","path":"\#(path)","wait":true}"#)
        #expect(saved.status == 200, "\(saved.body)")
        let object = try decode(SaveObject.self, saved.body)
        #expect(object.state == .done && object.frames == 30 && object.files == [path])
        #expect(try exportedIndexes(path, layout: live.feed.stream.layout) == Array(150..<180))
        #expect(try curl(socket, "GET", "/v1/files/\(object.id)").status == 200)
        // HEAD: GET's status and headers, no body (curl -I stops after the headers).
        let fileSize = try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int
        for (route, status) in [
            ("/v1/files/\(object.id)", 200), ("/v1/status", 200), ("/v1/events", 200), ("/v1/nope", 404),
        ] {
            let head = try curl(socket, "HEAD", route, extra: ["-I"])
            #expect(head.status == status, "HEAD \(route): \(head.body)")
            if route.hasPrefix("/v1/files") {
                #expect(head.body.lowercased().contains("content-length: \(fileSize ?? -1)"), "\(head.body)")
            }
        }
        // A later save to the same path replaces the file: the first export's download is refused, not served.
        let again = try curl(socket, "POST", "/v1/saves", body: #"{"last":"1s","path":"\#(path)","wait":true}"#)
        let second = try decode(SaveObject.self, again.body)
        let replaced = try curl(socket, "GET", "/v1/files/\(object.id)")
        #expect(replaced.status == 409 && replaced.body.contains("replaced"), "\(replaced.body)")
        // Another file made under the path (the file system may give it the freed inode), a directory, or a FIFO
        // that nobody writes (opened without waiting for a writer): refused at once, never served.
        let other = "\(live.directory)/other.mkv"
        let made = try curl(socket, "POST", "/v1/saves", body: #"{"last":"500ms","path":"\#(other)","wait":true}"#)
        let otherID = try decode(SaveObject.self, made.body).id
        for replace in [
            { try Data("someone else's".utf8).write(to: URL(fileURLWithPath: other)) },
            { try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: false) },
            { try #require(mkfifo(other, 0o600) == 0) },
        ] {
            try? FileManager.default.removeItem(atPath: other)
            try replace()
            let refused = try curl(socket, "GET", "/v1/files/\(otherID)")
            #expect(refused.status == 409 && refused.body.contains("replaced"), "\(refused.status) \(refused.body)")
        }
        try? FileManager.default.removeItem(atPath: other)
        // A download says its length up front (not chunked), so clients can show progress and see a cut-short body.
        let headers = "\(live.directory)/headers.txt"
        let download = try curl(socket, "GET", "/v1/files/\(second.id)", extra: ["-D", headers])
        #expect(download.status == 200)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        let fields = try String(contentsOfFile: headers, encoding: .utf8).lowercased()
        #expect(fields.contains("content-length: \(size)\r\n"), "\(fields)")
        #expect(!fields.contains("transfer-encoding"), "\(fields)")
        // Frames keep coming while a save waits for its post-roll: one whose input sent nothing for 10 s is written
        // cut short (its input stalled), which a busy machine reached before the cancel below.
        live.startProducer(realtime: true)
        let pending = try curl(socket, "POST", "/v1/saves", body: #"{"before":"1s","after":"1h"}"#)
        #expect(pending.status == 202)
        let waiting = try decode(SaveObject.self, pending.body)
        #expect(waiting.state == .waiting)
        let extended = try curl(socket, "POST", "/v1/saves/\(waiting.id)/extend", body: #"{"after":"1s"}"#)
        #expect(try decode(SaveObject.self, extended.body).toNanoseconds == waiting.toNanoseconds + 1_000_000_000)
        // Extending for ever is refused before the end overflows (100 years at a time, 200 years in all).
        let far = try curl(socket, "POST", "/v1/saves/\(waiting.id)/extend", body: #"{"after":"36525d"}"#)
        #expect(far.status == 200, "\(far.body)")
        let farther = try curl(socket, "POST", "/v1/saves/\(waiting.id)/extend", body: #"{"after":"36525d"}"#)
        #expect(farther.status == 400 && farther.body.contains("200 years"), "\(farther.body)")
        #expect(try curl(socket, "GET", "/v1/saves/\(waiting.id)").status == 200)
        let list = try decode(SaveList.self, try curl(socket, "GET", "/v1/saves").body)
        #expect(list.saves.map(\.id) == [object.id, second.id, otherID, waiting.id])
        let cancelled = try curl(socket, "DELETE", "/v1/saves/\(waiting.id)")
        #expect(try decode(SaveObject.self, cancelled.body).state == .cancelled, "\(cancelled.body)")
        let clip = try curl(socket, "POST", "/v1/clips", body: #"{"from":"1s","to":"2s","format":"y4m","wait":true}"#)
        #expect(clip.status == 200, "\(clip.body)")
        #expect(try decode(SaveObject.self, clip.body).frames == 60)
        // The ends of a range may lie past every frame, as `rewind clip` from the disk allows: they stand for the
        // farthest frame. A marker's time, which a hold's durations are added to, may not.
        let everything = try curl(
            socket, "POST", "/v1/clips", body: #"{"from":"-36600d","to":"36600d","format":"y4m","wait":true}"#)
        #expect(everything.status == 200, "\(everything.body)")
        #expect(try decode(SaveObject.self, everything.body).frames >= 60)
        for route in [
            "/v1/markers?from=1678-01-01T00:00:00Z&to=2261-01-01T00:00:00Z",
            "/v1/streams/camera/timeline?from=-106751d&to=106751d&buckets=4", "/v1/streams/camera/frame?at=106751d",
        ] {
            let far = try curl(socket, "GET", route)
            #expect(far.status == 200, "\(route): \(far.body)")
        }
        // A range wholly beyond the farthest time (about 53 375 days) holds no frame, however far apart its ends:
        // not an end taken for its start.
        let beyond = try curl(socket, "POST", "/v1/clips", body: #"{"from":"60000d","to":"60001d","format":"y4m"}"#)
        #expect(beyond.status == 404 && beyond.body.contains("no frames in [60000d, 60001d)"), "\(beyond.body)")
        let beyondTimeline = try curl(socket, "GET", "/v1/streams/camera/timeline?from=60000d&to=60001d&buckets=4")
        #expect(beyondTimeline.status == 404 && beyondTimeline.body.contains("146 years"), "\(beyondTimeline.body)")
        let beyondMarkers = try curl(socket, "GET", "/v1/markers?from=60000d&to=60001d")
        #expect(beyondMarkers.status == 200 && beyondMarkers.body.contains(#""markers":[]"#), "\(beyondMarkers.body)")
        let backwards = try curl(socket, "POST", "/v1/clips", body: #"{"from":"60001d","to":"60000d"}"#)
        #expect(backwards.status == 400 && backwards.body.contains("to must be after from"), "\(backwards.body)")
        let farMark = try curl(socket, "POST", "/v1/markers", body: #"{"label":"x","at":"36600d"}"#)
        #expect(farMark.status == 400 && farMark.body.contains("100 years"), "\(farMark.body)")

        // Errors: a JSON object naming the code, with its status.
        let marked = try curl(socket, "POST", "/v1/markers", body: #"{"label":"kept"}"#)
        let kept = try #require(try decode(MarkerList.self, marked.body).markers.first, "\(marked.body)")
        let notes = "\(live.directory)/notes.txt"
        try Data("notes".utf8).write(to: URL(fileURLWithPath: notes))
        let marks = String(repeating: "\u{301}", count: 9000)
        let cases: [(String, String, String?, Int, String)] = [
            ("GET", "/v1/saves/77", nil, 404, "not_found"),
            ("GET", "/v1/nothing", nil, 404, "not_found"),
            // A path that does not exist, or a method it does not take, is said so whatever the query holds.
            ("GET", "/v1/nothing?x=1", nil, 404, "not_found"),
            ("POST", "/v1/status?x=1", "{}", 405, "method_not_allowed"),
            ("GET", "/elsewhere", nil, 404, "not_found"),
            ("PUT", "/v1/saves", "{}", 405, "method_not_allowed"),
            ("POST", "/v1/saves", #"{"before":"1s","bfore":"2s"}"#, 400, "bad_request"),
            ("POST", "/v1/saves", #"{"before":5}"#, 400, "bad_request"),
            // A format is one of the three names, as written: not a file name, not another case.
            ("POST", "/v1/saves", #"{"format":"x.mkv"}"#, 400, "bad_request"),
            ("POST", "/v1/clips", #"{"from":"0s","to":"1s","format":"MP4"}"#, 400, "bad_request"),
            ("POST", "/v1/saves", "not json", 400, "bad_request"),
            // A field given twice, as written or escaped, at the top or inside "hold".
            ("POST", "/v1/saves", #"{"last":"1s","wait":true,"last":"1h"}"#, 400, "bad_request"),
            ("POST", "/v1/saves", #"{"last":"1s","l\u0061st":"1h"}"#, 400, "bad_request"),
            ("POST", "/v1/markers", #"{"label":"x","hold":{"before":"1s","before":"2s"}}"#, 400, "bad_request"),
            // A NUL would cut the path where the file is opened, after the checks saw it whole; a label stays one line.
            ("POST", "/v1/saves", #"{"last":"1s","path":"\#(notes)\u0000.mkv","wait":true}"#, 400, "bad_request"),
            ("POST", "/v1/markers", #"{"label":"a\u0000b"}"#, 400, "bad_request"),
            // A path is logged and named in a download's header: an escape or a newline would forge a log line.
            ("POST", "/v1/saves", #"{"last":"1s","path":"/tmp/e\u001b[2J\nfake line.mkv"}"#, 400, "bad_request"),
            ("POST", "/v1/clips", #"{"from":"0s","to":"1s","path":"/tmp/a\tb.mkv"}"#, 400, "bad_request"),
            ("POST", "/v1/markers", #"{"label":"a\nb"}"#, 400, "bad_request"),
            ("POST", "/v1/markers", #"{"label":"a\u2028b"}"#, 400, "bad_request"),
            // One character as a reader counts it, but 9000 combining marks under it.
            ("POST", "/v1/markers", #"{"label":"Z\#(marks)"}"#, 400, "bad_request"),
            ("POST", "/v1/saves", #"{"last":"1s","after":"1s"}"#, 400, "bad_request"),
            ("POST", "/v1/saves", #"{"stream":"lobby"}"#, 404, "not_found"),
            ("POST", "/v1/saves", #"{"path":"/no/such/dir/x.mkv"}"#, 404, "not_found"),
            // A name the system could not make (with the temporary name it is written under first): refused up
            // front, not a failed save.
            ("POST", "/v1/saves", #"{"path":"/tmp/\#(String(repeating: "y", count: 240)).mkv"}"#, 400, "bad_request"),
            // A directory that takes no new file: refused when asked, not a save that fails after 202.
            ("POST", "/v1/saves", #"{"path":"/proc/self/x.mkv"}"#, 403, "forbidden"),
            // A comma before a closing bracket is not JSON, though Foundation's parser takes it.
            ("POST", "/v1/markers", #"{"label":"x",}"#, 400, "bad_request"),
            ("POST", "/v1/saves", #"{"last":"1s" , }"#, 400, "bad_request"),
            ("POST", "/v1/clips", #"{"from":"0s","to":"1s","path":"/proc/self/x.mkv"}"#, 403, "forbidden"),
            ("POST", "/v1/saves/\(object.id)/extend", #"{"after":"1s"}"#, 409, "conflict"),
            ("POST", "/v1/clips", #"{"from":"50s","to":"60s","wait":true}"#, 404, "empty"),
            // Times and durations whose sums would not fit in 64-bit nanoseconds.
            ("POST", "/v1/saves", #"{"after":"9223372036854775807ns"}"#, 400, "bad_request"),
            ("POST", "/v1/saves", #"{"last":"-5s"}"#, 400, "bad_request"),
            ("POST", "/v1/markers", #"{"label":"x","at":"106751d","hold":{"after":"1d"}}"#, 400, "bad_request"),
            ("POST", "/v1/markers", #"{"label":"x","hold":{"before":"106751d"}}"#, 400, "bad_request"),
            ("POST", "/v1/clips", #"{"from":"9999-12-31T00:00:00Z","to":"9999-12-31T00:00:01Z"}"#, 400, "bad_request"),
            ("GET", "/v1/files/\(object.id)?file=abc", nil, 400, "bad_request"),
            ("GET", "/v1/files/\(object.id)?file=-1", nil, 400, "bad_request"),
            // A %00 would end the C strings libmicrohttpd hands the path and the query over as: refused, not cut.
            ("GET", "/v1/status%00junk", nil, 400, "bad_request"),
            ("GET", "/v1/markers?from=1s%00junk", nil, 400, "bad_request"),
            ("DELETE", "/v1/markers/\(kept.id)%00junk", nil, 400, "bad_request"),
            ("POST", "/v1/saves%00", #"{"last":"1s"}"#, 400, "bad_request"),
            ("GET", "/v1/streams/camera/frame?at=1s&widht=10", nil, 400, "bad_request"),
            ("GET", "/v1/streams/camera/frame?at=1s&width=0", nil, 400, "bad_request"),
            ("GET", "/v1/streams/camera/frame?at=1s&width=-99999999999999999999", nil, 400, "bad_request"),
            ("GET", "/v1/streams/camera/frame?at=1s&width=12px", nil, 400, "bad_request"),
            ("GET", "/v1/status?verbose=1", nil, 400, "bad_request"),
            ("GET", "/v1/saves?widht=3", nil, 400, "bad_request"),
            ("GET", "/v1/events?x=1", nil, 400, "bad_request"),
            ("GET", "/v1/streams/camera/timeline?from=0s&to=1s&bucket=5", nil, 400, "bad_request"),
            ("GET", "/v1/files/\(object.id)?file=1", nil, 404, "not_found"),
            // A query parameter given twice has no one meaning: refused, not the last one taken.
            ("GET", "/v1/streams/camera/timeline?from=0s&to=1s&from=500ms", nil, 400, "bad_request"),
            ("GET", "/v1/streams/camera/frame?at=1s&at=2s", nil, 400, "bad_request"),
            ("GET", "/v1/markers?to=1s&to=1s", nil, 400, "bad_request"),
            ("GET", "/v1/files/\(object.id)?file=0&file=0", nil, 400, "bad_request"),
        ]
        defer { #expect(FileManager.default.contents(atPath: notes) == Data("notes".utf8), "notes.txt untouched") }
        defer {
            let markers = try? decode(MarkerList.self, try curl(socket, "GET", "/v1/markers").body)
            #expect(markers?.markers.contains { $0.id == kept.id } == true, "the marker a cut request named is kept")
        }
        // A width wider than the frame gives the frame's own size, even one past 64 bits (it was refused as "not
        // a whole number from 1").
        let plain = try curl(socket, "GET", "/v1/streams/camera/frame?at=1s")
        let wide = try curl(socket, "GET", "/v1/streams/camera/frame?at=1s&width=99999999999999999999")
        #expect(plain.status == 200 && wide.status == 200, "\(wide.body.prefix(200))")
        #expect(wide.body == plain.body)
        // Empty parameters (`?&&&`) name none: nothing was given twice.
        #expect(try curl(socket, "GET", "/v1/status?&&&").status == 200)
        for (method, path, body, expected, code) in cases {
            let answer = try curl(socket, method, path, body: body)
            #expect(answer.status == expected, "\(method) \(path) \(body ?? ""): \(answer)")
            let error = try? decode(APIError.Body.self, answer.body)
            #expect(error?.error.code == code, "\(method) \(path): \(answer.body)")
            #expect(error?.error.message.isEmpty == false)
            // A bad value is named by the field the client sent.
            if body == #"{"last":"-5s"}"# {
                #expect(error?.error.message.hasPrefix("last: ") == true, "\(answer.body)")
            }
            if path.hasSuffix("at=1s&at=2s") {
                #expect(error?.error.message.contains("'at' is given more than once") == true, "\(answer.body)")
            }
        }
    }

    /// A directory the client gave, removed while its save waits for the post-roll, is not made again behind its
    /// back (it may be a mount point whose file system went away): the save fails, saying so.
    @Test func aDirectoryRemovedWhileASaveWaitsIsNotMadeAgain() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        live.startProducer(realtime: true)
        let socket = live.control.socketPath
        let gone = "\(live.directory)/gone"
        try FileManager.default.createDirectory(atPath: gone, withIntermediateDirectories: false)
        let asked = try curl(
            socket, "POST", "/v1/saves", body: #"{"before":"500ms","after":"500ms","path":"\#(gone)/x.mkv"}"#)
        #expect(asked.status == 202, "\(asked.body)")
        let goneID = try decode(SaveObject.self, asked.body).id
        try FileManager.default.removeItem(atPath: gone)
        var ended: SaveObject?
        try waitUntil("the save whose directory went is final") {
            ended = try? decode(SaveObject.self, try curl(socket, "GET", "/v1/saves/\(goneID)").body)
            return ended?.state.isFinal == true
        }
        #expect(
            ended?.state == .failed && ended?.error?.message.contains("was removed") == true,
            "\(String(describing: ended))")
        #expect(!FileManager.default.fileExists(atPath: gone), "the removed directory was made again")
    }

    /// Clients that send their headers, or their body, a byte now and then, never idle for long, are closed once
    /// they have taken `requestSeconds` without a whole request: they cannot hold every connection from the clients
    /// that ask.
    @Test(arguments: [false, true]) func clientsTooSlowToSendTheirRequestCannotHoldEveryConnection(body: Bool) throws {
        var limits = HTTPLimits()
        limits.maximumConnections = 4
        limits.extraConnections = 1
        limits.idleTimeoutSeconds = 30
        limits.requestSeconds = 2
        let live = try LiveRecorder(limits: limits)
        defer { try? live.finish() }
        let socket = live.control.socketPath
        let slow = try (0..<5).map { _ in try RawConnection(socket) }
        try waitUntil("the slow clients are connected") { live.control.openConnections == 5 }
        let request =
            body
            ? Array("POST /v1/markers HTTP/1.1\r\nHost: x\r\nContent-Length: 600\r\n\r\n".utf8)
                + [UInt8](repeating: UInt8(ascii: "a"), count: 100)
            : Array("GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Pad: \(String(repeating: "a", count: 100))".utf8)
        // The body's headers whole at once: only its body comes slowly.
        let whole = body ? request.count - 100 : 0
        for connection in slow where whole > 0 { connection.send(Array(request[0..<whole])) }
        var open = [Bool](repeating: true, count: slow.count)
        let start = ContinuousClock.now
        // A byte every 200 ms from each: far within the idle timeout, far short of a request in 4 s.
        for index in whole..<(whole + 20) {
            for (number, connection) in slow.enumerated() where open[number] {
                open[number] = connection.send([request[index]])
            }
            Thread.sleep(forTimeInterval: 0.2)
        }
        #expect(ContinuousClock.now - start < .seconds(30), "the idle timeout cannot be what closed them")
        try waitUntil("the slow clients are closed", timeout: .seconds(10)) { live.control.openConnections == 0 }
        for (number, connection) in slow.enumerated() where open[number] {
            #expect(!connection.send(Array("\r\n\r\n".utf8)) || connection.status() == nil, "client \(number)")
        }
        #expect(try curl(socket, "GET", "/v1/health").status == 200)
    }

    /// A download whose client stops reading for longer than the idle timeout (a paused browser download, a
    /// rate-limited curl) keeps going once it reads again: the whole file arrives.
    @Test func aPausedDownloadGetsTheWholeFile() throws {
        var limits = HTTPLimits()
        limits.idleTimeoutSeconds = 2
        let live = try LiveRecorder(limits: limits)
        defer { try? live.finish() }
        let save = try #require(try live.client.save(SaveRequest(last: "5s", format: "y4m", wait: true)))
        let size = try #require(save.files.first.flatMap { POSIXFileSystem().fileBytes($0) })
        try #require(size > 1 << 20, "a file larger than the socket's buffer: \(size) bytes")
        let download = try RawConnection(live.control.socketPath)
        #expect(download.send(Array("GET /v1/files/\(save.id) HTTP/1.1\r\nHost: x\r\n\r\n".utf8)))
        var first = [UInt8](repeating: 0, count: 4096)
        let got = recv(download.fd, &first, first.count, 0)
        try #require(got > 0)
        Thread.sleep(forTimeInterval: 4)  // twice the idle timeout, reading nothing
        let reply = Array(first[0..<got]) + download.readAllBytes()
        let headerEnd = try #require(reply.firstRange(of: Array("\r\n\r\n".utf8))).upperBound
        #expect(reply.count - headerEnd == Int(size), "\(reply.count - headerEnd) of \(size) bytes")
    }

    /// Malformed request lines, huge headers, bodies past the limit, slow clients, invalid JSON, unknown fields and
    /// more connections than allowed: each gets its status (or, where HTTP has none to give, the connection
    /// closed), other clients are served meanwhile, and capture drops nothing.
    @Test func fuzzedRequestsGetTheRightStatusAndCaptureDropsNothing() throws {
        var limits = HTTPLimits()
        limits.maximumConnections = 8
        limits.idleTimeoutSeconds = 2
        let live = try LiveRecorder(limits: limits)
        live.startProducer(realtime: true)
        defer { try? live.finish() }
        let socket = live.control.socketPath
        func exchange(_ bytes: [UInt8]) throws -> Int? {
            let connection = try RawConnection(socket)
            connection.send(bytes)
            return connection.status()
        }
        let request = { (line: String) in Array(line.utf8) }
        // Request lines libmicrohttpd can parse far enough get 400/505; those it cannot are closed at once.
        #expect(try exchange(request("GET /v1/status\r\n\r\n")) == 400)
        #expect(try exchange(request("GET /v1/status HTTP/1.1 extra\r\n\r\n")) == 400)
        #expect(try exchange(request("GET /v1/status HTTP/9.9\r\n\r\n")) == 505)
        #expect(try exchange(request("GET /v1/status HTTP/1.1\r\nNoColon\r\n\r\n")) == 400)
        #expect(try exchange(request("GARBAGE\r\n\r\n")) == nil)
        #expect(try exchange(request("POST /v1/saves HTTP/1.1\r\nContent-Length: ten\r\n\r\n")) == 400)
        // Binary junk and a request that stops halfway wait for the idle timeout, then are closed.
        #expect(try exchange([0, 1, 2, 0xFF, 13, 10, 13, 10]) == nil)
        #expect(try exchange(request("GET /v1/status HTTP/1.1\r\nHost: x\r\n")) == nil)
        // Huge headers and a huge request line.
        let big = String(repeating: "a", count: 70_000)
        #expect(try exchange(request("GET /v1/status HTTP/1.1\r\nX-Big: \(big)\r\n\r\n")) == 431)
        #expect(try exchange(request("GET /v1/\(big) HTTP/1.1\r\n\r\n")) == 414)
        // Bodies past 64 KiB: refused from the Content-Length before they are read, or while chunks arrive.
        let promised = try RawConnection(socket)
        promised.send(request("POST /v1/saves HTTP/1.1\r\nContent-Length: 100000\r\n\r\n{"))
        #expect(promised.status() == 413)
        var chunked = request("POST /v1/saves HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in 0..<8 { chunked += request("2710\r\n") + [UInt8](repeating: 32, count: 10_000) + request("\r\n") }
        #expect(try exchange(chunked + request("0\r\n\r\n")) == 413)
        // A body framed two ways (a proxy in front could read the other one) is refused; no marker is made.
        let body = #"{"label":"smuggled"}"#
        let twoWays =
            "POST /v1/markers HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.utf8.count)\r\n"
            + "Transfer-Encoding: chunked\r\n\r\n\(String(body.utf8.count, radix: 16))\r\n\(body)\r\n0\r\n\r\n"
        #expect(try exchange(request(twoWays)) == 400)
        // So is a Content-Length given twice: the first framed one request and the rest ran as a second one.
        let second = #"{"label":"second"}"#
        let hidden =
            "POST /v1/markers HTTP/1.1\r\nHost: x\r\nContent-Length: \(second.utf8.count)\r\nConnection: close\r\n\r\n"
            + second
        let twice =
            "POST /v1/markers HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.utf8.count)\r\nContent-Length: "
            + "\(body.utf8.count + hidden.utf8.count)\r\n\r\n\(body)\(hidden)"
        #expect(try exchange(request(twice)) == 400)
        // A transfer coding other than chunked alone is refused (it was left to time out, closed unanswered), and so
        // is chunked given twice.
        for coding in ["gzip, chunked", "identity", "chunked\r\nTransfer-Encoding: chunked"] {
            let coded =
                "POST /v1/markers HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \(coding)\r\n\r\n"
                + "\(String(body.utf8.count, radix: 16))\r\n\(body)\r\n0\r\n\r\n"
            #expect(try exchange(request(coded)) == 400, "\(coding)")
        }
        let markers = try curl(socket, "GET", "/v1/markers").body
        #expect(!markers.contains("smuggled") && !markers.contains("second"), "\(markers)")
        // Invalid JSON, unknown fields, wrong types.
        for body in ["{", "[1,2]", #"{"unknown":1}"#, #"{"after":true}"#, "\u{1}\u{2}"] {
            #expect(try curl(socket, "POST", "/v1/saves", body: body).status == 400, "\(body)")
        }
        // A field of the wrong type says what it takes, not the decoder's words.
        let number = try curl(socket, "POST", "/v1/saves", body: #"{"last":5}"#)
        #expect(number.status == 400, "\(number.body)")
        #expect(
            try decode(APIError.Body.self, number.body).error.message
                == #"field 'last' must be a string: a duration such as "5s""#, "\(number.body)")
        // A hold given as a time says it is an object, and what one looks like (it said "of another type").
        let hold = try curl(socket, "POST", "/v1/markers", body: #"{"label":"x","hold":"30s"}"#)
        #expect(hold.status == 400, "\(hold.body)")
        #expect(
            try decode(APIError.Body.self, hold.body).error.message
                == #"field 'hold' must be an object such as {"before": "5s", "after": "5s"}"#, "\(hold.body)")
        // Times past what 64-bit nanoseconds hold (a time of day's seconds once trapped, ending the recorder).
        for body in [#"{"from":"14:01:8565705100000000000","to":"1s"}"#, #"{"from":"0s","to":"99999999999d"}"#] {
            #expect(try curl(socket, "POST", "/v1/clips", body: body).status == 400, "\(body)")
        }
        #expect(try curl(socket, "GET", "/v1/health").status == 200)
        // A slow client sending its headers a byte at a time: closed at the idle timeout; others are served.
        let slow = try RawConnection(socket)
        for byte in request("GET /v1/sta") {
            slow.send([byte])
            #expect(try curl(socket, "GET", "/v1/health").status == 200)
        }
        Thread.sleep(forTimeInterval: 2.5)
        #expect(!slow.send(request("tus HTTP/1.1\r\n\r\n")) || slow.status() == nil)
        // More connections than allowed: the one past the limit gets 503, and once they go, requests are served.
        try waitUntil("earlier connections are closed") { live.control.openConnections == 0 }
        var idle: [RawConnection] = []
        for _ in 0..<8 { idle.append(try RawConnection(socket)) }
        try waitUntil("eight connections are open") { live.control.openConnections == 8 }
        let refused = try curl(socket, "GET", "/v1/status")
        #expect(refused.status == 503)
        #expect(try decode(APIError.Body.self, refused.body).error.code == "unavailable")
        idle.removeAll()
        try waitUntil("the idle connections are closed") { live.control.openConnections == 0 }
        #expect(try curl(socket, "GET", "/v1/status").status == 200)
        // Many clients at once, while the producer records.
        let group = DispatchGroup()
        let statuses = Mutex<[Int]>([])
        for _ in 0..<6 {
            DispatchQueue.global().async(group: group) {
                for _ in 0..<10 {
                    let status = (try? curl(socket, "GET", "/v1/status").status) ?? -1
                    statuses.withAnnotatedLock { $0.append(status) }
                }
            }
        }
        try wait(for: group, until: "60 status requests from 6 clients are answered")
        #expect(statuses.withAnnotatedLock { $0 }.allSatisfy { $0 == 200 || $0 == 503 })
        #expect(statuses.withAnnotatedLock { $0 }.contains(200))
        let final = try #require(try live.client.status())
        #expect(final.streams[0].drops.isEmpty, "capture dropped frames: \(final.streams[0].drops)")
        #expect(final.streams[0].framesAccepted > 180)
    }

    /// The TCP listener: loopback only, and every request needs the token (header, cookie, or `?token=` which
    /// sets the cookie); without it, 401.
    @Test func tcpNeedsTheTokenAndLoopback() throws {
        let directory = try TemporaryDirectory.store()
        let tokenPath = directory + "/token"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let token = try ControlToken.loadOrCreate(path: tokenPath)
        var mode = stat()
        #expect(stat(tokenPath, &mode) == 0 && mode.st_mode & 0o777 == 0o600)
        #expect(try ControlToken.loadOrCreate(path: tokenPath) == token, "an existing token is kept")
        #expect(token.count == 64)
        let live = try LiveRecorder(
            listen: RecorderControl.Listen(host: "127.0.0.1", port: 0, token: token), directory: directory)
        defer { try? live.finish() }
        let port = try #require(live.control.tcpPort)
        let url = "http://127.0.0.1:\(port)/v1/status"
        func get(_ arguments: [String]) throws -> (Int, String) {
            let output = String(
                decoding: try ExternalTools.run(
                    "curl", ["-s", "--max-time", "30", "-o", "-", "-w", "\n%{http_code}"] + arguments), as: UTF8.self)
            let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
            return (Int(lines.last ?? "") ?? -1, lines.dropLast().joined(separator: "\n"))
        }
        let none = try get([url])
        #expect(none.0 == 401)
        #expect(try decode(APIError.Body.self, none.1).error.code == "unauthorized")
        #expect(!none.1.contains("the token given is not this recorder's"), "\(none.1)")
        let wrong = try get(["-H", "Authorization: Bearer wrong", url])
        #expect(wrong.0 == 401 && wrong.1.contains("the token given is not this recorder's"), "\(wrong.1)")
        #expect(try get(["-H", "Authorization: Bearer \(token)x", url]).0 == 401)
        #expect(try get(["-H", "Authorization: Bearer \(token)", url]).0 == 200)
        // More than one space after the scheme (RFC 9110 allows it), and the scheme in another case.
        #expect(try get(["-H", "Authorization: bearer   \(token)", url]).0 == 200)
        #expect(try get(["-H", "Authorization: bearer \(token)", url]).0 == 200, "the scheme is case-insensitive")
        // Two Authorization headers have no one meaning: refused whichever holds the token (the last one counted).
        for pair in [["wrong", token], [token, "wrong"], [token, token]] {
            let twice = try get(
                ["-H", "Authorization: Bearer \(pair[0])", "-H", "Authorization: Bearer \(pair[1])", url])
            #expect(twice.0 == 400, "\(pair): \(twice.1)")
            #expect(twice.1.contains("the Authorization header is given more than once"), "\(twice.1)")
        }
        // Refused from its headers: the 401 comes before the body it announces, which is never read (a client
        // without the token cannot hold a connection by sending one slowly).
        let announced = try RawConnection(port: UInt16(port))
        #expect(announced.send(Array("POST /v1/markers HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n".utf8)))
        #expect(announced.status() == 401)
        #expect(try get(["-H", "Cookie: rewind_token_\(port)=\(token)", url]).0 == 200)
        // RFC 6265's cookie-value may be quoted: the quotes are no part of it.
        #expect(try get(["-H", "Cookie: a=b; rewind_token_\(port)=\"\(token)\"", url]).0 == 200)
        #expect(try get(["-H", "Cookie: rewind_token_\(port)=\"\(token)", url]).0 == 401, "one quote")
        #expect(try get(["-H", "Cookie: rewind_token_1=\(token)", url]).0 == 401, "another port's cookie")
        let headers = String(
            decoding: try ExternalTools.run("curl", ["-s", "-D", "-", "-o", "/dev/null", url + "?token=\(token)"]),
            as: UTF8.self)
        #expect(
            headers.contains("Set-Cookie: rewind_token_\(port)=\(token); HttpOnly; SameSite=Strict"), "\(headers)")
        // A request refused for what else it is logs nobody in.
        let refused = String(
            decoding: try ExternalTools.run(
                "curl",
                ["-s", "-D", "-", "-o", "/dev/null", "http://127.0.0.1:\(port)/v1/nothing?token=\(token)"]),
            as: UTF8.self)
        #expect(refused.hasPrefix("HTTP/1.1 404") && !refused.contains("Set-Cookie"), "\(refused)")
        #expect(try ControlClient(port: port, token: token).status()?.streams.count == 1)
        #expect(throws: ControlError.self) { try ControlClient(port: port, token: "nope").status() }
        // The Unix socket needs no token.
        #expect(try curl(live.control.socketPath, "GET", "/v1/status").status == 200)
        // An address that is not loopback is refused unless asked for on purpose.
        #expect(throws: ControlError.self) {
            _ = try RecorderControl(
                recorder: live.recorder, directory: directory + "/other",
                listen: RecorderControl.Listen(host: "0.0.0.0", port: 0, token: token))
        }
        #expect(!FileManager.default.fileExists(atPath: directory + "/other/rewind.sock"))
    }

    /// A browser's request must name the recorder by an IP address, `localhost` or a name `--allow-host` gives: a
    /// page of another site that points its own name here (DNS rebinding) gets 403 for reads and changes alike,
    /// also through the Unix socket (a proxy's way in, which needs no token). Programs name any host.
    @Test func browsersMustNameTheRecorderByAnAddressOrAnAllowedName() throws {
        let live = try LiveRecorder(allowedHosts: ["Camera.Example.com"])
        defer { try? live.finish() }
        let socket = live.control.socketPath
        func status(_ host: String, browser: Bool, _ method: String = "GET", _ path: String = "/v1/status") throws
            -> Int
        {
            let headers = ["-H", "Host: \(host)"] + (browser ? ["-H", "Sec-Fetch-Site: same-origin"] : [])
            return try curl(socket, method, path, body: method == "POST" ? #"{"label":"x"}"# : nil, extra: headers)
                .status
        }
        #expect(try status("rebound.example", browser: true) == 403)
        #expect(try status("rebound.example:8080", browser: true, "POST", "/v1/markers") == 403)
        #expect(try status("[rebound.example]", browser: true) == 403, "brackets hold an IPv6 address, not a name")
        #expect(try status("localhost:\u{661}\u{662}", browser: true) == 403, "a port is ASCII digits")
        let refused = try curl(socket, "GET", "/v1/status", extra: ["-H", "Host: rebound.example", "-H", "Origin: x"])
        #expect(refused.body.contains("--allow-host rebound.example"), "\(refused.body)")
        for host in [
            "127.0.0.1:8080", "[::1]:8080", "localhost:8080", "LocalHost.:80", "cams.localhost",
            "camera.example.com:443", "camera.example.com.",
        ] {
            #expect(try status(host, browser: true) == 200, "\(host)")
        }
        #expect(try status("rebound.example", browser: false) == 200, "a program names any host")
    }

    /// A token of one's own that guards nothing (a few characters) or that a header or a cookie cannot carry (a
    /// newline inside, a space, a semicolon, not ASCII) is refused when the file is read, saying why.
    @Test func aTokenFileWithAWeakOrUnusableTokenIsRefused() throws {
        let directory = try TemporaryDirectory.store("tokens")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        func load(_ text: String) throws -> String {
            let path = directory + "/token-\(UUID().uuidString)"
            try Data(text.utf8).write(to: URL(fileURLWithPath: path))
            chmod(path, 0o600)
            return try ControlToken.loadOrCreate(path: path)
        }
        let refused: [(String, String)] = [
            ("a\n", "fewer than 16"), ("abcdefghij\nklmnopqrst", "\"\\n\""), ("abcdefgh ijklmnopq", "\" \""),
            ("abcdefgh;ijklmnopq", "\";\""), ("abcdefghijklmnopé", "\"é\""),
        ]
        for (text, reason) in refused {
            #expect(throws: ControlError.self, "\(text.debugDescription)") { try load(text) }
            do { _ = try load(text) } catch {
                #expect("\(error)".contains(reason), "\(text.debugDescription): \(error)")
            }
        }
        #expect(try load("a+b/c=d==efghijklmn\n") == "a+b/c=d==efghijklmn")
    }

    /// Two recorders on two ports of one host: a browser sends a host's cookies to every port of it, so each
    /// recorder names its token cookie by its port, and opening one's page leaves the other's page signed in.
    @Test func recordersOnTwoPortsOfOneHostKeepTheirOwnCookies() throws {
        func listen(_ token: String) -> RecorderControl.Listen {
            RecorderControl.Listen(host: "127.0.0.1", port: 0, token: token)
        }
        let first = try LiveRecorder(listen: listen("first-token"))
        defer { try? first.finish() }
        let second = try LiveRecorder(listen: listen("second-token"))
        defer { try? second.finish() }
        // One cookie jar for both, as a browser keeps: cookies are matched by host, not by port.
        let jar = try TemporaryDirectory.store("cookies") + "/jar"
        func status(_ live: LiveRecorder, _ path: String) throws -> String {
            let port = try #require(live.control.tcpPort)
            return String(
                decoding: try ExternalTools.run(
                    "curl",
                    [
                        "-s", "--max-time", "30", "-o", "/dev/null", "-w", "%{http_code}", "-b", jar, "-c", jar,
                        "http://127.0.0.1:\(port)\(path)",
                    ]), as: UTF8.self)
        }
        #expect(try status(first, "/?token=first-token") == "200")
        #expect(try status(first, "/v1/status") == "200")
        #expect(try status(second, "/?token=second-token") == "200")
        #expect(try status(second, "/v1/status") == "200")
        #expect(try status(first, "/v1/status") == "200", "the second recorder's cookie left the first's alone")
    }

    /// A token of one's own (`openssl rand -base64`: `+`, `/`, `=`) opens the page when URL-encoded in the query,
    /// as the README and the page a browser gets without the token say; given raw, its `+` is read as a space.
    @Test func aTokenInTheQueryIsURLEncoded() throws {
        let token = "a+b/c%d=="
        let live = try LiveRecorder(listen: RecorderControl.Listen(host: "127.0.0.1", port: 0, token: token))
        defer { try? live.finish() }
        let port = try #require(live.control.tcpPort)
        func status(_ query: String, _ extra: [String] = []) throws -> String {
            String(
                decoding: try ExternalTools.run(
                    "curl",
                    ["-s", "--max-time", "30", "-o", "/dev/null", "-w", "%{http_code}"] + extra + [
                        "http://127.0.0.1:\(port)/?token=\(query)"
                    ]), as: UTF8.self)
        }
        #expect(try status("a%2Bb%2Fc%25d%3D%3D") == "200")
        #expect(try status("a+b/c%d==") == "401", "given raw, the token is read otherwise")
        let page = try ExternalTools.run(
            "curl", ["-s", "--max-time", "30", "-H", "Accept: text/html", "http://127.0.0.1:\(port)/"])
        #expect(String(decoding: page, as: UTF8.self).contains("URL-encoded"))
    }

    /// An event stream cut before its closing chunk is a recorder killed, or, after its `stopping` event, one ended
    /// at once while it stopped, or, while its socket still takes connections, a recorder that let go of this client
    /// (it blamed a crash): each said so. A one-shot server on the socket plays the recorder.
    @Test(arguments: [(false, false), (true, false), (false, true)])
    func anEventStreamCutOffSaysWhetherTheRecorderWasStopping(stopping: Bool, staysListening: Bool) throws {
        let directory = try FileManager.default.temporaryDirectory.appendingPathComponent(
            "rewind-cut-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.path + "/" + RecorderControl.socketName
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        defer { close(listener) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8).prefix($0.count - 1)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0 && listen(listener, 1) == 0
            }
        }
        try #require(bound, "\(Errno(rawValue: errno))")
        let events =
            stopping ? "event: marker\ndata: {}\n\nevent: stopping\ndata: {}\n\n" : "event: marker\ndata: {}\n\n"
        let chunk = String(events.utf8.count, radix: 16) + "\r\n" + events + "\r\n"
        let server = Thread {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            var request = [UInt8](repeating: 0, count: 4096)
            _ = read(connection, &request, request.count)
            let reply = Array(
                ("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk)
                    .utf8)
            _ = reply.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
            // Gone, as a killed recorder is (its socket refuses connections), or still there, answering its health.
            if !staysListening { unlink(path) }
            close(connection)
            guard staysListening else { return }
            let probe = accept(listener, nil, nil)
            guard probe >= 0 else { return }
            _ = read(probe, &request, request.count)
            let health = Array(#"HTTP/1.1 200 OK\#r\#nContent-Length: 15\#r\#n\#r\#n{"status":"ok"}"#.utf8)
            _ = health.withUnsafeBytes { write(probe, $0.baseAddress, $0.count) }
            close(probe)
        }
        server.start()
        var names: [String] = []
        #expect {
            _ = try ControlClient(directory: directory.path).events { name, _, _ in
                names.append(name)
                return true
            }
        } throws: { error in
            if staysListening { return error as? ControlError == .eventStreamDropped }
            guard case ControlError.eventStreamBroken(let afterStopping) = error else { return false }
            return afterStopping == stopping
        }
        #expect(names == (stopping ? ["marker", "stopping"] : ["marker"]))
        let text = "\(staysListening ? .eventStreamDropped : ControlError.eventStreamBroken(afterStopping: stopping))"
        let said =
            staysListening
            ? "closed this event stream while it goes on recording"
            : stopping ? "while it was stopping" : "without saying it was stopping"
        #expect(text.contains(said), "\(text)")
    }

    @Test func constantTimeComparison() {
        #expect(RecorderControl.constantTimeEqual("abc", "abc"))
        #expect(!RecorderControl.constantTimeEqual("abc", "abd"))
        #expect(!RecorderControl.constantTimeEqual("abc", "abcd"))
        #expect(!RecorderControl.constantTimeEqual("", "a"))
    }
}
