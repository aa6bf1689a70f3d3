import Foundation
import RewindCore
import RewindMedia

/// A request to a live recorder's control socket, as both ends see it: one line of JSON on the wire.
///
///     {"command": "save", "last_ns": 5000000000, "path": "/abs/clip.y4m"}      path omitted: DIR/exports/
///     {"command": "save", "format": "y4m"}                                     + a descriptor sent with it
///     {"command": "clip", "from": "12.5s", "to": "2026-11-30T14:03:09Z", "path": "/abs/clip.mkv"}
///     {"command": "status"}
///
/// Every request may name the `"stream"` it is about; a recorder refuses one that is not its own.
public struct ControlRequest: Sendable, Hashable, Codable {
    /// What the request asks for.
    public enum Command: Sendable, Hashable {
        /// Save the last `lastNanoseconds` (`"last_ns"`; nil: the recorder's whole window).
        case save(lastNanoseconds: Int64?)
        /// Export the frames in [`from`, `to`), times as on the command line (`12.5s`, `1500ms`, ISO-8601 wall
        /// time), resolved by the recorder.
        case clip(from: String, to: String)
        /// The recorder's counters and what it holds in memory.
        case status

        /// The `"command"` value on the wire.
        public var name: String {
            switch self {
            case .save: "save"
            case .clip: "clip"
            case .status: "status"
            }
        }
    }

    /// What the request asks for: `"command"` on the wire, with `"last_ns"` for a save and `"from"` and `"to"`
    /// for a clip.
    public var command: Command
    /// The stream the request is about (`"stream"`); nil: the recorder's own.
    public var stream: String?
    /// An absolute path to export to (`"path"`; save and clip); nil: a descriptor sent with the request, or
    /// `DIR/exports/`.
    public var path: String?
    /// The export format (`"format"`, its file extension: `y4m`, `mkv` or `mp4`; save and clip); nil: the path's
    /// extension names it, or the recorder's default.
    public var format: ExportFormat?
    /// How an `mp4` export is encoded (`"quality"`: `fast`, `balanced` or `lossless`); nil: `fast`.
    public var quality: ExportQuality?

    /// Makes a request.
    ///
    /// - Parameters:
    ///   - command: what to ask for.
    ///   - stream: the stream it is about; nil: whichever the recorder records.
    ///   - path: an absolute path to export to; nil: a descriptor sent with the request, or `DIR/exports/`.
    ///   - format: the export format; nil: from the path's extension, or the recorder's default.
    ///   - quality: how an `mp4` export is encoded; nil: `fast`.
    public init(
        _ command: Command, stream: String? = nil, path: String? = nil, format: ExportFormat? = nil,
        quality: ExportQuality? = nil
    ) {
        self.command = command
        self.stream = stream
        self.path = path
        self.format = format
        self.quality = quality
    }

    enum CodingKeys: String, CodingKey {
        case command, stream, path, format, from, to, quality
        case lastNanoseconds = "last_ns"
    }

    /// Decodes a request.
    ///
    /// - Throws: ``ControlError`` naming the field that is missing or malformed (`badField`) or the unknown
    ///   command; `DecodingError` when the message is not a JSON object.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func field<T: Decodable>(_ type: T.Type, _ key: CodingKeys, _ detail: String) throws -> T? {
            do {
                return try container.decodeIfPresent(type, forKey: key)
            } catch {
                throw ControlError.badField(key.stringValue, detail: detail)
            }
        }
        let name = try? container.decodeIfPresent(String.self, forKey: .command)
        switch name {
        case "save":
            command = .save(
                lastNanoseconds: try field(
                    Int64.self, .lastNanoseconds, "last_ns must be a whole number of nanoseconds above 0"))
        case "clip":
            func time(_ key: CodingKeys) throws -> String {
                let detail = "a clip needs '\(key.stringValue)': a time such as 12.5s, 1500ms or 2026-11-30T14:03:05Z"
                guard let text = try field(String.self, key, detail) else {
                    throw ControlError.badField(key.stringValue, detail: detail)
                }
                return text
            }
            command = .clip(from: try time(.from), to: try time(.to))
        case "status":
            command = .status
        default:
            throw ControlError.unknownCommand(name)
        }
        stream = try field(String.self, .stream, "stream must be a stream's name")
        path = try field(String.self, .path, "path must be an absolute path")
        format = nil
        if let extensionName = try field(String.self, .format, "format must be y4m, mkv or mp4") {
            guard let named = ExportFormat(path: "x." + extensionName) else {
                throw ControlError.badField("format", detail: "unknown format '\(extensionName)': y4m, mkv or mp4")
            }
            format = named
        }
        quality = nil
        if let name = try field(String.self, .quality, "quality must be fast, balanced or lossless") {
            guard let named = ExportQuality(rawValue: name) else {
                throw ControlError.badField("quality", detail: "unknown quality '\(name)': fast, balanced or lossless")
            }
            quality = named
        }
    }

    /// Encodes the request with the keys above: `"command"`, then `"last_ns"` or `"from"` and `"to"` for the
    /// command, then `"stream"`, `"path"`, `"format"` (its file extension) and `"quality"`; absent values are left
    /// out.
    ///
    /// - Throws: the encoder's error.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(command.name, forKey: .command)
        switch command {
        case .save(let last):
            try container.encodeIfPresent(last, forKey: .lastNanoseconds)
        case .clip(let from, let to):
            try container.encode(from, forKey: .from)
            try container.encode(to, forKey: .to)
        case .status:
            break
        }
        try container.encodeIfPresent(stream, forKey: .stream)
        try container.encodeIfPresent(path, forKey: .path)
        try container.encodeIfPresent(format?.fileExtension, forKey: .format)
        try container.encodeIfPresent(quality?.rawValue, forKey: .quality)
    }
}

