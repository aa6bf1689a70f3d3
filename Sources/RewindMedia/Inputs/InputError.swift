import RewindCore
import RewindSystem

/// Bad or unreadable input: which input, where in it, in which frame, and what was wrong.
///
/// Frames read before the error stay valid; the reader is not usable after it.
public struct InputError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong with the input.
    public enum Problem: Sendable, Hashable {
        /// The input could not be opened (it does not exist, or may not be read).
        case cannotOpen(Errno)
        /// A read failed.
        case readFailed(Errno)
        /// The input holds no byte at all.
        case empty
        /// A frame's payload ends early: `gotBytes` of `expectedBytes`.
        case truncated(expectedBytes: Int, gotBytes: Int)
        /// The input ends inside a line that started at `lineStart`.
        case unterminatedLine(lineStart: Int64)
        /// A line is longer than `maximumLength` bytes.
        case lineTooLong(maximumLength: Int)
        /// A frame does not start with `FRAME`; `found` is an excerpt of what is there.
        case badFrameMarker(found: String)
        /// The header's colour space (`C444`) is not one this reader converts.
        case unsupportedColorSpace(String)
        /// The header says the frames are interlaced (`It`, `Ib`, `Im`).
        case interlaced(String)
        /// Any other malformed header or frame field; the text says which and why.
        case malformed(String)
    }

    /// The input's name as the user gave it (a path, or `stdin`).
    public var input: String
    /// The byte offset from the start of the input where the problem was found; nil when no byte is at fault
    /// (for example, the file could not be opened).
    public var byteOffset: Int64?
    /// The frame (0-based) being read when the problem was found; nil in the header or before any byte.
    public var frame: Int64?
    /// What was wrong.
    public var problem: Problem

    /// Makes an error about one input.
    ///
    /// - Parameters:
    ///   - input: the input's name as the user gave it (a path, or `stdin`).
    ///   - byteOffset: the offset in bytes from the start of the input where the problem was found, or nil.
    ///   - frame: the 0-based frame being read, or nil in the header or before any byte.
    ///   - problem: what was wrong.
    public init(input: String, byteOffset: Int64?, frame: Int64? = nil, problem: Problem) {
        self.input = input
        self.byteOffset = byteOffset
        self.frame = frame
        self.problem = problem
    }

    /// Whether the bytes are at fault (malformed or truncated data), rather than opening or reading them.
    public var isMalformed: Bool {
        switch problem {
        case .cannotOpen, .readFailed: false
        default: true
        }
    }

    /// What was wrong, without the input's name and offset.
    public var message: String {
        let framePrefix = frame.map { "frame \($0): " } ?? ""
        switch problem {
        case .cannotOpen(let errno):
            return "cannot open for reading: \(errno)"
        case .readFailed(let errno):
            return framePrefix + "read failed: \(errno)"
        case .empty:
            return "input is empty: expected a YUV4MPEG2 header ('YUV4MPEG2 W… H… F…')"
        case .truncated(let expected, let got):
            return "\(frame.map { "frame \($0)" } ?? "a frame") is truncated: expected \(expected) bytes of payload, "
                + "got \(got)"
        case .unterminatedLine(let start):
            let what = "input ends inside a line that started at byte \(start) (no terminating newline)"
            return frame.map { "frame \($0) is truncated: \(what)" } ?? what
        case .lineTooLong(let maximumLength):
            return framePrefix + "line is longer than \(maximumLength) bytes without a newline"
        case .badFrameMarker(let found):
            return "bad FRAME marker before frame \(frame ?? 0): expected 'FRAME', found '\(Self.visible(found))'"
        case .unsupportedColorSpace(let token):
            return "unsupported colour space '\(Self.visible(token))': supported are \(Y4MHeader.supportedColorSpaces)"
        case .interlaced(let token):
            return
                "interlaced input ('\(Self.visible(token))') is not supported: only progressive ('Ip') frames are read"
        case .malformed(let detail):
            return framePrefix + detail
        }
    }

    /// `text` with control characters spelled out (`C420jpeg\r` for a header line ending in CR LF), so a message
    /// shows what the input holds.
    static func visible(_ text: String) -> String {
        text.unicodeScalars.map { scalar in
            switch scalar {
            case "\r": "\\r"
            case "\t": "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F: "\\u{\(String(scalar.value, radix: 16))}"
            default: String(scalar)
            }
        }.joined()
    }

    /// The input's name, the byte offset when known, and the message, such as
    /// `clip.y4m: at byte 6220854: frame 2 is truncated: …`.
    public var description: String {
        if let byteOffset {
            return "\(input): at byte \(byteOffset): \(message)"
        }
        return "\(input): \(message)"
    }
}
