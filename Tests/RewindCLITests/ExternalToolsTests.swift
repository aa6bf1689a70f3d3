import Foundation
import RewindTesting
import Testing

/// The harness every test runs programs with.
@Suite(.timeLimit(.minutes(45))) struct ExternalToolsTests {
    /// A program that does not end in time is killed, and the failure says what each of its threads was doing then
    /// (so a wait that happens once in a hundred runs says where it waited): from `/proc`, and with gdb (on this
    /// machine's kind) every thread's backtrace.
    @Test func aProgramThatDoesNotEndInTimeIsReportedWithWhatItsThreadsWereDoing() throws {
        let child = try ExternalTools.Child("/bin/sleep", ["600"])
        do {
            let result = try child.finish(timeout: .milliseconds(500))
            Issue.record("sleep 600 ended within half a second: \(result.status)")
        } catch let timedOut as ExternalTools.TimedOut {
            #expect(!child.process.isRunning)
            #expect(timedOut.threads.contains(" sleep state S wchan "), "\(timedOut.threads)")
            #expect(timedOut.description.contains("its threads then:\n"), "\(timedOut.description)")
            if (try? ExternalTools.locate("gdb")) != nil {
                #expect(timedOut.threads.contains("nanosleep"), "\(timedOut.threads)")
            }
        }
    }
}
