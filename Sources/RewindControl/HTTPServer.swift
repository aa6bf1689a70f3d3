import CMicroHTTPD
import CPlatform
import Foundation
import RewindSystem
import Synchronization

/// One HTTP request as the control's handler sees it: everything is read before the handler runs.
public struct HTTPRequest: Sendable {
    /// `GET`, `POST`, `DELETE`, …
    public var method: String
    /// The path without the query (`/v1/saves/3`).
    public var path: String
    /// The query's arguments, decoded (`?from=2s&to=4s`); of one given more than once, its last value.
    public var query: [String: String]
    /// The names of the query's arguments given more than once (`?at=1s&at=2s`), sorted: the API refuses them.
    public var repeatedQueryNames: [String]
    /// Header fields, names in lower case; of one given more than once, its last value.
    public var headers: [String: String]
    /// The names (lower case) of the header fields given more than once, sorted.
    public var repeatedHeaderNames: [String]
    /// The body (at most the server's body limit).
    public var body: [UInt8]
    /// Whether the request came over the TCP listener (which needs a token) rather than the Unix socket.
    public var isTCP: Bool

    /// Makes a request; tests call the handler with these, without a socket.
    public init(
        method: String, path: String, query: [String: String] = [:], repeatedQueryNames: [String] = [],
        headers: [String: String] = [:], repeatedHeaderNames: [String] = [], body: [UInt8] = [], isTCP: Bool = false
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.repeatedQueryNames = repeatedQueryNames
        self.headers = headers
        self.repeatedHeaderNames = repeatedHeaderNames
        self.body = body
        self.isTCP = isTCP
    }
}

/// A body produced while it is sent (Server-Sent Events): the server's connection thread calls ``read(into:)``
/// until it returns nil.
public protocol HTTPStreamBody: AnyObject, Sendable {
    /// Fills `buffer` with the next bytes, waiting a while for them; returns how many (0: nothing yet, call again),
    /// or nil at the end of the stream.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int?
    /// The client went away or the server stops: the stream ends.
    func close()
    /// The body's length when it is known ahead (sent as `Content-Length`), nil when it is not (sent chunked).
    var byteCount: UInt64? { get }
    /// Seconds the client may take nothing before the connection is closed, or nil for ``HTTPLimits``'s idle
    /// timeout.
    var stallSeconds: Int? { get }
}

extension HTTPStreamBody {
    /// Unknown: the body is sent chunked.
    public var byteCount: UInt64? { nil }
    /// The server's idle timeout.
    public var stallSeconds: Int? { nil }
}

/// An HTTP response: a status, headers and a body, whole or streamed.
public struct HTTPResponse: Sendable {
    /// The body of a response.
    public enum Body: Sendable {
        /// All of it at once.
        case bytes([UInt8])
        /// Produced while it is sent.
        case stream(any HTTPStreamBody)
    }

    /// The status code.
    public var status: Int
    /// Header fields besides `Content-Length`.
    public var headers: [(String, String)]
    /// The body.
    public var body: Body

    /// Makes a response.
    public init(status: Int, headers: [(String, String)] = [], body: Body = .bytes([])) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The body's bytes, or empty for a stream.
    public var bytes: [UInt8] {
        if case .bytes(let bytes) = body { return bytes }
        return []
    }
}

/// The limits that keep clients from taking what capture needs.
public struct HTTPLimits: Sendable {
    /// Connections served at once; one more is answered 503 and closed.
    public var maximumConnections = 64
    /// The largest request body, bytes (413 beyond).
    public var maximumBodyBytes = 64 * 1024
    /// Seconds a connection may stay idle (also while sending its headers) before it is closed.
    public var idleTimeoutSeconds = 10
    /// Seconds a connection has to send a whole request, line, headers and body, from when it opened or its
    /// previous response ended; then it is closed. A client sending a byte now and then is never idle, so without
    /// this a few dozen of them would hold every connection.
    public var requestSeconds = 10
    /// Bytes a connection may use for its request line and headers (MHD answers 431 or 414 beyond).
    public var headerMemoryBytes = 32 * 1024
    /// Finished saves remembered (`GET /v1/saves`, `/v1/files/{id}`): the newest ones; older ones are forgotten as
    /// new saves come (their files stay on disk).
    public var finishedSavesKept = 1000
    /// Connections libmicrohttpd accepts past ``maximumConnections`` (to answer them 503); beyond those it closes
    /// new connections unanswered.
    public var extraConnections = 16

