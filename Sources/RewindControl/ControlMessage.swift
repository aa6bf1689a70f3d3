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

/// A control request that could not be made or served.
public enum ControlError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Why a recorder refused a request, as sent on the wire (`"reason"` in an error reply).
    public enum Refusal: String, Sendable, Hashable {
        /// The request itself was wrong: a missing or malformed field, an unknown command or stream.
        case badRequest = "bad_request"
        /// The clip range's end is not after its start (or the duration to save is not above 0).
        case badRange = "bad_range"
        /// The range holds no frame; nothing was written.
        case empty
        /// The export or anything else failed.
        case failed
    }

    /// A system call on the control socket (`path`, when known) failed; `action` says which (`connect`, `send`).
    case socket(action: String, path: String?, Errno)
    /// The socket's path is longer than a Unix socket address holds (`limit` bytes).
    case socketPathTooLong(path: String, limit: Int)
    /// Another live recorder already serves the socket at `path`.
    case alreadyServed(path: String)
    /// A message longer than `limit` bytes.
    case messageTooLong(limit: Int)
    /// An empty message.
    case emptyMessage
    /// A message that is not one JSON object; `excerpt` is its start.
    case notJSON(excerpt: String)
    /// A reply that is not one the protocol knows (a field missing or of the wrong type); `excerpt` is its start.
    case badReply(excerpt: String)
    /// A request field that is missing or malformed: which one, and what was wrong (a sentence naming it).
    case badField(String, detail: String)
    /// A command the recorder does not know (nil: none given).
    case unknownCommand(String?)
    /// The request names a stream the recorder does not record.
    case wrongStream(recording: String, requested: String)
    /// The recorder refused the request: its reason code and its own message.
    case refused(Refusal, message: String)

    /// The error in words, as the command line prints it and a recorder sends it as `"error"`.
    public var description: String {
        switch self {
        case .socket(let action, let path, let errno):
            return "cannot \(action) the control socket\(path.map { " \($0)" } ?? ""): \(errno)"
        case .socketPathTooLong(let path, let limit):
            return "cannot create the control socket \(path): the path is too long for a Unix socket (at most "
                + "\(limit) bytes)"
        case .alreadyServed(let path):
            return "another recorder already serves \(path)"
        case .messageTooLong(let limit):
            return "request longer than \(limit / 1024) KiB"
        case .emptyMessage:
            return "empty message: expected one line of JSON"
        case .notJSON(let excerpt):
            return "not a JSON object: '\(excerpt)'"
        case .badReply(let excerpt):
            return "the recorder's reply is not one this build understands: '\(excerpt)'"
        case .badField(_, let detail):
            return detail
        case .unknownCommand(let command):
            return "unknown command '\(command ?? "none")': save, clip or status"
        case .wrongStream(let recording, let requested):
            return "the live recorder records stream '\(recording)', not '\(requested)'"
        case .refused(_, let message):
            return message
        }
    }

    /// The reason code a recorder sends back for `error`.
    static func refusal(for error: any Error) -> Refusal {
        switch error {
        case is ControlError, is ValueError: .badRequest
        case ClipError.badRange, ClipError.nonPositiveDuration: .badRange
        case ClipError.empty, ClipError.noFrames: .empty
        default: .failed
        }
    }
}

/// One line received on a control connection, and the descriptor that came with it, which this value owns: it is
/// closed when the value ends, so whoever reads the line only borrows the descriptor.
struct ReceivedLine: ~Copyable {
    /// The line, without its newline.
    var bytes: [UInt8] = []
    /// The first descriptor that came with the line.
    var descriptor: FileDescriptor?

    deinit {
        if let descriptor { close(descriptor.rawValue) }
    }
}

/// The framing of the control socket: one line of bytes each way, a descriptor optionally riding with the first
/// byte (SCM_RIGHTS). It knows nothing of what the lines mean.
enum ControlMessage {
    static let maximumLength = 64 * 1024

    /// Sends `line` and a newline on `socket`.
    ///
    /// - Parameter descriptor: sent along (the receiver gets a duplicate); the caller still owns it and closes it.
    static func send(_ line: [UInt8], to socket: FileDescriptor, descriptor: FileDescriptor? = nil) throws {
        let data = line + [UInt8(ascii: "\n")]
        try data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let sent = rewind_send_with_descriptor(
                    socket.rawValue, raw.baseAddress! + offset, raw.count - offset,
                    offset == 0 ? (descriptor?.rawValue ?? -1) : -1)
                guard sent > 0 else {
                    throw ControlError.socket(action: "send on", path: nil, Errno(rawValue: Int32(-sent)))
                }
                offset += sent
            }
        }
    }

    /// Reads one line from `socket`, and the first descriptor that came with it (any more are closed).
    ///
    /// - Throws: ``ControlError``: the read failed, the line is empty, or longer than ``maximumLength``.
    static func receive(from socket: FileDescriptor) throws -> ReceivedLine {
        var received = ReceivedLine()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !received.bytes.contains(UInt8(ascii: "\n")) {
            var passed: Int32 = -1
            let count = chunk.withUnsafeMutableBytes {
                rewind_receive_with_descriptor(socket.rawValue, $0.baseAddress, $0.count, &passed)
            }
            if passed >= 0 {
                if received.descriptor == nil {
                    received.descriptor = FileDescriptor(rawValue: passed)
                } else {
                    close(passed)
                }
            }
            guard count >= 0 else {
                throw ControlError.socket(action: "read", path: nil, Errno(rawValue: Int32(-count)))
            }
            guard count > 0 else { break }
            received.bytes += chunk[0..<count]
            guard received.bytes.count <= maximumLength else {
                throw ControlError.messageTooLong(limit: maximumLength)
            }
        }
        if let end = received.bytes.firstIndex(of: UInt8(ascii: "\n")) { received.bytes.removeSubrange(end...) }
        guard !received.bytes.isEmpty else { throw ControlError.emptyMessage }
        return received
    }
}
