import RewindCapture
import Testing

@Suite struct RecordLoopOptionsTests {
    @Test func aLoopWaitsForTheSpillStageUnlessItRunsInRealTime() {
        #expect(RecordLoopOptions().spillLag == .wait)
        #expect(RecordLoopOptions(pacing: .realtime).spillLag == .drop)
        #expect(RecordLoopOptions(pacing: .realtime, spillLag: .wait).spillLag == .wait)
        #expect(RecordLoopOptions(pacing: .asFastAsPossible, spillLag: .drop).spillLag == .drop)
    }

    @Test func theDurationIsKeptInWholeNanoseconds() {
        var options = RecordLoopOptions(duration: .milliseconds(1500))
        #expect(options.duration == .milliseconds(1500))
        #expect(options.durationNanoseconds == 1_500_000_000)
        options.duration = Duration(secondsComponent: 1, attosecondsComponent: 1)
        #expect(options.duration == .seconds(1))
        options.duration = nil
        #expect(options.durationNanoseconds == nil)
    }

    @Test func endReasonsPrintTheirPhrases() {
        #expect(RecordLoopResult.EndReason.allCases.map(\.rawValue) == ["end of input", "stopped", "duration reached"])
        #expect("\(RecordLoopResult.EndReason.durationReached)" == "duration reached")
    }
}