    /// The defaults: 64 connections, 64 KiB bodies, 10 s idle, 10 s for a request's headers, 32 KiB of headers,
    /// 1000 finished saves.
    public init() {}

    /// Lowers the connection limits so that `servers` servers all at their limits use at most `descriptors`
    /// descriptors (one per connection).
    public mutating func fit(descriptors: Int, servers: Int) {
        let each = max(2, descriptors / max(1, servers))
        maximumConnections = max(1, min(maximumConnections, each * 4 / 5))
        extraConnections = max(1, min(extraConnections, each - maximumConnections))
    }
}

/// An HTTP/1.1 server on a socket bound by the caller, served by libmicrohttpd: one polling thread, and one
/// thread per connection that reads the request, calls the handler, and writes the response (streamed bodies are
/// pulled by that thread). The handler never runs on the capture path.
final class HTTPServer: @unchecked Sendable {
    typealias Handler = @Sendable (HTTPRequest) -> HTTPResponse

    private let handler: Handler
    /// What refuses a request from its headers alone, before its body is read; nil when nothing does.
    private let beforeBody: (@Sendable (HTTPRequest) -> HTTPResponse?)?
    let limits: HTTPLimits
    private let library: MicroHTTPD
    private let isTCP: Bool
    /// Set once by init; read by the callbacks. Unchecked: MHD serialises start and stop.
    private var daemon: OpaquePointer?
    private let connections = Atomic<Int>(0)
    /// Open streamed bodies, closed at stop so their connection threads return.
    private let streams = Mutex<[ObjectIdentifier: any HTTPStreamBody]>([:])
    /// Each open connection's socket, by connection, and since when it has been waiting for a whole request (nil
    /// while a request is served). Entries go when MHD says the connection closed, before it closes the socket.
    private let sockets = Mutex<[UInt: (socket: Int32, waitingSince: ContinuousClock.Instant?)]>([:])

    /// Connections open now.
    var openConnections: Int { connections.load(ordering: .relaxed) }

    /// Streamed responses still being sent.
    var openStreams: Int { streams.withAnnotatedLock { $0.count } }

    /// Streamed responses of a known length still being sent: downloads of files (event streams have none).
    var openDownloads: Int { streams.withAnnotatedLock { $0.values.filter { $0.byteCount != nil }.count } }

    /// Starts serving on `listener` (already listening); the server owns it from now on and closes it at
    /// ``stop()``.
    ///
    /// - Throws: ``ControlError/serverFailed(_:)`` when libmicrohttpd cannot start.
    /// - Parameter beforeBody: called with a request's headers (an empty body) once they are in: a response it
    ///   returns is sent at once, and the body is never read.
    init(
        listener: Int32, isTCP: Bool, limits: HTTPLimits, beforeBody: (@Sendable (HTTPRequest) -> HTTPResponse?)? = nil,
        handler: @escaping Handler
    ) throws {
        guard let library = MicroHTTPD.library else {
            close(listener)
            throw ControlError.serverFailed("cannot load libmicrohttpd: \(MicroHTTPD.loadError ?? "unknown error")")
        }
        self.handler = handler
        self.beforeBody = beforeBody
        self.limits = limits
        self.isTCP = isTCP
        self.library = library
        let context = Unmanaged.passUnretained(self).toOpaque()
        // MHD's own limit is above ours, so the one past ours still gets a 503 rather than a closed socket.
        daemon = withUnsafePointer(to: library.api) { api in
            rewind_mhd_start(
                api, listener, UInt32(limits.maximumConnections + limits.extraConnections),
                UInt32(limits.idleTimeoutSeconds),
                limits.headerMemoryBytes, accessCallback, context, completedCallback, notifyCallback)
        }
        guard daemon != nil else {
            // libmicrohttpd leaves errno as its last failure set it: EAGAIN when its thread was refused.
            let cause = Errno.current
            close(listener)
            if cause.rawValue == EAGAIN { throw ThreadStartFailed(name: "libmicrohttpd", errno: cause) }
            throw ControlError.serverFailed("libmicrohttpd could not start on the listening socket (\(cause))")
        }
    }

    /// Ends every stream, then stops the daemon: it waits for each connection's thread and closes the listener.
    func stop() {
        let open = streams.withAnnotatedLock { streams in
            defer { streams.removeAll() }
            return Array(streams.values)
        }
        for stream in open { stream.close() }
        if let daemon {
            library.api.stop_daemon(daemon)
            self.daemon = nil
        }
    }

    deinit { stop() }

