import CPlatform
import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import SegmentStore
import Synchronization

/// The HTTP API of a live recorder on `DIR/rewind.sock` (and, optionally, a TCP port with a token): saves with
/// pre-roll and post-roll, clips, markers and holds, status and live events, without stopping or slowing capture.
///
/// Logic and transport are split. ``handle(_:)`` is all of the logic: it takes an ``HTTPRequest`` and returns an
/// ``HTTPResponse``, and tests call it without a socket. The transport is libmicrohttpd (`HTTPServer`): a thread
/// polls the listening sockets and each connection gets a thread that reads the request (body at most
/// ``HTTPLimits/maximumBodyBytes``), calls `handle`, and writes the answer; event streams are pulled by their
/// connection's thread from a bounded queue. The control's own thread (`rewind-control`) starts exports that are
/// due, serves SIGUSR1 (through a wake pipe), and turns the recorder's counters into events. Exports run on threads
/// of their own, at most ``concurrentExports`` at once.
///
/// The producer never waits for any of it: the control reads the recorder's counters and queries its frames a
/// batch at a time, as any query does.
public final class RecorderControl: Sendable {
    /// The socket's file name inside the store directory.
    public static let socketName = "rewind.sock"
    /// How many saves and clips export at once (4); the rest stay `waiting`.
    public static let concurrentExports = RecorderStream.concurrentQueries

    /// Where the TCP listener goes and how it is guarded.
    public struct Listen: Sendable, Hashable {
        /// A numeric IPv4 or IPv6 address.
        public var host: String
        /// The port (0: any free one; ``RecorderControl/tcpPort`` says which).
        public var port: Int
        /// Allow an address that is not loopback.
        public var allowsAnyAddress: Bool
        /// The bearer token every TCP request must carry.
        public var token: String
        /// Where the token is kept, named to a browser that opens the page without it (nil: `DIR/token`).
        public var tokenFile: String?

        /// Makes listen options; each parameter is the property of the same name.
        public init(host: String, port: Int, allowsAnyAddress: Bool = false, token: String, tokenFile: String? = nil) {
            self.host = host
            self.port = port
            self.allowsAnyAddress = allowsAnyAddress
            self.token = token
            self.tokenFile = tokenFile
        }

        /// `HOST:PORT` as `--listen` takes it and a URL has it: an IPv6 address in brackets (`[::1]:8080`).
        public static func address(host: String, port: Int) -> String {
            host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        }

        /// Parses `HOST:PORT` (`127.0.0.1:8080`, `[::1]:8080`).
        ///
        /// - Throws: ``ControlError/badListenAddress(_:reason:)``.
        public static func parse(_ text: String) throws -> (host: String, port: Int) {
            guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
                (0...65535).contains(port)
            else {
                throw ControlError.badListenAddress(text, reason: .malformed)
            }
            var host = String(text[..<colon])
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            return (host, port)
        }

        /// Parses `HOST:PORT` and checks the host before anything is made: a numeric address, and a loopback one
        /// unless `allowsAnyAddress`.
        ///
        /// - Throws: ``ControlError/badListenAddress(_:reason:)``.
        public static func check(_ text: String, allowsAnyAddress: Bool) throws -> (host: String, port: Int) {
            let (host, port) = try parse(text)
            var v4 = in_addr()
            var v6 = in6_addr()
            let isLoopback: Bool
            if inet_pton(AF_INET, host, &v4) == 1 {
                isLoopback = UInt32(bigEndian: v4.s_addr) >> 24 == 127
            } else if inet_pton(AF_INET6, host, &v6) == 1 {
                isLoopback = withUnsafeBytes(of: &v6) { $0.dropLast().allSatisfy { $0 == 0 } && $0.last == 1 }
            } else {
                throw ControlError.badListenAddress(text, reason: .notNumeric)
            }
            guard isLoopback || allowsAnyAddress else {
                throw ControlError.badListenAddress(text, reason: .notLoopback)
            }
            return (host, port)
        }

        /// Binds `host`:`port` a moment and lets it go, so that a port something else holds is refused before a
        /// store is made for a recording that could not serve it (the server binds it again when it starts, the
        /// same way: `rewind_tcp_listen`).
        ///
        /// - Throws: ``ControlError/badListenAddress(_:reason:)`` with the system's error.
        public static func checkFree(_ text: String, host: String, port: Int) throws {
            var boundPort: Int32 = 0
            var isLoopback: Int32 = 0
            let fd = rewind_tcp_listen(host, Int32(port), 1, &boundPort, &isLoopback)
            guard fd >= 0 else { throw ControlError.badListenAddress(text, reason: .system(Errno(rawValue: -fd))) }
            close(fd)
        }
    }

    /// The recorder served.
    public let recorder: Recorder
    /// `DIR`: the socket and, under `exports/`, the saves that name no path.
    public let directory: String
    /// The socket's path.
    public let socketPath: String
    /// The format of saves that name neither a path nor a format.
    public let defaultFormat: ExportFormat
    /// The TCP port listened on, when `--listen` was given.
    public let tcpPort: Int?
    private let token: String?
    /// Where the TCP token is kept (`--token-file`, or `DIR/token`), named by the page a browser gets without it.
    let tokenFilePath: String
    /// Host names besides IP addresses and `localhost` that browsers may reach the recorder by (`--allow-host`), as
    /// ``hostName(_:)`` gives them.
    let allowedHosts: Set<String>
    private let onSave: @Sendable (Result<ExportSummary, any Error>, SaveObject?, _ isClip: Bool) -> Void
    let book: SaveBook
    let events = EventHub()
    private let servers = Mutex<[HTTPServer]>([])
    /// Held while a new hold (a marker's, or a waiting save's range) is checked against the disk budget and kept,
    /// so holds admitted at once are counted together. Only requests that hold wait on it.
    let holdAdmission = Mutex<Void>(())
    private let wake: (read: Int32, write: Int32)
    private let finished = DispatchSemaphore(value: 0)
    private let isStopped = Atomic<Bool>(false)
    private let isStopping = Atomic<Bool>(false)
    /// Signalled by the control's thread once it published the changes of the last moments, at the stop.
    private let finalChanges = DispatchSemaphore(value: 0)

    /// Descriptors the API's connections leave to the recording, besides those open when it starts: the segment
    /// files being written and sealed, the index's, and the saves exporting at once (a file, ffmpeg's pipe and log).
    public static let descriptorsKeptForRecording = 48

