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
    /// A request field that is missing or malformed: which one, and what was wrong (a sentence naming it).
    case badField(String, detail: String)
    /// A command the recorder does not know (nil: none given).
    case unknownCommand(String?)
    /// The request names a stream the recorder does not record.
    case wrongStream(recording: String, requested: String)
    /// The recorder refused the request: its reason code and its own message.
    case refused(Refusal, message: String)

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

/// One line of JSON on a control connection, optionally with a descriptor.
enum ControlMessage {
    static let maximumLength = 64 * 1024

    static func send(_ object: [String: Any], to socket: Int32, descriptor: Int32 = -1) throws {
        var data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        data.append(UInt8(ascii: "\n"))
        try data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let sent = rewind_send_with_descriptor(
                    socket, raw.baseAddress! + offset, raw.count - offset, offset == 0 ? descriptor : -1)
                guard sent > 0 else {
                    throw ControlError.socket(action: "send on", path: nil, Errno(rawValue: Int32(-sent)))
                }
                offset += sent
            }
        }
    }

    /// Reads one line; returns the object and a descriptor that came with it (−1 when none).
    static func receive(from socket: Int32) throws -> ([String: Any], Int32) {
        var line: [UInt8] = []
        var descriptor: Int32 = -1
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !line.contains(UInt8(ascii: "\n")) {
            var received: Int32 = -1
            let count = chunk.withUnsafeMutableBytes {
                rewind_receive_with_descriptor(socket, $0.baseAddress, $0.count, &received)
            }
            if received >= 0 {
                if descriptor < 0 { descriptor = received } else { close(received) }
            }
            guard count >= 0 else {
                throw ControlError.socket(action: "read", path: nil, Errno(rawValue: Int32(-count)))
            }
            guard count > 0 else { break }
            line += chunk[0..<count]
            guard line.count <= maximumLength else { throw ControlError.messageTooLong(limit: maximumLength) }
        }
        if let end = line.firstIndex(of: UInt8(ascii: "\n")) { line.removeSubrange(end...) }
        guard !line.isEmpty else { throw ControlError.emptyMessage }
        guard let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else {
            throw ControlError.notJSON(excerpt: String(decoding: line.prefix(200), as: UTF8.self))
        }
        return (object, descriptor)
    }
}
