import Foundation
import RewindCapture
import RewindCore
import RewindSystem
import RewindTesting
import Synchronization
import Testing

/// Real memory pressure from the kernel, produced on this machine by a page-cache hog in a memory-limited cgroup:
/// the monitor sees PSI rise and falls back to normal after the hog stops, and a running `rewind record` sheds
/// memory and recovers. Serialized: one hog at a time. A machine that cannot produce pressure fails the tests,
/// saying why.
@Suite(.serialized, .timeLimit(.minutes(45)))
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
            options: options, apply: { level in levels.withAnnotatedLock { $0.append(level) } })
        try monitor.start()
        defer { monitor.stop() }
        let before = try #require(
            System.readText("/proc/pressure/memory").flatMap(PressureStallReading.init(parsing:)))

        let hog = try MemoryHog(directory: directory.path)
        defer { hog.stop() }
        try waitUntil(
            "the monitor reports critical pressure from the hog (levels so far: \(levels.withAnnotatedLock { $0 }))",
            timeout: .seconds(60), interval: .milliseconds(100)
        ) {
            #expect(hog.isRunning, "the hog stopped early: \(hog.stderr)")
            return levels.withAnnotatedLock { $0.contains(.critical) }
        }
        let during = try #require(
            System.readText("/proc/pressure/memory").flatMap(PressureStallReading.init(parsing:)))
        #expect(during.some.totalMicroseconds > before.some.totalMicroseconds, "PSI's stall total did not move")
        hog.stop()
        try waitUntil(
            "the monitor returns to normal once the hog is gone (levels: \(levels.withAnnotatedLock { $0 }))",
            timeout: .seconds(60), interval: .milliseconds(100)
        ) { monitor.level == .normal }
        let seen = levels.withAnnotatedLock { $0 }
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
        var shed: [String: Any]?
        /// The recorder's own line for a rise in pressure, when it says the resident size went down.
        func shedLine() -> Bool {
            recorder.stderr.split(separator: "\n").contains { line in
                guard line.contains("memory pressure normal →"), let resident = line.range(of: "resident ") else {
                    return false
                }
                let sizes = line[resident.upperBound...].split(separator: " ").compactMap { Double($0) }
                return sizes.count == 2 && sizes[1] < sizes[0]
            }
        }
        try waitUntil(
            "the live status shows raised pressure and less memory (stderr: \(recorder.stderr))",
            timeout: .seconds(60), interval: .milliseconds(200)
        ) {
            if let live = try Self.liveStatus(store), live["pressure"] as? String != "normal",
                (live["memory_bytes"] as? Int ?? .max) < filled / 2
            {
                shed = live
                return true
            }
            // A short rise on a busy machine may come and go between two looks at the status: then the recorder's
            // line for it says what it shed.
            return shedLine()
        }
        if let shed {
            #expect((shed["pressure_changes"] as? Int ?? 0) >= 1)
            #expect((shed["memory_budget_bytes"] as? Int ?? .max) <= 32 << 20)
        }
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

    /// Every stream of a live recorder, by name, from `rewind info --json`'s live section.
    static func liveStreams(_ store: String) throws -> [String: [String: Any]]? {
        guard let live = try liveStatus(store), let streams = live["streams"] as? [[String: Any]] else { return nil }
        return Dictionary(uniqueKeysWithValues: streams.compactMap { s in (s["stream"] as? String).map { ($0, s) } })
    }

    @Test func realPressureShrinksEveryStreamsShareAndNoStreamStalls() throws {
        guard Self.requirePressure() else { return }
        let directory = try Tool.temporaryDirectory("pressure")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "big=synthetic:640x360@30", "--input",
            "small=synthetic:320x180@15", "--input", "mid=synthetic:480x270@25", "--realtime", "--duration", "150s",
            "--memory", "64MiB", "--window", "10s",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        var full: [String: [String: Any]] = [:]
        try waitUntil(
            "every stream's ring fills most of its share (stderr: \(recorder.stderr))", timeout: .seconds(60),
            interval: .milliseconds(200)
        ) {
            guard let streams = try Self.liveStreams(store), streams.count == 3 else { return false }
            full = streams
            return streams.values.allSatisfy { stream in
                let used = stream["memory_bytes"] as? Int ?? 0
                let share = stream["memory_budget_bytes"] as? Int ?? .max
                return used >= share / 2
            }
        }
        // Shares follow the byte rates: the 640x360@30 stream gets the most, the 320x180@15 one the least.
        let shares = full.mapValues { $0["memory_budget_bytes"] as? Int ?? 0 }
        #expect(shares["big"]! > shares["mid"]! && shares["mid"]! > shares["small"]!, "\(shares)")
        #expect(shares.values.reduce(0, +) <= 64 << 20)

        let hog = try MemoryHog(directory: directory.path)
        defer { hog.stop() }
        var shed: [String: [String: Any]] = [:]
        try waitUntil(
            "pressure shrinks every stream's share (stderr: \(recorder.stderr))", timeout: .seconds(60),
            interval: .milliseconds(200)
        ) {
            guard let live = try Self.liveStatus(store), live["pressure"] as? String != "normal",
                let streams = try Self.liveStreams(store)
            else { return false }
            shed = streams
            return streams.allSatisfy { name, stream in
                (stream["memory_budget_bytes"] as? Int ?? .max) < shares[name]!
                    && (stream["memory_bytes"] as? Int ?? .max) < (full[name]?["memory_bytes"] as? Int ?? 0)
            }
        }
        // No stream stalls under pressure: each keeps accepting frames.
        try waitUntil(
            "every stream keeps recording under pressure (stderr: \(recorder.stderr))", timeout: .seconds(30),
            interval: .milliseconds(200)
        ) {
            guard let streams = try Self.liveStreams(store) else { return false }
            return streams.allSatisfy { name, stream in
                (stream["frames_accepted"] as? Int ?? 0) >= (shed[name]?["frames_accepted"] as? Int ?? .max) + 15
            }
        }
        hog.stop()
        recorder.process.interrupt()
        let result = try recorder.finish(timeout: .seconds(60))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output.contains("recorded 3 streams"), "\(result.output)")
        let verify = try Tool.rewind(["verify", "--store", store], timeout: .seconds(120))
        #expect(verify.status == 0, "\(verify.output)")
    }
}