    /// Binds `DIR/rewind.sock` (mode 0600; replacing a stale one nobody answers on), and the TCP listener when
    /// `listen` is given, and starts serving.
    ///
    /// - Parameters:
    ///   - recorder: the live recorder to serve; finish it only after ``stop()``.
    ///   - directory: `DIR`; created if missing.
    ///   - defaultFormat: the format of saves that name neither a path nor a format.
    ///   - limits: connections, body size, timeouts; the connections are lowered to fit the process's limit on open
    ///     descriptors, less ``descriptorsKeptForRecording``.
    ///   - listen: the TCP listener, or nil for the Unix socket only.
    ///   - allowedHosts: names besides IP addresses and `localhost` a browser may reach the recorder by (a reverse
    ///     proxy's); see ``checkHost(_:)``. One that is no host name (``hostName(_:)`` is nil) matches nothing.
    ///   - onSave: called when each save or clip ends, on its export thread, with what was written or why not, the
    ///     save object as it ended (whether it was cut short) when there is one, and whether it was a clip.
    /// - Throws: ``ControlError``: the socket cannot be made, another recorder answers on it, the TCP address is
    ///   not loopback without `allowsAnyAddress`.
    public init(
        recorder: Recorder, directory: String, defaultFormat: ExportFormat = .matroska,
        limits: HTTPLimits = HTTPLimits(), listen: Listen? = nil, allowedHosts: [String] = [],
        onSave: @escaping @Sendable (Result<ExportSummary, any Error>, SaveObject?, _ isClip: Bool) -> Void = {
            _, _, _ in
        }
    ) throws {
        self.recorder = recorder
        self.directory = directory
        self.defaultFormat = defaultFormat
        // Connections never take the descriptors the recording needs (a segment file, the index, exports).
        var limits = limits
        let (openFiles, _) = System.openFileLimit
        if openFiles < Int.max / 2 {
            limits.fit(
                descriptors: openFiles - System.openDescriptorCount - Self.descriptorsKeptForRecording,
                servers: listen == nil ? 1 : 2)
        }
        socketPath = directory + "/" + RecorderControl.socketName
        token = listen?.token
        tokenFilePath = listen?.tokenFile ?? directory + "/token"
        self.allowedHosts = Set(allowedHosts.compactMap(Self.hostName))
        self.onSave = onSave
        let events = self.events
        book = SaveBook(
            recorder: recorder, concurrentExports: Self.concurrentExports, events: events,
            finishedKept: limits.finishedSavesKept, onFinish: onSave)
        System.makeStoreDirectory(directory)
        // Exports a killed recorder left half written in DIR/exports (saves named by the recorder never come again).
        StagedExport.removeAbandonedPartials(in: directory + "/exports/")
        // A socket that answers belongs to a recorder still running (possible with spill off, which takes no lock
        // on the store); one that does not is stale and is replaced.
        let existing = rewind_unix_connect(socketPath)
        if existing >= 0 {
            close(existing)
            throw ControlError.alreadyServed(path: socketPath)
        }
        var tcpListener: Int32 = -1
        var boundPort: Int32 = 0
        if let listen {
            var isLoopback: Int32 = 0
            tcpListener = rewind_tcp_listen(listen.host, Int32(listen.port), 64, &boundPort, &isLoopback)
            guard tcpListener >= 0 else {
                throw ControlError.badListenAddress(
                    Listen.address(host: listen.host, port: listen.port),
                    reason: -tcpListener == EINVAL ? .notNumeric : .system(Errno(rawValue: -tcpListener)))
            }
            guard isLoopback != 0 || listen.allowsAnyAddress else {
                close(tcpListener)
                throw ControlError.badListenAddress(
                    Listen.address(host: listen.host, port: listen.port),
                    reason: .notLoopback)
            }
        }
        tcpPort = listen == nil ? nil : Int(boundPort)
        unlink(socketPath)
        let fd = rewind_unix_listen(socketPath, 64)
        guard fd >= 0 else {
            if tcpListener >= 0 { close(tcpListener) }
            if -fd == ENAMETOOLONG { throw ControlError.socketPathTooLong(path: socketPath, limit: 107) }
            throw ControlError.socket(action: "create", path: socketPath, Errno(rawValue: -fd))
        }
        var pipeFDs: [Int32] = [-1, -1]
        let piped = rewind_wake_pipe(&pipeFDs)
        guard piped == 0 else {
            close(fd)
            if tcpListener >= 0 { close(tcpListener) }
            unlink(socketPath)
            throw ControlError.socket(action: "create a wake pipe for", path: socketPath, Errno(rawValue: -piped))
        }
        wake = (pipeFDs[0], pipeFDs[1])
        // What the events report as changes is measured from here, before any client can connect: taken on the
        // control's thread, once it runs, a change a client saw happen could already be in the baseline.
        let watcher = CounterWatcher(recorder: recorder)
        do {
            let handler: HTTPServer.Handler = { [unowned self] request in handle(request) }
            let beforeBody: @Sendable (HTTPRequest) -> HTTPResponse? = { [unowned self] request in
                refusalBeforeBody(request)
            }
            var started = [
                try HTTPServer(listener: fd, isTCP: false, limits: limits, beforeBody: beforeBody, handler: handler)
            ]
            if tcpListener >= 0 {
                started.append(
                    try HTTPServer(
                        listener: tcpListener, isTCP: true, limits: limits, beforeBody: beforeBody, handler: handler))
            }
            servers.withAnnotatedLock { $0 = started }
            try Threads.start(named: "rewind-control") { [self] in run(watcher) }
        } catch {
            servers.withAnnotatedLock { servers in
                for server in servers { server.stop() }
            }
            unlink(socketPath)
            // No thread was started: deinit must not wait for one.
            isStopped.store(true, ordering: .releasing)
            throw error
        }
    }

    deinit {
        stop()
        close(wake.read)
        close(wake.write)
    }

    /// Events clients connected now.
    package var eventClients: Int { events.count }

    /// Connections open now, over every listener.
    package var openConnections: Int { servers.withAnnotatedLock { $0.reduce(0) { $0 + $1.openConnections } } }

    /// Asks for a save of the whole window into `DIR/exports/`, from any thread or a signal handler: it only
    /// writes one byte to a pipe.
    public func requestSave() {
        var byte = UInt8(ascii: "s")
        _ = write(wake.write, &byte, 1)
    }

    /// The descriptor a signal handler writes `s` to (see ``requestSave()``). Open until the control is
    /// deinitialized (also after ``stop()``), so a handler may write to it.
    public var wakeDescriptor: FileDescriptor { FileDescriptor(rawValue: wake.write) }

