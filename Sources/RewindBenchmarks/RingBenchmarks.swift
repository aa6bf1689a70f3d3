import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindTesting
import SegmentStore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Benchmarks of the ring store's hot path, measured against references taken in the same run on the same bytes.
///
/// Keys (stable, read by `rewind bench --json`):
/// - `append_copy_over_memcpy`: median time of `append(copying:)` of a 1920x1080 NV12 frame (window eviction, slab
///   reuse, one copy) ÷ median time of one `memcpy` of the same bytes from the same source into a warmed buffer.
/// - `append_inplace_overhead_ns`: `reserve` + `commit` of a 1080p frame without filling it, per frame.
/// - `ring_ops_per_s_4k`: append-with-copy + evict cycles per second at 3840x2160 NV12.
///   The ring's window is one frame, so each append reuses the slab the previous frame just freed: the
///   destination is as warm as the reference's, and the ratio is the ring's own cost.
/// - `append_copy_ns_1080p`, `memcpy_ns_1080p`: the two medians behind the ratio.
/// - `append_copy_over_memcpy_rotating` (with `append_copy_ns_1080p_rotating`, `memcpy_ns_1080p_rotating`): the
///   same with an 8-frame window (8 slabs in turn) against `memcpy` rotating through 8 warmed buffers.
/// - `ring_ops_per_s_4k_inplace`: reserve + commit + evict cycles per second at 3840x2160 NV12.
public enum RingBenchmarks {
    /// Runs every ring benchmark.
    ///
    /// - Parameter quick: fewer iterations (seconds instead of tens of seconds), noisier figures.
    /// - Returns: figures by key.
    public static func run(quick: Bool) -> [String: Double] {
        var results: [String: Double] = [:]
        let iterations = quick ? 60 : 400
        let copy = appendCopyAgainstMemcpy(iterations: iterations, framesInWindow: 1, destinations: 1)
        results["append_copy_over_memcpy"] = copy.appendNanoseconds / copy.memcpyNanoseconds
        results["append_copy_ns_1080p"] = copy.appendNanoseconds
        results["memcpy_ns_1080p"] = copy.memcpyNanoseconds
        // A deeper ring writes each frame to a slab last touched frames ago (out of cache); so does the reference
        // here, rotating through as many warmed buffers as the ring has slabs in use.
        let deep = appendCopyAgainstMemcpy(iterations: iterations, framesInWindow: 8, destinations: 8)
        results["append_copy_over_memcpy_rotating"] = deep.appendNanoseconds / deep.memcpyNanoseconds
        results["append_copy_ns_1080p_rotating"] = deep.appendNanoseconds
        results["memcpy_ns_1080p_rotating"] = deep.memcpyNanoseconds
        results["append_inplace_overhead_ns"] = inPlaceOverhead(batches: quick ? 20 : 100, batchSize: 1_000)
        results["ring_ops_per_s_4k"] = operationsPerSecond4K(frames: quick ? 120 : 600, copying: true)
        results["ring_ops_per_s_4k_inplace"] = operationsPerSecond4K(frames: quick ? 2_000 : 20_000, copying: false)
        return results
    }

    // MARK: Benchmarks

    private static let frameStep: Int64 = 16_666_667  // 60 fps

    /// Times `append(copying:)` against `memcpy` of the same frame from the same source, interleaved.
    ///
    /// - Parameters:
    ///   - framesInWindow: the ring's window in frames; with 1, each append evicts the previous frame and reuses
    ///     its slab, so the ring writes to one warm destination, like the reference.
    ///   - destinations: how many warmed buffers the reference `memcpy` rotates through (1: always the same).
    private static func appendCopyAgainstMemcpy(iterations: Int, framesInWindow: Int, destinations: Int) -> (
        appendNanoseconds: Double, memcpyNanoseconds: Double
    ) {
        let layout = try! FrameLayout(format: .nv12, width: 1920, height: 1080)
        let source = makeFilledBuffer(byteCount: layout.byteCount)
        let targets = (0..<destinations).map { _ in makeFilledBuffer(byteCount: layout.byteCount) }
        defer {
            source.deallocate()
            for target in targets { target.deallocate() }
        }
        let planes = planeSources(layout: layout, base: UnsafeRawPointer(source.baseAddress!))
        let ring = makeRing(layout: layout, framesInWindow: framesInWindow)
        var pts: Int64 = 0
        for _ in 0..<32 {  // reach the steady state: every slab mapped, touched and reused
            _ = try! ring.append(copying: planes, layout: layout, info: info(pts))
            pts += frameStep
        }
        var appendTimes: [Double] = []
        var copyTimes: [Double] = []
        appendTimes.reserveCapacity(iterations)
        copyTimes.reserveCapacity(iterations)
        let clock = ContinuousClock()
        for iteration in 0..<iterations {
            let frameInfo = info(pts)
            pts += frameStep
            let target = targets[iteration % destinations]
            let copyStart = clock.now
            memcpy(target.baseAddress!, source.baseAddress!, layout.byteCount)
            copyTimes.append(nanoseconds(clock.now - copyStart))
            let appendStart = clock.now
            _ = try! ring.append(copying: planes, layout: layout, info: frameInfo)
            appendTimes.append(nanoseconds(clock.now - appendStart))
        }
        return (median(appendTimes), median(copyTimes))
    }