/// A live recorder's answer to a ``ControlRequest``: one line of JSON, `"ok"` saying which kind.
///
///     {"ok": true, "path": …, "format": "mkv", "frames": 300, "filled_frames": 0, "bytes": …,
///      "first_pts_ns": …, "last_pts_ns": …}                                   a save or clip (path null: a descriptor)
///     {"ok": true, "frames_accepted": …, "frames_durable": …, "drops": {…}, "window_ns": …, "memory_frames": …,
///      "memory_bytes": …, "memory_budget_bytes": …, "memory_first_pts_ns": …, "memory_last_pts_ns": …,
///      "pressure": "normal", "pressure_changes": 0, "stream": "camera", "layout": "nv12 …"}          a status
///     {"ok": false, "error": "…", "reason": "bad_range"}                       any failure
public enum ControlReply: Sendable, Hashable, Codable {
    /// What a save or clip wrote.
    case exported(Export)
    /// The recorder's status.
    case status(Status)
    /// The request was refused or failed.
    case failure(Failure)

    /// What a save or clip wrote: the recorder's ``ExportSummary``, sent as `"format"` (the file extension),
    /// `"path"`, `"frames"`, `"filled_frames"`, `"bytes"`, `"first_pts_ns"` and `"last_pts_ns"` (`null` when absent).
    public typealias Export = ExportSummary

    /// A live recorder's counters and what it holds in memory.
    public struct Status: Sendable, Hashable {
        /// The name of the stream the recorder records (`"stream"`).
        public var stream: String
        /// The stream's frame layout as text (`"layout"`, such as `nv12 1920x1080`).
        public var layout: String
        /// Frames accepted into the ring since the recorder started (`"frames_accepted"`).
        public var framesAccepted: UInt64
        /// Frames durable on disk, synced to the segment store (`"frames_durable"`; 0 with spill `off`).
        public var framesDurable: Int
        /// Frames lost, by reason (`"drops"`: an object keyed by the reason's raw value, such as `"spill behind"`).
        public var drops: [LossReason: Int]
        /// The ring's time window, pts nanoseconds (`"window_ns"`).
        public var windowNanoseconds: Int64
        /// Frames in the ring now (`"memory_frames"`).
        public var memoryFrames: Int
        /// Bytes of slabs the ring's pool has mapped now, frames rounded up to pages (`"memory_bytes"`).
        public var memoryBytes: Int
        /// The recorder's memory budget in force, bytes: the ring's and the compressor's buffer's
        /// (`"memory_budget_bytes"`; lowered under memory pressure).
        public var memoryBudgetBytes: Int
        /// The pts of the oldest frame in memory, nanoseconds on the stream clock (`"memory_first_pts_ns"`); nil
        /// (`null`) when the ring is empty.
        public var memoryFirstPTSNanoseconds: Int64?
        /// The pts of the newest frame in memory, nanoseconds on the stream clock (`"memory_last_pts_ns"`); nil
        /// (`null`) when the ring is empty.
        public var memoryLastPTSNanoseconds: Int64?
        /// The memory pressure in force (`"pressure"`: `normal`, `warning` or `critical`; `normal` when a recorder
        /// that predates the field does not send it).
        public var pressure: MemoryPressure
        /// How many times the pressure level changed since the recorder started (`"pressure_changes"`).
        public var pressureChanges: Int

