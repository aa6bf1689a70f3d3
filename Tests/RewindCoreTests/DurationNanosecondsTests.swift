import RewindCore
import Testing

@Suite struct DurationNanosecondsTests {
    @Test(arguments: [
        (Duration.zero, Int64(0)),
        (.nanoseconds(1), 1),
        (.nanoseconds(-1), -1),
        (.seconds(10), 10_000_000_000),
        (.seconds(-3), -3_000_000_000),
        (.milliseconds(1500), 1_500_000_000),
        (.nanoseconds(Int64.max), Int64.max),
        (.nanoseconds(Int64.min), Int64.min),
    ])
    func wholeNanosecondsConvertExactly(_ duration: Duration, _ nanoseconds: Int64) {
        #expect(duration.nanosecondsClamped == nanoseconds)
        #expect(Duration.nanoseconds(nanoseconds) == duration)
    }

    @Test func fractionsOfANanosecondTruncateTowardZero() {
        #expect(Duration(secondsComponent: 0, attosecondsComponent: 999_999_999).nanosecondsClamped == 0)
        #expect(Duration(secondsComponent: 0, attosecondsComponent: 1_999_999_999).nanosecondsClamped == 1)
        #expect(Duration(secondsComponent: 0, attosecondsComponent: -999_999_999).nanosecondsClamped == 0)
        #expect(Duration(secondsComponent: 0, attosecondsComponent: -1_999_999_999).nanosecondsClamped == -1)
        #expect(Duration.seconds(1.5e-9).nanosecondsClamped == 1)
        #expect(Duration(secondsComponent: -1, attosecondsComponent: 500_000_000).nanosecondsClamped == -999_999_999)
    }

    @Test func durationsBeyondInt64NanosecondsSaturate() {
        #expect(Duration.seconds(Int64.max).nanosecondsClamped == Int64.max)
        #expect(Duration.seconds(Int64.min).nanosecondsClamped == Int64.min)
        #expect((Duration.nanoseconds(Int64.max) + .nanoseconds(1)).nanosecondsClamped == Int64.max)
        #expect((Duration.nanoseconds(Int64.min) - .nanoseconds(1)).nanosecondsClamped == Int64.min)
        // 10 000 years is about 3.2e20 ns.
        #expect(Duration.seconds(10_000 * 365 * 86_400).nanosecondsClamped == Int64.max)
    }

    @Test func theLastDurationEndsAtTheNewestPTSInclusive() {
        #expect(Range(last: .nanoseconds(5), endingAt: 100) == 96..<101)
        #expect(Range(last: .zero, endingAt: 100).isEmpty)
        #expect(Range(last: .nanoseconds(-5), endingAt: 100).isEmpty)
        #expect(Range(last: .seconds(Int64.max), endingAt: 100) == (101 - Int64.max)..<101)
        #expect(Range(last: .seconds(Int64.max), endingAt: -100) == Int64.min..<(-99))
        #expect(Range(last: .nanoseconds(1), endingAt: Int64.max) == (Int64.max - 1)..<Int64.max)
        #expect(Range(last: .seconds(1), endingAt: Int64.min) == Int64.min..<(Int64.min + 1))
    }
}
