import Foundation
import Glibc
import RewindControl
import RewindCore
import RewindMedia
import RewindSystem
import RewindTesting
import Testing

/// The wire format: the typed request and reply encode to the bytes the line-JSON protocol has always used.
@Suite struct ControlProtocolTests {
    /// What the protocol's first version sent for the same message: a dictionary written by JSONSerialization with
    /// sorted keys.
    func oldBytes(_ object: [String: Any]) throws -> [UInt8] {
        Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    @Test func requestsEncodeToTheOldKeysAndDecodeBack() throws {
        let cases: [(ControlRequest, [String: Any])] = [
            (
                ControlRequest(.save(lastNanoseconds: 5_000_000_000), path: "/abs/clip.y4m"),
                ["command": "save", "last_ns": 5_000_000_000, "path": "/abs/clip.y4m"]
            ),
            (
                ControlRequest(.save(lastNanoseconds: nil), stream: "camera", format: .matroska),
                ["command": "save", "stream": "camera", "format": "mkv"]
            ),
            (
                ControlRequest(.clip(from: "12.5s", to: "2026-11-30T14:03:09Z"), path: "/abs/clip.mkv", format: .mp4),
                [
                    "command": "clip", "from": "12.5s", "to": "2026-11-30T14:03:09Z", "path": "/abs/clip.mkv",
                    "format": "mp4",
                ]
            ),
            (ControlRequest(.status), ["command": "status"]),
        ]
        for (request, old) in cases {
            let line = try request.encodedLine()
            #expect(line == (try oldBytes(old)), "\(String(decoding: line, as: UTF8.self))")
            #expect(try ControlRequest(line: line) == request)
        }
    }

    @Test func repliesEncodeToTheOldKeysAndDecodeBack() throws {
        let export = ControlReply.exported(
            .init(
                format: .matroska, path: "/abs/clip.mkv", frames: 300, filledFrames: 2, bytes: 1_234_567,
                firstPTSNanoseconds: 1_000_000_000, lastPTSNanoseconds: 5_983_333_333))
        let toDescriptor = ControlReply.exported(
            .init(
                format: .y4m, path: nil, frames: 0, filledFrames: 0, bytes: 0, firstPTSNanoseconds: nil,
                lastPTSNanoseconds: nil))
        let status = ControlReply.status(
            .init(
                stream: "camera", layout: "nv12 160x96", framesAccepted: 180, framesDurable: 120,
                drops: [.memoryBudget: 3, .spillBehind: 1], windowNanoseconds: 2_000_000_000, memoryFrames: 121,
                memoryBytes: 2_764_800, memoryBudgetBytes: 67_108_864, memoryFirstPTSNanoseconds: 983_333_333,
                memoryLastPTSNanoseconds: 2_983_333_333, pressure: .warning, pressureChanges: 2))
        let failure = ControlReply.failure(.init(reason: .badRange, message: "the range [2.000s, 1.000s) is empty"))
        let cases: [(ControlReply, [String: Any])] = [
            (
                export,
                [
                    "ok": true, "format": "mkv", "path": "/abs/clip.mkv", "frames": 300, "filled_frames": 2,
                    "bytes": 1_234_567, "first_pts_ns": 1_000_000_000, "last_pts_ns": 5_983_333_333,
                ]
            ),
            (
                toDescriptor,
                [
                    "ok": true, "format": "y4m", "path": NSNull(), "frames": 0, "filled_frames": 0, "bytes": 0,
                    "first_pts_ns": NSNull(), "last_pts_ns": NSNull(),
                ]
            ),
            (
                status,
                [
                    "ok": true, "stream": "camera", "layout": "nv12 160x96", "frames_accepted": 180,
                    "frames_durable": 120, "drops": ["memory budget": 3, "spill behind": 1],
                    "window_ns": 2_000_000_000, "memory_frames": 121, "memory_bytes": 2_764_800,
                    "memory_budget_bytes": 67_108_864, "memory_first_pts_ns": 983_333_333,
                    "memory_last_pts_ns": 2_983_333_333, "pressure": "warning", "pressure_changes": 2,
                    "streams": [] as [Any],
                ]
            ),
            (
                failure,
                ["ok": false, "error": "the range [2.000s, 1.000s) is empty", "reason": "bad_range"]
            ),
        ]
        for (reply, old) in cases {
            let line = try reply.encodedLine()
            #expect(line == (try oldBytes(old)), "\(String(decoding: line, as: UTF8.self))")
            #expect(try ControlReply(line: line) == reply)
        }
    }

    @Test func aStatusListsEveryStreamAndReadsBack() throws {
        var status = ControlReply.Status(
            stream: "front", layout: "nv12 160x96", framesAccepted: 3, framesDurable: 2, drops: [:],
            windowNanoseconds: 1, memoryFrames: 3, memoryBytes: 3, memoryBudgetBytes: 9,
            memoryFirstPTSNanoseconds: 0, memoryLastPTSNanoseconds: 2)
        status.streams = [
            ControlReply.StreamStatus(
                name: "front", layout: try FrameLayout(format: .nv12, width: 160, height: 96),
                frameDuration: FrameTime(value: 1, timescale: 30), framesAccepted: 3, framesDurable: 2,
                drops: [.spillBehind: 1], gaps: 1, memoryFrames: 3, memoryBytes: 3, memoryBudgetBytes: 9,
                memoryFirstPTSNanoseconds: 0, memoryLastPTSNanoseconds: 2,
                clock: StreamClock(offsetNanoseconds: 5, wallNanoseconds: 7), inputError: nil),
            ControlReply.StreamStatus(
                name: "rear", layout: try FrameLayout(format: .i420, width: 64, height: 48),
                frameDuration: FrameTime(value: 1, timescale: 25), framesAccepted: 0, framesDurable: 0, drops: [:],
                gaps: 0, memoryFrames: 0, memoryBytes: 0, memoryBudgetBytes: 4, memoryFirstPTSNanoseconds: nil,
                memoryLastPTSNanoseconds: nil, clock: nil, inputError: "frame 9 is truncated"),
        ]
        let line = try ControlReply.status(status).encodedLine()
        let object = try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any]
        let streams = object?["streams"] as? [[String: Any]]
        #expect(streams?.map { $0["name"] as? String } == ["front", "rear"])
        #expect(streams?.first?["drops"] as? [String: Int] == ["spill behind": 1])
        #expect(streams?.last?["input_error"] as? String == "frame 9 is truncated")
        #expect(try ControlReply(line: line) == .status(status))
    }

