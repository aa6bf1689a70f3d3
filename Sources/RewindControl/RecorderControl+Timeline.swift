import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import SegmentStore

/// One bucket of a stream's timeline (`GET /v1/streams/{name}/timeline`): times on the recorder clock.
public struct TimelineBucketBody: Sendable, Hashable, Codable {
    /// Start, recorder time nanoseconds, inclusive.
    public var startNanoseconds: Int64
    /// End, exclusive.
    public var endNanoseconds: Int64
    /// Share of the bucket held in memory, 0…1.
    public var memory: Double
    /// Share of the bucket on disk, 0…1.
    public var disk: Double
    /// The reasons of the gaps in the bucket (the loss reasons' raw values).
    public var gaps: [String]

    /// Makes a bucket; each parameter is the field of the same name.
    public init(startNanoseconds: Int64, endNanoseconds: Int64, memory: Double, disk: Double, gaps: [String]) {
        self.startNanoseconds = startNanoseconds
        self.endNanoseconds = endNanoseconds
        self.memory = memory
        self.disk = disk
        self.gaps = gaps
    }

    enum CodingKeys: String, CodingKey {
        case memory, disk, gaps
        case startNanoseconds = "start_ns"
        case endNanoseconds = "end_ns"
    }
}

/// `GET /v1/streams/{name}/timeline`: what the stream holds over a range, bucket by bucket.
public struct TimelineResponse: Sendable, Hashable, Codable {
    /// The stream.
    public var stream: String
    /// The range asked for, recorder time nanoseconds.
    public var fromNanoseconds: Int64
    /// Its end, exclusive.
    public var toNanoseconds: Int64
    /// Wall-clock time minus recorder time (wall = recorder time + this); nil before the stream's first frame.
    public var wallOffsetNanoseconds: Int64?
    /// The buckets, in order.
    public var buckets: [TimelineBucketBody]

    /// Makes a timeline; each parameter is the field of the same name.
    public init(
        stream: String, fromNanoseconds: Int64, toNanoseconds: Int64, wallOffsetNanoseconds: Int64?,
        buckets: [TimelineBucketBody]
    ) {
        self.stream = stream
        self.fromNanoseconds = fromNanoseconds
        self.toNanoseconds = toNanoseconds
        self.wallOffsetNanoseconds = wallOffsetNanoseconds
        self.buckets = buckets
    }

    enum CodingKeys: String, CodingKey {
        case stream, buckets
        case fromNanoseconds = "from_ns"
        case toNanoseconds = "to_ns"
        case wallOffsetNanoseconds = "wall_offset_ns"
    }
}

extension RecorderControl {
    /// The page's files, embedded in the binary: `GET /`, `/timeline.js`, `/timeline.css`.
    static let pageFiles: [String: (type: String, bytes: [UInt8])] = [
        "/": ("text/html; charset=utf-8", PackageResources.timeline_html),
        "/index.html": ("text/html; charset=utf-8", PackageResources.timeline_html),
        "/timeline.js": ("text/javascript; charset=utf-8", PackageResources.timeline_js),
        "/timeline.css": ("text/css; charset=utf-8", PackageResources.timeline_css),
    ]

    /// Headers every page file carries: it loads only this recorder's own scripts, styles, images and API (and, as
    /// every answer, `nosniff` and `Cross-Origin-Resource-Policy`: ``HTTPServer/everyResponseHeaders``).
    static let pageHeaders: [(String, String)] = [
        (
            "Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; "
                + "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
        ),
        ("Referrer-Policy", "no-referrer"), ("Cache-Control", "no-store"),
    ]

