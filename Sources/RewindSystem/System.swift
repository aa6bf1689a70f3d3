import CPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// An error number from a failed system call, with the C library's description.
public struct Errno: Error, Sendable, Hashable, CustomStringConvertible {
    /// The raw value (`ENOSPC`, `EIO`, …).
    public let rawValue: Int32

    /// Wraps a raw error number.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The calling thread's `errno` now.
    package static var current: Errno { Errno(rawValue: errno) }

    /// Whether the error means the disk (or quota) is full.
    public var isDiskFull: Bool { rawValue == ENOSPC || rawValue == EDQUOT }

    /// The C library's words for the error (`No space left on device`).
    public var description: String { String(cString: strerror(rawValue)) }
}

/// The process's view of the machine and its clocks, read once where they cannot change.
public enum System {
    /// The size of a memory page in bytes (`sysconf(_SC_PAGESIZE)`), read once.
    public static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Flushes the C library's standard output (what `print` wrote) and says whether all of it reached the descriptor.
    ///
    /// - Returns: nil when it did, else the `errno` value of the failure (`EIO` when an earlier write failed).
    public static func flushStandardOutput() -> Int32? {
        let failure = rewind_flush_standard_output()
        return failure == 0 ? nil : failure
    }

    /// Whether process `pid` has ended (no such process any more), for files named after the process that wrote
    /// them; false for this process, and for a process that runs (or may: another user's).
    public static func hasEnded(pid: pid_t) -> Bool {
        pid > 0 && pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH
    }

    /// Makes the directories above `path` that are missing, as `mkdir -p` of its parent makes them (0755 less the
    /// umask; relative ones from the working directory).
    ///
    /// - Returns: the first directory that could not be made and why; nil when all are there.
    public static func makeParentDirectories(of path: String) -> (path: String, error: Errno)? {
        var above = path.hasPrefix("/") ? "/" : ""
        for component in parentDirectory(of: path).split(separator: "/") where component != "." {
            above += (above.isEmpty || above == "/" ? "" : "/") + component
            if mkdir(above, 0o755) != 0 && errno != EEXIST { return (above, Errno.current) }
        }
        return nil
    }

    /// Makes `path` a store's directory, its owner's alone (mode 0700 less the umask), and the directories above it
    /// that are missing (``makeParentDirectories(of:)``); an existing directory keeps its mode. Failures are left to
    /// whoever opens the directory next, which names them.
    public static func makeStoreDirectory(_ path: String) {
        _ = makeParentDirectories(of: path)
        _ = mkdir(path, 0o700)
    }

