import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore

/// Benchmarks of the whole recorder and of exports, each as a ratio against a reference measured in the same run.
///
/// Keys: `record_y4m_over_lz4` (raw MB/s of `rewind record` on a 1080p Y4M file with eager spill ÷ `lz4 -1` on the
/// same file), `drops_1080p60` and `drops_4k30` (frames dropped while recording a synthetic NV12 camera in real
/// time with eager spill), `export_over_write` (time to export a clip from disk to `.y4m` ÷ time of a plain
/// sequential write of the same number of bytes), `save_pin_ms` (request → last 5 s of 1080p60 pinned in memory,
/// median of 21 requests) and `save_over_write` (saving those frames to `.y4m` ÷ a plain write of the same bytes).
/// Exports reserve their file's disk blocks ahead of the writes, which alone makes writing about a third faster on
/// ext4, so `export_over_reserved_write` and `save_over_reserved_write` also compare against a write that reserves
/// them the same way: what the export's own work costs. The plain write repeats one 1 MiB buffer, which stays in the
/// CPU's cache; `export_over_memory_write` compares against writing the exported file's own bytes from memory
/// instead, 1 MiB at a time (a copy of 933 MB that has to come from RAM). `export_cpu_floor_over_write` is the
/// export's process CPU time ÷ 2 cores ÷ the plain write: the ratio it would reach with both cores busy throughout.
/// Several streams: `drops_4x1080p30` (frames dropped while one recorder records four synthetic 1080p30 NV12
/// cameras in real time, each from its own thread, under one budget with eager spill) and `save_all_over_write`
/// (saving the last 5 s of the four streams into one `.mkv` ÷ a plain write of the same frames' bytes).
public enum RecorderBenchmarks {
    /// Runs the benchmarks of recording a file and exporting from disk: `record_y4m_over_lz4`,
    /// `export_over_write`.
    ///
    /// - Parameter quick: 120 frames instead of 300.
    /// - Returns: figures by key.
    public static func runFileRecording(quick: Bool) throws -> [String: Double] {
        var results: [String: Double] = [:]
        let directory = try benchDirectory("file")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let hd = try FrameLayout(format: .nv12, width: 1920, height: 1080)
        let file = directory + "/input.y4m"
        let frames = quick ? 120 : 300
        try writeY4M(layout: hd, frames: frames, to: file)
        results["record_y4m_over_lz4"] = try recordFileOverLZ4(file, directory: directory + "/file")
        try? FileManager.default.removeItem(atPath: file)

        // Export from disk: the file store holds `frames` frames of 1080p; export them all to .y4m. Best of five
        // runs each, alternating with the reference, so both see the same page-cache and writeback conditions.
        // The gigabytes written before (the input file, the earlier benchmarks) are written back first: flushing
        // them takes CPU the export's two threads need, and the one-thread reference hardly notices.
        sync()
        let store = try SegmentStore.openReadOnly(directory: directory + "/file")
        let source = ClipSource.store(store, stream: try store.streams()[0])
        let exportPath = directory + "/export.y4m"
        var exportTime = Double.infinity
        var exportWrite = Double.infinity
        var exportReservedWrite = Double.infinity
        var exportDecode = Double.infinity
        var exportDecodeOneThread = Double.infinity
        // Process CPU time (all threads, user + system) of the decode alone, the export and the plain write: with
        // both cores busy all the time, the export would take its CPU time ÷ 2.
        var exportDecodeCPU = Double.infinity
        var exportCPU = Double.infinity
        var exportWriteCPU = Double.infinity
        let decodeBuffers = DecodeBuffers(byteCount: hd.byteCount, count: 5)
        var exportedBytes: UnsafeMutableRawBufferPointer?
        defer { exportedBytes?.deallocate() }
        var exportFromMemory = Double.infinity
        for _ in 0..<5 {
            // The decode alone with two threads (each frame shared out throughout; the export switches by who
            // waits), nothing written.
            let decodeStart = ContinuousClock.now
            var cpuStart = processCPUSeconds()
            try store.frames(in: 0..<Int64.max, into: decodeBuffers, decodeThreads: 2) { _ in true }
            exportDecode = min(exportDecode, seconds(ContinuousClock.now - decodeStart))
            exportDecodeCPU = min(exportDecodeCPU, processCPUSeconds() - cpuStart)
            // And on one thread: the CPU time the decode needs when no second thread waits on the first.
            let oneStart = ContinuousClock.now
            try store.frames(in: 0..<Int64.max, into: decodeBuffers, decodeThreads: 1) { _ in true }
            exportDecodeOneThread = min(exportDecodeOneThread, seconds(ContinuousClock.now - oneStart))
            let start = ContinuousClock.now
            cpuStart = processCPUSeconds()
            let exported = try source.export(range: 0..<Int64.max, format: .y4m, to: .path(exportPath))
            exportTime = min(exportTime, seconds(ContinuousClock.now - start))
            exportCPU = min(exportCPU, processCPUSeconds() - cpuStart)
            // The exported file's bytes, read into memory once: the reference that writes the same bytes.
            if exportedBytes == nil { exportedBytes = try readWhole(exportPath) }
            try? FileManager.default.removeItem(atPath: exportPath)
            exportFromMemory = min(
                exportFromMemory, try plainWrite(UnsafeRawBufferPointer(exportedBytes!), to: exportPath))
            cpuStart = processCPUSeconds()
            exportWrite = min(exportWrite, try plainWrite(bytes: Int(exported.bytes), to: exportPath))
            exportWriteCPU = min(exportWriteCPU, processCPUSeconds() - cpuStart)
            exportReservedWrite = min(
                exportReservedWrite, try plainWrite(bytes: Int(exported.bytes), to: exportPath, reserving: true))
        }
        results["export_over_write"] = exportTime / exportWrite
        results["export_over_memory_write"] = exportTime / exportFromMemory
        results["export_memory_write_ms"] = exportFromMemory * 1000
        results["export_over_reserved_write"] = exportTime / exportReservedWrite
        results["export_ms"] = exportTime * 1000
        results["export_write_ms"] = exportWrite * 1000
        results["export_decode_ms"] = exportDecode * 1000
        results["export_cpu_ms"] = exportCPU * 1000
        results["export_decode_cpu_ms"] = exportDecodeCPU * 1000
        results["export_write_cpu_ms"] = exportWriteCPU * 1000
        results["export_decode_one_thread_ms"] = exportDecodeOneThread * 1000
        results["export_cpu_floor_over_write"] = exportCPU / 2 / exportWrite
        return results
    }

