import CPlatform
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The resident set size of this process: the pages of it that are in RAM, as the kernel counts them.
public enum ResidentMemory {
    private static var pageSize: Int { System.pageSize }

    /// Makes this process hand large freed buffers back to the system at once instead of keeping them in malloc's
    /// heaps: blocks of 512 KiB or more are mapped on their own and unmapped when freed.
    ///
    /// The recording path allocates nothing per frame, but queries, exports and read-backs allocate frame-sized
    /// buffers for their duration; with glibc's adaptive defaults, freed buffers up to 32 MiB stay resident, which
    /// a soak sees as the resident size creeping up by a frame at a time. Call it once, early, in a process that
    /// must stay within a memory budget (the `rewind` tool does, for every command).
    ///
    /// - Returns: whether the C library took the settings.
    @discardableResult
    public static func limitHeapRetention() -> Bool {
        rewind_limit_heap_retention() == 1
    }

    /// Makes malloc keep at most `count` arenas (glibc makes up to eight per core, each reserving 64 MiB of address
    /// space): the address space a process needs then follows its memory, so a limit on it (``System/addressSpaceLimit``)
    /// can be checked against a budget. Call it once, before other threads start.
    ///
    /// - Returns: whether the C library took the setting.
    @discardableResult
    public static func limitMallocArenas(to count: Int) -> Bool {
        rewind_limit_malloc_arenas(Int32(clamping: max(1, count))) == 1
    }

    /// Gives the free memory inside malloc's heaps back to the system (`malloc_trim`). `free` gives back only what
    /// lies at the top of a heap; a long-running process whose requests and exports allocate and free buffers
    /// between longer-lived allocations keeps the pages of those holes resident (a recorder serving a client grew
    /// about 1 MB a minute, with 14 MB free in its heaps after 15 minutes). Takes each arena's lock while it walks
    /// it: a few milliseconds, off the recording path.
    ///
    /// - Returns: whether some memory was released.
    @discardableResult
    public static func trimHeap() -> Bool {
        lastTrim.store(System.monotonicNanoseconds(), ordering: .relaxed)
        return rewind_trim_heap() == 1
    }

    /// ``trimHeap()`` when it last ran `interval` or longer ago (in this process, from any thread); nothing
    /// otherwise. Cheap to call after every request.
    ///
    /// - Returns: whether it trimmed.
    @discardableResult
    public static func trimHeapIfDue(every interval: Duration = .seconds(10)) -> Bool {
        let now = System.monotonicNanoseconds()
        let last = lastTrim.load(ordering: .relaxed)
        let (seconds, attoseconds) = interval.components
        let wait =
            seconds >= Int64.max / 1_000_000_000 ? Int64.max : seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        guard now - last >= wait,
            lastTrim.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged
        else { return false }
        _ = rewind_trim_heap()
        return true
    }

    private static let lastTrim = Atomic<Int64>(0)

    /// The bytes malloc has handed out and not had back: what the process's own allocations hold (including large
    /// blocks mapped on their own), whether resident or not; nil where the C library cannot say, or where malloc is
    /// not its own (a sanitizer's allocator, or another one preloaded: glibc's heaps then hold nothing). Not for a
    /// hot path: it walks malloc's free lists under their locks.
    public static func heapInUse() -> Int? {
        let bytes = rewind_heap_bytes_in_use()
        return bytes > 0 ? Int(bytes) : nil
    }

    /// The resident size in bytes, from the second field of `/proc/self/statm` (resident pages) times the page
    /// size: the figure `VmRSS` in `/proc/self/status` shows, read without parsing text lines. Allocates nothing.
    ///
    /// - Returns: nil when `/proc` cannot be read.
    public static func current() -> Int? {
        let fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 128) { buffer -> Int? in
            var count = 0
            while count < buffer.count {
                let n = System.retryingInterrupts { read(fd, buffer.baseAddress! + count, buffer.count - count) }
                guard n > 0 else { break }
                count += n
            }
            // "size resident shared text lib data dt": skip the first number, read the second.
            var index = 0
            while index < count && buffer[index] != UInt8(ascii: " ") { index += 1 }
            index += 1
            var pages = 0
            var digits = 0
            while index < count, buffer[index] >= UInt8(ascii: "0"), buffer[index] <= UInt8(ascii: "9") {
                pages = pages * 10 + Int(buffer[index] - UInt8(ascii: "0"))
                digits += 1
                index += 1
            }
            return digits > 0 ? pages * pageSize : nil
        }
    }
}