    /// The directory `path` names its last component in, as written: `/tmp` for `/tmp/a.mkv`, `/` for `/a`, `.` for
    /// a relative name without a slash (`E`), `a` for `a/b/` (trailing slashes are not a component). Foundation's
    /// `NSString.deletingLastPathComponent` stops the process on a one-character relative name.
    public static func parentDirectory(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "." }
        var parent = trimmed[..<slash]
        while parent.count > 1 && parent.hasSuffix("/") { parent = parent.dropLast() }
        return parent.isEmpty ? "/" : String(parent)
    }

    /// `path` with the symbolic links of its last component followed to the name they finally lead to, which may
    /// not exist yet (a dangling link leads to the file it would create); `path` itself when it is no link, or when
    /// the links loop (opening it then says so).
    public static func followingLinks(_ path: String) -> String {
        var current = path
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        for _ in 0..<40 {
            let count = buffer.withUnsafeMutableBufferPointer { bytes in
                bytes.withMemoryRebound(to: CChar.self) { readlink(current, $0.baseAddress!, Int(PATH_MAX)) }
            }
            guard count > 0 else { return current }
            let target = String(decoding: buffer[0..<count], as: UTF8.self)
            if target.hasPrefix("/") {
                current = target
            } else if let slash = current.lastIndex(of: "/") {
                current = String(current[...slash]) + target
            } else {
                current = target
            }
        }
        return path
    }

    /// The processors online (`sysconf(_SC_NPROCESSORS_ONLN)`), at least 1.
    public static var onlineProcessorCount: Int { max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))) }

    /// The process's limit on open descriptors (`ulimit -n`, systemd's `LimitNOFILE=`): the soft limit in force
    /// and the hard one it may be raised to (`Int.max` for unlimited).
    public static var openFileLimit: (soft: Int, hard: Int) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return (Int.max, Int.max) }
        func value(_ raw: rlim_t) -> Int { raw == rlim_t.max || raw > rlim_t(Int.max) ? Int.max : Int(raw) }
        return (value(limit.rlim_cur), value(limit.rlim_max))
    }

    /// Whether `signal` is ignored (`SIG_IGN`), as `nohup` leaves SIGHUP for the program it starts.
    public static func isIgnored(signal: Int32) -> Bool {
        rewind_signal_is_ignored(signal) == 1
    }

    /// The soft limit on this process's address space (`ulimit -v`, systemd's `LimitAS=`) in bytes; nil when there
    /// is none.
    public static var addressSpaceLimit: Int? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_AS.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return nil }
        return limit.rlim_cur > rlim_t(Int.max) ? nil : Int(limit.rlim_cur)
    }

    /// Raises the soft limit on open descriptors to `count` (at most the hard limit); whether it now allows that many.
    @discardableResult
    public static func raiseOpenFileLimit(to count: Int) -> Bool {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return false }
        guard limit.rlim_cur != rlim_t.max, limit.rlim_cur < rlim_t(count) else { return true }
        let hard = limit.rlim_max
        limit.rlim_cur = hard == rlim_t.max ? rlim_t(count) : min(hard, rlim_t(count))
        return setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 && limit.rlim_cur >= rlim_t(count)
    }

    /// Descriptors the process has open now (the entries of `/proc/self/fd`; 0 where it cannot be read).
    public static var openDescriptorCount: Int {
        guard let directory = opendir("/proc/self/fd") else { return 0 }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            if System.directoryEntryName(entry).pointee != CChar(UInt8(ascii: ".")) { count += 1 }
        }
        // Less the one opendir holds.
        return max(0, count - 1)
    }

    /// A small file's contents (PSI, meminfo, a cgroup's files, a token, a tool's log), read whole as UTF-8; nil when
    /// it cannot be opened or read. Foundation's `String(contentsOfFile:)` keeps its 4 KiB buffer of a file that
    /// reports no size (an empty log, `/proc` and cgroup files): a leak per read in a long-running recorder.
    public static func readText(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = System.retryingInterrupts { read(fd, &buffer, buffer.count) }
            guard count >= 0 else { return nil }
            if count == 0 { break }
            bytes += buffer[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The name of a `readdir(3)` entry, in place. The entry is only as long as its name needs (`d_reclen`), not
    /// `sizeof(struct dirent)`: copying its `d_name` array whole (as `withUnsafeBytes(of: entry.pointee.d_name)`
    /// does) reads past the end of the last entry in the directory stream's buffer.
    public static func directoryEntryName(_ entry: UnsafeMutablePointer<dirent>) -> UnsafePointer<CChar> {
        (UnsafeRawPointer(entry) + MemoryLayout<dirent>.offset(of: \.d_name)!).assumingMemoryBound(to: CChar.self)
    }

    /// The wall-clock time now, in Unix epoch nanoseconds (`CLOCK_REALTIME`).
    public static func wallClockNanoseconds() -> Int64 { nanoseconds(of: CLOCK_REALTIME) }

    /// The monotonic clock now, in nanoseconds (`CLOCK_MONOTONIC`: steady, unaffected by changes of the wall clock;
    /// async-signal-safe).
    public static func monotonicNanoseconds() -> Int64 { nanoseconds(of: CLOCK_MONOTONIC) }

    /// The wall-clock time now in whole seconds since 1970, whatever year the system clock reads.
    public static func wallClockSeconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec)
    }

    /// The wall-clock seconds a recorder records at: 1970 to the end of 2199. Times are kept as nanoseconds since
    /// 1970 in 64 bits, which end in April 2262; the years after 2199 are room for the times a recording adds.
    public static let recordableWallSeconds: ClosedRange<Int64> = 0...7_258_118_399

    /// `clock` now in nanoseconds, held at the ends of 64 bits (a wall clock set past 2262 or before 1677 reads as
    /// those ends instead of trapping).
    private static func nanoseconds(of clock: clockid_t) -> Int64 {
        var now = timespec()
        clock_gettime(clock, &now)
        let (whole, overflow) = Int64(now.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return now.tv_sec < 0 ? .min : .max }
        let (sum, past) = whole.addingReportingOverflow(Int64(now.tv_nsec))
        return past ? .max : sum
    }

    /// Sleeps for `duration`, resuming after signals until all of it has passed. Negative durations return at once.
    package static func sleep(for duration: Duration) {
        guard duration > .zero else { return }
        let (seconds, attoseconds) = duration.components
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
        var left = timespec()
        while nanosleep(&request, &left) == -1 && errno == EINTR { request = left }
    }

    /// Sleeps until `instant` on the continuous clock (returns at once if it has passed).
    package static func sleep(until instant: ContinuousClock.Instant) {
        sleep(for: ContinuousClock.now.duration(to: instant))
    }

    /// Sleeps until `instant`, or until `shouldStop` returns true, asked every `interval` (50 ms by default).
    ///
    /// - Returns: false when it returned because `shouldStop` did.
    @discardableResult
    package static func sleep(
        until instant: ContinuousClock.Instant, unless shouldStop: () -> Bool,
        checkingEvery interval: Duration = .milliseconds(50)
    ) -> Bool {
        while true {
            if shouldStop() { return false }
            let left = ContinuousClock.now.duration(to: instant)
            guard left > .zero else { return true }
            sleep(for: min(left, interval))
        }
    }

    /// Calls `body` until it returns something other than −1 with `errno == EINTR`.
    ///
    /// - Returns: the first result that was not an interrupted call; on failure `errno` still holds the cause.
    @inline(__always)
    package static func retryingInterrupts<Result: BinaryInteger>(_ body: () -> Result) -> Result {
        while true {
            let result = body()
            if result < 0 && errno == EINTR { continue }
            return result
        }
    }
}