    /// Runs the benchmarks of live recording and saving from memory: `drops_1080p60`, `drops_4k30`, `drops_4k60`
    /// (with `spill_raw_fraction_4k60`, `stored_gib_4k60`, `stored_over_raw_4k60`, and the synthetic camera's own
    /// `synthetic_render_ms_4k` per frame and `synthetic_render_cores_4k60`), `save_pin_ms`, `save_over_write`,
    /// `mp4_save_over_realtime` (the last 5 s of 1080p60 saved to `.mp4` at `fast` quality ÷ 5 s).
    ///
    /// - Parameter quick: 3 s of real time per camera instead of 10 s.
    /// - Returns: figures by key.
    public static func runLive(quick: Bool) throws -> [String: Double] {
        var results: [String: Double] = [:]
        let directory = try benchDirectory("live")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let hd = try FrameLayout(format: .nv12, width: 1920, height: 1080)
        let uhd = try FrameLayout(format: .nv12, width: 3840, height: 2160)
        let liveSeconds: Int64 = quick ? 3 : 10
        results["drops_4k30"] = Double(
            try recordLive(layout: uhd, fps: 30, seconds: liveSeconds, directory: directory + "/live4k").drops)
        // 4K60 with 2 GiB: compression cannot keep up on two cores, so chunks are stored raw rather than frames
        // dropped. The synthetic camera's own cost (rendering into a slab) is measured apart.
        let live4k60 = try recordLive(
            layout: uhd, fps: 60, seconds: liveSeconds, directory: directory + "/live4k60", memoryBudget: 2 << 30)
        let statistics = try live4k60.recorder.finish()
        results["drops_4k60"] = Double(live4k60.drops)
        results["spill_raw_fraction_4k60"] =
            Double(statistics.rawChunkBytesSpilled) / Double(max(1, statistics.rawBytesSpilled))
        if let summary = try live4k60.recorder.store?.summary() {
            results["stored_gib_4k60"] = Double(summary.storedBytes) / Double(1 << 30)
            results["stored_over_raw_4k60"] = Double(summary.storedBytes) / Double(max(1, summary.rawBytes))
        }
        results["synthetic_render_ms_4k"] = syntheticRenderMilliseconds(layout: uhd, frames: 60)
        results["synthetic_render_cores_4k60"] = results["synthetic_render_ms_4k"]! * 60 / 1000
        try? FileManager.default.removeItem(atPath: directory + "/live4k60")
        let live = try recordLive(layout: hd, fps: 60, seconds: liveSeconds, directory: directory + "/live1080")
        results["drops_1080p60"] = Double(live.drops)

        // Save the last 5 s from a live recorder's memory. The reference writes the same pinned frames' bytes
        // straight to a file with plain write(2) calls: the same bytes, from the same memory.
        let recorder = live.recorder
        // Request → pinned: the median of 21 requests (each resolves the range and pins 300 frames).
        var pinTimes: [Double] = []
        for _ in 0..<21 {
            let pinStart = ContinuousClock.now
            guard let range = try recorder.lastRange(.seconds(5)) else { throw BenchmarkError("nothing recorded") }
            let pinned = recorder.ring.pin(range)
            pinTimes.append(seconds(ContinuousClock.now - pinStart) * 1000)
            pinned.release()
        }
        results["save_pin_ms"] = pinTimes.sorted()[pinTimes.count / 2]
        guard let range = try recorder.lastRange(.seconds(5)) else { throw BenchmarkError("nothing recorded") }
        let snapshot = recorder.ring.pin(range)
        defer { snapshot.release() }
        let savePath = directory + "/save.y4m"
        var saveTime = Double.infinity
        var saveWrite = Double.infinity
        var saveReservedWrite = Double.infinity
        for _ in 0..<5 {
            let start = ContinuousClock.now
            let saved = try ClipSource.recorder(recorder).export(range: range, format: .y4m, to: .path(savePath))
            saveTime = min(saveTime, seconds(ContinuousClock.now - start))
            try? FileManager.default.removeItem(atPath: savePath)
            results["save_frames"] = Double(saved.frames)
            saveWrite = min(saveWrite, try plainWrite(snapshot, to: savePath))
            saveReservedWrite = min(saveReservedWrite, try plainWrite(snapshot, to: savePath, reserving: true))
        }
        results["save_over_write"] = saveTime / saveWrite
        results["save_over_reserved_write"] = saveTime / saveReservedWrite
        results["save_ms"] = saveTime * 1000
        results["save_write_ms"] = saveWrite * 1000
        // The same 5 s saved to .mp4 at the default (`fast`) quality, against the clip's own duration.
        let mp4Path = directory + "/save.mp4"
        let mp4Start = ContinuousClock.now
        let mp4 = try ClipSource.recorder(recorder).export(range: range, format: .mp4, to: .path(mp4Path))
        let mp4Seconds = seconds(ContinuousClock.now - mp4Start)
        try? FileManager.default.removeItem(atPath: mp4Path)
        let clipSeconds = Double(mp4.frames) / 60
        results["mp4_save_ms"] = mp4Seconds * 1000
        results["mp4_save_over_realtime"] = mp4Seconds / clipSeconds
        try recorder.finish()
        try results.merge(runFourStreams(seconds: liveSeconds, directory: directory + "/four")) { $1 }
        return results
    }

