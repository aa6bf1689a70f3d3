import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore

/// Benchmarks of the segment store, as ratios against references measured in the same run on the same bytes.
///
/// Keys (see DESIGN.md): `spill_over_lz4` (raw MB/s through a ``StreamWriter`` with all workers, into a temporary
/// store, ÷ single-thread `LZ4_compress_fast` acceleration 1 on the same frames), `spill_over_lz4_cli` (the same
/// ÷ the `lz4 -1` command on the same bytes, when `lz4` is installed), `stored_over_lz4_clean` and
/// `stored_over_lz4_noisy` (stored bytes ÷ plain LZ4 bytes of the same frames, camera-like footage made by ffmpeg,
/// see ``Footage/make(noisy:frames:testCardOnly:)``, clean and with `noise=alls=20:allf=t`; `_testsrc2` keys repeat
/// the measures on ffmpeg's animated test card), `disk_over_lz4` (and `_noisy`, `_testsrc2`: the raw MB/s at which
/// the disk took the bytes the spill stored, written with plain 1 MiB writes and `fdatasync` into the same file
/// system, ÷ the same LZ4 reference: the most `spill_over_lz4` can reach in that run once the disk is the limit),
/// `ttff_ms_1min` and `ttff_ms_1h` (median time to the first
/// frame of a 1 s range in the middle of a store of one minute and of one hour of frames, read-only store opened
/// as `rewind clip` does). Footage keys are absent when ffmpeg is missing.
public enum StoreBenchmarks {
    /// Runs the store benchmarks.
    ///
    /// - Parameter quick: fewer frames and trials (CI smoke run); the one-hour store is then recorded at 5 fps
    ///   (still one hour of pts).
    /// - Returns: the figures by key.
    /// - Throws: store errors.
    public static func run(quick: Bool) throws -> [String: Double] {
        var results: [String: Double] = [:]
        let count = quick ? 30 : 90
        // Footage that cannot be made (no ffmpeg, no process) fails the part: its figures are the goals.
        do {
            let clean = try Footage.make(noisy: false, frames: count)
            let spill = try measureSpill(clean, passes: quick ? 1 : 2, rounds: quick ? 1 : 3)
            results["spill_over_lz4"] = spill.overLZ4
            if let cli = spill.overCLI { results["spill_over_lz4_cli"] = cli }
            results["disk_over_lz4"] = spill.diskOverLZ4
            results["spill_mb_per_s"] = spill.megabytesPerSecond
            results["lz4_mb_per_s"] = spill.lz4MegabytesPerSecond
            results["stored_over_lz4_clean"] = try storedOverLZ4(clean)
        }
        do {
            let noisy = try Footage.make(noisy: true, frames: count)
            results["stored_over_lz4_noisy"] = try storedOverLZ4(noisy)
            let spill = try measureSpill(noisy, passes: 1, rounds: quick ? 1 : 3)
            results["spill_over_lz4_noisy"] = spill.overLZ4
            results["disk_over_lz4_noisy"] = spill.diskOverLZ4
        }
        do {
            let card = try Footage.make(noisy: false, frames: count, testCardOnly: true)
            results["stored_over_lz4_testsrc2"] = try storedOverLZ4(card)
            let spill = try measureSpill(card, passes: 2, rounds: quick ? 1 : 3)
            results["spill_over_lz4_testsrc2"] = spill.overLZ4
            results["disk_over_lz4_testsrc2"] = spill.diskOverLZ4
        }
        results["ttff_ms_1min"] = try timeToFirstFrame(seconds: 60, fps: 30, trials: quick ? 5 : 15)
        results["ttff_ms_1h"] = try timeToFirstFrame(seconds: 3600, fps: quick ? 5 : 30, trials: quick ? 5 : 15)
        return results
    }

    /// Raw frames from ffmpeg, back to back.
    struct Footage {
        let layout: FrameLayout
        let bytes: [UInt8]
        var count: Int { bytes.count / layout.byteCount }