    @Test func aStatusWithoutPressureFieldsReadsAsNormalWithNoChanges() throws {
        let line =
            #"{"ok": true, "stream": "camera", "layout": "nv12 160x96", "frames_accepted": 1, "frames_durable": 0, "drops": {}, "window_ns": 1, "memory_frames": 1, "memory_bytes": 1, "memory_budget_bytes": 1}"#
        guard case .status(let status) = try ControlReply(line: Array(line.utf8)) else {
            Issue.record("not a status")
            return
        }
        #expect(status.pressure == .normal)
        #expect(status.pressureChanges == 0)
    }

    @Test func aFailureWithAnUnknownReasonOrNoMessageStillReadsAsAFailure() throws {
        let reply = try ControlReply(line: Array(#"{"ok": false, "reason": "tired"}"#.utf8))
        #expect(reply == .failure(.init(reason: .failed, message: "the recorder refused the request")))
        #expect(throws: ControlError.self) { try ControlReply(line: Array(#"{"ok": true, "frames": 3}"#.utf8)) }
    }

    @Test(arguments: [
        ("hello", ControlError.notJSON(excerpt: "hello")),
        ("[1, 2]", .notJSON(excerpt: "[1, 2]")),
        (#"{"command": "fly"}"#, .unknownCommand("fly")),
        (#"{"last_ns": 5}"#, .unknownCommand(nil)),
        (
            #"{"command": "clip", "from": "1s"}"#,
            .badField("to", detail: "a clip needs 'to': a time such as 12.5s, 1500ms or 2026-11-30T14:03:05Z")
        ),
        (
            #"{"command": "save", "last_ns": "5s"}"#,
            .badField("last_ns", detail: "last_ns must be a whole number of nanoseconds above 0")
        ),
        (
            #"{"command": "save", "format": "gif"}"#,
            .badField("format", detail: "unknown format 'gif': y4m, mkv or mp4")
        ),
    ])
    func malformedRequestsAreTypedErrors(line: String, error: ControlError) {
        #expect(throws: error) { try ControlRequest(line: Array(line.utf8)) }
    }
}

/// ``RecorderControl/handle(_:descriptor:)`` called directly: the control's logic without a socket.
@Suite(.timeLimit(.minutes(15))) struct RecorderControlHandleTests {
    typealias LiveRecorder = RecorderControlTests.LiveRecorder

    func failure(_ reply: ControlReply) -> ControlReply.Failure? {
        if case .failure(let failure) = reply { failure } else { nil }
    }

    @Test func statusSaveAndClip() throws {
        let live = try LiveRecorder()
        defer { try? live.finish(producing: false) }
        guard case .status(let status) = live.control.handle(ControlRequest(.status)) else {
            Issue.record("status: no status reply")
            return
        }
        #expect(status.stream == "camera" && status.framesAccepted == 180 && status.memoryFrames == 121)
        #expect(status.windowNanoseconds == 2_000_000_000)
        #expect(status.memoryLastPTSNanoseconds == 2_983_333_333)

        let path = live.directory + "/handled.mkv"
        let saved = live.control.handle(ControlRequest(.save(lastNanoseconds: 500_000_000), path: path))
        guard case .exported(let save) = saved else {
            Issue.record("save: \(saved)")
            return
        }
        #expect(save.path == path && save.frames == 30 && save.format == .matroska)
        #expect(try exportedIndexes(path, layout: live.feed.stream.layout) == Array(150..<180))

        let clipped = live.control.handle(ControlRequest(.clip(from: "500ms", to: "1s"), format: .y4m))
        guard case .exported(let clip) = clipped else {
            Issue.record("clip: \(clipped)")
            return
        }
        #expect(clip.frames == 30 && clip.format == .y4m)
        #expect(clip.path?.hasPrefix(live.directory + "/exports/save-") == true)
        #expect(live.saves.summaries.withLock { $0 }.compactMap { $0 }.count == 2)
    }

    /// A descriptor given to `handle` is written and only borrowed: it is still open afterwards.
    @Test func saveToABorrowedDescriptor() throws {
        let live = try LiveRecorder()
        defer { try? live.finish(producing: false) }
        let path = live.directory + "/borrowed.y4m"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        try #require(fd >= 0)
        defer { close(fd) }
        let reply = live.control.handle(
            ControlRequest(.save(lastNanoseconds: 250_000_000), path: "/ignored/when/a/descriptor.mkv", format: .y4m),
            descriptor: FileDescriptor(rawValue: fd))
        guard case .exported(let export) = reply else {
            Issue.record("save: \(reply)")
            return
        }
        #expect(export.path == nil && export.frames == 15)
        #expect(fcntl(fd, F_GETFD) != -1, "handle closed a descriptor it was lent")
        #expect(try exportedIndexes(path, layout: live.feed.stream.layout) == Array(165..<180))
    }

    @Test(arguments: [
        ("{not json", ControlError.Refusal.badRequest, "not a JSON object"),
        (#"{"command": "fly"}"#, .badRequest, "unknown command 'fly'"),
        (#"{"command": "save", "last_ns": 0}"#, .badRequest, "last_ns must be a whole number"),
        (#"{"command": "status", "stream": "other"}"#, .badRequest, "not 'other'"),
        (#"{"command": "clip", "from": "2s", "to": "1s"}"#, .badRange, "the range [2.000s, 1.000s) is empty"),
        (#"{"command": "clip", "from": "soon", "to": "1s"}"#, .badRequest, "from:"),
        (#"{"command": "clip", "from": "10s", "to": "11s"}"#, .empty, "nothing was written"),
    ])
    func badRequestsAreTypedFailures(line: String, reason: ControlError.Refusal, message: String) throws {
        let live = try LiveRecorder()
        defer { try? live.finish(producing: false) }
        let reply = live.control.handle(line: Array(line.utf8))
        let refused = try #require(failure(reply), "accepted: \(reply)")
        #expect(refused.reason == reason)
        #expect(refused.message.contains(message), "\(refused.message)")
        #expect(!FileManager.default.fileExists(atPath: live.directory + "/exports"))
    }
}
