import CPlatform
import Foundation
import RewindSystem

/// The client side of a live recorder's HTTP API (what `rewind save`, `clip`, `status`, `info`, `mark`, `events`
/// use): HTTP/1.1 over `DIR/rewind.sock`, or over TCP with a bearer token. One connection per request.
public struct ControlClient: Sendable {
    /// Where the recorder listens.
    public enum Endpoint: Sendable, Hashable {
        /// The Unix socket `DIR/rewind.sock`.
        case directory(String)
        /// 127.0.0.1:`port`, with the bearer token.
        case tcp(port: Int, token: String?)
    }

    /// Where requests go.
    public let endpoint: Endpoint

    /// A client of the recorder serving `directory`.
    public init(directory: String) { endpoint = .directory(directory) }

    /// A client of the recorder listening on 127.0.0.1:`port` (`--listen`), sending `token` when given.
    public init(port: Int, token: String?) { endpoint = .tcp(port: port, token: token) }

    // MARK: Typed calls (nil: no recorder serves the endpoint)

    /// `GET /v1/status`.
    ///
    /// - Throws: ``ControlError``: the connection broke, or the recorder answered with an error (`refused`).
    public func status() throws -> StatusResponse? { try call("GET", "/v1/status", what: "the request for its status") }

    /// `GET /v1/streams`.
    public func streams() throws -> StreamList? { try call("GET", "/v1/streams", what: "the stream list") }

    /// `POST /v1/saves`: returns the save object (done when `wait`, else as it stands).
    ///
    /// - Throws: ``ControlError/refused(_:)`` with the recorder's error; ``ControlError/recorderStopped(request:)``
    ///   when the recorder went away before answering.
    public func save(_ request: SaveRequest) throws -> SaveObject? {
        try call("POST", "/v1/saves", body: request, what: "the save", waits: request.wait == true)
    }

    /// `POST /v1/clips`.
    public func clip(_ request: ClipRequest) throws -> SaveObject? {
        try call("POST", "/v1/clips", body: request, what: "the clip", waits: request.wait == true)
    }

    /// How long a request waits for the recorder's next bytes before it gives up (``ControlError/noAnswer(request:seconds:)``):
    /// every answer comes at once but those asked to wait for an export, and the event stream has a comment line
    /// every second.
    public static let answerTimeoutSeconds = 30

    /// `GET /v1/saves/{id}`.
    public func save(id: Int) throws -> SaveObject? { try call("GET", "/v1/saves/\(id)", what: "save \(id)") }

    /// `GET /v1/saves`.
    public func saves() throws -> SaveList? { try call("GET", "/v1/saves", what: "the saves") }

    /// `DELETE /v1/saves/{id}`: cancels; returns the save as it ended.
    public func cancelSave(id: Int) throws -> SaveObject? {
        try call("DELETE", "/v1/saves/\(id)", what: "cancelling save \(id)")
    }

    /// `POST /v1/saves/{id}/extend`.
    public func extendSave(id: Int, after: String) throws -> SaveObject? {
        try call("POST", "/v1/saves/\(id)/extend", body: ExtendRequest(after: after), what: "extending save \(id)")
    }

    /// `POST /v1/markers`.
    public func mark(_ request: MarkerRequest) throws -> MarkerList? {
        try call("POST", "/v1/markers", body: request, what: "the marker")
    }

    /// `GET /v1/markers`.
    public func markers() throws -> MarkerList? { try call("GET", "/v1/markers", what: "the markers") }

    /// `DELETE /v1/markers/{id}`.
    public func unmark(id: Int64) throws -> MarkerBody? {
        try call("DELETE", "/v1/markers/\(id)", what: "deleting marker \(id)")
    }

    /// Polls `GET /v1/saves/{id}` until the save ends, and returns it.
    ///
    /// - Throws: ``ControlError/recorderStopped(request:)`` when the recorder goes away first.
    public func waitForSave(id: Int, pollInterval: Duration = .milliseconds(50)) throws -> SaveObject {
        while true {
            guard let save = try save(id: id) else { throw ControlError.recorderStopped(request: "save \(id)") }
            if save.state.isFinal { return save }
            System.sleep(for: pollInterval)
        }
    }

