import Foundation
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import SegmentStore

/// An error as the API sends it, with its HTTP status: `{"error": {"code": "not_found", "message": "…"}}`.
public struct APIError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of error: the `code` on the wire, which clients branch on, and the HTTP status it goes with.
    public enum Code: String, Sendable, Hashable, Codable, CaseIterable {
        /// 400: a malformed body, field, time or path.
        case badRequest = "bad_request"
        /// 401: a TCP request without the right token.
        case unauthorized
        /// 403: a request that changes state, from a page of another site (its `Origin` is not this recorder's).
        case forbidden
        /// 404: an unknown stream, save, marker or path.
        case notFound = "not_found"
        /// 404: the range holds no frame; nothing was written.
        case empty
        /// 405: the path exists, the method does not.
        case methodNotAllowed = "method_not_allowed"
        /// 409: the request conflicts with what is: extending a save that is no longer waiting, a hold that does
        /// not fit the disk budget.
        case conflict
        /// 413: a body over the limit.
        case tooLarge = "too_large"
        /// 429: too many exports waiting.
        case tooMany = "too_many"
        /// 503: too many connections at once.
        case unavailable
        /// 503: the recorder is stopping.
        case stopping
        /// 503: a limit of the system (threads, processes) left the recorder without what the request needs.
        case systemLimit = "system_limit"
        /// 500: the export or anything else failed.
        case failed

        /// The HTTP status that goes with the code.
        public var status: Int {
            switch self {
            case .badRequest: 400
            case .unauthorized: 401
            case .forbidden: 403
            case .notFound, .empty: 404
            case .methodNotAllowed: 405
            case .conflict: 409
            case .tooLarge: 413
            case .tooMany: 429
            case .unavailable, .stopping, .systemLimit: 503
            case .failed: 500
            }
        }
    }

    /// The error object on the wire.
    public struct Detail: Sendable, Hashable, Codable {
        /// The code's raw value (an unknown one from a newer recorder reads as `failed`).
        public var code: String
        /// A sentence for people.
        public var message: String

        /// Makes a detail.
        public init(code: String, message: String) {
            self.code = code
            self.message = message
        }
    }

    /// The code.
    public var code: Code
    /// A sentence for people, naming what was wrong.
    public var message: String

    /// The methods the path takes, for a 405's `Allow` header (RFC 9110 requires it there).
    var allowedMethods: [String] = []

    /// Makes an error.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// 405: `path` takes `methods` (`HEAD` wherever `GET`: it is answered as `GET`), not `method`.
    static func methodNotAllowed(_ path: String, takes methods: [String], not method: String) -> APIError {
        var error = APIError(.methodNotAllowed, "\(path) takes \(methods.joined(separator: " or ")), not \(method)")
        error.allowedMethods = methods.contains("GET") ? methods + ["HEAD"] : methods
        return error
    }

    /// The error as the wire carries it inside a save object.
    public var detail: Detail { Detail(code: code.rawValue, message: message) }

    /// The message.
    public var description: String { message }

    /// A body over `limit` bytes.
    static func bodyTooLarge(_ limit: Int) -> APIError {
        APIError(.tooLarge, "the request body is larger than \(limit / 1024) KiB")
    }

    /// The error for anything a handler threw: API errors as they are, bad values as 400, empty ranges as `empty`,
    /// a thread or process the system refused as `system_limit`.
    package init(_ error: any Error) {
        switch error {
        case let error as APIError: self = error
        case let error as ValueError: self.init(.badRequest, "\(error)")
        case ClipError.badRange, ClipError.nonPositiveDuration: self.init(.badRequest, "\(error)")
        case ClipError.empty, ClipError.noFrames: self.init(.empty, "\(error)")
        case let error as ThreadStartFailed: self.init(.systemLimit, "\(error)")
        case SegmentStoreError.damaged, SegmentStoreError.notASegment, SegmentStoreError.indexDisagrees:
            // The repair checks a store at rest: it waits for the recorder to stop (a client said nothing of it).
            self.init(
                .failed,
                "\(error): stop the recorder, then run 'rewind verify --repair', which cuts the damage out of the store"
            )
        case let error as ExportError:
            // Out of room for the file a client has the recorder write first: the store's disk, whatever its -o.
            if error.isOutOfRoom, let store = StagingFile.store(ofStagingFile: error.destination) {
                self.init(.failed, Self.noRoomForStagingFile(error, store: store))
                return
            }
            switch error.reason {
            case .toolRefused: self.init(.systemLimit, "\(error)")
            case .toolShortOfAddressSpace:
                self.init(
                    .systemLimit,
                    "\(error)\nraise the recorder's limit on address space (ulimit -v unlimited; systemd's LimitAS=), "
                        + "or export .mkv or .y4m, which need no ffmpeg")
            case .system(_, let errno) where errno == Errno(rawValue: ENOSPC):
                self.init(.failed, "\(error): free some space, or write elsewhere (give a path on another disk)")
            case .temporaryDirectoryUnusable:
                self.init(.failed, "\(error): the recorder's TMPDIR must be a directory it can write")
            default: self.init(.failed, "\(error)")
            }
        default: self.init(.failed, "\(error)")
        }
    }

    /// The message of an export that found no room for its ``StagingFile`` in `store`'s `exports/`: that file is on
    /// the store's disk, whatever the client's `-o` (stdout, a FIFO or a device, which it had not written yet).
    private static func noRoomForStagingFile(_ error: ExportError, store: String) -> String {
        "\(error)\nthe store's disk has no room for that file: the recorder makes the export there first, in the "
            + "store's exports/, and the client then copies it to its -o (standard output, a FIFO or a device, which "
            + "is not what ran out of room); free some space on the store's disk (\(store)), or save a shorter range"
    }

    /// The response carrying this error, with the code's status.
    var response: HTTPResponse { response(status: code.status) }

    /// The response carrying this error with `status`.
    func response(status: Int) -> HTTPResponse {
        var headers = [("Content-Type", "application/json")]
        if code == .methodNotAllowed { headers.append(("Allow", allowedMethods.joined(separator: ", "))) }
        return HTTPResponse(status: status, headers: headers, body: .bytes(APICoding.encode(Body(error: detail))))
    }

    /// An error response's body: `{"error": {…}}`.
    public struct Body: Sendable, Hashable, Codable {
        /// The error.
        public var error: Detail

        /// Makes a body.
        public init(error: Detail) { self.error = error }
    }
}

