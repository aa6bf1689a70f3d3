import RewindCore

/// Bad or unreadable input: where in the input it went wrong, and what was wrong.
///
/// Frames read before the error stay valid; the reader is not usable after it.
public struct InputError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The input's name as the user gave it (a path, or `stdin`).
    public var input: String
    /// The byte offset from the start of the input where the problem was found; nil when no byte is at fault
    /// (for example, the file could not be opened).
    public var byteOffset: Int64?
    /// What was wrong and, where it helps, what to do.
    public var message: String

    public init(input: String, byteOffset: Int64?, message: String) {
        self.input = input
        self.byteOffset = byteOffset
        self.message = message
    }

    public var description: String {
        if let byteOffset {
            return "\(input): at byte \(byteOffset): \(message)"
        }
        return "\(input): \(message)"
    }
}
