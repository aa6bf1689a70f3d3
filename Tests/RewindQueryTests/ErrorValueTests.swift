import RewindCore
import RewindQuery
import SegmentStore
import Testing

@Suite struct QueryErrorValueTests {
    @Test func clipErrorsNameTheirTimesWithoutOptionNames() {
        let cases: [(ClipError, [String])] = [
            (.badRange(from: 3_000_000_000, to: 1_000_000_000), ["3.000s", "1.000s", "is empty"]),
            (
                .empty(range: 5_000_000_000..<6_000_000_000, held: 0...966_000_000),
                ["no frames in [5.000s, 6.000s)", "the store holds 0.000s … 0.966s"]
            ),
            (
                // A range that starts a nanosecond after the last frame held reads as later than that frame.
                .empty(range: 2_966_666_668..<3_500_000_000, held: 0...2_966_666_667),
                ["no frames in [2966666668ns, 3.500s)", "the store holds 0.000s … 2966666667ns"]
            ),
            (.badRange(from: 1_000_400_000, to: 1_000_000_000), ["[1000400000ns, 1000000000ns) is empty"]),
            (.empty(range: 0..<1, held: nil), ["the store holds no frames"]),
            (
                // A range starting a nanosecond after the kept frame a gap starts at reads apart from the gap.
                .empty(
                    range: 2_066_666_667..<2_100_000_000, held: 0...5_000_000_000,
                    lost: [
                        GapRow(
                            streamID: 1, startNanoseconds: 2_066_666_666, endNanoseconds: 3_000_000_000,
                            reason: .damaged)
                    ]),
                ["no frames in [2066666667ns, 2.100s)", "its frames were lost (2066666666ns … 3.000s (damaged))"]
            ),
            (.noFrames(source: "recorder"), ["recorder holds no frames"]),
            (.nonPositiveDuration(.zero), ["0.000s"]),
        ]
        for (error, facts) in cases {
            for fact in facts { #expect("\(error)".contains(fact), "'\(fact)' missing in: \(error)") }
            for word in ["rewind ", "--", "run '", "'to'", "'from'"] {
                #expect(!"\(error)".contains(word), "'\(word)' in: \(error)")
            }
        }
    }

    @Test func valueErrorsKeepTheInputAndWhatWasExpected() {
        let error = ValueError(input: "5x", expected: "a duration like 5s")
        #expect(error.input == "5x" && error.expected == "a duration like 5s" && error.suggestion == nil)
        #expect(!"\(error)".contains("--"))
    }
}
