import CPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The system would not start another thread (or child process): a limit on threads or on memory was reached.
public struct ThreadStartFailed: Error, Sendable, Hashable, CustomStringConvertible {
    /// What the thread was for (`rewind-spill`), or the program started (`ffmpeg`).
    public let name: String
    /// `pthread_create`'s (or `posix_spawn`'s) error (`EAGAIN` when a limit was reached).
    public let errno: Errno
    /// Whether a child process, rather than a thread, was refused.
    public let isProcess: Bool

    /// The failure to start the thread (or, with `isProcess`, the program) called `name`, with the system's error.
    package init(name: String, errno: Errno, isProcess: Bool = false) {
        self.name = name
        self.errno = errno
        self.isProcess = isProcess
    }

    /// Names the thread, the reason and what lifts the limit.
    public var description: String {
        "could not start a \(isProcess ? "process" : "thread") (\(name)): \(errno); the process reached a limit on "
            + "threads or memory (a pids cgroup or systemd's TasksMax, ulimit -u, ulimit -v): raise the limit or stop "
            + "other programs, and run again"
    }
}

/// Threads started with `pthread_create`, whose refusal is an error the caller handles.
///
/// Foundation's `Thread.start()` reports no failure: a thread the system refused simply never runs, and whoever
/// waits for it waits for ever. Every long-lived thread of the recorder, the control and the exports starts here.
package enum Threads {
    /// How a thread's work weighs against the recording's.
    package enum Priority: Sendable {
        /// The process's own priority: the producer, the spill thread, the control.
        case normal
        /// Ten nice steps lower (exports a recorder writes): on a busy machine the recording's threads run first,
        /// so a save never starves capture into dropping frames. The threads and processes (ffmpeg) such a thread
        /// starts inherit it.
        case background
    }

    private final class Start {
        let name: String
        let priority: Priority
        let body: @Sendable () -> Void

        init(name: String, priority: Priority, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.priority = priority
            self.body = body
        }
    }

    /// The nice steps a ``Priority/background`` thread is lowered by.
    package static let backgroundNiceIncrement: Int32 = 10

    /// Starts a detached thread called `name` (shown by `top -H` and debuggers) running `body` at `priority`.
    ///
    /// - Throws: ``ThreadStartFailed`` when the system refuses the thread; `body` then never runs.
    package static func start(
        named name: String, priority: Priority = .normal, _ body: @escaping @Sendable () -> Void
    ) throws(ThreadStartFailed) {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let start = Unmanaged.passRetained(Start(name: name, priority: priority, body: body))
        var thread = pthread_t()
        let rc = pthread_create(
            &thread, &attributes,
            { raw in
                let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
                rewind_name_this_thread(start.name)
                // Best effort: a thread that cannot be lowered (a seccomp filter) runs at the process's priority.
                if start.priority == .background {
                    _ = rewind_lower_this_thread_priority(Threads.backgroundNiceIncrement)
                }
                start.body()
                return nil
            }, start.toOpaque())
        guard rc == 0 else {
            start.release()
            throw ThreadStartFailed(name: name, errno: Errno(rawValue: rc))
        }
    }
}