    // MARK: Callbacks (on MHD's threads)

    /// What a request collects between the callbacks: its body, and whether it was refused early.
    final class Exchange {
        var body: [UInt8] = []
        var refusal: HTTPResponse?
    }

    fileprivate func connectionChanged(_ connection: OpaquePointer, started: Bool) {
        connections.add(started ? 1 : -1, ordering: .relaxed)
        let key = UInt(bitPattern: connection)
        if started {
            let socket = withUnsafePointer(to: library.api) { rewind_mhd_connection_socket($0, connection) }
            sockets.withAnnotatedLock { $0[key] = (socket, .now) }
        } else {
            _ = sockets.withAnnotatedLock { $0.removeValue(forKey: key) }
        }
    }

    /// Marks `connection` as serving a request (its headers are in) or, once the response ended, as waiting for
    /// the next one.
    fileprivate func requestChanged(_ connection: OpaquePointer, serving: Bool) {
        sockets.withAnnotatedLock { $0[UInt(bitPattern: connection)]?.waitingSince = serving ? nil : .now }
    }

    /// Shuts down the sockets of connections that have waited longer than ``HTTPLimits/requestSeconds`` for a whole
    /// request: their threads then see the connection end and close it. Under the lock, so no socket is shut
    /// after MHD closed it (its entry goes first). Called by the control's thread four times a second.
    func closeLateRequests() {
        let late = ContinuousClock.now - .seconds(limits.requestSeconds)
        sockets.withAnnotatedLock { sockets in
            for (key, entry) in sockets {
                guard let since = entry.waitingSince, since < late, entry.socket >= 0 else { continue }
                shutdown(entry.socket, Int32(SHUT_RDWR))
                sockets[key]?.waitingSince = nil
            }
        }
    }