    /// Four 1080p30 streams in one recorder: `drops_4x1080p30` and `save_all_over_write`.
    static func runFourStreams(seconds liveSeconds: Int64, directory: String) throws -> [String: Double] {
        var results: [String: Double] = [:]
        let hd = try FrameLayout(format: .nv12, width: 1920, height: 1080)
        let store = try SegmentStore.open(directory: directory)
        let cameras = (0..<4).map { index in
            SyntheticCamera(layout: hd, frameDuration: FrameTime(value: 1, timescale: 30), seed: UInt64(index + 1))
        }
        let recorder = try Recorder(
            streams: cameras.enumerated().map {
                RecorderStreamSpec(name: "camera\($0.offset)", stream: $0.element.stream)
            },
            store: store, configuration: RecorderConfiguration(window: .seconds(6), memoryBudget: 2560 << 20))
        // A thread per camera, as `rewind record` reads each input (a dispatch queue may start some late).
        let done = DispatchSemaphore(value: 0)
        for (camera, stream) in zip(cameras, recorder.streams) {
            nonisolated(unsafe) var source = camera
            let thread = Thread {
                _ = try? stream.record(
                    from: &source,
                    options: RecordLoopOptions(pacing: .realtime, duration: .seconds(liveSeconds), spillLag: .drop))
                done.signal()
            }
            thread.start()
        }
        for _ in cameras { done.wait() }
        while recorder.streams.contains(where: { $0.unspilledFrames > 0 }) { usleep(1000) }
        results["drops_4x1080p30"] = Double(recorder.streams.reduce(0) { $0 + $1.statistics.totalDrops })
        // By reason too (`drops_4x1080p30_spill_behind`, …), so a run that drops says why.
        for stream in recorder.streams {
            for (reason, count) in stream.statistics.drops {
                let key = "drops_4x1080p30_" + reason.rawValue.replacingOccurrences(of: " ", with: "_")
                results[key, default: 0] += Double(count)
            }
        }

        // Save the last 5 s of every stream into one Matroska file; the reference writes the same frames' bytes.
        let set = try StreamSet(recorder: recorder)
        guard let range = try set.lastRange(.seconds(min(5, liveSeconds))) else {
            throw BenchmarkError("nothing recorded")
        }
        let snapshots = set.members.enumerated().map { index, member in
            recorder.streams[index].ring.pin(member.clock.ptsRange(range))
        }
        defer { for snapshot in snapshots { snapshot.release() } }
        let savePath = directory + "/save-all.mkv"
        var saveTime = Double.infinity
        var saveWrite = Double.infinity
        for _ in 0..<3 {
            let start = ContinuousClock.now
            let saved = try set.export(range: range, format: .matroska, to: .path(savePath))
            saveTime = min(saveTime, seconds(ContinuousClock.now - start))
            results["save_all_frames"] = Double(saved.reduce(0) { $0 + $1.frames })
            try? FileManager.default.removeItem(atPath: savePath)
            saveWrite = min(saveWrite, try plainWrite(snapshots, to: savePath))
        }
        results["save_all_over_write"] = saveTime / saveWrite
        results["save_all_ms"] = saveTime * 1000
        results["save_all_write_ms"] = saveWrite * 1000
        try recorder.finish()
        return results
    }