        /// The scene: a detailed still (a Mandelbrot render, like a textured scene seen by a fixed camera) with a
        /// moving object (ffmpeg's `testsrc2` at 320×180) crossing it; `noisy` adds `noise=alls=20:allf=t`
        /// (temporal sensor-like noise on every pixel). `testsrc2` alone is ffmpeg's animated test card.
        static func make(noisy: Bool, frames: Int, testCardOnly: Bool = false) throws -> Footage {
            let layout = try FrameLayout(format: .nv12, width: 1280, height: 720)
            var arguments = ["-hide_banner", "-loglevel", "error"]
            if testCardOnly {
                arguments += ["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30"]
                if noisy { arguments += ["-vf", "noise=alls=20:allf=t"] }
            } else {
                arguments += [
                    "-f", "lavfi", "-i",
                    "mandelbrot=size=1280x720:rate=30:start_scale=0.3:end_scale=0.3:maxiter=1000",
                    "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=30", "-filter_complex",
                    "[0][1]overlay=x='mod(t*120,960)':y='200+40*sin(t)'" + (noisy ? ",noise=alls=20:allf=t" : ""),
                ]
            }
            arguments += ["-frames:v", "\(frames)", "-pix_fmt", "nv12", "-f", "rawvideo", "-"]
            let pipe = Pipe()
            let child = try ChildProcess(
                path: try ExternalTools.locate("ffmpeg"), arguments: arguments,
                standardOutput: pipe.fileHandleForWriting.fileDescriptor)
            try pipe.fileHandleForWriting.close()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            let status = child.waitForExit()
            guard status == 0, data.count == frames * layout.byteCount else {
                throw BenchmarkError(
                    "ffmpeg made \(data.count) bytes of footage, \(frames * layout.byteCount) expected (exit status "
                        + "\(status))")
            }
            return Footage(layout: layout, bytes: [UInt8](data))
        }

        func withFrame<T>(_ index: Int, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
            try bytes.withUnsafeBytes { raw in
                let start = (index % count) * layout.byteCount
                return try body(UnsafeRawBufferPointer(rebasing: raw[start..<start + layout.byteCount]))
            }
        }

        var stream: StreamDescription {
            StreamDescription(layout: layout, frameDuration: FrameTime(value: 1, timescale: 30), color: .bt709Video)
        }
    }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    static func temporaryDirectory() -> String {
        NSTemporaryDirectory() + "rewind-bench-" + UUID().uuidString
    }

    struct Spill {
        var overLZ4: Double
        var overCLI: Double?
        var megabytesPerSecond: Double
        var lz4MegabytesPerSecond: Double
        /// Raw MB/s at which the disk took the stored bytes (plain writes and `fdatasync`) ÷ the LZ4 reference.
        var diskOverLZ4: Double
    }

    /// Spill and reference LZ4 rates on `passes` × the footage, in `rounds` alternating rounds (each spill into a
    /// new store), best of each: on a shared machine the best round is the one least disturbed, for both sides.
    static func measureSpill(
        _ footage: Footage, passes: Int, rounds: Int = 3, workers: Int = System.onlineProcessorCount
    ) throws -> Spill {
        let frames = footage.count * passes
        let rawBytes = Double(frames * footage.layout.byteCount)
        var lz4Rate = 0.0
        var spillRate = 0.0
        var diskRate = 0.0
        var destination = [UInt8](repeating: 0, count: LZ4Block.compressBound(footage.layout.byteCount))
        // What earlier measurements wrote is written back first: the kernel would hold the spill's writes to the
        // disk's pace while it writes those back, and the reference writes nothing.
        sync()
        // As a recorder's spill does: the previous frame is still at hand (in the ring) for the delta.
        func view(_ i: Int, _ bytes: UnsafeRawBufferPointer) throws -> FrameView {
            let info = try FrameInfo(
                pts: FrameTime(value: Int64(i), timescale: 30), wallNanoseconds: 0, color: .bt709Video)
            return FrameView(layout: footage.layout, info: info, bytes: bytes)
        }
        for _ in 0..<rounds {
            // Reference: single-thread LZ4, one block per frame.
            let lz4Start = now()
            for i in 0..<frames {
                _ = footage.withFrame(i) { source in
                    destination.withUnsafeMutableBytes { LZ4Block.compress(source, into: $0) }
                }
            }
            lz4Rate = max(lz4Rate, rawBytes / (now() - lz4Start) / 1e6)

            let directory = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let store = try SegmentStore.open(directory: directory, options: StoreOptions(workerCount: workers))
            let writer = try store.makeWriter(streamName: "bench", stream: footage.stream)
            let start = now()
            for i in 0..<frames {
                try footage.withFrame(i) { bytes in
                    guard i > 0 else { return try writer.append(view(i, bytes)) }
                    try footage.withFrame(i - 1) { previous in
                        try writer.append(view(i, bytes), previous: view(i - 1, previous))
                    }
                }
            }
            try writer.sync()
            spillRate = max(spillRate, rawBytes / (now() - start) / 1e6)
            try writer.close()
            // The disk's share: the same stored bytes, written plainly into the same file system and synced.
            let stored = Int(try store.summary().storedBytes)
            let seconds = try RecorderBenchmarks.plainWrite(bytes: stored, to: directory + "/plain", syncing: true)
            diskRate = max(diskRate, rawBytes / seconds / 1e6)
        }
        var cli: Double?
        if let cliRate = try? lz4CommandRate(footage) { cli = spillRate / cliRate }
        return Spill(
            overLZ4: spillRate / lz4Rate, overCLI: cli, megabytesPerSecond: spillRate, lz4MegabytesPerSecond: lz4Rate,
            diskOverLZ4: diskRate / lz4Rate)
    }

