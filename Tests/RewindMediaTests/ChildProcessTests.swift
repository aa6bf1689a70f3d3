import Foundation
import Glibc
import RewindSystem
import Testing

/// The children exports start (ffmpeg): each in a process group of its own, and reachable all at once by a process
/// that ends at once.
@Suite(.timeLimit(.minutes(45))) struct ChildProcessTests {
    /// A shell that exits 7 when it gets SIGCONT, which does nothing to any other process (other tests' children
    /// are signalled too, as every child of this process is).
    func waitingForSIGCONT() throws -> ChildProcess {
        try ChildProcess(path: "/bin/sh", arguments: ["-c", "trap 'exit 7' CONT; while :; do sleep 0.05; done"])
    }

    /// A signal to the caller's process group (Ctrl-C, `timeout`) does not reach the child: it leads a group of its
    /// own.
    @Test func aChildLeadsAProcessGroupOfItsOwn() throws {
        let child = try waitingForSIGCONT()
        #expect(getpgid(child.pid) == child.pid)
        #expect(getpgid(child.pid) != getpgid(0))
        kill(child.pid, SIGKILL)
        #expect(child.waitForExit() == 128 + SIGKILL)
    }

    /// `killAll` reaches every child still running; one already waited for is forgotten (its pid may be another
    /// process's by then).
    @Test func killAllReachesEveryRunningChild() throws {
        let ended = try ChildProcess(path: "/bin/true", arguments: [])
        #expect(ended.waitForExit() == 0)
        let first = try waitingForSIGCONT()
        let second = try waitingForSIGCONT()
        // The shells set their trap as they start: signal until each has taken it.
        var statuses: [Int32] = []
        for child in [first, second] {
            let deadline = ContinuousClock.now + .seconds(30)
            var status: Int32?
            while status == nil && ContinuousClock.now < deadline {
                ChildProcess.killAll(signal: SIGCONT)
                usleep(100_000)
                var raw: Int32 = 0
                if waitpid(child.pid, &raw, WNOHANG) == child.pid { status = (raw >> 8) & 0xff }
            }
            statuses.append(status ?? -1)
        }
        #expect(statuses == [7, 7])
    }
}