    /// Stops: new requests that change anything get 503, events clients get `stopping`, waiting saves export what
    /// was recorded, then every save is waited for, the servers stop and the socket is removed. Idempotent.
    public func stop() {
        guard !isStopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        isStopping.store(true, ordering: .releasing)
        // The seals of the last second (those of `Recorder.finish()` when it came first) before `stopping`.
        publishFinalChanges()
        events.publish("stopping", HealthResponse(status: "stopping"))
        let hadSaves = !book.isIdle
        book.forceAll()
        var byte = UInt8(ascii: "w")
        _ = write(wake.write, &byte, 1)
        while !book.isIdle {
            book.startDueExports()
            System.sleep(for: .milliseconds(5))
        }
        // Clients polling the saves just finished (`rewind save` asks every 50 ms) get to see them done.
        if hadSaves { System.sleep(for: .milliseconds(400)) }
        // And those since, before the streams end.
        publishFinalChanges()
        // Event streams end after their queued events (`stopping` last); then the servers stop, which closes what
        // is still open.
        events.closeAll()
        let deadline = ContinuousClock.now + .seconds(2)
        while servers.withAnnotatedLock({ $0.contains { $0.openStreams > 0 } }) && ContinuousClock.now < deadline {
            System.sleep(for: .milliseconds(5))
        }
        // Downloads of exports in progress get to finish, up to ``downloadGraceSeconds`` (they were cut at once: a
        // client fetching the save it just asked for got part of the file).
        let downloads = ContinuousClock.now + .seconds(Self.downloadGraceSeconds)
        while servers.withAnnotatedLock({ $0.contains { $0.openDownloads > 0 } }) && ContinuousClock.now < downloads {
            System.sleep(for: .milliseconds(20))
        }
        for server in servers.withAnnotatedLock({ $0 }) { server.stop() }
        unlink(socketPath)
        byte = UInt8(ascii: "q")
        _ = write(wake.write, &byte, 1)
        finished.wait()
    }

    /// How long a stopping recorder waits for downloads of exports in progress (`GET /v1/files/{id}`).
    static let downloadGraceSeconds = 30

    /// Has the control's thread publish what changed since its last look (seals, drops, pressure) now, and waits
    /// for it (at most 2 s).
    private func publishFinalChanges() {
        var byte = UInt8(ascii: "f")
        _ = write(wake.write, &byte, 1)
        _ = finalChanges.wait(timeout: .now() + .seconds(2))
    }

    // MARK: The control's thread