    private static func inPlaceOverhead(batches: Int, batchSize: Int) -> Double {
        let layout = try! FrameLayout(format: .nv12, width: 1920, height: 1080)
        let ring = makeRing(layout: layout, framesInWindow: 8)
        var pts: Int64 = 0
        func cycle() {
            let slab = ring.reserve(layout)!
            _ = try! ring.commit(slab, info: info(pts))
            pts += frameStep
        }
        for _ in 0..<32 { cycle() }
        let clock = ContinuousClock()
        var perFrame: [Double] = []
        for _ in 0..<batches {
            let start = clock.now
            for _ in 0..<batchSize { cycle() }
            perFrame.append(nanoseconds(clock.now - start) / Double(batchSize))
        }
        return median(perFrame)
    }

    private static func operationsPerSecond4K(frames: Int, copying: Bool) -> Double {
        let layout = try! FrameLayout(format: .nv12, width: 3840, height: 2160)
        let source = makeFilledBuffer(byteCount: layout.byteCount)
        defer { source.deallocate() }
        let planes = planeSources(layout: layout, base: UnsafeRawPointer(source.baseAddress!))
        let ring = makeRing(layout: layout, framesInWindow: 8)
        var pts: Int64 = 0
        func cycle() {
            if copying {
                _ = try! ring.append(copying: planes, layout: layout, info: info(pts))
            } else {
                let slab = ring.reserve(layout)!
                _ = try! ring.commit(slab, info: info(pts))
            }
            pts += frameStep
        }
        for _ in 0..<16 { cycle() }
        let evictedBefore = ring.statistics.evicted
        let clock = ContinuousClock()
        let start = clock.now
        for _ in 0..<frames { cycle() }
        let elapsed = nanoseconds(clock.now - start)
        precondition(ring.statistics.evicted - evictedBefore == UInt64(frames), "every append must evict one frame")
        return Double(frames) / (elapsed / 1e9)
    }

    // MARK: Helpers

    /// A ring whose window holds `framesInWindow` frames and whose budget has two slabs of slack, so the steady
    /// state is: the window evicts the oldest frame, its slab is reused for the new one.
    private static func makeRing(layout: FrameLayout, framesInWindow: Int) -> RingStore {
        let slab = (layout.byteCount + 4095) / 4096 * 4096
        let budget = (framesInWindow + 3) * slab
        let configuration = RingConfiguration(
            window: .nanoseconds(Int64(framesInWindow - 1) * frameStep), memoryBudget: budget, minimumBudget: slab)
        return RingStore(configuration: configuration, onEvict: { _ in })
    }

    private static func info(_ pts: Int64) -> FrameInfo {
        try! FrameInfo(pts: FrameTime(nanoseconds: pts), wallNanoseconds: pts, color: .bt709Video)
    }

    private static func planeSources(layout: FrameLayout, base: UnsafeRawPointer) -> PlaneSources {
        let luma = layout.plane(0)
        let chroma = layout.plane(1)
        return PlaneSources(
            PlaneSource(base: base, byteCount: luma.byteCount, bytesPerRow: luma.bytesPerRow),
            PlaneSource(base: base + chroma.offset, byteCount: chroma.byteCount, bytesPerRow: chroma.bytesPerRow))
    }

    private static func makeFilledBuffer(byteCount: Int) -> UnsafeMutableRawBufferPointer {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: byteCount, alignment: 64)
        var state: UInt32 = 0x1234_5678
        for index in 0..<byteCount {
            state = state &* 1_664_525 &+ 1_013_904_223
            buffer[index] = UInt8(truncatingIfNeeded: state >> 24)
        }
        return buffer
    }

    private static func nanoseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) * 1e9 + Double(attoseconds) / 1e9
    }

    private static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return .nan }
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }
}
