import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindTesting
import SegmentStore

/// Something that happens to a soak run at a point of stream time: a memory-pressure change, a thermal state
/// (the camera's frame rate falls), or a disk that fills up, slows down or recovers.
///
/// Written `TIME:KEY=VALUE`, e.g. `30s:pressure=critical`; a list separates events with commas.
public struct SoakEvent: Sendable, Hashable, CustomStringConvertible {
    /// What changes.
    public enum Action: Sendable, Hashable {
        /// The operating system reports memory pressure: the recorder's budget shrinks (or recovers) at once.
        case pressure(MemoryPressure)
        /// The device's thermal state: the camera delivers fewer frames (see ``ThermalState/frameDivisor``).
        case thermal(ThermalState)
        /// The disk under the store fills up, slows down, or is fine again.
        case disk(DiskCondition)
    }

    /// Stream time (pts) at which the event happens, nanoseconds: it applies before the first frame at or after it.
    public var at: Int64
    public var action: Action

    public init(at: Int64, action: Action) {
        precondition(at >= 0, "an event's time must not be negative")
        self.at = at
        self.action = action
    }

    /// `TIME:KEY=VALUE`, with the time in seconds (`30s`, `1.5s`).
    public var description: String { "\(Self.formatTime(at)):\(action)" }

    /// Seconds without trailing zeros: `30s`, `1.5s`, `0.000000001s`.
    static func formatTime(_ nanoseconds: Int64) -> String {
        var fraction = String(nanoseconds % 1_000_000_000)
        fraction = String(repeating: "0", count: 9 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return "\(nanoseconds / 1_000_000_000)" + (fraction.isEmpty ? "" : ".\(fraction)") + "s"
    }
}

extension SoakEvent.Action: CustomStringConvertible {
    /// `KEY=VALUE`.
    public var description: String {
        switch self {
        case .pressure(let level): "pressure=\(level.name)"
        case .thermal(let state): "thermal=\(state.rawValue)"
        case .disk(let condition): "disk=\(condition.rawValue)"
        }
    }
}

/// A device's thermal state, as mobile operating systems report it.
public enum ThermalState: String, Sendable, Hashable, CaseIterable {
    case nominal
    /// Slightly warm: no action is needed yet, the camera keeps its rate.
    case fair
    /// The camera halves its frame rate (60 → 30 FPS).
    case serious
    /// The camera quarters its frame rate (60 → 15 FPS).
    case critical

    /// The camera delivers one frame in this many; the others are never captured (their pts stay on the camera
    /// clock, so the store records the hole as an `input interval` gap).
    public var frameDivisor: Int {
        switch self {
        case .nominal, .fair: 1
        case .serious: 2
        case .critical: 4
        }
    }
}

/// The state of the disk under a soak's store.
public enum DiskCondition: String, Sendable, Hashable, CaseIterable {
    /// Every write fails with `ENOSPC`.
    case full
    /// Every write takes ``SoakEvent/slowDiskWriteDelay`` longer.
    case slow
    /// Writes work at full speed again.
    case ok
}

extension SoakEvent {
    /// How much longer each write takes while the disk is `slow`: 25 ms, so at most 40 frame records a second reach
    /// the disk, fewer than a 60 FPS camera delivers.
    public static let slowDiskWriteDelay: Duration = .milliseconds(25)

    /// Parses a comma-separated list such as `30s:pressure=critical,60s:thermal=serious,90s:disk=full`.
    ///
    /// Spaces around an event are ignored; an empty list (or only spaces) is no events. Events are returned sorted
    /// by time; events at the same time keep their order.
    ///
    /// - Parameters:
    ///   - text: the list.
    ///   - duration: when given, every event must happen before this much stream time (else it could never
    ///     happen).
    /// - Returns: the events in the order they will happen.
    /// - Throws: ``SoakEventError`` naming the first bad item and what was expected.
    /// - Complexity: O(n log n) in the number of events.
    public static func parseList(_ text: String, duration: Duration? = nil) throws(SoakEventError) -> [SoakEvent] {
        let end = duration?.nanosecondsClamped
        guard !text.allSatisfy({ $0 == " " }) else { return [] }
        var events: [SoakEvent] = []
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let event = try parse(item.trimmingSpaces)
            if let end, event.at >= end {
                throw SoakEventError(
                    item: String(item.trimmingSpaces),
                    message: "it is at or after the end of the run (\(formatTime(end))), so it would never happen")
            }
            events.append(event)
        }
        return events.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }.map(\.element)
    }

    /// Parses one `TIME:KEY=VALUE` event.
    ///
    /// - Throws: ``SoakEventError`` naming the item and what was wrong with it.
    public static func parse(_ item: Substring) throws(SoakEventError) -> SoakEvent {
        let text = String(item)
        func error(_ message: String) -> SoakEventError { SoakEventError(item: text, message: message) }
        let shape = "an event is TIME:KEY=VALUE, e.g. 30s:pressure=critical"
        guard !item.isEmpty else { throw error("an empty event (two commas in a row, or one at an end)") }
        guard let colon = item.firstIndex(of: ":") else { throw error(shape) }
        let time: Int64
        do {
            time = try Values.duration(String(item[..<colon])).nanosecondsClamped
        } catch {
            throw SoakEventError(item: text, message: "\(error)")
        }
        let assignment = item[item.index(after: colon)...].split(separator: "=", omittingEmptySubsequences: false)
        guard assignment.count == 2 else { throw error(shape) }
        let (key, value) = (String(assignment[0]), String(assignment[1]))
        func choice<T>(_ choices: [(String, T)]) throws(SoakEventError) -> T {
            guard let match = choices.first(where: { $0.0 == value }) else {
                throw error("\(key) must be \(Self.list(choices.map(\.0))), not '\(value)'")
            }
            return match.1
        }
        switch key {
        case "pressure":
            return SoakEvent(at: time, action: .pressure(try choice(MemoryPressure.allCases.map { ($0.name, $0) })))
        case "thermal":
            return SoakEvent(at: time, action: .thermal(try choice(ThermalState.allCases.map { ($0.rawValue, $0) })))
        case "disk":
            return SoakEvent(at: time, action: .disk(try choice(DiskCondition.allCases.map { ($0.rawValue, $0) })))
        default:
            throw error("unknown key '\(key)' (pressure, thermal or disk)")
        }
    }

    /// `a, b or c`.
    private static func list(_ words: [String]) -> String {
        words.count < 2 ? words.joined() : words.dropLast().joined(separator: ", ") + " or " + words.last!
    }
}

/// An event list that could not be understood: which item, and what was wrong with it.
public struct SoakEventError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The offending item, as written (without surrounding spaces).
    public let item: String
    public let message: String

    public var description: String { "'\(item)': \(message)" }
}

extension Substring {
    fileprivate var trimmingSpaces: Substring {
        var text = self
        while text.first == " " { text.removeFirst() }
        while text.last == " " { text.removeLast() }
        return text
    }
}
