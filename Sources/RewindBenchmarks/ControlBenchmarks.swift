import Dispatch
import Foundation
import RewindCapture
import RewindControl
import RewindCore
import RewindMedia
import RewindQuery
import SegmentStore
import Synchronization

/// Benchmarks of the HTTP API of a live recorder: how fast a save is acknowledged while exports run, and whether
/// clients hammering the API cost capture any frame.
public enum ControlBenchmarks {
    /// Records a 1080p60 synthetic camera in real time (eager spill) while clients use the API: 200 status requests
    /// a second, an events client, a save of the last second every second. Meanwhile it starts four exports and
    /// times `POST /v1/saves` answers.
    ///
    /// - Parameter quick: 4 s of real time instead of 10 s.
    /// - Returns: `control_drops_1080p60` (frames dropped) and `control_save_ack_ms` (median answer time of a save
    ///   request while four exports run), with `control_status_requests` and `control_saves` (what the clients
    ///   did).
    public static func run(quick: Bool) throws -> [String: Double] {
        let directory = try RecorderBenchmarks.benchDirectory("control")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SegmentStore.open(directory: directory + "/store")
        let layout = try FrameLayout(format: .nv12, width: 1920, height: 1080)
        var camera = SyntheticCamera(layout: layout, frameDuration: FrameTime(value: 1, timescale: 60))
        let recorder = try Recorder(
            stream: camera.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(6), memoryBudget: 1536 << 20))
        let control = try RecorderControl(recorder: recorder, directory: directory + "/store")
        let client = ControlClient(directory: directory + "/store")
        let seconds: Int64 = quick ? 4 : 10
        let stop = Atomic<Bool>(false)
        let statusRequests = Atomic<Int>(0)
        let saves = Atomic<Int>(0)
        let ackTimes = Mutex<[Double]>([])
        let failures = Mutex<[String]>([])
        let group = DispatchGroup()

        // 200 status requests a second.
        DispatchQueue.global().async(group: group) {
            var next = ContinuousClock.now
            while !stop.load(ordering: .relaxed) {
                if (try? client.status()) != nil { statusRequests.add(1, ordering: .relaxed) }
                next += .milliseconds(5)
                let wait = next - ContinuousClock.now
                if wait > .zero { usleep(UInt32(RecorderBenchmarks.seconds(wait) * 1_000_000)) }
            }
        }
        // An events client.
        DispatchQueue.global().async(group: group) {
            _ = try? client.events { _, _, _ in !stop.load(ordering: .relaxed) }
        }
        // A save of the last second every second.
        DispatchQueue.global().async(group: group) {
            do {
                usleep(1_000_000)
                var pending: [Int: String] = [:]
                var next = ContinuousClock.now
                while !stop.load(ordering: .relaxed) {
                    // One request a second, whatever the exports in progress; finished files are removed.
                    let path = directory + "/every-second-\(saves.load(ordering: .relaxed)).mkv"
                    if let save = try client.save(SaveRequest(last: "1s", path: path)) {
                        saves.add(1, ordering: .relaxed)
                        pending[save.id] = path
                    }
                    for (id, file) in pending where (try client.save(id: id))?.state.isFinal ?? true {
                        try? FileManager.default.removeItem(atPath: file)
                        pending[id] = nil
                    }
                    next += .seconds(1)
                    while ContinuousClock.now < next && !stop.load(ordering: .relaxed) { usleep(10_000) }
                }
                for file in pending.values { try? FileManager.default.removeItem(atPath: file) }
            } catch {
                // Once the recording ends the recorder stops, and a save still being polled is cut off.
                if !stop.load(ordering: .relaxed) {
                    let message = "\(error)"
                    failures.withAnnotatedLock { $0.append(message) }
                }
            }
        }
        // After 1.5 s: four exports, and 21 timed save requests while they run (each cancelled at once).
        DispatchQueue.global().async(group: group) {
            do {
                usleep(1_500_000)
                var exports: [Int] = []
                for number in 0..<4 {
                    let clip = try client.save(SaveRequest(last: "2s", path: directory + "/export-\(number).mkv"))
                    if let clip { exports.append(clip.id) }
                }
                for number in 0..<21 {
                    let start = ContinuousClock.now
                    let save = try client.save(SaveRequest(last: "1s", path: directory + "/ack-\(number).mkv"))
                    let elapsed = RecorderBenchmarks.seconds(ContinuousClock.now - start) * 1000
                    ackTimes.withAnnotatedLock { $0.append(elapsed) }
                    if let save { _ = try client.cancelSave(id: save.id) }
                }
                for id in exports { _ = try client.waitForSave(id: id) }
                for number in 0..<4 { try? FileManager.default.removeItem(atPath: directory + "/export-\(number).mkv") }
            } catch {
                if !stop.load(ordering: .relaxed) {
                    let message = "\(error)"
                    failures.withAnnotatedLock { $0.append(message) }
                }
            }
        }
        try recorder.record(
            from: &camera, options: RecordLoopOptions(pacing: .realtime, duration: .seconds(seconds), spillLag: .drop))
        stop.store(true, ordering: .relaxed)
        control.stop()
        guard group.wait(timeout: .now() + 120) == .success else {
            throw BenchmarkError("the API clients did not stop within 2 minutes")
        }
        let drops = recorder.statistics.totalDrops
        _ = try recorder.finish()
        if let failure = failures.withAnnotatedLock({ $0.first }) {
            throw BenchmarkError("an API client failed: \(failure)")
        }
        let acks = ackTimes.withAnnotatedLock { $0 }.sorted()
        guard !acks.isEmpty else { throw BenchmarkError("no save request was timed") }
        return [
            "control_drops_1080p60": Double(drops),
            "control_save_ack_ms": acks[acks.count / 2],
            "control_status_requests": Double(statusRequests.load(ordering: .relaxed)),
            "control_saves": Double(saves.load(ordering: .relaxed)),
        ]
    }
}
