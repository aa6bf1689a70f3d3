import Foundation
import RewindCapture
import RewindSystem

/// Real memory pressure for tests: a memory cgroup with a small limit, and processes in it re-reading a file much
/// larger than the limit, so the kernel reclaims and refaults page cache all the time and PSI's stall figures rise
/// for the whole machine. Nothing outside the cgroup is at risk: its pages are only page cache.
///
/// The kernel's OOM killer may act inside the cgroup when reclaim falls behind (a busy machine): the hog's shells are
/// exempt from it (`oom_score_adj` −1000), so only a reader (`cat`) can be killed, and its loop starts another.
///
/// ``stop()`` (call it in a `defer`) kills every process in the cgroup, removes the cgroup and the file.
public final class MemoryHog: @unchecked Sendable {
    /// The cgroup's directory.
    public let cgroup: String
    private let file: String
    private var child: ExternalTools.Child?

    /// Why this machine cannot produce memory pressure for a test, or nil when it can: no PSI in the kernel, no
    /// memory cgroup hierarchy (v1 `/sys/fs/cgroup/memory`, or v2 with the memory controller), or no permission
    /// to make a cgroup in it.
    public static func unavailableReason() -> String? {
        guard MemoryPressureMonitor.isAvailable else {
            return "/proc/pressure/memory cannot be read: this kernel offers no PSI (CONFIG_PSI, not psi=0)"
        }
        guard let parent = hierarchy() else {
            return "no memory cgroup hierarchy: neither /sys/fs/cgroup/memory (v1) nor /sys/fs/cgroup with the "
                + "memory controller (v2) is mounted"
        }
        let probe = parent + "/rewind-probe-\(getpid())"
        guard mkdir(probe, 0o755) == 0 else {
            return "cannot make a cgroup in \(parent): \(String(cString: strerror(errno))) (run the tests as root)"
        }
        rmdir(probe)
        return nil
    }

    /// The memory cgroup hierarchy: v1's memory mount, or v2's root when its memory controller is on.
    private static func hierarchy() -> String? {
        if access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) == 0 { return "/sys/fs/cgroup/memory" }
        let controllers = System.readText("/sys/fs/cgroup/cgroup.controllers") ?? ""
        return controllers.split(whereSeparator: { $0 == " " || $0 == "\n" }).contains("memory")
            ? "/sys/fs/cgroup" : nil
    }

    /// Makes the cgroup, writes the file from inside it with direct I/O, and starts `readers` processes re-reading
    /// it (its pages come into the cache by those reads, charged to the cgroup). Written through the page cache, the
    /// file's dirty pages filled the small limit faster than a busy disk wrote them back, and the OOM killer took
    /// the writer.
    ///
    /// - Parameters:
    ///   - directory: where the file goes (a disk-backed file system; on tmpfs the file would be unevictable).
    ///   - limit: the cgroup's memory limit.
    ///   - fileBytes: the file's size; several times `limit`.
    ///   - readers: processes re-reading the file at once.
    /// - Throws: when the cgroup cannot be made or the shell cannot start (see ``unavailableReason()``).
    public init(directory: String, limit: Int = 32 << 20, fileBytes: Int = 256 << 20, readers: Int = 4) throws {
        guard let parent = Self.hierarchy() else {
            throw ExternalTools.Missing(name: "a memory cgroup hierarchy")
        }
        cgroup = parent + "/rewind-hog-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        file = directory + "/hog-\(UInt32.random(in: 0...UInt32.max)).bin"
        guard mkdir(cgroup, 0o755) == 0 else {
            throw ExternalTools.Failed(
                command: "mkdir \(cgroup)", status: errno, stderr: String(cString: strerror(errno)))
        }
        let limitFile = parent == "/sys/fs/cgroup" ? "memory.max" : "memory.limit_in_bytes"
        do {
            try "\(limit)".write(toFile: cgroup + "/" + limitFile, atomically: false, encoding: .utf8)
            let script = """
                echo $$ > \(cgroup)/cgroup.procs || exit 3
                echo -1000 > /proc/self/oom_score_adj
                dd if=/dev/zero of=\(file) bs=1M count=\(fileBytes >> 20) oflag=direct status=none || exit 4
                for i in $(seq \(readers)); do
                    (while :; do sh -c 'echo 0 > /proc/self/oom_score_adj; exec cat "$0" > /dev/null' \(file); done) &
                done
                wait
                """
            child = try ExternalTools.Child("/bin/sh", ["-c", script])
        } catch {
            stop()
            throw error
        }
    }

    /// Whether the hog's shell is still running (it exits early only when it could not join the cgroup or write).
    public var isRunning: Bool { child?.process.isRunning ?? false }

    /// What the hog's shell wrote on stderr.
    public var stderr: String { child?.stderr ?? "" }

    /// Kills every process in the cgroup, removes it and the file. Idempotent.
    public func stop() {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            let text = System.readText(cgroup + "/cgroup.procs") ?? ""
            let pids = text.split(separator: "\n").compactMap { Int32($0) }
            if pids.isEmpty { break }
            for pid in pids { kill(pid, SIGKILL) }
            Thread.sleep(forTimeInterval: 0.05)
        }
        if let child {
            child.process.terminate()
            _ = try? child.finish(timeout: .seconds(10))
            self.child = nil
        }
        while rmdir(cgroup) != 0 && errno == EBUSY && ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.05)
        }
        unlink(file)
    }

    deinit { stop() }
}
