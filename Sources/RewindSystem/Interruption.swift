import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A process-wide request to give up the waits that have no end of their own: a write to a pipe or FIFO whose
/// reader stopped reading, and a child program (ffmpeg) that does not finish. A command that exports sets it from
/// its stop signal's handler (``request()`` is async-signal-safe); nothing else sets it, so a recorder finishing its
/// saves after a stop signal still waits for them.
public enum Interruption {
    private static let requested = Atomic<Bool>(false)

    /// Asks every such wait to give up (from a signal handler too).
    public static func request() { requested.store(true, ordering: .relaxed) }

    /// Whether ``request()`` was called.
    public static var isRequested: Bool { requested.load(ordering: .relaxed) }

    /// Waits until `fd` (a pipe, FIFO or socket written without blocking) takes bytes again, checking for a request
    /// every 100 ms.
    ///
    /// - Returns: false when interrupted; true when the descriptor is writable, or has an error the next write
    ///   reports (its reader left: `EPIPE`).
    package static func waitUntilWritable(_ fd: Int32) -> Bool {
        var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        while !isRequested {
            descriptor.revents = 0
            if poll(&descriptor, 1, 100) != 0 { return !isRequested }
        }
        return false
    }
}
