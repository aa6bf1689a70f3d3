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

    /// Makes `fd` non-blocking when it is a pipe, FIFO or socket, so a full one is waited for with
    /// ``waitUntilWritable(_:)``: its status flags before (to give back when done: the descriptor may be shared with
    /// other processes, as stdout is), or nil when it is something else and was left as it was.
    package static func makeNonBlockingIfPipe(_ fd: Int32) -> Int32? {
        var info = stat()
        let kind = fstat(fd, &info) == 0 ? info.st_mode & S_IFMT : 0
        let flags = fcntl(fd, F_GETFL)
        guard (kind == S_IFIFO || kind == S_IFSOCK) && flags >= 0 else { return nil }
        if flags & O_NONBLOCK == 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        return flags
    }

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