    private func run(_ baseline: CounterWatcher) {
        defer { finished.signal() }
        var watcher = baseline
        var descriptor = pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)
        var lastWatch = ContinuousClock.now
        var lastStatus = ContinuousClock.now - .seconds(1)
        while true {
            let waiting = book.startDueExports()
            descriptor.revents = 0
            // Waiting saves are checked every 5 ms (their end is a pts; a frame at 60 fps is 16.7 ms).
            _ = System.retryingInterrupts { poll(&descriptor, 1, waiting ? 5 : 100) }
            if descriptor.revents != 0 {
                var bytes = [UInt8](repeating: 0, count: 64)
                let count = read(wake.read, &bytes, bytes.count)
                if count > 0 {
                    if bytes[0..<count].contains(UInt8(ascii: "q")) { return }
                    if bytes[0..<count].contains(UInt8(ascii: "f")) {
                        watcher.publishChanges(to: events, final: true)
                        finalChanges.signal()
                    }
                    if bytes[0..<count].contains(UInt8(ascii: "s")) {
                        do {
                            try saveWindow()
                        } catch {
                            // Nothing recorded yet, or stopping: said where saves are reported.
                            onSave(.failure(error), nil, false)
                        }
                    }
                }
            }
            if ContinuousClock.now - lastWatch >= .milliseconds(250) {
                lastWatch = .now
                watcher.publishChanges(to: events)
                // Connections too slow to send a request go (on this thread: no timer thread to start, which a
                // process short of threads could not).
                for server in servers.withAnnotatedLock({ $0 }) { server.closeLateRequests() }
            }
            // The status once a second for clients following the events (the timeline page's panel).
            if events.count > 0 && ContinuousClock.now - lastStatus >= .seconds(1) {
                lastStatus = .now
                events.publish("status", status, kept: false)
            }
        }
    }

    /// SIGUSR1: the whole window into `DIR/exports/`.
    @discardableResult
    func saveWindow() throws -> SaveObject {
        try startSave(SaveRequest())
    }

    // MARK: Handling

    /// Serves one request: everything the API does, without a socket.
    ///
    /// - Returns: the answer: JSON with the right status, or an event stream.
    public func handle(_ request: HTTPRequest) -> HTTPResponse {
        if let refusal = refusal(request) { return refusal }
        var setCookie: String?
        if request.isTCP, case .allowed(let cookie) = authorize(request) { setCookie = cookie }
        var response: HTTPResponse
        do {
            response = try route(request)
        } catch {
            response = APIError(error).response
        }
        // The token a refused request carried logs nobody in: a page of another site, a request in error.
        if let setCookie, response.status < 400 { response.headers.append(("Set-Cookie", setCookie)) }
        return response
    }

    /// What ``handle(_:)`` refuses before routing: a browser's request for a host it does not answer, a TCP request
    /// without the token; nil when neither.
    private func refusal(_ request: HTTPRequest) -> HTTPResponse? {
        do { try checkHost(request) } catch { return APIError(error).response }
        guard request.isTCP, case .refused(let error) = authorize(request) else { return nil }
        guard wantsPage(request) else { return error.response }
        // The token box's post is answered with a redirect whatever the token, so Back never offers to post it
        // again; a wrong one leads to the page that asks for the token, saying so.
        if request.method == "POST" {
            let location = Self.formToken(request) != nil ? "/?\(Self.tokenRefusedParameter)=1" : "/"
            return HTTPResponse(status: 303, headers: [("Location", location)] + Self.pageHeaders, body: .bytes([]))
        }
        let given = request.query["token"] != nil || request.query[Self.tokenRefusedParameter] != nil
        return pageWithoutToken(error, tokenWasGiven: given)
    }

    /// What a request's headers alone are refused for (``refusal(_:)``), so that its body is never read: a client
    /// without the token cannot hold a connection by sending a body slowly. Nil for the 401 page's form, whose
    /// token is in its body.
    func refusalBeforeBody(_ request: HTTPRequest) -> HTTPResponse? {
        request.method == "POST" && request.path == "/" ? nil : refusal(request)
    }

    /// A browser's request (it sends `Sec-Fetch-Site` or `Origin`) must name the recorder by an IP address,
    /// `localhost`, or a name ``allowedHosts`` holds: a page of another site that points its own name at this
    /// machine (DNS rebinding) is then its own origin to the browser, and could otherwise read frames and make saves
    /// through a proxy to the Unix socket, which needs no token. Programs (curl, `rewind`) send no such header and
    /// may name any host.
    func checkHost(_ request: HTTPRequest) throws {
        guard request.headers["sec-fetch-site"] != nil || request.headers["origin"] != nil else { return }
        let host = request.headers["host"] ?? ""
        // Without the port: the last `:` is followed by ASCII digits only.
        var given = Substring(host)
        if let colon = host.lastIndex(of: ":"),
            host[host.index(after: colon)...].allSatisfy({ $0.isASCII && $0.isNumber })
        {
            given = host[..<colon]
        }
        // An IPv6 address, in brackets: no name to rebind.
        var address6 = in6_addr()
        if given.hasPrefix("["), given.hasSuffix("]"),
            inet_pton(AF_INET6, String(given.dropFirst().dropLast()), &address6) == 1
        {
            return
        }
        var address = in_addr()
        let named = Self.hostName(String(given))
        if let name = named,
            inet_pton(AF_INET, name, &address) == 1 || name == "localhost" || name.hasSuffix(".localhost")
                || allowedHosts.contains(name)
        {
            return
        }
        let name = named ?? String(given)
        throw APIError(
            .forbidden,
            "a browser's request for host '\(name)' is refused: this recorder answers browsers at IP addresses, "
                + "localhost and the names --allow-host gives (so no other site's page can reach it by pointing its "
                + "own name here); if '\(name)' is yours, run the recorder with --allow-host \(name)")
    }

    /// `name` as the host check compares it: lowercased, without a final dot (`localhost.` names `localhost`); nil
    /// when it is no host name a browser sends: ASCII letters, digits, hyphens and dots (a name in another script
    /// in its `xn--` form), no empty label.
    public static func hostName(_ name: String) -> String? {
        var lowered = name.lowercased()
        if lowered.hasSuffix(".") { lowered.removeLast() }
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789-.")
        guard !lowered.isEmpty, lowered.allSatisfy(allowed.contains), !lowered.hasPrefix("."), !lowered.contains("..")
        else { return nil }
        return lowered
    }

    private enum Authorization {
        case allowed(setCookie: String?)
        case refused(APIError)
    }

    /// The name of the token cookie: `rewind_token_PORT`, of this recorder's TCP port. A browser sends a host's
    /// cookies to every port of it, so recorders on other ports of the same host keep cookies of their own.
    package var tokenCookieName: String { "rewind_token_\(tcpPort ?? 0)" }

    /// A TCP request needs the token: `Authorization: Bearer …`, the ``tokenCookieName`` cookie, or `?token=`
    /// (which sets the cookie). Compared in constant time.
    private func authorize(_ request: HTTPRequest) -> Authorization {
        guard let token else { return .refused(APIError(.unauthorized, "no token is configured")) }
        // Two tokens have no one meaning (which one counts would depend on the server): refused, as a repeated query
        // parameter is.
        if request.repeatedHeaderNames.contains("authorization") {
            return .refused(
                APIError(.badRequest, "the Authorization header is given more than once: give the token once"))
        }
        // The scheme's name is case-insensitive, and spaces may be more than one (RFC 9110 `1*SP`); trailing white
        // space is no part of a header's value.
        if let header = request.headers["authorization"], header.lowercased().hasPrefix("bearer "),
            Self.constantTimeEqual(header.dropFirst(7).trimmingCharacters(in: .whitespaces), token)
        {
            return .allowed(setCookie: nil)
        }
        let cookie = tokenCookieName + "="
        if let cookies = request.headers["cookie"] {
            for part in cookies.split(separator: ";") {
                let pair = part.trimmingCharacters(in: .whitespaces)
                guard pair.hasPrefix(cookie) else { continue }
                // RFC 6265: a cookie's value may be given in double quotes, which are no part of it.
                var value = pair.dropFirst(cookie.count)
                if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
                if Self.constantTimeEqual(String(value), token) { return .allowed(setCookie: nil) }
            }
        }
        if let given = request.query["token"] ?? Self.formToken(request), Self.constantTimeEqual(given, token) {
            return .allowed(setCookie: "\(cookie)\(token); HttpOnly; SameSite=Strict; Path=/")
        }
        let given =
            request.headers["authorization"] != nil || request.query["token"] != nil || Self.formToken(request) != nil
            || (request.headers["cookie"] ?? "").contains(cookie)
        return .refused(
            APIError(
                .unauthorized,
                (given ? "the token given is not this recorder's: " : "")
                    + "this request needs the recorder's token: 'Authorization: Bearer TOKEN' (the token is in the "
                    + "recorder's DIR/token, or the file its --token-file names)"))
    }

    /// The token the 401 page's box posts to `/` (`application/x-www-form-urlencoded`: `token=…`), if this is
    /// that request.
    static func formToken(_ request: HTTPRequest) -> String? {
        guard request.method == "POST", request.path == "/",
            (request.headers["content-type"] ?? "").hasPrefix("application/x-www-form-urlencoded")
        else { return nil }
        for field in String(decoding: request.body, as: UTF8.self).split(separator: "&") {
            let pair = field.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pair.count == 2, pair[0] == "token" else { continue }
            return String(pair[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding
        }
        return nil
    }

    /// Whether `a` equals `b`, taking the same time whatever their bytes (it depends only on their lengths).
    package static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let left = Array(a.utf8)
        let right = Array(b.utf8)
        var difference = UInt8(left.count == right.count ? 0 : 1)
        for index in 0..<max(left.count, right.count) {
            let x = index < left.count ? left[index] : 0
            let y = index < right.count ? right[index] : 0
            difference |= x ^ y
        }
        return difference == 0
    }

    private func route(_ request: HTTPRequest) throws -> HTTPResponse {
        // A parameter given twice has no one meaning (`?at=1s&at=2s`): refused, as a JSON field given twice is.
        if let repeated = request.repeatedQueryNames.first {
            throw APIError(.badRequest, "parameter '\(repeated)' is given more than once: give it once")
        }
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard parts.first == "v1" else { return try page(request) }
        try checkOrigin(request)
        // HEAD is answered as GET, the same status and headers; libmicrohttpd leaves the body out.
        let method = request.method == "HEAD" ? "GET" : request.method
        if isStopping.load(ordering: .acquiring) && method != "GET" {
            throw APIError(.stopping, "the recorder is stopping")
        }
        let route = Array(parts.dropFirst())
        // Every endpoint allows its methods first: a path that does not exist is a 404 and a method it does not take a
        // 405 whatever the query holds; then the query must hold only parameters the endpoint knows.
        func allow(_ methods: String...) throws {
            guard methods.contains(method) else {
                throw APIError.methodNotAllowed(request.path, takes: methods, not: method)
            }
            try Self.requireKnown(request.query, Self.queryParameters(route, method: method))
        }
        switch route {
        case ["health"]:
            try allow("GET")
            let stopping = isStopping.load(ordering: .acquiring)
            return json(HealthResponse(status: stopping ? "stopping" : "ok"), status: stopping ? 503 : 200)
        case ["status"]:
            try allow("GET")
            return json(status)
        case ["openapi.json"]:
            try allow("GET")
            return HTTPResponse(
                status: 200, headers: [("Content-Type", "application/json")],
                body: .bytes(PackageResources.openapi_json))
        case ["streams"]:
            try allow("GET")
            let stored = try storedStreams().map { Self.describe($0, recording: false) }
            return json(StreamList(streams: recorder.streams.map { Self.describe($0.stream, name: $0.name) } + stored))
        case ["saves"]:
            try allow("GET", "POST")
            if method == "GET" { return json(SaveList(saves: book.objects)) }
            let body = try SaveRequest.decode(request.body)
            return try answer(try startSave(body), wait: body.wait ?? false)
        case ["clips"]:
            try allow("POST")
            let body = try ClipRequest.decode(request.body)
            return try answer(try startClip(body), wait: body.wait ?? false)
        case let path where path.count == 2 && path[0] == "saves":
            // The method first, as for every path: a PUT is a 405 whatever the id.
            try allow("GET", "DELETE")
            let id = try saveID(path[1])
            if method == "DELETE" { return json(try book.cancel(id)) }
            guard let object = book.object(id) else { throw APIError(.notFound, "no save \(id)") }
            return json(object)
        case let path where path.count == 3 && path[0] == "saves" && path[2] == "extend":
            try allow("POST")
            let id = try saveID(path[1])
            let body = try ExtendRequest.decode(request.body)
            let more = try duration(body.after, field: "after")
            guard more > 0 else { throw APIError(.badRequest, "after must be longer than 0s") }
            // The longer range is held on disk while the save waits: it must fit the budget, as a new save's must.
            if let current = book.object(id), current.state == .waiting,
                case (let end, false) = current.toNanoseconds.addingReportingOverflow(more),
                let target = try? target(current.stream)
            {
                try checkSaveHoldFits(target, current.fromNanoseconds..<max(end, current.fromNanoseconds))
            }
            return json(try book.extend(id, by: more))
        case ["events"]:
            try allow("GET")
            if request.method == "HEAD" {
                return HTTPResponse(
                    status: 200, headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-store")])
            }
            // Where each stream's seals stand now: the client gets an event for each later one, however soon.
            var sealed: [String: Int64] = [:]
            if let store = recorder.store {
                for stream in recorder.streams {
                    sealed[stream.name] =
                        (try? CounterWatcher.sealedSegments(of: stream.name, in: store))?.last?.id ?? 0
                }
            }
            // A client that comes back names the last event it had: the header a browser's EventSource sends when
            // it reconnects, or the parameter for a page or program that opens the stream again itself.
            let subscription = events.subscribe(
                sealedBefore: sealed, lastEventID: request.headers["last-event-id"] ?? request.query["last_event_id"])
            if isStopping.load(ordering: .acquiring) {
                // A client that comes while the recorder stops hears so first, then its stream ends.
                subscription.enqueue(EventHub.message("stopping", HealthResponse(status: "stopping")))
                subscription.close()
            }
            return HTTPResponse(
                status: 200,
                headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-store")],
                body: .stream(subscription))
        case let path where path.count == 3 && path[0] == "streams" && path[2] == "timeline":
            try allow("GET")
            return json(try timeline(stream: path[1], query: request.query))
        case let path where path.count == 3 && path[0] == "streams" && path[2] == "frame":
            try allow("GET")
            return try frame(stream: path[1], query: request.query)
        case let path where path.count == 2 && path[0] == "files":
            try allow("GET")
            return try file(path[1], query: request.query)
        case ["markers"]:
            try allow("GET", "POST")
            if method == "GET" { return json(try markers(query: request.query)) }
            let body = try MarkerRequest.decode(request.body)
            return json(try addMarkers(body), status: 201)
        case let path where path.count == 2 && path[0] == "markers":
            try allow("DELETE")
            guard let id = Self.identifier(path[1]).map(Int64.init) else {
                throw APIError(.notFound, "no marker '\(path[1])'")
            }
            return json(try removeMarker(id))
        default:
            throw APIError(.notFound, "no such path '\(request.path)'")
        }
    }

    private func saveID(_ text: String) throws -> Int {
        guard let id = Self.identifier(text) else { throw APIError(.notFound, "no save '\(text)'") }
        return id
    }

    /// A save's or marker's id as the API writes it: ASCII digits without a sign or a leading zero (`Int("+1")` and
    /// `Int("01")` are 1, which would give `/v1/saves/+1` another name for save 1).
    static func identifier(_ text: String) -> Int? {
        guard let first = text.utf8.first, first != UInt8(ascii: "0") || text == "0",
            text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
        else { return nil }
        return Int(text)
    }

    private func json(_ value: some Encodable, status: Int = 200) -> HTTPResponse {
        Self.jsonResponse(value, status: status)
    }

    /// `value` as a JSON answer with `status`, or a 500 naming the failure when it cannot be encoded: an error body
    /// must never go out under a success status.
    package static func jsonResponse(_ value: some Encodable, status: Int) -> HTTPResponse {
        do {
            let body = try APICoding.encoded(value)
            return HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: .bytes(body))
        } catch {
            return APIError(.failed, "the answer could not be encoded as JSON (\(error))").response
        }
    }

    /// 202 with the save as it stands; with `wait`, 200 once done (or the error it failed with).
    private func answer(_ object: SaveObject, wait: Bool) throws -> HTTPResponse {
        guard wait else { return json(object, status: 202) }
        let final = try book.waitUntilFinal(object.id)
        if final.state == .failed, let error = final.error {
            throw APIError(APIError.Code(rawValue: error.code) ?? .failed, error.message)
        }
        return json(final, status: 200)
    }

    // MARK: Saves and clips

    /// What a request's `stream` names: the stream of that name, or (`all`, or none given) every stream — the
    /// only one, for a recorder of one, unless `all` was asked of a store that holds other streams too: that is
    /// exported as every stream, on the recorder clock, as a clip of `all` from the disk is.
    ///
    /// - Parameter stored: whether a stream of the store that the recorder does not record may be named (clips
    ///   read it from the disk; saves of the last seconds and markers need a stream being recorded).
    func target(_ name: String?, stored: Bool = false) throws -> SaveBook.Target {
        let streams = recorder.streams
        guard let name, name != "all" else {
            let alone = try name == nil || storedStreams().allSatisfy { $0.name == streams.first?.name }
            return streams.count == 1 && alone ? .one(streams[0]) : .all(streams)
        }
        guard let stream = recorder.stream(named: name) else {
            let names = streams.map { "'\($0.name)'" }.joined(separator: ", ")
            if let row = try storedStreams().first(where: { $0.name == name }), let store = recorder.store {
                if stored { return .stored(row, store) }
                throw APIError(
                    .notFound,
                    "stream '\(name)' is in the store but this recorder does not record it (it records \(names)); "
                        + "saves and markers need a stream it records: a clip of '\(name)' (POST /v1/clips with "
                        + "from and to) reads it from the disk")
            }
            let others = try stored ? storedStreams().map { "'\($0.name)'" } : []
            throw APIError(
                .notFound,
                "unknown stream '\(name)': this recorder records \(names) (or 'all')"
                    + (others.isEmpty ? "" : "; its store also holds \(others.joined(separator: ", "))"))
        }
        return .one(stream)
    }

    /// A time as requests write it (`12.5s` recorder time, ISO-8601 wall time, a time of day), on the recorder
    /// clock every stream shares, for the end of a range or a frame to find. A time past every frame (a stream's
    /// frames lie within 100 years of its start) is as good as the farthest one, as it is for a clip from the disk:
    /// it is brought within ``farthestTime`` (about 146 years) of 0, so the difference of two stays inside 64 bits.
    func recorderTime(_ text: String, field: String) throws -> Int64 {
        min(max(try unboundedRecorderTime(text, field: field), -Self.farthestTime), Self.farthestTime)
    }

    /// ``recorderTime(_:field:)`` before it is brought within ``farthestTime`` (times are parsed within about 292
    /// years of 0, so this is exact).
    private func unboundedRecorderTime(_ text: String, field: String) throws -> Int64 {
        do {
            return try StreamSet(recorder: recorder).recorderTime(try TimeSpec(parsing: text))
        } catch let error as ValueError {
            throw APIError(.badRequest, "\(field): \(error)")
        }
    }

    /// A request's `from` and `to` as a range of recorder time: `to` must be after `from` as they were written, and
    /// then both are brought within ``farthestTime``; a range wholly beyond it holds no frame (404 `empty`, as a
    /// clip of it from the disk finds none), instead of an end that looks equal to its start.
    func recorderRange(from fromText: String, to toText: String) throws -> Range<Int64> {
        let (from, to) = (
            try unboundedRecorderTime(fromText, field: "from"), try unboundedRecorderTime(toText, field: "to")
        )
        guard from < to else {
            throw APIError(.badRequest, "to must be after from (from \(formatSeconds(from)), to \(formatSeconds(to)))")
        }
        guard from < Self.farthestTime && to > -Self.farthestTime else {
            throw APIError(
                .empty,
                "no frames in [\(fromText), \(toText)): the range lies more than 146 years from the recorder's time "
                    + "0, beyond every frame; nothing was written")
        }
        return max(from, -Self.farthestTime)..<min(to, Self.farthestTime)
    }

    /// ``recorderTime(_:field:)`` for a moment durations are added to (a marker's time and its hold): at most 100
    /// years from the recorder's time 0.
    func momentTime(_ text: String, field: String) throws -> Int64 {
        let time = try recorderTime(text, field: field)
        guard time.magnitude <= Self.longestSpan else {
            throw APIError(.badRequest, "\(field): '\(text)' is more than 100 years from the recorder's time 0")
        }
        return time
    }

    /// The farthest recorder time a range may reach: 2⁶² − 1 ns, beyond every frame's time.
    static let farthestTime: Int64 = .max / 2

    /// The longest duration, and the farthest recorder time from 0, a request may give: 100 years of 365.25 days, as
    /// a stream keeps (``FrameInfo/longestStreamTimeNanoseconds``). Sums of a few of them (a trigger, a pre-roll, a
    /// post-roll) stay far inside 64-bit nanoseconds.
    static let longestSpan = UInt64(FrameInfo.longestStreamTimeNanoseconds)

    func duration(_ text: String, field: String) throws -> Int64 {
        let nanoseconds = try anyDuration(text, field: field)
        guard nanoseconds.magnitude <= Self.longestSpan else {
            throw APIError(.badRequest, "\(field): '\(text)' is longer than 100 years")
        }
        return nanoseconds
    }

    /// ``duration(_:field:)`` for how far back a save reaches (`last`, `before`): farther than every frame is as
    /// good as the farthest, as it is for `rewind save` from the disk, so it is brought within ``farthestTime``.
    func lookBack(_ text: String, field: String) throws -> Int64 {
        min(try anyDuration(text, field: field), Self.farthestTime)
    }

    private func anyDuration(_ text: String, field: String) throws -> Int64 {
        do {
            return try Values.duration(text).nanosecondsClamped
        } catch {
            throw APIError(.badRequest, "\(field): \(error)")
        }
    }

    /// The x264 quality of an export (`fast` when not given); refused for a format that is not encoded.
    private func quality(_ text: String?, format: ExportFormat) throws -> ExportQuality {
        guard let text else { return .fast }
        guard let quality = ExportQuality(rawValue: text) else {
            throw APIError(.badRequest, "unknown quality '\(text)': fast, balanced or lossless")
        }
        guard format == .mp4 else {
            throw APIError(
                .badRequest,
                "quality '\(text)' sets how mp4 is encoded; \(format.fileExtension) is always uncompressed and exact: "
                    + "leave quality out, or ask for format mp4")
        }
        return quality
    }

    /// The format and path of an export: the path's extension names the format unless `format` does; a path must
    /// be absolute; none means `DIR/exports/KIND-<time>-<n>.<ext>`.
    ///
    /// - Parameter target: what is exported (`all`: a file each for `.y4m` and `.mp4`, ``SaveBook/files(for:target:format:)``).
    private func destination(format: String?, path: String?, kind: String, target: SaveBook.Target) throws -> (
        ExportFormat, String
    ) {
        var chosen: ExportFormat?
        if let format {
            guard let named = ExportFormat(fileExtension: format) else {
                throw APIError(.badRequest, "unknown format '\(format)': mkv, y4m or mp4")
            }
            chosen = named
        }
        if let path {
            // One line: the recorder logs the path, and a file's name goes into a download's header.
            guard !path.holdsLineBreakingCharacters else {
                throw APIError(
                    .badRequest,
                    "path \(path.debugDescription) holds control characters (newlines, escapes, tabs): name the "
                        + "file without them")
            }
            guard path.hasPrefix("/") else { throw APIError(.badRequest, "path must be absolute: '\(path)'") }
            guard let named = ExportFormat(path: path) else {
                throw APIError(.badRequest, "path '\(path)' must end in .mkv, .y4m or .mp4")
            }
            if let chosen, chosen != named {
                throw APIError(.badRequest, "path '\(path)' does not end in .\(chosen.fileExtension) (format)")
            }
            for file in SaveBook.files(for: path, target: target, format: named) { try checkWritable(file) }
            var isDirectory: ObjCBool = false
            let parent = System.parentDirectory(of: path)
            guard FileManager.default.fileExists(atPath: parent, isDirectory: &isDirectory) else {
                throw APIError(.notFound, "no directory '\(parent)' to write '\(path)' in")
            }
            guard isDirectory.boolValue else {
                throw APIError(
                    .notFound, "'\(parent)' is not a directory, so '\(path)' cannot be written in it")
            }
            try checkCanCreateFiles(in: parent, for: path)
            return (named, path)
        }
        let format = chosen ?? defaultFormat
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss.SSS'Z'"
        // The save's id and the extension follow when it is added (``SaveBook/add``): `save-<time>-<id>.mkv`.
        return (format, "\(exportsDirectory)/\(kind)-\(formatter.string(from: Date()))")
    }

    /// Refuses a directory the recorder cannot make a file in (no permission, a read-only file system, one such as
    /// `/proc` that takes no new files) when the request arrives, instead of a save accepted and failed later: a file
    /// is made there and removed at once, as the export's temporary file would be. `forbidden`, as the directory's
    /// own doing, not the request's form: `rewind clip` exits 1 for it as it does without a recorder (it was 64).
    private func checkCanCreateFiles(in parent: String, for path: String) throws {
        let probe = parent + "/.rewind-probe-\(getpid())-\(exportCounter.wrappingAdd(1, ordering: .relaxed).newValue)"
        let fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            let reason = String(cString: strerror(errno))
            throw APIError(
                .forbidden, "the recorder cannot write '\(path)': making a file in '\(parent)' failed (\(reason))")
        }
        close(fd)
        unlink(probe)
    }

    /// Refuses a file the recorder must not write: one of the store's own (through symbolic links too), or one that
    /// exists and is not a regular file (a FIFO or a device would hold the export, a cancel and the recorder's stop
    /// until something reads it).
    private func checkWritable(_ path: String) throws {
        if let problem = StagedExport.lengthProblem(path) {
            throw APIError(.badRequest, "path '\(path)': \(problem)")
        }
        if let own = StagedExport.storeFile(writtenBy: path, store: directory) {
            throw APIError(
                .badRequest,
                "path '\(path)' would write \(own), inside the store where only rewind writes; write the export "
                    + "elsewhere, or give no path: the recorder then writes it in \(exportsDirectory)/, made if missing"
            )
        }
        if let kind = StagedExport.specialFileKind(path) {
            throw APIError(
                .badRequest,
                "path '\(path)' is \(kind): the recorder writes regular files only (the command line copies to a "
                    + "FIFO or device itself)")
        }
    }

    private let exportCounter = Atomic<Int>(0)

    /// `DIR/exports` as an absolute path: save objects name their files for clients in other directories.
    private var exportsDirectory: String {
        URL(fileURLWithPath: directory + "/exports").standardizedFileURL.path
    }

    /// `POST /v1/saves`: the range `(trigger − before, trigger + after]` around the recorder clock now.
    func startSave(_ request: SaveRequest) throws -> SaveObject {
        let target = try target(request.stream)
        if request.last != nil && (request.before != nil || request.after != nil) {
            throw APIError(.badRequest, "give last, or before and after: last is before with after 0")
        }
        let windowNanoseconds = recorder.configuration.windowNanoseconds
        let before =
            try request.last.map { try lookBack($0, field: "last") }
            ?? request.before.map { try lookBack($0, field: "before") } ?? windowNanoseconds
        let after = try request.after.map { try duration($0, field: "after") } ?? 0
        guard before + after > 0 else { throw APIError(.badRequest, "the save is empty: before + after is 0s") }
        let (format, path) = try destination(
            format: request.format, path: request.path, kind: "save", target: target)
        let quality = try quality(request.quality, format: format)
        guard let trigger = book.clock else { throw APIError(.empty, "nothing is recorded yet: nothing to save") }
        var range = Range(last: .nanoseconds(before + after), endingAt: trigger + after)
        var followsLastSave = false
        if request.sinceLastSave == true, let (end, anythingNew) = book.sinceLastSave(streams: target.streams) {
            guard anythingNew, end < range.upperBound else {
                throw APIError(.conflict, "nothing new since the last save, which ended at \(formatSeconds(end))")
            }
            // Without last/before, right where the last save ended, however long ago (the disk has what the window
            // no longer holds): consecutive saves miss nothing. last/before cap it.
            let capped = request.last != nil || request.before != nil
            range = (capped ? max(range.lowerBound, end) : end)..<range.upperBound
            followsLastSave = range.lowerBound == end
        }
        // A save that waits for its post-roll holds its range on disk meanwhile: like a marker's hold, it must fit
        // the disk budget, or retention would take every other stream's history to keep it.
        func add() throws -> SaveObject {
            try book.add(
                target: target, range: range, format: format, quality: quality, path: path,
                makesDirectory: request.path == nil, followsLastSave: followsLastSave)
        }
        guard after > 0 else { return try add() }
        return try holdAdmission.withAnnotatedLock { _ in
            try checkSaveHoldFits(target, range)
            return try add()
        }
    }

    /// Refuses a waiting save whose `range` (recorder time), held on disk against retention until it is written,
    /// would not fit the disk budget with the holds already kept (see ``checkHoldsFit(_:store:save:)``).
    private func checkSaveHoldFits(_ target: SaveBook.Target, _ range: Range<Int64>) throws {
        guard let store = recorder.store else { return }
        var held: [String: Range<Int64>] = [:]
        for stream in target.streams {
            if let clock = stream.clock { held[stream.name] = clock.ptsRange(range) }
        }
        try checkHoldsFit(held, store: store, save: true)
    }

    /// `POST /v1/clips`: any past range (cut at the recorder clock).
    func startClip(_ request: ClipRequest) throws -> SaveObject {
        let target = try target(request.stream, stored: true)
        let asked = try recorderRange(from: request.from, to: request.to)
        let (from, to) = (asked.lowerBound, asked.upperBound)
        let (format, path) = try destination(
            format: request.format, path: request.path, kind: "clip", target: target)
        let quality = try quality(request.quality, format: format)
        let sources: [ClipSource]
        let end: Int64
        if case .stored(let row, let store) = target {
            // All of a stored stream is on disk, before or after the recorded streams' newest frame.
            sources = [.store(store, stream: row)]
            end = to
        } else {
            sources = target.streams.map { .recorderStream($0) }
            // A clip is of the past: it ends at the recorder clock at the latest, and must hold a frame now.
            end = book.clock.map { min(to, $0 + 1) } ?? to
            guard from < end else {
                // Said as from the disk: the range, what is held, and that nothing was written.
                try sources[0].requireFrames(in: try sources[0].clock().ptsRange(from..<to))
                throw APIError(.empty, "nothing is recorded from \(formatSeconds(from)) on yet; nothing was written")
            }
        }
        let holding = try sources.contains { source in try source.hasFrames(in: source.clock().ptsRange(from..<end)) }
        let namesAll = !target.isStored && (request.stream == nil || request.stream == "all")
        let notRecorded = namesAll ? try storedStreams(withFramesIn: asked) : []
        if !holding, !notRecorded.isEmpty {
            // Only streams of the store it does not record have frames there: said, with how to clip them.
            let names = notRecorded.map { "'\($0)'" }.joined(separator: ", ")
            throw APIError(
                .empty,
                "the streams this recorder records have no frames in [\(formatSeconds(from)), "
                    + "\(formatSeconds(asked.upperBound))); the store's \(names), which it does not record, "
                    + (notRecorded.count == 1 ? "has" : "have") + ": clip " + (notRecorded.count == 1 ? "it" : "each")
                    + " by name (stream '\(notRecorded[0])'), which reads it from the disk; nothing was "
                    + "written")
        }
        if !holding { try sources[0].requireFrames(in: try sources[0].clock().ptsRange(from..<end)) }
        return try book.add(
            target: target, range: from..<end, format: format, quality: quality, path: path, isClip: true,
            makesDirectory: request.path == nil, notRecorded: notRecorded)
    }

    /// The streams of the store that the recorder does not record with frames in `range` (recorder time), by name.
    private func storedStreams(withFramesIn range: Range<Int64>) throws -> [String] {
        guard let store = recorder.store else { return [] }
        return try storedStreams().filter { row in
            let source = ClipSource.store(store, stream: row)
            return try source.hasFrames(in: source.clock().ptsRange(range))
        }.map(\.name)
    }

    // MARK: Status

    /// `GET /v1/status`.
    public var status: StatusResponse {
        let counts = book.counts
        let summary = try? recorder.store?.summary()
        let streams = recorder.streams.map { stream in
            let statistics = stream.statistics
            let ring = stream.memoryStatistics
            var status = StreamStatus(
                stream: stream.name, layout: "\(stream.stream.layout)",
                framesAccepted: statistics.framesAccepted, framesDurable: statistics.framesDurable,
                drops: statistics.drops.keyedByRawValue,
                windowNanoseconds: recorder.configuration.windowNanoseconds,
                memoryFrames: ring.frames, memoryBytes: ring.mappedBytes,
                memoryBudgetBytes: stream.memoryBudget(under: ring.pressure),
                memoryFirstPTSNanoseconds: ring.firstPTSNanoseconds,
                memoryLastPTSNanoseconds: ring.lastPTSNanoseconds, pressure: ring.pressure.name,
                pressureChanges: recorder.pressureChanges, gaps: statistics.gaps,
                clockOffsetNanoseconds: stream.clock?.offsetNanoseconds,
                clockWallNanoseconds: stream.clock?.wallNanoseconds, inputError: stream.inputError)
            status.frameDurationValue = stream.stream.frameDuration.value
            status.frameDurationTimescale = Int(stream.stream.frameDuration.timescale)
            status.spillLagFrames = stream.unspilledFrames
            status.inputEnded = stream.inputEnded
            // Stalled as a save waiting for its frames would find it: no frame for the allowance, and the input
            // neither ended nor failed (a stalled input showed nothing, while saves of it were cut short).
            status.inputIdleNanoseconds = book.idleNanoseconds(of: stream.name)
            status.inputStalled =
                stream.inputEnded == nil
                && (status.inputIdleNanoseconds ?? 0) > SaveBook.stallAllowance(of: [stream])
            return status
        }
        return StatusResponse(
            streams: streams, savesWaiting: counts.waiting, savesExporting: counts.exporting,
            stopping: isStopping.load(ordering: .acquiring), diskBytes: try? recorder.store?.segmentFileBytes(),
            diskBudgetBytes: recorder.store?.options.diskBudget, segments: summary?.segments,
            memoryBudgetBytes: streams.reduce(0) { $0 + $1.memoryBudgetBytes }, residentBytes: ResidentMemory.current(),
            heapBytes: ResidentMemory.heapInUse(),
            indexMemoryBytes: recorder.store == nil ? nil : SegmentStore.indexMemoryInUse)
    }

    /// How `GET /v1/streams` describes a stream.
    static func describe(_ stream: StreamDescription, name: String, recording: Bool = true) -> StreamDescriptionBody {
        StreamDescriptionBody(
            name: name, format: stream.layout.format.name, width: stream.layout.width, height: stream.layout.height,
            frameDuration: stream.frameDuration, colorMatrix: stream.color.matrix.name,
            colorRange: stream.color.range.name, chromaSiting: stream.chromaSiting.name,
            pixelAspect: stream.pixelAspect.ratio, recording: recording)
    }

    static func describe(_ row: StreamRow, recording: Bool) -> StreamDescriptionBody {
        describe(row.description, name: row.name, recording: recording)
    }

    /// The streams of the recorder's store that it does not record (earlier recordings' cameras), in the store's
    /// order; none without a store.
    func storedStreams() throws -> [StreamRow] {
        guard let store = recorder.store else { return [] }
        return try store.streams().filter { recorder.stream(named: $0.name) == nil }
    }
}