/// A control request that could not be made or served, on either side of the socket.
public enum ControlError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A system call on a control socket (`path`, when known) failed; `action` says which (`connect to`, `send on`).
    case socket(action: String, path: String?, Errno)
    /// The socket's path is longer than a Unix socket address holds (`limit` bytes).
    case socketPathTooLong(path: String, limit: Int)
    /// Another live recorder already serves the socket at `path`.
    case alreadyServed(path: String)
    /// The HTTP server could not start.
    case serverFailed(String)
    /// The `--listen` address is not a numeric address and port, or is not loopback without `--listen-any`.
    case badListenAddress(String, reason: ListenProblem)
    /// The token file cannot be read or made.
    case tokenFile(path: String, TokenFileProblem)
    /// The recorder closed the connection before it answered: it stopped (or was killed) while serving the
    /// request; `request` names it.
    case recorderStopped(request: String)
    /// The recorder closed connections for `request` without answering while it still runs (at its limit on threads
    /// or connections).
    case connectionDropped(request: String)
    /// The recorder's event stream broke off before its end: the recorder was killed or crashed, or, when it had
    /// sent its `stopping` event (`afterStopping`), was ended at once while it stopped (a second signal).
    case eventStreamBroken(afterStopping: Bool)
    /// The recorder closed the event stream while it still runs: it lets go of a client that takes none of its events
    /// for 10 s (its queue full), so that no client holds it up.
    case eventStreamDropped
    /// The recorder sent nothing for `seconds` while `request` waited for its answer: it is stopped (Ctrl-Z,
    /// `kill -STOP`) or stuck.
    case noAnswer(request: String, seconds: Int)
    /// The recorder's reply is not one this build understands; `excerpt` is its start.
    case badReply(excerpt: String)
    /// The recorder answered with an error.
    case refused(APIError)

    /// What is wrong with a listen address.
    public enum ListenProblem: Sendable, Hashable, CustomStringConvertible {
        /// Not `HOST:PORT` with a port in 0…65535.
        case malformed
        /// The host is not a numeric IPv4 or IPv6 address.
        case notNumeric
        /// Not a loopback address, and any address was not allowed.
        case notLoopback
        /// Binding or listening failed.
        case system(Errno)

        /// The problem in words.
        public var description: String {
            switch self {
            case .malformed: "expected HOST:PORT with a port in 0…65535, e.g. 127.0.0.1:8080"
            case .notNumeric: "not a numeric IP address (for this machine, 127.0.0.1 or [::1])"
            case .notLoopback: "not a loopback address"
            case .system(let errno): "\(errno)"
            }
        }
    }

    /// The error in words, as the command line prints it.
    public var description: String {
        switch self {
        case .socket(let action, let path, let errno):
            return "cannot \(action) the control socket\(path.map { " \($0)" } ?? ""): \(errno)"
        case .socketPathTooLong(let path, let limit):
            return "cannot create the control socket \(path): the path is too long for a Unix socket (at most "
                + "\(limit) bytes)"
        case .alreadyServed(let path):
            return "another recorder already serves \(path)"
        case .serverFailed(let why):
            return "cannot serve the control API: \(why)"
        case .badListenAddress(let address, let reason):
            return "cannot listen on '\(address)': \(reason)"
        case .tokenFile(let path, let problem):
            return "token file \(path): \(problem)"
        case .recorderStopped(let request):
            // Only a save or a clip writes a file.
            let writes = request.hasPrefix("save") || request.hasPrefix("clip")
            return "the recorder stopped before it finished \(request)" + (writes ? "; no file was written by it" : "")
        case .connectionDropped(let request):
            return "the recorder closed the connection without answering \(request), yet it still runs (it may be at "
                + "a limit on threads or connections): 'rewind status' shows what it is doing"
        case .eventStreamBroken(let afterStopping):
            return afterStopping
                ? "the recorder's event stream broke off while it was stopping, before its saves were done: it was "
                    + "ended at once (a second signal) or killed"
                : "the recorder's event stream broke off without saying it was stopping: it was killed or crashed"
        case .eventStreamDropped:
            return "the recorder closed this event stream while it goes on recording: it lets go of a client that "
                + "takes none of its events for 10 s (was this command's output read?)"
        case .noAnswer(let request, let seconds):
            return "the recorder sent nothing for \(seconds) s while \(request) waited for it: it is stopped (Ctrl-Z, "
                + "kill -STOP) or stuck"
        case .badReply(let excerpt):
            return "the recorder's reply is not one this build understands: '\(excerpt)'"
        case .refused(let error):
            return error.message
        }
    }
}

extension ControlError {
    /// Whether the recorder closed the connection before its answer began (rather than refusing or answering).
    var isDroppedConnection: Bool {
        switch self {
        case .recorderStopped, .socket: true
        default: false
        }
    }
}