    fileprivate func access(
        connection: OpaquePointer, url: String, method: String, upload: UnsafePointer<CChar>?,
        uploadSize: UnsafeMutablePointer<Int>, state: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> MHD_Result {
        guard let existing = state.pointee, !isTargetHoldingNUL(existing) else {
            // The first call: headers only. Refuse early what must not be read. The request is not served yet: its
            // body too must come within the time for a whole request (a byte every few seconds is never idle).
            let exchange = Exchange()
            let holdsNUL = state.pointee.map(isTargetHoldingNUL) ?? false
            state.pointee = Unmanaged.passRetained(exchange).toOpaque()
            if holdsNUL {
                exchange.refusal =
                    APIError(
                        .badRequest,
                        "the request's path or query holds %00 (a NUL character), which no name, id or value may hold"
                    ).response
            } else if openConnections > limits.maximumConnections {
                exchange.refusal = APIError(
                    .unavailable, "too many connections (at most \(limits.maximumConnections)); try again shortly"
                ).response(status: 503)
            } else if let problem = framingProblem(collect(connection, .HEADER_KIND, lowercased: true)) {
                exchange.refusal = APIError(.badRequest, problem).response
            } else if let length = header(connection, "Content-Length").flatMap(Int.init),
                length > limits.maximumBodyBytes
            {
                exchange.refusal = APIError.bodyTooLarge(limits.maximumBodyBytes).response
            } else if let beforeBody {
                // What the headers alone refuse (a TCP request without the token): its body is never read.
                let headers = collect(connection, .HEADER_KIND, lowercased: true)
                let query = collect(connection, .GET_ARGUMENT_KIND, lowercased: false)
                exchange.refusal = beforeBody(
                    HTTPRequest(
                        method: method, path: url, query: query.values, repeatedQueryNames: query.repeated.sorted(),
                        headers: headers.values, repeatedHeaderNames: headers.repeated.sorted(), body: [],
                        isTCP: isTCP))
            }
            // A refusal goes out at once, before any body is read (MHD then closes the connection).
            if let refusal = exchange.refusal {
                requestChanged(connection, serving: true)
                return queue(refusal, on: connection)
            }
            return .YES
        }
        let exchange = Unmanaged<Exchange>.fromOpaque(existing).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            if exchange.refusal == nil, let upload {
                let count = uploadSize.pointee
                if exchange.body.count + count > limits.maximumBodyBytes {
                    exchange.refusal = APIError.bodyTooLarge(limits.maximumBodyBytes).response
                    exchange.body = []
                } else {
                    upload.withMemoryRebound(to: UInt8.self, capacity: count) {
                        exchange.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: count))
                    }
                }
            }
            uploadSize.pointee = 0
            return .YES
        }
        // The whole request is in: it is served from now on, however long its response takes.
        requestChanged(connection, serving: true)
        let response: HTTPResponse
        if let refusal = exchange.refusal {
            response = refusal
        } else {
            let headers = collect(connection, .HEADER_KIND, lowercased: true)
            let query = collect(connection, .GET_ARGUMENT_KIND, lowercased: false)
            response = handler(
                HTTPRequest(
                    method: method, path: url, query: query.values, repeatedQueryNames: query.repeated.sorted(),
                    headers: headers.values, repeatedHeaderNames: headers.repeated.sorted(), body: exchange.body,
                    isTCP: isTCP))
        }
        return queue(response, on: connection)
    }

    /// What is wrong with how a request frames its body, from its headers (names lowercased): both framings, or a
    /// `Content-Length` or `Transfer-Encoding` given twice (two readings of one body: a proxy in front may take the
    /// other one, request smuggling; RFC 9112 §6.3), or a transfer coding other than `chunked` alone, which this
    /// server does not read (it waited for the request's time to run out, answering nothing). Nil when the framing
    /// is one it reads.
    private func framingProblem(_ headers: (values: [String: String], repeated: Set<String>)) -> String? {
        if headers.values["content-length"] != nil, headers.values["transfer-encoding"] != nil {
            return "the request gives both Content-Length and Transfer-Encoding, which HTTP/1.1 forbids (RFC 9112): "
                + "frame the body one way"
        }
        for name in ["Content-Length", "Transfer-Encoding"] where headers.repeated.contains(name.lowercased()) {
            return "the request gives \(name) more than once, which HTTP/1.1 forbids for one body (RFC 9112): give it "
                + "once"
        }
        if let coding = headers.values["transfer-encoding"],
            coding.trimmingCharacters(in: .whitespaces).lowercased() != "chunked"
        {
            return "the request's Transfer-Encoding '\(coding)' is not one this recorder reads: send the body with "
                + "Content-Length, or Transfer-Encoding: chunked alone"
        }
        return nil
    }

    private func header(_ connection: OpaquePointer, _ name: String) -> String? {
        library.api.lookup_connection_value(connection, .HEADER_KIND, name).map { String(cString: $0) }
    }

    /// The values of `kind` (headers or query arguments), the last of each name, and the names given more than once.
    private func collect(_ connection: OpaquePointer, _ kind: MHD_ValueKind, lowercased: Bool) -> (
        values: [String: String], repeated: Set<String>
    ) {
        final class Box {
            var values: [String: String] = [:]
            var repeated: Set<String> = []
            let lowercased: Bool
            init(lowercased: Bool) { self.lowercased = lowercased }
        }
        let box = Box(lowercased: lowercased)
        _ = withExtendedLifetime(box) {
            library.api.get_connection_values(
                connection, kind,
                { context, _, key, value in
                    let box = Unmanaged<Box>.fromOpaque(context!).takeUnretainedValue()
                    // An empty name (`?&&`, `?=1`) names no parameter: nothing is given.
                    if let key, key.pointee != 0 {
                        let given = String(cString: key)
                        let name = box.lowercased ? given.lowercased() : given
                        let old = box.values.updateValue(value.map { String(cString: $0) } ?? "", forKey: name)
                        if old != nil { box.repeated.insert(name) }
                    }
                    return .YES
                }, Unmanaged.passUnretained(box).toOpaque())
        }
        return (box.values, box.repeated)
    }

    /// Headers every answer carries, refusals and errors included: its bytes are only what its `Content-Type`
    /// says (no sniffing a frame or a JSON error into a script or a page), and only a page of this origin may embed
    /// it. A page on another port of the same host is of the same site, so the `SameSite=Strict` token cookie goes
    /// with its requests: without `same-origin` its `<img>` could show this recorder's frames.
    static let everyResponseHeaders: [(String, String)] = [
        ("X-Content-Type-Options", "nosniff"), ("Cross-Origin-Resource-Policy", "same-origin"),
    ]

    private func queue(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
        let made: OpaquePointer?
        switch response.body {
        case .bytes(let bytes):
            made = bytes.withUnsafeBytes { raw in
                library.api.create_response_from_buffer(
                    raw.count, UnsafeMutableRawPointer(mutating: raw.baseAddress), mustCopy)
            }
        case .stream(let stream):
            if let seconds = stream.stallSeconds {
                withUnsafePointer(to: library.api) { rewind_mhd_set_timeout($0, connection, UInt32(seconds)) }
            }
            let box = StreamBox(stream: stream, server: self)
            streams.withAnnotatedLock { $0[ObjectIdentifier(stream)] = stream }
            made = library.api.create_response_from_callback(
                stream.byteCount ?? UInt64.max, 16 * 1024, streamReader, Unmanaged.passRetained(box).toOpaque(),
                streamFree)
        }
        guard let made else { return .NO }
        defer { library.api.destroy_response(made) }
        for (name, value) in response.headers { _ = library.api.add_response_header(made, name, value) }
        for (name, value) in Self.everyResponseHeaders
        where !response.headers.contains(where: { $0.0.caseInsensitiveCompare(name) == .orderedSame }) {
            _ = library.api.add_response_header(made, name, value)
        }
        return library.api.queue_response(connection, UInt32(response.status), made)
    }

    fileprivate func streamEnded(_ stream: any HTTPStreamBody) {
        _ = streams.withAnnotatedLock { $0.removeValue(forKey: ObjectIdentifier(stream)) }
        stream.close()
    }

    final class StreamBox {
        let stream: any HTTPStreamBody
        let server: HTTPServer
        init(stream: any HTTPStreamBody, server: HTTPServer) {
            self.stream = stream
            self.server = server
        }
    }
}