        /// Makes a status reply from its fields; each parameter is the property of the same name.
        public init(
            stream: String, layout: String, framesAccepted: UInt64, framesDurable: Int, drops: [LossReason: Int],
            windowNanoseconds: Int64, memoryFrames: Int, memoryBytes: Int, memoryBudgetBytes: Int,
            memoryFirstPTSNanoseconds: Int64?, memoryLastPTSNanoseconds: Int64?, pressure: MemoryPressure = .normal,
            pressureChanges: Int = 0
        ) {
            self.stream = stream
            self.layout = layout
            self.framesAccepted = framesAccepted
            self.framesDurable = framesDurable
            self.drops = drops
            self.windowNanoseconds = windowNanoseconds
            self.memoryFrames = memoryFrames
            self.memoryBytes = memoryBytes
            self.memoryBudgetBytes = memoryBudgetBytes
            self.memoryFirstPTSNanoseconds = memoryFirstPTSNanoseconds
            self.memoryLastPTSNanoseconds = memoryLastPTSNanoseconds
            self.pressure = pressure
            self.pressureChanges = pressureChanges
        }
    }

    /// Why the recorder refused or failed a request: its reason code and its own message.
    public struct Failure: Sendable, Hashable {
        /// The reason code (`"reason"`: `bad_request`, `bad_range`, `empty` or `failed`); clients branch on it.
        public var reason: ControlError.Refusal
        /// The recorder's message, a sentence for people (`"error"`).
        public var message: String

        /// Makes a failure reply.
        ///
        /// - Parameters:
        ///   - reason: the reason code sent as `"reason"`.
        ///   - message: the sentence sent as `"error"`.
        public init(reason: ControlError.Refusal, message: String) {
            self.reason = reason
            self.message = message
        }

        /// The failure a recorder reports for `error`.
        public init(_ error: any Error) {
            self.init(reason: ControlError.refusal(for: error), message: "\(error)")
        }
    }

    enum CodingKeys: String, CodingKey {
        case ok, error, reason
        case path, format, frames, bytes
        case filledFrames = "filled_frames"
        case firstPTS = "first_pts_ns"
        case lastPTS = "last_pts_ns"
        case stream, layout, drops
        case framesAccepted = "frames_accepted"
        case framesDurable = "frames_durable"
        case window = "window_ns"
        case memoryFrames = "memory_frames"
        case memoryBytes = "memory_bytes"
        case memoryBudget = "memory_budget_bytes"
        case memoryFirstPTS = "memory_first_pts_ns"
        case memoryLastPTS = "memory_last_pts_ns"
        case pressure
        case pressureChanges = "pressure_changes"
    }

