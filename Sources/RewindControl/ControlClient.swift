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

/// The client side of a live recorder's control socket (what `rewind save`, `rewind clip` and `rewind info` use).
///
/// Each call makes one connection, sends one ``ControlRequest`` and reads one ``ControlReply``.
public enum ControlClient {
    /// Asks the live recorder of `directory` to save the last `duration` nanoseconds.
    ///
    /// - Parameters:
    ///   - destination: a path (made absolute here) or a descriptor to write into, or nil for `DIR/exports/`. A
    ///     descriptor is sent with the request (the recorder gets a duplicate and closes it); the caller still owns
    ///     its own and closes it after this returns.
    ///   - format: needed for a descriptor; a path's extension names its own.
    ///   - quality: how an `mp4` export is encoded; nil: `fast`.
    /// - Returns: what the recorder wrote, or nil when no recorder serves `directory` (no socket, or a stale one).
    /// - Throws: ``ControlError`` when the recorder answered with an error or the connection broke.
    public static func save(
        directory: String, last duration: Duration, to destination: ExportDestination?, format: ExportFormat?,
        stream: String? = nil, quality: ExportQuality? = nil
    ) throws -> ControlReply.Export? {
        try export(
            directory: directory,
            ControlRequest(
                .save(lastNanoseconds: duration.nanosecondsClamped), stream: stream, format: format, quality: quality),
            destination: destination)
    }

    /// Asks the live recorder of `directory` for the frames in [`from`, `to`), times as on the command line.
    ///
    /// - Parameters: as for ``save(directory:last:to:format:stream:)``.
    /// - Returns: what the recorder wrote, or nil when no recorder serves `directory`.
    /// - Throws: ``ControlError`` when the recorder answered with an error (an empty range among them).
    public static func clip(
        directory: String, from: String, to: String, destination: ExportDestination?, format: ExportFormat?,
        stream: String? = nil, quality: ExportQuality? = nil
    ) throws -> ControlReply.Export? {
        try export(
            directory: directory,
            ControlRequest(.clip(from: from, to: to), stream: stream, format: format, quality: quality),
            destination: destination)
    }

    /// The live recorder's status, or nil when none serves `directory`.
    ///
    /// - Throws: ``ControlError`` when the recorder answered with an error or the connection broke.
    public static func status(directory: String) throws -> ControlReply.Status? {
        switch try exchange(directory: directory, ControlRequest(.status), descriptor: nil) {
        case nil: return nil
        case .status(let status): return status
        case .some(let other): throw ControlError.badReply(excerpt: "\(other)")
        }
    }

    /// Sends an export request: a path goes in the request (made absolute), a descriptor along with it.
    private static func export(directory: String, _ request: ControlRequest, destination: ExportDestination?)
        throws -> ControlReply.Export?
    {
        var request = request
        var descriptor: FileDescriptor?
        switch destination {
        case .path(let path):
            request.path = URL(fileURLWithPath: path).standardizedFileURL.path
        case .fileDescriptor(let fd, _):
            descriptor = fd
        case nil:
            break
        }
        switch try exchange(directory: directory, request, descriptor: descriptor) {
        case nil: return nil
        case .exported(let export): return export
        case .some(let other): throw ControlError.badReply(excerpt: "\(other)")
        }
    }

    /// One request and its reply; nil when no recorder serves `directory`.
    ///
    /// - Throws: ``ControlError/refused(_:message:)`` for a failure reply, other ``ControlError``s when the
    ///   connection broke or the reply is not one.
    private static func exchange(directory: String, _ request: ControlRequest, descriptor: FileDescriptor?)
        throws -> ControlReply?
    {
        let path = directory + "/" + RecorderControl.socketName
        let connected = rewind_unix_connect(path)
        guard connected >= 0 else {
            // No recorder: no socket, one left by a recorder that is gone, or a path too long for a socket (the
            // recorder could not serve it either, and said so when it started).
            if -connected == ENOENT || -connected == ECONNREFUSED || -connected == ENAMETOOLONG { return nil }
            throw ControlError.socket(action: "connect to", path: path, Errno(rawValue: -connected))
        }
        let socket = OwnedFileDescriptor(taking: FileDescriptor(rawValue: connected))
        try ControlMessage.send(try request.encodedLine(), to: socket.descriptor, descriptor: descriptor)
        // A descriptor sent back with the reply is closed with the message.
        let received = try ControlMessage.receive(from: socket.descriptor)
        let reply = try ControlReply(line: received.bytes)
        if case .failure(let failure) = reply {
            throw ControlError.refused(failure.reason, message: failure.message)
        }
        return reply
    }
}