    /// Serves a page file. `/?token=…` or the token box's `POST /` (TCP) set the token cookie and answer a page
    /// that goes on to `/` by itself (a meta refresh, not a redirect): the token leaves the address bar, and the
    /// browser goes on from this recorder's own page, so the `SameSite=Strict` cookie is sent also when the link
    /// was opened from another site (after a redirect it would not be, nor on a reload).
    func page(_ request: HTTPRequest) throws -> HTTPResponse {
        guard let file = Self.pageFiles[request.path] else {
            throw APIError(.notFound, "no such path '\(request.path)': the page is / and the API is under /v1")
        }
        let isTokenForm = request.method == "POST" && request.path == "/"
        guard request.method == "GET" || request.method == "HEAD" || isTokenForm else {
            throw APIError.methodNotAllowed(
                request.path, takes: request.path == "/" ? ["GET", "POST"] : ["GET"], not: request.method)
        }
        if isTokenForm {
            try checkOrigin(request)
            // Post, then get: the answer to the post leaves the history (Back never offers to send the token again),
            // and the redirect from this recorder's own page carries the cookie.
            return HTTPResponse(status: 303, headers: [("Location", "/")] + Self.pageHeaders, body: .bytes([]))
        }
        if request.isTCP, request.query["token"] != nil {
            let html = """
                <!doctype html>
                <html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0; url=/">
                <title>rewind</title></head><body><p>Opening <a href="/">the timeline</a> …</p></body></html>

                """
            return HTTPResponse(
                status: 200, headers: [("Content-Type", "text/html; charset=utf-8")] + Self.pageHeaders,
                body: .bytes(Array(html.utf8)))
        }
        return HTTPResponse(
            status: 200, headers: [("Content-Type", file.type)] + Self.pageHeaders, body: .bytes(file.bytes))
    }

    /// The query parameter of the page a wrong token posted in the token box is sent on to (`/?token_refused=1`), whose
    /// page asking for the token says the one given was wrong.
    static let tokenRefusedParameter = "token_refused"

    /// Whether a refused request is a browser opening the page (`GET /` asking for HTML), which gets a page that
    /// says how to open it instead of the API's JSON error.
    func wantsPage(_ request: HTTPRequest) -> Bool {
        (request.method == "GET" || request.method == "HEAD" || (request.method == "POST" && request.path == "/"))
            && (request.path == "/" || request.path == "/index.html")
            && (request.headers["accept"] ?? "").contains("text/html")
    }

    /// The 401 page a browser gets for `/` without a valid token: how to open the page with it, and where it is
    /// kept. The token itself is never in it.
    func pageWithoutToken(_ error: APIError, tokenWasGiven: Bool) -> HTTPResponse {
        let file = tokenFilePath.escapingMarkup
        let wrong = tokenWasGiven ? "\n<p><strong>The token given is not this recorder's.</strong></p>" : ""
        let html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>rewind: token needed</title></head><body>
            <h1>This recorder needs its token</h1>\(wrong)
            <p>Open the page as <code>/?token=TOKEN</code>, with the token kept in <code>\(file)</code>
            on the recorder's machine: <code>http://HOST:PORT/?token=$(cat \(file))</code> for the token the
            recorder makes. A token of your own goes in URL-encoded (in a query a <code>+</code> is read as a space
            and a <code>%</code> as an escape), e.g. with
            <code>python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(open(sys.argv[1]).read().strip(), safe=""))' \(file)</code>.
            The token is taken once into a cookie and the address bar is cleared, but the browser's history keeps
            the address it was opened with; open the page this way again when the recorder has a new token or the
            cookie is gone.</p>
            <p>Or give the token here, which keeps it out of every address and the browser's history:</p>
            <form method="post" action="/"><label>Token <input name="token" type="password" autocomplete="off"
            required></label> <button type="submit">Open</button></form>
            </body></html>