    /// Raw MB/s of `lz4 -1` on the footage (file in, /dev/null out), best of three.
    static func lz4CommandRate(_ footage: Footage) throws -> Double {
        let path = temporaryDirectory() + ".raw"
        try Data(footage.bytes).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try lz4CommandRate(file: path, bytes: footage.bytes.count)
    }

    /// Raw MB/s of the `lz4 -1` command (single-threaded) compressing `file` to /dev/null, best of three.
    static func lz4CommandRate(file: String, bytes: Int) throws -> Double {
        var best = 0.0
        let tool = try ExternalTools.locate("lz4")
        for _ in 0..<3 {
            let start = now()
            let lz4 = try ChildProcess(path: tool, arguments: ["-1", "-q", "-f", file, "/dev/null"])
            let status = lz4.waitForExit()
            guard status == 0 else { throw BenchmarkError("lz4 -1 \(file) failed (exit status \(status))") }
            best = max(best, Double(bytes) / (now() - start) / 1e6)
        }
        return best
    }

    static func storedOverLZ4(_ footage: Footage) throws -> Double {
        var destination = [UInt8](repeating: 0, count: LZ4Block.compressBound(footage.layout.byteCount))
        var plain = 0
        for i in 0..<footage.count {
            plain += footage.withFrame(i) { source in
                destination.withUnsafeMutableBytes { LZ4Block.compress(source, into: $0) }
            }
        }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SegmentStore.open(directory: directory)
        let writer = try store.makeWriter(streamName: "bench", stream: footage.stream)
        for i in 0..<footage.count {
            try footage.withFrame(i) { bytes in
                let info = try FrameInfo(
                    pts: FrameTime(value: Int64(i), timescale: 30), wallNanoseconds: 0, color: .bt709Video)
                try writer.append(FrameView(layout: footage.layout, info: info, bytes: bytes))
            }
        }
        try writer.close()
        return Double(try store.summary().storedBytes) / Double(plain)
    }

    /// Median ms from asking for a 1 s range at random places in the middle half of the store to its first frame.
    static func timeToFirstFrame(seconds: Int, fps: Int32, trials: Int) throws -> Double {
        let layout = try FrameLayout(format: .gray8, width: 64, height: 48)
        let stream = StreamDescription(
            layout: layout, frameDuration: FrameTime(value: 1, timescale: fps), color: .unspecified)
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let frameCount = seconds * Int(fps)
        let duration = stream.frameDuration.nanoseconds!
        do {
            let store = try SegmentStore.open(directory: directory, options: StoreOptions(workerCount: 1))
            let writer = try store.makeWriter(streamName: "bench", stream: stream)
            var bytes = [UInt8](repeating: 0, count: layout.byteCount)
            for i in 0..<frameCount {
                for j in stride(from: i % 7, to: bytes.count, by: 7) { bytes[j] = UInt8(truncatingIfNeeded: i &+ j) }
                try bytes.withUnsafeBytes { raw in
                    let info = try FrameInfo(
                        pts: FrameTime(nanoseconds: Int64(i) * duration), wallNanoseconds: 0, color: .unspecified)
                    try writer.append(FrameView(layout: layout, info: info, bytes: raw))
                }
            }
            try writer.close()
            guard try store.summary().frames == frameCount else { throw SegmentStoreError.unknownStream("bench") }
        }
        let reader = try SegmentStore.openReadOnly(directory: directory)
        var times: [Double] = []
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<trials {
            let frame = Int.random(in: frameCount / 4..<frameCount * 3 / 4, using: &generator)
            let from = Int64(frame) * duration
            let start = now()
            var first = 0.0
            try reader.frames(in: from..<from + 1_000_000_000) { _ in
                first = now()
                return false
            }
            times.append((first - start) * 1000)
        }
        times.sort()
        return times[times.count / 2]
    }
}
