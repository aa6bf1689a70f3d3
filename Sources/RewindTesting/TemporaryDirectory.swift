import Foundation

/// A fresh directory under the system's temporary directory, for tests and harnesses.
///
/// The directory exists once the value is made and stays until ``remove()``: nothing is deleted behind a caller
/// that still uses a path inside it.
public final class TemporaryDirectory: Sendable {
    /// One directory for the whole process (files inside it get unique names from ``file(_:)``), removed with
    /// everything in it when the process exits normally.
    public static let shared: TemporaryDirectory = {
        let directory = TemporaryDirectory(prefix: "rewind-shared")
        atexit { TemporaryDirectory.shared.remove() }
        return directory
    }()

    /// The directory's absolute path.
    public let path: String

    /// Makes a new, empty directory named `PREFIX-<unique>`.
    public init(prefix: String = "rewind-tests") {
        let base = FileManager.default.temporaryDirectory.path + "/\(prefix)-\(getpid())-" + UUID().uuidString
        do {
            try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        } catch {
            preconditionFailure("cannot create a temporary directory at \(base): \(error)")
        }
        path = base
    }

    /// A fresh path inside the directory (not created), ending in `name`.
    public func file(_ name: String) -> String {
        "\(path)/\(UUID().uuidString.prefix(8))-\(name)"
    }

    /// A fresh directory inside this one, created, ending in `name`.
    public func directory(_ name: String) throws -> String {
        let directory = file(name)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    /// A fresh, empty store directory inside the process's shared temporary directory.
    public static func store(_ name: String = "store") throws -> String {
        try shared.directory(name)
    }

    /// The segment folder of a store kept at ``path``.
    public var segments: String { path + "/segments" }

    /// The index database of a store kept at ``path``.
    public var indexPath: String { path + "/index.sqlite" }

    /// The names in the store's segment folder, sorted.
    public func segmentFiles() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: segments)) ?? []).sorted()
    }

    /// Removes the directory and everything in it.
    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