    /// A fresh folder for one part's files, under the temporary directory (the caller removes it).
    static func benchDirectory(_ label: String) throws -> String {
        let directory = NSTemporaryDirectory() + "rewind-bench-\(label)-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    struct LiveRun {
        let recorder: Recorder
        let drops: Int
    }

    /// Records a synthetic camera in real time with eager spill; the recorder stays open for the save benchmark.
    static func recordLive(
        layout: FrameLayout, fps: Int32, seconds: Int64, directory: String, memoryBudget: Int = 1536 << 20
    ) throws -> LiveRun {
        let store = try SegmentStore.open(directory: directory)
        var camera = SyntheticCamera(layout: layout, frameDuration: FrameTime(value: 1, timescale: fps))
        let recorder = try Recorder(
            stream: camera.stream, store: store,
            configuration: RecorderConfiguration(window: .seconds(6), memoryBudget: memoryBudget))
        try recorder.record(
            from: &camera,
            options: RecordLoopOptions(pacing: .realtime, duration: .seconds(seconds), spillLag: .drop))
        while recorder.unspilledFrames > 0 { usleep(1000) }
        return LiveRun(recorder: recorder, drops: recorder.statistics.totalDrops)
    }

    /// Milliseconds the synthetic camera takes to render one frame of `layout` into a buffer (the mean over
    /// `frames` frames, after one to warm up): the source's own cost, apart from the pipeline's.
    static func syntheticRenderMilliseconds(layout: FrameLayout, frames: Int) -> Double {
        let camera = SyntheticCamera(layout: layout, frameDuration: FrameTime(value: 1, timescale: 60))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: layout.byteCount, alignment: 64)
        defer { buffer.deallocate() }
        _ = try? camera.frame(at: 0, into: buffer)
        let start = ContinuousClock.now
        for index in 1...frames { _ = try? camera.frame(at: Int64(index), into: buffer) }
        return seconds(ContinuousClock.now - start) * 1000 / Double(frames)
    }

    /// Writes `frames` synthetic frames as YUV4MPEG2 (NV12 becomes I420).
    static func writeY4M(layout: FrameLayout, frames: Int, to path: String) throws {
        var camera = SyntheticCamera(
            layout: layout, frameDuration: FrameTime(value: 1, timescale: 60), frameCount: frames)
        let writer = try Y4MWriter(stream: camera.stream, destination: .path(path))
        var buffer = [UInt8](repeating: 0, count: layout.byteCount)
        while let info = try buffer.withUnsafeMutableBytes({ try camera.readFrame(into: $0) }) {
            try buffer.withUnsafeBytes { try writer.write(FrameView(layout: layout, info: info, bytes: $0)) }
        }
        _ = try writer.finish()
    }

    /// CPU seconds this process has used so far, user and system, all threads.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
            + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    /// Raw MB/s of recording `file` with eager spill ÷ raw MB/s of `lz4 -1` on the same file.
    static func recordFileOverLZ4(_ file: String, directory: String) throws -> Double {
        let bytes = Double((try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0)
        // The input file and the earlier benchmarks' files are written back first: while the disk still takes
        // gigabytes of them, the kernel holds the recorder's writes to its pace, and `lz4 -1` (writing to
        // /dev/null) would not notice.
        sync()
        let store = try SegmentStore.open(directory: directory)
        var reader = try Y4MReader(path: file)
        let recorder = try Recorder(
            stream: reader.stream, store: store, configuration: RecorderConfiguration(memoryBudget: 1024 << 20))
        let start = ContinuousClock.now
        try recorder.record(from: &reader)
        try recorder.finish()
        let recordRate = bytes / seconds(ContinuousClock.now - start) / 1e6
        return recordRate / (try StoreBenchmarks.lz4CommandRate(file: file, bytes: Int(bytes)))
    }

    /// Seconds to write the bytes of every frame of `snapshot` to `path`, one plain `write(2)` per frame.
    ///
    /// - Parameter reserving: reserve the file's disk blocks first, as exports do.
    static func plainWrite(_ snapshot: RingSnapshot, to path: String, reserving: Bool = false) throws -> Double {
        try plainWrite([snapshot], to: path, reserving: reserving)
    }

    /// Seconds to write the bytes of every frame of `snapshots` to `path`, one plain `write(2)` per frame.
    ///
    /// - Parameter reserving: reserve the file's disk blocks first, as exports do.
    static func plainWrite(_ snapshots: [RingSnapshot], to path: String, reserving: Bool = false) throws -> Double {
        var total = 0
        if reserving {
            for snapshot in snapshots {
                for index in 0..<snapshot.count {
                    total += snapshot.withFrame(at: index) { view, _ in view.bytes.count }
                }
            }
        }
        return try timedWrite(to: path, reserving: total) { fd in
            for snapshot in snapshots {
                for index in 0..<snapshot.count {
                    snapshot.withFrame(at: index) { view, _ in writeAll(fd, view.bytes, pieceLimit: view.bytes.count) }
                }
            }
        }
    }

    /// Seconds to write `bytes` bytes to `path` with plain 1 MiB `write(2)` calls of one buffer (the reference).
    ///
    /// - Parameters:
    ///   - reserving: reserve the file's disk blocks first, as exports do.
    ///   - syncing: end with `fdatasync(2)`, as a spill that ends with a sync does (the time the disk takes them).
    static func plainWrite(bytes: Int, to path: String, reserving: Bool = false, syncing: Bool = false) throws -> Double
    {
        let chunk = [UInt8](repeating: 0x5A, count: 1 << 20)
        return try timedWrite(to: path, reserving: reserving ? bytes : 0, syncing: syncing) { fd in
            var left = bytes
            while left > 0 {
                let count = min(left, chunk.count)
                let written = chunk.withUnsafeBytes { write(fd, $0.baseAddress, count) }
                guard written > 0 else { break }
                left -= written
            }
        }
    }

    /// Seconds to write `source` to `path` with plain 1 MiB `write(2)` calls.
    static func plainWrite(_ source: UnsafeRawBufferPointer, to path: String) throws -> Double {
        try timedWrite(to: path, reserving: 0) { fd in writeAll(fd, source, pieceLimit: 1 << 20) }
    }

    /// Seconds to create `path`, reserve `reserving` bytes of disk blocks (when not 0), run `body` with the
    /// descriptor, `fdatasync` it when `syncing` (a failed sync throws) and close it; the file is removed afterwards,
    /// outside the time.
    private static func timedWrite(
        to path: String, reserving: Int, syncing: Bool = false, _ body: (Int32) -> Void
    ) throws -> Double {
        let start = ContinuousClock.now
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw BenchmarkError("cannot open \(path)") }
        if reserving > 0 { _ = try? POSIXFileSystem().reserve(fd, offset: 0, length: Int64(reserving), path: path) }
        body(fd)
        if syncing && fdatasync(fd) != 0 {
            let reason = String(cString: strerror(errno))
            close(fd)
            try? FileManager.default.removeItem(atPath: path)
            throw BenchmarkError("cannot sync \(path): \(reason)")
        }
        close(fd)
        let elapsed = seconds(ContinuousClock.now - start)
        try? FileManager.default.removeItem(atPath: path)
        return elapsed
    }

    /// Writes all of `bytes` to `fd` with plain `write(2)` calls of at most `pieceLimit` bytes.
    private static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, pieceLimit: Int) {
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, min(bytes.count - offset, pieceLimit))
            guard written > 0 else { break }
            offset += written
        }
    }

    /// The whole file at `path`, read into memory.
    static func readWhole(_ path: String) throws -> UnsafeMutableRawBufferPointer {
        let fileSystem = POSIXFileSystem()
        let fd = try fileSystem.open(path, flags: O_RDONLY, mode: 0)
        defer { fileSystem.close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(
            byteCount: Int(try fileSystem.size(fd, path: path)), alignment: 64)
        do {
            guard try fileSystem.readAll(fd, into: buffer, offset: 0, path: path) == buffer.count else {
                throw BenchmarkError("\(path) got shorter while it was read")
            }
        } catch {
            buffer.deallocate()
            throw error
        }
        return buffer
    }

    static func seconds(_ duration: Duration) -> Double {
        let (whole, fraction) = duration.components
        return Double(whole) + Double(fraction) / 1e18
    }
}

/// A benchmark that could not run.
public struct BenchmarkError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }

    /// Whether `error` says a tool a figure is measured against (ffmpeg, lz4) is not installed.
    public static func isMissingTool(_ error: any Error) -> Bool { error is ExternalTools.Missing }
}