            """
        // `same-origin`, not `no-referrer`: under the latter a browser posts the token box with `Origin: null`,
        // which ``checkOrigin(_:)`` refuses.
        let headers = Self.pageHeaders.map { $0.0 == "Referrer-Policy" ? ($0.0, "same-origin") : $0 }
        return HTTPResponse(
            status: error.code.status, headers: [("Content-Type", "text/html; charset=utf-8")] + headers,
            body: .bytes(Array(html.utf8)))
    }

    /// A request that changes state must come from this recorder's own page or from a program: a browser's `Origin`
    /// naming another site is refused (the token cookie is `SameSite=Strict` as well).
    func checkOrigin(_ request: HTTPRequest) throws {
        guard request.method != "GET", request.method != "HEAD", let origin = request.headers["origin"] else { return }
        let host = request.headers["host"] ?? ""
        guard origin == "http://" + host || origin == "https://" + host else {
            throw APIError(.forbidden, "a request from \(origin) cannot change this recorder; use its own page")
        }
    }

    /// The stream a path names: one the recorder records (memory and disk), or one its store holds from an earlier
    /// recording (disk only; `live` nil).
    func streamSource(_ name: String) throws -> (source: ClipSource, live: RecorderStream?) {
        if let stream = recorder.stream(named: name) { return (.recorderStream(stream), stream) }
        let stored = try storedStreams()
        if let row = stored.first(where: { $0.name == name }), let store = recorder.store {
            return (.store(store, stream: row), nil)
        }
        let names = recorder.streams.map { "'\($0.name)'" }.joined(separator: ", ")
        let others =
            stored.isEmpty ? "" : "; its store also holds " + stored.map { "'\($0.name)'" }.joined(separator: ", ")
        throw APIError(.notFound, "unknown stream '\(name)': this recorder records \(names)\(others)")
    }

    /// `GET /v1/streams/{name}/timeline?from=&to=&buckets=`: coverage per bucket from the index and the ring.
    func timeline(stream name: String, query: [String: String]) throws -> TimelineResponse {
        let (source, stream) = try streamSource(name)
        guard let fromText = query["from"], let toText = query["to"] else {
            throw APIError(.badRequest, "give from and to (times such as 12.5s, 1500ms or ISO-8601)")
        }
        let asked = try recorderRange(from: fromText, to: toText)
        let (from, to) = (asked.lowerBound, asked.upperBound)
        let count = Int(query["buckets"] ?? "500") ?? -1
        guard (1...ClipSource.maximumBuckets).contains(count), Int64(count) <= to - from else {
            throw APIError(
                .badRequest,
                "buckets must be a whole number from 1 to \(ClipSource.maximumBuckets), at most the "
                    + "range in nanoseconds")
        }
        let clock = try source.clock()
        var buckets = try source.timeline(range: clock.ptsRange(from..<to), buckets: count)
        // A stream whose input failed gets its `input failed` gap when the recorder stops; until then it is shown
        // from its last frame on to where the recording has reached (``Recorder/recordingEnd``: what it would be if
        // the recorder stopped now), so the lane says why it is empty, and the future stays unmarked.
        if stream?.inputError != nil, let last = try source.span()?.upperBound, let reached = recorder.recordingEnd {
            let start = last.addingSaturating(max(1, source.stream.frameDuration.nanoseconds ?? 1))
            let end = clock.pts(atRecorderTime: reached)
            for index in buckets.indices
            where buckets[index].endNanoseconds > start && buckets[index].startNanoseconds < end
                && !buckets[index].gaps.contains(.inputFailed)
            {
                buckets[index].gaps.append(.inputFailed)
            }
        }
        return TimelineResponse(
            stream: name, fromNanoseconds: from, toNanoseconds: to,
            wallOffsetNanoseconds: try stream.map { $0.clock?.wallNanoseconds } ?? storedWallOffset(source),
            buckets: buckets.map { bucket in
                TimelineBucketBody(
                    startNanoseconds: clock.recorderTime(ofPTS: bucket.startNanoseconds),
                    endNanoseconds: clock.recorderTime(ofPTS: bucket.endNanoseconds), memory: bucket.memory,
                    disk: bucket.disk, gaps: bucket.gaps.map(\.rawValue))
            })
    }

    /// Wall-clock time minus recorder time for a stream of the store, as its clock row says; nil without one.
    private func storedWallOffset(_ source: ClipSource) throws -> Int64? {
        guard case .store(let store, let row) = source else { return nil }
        return try store.clock(of: row)?.wallNanoseconds
    }

    /// `GET /v1/streams/{name}/frame?at=T[&step=before|after][&width=W][&format=jpeg|png]`: the frame at or
    /// before `T` (recorder time), or the one before or after it, as a picture. Headers name its pts
    /// (`X-Rewind-Pts-Ns`, stream clock), recorder time (`X-Rewind-Time-Ns`) and capture time (`X-Rewind-Wall-Ns`).
    func frame(stream name: String, query: [String: String]) throws -> HTTPResponse {
        let source = try streamSource(name).source
        guard let atText = query["at"] else { throw APIError(.badRequest, "give at (a time such as 12.5s)") }
        let at = try recorderTime(atText, field: "at")
        let step: ClipSource.FrameStep
        switch query["step"] {
        case nil: step = .atOrBefore
        case "before": step = .before
        case "after": step = .after
        case let other?: throw APIError(.badRequest, "step must be before or after, not '\(other)'")
        }
        let format: FrameImage.Format
        switch query["format"] ?? "jpeg" {
        case "jpeg", "jpg": format = .jpeg
        case "png": format = .png
        case let other: throw APIError(.badRequest, "format must be jpeg or png, not '\(other)'")
        }
        let frameWidth = source.stream.layout.width
        var width: Int?
        if let text = query["width"] {
            // Wider than the frame gives the frame's own size, however many digits it has (all digits that do not
            // fit in an Int are more than any width).
            let digitsOnly =
                !text.isEmpty && text.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
            guard let value = Int(text) ?? (digitsOnly ? Int.max : nil), value >= 1
            else {
                throw APIError(.badRequest, "width must be a whole number of pixels from 1")
            }
            width = min(value, frameWidth)
        }
        let clock = try source.clock()
        // A frame found in the index may be deleted by retention before it is read: look again (a few times).
        var found: FrameImage?
        for _ in 0..<3 where found == nil {
            guard let pts = try source.framePTS(step, clock.pts(atRecorderTime: at)) else { break }
            found = try source.picture(at: pts, width: width, format: format)
        }
        guard let picture = found else {
            let which =
                switch step {
                case .after: "after"
                case .before: "before"
                case .atOrBefore: "at or before"
                }
            // As times are written in requests: to the millisecond, or to the nanosecond where that would round; a
            // time past what the clock reaches as it was given.
            let time =
                at.magnitude >= Self.farthestTime.magnitude
                ? atText : at % 1_000_000 == 0 ? formatSeconds(at) : "\(at)ns"
            throw APIError(.notFound, "no frame of '\(name)' \(which) \(time)")
        }
        return HTTPResponse(
            status: 200,
            headers: [
                ("Content-Type", format.mediaType), ("Cache-Control", "no-store"),
                ("X-Rewind-Pts-Ns", String(picture.ptsNanoseconds)),
                ("X-Rewind-Time-Ns", String(clock.recorderTime(ofPTS: picture.ptsNanoseconds))),
                ("X-Rewind-Wall-Ns", String(picture.wallNanoseconds)),
                ("Access-Control-Expose-Headers", "X-Rewind-Pts-Ns, X-Rewind-Time-Ns, X-Rewind-Wall-Ns"),
            ], body: .bytes(picture.bytes))
    }

    /// `GET /v1/files/{id}[?file=N]`: a finished export of this recorder, by its save's id (never by a path).
    func file(_ idText: String, query: [String: String]) throws -> HTTPResponse {
        guard let id = Int(idText), let object = book.object(id) else {
            throw APIError(.notFound, "no export '\(idText)'")
        }
        guard object.state == .done else {
            throw APIError(.conflict, "export \(id) is \(object.state.rawValue), not done")
        }
        guard let index = Int(query["file"] ?? "0"), index >= 0 else {
            throw APIError(.badRequest, "file must be a whole number, 0 for the first of the export's files")
        }
        guard object.files.indices.contains(index) else {
            throw APIError(
                .notFound,
                "export \(id) has \(object.files.count) file\(object.files.count == 1 ? "" : "s"); file must be 0…"
                    + "\(object.files.count - 1) (0 is the first)")
        }
        let path = object.files[index]
        // Without blocking: a FIFO put in its place would hold the connection's thread until a writer came.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard descriptor >= 0 else {
            throw APIError(.notFound, "export \(id)'s file \(path) is gone: \(String(cString: strerror(errno)))")
        }
        // The path may hold another file now (a later export to the same path, or someone else's).
        guard let written = book.fileIdentity(id, index: index), written == FileIdentity(descriptor: descriptor) else {
            close(descriptor)
            throw APIError(.conflict, "export \(id)'s file \(path) was replaced since it was written")
        }
        let type =
            switch ExportFormat(path: path) {
            case .matroska?: "video/x-matroska"
            case .mp4?: "video/mp4"
            default: "application/octet-stream"
            }
        return HTTPResponse(
            status: 200,
            headers: [
                ("Content-Type", type),
                ("Content-Disposition", Self.contentDisposition(fileName: (path as NSString).lastPathComponent)),
            ],
            body: .stream(FileBody(descriptor: descriptor)))
    }

    /// A download's `Content-Disposition` (RFC 6266): `filename`, an ASCII stand-in in a quoted string for clients
    /// that read only it (`"`, `\`, control characters and every character beyond ASCII each made `_`), and
    /// `filename*`, the exact name as percent-encoded UTF-8 (RFC 8187), which browsers take instead.
    ///
    /// - Parameter fileName: the file's name, without its directory.
    /// - Returns: `attachment; filename="…"; filename*=UTF-8''…`.
    /// - Complexity: O(*n*) in the name's length.
    static func contentDisposition(fileName: String) -> String {
        var fallback = ""
        for scalar in fileName.unicodeScalars {
            let isPlain =
                scalar.isASCII && scalar.value >= 0x20 && scalar.value != 0x7F && scalar != "\"" && scalar != "\\"
            fallback.unicodeScalars.append(isPlain ? scalar : "_")
        }
        // RFC 8187's attr-char: what goes unescaped in `filename*`.
        let attributeCharacters = Set("!#$&+-.^_`|~".utf8)
        let hexDigits = Array("0123456789ABCDEF")
        var encoded = ""
        for byte in fileName.utf8 {
            let isLetterOrDigit =
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            if isLetterOrDigit || attributeCharacters.contains(byte) {
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                encoded += "%" + String(hexDigits[Int(byte >> 4)]) + String(hexDigits[Int(byte & 0xF)])
            }
        }
        return "attachment; filename=\"\(fallback)\"; filename*=UTF-8''\(encoded)"
    }
}

/// A file sent as a response body, read a chunk at a time, with its length (the file's size when opened) sent as
/// `Content-Length`: a file cut short meanwhile ends the connection before that length, so a client sees it.
final class FileBody: HTTPStreamBody, @unchecked Sendable {
    private let lock = NSLock()
    private var descriptor: Int32
    let byteCount: UInt64?
    /// Two minutes: a download paused (a browser's, a slow pipe, a rate-limited curl) keeps its file; the idle
    /// timeout of 10 s would cut it short.
    var stallSeconds: Int? { 120 }

    init(descriptor: Int32) {
        self.descriptor = descriptor
        var info = stat()
        byteCount = fstat(descriptor, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG ? UInt64(info.st_size) : nil
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        lock.lock()
        defer { lock.unlock() }
        guard descriptor >= 0 else { return nil }
        while true {
            let count = Glibc.read(descriptor, buffer.baseAddress, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 {
                Glibc.close(descriptor)
                descriptor = -1
                return nil
            }
            return count
        }
    }

    func close() {
        lock.lock()
        defer { lock.unlock() }
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
    }

    deinit { if descriptor >= 0 { Glibc.close(descriptor) } }
}

extension RecorderControl {
    /// The query parameters the endpoint at `route` (the path after `/v1`) takes with `method`, besides `token`.
    static func queryParameters(_ route: [String], method: String) -> Set<String> {
        switch route {
        case let path where path.count == 3 && path[0] == "streams" && path[2] == "timeline": ["from", "to", "buckets"]
        case let path where path.count == 3 && path[0] == "streams" && path[2] == "frame":
            ["at", "step", "format", "width"]
        case let path where path.count == 2 && path[0] == "files": ["file"]
        case ["markers"] where method == "GET": ["from", "to"]
        case ["events"]: ["last_event_id"]
        default: []
        }
    }

    /// Refuses query parameters an endpoint does not know (a misspelt `widht` would be ignored otherwise); `token`
    /// (the TCP listener's) is always allowed.
    ///
    /// - Throws: ``APIError`` 400 naming the parameter and the ones the endpoint takes.
    static func requireKnown(_ query: [String: String], _ known: Set<String>) throws {
        guard let unknown = query.keys.sorted().first(where: { !known.contains($0) && $0 != "token" }) else { return }
        let takes = known.isEmpty ? "this takes none" : "this takes \(known.sorted().joined(separator: ", "))"
        throw APIError(.badRequest, "unknown parameter '\(unknown)': \(takes)")
    }
}
