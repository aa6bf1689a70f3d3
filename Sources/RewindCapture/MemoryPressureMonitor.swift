import Dispatch
import Foundation
import RewindCore
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Watches the operating system's memory pressure (Linux PSI) on a thread of its own and applies the level to a
/// recorder with ``Recorder/setPressure(_:)``.
///
/// Sources: `/proc/pressure/memory` (the whole machine) and, when the process is in a cgroup v2 other than the
/// root, that cgroup's `memory.pressure` (its limit, not the machine's, may be what runs out); plus `MemAvailable`
/// from `/proc/meminfo` for the critical floor. Each sample is the share of the interval since the previous one
/// stalled on memory, from the `total=` counters (the 10-second averages lag several seconds behind), worst over
/// the files; ``MemoryPressureHysteresis`` turns samples into levels.
///
/// Where the kernel allows, the monitor registers PSI triggers (`some <stall> <window>` written to each file) and
/// sleeps in `poll` until one fires (`POLLPRI`) or ``Options/idleInterval`` passes, so an idle machine wakes it
/// rarely; while pressure is raised, and where triggers are refused, it samples every ``Options/sampleInterval``.
/// Nothing runs on the producer's path: the recorder sees only a ``Recorder/setPressure(_:)`` call per change.
///
/// Lifetime: ``start()`` starts the thread, ``stop()`` wakes it through a pipe and waits for it to end; the
/// monitor owns its descriptors and closes them when it stops.
public final class MemoryPressureMonitor: Sendable {
    /// Where the monitor reads and how often.
    public struct Options: Sendable, Hashable {
        /// When readings mean which level, and the quiet period before it falls.
        public var thresholds = MemoryPressureThresholds()
        /// How often to sample while pressure is raised, or always when triggers are not available (default 1 s).
        public var sampleInterval: Duration = .seconds(1)
        /// How long to sleep at `normal` between samples when triggers wake the monitor (default 5 s; the
        /// `MemAvailable` floor is checked this often).
        public var idleInterval: Duration = .seconds(5)
        /// Whether to register PSI triggers; false samples at ``sampleInterval`` always.
        public var usesTriggers = true
        /// The machine's PSI file.
        public var systemPressurePath = "/proc/pressure/memory"
        /// The cgroup's PSI file; by default the process's cgroup v2 `memory.pressure`, when it is not the root's.
        public var cgroupPressurePath: String? = MemoryPressureMonitor.cgroupPressurePath()
        /// The file `MemAvailable` and `MemTotal` come from.
        public var memoryInfoPath = "/proc/meminfo"

        /// The defaults.
        public init() {}
    }

    /// One change of level, as the monitor applied it.
    public struct Change: Sendable, Hashable {
        /// The level before.
        public var from: MemoryPressure
        /// The level now.
        public var to: MemoryPressure
        /// The sample that caused the change.
        public var sample: PressureSample
        /// The process's resident size just before the level was applied, bytes (nil when unreadable).
        public var residentBytesBefore: Int?
        /// The process's resident size just after it was applied (the ring sheds at once), bytes.
        public var residentBytesAfter: Int?
    }

    /// Why the monitor cannot run.
    public struct Unavailable: Error, Sendable, Hashable, CustomStringConvertible {
        /// The PSI file that could not be read.
        public var path: String
        /// Why.
        public var errno: Errno

        /// `PATH cannot be read: REASON`.
        public var description: String { "\(path) cannot be read: \(errno)" }
    }

    /// The options the monitor runs with.
    public let options: Options
    /// The files PSI is read from, the machine's first.
    public let pressurePaths: [String]
    private let apply: @Sendable (MemoryPressure) -> Void
    private let onChange: @Sendable (Change) -> Void
    private let state = Mutex(State())
    private let finished = DispatchSemaphore(value: 0)

    private struct State {
        var isStarted = false
        var wake: (read: Int32, write: Int32) = (-1, -1)
        var triggerWindow: Duration?
        var level = MemoryPressure.normal
        var changes = 0
    }