    /// Decodes a reply: `"ok": false` is a failure (an unknown reason reads as ``ControlError/Refusal/failed``),
    /// a successful one with `"frames_accepted"` a status, any other successful one an export.
    ///
    /// - Throws: `DecodingError` when a field is missing or of the wrong type.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard try container.decode(Bool.self, forKey: .ok) else {
            let reason = try container.decodeIfPresent(String.self, forKey: .reason)
            self = .failure(
                Failure(
                    reason: reason.flatMap(ControlError.Refusal.init(rawValue:)) ?? .failed,
                    message: try container.decodeIfPresent(String.self, forKey: .error)
                        ?? "the recorder refused the request"))
            return
        }
        if container.contains(.framesAccepted) {
            let drops = try container.decode([String: Int].self, forKey: .drops)
            self = .status(
                Status(
                    stream: try container.decode(String.self, forKey: .stream),
                    layout: try container.decode(String.self, forKey: .layout),
                    framesAccepted: try container.decode(UInt64.self, forKey: .framesAccepted),
                    framesDurable: try container.decode(Int.self, forKey: .framesDurable),
                    drops: Dictionary(drops.map { (LossReason(stored: $0.key), $0.value) }, uniquingKeysWith: +),
                    windowNanoseconds: try container.decode(Int64.self, forKey: .window),
                    memoryFrames: try container.decode(Int.self, forKey: .memoryFrames),
                    memoryBytes: try container.decode(Int.self, forKey: .memoryBytes),
                    memoryBudgetBytes: try container.decode(Int.self, forKey: .memoryBudget),
                    memoryFirstPTSNanoseconds: try container.decodeIfPresent(Int64.self, forKey: .memoryFirstPTS),
                    memoryLastPTSNanoseconds: try container.decodeIfPresent(Int64.self, forKey: .memoryLastPTS),
                    pressure: try container.decodeIfPresent(String.self, forKey: .pressure)
                        .flatMap { MemoryPressure(name: $0) } ?? .normal,
                    pressureChanges: try container.decodeIfPresent(Int.self, forKey: .pressureChanges) ?? 0))
            return
        }
        let formatName = try container.decode(String.self, forKey: .format)
        guard let format = ExportFormat(path: "x." + formatName) else {
            throw DecodingError.dataCorruptedError(
                forKey: .format, in: container, debugDescription: "unknown format '\(formatName)'")
        }
        self = .exported(
            Export(
                format: format, path: try container.decodeIfPresent(String.self, forKey: .path),
                frames: try container.decode(Int.self, forKey: .frames),
                filledFrames: try container.decode(Int.self, forKey: .filledFrames),
                bytes: try container.decode(Int64.self, forKey: .bytes),
                firstPTSNanoseconds: try container.decodeIfPresent(Int64.self, forKey: .firstPTS),
                lastPTSNanoseconds: try container.decodeIfPresent(Int64.self, forKey: .lastPTS)))
    }

    /// Encodes a reply with the keys above; absent pts and paths are `null`, as the protocol has always sent them.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .exported(let export):
            try container.encode(true, forKey: .ok)
            try container.encode(export.format.fileExtension, forKey: .format)
            try container.encode(export.path, forKey: .path)
            try container.encode(export.frames, forKey: .frames)
            try container.encode(export.filledFrames, forKey: .filledFrames)
            try container.encode(export.bytes, forKey: .bytes)
            try container.encode(export.firstPTSNanoseconds, forKey: .firstPTS)
            try container.encode(export.lastPTSNanoseconds, forKey: .lastPTS)
        case .status(let status):
            try container.encode(true, forKey: .ok)
            try container.encode(status.stream, forKey: .stream)
            try container.encode(status.layout, forKey: .layout)
            try container.encode(status.framesAccepted, forKey: .framesAccepted)
            try container.encode(status.framesDurable, forKey: .framesDurable)
            try container.encode(status.drops.keyedByRawValue, forKey: .drops)
            try container.encode(status.windowNanoseconds, forKey: .window)
            try container.encode(status.memoryFrames, forKey: .memoryFrames)
            try container.encode(status.memoryBytes, forKey: .memoryBytes)
            try container.encode(status.memoryBudgetBytes, forKey: .memoryBudget)
            try container.encode(status.memoryFirstPTSNanoseconds, forKey: .memoryFirstPTS)
            try container.encode(status.memoryLastPTSNanoseconds, forKey: .memoryLastPTS)
            try container.encode(status.pressure.name, forKey: .pressure)
            try container.encode(status.pressureChanges, forKey: .pressureChanges)
        case .failure(let failure):
            try container.encode(false, forKey: .ok)
            try container.encode(failure.message, forKey: .error)
            try container.encode(failure.reason.rawValue, forKey: .reason)
        }
    }
}

extension ControlRequest {
    /// The request as one line of JSON (keys sorted, no newline).
    public func encodedLine() throws -> [UInt8] { try ControlCoding.encode(self) }

    /// Decodes one line of JSON (without its newline).
    ///
    /// - Throws: ``ControlError``: `notJSON` when the line is not one JSON object, `badField` or `unknownCommand`
    ///   when it is not a request.
    public init(line: some Collection<UInt8>) throws(ControlError) {
        do {
            self = try JSONDecoder().decode(ControlRequest.self, from: Data(line))
        } catch let error as ControlError {
            throw error
        } catch {
            throw ControlError.notJSON(excerpt: String(decoding: line.prefix(200), as: UTF8.self))
        }
    }
}

extension ControlReply {
    /// The reply as one line of JSON (keys sorted, no newline).
    public func encodedLine() throws -> [UInt8] { try ControlCoding.encode(self) }

    /// Decodes one line of JSON (without its newline).
    ///
    /// - Throws: ``ControlError/badReply(excerpt:)`` when the line is not a reply.
    public init(line: some Collection<UInt8>) throws(ControlError) {
        do {
            self = try JSONDecoder().decode(ControlReply.self, from: Data(line))
        } catch {
            throw ControlError.badReply(excerpt: String(decoding: line.prefix(200), as: UTF8.self))
        }
    }
}

/// The JSON settings both ends share.
enum ControlCoding {
    static func encode(_ value: some Encodable) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return Array(try encoder.encode(value))
    }
}
