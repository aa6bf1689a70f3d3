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
public struct ControlError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
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
                    throw ControlError(
                        "cannot send on the control socket: \(Errno(rawValue: Int32(-sent)).description)")
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
                throw ControlError("cannot read the control socket: \(Errno(rawValue: Int32(-count)).description)")
            }
            guard count > 0 else { break }
            line += chunk[0..<count]
            guard line.count <= maximumLength else { throw ControlError("request longer than 64 KiB") }
        }
        if let end = line.firstIndex(of: UInt8(ascii: "\n")) { line.removeSubrange(end...) }
        guard !line.isEmpty else { throw ControlError("empty message: expected one line of JSON") }
        guard let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else {
            throw ControlError("not a JSON object: '\(String(decoding: line.prefix(200), as: UTF8.self))'")
        }
        return (object, descriptor)
    }
}