    /// Makes a monitor that applies each level to `recorder`.
    ///
    /// - Parameters:
    ///   - recorder: gets ``Recorder/setPressure(_:)`` at each change.
    ///   - options: where to read, how often, the thresholds.
    ///   - onChange: called on the monitor's thread after each change is applied (to log it).
    /// - Throws: ``Unavailable`` when the machine's PSI file cannot be read (no PSI in this kernel).
    public convenience init(
        recorder: Recorder, options: Options = Options(), onChange: @escaping @Sendable (Change) -> Void = { _ in }
    ) throws(Unavailable) {
        try self.init(options: options, apply: { recorder.setPressure($0) }, onChange: onChange)
    }

    /// Makes a monitor that calls `apply` at each change.
    ///
    /// - Parameters:
    ///   - options: where to read, how often, the thresholds.
    ///   - apply: sets the level (``Recorder/setPressure(_:)``), on the monitor's thread.
    ///   - onChange: called after `apply`, with the resident size measured around it.
    /// - Throws: ``Unavailable`` when the machine's PSI file cannot be read (no PSI in this kernel).
    public init(
        options: Options = Options(), apply: @escaping @Sendable (MemoryPressure) -> Void,
        onChange: @escaping @Sendable (Change) -> Void = { _ in }
    ) throws(Unavailable) {
        let probe = open(options.systemPressurePath, O_RDONLY | O_CLOEXEC)
        guard probe >= 0 else { throw Unavailable(path: options.systemPressurePath, errno: .current) }
        close(probe)
        guard System.readText(options.systemPressurePath).flatMap(PressureStallReading.init(parsing:)) != nil else {
            // Present but not PSI (psi=0 makes reads fail with EOPNOTSUPP).
            throw Unavailable(path: options.systemPressurePath, errno: Errno(rawValue: EOPNOTSUPP))
        }
        self.options = options
        var paths = [options.systemPressurePath]
        if let cgroup = options.cgroupPressurePath,
            System.readText(cgroup).flatMap(PressureStallReading.init(parsing:)) != nil
        {
            paths.append(cgroup)
        }
        pressurePaths = paths
        self.apply = apply
        self.onChange = onChange
    }

    deinit { stop() }

    /// Whether this kernel offers memory PSI: `/proc/pressure/memory` reads (kernels since 4.20 built with
    /// `CONFIG_PSI`, and not booted with `psi=0`).
    public static var isAvailable: Bool {
        System.readText("/proc/pressure/memory").flatMap(PressureStallReading.init(parsing:)) != nil
    }

    /// The level the monitor last applied.
    public var level: MemoryPressure { state.withAnnotatedLock { $0.level } }

    /// How many times the monitor changed the level.
    public var changes: Int { state.withAnnotatedLock { $0.changes } }

    /// The window of the PSI triggers in use (1 s, or 2 s where the kernel allows unprivileged triggers only in
    /// whole multiples of 2 s); nil while not running or when the kernel refused triggers and the monitor polls.
    public var triggerWindow: Duration? { state.withAnnotatedLock { $0.triggerWindow } }

    /// Starts the monitor's thread (once; later calls do nothing).
    ///
    /// - Throws: ``Errno`` when no pipe for its wake-up could be made; ``ThreadStartFailed`` when the system refuses
    ///   the thread. The monitor then does nothing and ``stop()`` returns at once.
    public func start() throws {
        var pipeEnds: [Int32] = [-1, -1]
        guard pipe(&pipeEnds) == 0 else { throw Errno.current }
        let fds = pipeEnds
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let claimed = state.withAnnotatedLock { state -> Bool in
            guard !state.isStarted else { return false }
            state.isStarted = true
            state.wake = (fds[0], fds[1])
            return true
        }
        guard claimed else {
            close(fds[0])
            close(fds[1])
            return
        }
        do {
            try Threads.start(named: "rewind-pressure") { [self] in
                run(wake: fds[0])
                finished.signal()
            }
        } catch {
            let isOurs = state.withAnnotatedLock { state -> Bool in
                guard state.wake.write == fds[1] else { return false }
                state.wake = (-1, -1)
                return true
            }
            if isOurs {
                close(fds[0])
                close(fds[1])
            } else {
                // A stop took the pipe meanwhile and waits for the thread: it closes the pipe.
                finished.signal()
            }
            throw error
        }
    }

