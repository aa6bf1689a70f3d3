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

/// The client side of a live recorder's control socket (what `rewind save` uses).
public enum ControlClient {
    /// Asks the live recorder of `directory` to save the last `duration`.
    ///
    /// - Parameters:
    ///   - destination: a path (made absolute here) or a descriptor to write into (sent with the request), or nil
    ///     for `DIR/exports/`.
    ///   - format: needed for a descriptor; a path's extension names its own.
    /// - Returns: the recorder's reply, or nil when no recorder serves `directory` (no socket, or a stale one).
    /// - Throws: ``ControlError`` when the recorder answered with an error or the connection broke.
    public static func save(
        directory: String, last duration: Int64, to destination: ExportDestination?, format: ExportFormat?,
        stream: String? = nil
    ) throws -> [String: Any]? {
        var request: [String: Any] = ["command": "save", "last_ns": duration]
        if let stream { request["stream"] = stream }
        if let format { request["format"] = format.fileExtension }
        return try exchange(directory: directory, request, destination: destination)
    }

    /// Sends an export request: a path goes in the request (made absolute), a descriptor along with it.
    private static func exchange(directory: String, _ request: [String: Any], destination: ExportDestination?)
        throws -> [String: Any]?
    {
        var request = request
        var descriptor: Int32 = -1
        switch destination {
        case .path(let path):
            request["path"] = URL(fileURLWithPath: path).standardizedFileURL.path
        case .fileDescriptor(let fd, _):
            descriptor = fd
        case nil:
            break
        }
        return try exchange(directory: directory, request, descriptor: descriptor)
    }

    /// Asks the live recorder of `directory` for the frames in [`from`, `to`), times as on the command line.
    ///
    /// - Returns: the recorder's reply, or nil when no recorder serves `directory`.
    /// - Throws: ``ControlError`` when the recorder answered with an error (an empty range among them).
    public static func clip(
        directory: String, from: String, to: String, destination: ExportDestination?, format: ExportFormat?,
        stream: String? = nil
    ) throws -> [String: Any]? {
        var request: [String: Any] = ["command": "clip", "from": from, "to": to]
        if let stream { request["stream"] = stream }
        if let format { request["format"] = format.fileExtension }
        return try exchange(directory: directory, request, destination: destination)
    }

    /// The live recorder's status, or nil when none serves `directory`.
    public static func status(directory: String) throws -> [String: Any]? {
        try exchange(directory: directory, ["command": "status"], descriptor: -1)
    }

    private static func exchange(directory: String, _ request: [String: Any], descriptor: Int32) throws
        -> [String: Any]?
    {
        let path = directory + "/" + RecorderControl.socketName
        let socket = rewind_unix_connect(path)
        guard socket >= 0 else {
            // No recorder: no socket, one left by a recorder that is gone, or a path too long for a socket (the
            // recorder could not serve it either, and said so when it started).
            if -socket == ENOENT || -socket == ECONNREFUSED || -socket == ENAMETOOLONG { return nil }
            throw ControlError.socket(action: "connect to", path: path, Errno(rawValue: -socket))
        }
        defer { close(socket) }
        try ControlMessage.send(request, to: socket, descriptor: descriptor)
        let (reply, extra) = try ControlMessage.receive(from: socket)
        if extra >= 0 { close(extra) }
        guard reply["ok"] as? Bool == true else {
            throw ControlError.refused(
                (reply["reason"] as? String).flatMap(ControlError.Refusal.init(rawValue:)) ?? .failed,
                message: (reply["error"] as? String) ?? "the recorder refused the request")
        }
        return reply
    }
}
