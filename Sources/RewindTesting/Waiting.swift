import Foundation
import Synchronization

/// A wait that reached its deadline: says what was awaited and for how long. Thrown from a test, it fails the test
/// with that message.
public struct WaitTimedOut: Error, CustomStringConvertible {
    /// What was awaited, as the caller described it.
    public var what: String
    /// How long it was awaited.
    public var timeout: Duration
    /// Where the wait was made.
    public var file: String
    public var line: Int

    public var description: String {
        "timed out after \(timeout) waiting until \(what) (\((file as NSString).lastPathComponent):\(line))"
    }
}

/// The default deadline of a wait in tests: generous for a loaded two-core machine, far below a suite's time limit.
public let defaultWaitTimeout: Duration = .seconds(60)

/// Polls `condition` every `interval` until it holds.
///
/// - Parameters:
///   - what: What is awaited, completing "waiting until …" ("the spill stage has written every frame").
///   - timeout: A liveness bound, not a performance limit.
/// - Throws: ``WaitTimedOut`` when `condition` still does not hold after `timeout`; whatever `condition` throws.
public func waitUntil(
    _ what: @autoclosure () -> String, timeout: Duration = defaultWaitTimeout, interval: Duration = .milliseconds(1),
    file: String = #fileID, line: Int = #line, _ condition: () throws -> Bool
) throws {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while true {
        if try condition() { return }
        guard clock.now < deadline else {
            throw WaitTimedOut(what: what(), timeout: timeout, file: file, line: line)
        }
        Thread.sleep(forTimeInterval: interval.seconds)
    }
}

/// Waits for `semaphore` to be signalled.
///
/// - Throws: ``WaitTimedOut`` when it is not signalled within `timeout`.
public func wait(
    for semaphore: DispatchSemaphore, until what: @autoclosure () -> String, timeout: Duration = defaultWaitTimeout,
    file: String = #fileID, line: Int = #line
) throws {
    guard semaphore.wait(timeout: .now() + timeout.seconds) == .success else {
        throw WaitTimedOut(what: what(), timeout: timeout, file: file, line: line)
    }
}

/// A wall clock that moves only when told to, for time-based behaviour (retention by age) in tests.
public final class ManualClock: Sendable {
    private let nanoseconds: Atomic<Int64>

    /// A clock reading `start` (Unix epoch nanoseconds; an arbitrary fixed moment by default).
    public init(start: Int64 = 1_700_000_000_000_000_000) {
        nanoseconds = Atomic(start)
    }

    /// The current reading: pass `clock.now` where a `@Sendable () -> Int64` clock is wanted.
    @Sendable public func now() -> Int64 { nanoseconds.load(ordering: .acquiring) }

    /// Moves the clock forward by `duration`.
    public func advance(by duration: Duration) {
        let (seconds, attoseconds) = duration.components
        nanoseconds.add(seconds * 1_000_000_000 + attoseconds / 1_000_000_000, ordering: .acquiringAndReleasing)
    }
}

extension Duration {
    /// The duration in seconds, as a `Double` (for APIs that take a `TimeInterval`).
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

/// Waits for every task in `group` to finish.
///
/// - Throws: ``WaitTimedOut`` when they have not finished within `timeout`.
public func wait(
    for group: DispatchGroup, until what: @autoclosure () -> String, timeout: Duration = defaultWaitTimeout,
    file: String = #fileID, line: Int = #line
) throws {
    guard group.wait(timeout: .now() + timeout.seconds) == .success else {
        throw WaitTimedOut(what: what(), timeout: timeout, file: file, line: line)
    }
}

/// Waits for `process` to exit; one that is still running at the deadline is killed (SIGKILL).
///
/// - Throws: ``WaitTimedOut`` when it had to be killed.
public func waitForExit(
    _ process: Process, _ what: @autoclosure () -> String, timeout: Duration = ExternalTools.defaultTimeout,
    file: String = #fileID, line: Int = #line
) throws {
    do {
        try waitUntil(what(), timeout: timeout, interval: .milliseconds(5), file: file, line: line) {
            !process.isRunning
        }
    } catch {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        throw error
    }
    process.waitUntilExit()  // returns at once: the status is set
}