    /// Stops the thread and waits for it to end. The level last applied stays in force. Idempotent.
    public func stop() {
        let wake = state.withAnnotatedLock { state -> (read: Int32, write: Int32)? in
            guard state.wake.write >= 0 else { return nil }
            let wake = state.wake
            state.wake = (-1, -1)
            return wake
        }
        guard let wake else { return }
        var byte: UInt8 = 1
        _ = System.retryingInterrupts { write(wake.write, &byte, 1) }
        finished.wait()
        close(wake.read)
        close(wake.write)
    }

    // MARK: - The monitor's thread

    private struct Source {
        let path: String
        var trigger: Int32 = -1
        var previous: (some: UInt64, full: UInt64)?
    }

    private func run(wake: Int32) {
        var sources = pressurePaths.map { Source(path: $0) }
        var window: Duration?
        if options.usesTriggers {
            window = armTriggers(&sources)
        }
        state.withAnnotatedLock { $0.triggerWindow = window }
        defer {
            for source in sources where source.trigger >= 0 { close(source.trigger) }
            state.withAnnotatedLock { $0.triggerWindow = nil }
        }
        var hysteresis = MemoryPressureHysteresis(thresholds: options.thresholds)
        var previousNanoseconds = System.monotonicNanoseconds()
        // The first sample takes the 10-second averages: a recorder starting under pressure feels it at once.
        var sample = takeSample(&sources, elapsedMicroseconds: nil, triggered: false)
        while true {
            if let next = hysteresis.update(sample, atNanoseconds: previousNanoseconds) {
                applyLevel(next, sample: sample)
            }
            let armed = sources.contains { $0.trigger >= 0 }
            let interval = armed && hysteresis.level == .normal ? options.idleInterval : options.sampleInterval
            var fds = [pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
            fds += sources.map { pollfd(fd: $0.trigger, events: Int16(POLLPRI), revents: 0) }
            let timeout = Int32(clamping: interval.nanosecondsClamped / 1_000_000)
            let ready = poll(&fds, nfds_t(fds.count), timeout)
            if ready < 0 && errno != EINTR { return }
            if fds[0].revents != 0 { return }
            var triggered = false
            for index in sources.indices {
                let revents = fds[index + 1].revents
                if revents & Int16(POLLPRI) != 0 { triggered = true }
                if revents & Int16(POLLERR | POLLNVAL) != 0, sources[index].trigger >= 0 {
                    // The file went away (the cgroup was removed): keep sampling it no more by trigger.
                    close(sources[index].trigger)
                    sources[index].trigger = -1
                }
            }
            let now = System.monotonicNanoseconds()
            let elapsed = max(1, (now - previousNanoseconds) / 1000)
            previousNanoseconds = now
            sample = takeSample(&sources, elapsedMicroseconds: elapsed, triggered: triggered)
        }
    }

    /// Registers a `some` trigger at the warning threshold on every source: a 1 s window, or 2 s where the kernel
    /// refuses the shorter one (unprivileged triggers must use whole multiples of 2 s). A source that refuses
    /// both is sampled at ``Options/sampleInterval`` like the rest.
    /// - Returns: the window in use; nil when the machine's file refused both.
    private func armTriggers(_ sources: inout [Source]) -> Duration? {
        for window in [Duration.seconds(1), .seconds(2)] {
            for index in sources.indices where sources[index].trigger < 0 {
                sources[index].trigger = Self.openTrigger(
                    sources[index].path, window: window, share: options.thresholds.warningSome)
            }
            if sources[0].trigger >= 0 { return window }
        }
        return nil
    }

    /// Opens `path` and writes `some STALL WINDOW` to it (microseconds); the descriptor, or -1 when refused.
    private static func openTrigger(_ path: String, window: Duration, share: Double) -> Int32 {
        let windowMicroseconds = window.nanosecondsClamped / 1000
        let stall = max(1, Int64(Double(windowMicroseconds) * share))
        // The kernel overwrites the last byte written with a NUL: send one.
        let text = Array("some \(stall) \(windowMicroseconds)".utf8) + [0]
        let fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return -1 }
        guard System.retryingInterrupts({ write(fd, text, text.count) }) == text.count else {
            close(fd)
            return -1
        }
        return fd
    }

