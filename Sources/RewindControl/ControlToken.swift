import Foundation
import RewindSystem

/// The bearer token of a recorder's TCP listener, kept in a file of mode 0600 (`DIR/token` by default).
public enum ControlToken {
    /// The fewest characters a token may have: one guessed in a few tries would guard nothing.
    public static let minimumLength = 16

    /// What makes `token` unusable, or nil: shorter than ``minimumLength``, or holding a character a header or a
    /// cookie cannot carry as it is (white space or another control character, `"`, `,`, `;`, `\\`, anything not
    /// ASCII), which would let it work in one way of giving it and silently not in another.
    static func problem(of token: String) -> String? {
        let unusable = token.unicodeScalars.first { scalar in
            !(0x21...0x7E).contains(scalar.value) || "\",;\\".unicodeScalars.contains(scalar)
        }
        if let unusable {
            return "its token holds \(String(reflecting: String(unusable))), which a header or a cookie cannot carry: "
                + "use printable ASCII without spaces, quotes, commas, semicolons or backslashes (openssl rand -hex 32)"
        }
        guard token.count >= minimumLength else {
            return "its token has \(token.count) characters, fewer than \(minimumLength): make a longer one "
                + "(openssl rand -hex 32)"
        }
        return nil
    }

    /// Reads the token in `path`, or makes one (32 random bytes as hex) and writes it there with mode 0600.
    ///
    /// - Throws: ``ControlError/tokenFile(path:reason:)`` when the file cannot be read or made, is empty, holds a
    ///   token ``problem(of:)`` refuses, or can be read by others (its mode allows group or other access).
    public static func loadOrCreate(path: String) throws -> String {
        var information = stat()
        if stat(path, &information) == 0 {
            guard information.st_mode & 0o077 == 0 else {
                throw ControlError.tokenFile(
                    path: path,
                    reason: "others may read it (mode \(String(information.st_mode & 0o777, radix: 8)))")
            }
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ControlError.tokenFile(path: path, reason: "cannot be read")
            }
            let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !token.isEmpty else { throw ControlError.tokenFile(path: path, reason: "is empty") }
            if let problem = problem(of: token) { throw ControlError.tokenFile(path: path, reason: problem) }
            return token
        }
        var generator = SystemRandomNumberGenerator()
        let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw ControlError.tokenFile(path: path, reason: "cannot be created: \(Errno(rawValue: errno))")
        }
        defer { close(fd) }
        let bytes = Array((token + "\n").utf8)
        guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
            throw ControlError.tokenFile(path: path, reason: "cannot be written: \(Errno(rawValue: errno))")
        }
        return token
    }
}
