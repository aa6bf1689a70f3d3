import Foundation
import RewindCore
import Testing

@Suite struct LossReasonTests {
    @Test func rawValuesAreTheStoredStrings() {
        let expected: [LossReason: String] = [
            .memoryBudget: "memory budget", .pinnedFrames: "pinned frames", .spillBehind: "spill behind",
            .evictedBeforeSpill: "evicted before spill", .diskError: "disk error", .inputInterval: "input interval",
            .damaged: "damaged", .recorderStopped: "recorder stopped", .inputFailed: "input failed",
            .retention: "retention",
            .droppedOnArrival: "frames dropped on arrival", .unrecognized: "unrecognized",
        ]
        #expect(Set(LossReason.allCases) == Set(expected.keys))
        for reason in LossReason.allCases {
            #expect(reason.rawValue == expected[reason])
            #expect(LossReason(stored: reason.rawValue) == reason)
        }
    }

    @Test func onlyIntervalsWithoutOfferedFramesAreNoLoss() {
        #expect(
            LossReason.allCases.filter { !$0.isLoss } == [.inputInterval, .recorderStopped, .inputFailed, .retention])
        #expect(Set(LossReason.allCases.filter(\.isLossOfAcceptedFrames)) == [.evictedBeforeSpill, .diskError])
    }

    @Test func unknownTextReadsAsUnrecognized() throws {
        #expect(LossReason(stored: "shutter jammed") == .unrecognized)
        #expect(LossReason(stored: "") == .unrecognized)
        let decoded = try JSONDecoder().decode(
            [LossReason].self, from: Data(#"["spill behind", "shutter jammed"]"#.utf8))
        #expect(decoded == [.spillBehind, .unrecognized])
        let encoded = try JSONEncoder().encode([LossReason.evictedBeforeSpill])
        #expect(String(decoding: encoded, as: UTF8.self) == #"["evicted before spill"]"#)
    }

    @Test func ringDropReasonsMapToTheirLossReasons() {
        #expect(DropReason.memoryBudget.lossReason == .memoryBudget)
        #expect(DropReason.pinnedFrames.lossReason == .pinnedFrames)
    }

    @Test func dropsAreKeyedByRawValueForReports() {
        let drops: [LossReason: Int] = [.spillBehind: 3, .diskError: 1]
        #expect(drops.keyedByRawValue == ["spill behind": 3, "disk error": 1])
    }
}