    private func takeSample(_ sources: inout [Source], elapsedMicroseconds: Int64?, triggered: Bool)
        -> PressureSample
    {
        var sample = PressureSample(some: 0, full: 0)
        for index in sources.indices {
            guard let reading = System.readText(sources[index].path).flatMap(PressureStallReading.init(parsing:))
            else { continue }
            let full = reading.full?.totalMicroseconds ?? 0
            if let elapsedMicroseconds, let previous = sources[index].previous {
                let elapsed = Double(elapsedMicroseconds)
                let some = Double(reading.some.totalMicroseconds &- previous.some) / elapsed
                let fullShare = Double(full &- previous.full) / elapsed
                sample.some = max(sample.some, min(1, some))
                sample.full = max(sample.full, min(1, fullShare))
            } else {
                sample.some = max(sample.some, reading.some.average10 / 100)
                sample.full = max(sample.full, (reading.full?.average10 ?? 0) / 100)
            }
            sources[index].previous = (reading.some.totalMicroseconds, full)
        }
        // A trigger fires when the stall in its window reached the warning threshold, even if the interval since
        // the last sample (shorter or longer than the window) shows less.
        if triggered { sample.some = max(sample.some, options.thresholds.warningSome) }
        sample.memory = System.readText(options.memoryInfoPath).flatMap(MemoryAvailability.init(parsing:))
        return sample
    }

    private func applyLevel(_ level: MemoryPressure, sample: PressureSample) {
        let before = ResidentMemory.current()
        apply(level)
        let after = ResidentMemory.current()
        let from = state.withAnnotatedLock { state -> MemoryPressure in
            let from = state.level
            state.level = level
            state.changes += 1
            return from
        }
        onChange(
            Change(from: from, to: level, sample: sample, residentBytesBefore: before, residentBytesAfter: after))
    }

    // MARK: - Files

    /// The process's cgroup v2 `memory.pressure`, from the `0::PATH` line of `/proc/self/cgroup`, under
    /// `/sys/fs/cgroup` (pure v2) or `/sys/fs/cgroup/unified` (hybrid); nil in the root cgroup (whose file
    /// repeats the machine's) or when there is no such file.
    public static func cgroupPressurePath() -> String? {
        guard let text = System.readText("/proc/self/cgroup") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("0::") {
            let path = line.dropFirst(3)
            guard path != "/" else { return nil }
            for mount in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
                let file = mount + path + "/memory.pressure"
                if access(file, R_OK) == 0 { return file }
            }
        }
        return nil
    }

    /// The memory limit of the process's cgroup, bytes: the smallest `memory.max` (v2) or `memory.limit_in_bytes`
    /// (v1) on the way from its cgroup up to the root, as `/proc/self/cgroup` names it; nil when none is set or none
    /// can be read (a cgroup namespace that hides the files).
    public static func cgroupMemoryLimit() -> Int? {
        guard let text = System.readText("/proc/self/cgroup") else { return nil }
        var limits: [Int] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            let files: [(mount: String, file: String)]
            if fields[0] == "0" && fields[1].isEmpty {
                files = [("/sys/fs/cgroup", "memory.max"), ("/sys/fs/cgroup/unified", "memory.max")]
            } else if fields[1].split(separator: ",").contains("memory") {
                files = [("/sys/fs/cgroup/memory", "memory.limit_in_bytes")]
            } else {
                continue
            }
            var path = String(fields[2])
            while true {
                for (mount, file) in files {
                    // "max" (v2) or a value near Int64.max (v1): no limit at this level.
                    if let value = System.readText(mount + (path == "/" ? "" : path) + "/" + file)
                        .flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }), value < 1 << 60
                    {
                        limits.append(value)
                    }
                }
                guard path != "/", let slash = path.lastIndex(of: "/") else { break }
                path = slash == path.startIndex ? "/" : String(path[..<slash])
            }
        }
        return limits.min()
    }
}