    /// Reads `GET /v1/events` and calls `body` with each event's name, JSON data and id (nil for `status` and the
    /// events the recorder makes for one client) until it returns false or the recorder ends the stream. Returns
    /// false when no recorder serves the endpoint.
    ///
    /// - Parameter lastEventID: the id of the last event had before: the stream starts with the events after it.
    public func events(
        after lastEventID: String? = nil, _ body: (_ name: String, _ data: String, _ id: String?) throws -> Bool
    ) throws -> Bool {
        guard let connection = try connect() else { return false }
        connection.limitWaits(what: "the event stream")
        var path = "/v1/events"
        if let lastEventID {
            path += "?last_event_id=" + (lastEventID.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
        }
        try connection.send(request(method: "GET", path: path, body: nil))
        let head = try connection.readHead(what: "the event stream")
        guard head.status == 200 else {
            let rest = try connection.readBody(head, what: "the event stream")
            throw Self.failure(status: head.status, body: rest)
        }
        var pending: [UInt8] = []
        var name = "message"
        var data = ""
        var id: String?
        var stopping = false
        // A connection cut in the middle (no closing chunk) is a recorder that was killed, not a finished stream.
        func nextChunk() throws -> [UInt8]? {
            do {
                return try connection.readChunk(head)
            } catch ControlError.recorderStopped {
                // Still accepting connections: it runs, and closed this stream itself (a client that takes none of
                // its events for a while is let go: "killed or crashed" sent the user looking for a crash).
                if !stopping, answersHealth() { throw ControlError.eventStreamDropped }
                throw ControlError.eventStreamBroken(afterStopping: stopping)
            }
        }
        while let chunk = try nextChunk() {
            pending += chunk
            while let end = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[..<end], as: UTF8.self)
                pending.removeSubrange(...end)
                if line.isEmpty {
                    if !data.isEmpty {
                        stopping = stopping || name == "stopping"
                        guard try body(name, data, id) else { return true }
                    }
                    name = "message"
                    data = ""
                    id = nil
                } else if line.hasPrefix("id: ") {
                    id = String(line.dropFirst(4))
                } else if line.hasPrefix("event: ") {
                    name = String(line.dropFirst(7))
                } else if line.hasPrefix("data: ") {
                    data += String(line.dropFirst(6))
                }
            }
        }
        return true
    }

    // MARK: Transport

    /// One request and its decoded answer; nil when no recorder serves the endpoint.
    private func call<Answer: Decodable>(
        _ method: String, _ path: String, body: (some Encodable)? = Optional<String>.none, what: String,
        waits: Bool = false
    ) throws -> Answer? {
        guard
            let (status, bytes) = try exchange(
                method, path, body: body.map { APICoding.encode($0) }, what: what, waits: waits)
        else { return nil }
        guard (200..<300).contains(status) else { throw Self.failure(status: status, body: bytes) }
        do {
            return try JSONDecoder().decode(Answer.self, from: Data(bytes))
        } catch {
            throw ControlError.badReply(excerpt: APICoding.excerpt(bytes))
        }
    }

    /// Sends a request and reads the whole answer: its status and body; nil when no recorder serves the endpoint.
    ///
    /// - Throws: ``ControlError/recorderStopped(request:)`` when the connection ends before the answer does.
    /// - Parameter waits: whether the answer may take long (an export it waits for): no time limit then.
    public func exchange(_ method: String, _ path: String, body: [UInt8]?, what: String, waits: Bool = false)
        throws -> (Int, [UInt8])?
    {
        // A GET changes nothing, so one whose connection ends before its answer begins is asked again: a recorder
        // closes connections it has no thread for; one that is gone refuses the next connection.
        let retryUntil = ContinuousClock.now + .seconds(2)
        while true {
            guard let connection = try connect() else { return nil }
            if waits { connection.limitWaitsWhileStopped(what: what) } else { connection.limitWaits(what: what) }
            let head: Connection.Head
            do {
                try connection.send(request(method: method, path: path, body: body))
                head = try connection.readHead(what: what)
            } catch let error as ControlError where error.isDroppedConnection {
                if method == "GET" && ContinuousClock.now < retryUntil {
                    System.sleep(for: .milliseconds(50))
                    continue
                }
                // Still answering, or still taking connections a moment later (short of threads, it closes each
                // unanswered): it did not stop. One being killed takes a connection for a moment, its listening
                // socket closed after the connection that broke, and none after (it said "yet it still runs" of a
                // killed recorder).
                if answersHealth() { throw ControlError.connectionDropped(request: what) }
                System.sleep(for: .milliseconds(500))
                if try connect() != nil { throw ControlError.connectionDropped(request: what) }
                throw error
            }
            return (head.status, try connection.readBody(head, what: what))
        }
    }

    private static func failure(status: Int, body: [UInt8]) -> ControlError {
        if let error = try? JSONDecoder().decode(APIError.Body.self, from: Data(body)) {
            let code = APIError.Code(rawValue: error.error.code) ?? .failed
            return .refused(APIError(code, error.error.message))
        }
        return .badReply(excerpt: "HTTP \(status): " + APICoding.excerpt(body))
    }

    private func request(method: String, path: String, body: [UInt8]?) -> [UInt8] {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: rewind\r\nConnection: close\r\n"
        if case .tcp(_, let token?) = endpoint { head += "Authorization: Bearer \(token)\r\n" }
        if let body { head += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n" }
        head += "\r\n"
        return Array(head.utf8) + (body ?? [])
    }

    /// Whether a recorder answers `GET /v1/health` with 200 within `seconds`: one that is being killed may still
    /// take a connection for a moment (its listening socket closed after the connection that broke), but answers
    /// nothing.
    private func answersHealth(within seconds: Int = 2) -> Bool {
        guard let connection = (try? connect()).flatMap({ $0 }) else { return false }
        connection.limitWaits(what: "the health check", seconds: seconds)
        guard (try? connection.send(request(method: "GET", path: "/v1/health", body: nil))) != nil,
            let head = try? connection.readHead(what: "the health check")
        else { return false }
        return head.status == 200
    }

    private func connect() throws -> Connection? {
        switch endpoint {
        case .directory(let directory):
            let path = directory + "/" + RecorderControl.socketName
            let connected = rewind_unix_connect(path)
            guard connected >= 0 else {
                // No recorder: no socket, one left by a recorder that is gone, or a path too long for a socket.
                if -connected == ENOENT || -connected == ECONNREFUSED || -connected == ENAMETOOLONG { return nil }
                throw ControlError.socket(action: "connect to", path: path, Errno(rawValue: -connected))
            }
            return Connection(fd: connected)
        case .tcp(let port, _):
            let connected = rewind_tcp_connect(Int32(port))
            guard connected >= 0 else {
                if -connected == ECONNREFUSED { return nil }
                throw ControlError.socket(action: "connect to", path: "127.0.0.1:\(port)", Errno(rawValue: -connected))
            }
            return Connection(fd: connected)
        }
    }

    /// One connection: writes a request, reads a response's head and body (`Content-Length`, chunked, or to the
    /// end). Closes its descriptor when it ends.
    final class Connection {
        struct Head {
            var status: Int
            var contentLength: Int?
            var isChunked: Bool
        }

        private let fd: Int32
        private var buffered: [UInt8] = []
        private var atEnd = false
        /// The request named in a ``ControlError/noAnswer(request:seconds:)``, once reads are limited.
        private var limited: String?
        /// Whether reads give up only once the recorder has been stopped for the time limit (a request that waits
        /// for an export, whose answer may rightly take longer), and since when it has been seen stopped.
        private var givesUpOnlyWhenStopped = false
        private var stoppedSince: ContinuousClock.Instant?

        init(fd: Int32) { self.fd = fd }
        deinit { close(fd) }

        /// From now on a read that gets nothing for ``ControlClient/answerTimeoutSeconds`` fails, naming `what`.
        func limitWaits(what: String, seconds: Int = ControlClient.answerTimeoutSeconds) {
            var limit = timeval(tv_sec: seconds, tv_usec: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            limited = what
        }

        /// From now on reads wait as long as the recorder runs, but fail (naming `what`) once it has been stopped
        /// (SIGSTOP, Ctrl-Z) for ``ControlClient/answerTimeoutSeconds``: a recorder reached over TCP, whose state
        /// cannot be seen, is waited for.
        func limitWaitsWhileStopped(what: String) {
            var check = timeval(tv_sec: 1, tv_usec: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &check, socklen_t(MemoryLayout<timeval>.size))
            limited = what
            givesUpOnlyWhenStopped = true
        }

        /// After a read that timed out: whether to read again (the recorder runs, or has not been stopped for the
        /// whole limit yet).
        private func waitsOn() -> Bool {
            guard givesUpOnlyWhenStopped else { return false }
            guard rewind_socket_peer_is_stopped(fd) == 1 else {
                stoppedSince = nil
                return true
            }
            let since = stoppedSince ?? ContinuousClock.now
            stoppedSince = since
            return ContinuousClock.now - since < .seconds(ControlClient.answerTimeoutSeconds)
        }

        func send(_ bytes: [UInt8]) throws {
            var offset = 0
            while offset < bytes.count {
                let sent = bytes[offset...].withUnsafeBytes { raw in
                    System.retryingInterrupts { Glibc.send(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL)) }
                }
                guard sent > 0 else {
                    throw ControlError.socket(action: "send on", path: nil, Errno(rawValue: errno))
                }
                offset += sent
            }
        }

        /// Reads more bytes into the buffer; false at the end of the stream.
        private func fill() throws -> Bool {
            guard !atEnd else { return false }
            var chunk = [UInt8](repeating: 0, count: 16 * 1024)
            var count = 0
            var failure: Int32 = 0
            repeat {
                count = chunk.withUnsafeMutableBytes { raw in
                    System.retryingInterrupts { Glibc.recv(fd, raw.baseAddress, raw.count, 0) }
                }
                failure = count < 0 ? errno : 0
            } while count < 0 && (failure == EAGAIN || failure == EWOULDBLOCK) && waitsOn()
            guard count >= 0 else {
                if failure == ECONNRESET {
                    atEnd = true
                    return false
                }
                if let limited, failure == EAGAIN || failure == EWOULDBLOCK {
                    throw ControlError.noAnswer(request: limited, seconds: ControlClient.answerTimeoutSeconds)
                }
                throw ControlError.socket(action: "read from", path: nil, Errno(rawValue: failure))
            }
            if count == 0 {
                atEnd = true
                return false
            }
            buffered += chunk[0..<count]
            return true
        }

        private func line(what: String) throws -> String {
            while true {
                if let end = buffered.firstIndex(of: UInt8(ascii: "\n")) {
                    var line = Array(buffered[..<end])
                    buffered.removeSubrange(...end)
                    if line.last == UInt8(ascii: "\r") { line.removeLast() }
                    return String(decoding: line, as: UTF8.self)
                }
                guard try fill() else { throw ControlError.recorderStopped(request: what) }
            }
        }

        func readHead(what: String) throws -> Head {
            let statusLine = try line(what: what)
            let parts = statusLine.split(separator: " ")
            guard parts.count >= 2, parts[0].hasPrefix("HTTP/"), let status = Int(parts[1]) else {
                throw ControlError.badReply(excerpt: statusLine)
            }
            var head = Head(status: status, contentLength: nil, isChunked: false)
            while true {
                let field = try line(what: what)
                if field.isEmpty { break }
                guard let colon = field.firstIndex(of: ":") else { continue }
                let name = field[..<colon].lowercased()
                let value = field[field.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                if name == "content-length" { head.contentLength = Int(value) }
                if name == "transfer-encoding" && value.lowercased().contains("chunked") { head.isChunked = true }
            }
            return head
        }

        func readBody(_ head: Head, what: String) throws -> [UInt8] {
            var body: [UInt8] = []
            if head.isChunked {
                while let chunk = try readChunk(head) { body += chunk }
                return body
            }
            if let length = head.contentLength {
                while buffered.count < length {
                    guard try fill() else { throw ControlError.recorderStopped(request: what) }
                }
                body = Array(buffered[..<length])
                buffered.removeSubrange(..<length)
                return body
            }
            while try fill() {}
            defer { buffered = [] }
            return buffered
        }

        /// The next piece of a streamed body, or nil at its end.
        func readChunk(_ head: Head) throws -> [UInt8]? {
            guard head.isChunked else {
                if buffered.isEmpty, try !fill() { return nil }
                defer { buffered = [] }
                return buffered
            }
            let sizeLine = try line(what: "the stream")
            guard let size = Int(sizeLine.split(separator: ";").first ?? "", radix: 16) else {
                throw ControlError.badReply(excerpt: sizeLine)
            }
            if size == 0 { return nil }
            while buffered.count < size + 2 {
                guard try fill() else { throw ControlError.recorderStopped(request: "the stream") }
            }
            let chunk = Array(buffered[..<size])
            buffered.removeSubrange(..<(size + 2))
            return chunk
        }
    }
}

/// The file a client has a live recorder write an export into first, when its `-o` is standard output, a FIFO or a
/// device: `DIR/exports/stdout-PID-N.EXT` in the store, which the client copies to its `-o` and removes (the recorder
/// writes regular files only, so nothing that reads slowly, or never, holds it up).
package enum StagingFile {
    /// How the file's name starts; `PID` (the client's) follows, then `-`.
    package static let prefix = "stdout-"

    /// A new name for a file of client `pid` in `exports`, with the format's extension `fileExtension`.
    package static func path(in exports: String, pid: pid_t, fileExtension: String) -> String {
        exports + "/\(prefix)\(pid)-\(UInt32.random(in: 0...UInt32.max)).\(fileExtension)"
    }

    /// The store directory `path` is a staging file of (the directory holding its `exports/`); nil for any other path.
    package static func store(ofStagingFile path: String) -> String? {
        let url = URL(fileURLWithPath: path)
        let exports = url.deletingLastPathComponent()
        guard url.lastPathComponent.hasPrefix(prefix), exports.lastPathComponent == "exports" else { return nil }
        return exports.deletingLastPathComponent().path
    }
}
