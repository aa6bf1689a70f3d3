#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// An open file descriptor, named but not owned: a copyable handle like swift-system's `FileDescriptor`.
///
/// A value of this type never closes anything. Whoever opened the descriptor (or was handed it with ownership,
/// as an ``OwnedFileDescriptor``) closes it; every API that takes or returns one says who that is. The
/// ``FileSystem`` seam below it takes the raw value, as the system calls do.
public struct FileDescriptor: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    /// The descriptor number the system calls take.
    public let rawValue: Int32

    /// Names descriptor `rawValue`; nothing is checked, opened or taken over.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The process's standard input, descriptor 0.
    public static let standardInput = FileDescriptor(rawValue: 0)
    /// The process's standard output, descriptor 1.
    public static let standardOutput = FileDescriptor(rawValue: 1)
    /// The process's standard error, descriptor 2.
    public static let standardError = FileDescriptor(rawValue: 2)

    /// `descriptor N`, with N the descriptor number.
    public var description: String { "descriptor \(rawValue)" }
}

/// A descriptor with exactly one owner, closed when that owner is done with it: at the end of its lifetime, or
/// by ``close()``. Used where a descriptor is handed over, such as one received with a control request.
package struct OwnedFileDescriptor: ~Copyable, Sendable {
    /// The descriptor, borrowed for as long as this value lives.
    package let descriptor: FileDescriptor

    /// Takes ownership of `descriptor`: it is closed when this value ends.
    package init(taking descriptor: FileDescriptor) { self.descriptor = descriptor }

    deinit { _ = Glibc.close(descriptor.rawValue) }

    /// Closes the descriptor now; errors are ignored (the descriptor is gone either way).
    package consuming func close() {
        let raw = descriptor.rawValue
        discard self
        _ = Glibc.close(raw)
    }
}
