import Foundation
import RewindCore
import RewindSoak
import RewindTesting
import Testing

/// Runs of the soak harness in process, at their edges.
@Suite(.timeLimit(.minutes(45))) struct SoakRunTests {
    /// A run stopped before its first frame checked nothing, and says so instead of passing: it is a stopped run
    /// (`STOPPED`, exit 130), not a failed one.
    @Test func aRunThatReadNothingBackDoesNotPass() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let configuration = SoakConfiguration(
            layout: try FrameLayout(format: .nv12, width: 320, height: 240),
            frameDuration: FrameTime(value: 1, timescale: 30), duration: .seconds(2), memoryBudget: 8 << 20,
            window: .seconds(1), storeDirectory: directory.path)
        let report = try Soak.run(configuration, shouldStop: { true })
        #expect(report.framesProduced == 0)
        #expect(!report.passed && report.endReason == .stopped)
        // (The resident size is the whole test process's, which other tests share: only this check is asserted.)
        #expect(!report.failedInvariants.contains("frames_bit_exact"), "\(report.failedInvariants)")
        let detail = report.invariants.first { $0.name == "frames_bit_exact" }?.detail ?? ""
        #expect(detail.contains("nothing was checked before the run was stopped"), "\(detail)")
    }

    /// The budget must hold 8 frames in whole pages (a 64x2 frame of 192 bytes takes a page): the advice is a size
    /// the command line reads.
    @Test func aBudgetOfFewerThanEightPageRoundedFramesIsRefused() throws {
        let layout = try FrameLayout(format: .nv12, width: 64, height: 2)
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let small = SoakConfiguration(
            layout: layout, frameDuration: FrameTime(value: 1, timescale: 30), duration: .seconds(2),
            memoryBudget: 4095, diskBudget: nil, storeDirectory: "/nonexistent")
        #expect {
            try small.validate()
        } throws: { error in
            "\(error)".contains("give at least --memory \(8 * page / 1024)KiB")
        }
        var enough = small
        enough.memoryBudget = 8 * page
        try enough.validate()
    }
}
