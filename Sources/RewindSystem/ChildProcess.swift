import CPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A program started as a child process with `posix_spawn`, waited for with `waitpid`.
///
/// Foundation's `Process.run()` starts a thread to watch its children the first time, and waits for ever when
/// the system refuses it; this needs no thread. The child gets its standard descriptors from the caller, no other
/// descriptor, and every signal at its default action, unblocked (whatever this process ignores or blocks). It runs
/// in a process group of its own: Ctrl-C in a terminal, `timeout` or a signal to the caller's process group asks the
/// caller to stop, and the caller lets a child finish its work (a save's ffmpeg) or drops it (killing it, below).
/// ``killAll(signal:)`` ends every child still running, for a process ending at once.
package final class ChildProcess: @unchecked Sendable {
    /// The child's process id.
    package let pid: pid_t
    private var status: Int32?

    /// Starts `path` with `arguments` (not counting the program's own name).
    ///
    /// - Parameters:
    ///   - standardInput, standardOutput, standardError: descriptors the child gets as 0, 1 and 2; nil for
    ///     /dev/null. The caller keeps and closes its own.
    /// - Throws: ``ThreadStartFailed`` (a process, named by the program's file name) when the system refuses a
    ///   process (`EAGAIN`: a limit on processes or memory); ``Errno`` when the program cannot be started for
    ///   another reason (`ENOENT`, `EACCES`).
    package init(
        path: String, arguments: [String], standardInput: Int32? = nil, standardOutput: Int32? = nil,
        standardError: Int32? = nil
    ) throws {
        let argv = ([path] + arguments).map { strdup($0) }
        defer { for argument in argv { free(argument) } }
        var pointers = argv + [nil]
        let rc = pointers.withUnsafeMutableBufferPointer { buffer in
            rewind_spawn(path, buffer.baseAddress, standardInput ?? -1, standardOutput ?? -1, standardError ?? -1)
        }
        guard rc > 0 else {
            let errno = Errno(rawValue: -rc)
            guard errno.rawValue == EAGAIN else { throw errno }
            throw ThreadStartFailed(
                name: path.split(separator: "/").last.map(String.init) ?? path, errno: errno, isProcess: true)
        }
        pid = rc
    }

    deinit {
        // A child still running when its owner lets go is killed; one never waited for would stay a zombie as long
        // as this process runs.
        if isRunning { kill(pid, SIGKILL) }
        waitForExit()
    }

    /// Waits for the child to end: its exit code, or 128 + the signal that ended it.
    @discardableResult
    package func waitForExit() -> Int32 {
        if let status { return status }
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0 {
            // ECHILD: waited for elsewhere (not done here); nothing is known of how it ended.
            guard errno == EINTR else {
                status = -1
                rewind_forget_child(pid)
                return -1
            }
        }
        let ended = Self.describe(raw)
        status = ended
        rewind_forget_child(pid)
        return ended
    }

    /// Waits for the child to end, as ``waitForExit()``, unless an ``Interruption`` is requested first: then the
    /// child is killed (`SIGKILL`) and collected, and the result is nil.
    package func waitForExitUnlessInterrupted() -> Int32? {
        while isRunning {
            if Interruption.isRequested {
                kill(pid, SIGKILL)
                waitForExit()
                return nil
            }
            usleep(5_000)
        }
        return status
    }

    /// Whether the child has not ended yet (collects it when it has).
    private var isRunning: Bool {
        guard status == nil else { return false }
        var raw: Int32 = 0
        let rc = waitpid(pid, &raw, WNOHANG)
        if rc == 0 { return true }
        status = rc == pid ? Self.describe(raw) : -1
        rewind_forget_child(pid)
        return false
    }

    /// Sends `signal` to every child started here and not yet waited for. Async-signal-safe: for a signal handler
    /// that ends the process at once, so that no child (an ffmpeg writing a save) outlives it.
    package static func killAll(signal: Int32) {
        rewind_kill_children(signal)
    }

    private static func describe(_ raw: Int32) -> Int32 {
        let signal = raw & 0x7f
        return signal == 0 ? (raw >> 8) & 0xff : 128 + signal
    }
}
