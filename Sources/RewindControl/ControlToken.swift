import Foundation
import RewindSystem

/// The bearer token of a recorder's TCP listener, kept in a file of mode 0600 (`DIR/token` by default).
public enum ControlToken {
    /// The fewest characters a token may have: one guessed in a few tries would guard nothing.
    public static let minimumLength = 16

    /// What makes `token` unusable, or nil: shorter than ``minimumLength``, or holding a character a header or a
    /// cookie cannot carry as it is (white space or another control character, `"`, `,`, `;`, `\\`, anything not
    /// ASCII), which would let it work in one way of giving it and silently not in another.
    static func problem(of token: String) -> TokenFileProblem? {
        let unusable = token.unicodeScalars.first { scalar in
            !(0x21...0x7E).contains(scalar.value) || "\",;\\".unicodeScalars.contains(scalar)
        }
        if let unusable { return .uncarriableCharacter(String(unusable)) }
        guard token.count >= minimumLength else { return .tooShort(characters: token.count) }
        return nil
    }

    /// Reads the token in `path`, or makes one (32 random bytes as hex) and writes it there with mode 0600.
    ///
    /// - Throws: ``ControlError/tokenFile(path:_:)`` when the file cannot be read or made, is empty, holds a
    ///   token ``problem(of:)`` refuses, or can be read by others (its mode allows group or other access).
    public static func loadOrCreate(path: String) throws -> String {
        var information = stat()
        if stat(path, &information) == 0 {
            guard information.st_mode & 0o077 == 0 else {
                throw ControlError.tokenFile(path: path, .readableByOthers(mode: information.st_mode & 0o777))
            }
            guard let text = System.readText(path) else {
                throw ControlError.tokenFile(path: path, .unreadable)
            }
            let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !token.isEmpty else { throw ControlError.tokenFile(path: path, .empty) }
            if let problem = problem(of: token) { throw ControlError.tokenFile(path: path, problem) }
            return token
        }
        var generator = SystemRandomNumberGenerator()
        let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw ControlError.tokenFile(path: path, .cannotCreate(Errno(rawValue: errno)))
        }
        defer { close(fd) }
        let bytes = Array((token + "\n").utf8)
        guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
            throw ControlError.tokenFile(path: path, .cannotWrite(Errno(rawValue: errno)))
        }
        return token
    }
}

/// What is wrong with a token file (``ControlError/tokenFile(path:_:)``).
public enum TokenFileProblem: Sendable, Hashable, CustomStringConvertible {
    /// Its mode lets the group or others read it (the permission bits).
    case readableByOthers(mode: mode_t)
    /// It exists and cannot be read (as UTF-8 text).
    case unreadable
    /// It holds nothing but white space.
    case empty
    /// Its token holds this character, which a header or a cookie cannot carry as it is.
    case uncarriableCharacter(String)
    /// Its token has this many characters, fewer than ``ControlToken/minimumLength``.
    case tooShort(characters: Int)
    /// It did not exist and cannot be made.
    case cannotCreate(Errno)
    /// It was made and the token cannot be written into it.
    case cannotWrite(Errno)

    /// The problem in words, after "token file PATH: ".
    public var description: String {
        switch self {
        case .readableByOthers(let mode): "others may read it (mode \(String(mode, radix: 8)))"
        case .unreadable: "cannot be read"
        case .empty: "is empty"
        case .uncarriableCharacter(let character):
            "its token holds \(String(reflecting: character)), which a header or a cookie cannot carry: use "
                + "printable ASCII without spaces, quotes, commas, semicolons or backslashes (openssl rand -hex 32)"
        case .tooShort(let characters):
            "its token has \(characters) characters, fewer than \(ControlToken.minimumLength): make a longer one "
                + "(openssl rand -hex 32)"
        case .cannotCreate(let error): "cannot be created: \(error)"
        case .cannotWrite(let error): "cannot be written: \(error)"
        }
    }
}