/// libmicrohttpd's functions, loaded once, when the first server starts (the library is not linked: see
/// CMicroHTTPD's shim.h).
final class MicroHTTPD: @unchecked Sendable {
    /// The resolved functions; immutable once loaded.
    let api: rewind_mhd_api

    private init(api: rewind_mhd_api) { self.api = api }

    private static let loaded: Result<MicroHTTPD, LoadFailure> = {
        var api = rewind_mhd_api()
        if let error = rewind_mhd_load(&api) { return .failure(LoadFailure(message: String(cString: error))) }
        return .success(MicroHTTPD(api: api))
    }()

    private struct LoadFailure: Error {
        let message: String
    }

    /// The library, or nil when it cannot be loaded (``loadError`` says why).
    static var library: MicroHTTPD? { try? loaded.get() }

    /// Why the library could not be loaded (the dynamic loader's message), or nil.
    static var loadError: String? {
        if case .failure(let failure) = loaded { return failure.message }
        return nil
    }
}

/// MHD_RESPMEM_MUST_COPY (Swift does not import the enum's case names).
private let mustCopy = MHD_ResponseMemoryMode(rawValue: 2)!

private func server(_ context: UnsafeMutableRawPointer?) -> HTTPServer {
    Unmanaged<HTTPServer>.fromOpaque(context!).takeUnretainedValue()
}

private let accessCallback: MHD_AccessHandlerCallback = {
    context, connection, url, method, _, upload, uploadSize, state in
    server(context).access(
        connection: connection!, url: String(cString: url!), method: String(cString: method!), upload: upload,
        uploadSize: uploadSize!, state: state!)
}

/// Whether a request's state is the marker `rewind_mhd_mark_nul` gave it (its raw target holds `%00`), until its
/// first call.
private func isTargetHoldingNUL(_ state: UnsafeMutableRawPointer) -> Bool { Int(bitPattern: state) == 1 }

private let completedCallback: MHD_RequestCompletedCallback = { context, connection, state, _ in
    if let connection { server(context).requestChanged(connection, serving: false) }
    guard let state, let exchange = state.pointee, !isTargetHoldingNUL(exchange) else { return }
    Unmanaged<HTTPServer.Exchange>.fromOpaque(exchange).release()
    state.pointee = nil
    // What the request allocated is free now; the holes it left in malloc's heaps go back now and then.
    ResidentMemory.trimHeapIfDue()
}

private let notifyCallback: MHD_NotifyConnectionCallback = { context, connection, _, code in
    // MHD_CONNECTION_NOTIFY_STARTED is 0, MHD_CONNECTION_NOTIFY_CLOSED 1.
    server(context).connectionChanged(connection!, started: code.rawValue == 0)
}

private let streamReader: MHD_ContentReaderCallback = { context, _, buffer, capacity in
    let box = Unmanaged<HTTPServer.StreamBox>.fromOpaque(context!).takeUnretainedValue()
    guard let count = box.stream.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: capacity)) else {
        return -1  // MHD_CONTENT_READER_END_OF_STREAM
    }
    return count
}

private let streamFree: MHD_ContentReaderFreeCallback = { context in
    let box = Unmanaged<HTTPServer.StreamBox>.fromOpaque(context!).takeRetainedValue()
    box.server.streamEnded(box.stream)
}
