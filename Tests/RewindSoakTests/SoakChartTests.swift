import Foundation
import RewindCore
import Testing

@testable import RewindSoak

/// The chart of a soak, drawn by hand.
@Suite struct SoakChartTests {
    /// Event labels go in the first of the four rows where they clear the label before them: a long label early on
    /// and four short ones after it (the fifth in time beside the first) stay apart, where taking rows in turn put
    /// the fifth over the first (events close together in wall time, at max speed).
    @Test func eventLabelsDoNotOverlapWhereARowIsFree() throws {
        var report = SoakReport(
            configuration: SoakConfiguration(
                layout: try FrameLayout(format: .nv12, width: 320, height: 240),
                frameDuration: FrameTime(value: 1, timescale: 30), duration: .seconds(85), storeDirectory: "/none"))
        // 850 px of plot for 85 s: 10 px a second.
        report.wallNanoseconds = 85_000_000_000
        report.streamNanoseconds = 85_000_000_000
        let second: Int64 = 1_000_000_000
        for (at, event) in [
            (0, "pressure=critical"), (1, "disk=ok"), (2, "disk=ok"), (3, "disk=ok"), (11, "disk=ok"),
        ] {
            report.events.append(
                SoakReport.Event(
                    at: Int64(at) * second, event: event, wallNanoseconds: Int64(at) * second, rssBeforeBytes: 0,
                    rssBytes: 0))
        }
        let svg = SoakChart.svg(report)
        // Each label's row (its y) and its extent at about 6.6 px a character of 11 px text.
        let pattern = try Regex(
            #"<text x='([0-9.]+)' y='([0-9.]+)' stroke='none' fill='#7b2cbf' font-size='11'>([^<]*)</text>"#)
        var labels: [(y: String, from: Double, to: Double)] = []
        for match in svg.matches(of: pattern) {
            let x = try #require(Double(String(match.output[1].substring!)))
            let text = String(match.output[3].substring!)
            labels.append((String(match.output[2].substring!), x, x + Double(text.count) * 6.6))
        }
        #expect(labels.count == 5, "\(labels)")
        for (index, label) in labels.enumerated() {
            for other in labels[(index + 1)...] where other.y == label.y {
                #expect(other.from >= label.to || other.to <= label.from, "\(label) and \(other) overlap")
            }
        }
    }
}
