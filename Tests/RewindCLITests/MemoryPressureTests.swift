import Foundation
import RewindCapture
import RewindCore
import RewindTesting
import Synchronization
import Testing

/// Real memory pressure from the kernel, produced on this machine by a page-cache hog in a memory-limited cgroup:
/// the monitor sees PSI rise and falls back to normal after the hog stops, and a running `rewind record` sheds
/// memory and recovers. Serialized: one hog at a time. A machine that cannot produce pressure fails the tests,
/// saying why.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct MemoryPressureTests {
    /// Fails the test, saying why, when this machine cannot produce pressure.
    static func requirePressure() -> Bool {
        if let reason = MemoryHog.unavailableReason() {
            Issue.record("cannot produce real memory pressure on this machine: \(reason)")
            return false
        }
        return true
    }

    @Test func theMonitorFollowsRealPressureUpAndBackDown() throws {
        guard Self.requirePressure() else { return }
        let directory = try Tool.temporaryDirectory("pressure")
        defer { try? FileManager.default.removeItem(at: directory) }
        let levels = Mutex<[MemoryPressure]>([])
        var options = MemoryPressureMonitor.Options()
        options.thresholds.quietPeriod = .seconds(3)
        let monitor = try MemoryPressureMonitor(
            options: options, apply: { level in levels.withLock { $0.append(level) } })
        monitor.start()
        defer { monitor.stop() }
        let before = try #require(
            MemoryPressureMonitor.readText("/proc/pressure/memory").flatMap(PressureStallReading.init(parsing:)))

        let hog = try MemoryHog(directory: directory.path)
        defer { hog.stop() }
        try waitUntil(
            "the monitor reports critical pressure from the hog (levels so far: \(levels.withLock { $0 }))",
            timeout: .seconds(60), interval: .milliseconds(100)
        ) {
            #expect(hog.isRunning, "the hog stopped early: \(hog.stderr)")
            return levels.withLock { $0.contains(.critical) }
        }
        let during = try #require(
            MemoryPressureMonitor.readText("/proc/pressure/memory").flatMap(PressureStallReading.init(parsing:)))
        #expect(during.some.totalMicroseconds > before.some.totalMicroseconds, "PSI's stall total did not move")
        hog.stop()
        try waitUntil(
            "the monitor returns to normal once the hog is gone (levels: \(levels.withLock { $0 }))",
            timeout: .seconds(60), interval: .milliseconds(100)
        ) { monitor.level == .normal }
        let seen = levels.withLock { $0 }
        #expect(seen.first == .warning || seen.first == .critical)
        #expect(seen.last == .normal)
        #expect(monitor.changes == seen.count)
    }

    /// `rewind info --json`'s live section.
    static func liveStatus(_ store: String) throws -> [String: Any]? {
        let info = try Tool.rewind(["info", "--store", store, "--json"], timeout: .seconds(30))
        guard info.status == 0,
            let object = try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
        else { return nil }
        return object["live"] as? [String: Any]
    }

    @Test func aRunningRecorderShedsMemoryUnderRealPressureAndRecovers() throws {
        guard Self.requirePressure() else { return }
        let directory = try Tool.temporaryDirectory("pressure")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "synthetic:640x360@30", "--realtime", "--duration", "150s",
            "--memory", "64MiB", "--window", "10s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        var filled = 0
        try waitUntil(
            "the recorder's ring holds 40 MiB (stderr: \(recorder.stderr))", timeout: .seconds(60),
            interval: .milliseconds(200)
        ) {
            guard let live = try Self.liveStatus(store) else { return false }
            filled = live["memory_bytes"] as? Int ?? 0
            return filled >= 40 << 20
        }

        let hog = try MemoryHog(directory: directory.path)
        defer { hog.stop() }
        var shed: [String: Any] = [:]
        try waitUntil(
            "the live status shows raised pressure and less memory (stderr: \(recorder.stderr))",
            timeout: .seconds(60), interval: .milliseconds(200)
        ) {
            guard let live = try Self.liveStatus(store) else { return false }
            shed = live
            return live["pressure"] as? String != "normal" && (live["memory_bytes"] as? Int ?? .max) < filled / 2
        }
        #expect((shed["pressure_changes"] as? Int ?? 0) >= 1)
        #expect((shed["memory_budget_bytes"] as? Int ?? .max) <= 32 << 20)
        hog.stop()
        try waitUntil(
            "the recorder returns to normal pressure (stderr: \(recorder.stderr))", timeout: .seconds(60),
            interval: .milliseconds(200)
        ) {
            guard let live = try Self.liveStatus(store) else { return false }
            return live["pressure"] as? String == "normal" && live["memory_budget_bytes"] as? Int == 64 << 20
        }
        let text = try Tool.rewind(["info", "--store", store], timeout: .seconds(30)).output
        #expect(text.contains("memory pressure normal ("), "\(text)")

        recorder.process.interrupt()
        let result = try recorder.finish(timeout: .seconds(60))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output.contains("memory pressure change"), "\(result.output)")
        let changes = result.stderr.split(separator: "\n").filter { $0.contains("memory pressure ") }
        #expect(changes.contains { $0.contains("normal →") && $0.contains("; resident ") }, "\(result.stderr)")
        #expect(changes.contains { $0.contains("→ normal") }, "\(result.stderr)")
    }
}
