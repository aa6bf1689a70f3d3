import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindTesting
import SegmentStore

/// Draws a soak report as an SVG chart: resident memory over time, with the budget, the limit (budget + 48 MiB),
/// the reduced limits while memory pressure lasts, the ring's mapped bytes, and a marker for every event.
///
/// Plain SVG 1.1 written by hand; any browser or image viewer shows it.
public enum SoakChart {
    static let width = 960.0
    static let height = 600.0
    static let plot = (left: 80.0, right: 930.0, top: 120.0, bottom: 500.0)
    static let mebibyte = 1_048_576.0

    /// The chart of `report`.
    ///
    /// - Complexity: O(samples + events).
    public static func svg(_ report: SoakReport) -> String {
        let samples = report.samples.sorted { $0.wallNanoseconds < $1.wallNanoseconds }
        let end = max(Double(samples.last?.wallNanoseconds ?? 0), Double(report.wallNanoseconds), 1e9) / 1e9
        let top =
            Double([report.limitBytes, report.maxRSSBytes, samples.map(\.ringBytes).max() ?? 0].max()!) / mebibyte
            * 1.08
        // Time ends with the run; memory goes up to the round tick above the highest line.
        let xTicks = ticks(upTo: end).filter { $0 <= end }
        let yTicks = ticks(upTo: top)
        let xMax = end
        let yMax = yTicks.last ?? top
        func x(_ seconds: Double) -> Double { plot.left + (plot.right - plot.left) * seconds / xMax }
        func y(_ mebibytes: Double) -> Double { plot.bottom - (plot.bottom - plot.top) * mebibytes / yMax }
        func xWall(_ nanoseconds: Int64) -> Double { x(Double(nanoseconds) / 1e9) }
        func yBytes(_ bytes: Int) -> Double { y(Double(bytes) / mebibyte) }

        var svg: [String] = [
            "<?xml version='1.0' encoding='UTF-8'?>",
            "<svg xmlns='http://www.w3.org/2000/svg' version='1.1' width='\(Int(width))' height='\(Int(height))' "
                + "viewBox='0 0 \(Int(width)) \(Int(height))' font-family='sans-serif' font-size='12'>",
            "<rect width='100%' height='100%' fill='white'/>",
            "<text x='\(plot.left)' y='22' font-size='15' font-weight='bold'>\(title(report).escapingMarkup)</text>",
            "<text x='\(plot.left)' y='40' fill='#444'>\(settings(report).escapingMarkup)</text>",
            "<text x='\(plot.left)' y='56' fill='#444'>\(figures(report).escapingMarkup)</text>",
        ]
        // Grid, ticks and axis titles.
        svg.append("<g class='grid' stroke='#e4e4e4' stroke-width='1'>")
        for tick in xTicks { svg.append(line(x(tick), plot.top, x(tick), plot.bottom)) }
        for tick in yTicks { svg.append(line(plot.left, y(tick), plot.right, y(tick))) }
        svg.append("</g>")
        svg.append("<g class='axes' fill='#222'>")
        for tick in xTicks {
            svg.append("<text x='\(f(x(tick)))' y='\(f(plot.bottom + 18))' text-anchor='middle'>\(label(tick))</text>")
        }
        for tick in yTicks {
            svg.append("<text x='\(f(plot.left - 8))' y='\(f(y(tick) + 4))' text-anchor='end'>\(label(tick))</text>")
        }
        svg.append(
            "<text x='\(f((plot.left + plot.right) / 2))' y='\(f(plot.bottom + 40))' text-anchor='middle'>"
                + "time since the start (s)</text>")
        svg.append(
            "<text transform='translate(22 \(f((plot.top + plot.bottom) / 2))) rotate(-90)' text-anchor='middle'>"
                + "resident memory (MiB)</text>")
        svg.append("</g>")
        svg.append(
            "<rect x='\(plot.left)' y='\(plot.top)' width='\(plot.right - plot.left)' "
                + "height='\(plot.bottom - plot.top)' fill='none' stroke='#888'/>")

        // The final sync and read-back, after the camera stopped.
        if report.recordingWallNanoseconds > 0 && Double(report.recordingWallNanoseconds) / 1e9 < end {
            let from = xWall(report.recordingWallNanoseconds)
            svg.append(
                "<g class='finishing'><rect x='\(f(from))' y='\(plot.top)' width='\(f(x(end) - from))' "
                    + "height='\(plot.bottom - plot.top)' fill='#f2f2f2'/>"
                    + "<text x='\(f(x(end) - 4))' y='\(f(plot.bottom - 6))' text-anchor='end' fill='#666'>"
                    + "sync, read-back</text></g>")
        }

        // Limits: the budget, budget + 48 MiB, and the reduced limit while each pressure cut lasts.
        svg.append(
            "<g class='budget' stroke='#2a9d3a' stroke-dasharray='6 4'>"
                + line(plot.left, yBytes(report.budgetBytes), x(end), yBytes(report.budgetBytes)) + "</g>")
        svg.append(
            "<g class='limit' stroke='#d62828' stroke-dasharray='6 4'>"
                + line(plot.left, yBytes(report.limitBytes), x(end), yBytes(report.limitBytes)) + "</g>")
        let pressureEvents = report.events.filter { $0.event.hasPrefix("pressure=") }
        for (index, event) in pressureEvents.enumerated() {
            guard let limit = event.reducedLimitBytes else { continue }
            let until = index + 1 < pressureEvents.count ? xWall(pressureEvents[index + 1].wallNanoseconds) : x(end)
            svg.append(
                "<g class='reduced-limit' stroke='#f08c00' stroke-width='2' stroke-dasharray='3 3'>"
                    + line(xWall(event.wallNanoseconds), yBytes(limit), until, yBytes(limit)) + "</g>")
        }

        // The ring's mapped bytes and the resident size.
        svg.append(polyline(samples.map { (xWall($0.wallNanoseconds), yBytes($0.ringBytes)) }, "ring", "#9a9a9a", 1))
        svg.append(polyline(samples.map { (xWall($0.wallNanoseconds), yBytes($0.rssBytes)) }, "rss", "#1d4ed8", 1.5))

        // Event markers, labelled with their stream time above the plot, in four rows: each label in the first row
        // where it clears the one before (about 6.6 px a character at 11 px), else where it overlaps least (events
        // close together in wall time, at max speed).
        var rowEnds = [Double](repeating: -.infinity, count: 4)
        for event in report.events.sorted(by: { $0.wallNanoseconds < $1.wallNanoseconds }) {
            let at = xWall(event.wallNanoseconds)
            let text = "\(SoakEvent.formatTime(event.at)) \(event.event)"
            let row =
                rowEnds.firstIndex { $0 + 4 <= at } ?? rowEnds.indices.min { rowEnds[$0] < rowEnds[$1] } ?? 0
            rowEnds[row] = at + 3 + Double(text.count) * 6.6
            let labelY = plot.top - 8 - Double(3 - row) * 14
            svg.append(
                "<g class='event' data-event='\(event.event.escapingMarkup)' stroke='#7b2cbf'>"
                    + "<line x1='\(f(at))' y1='\(f(labelY + 3))' x2='\(f(at))' y2='\(plot.bottom)' stroke-dasharray='2 3'/>"
                    + "<text x='\(f(at + 3))' y='\(f(labelY))' stroke='none' fill='#7b2cbf' font-size='11'>"
                    + "\(text.escapingMarkup)</text></g>")
        }

        // Legend.
        let legend: [(String, String, String)] = [
            ("resident size (RSS)", "#1d4ed8", ""),
            ("ring slabs mapped", "#9a9a9a", ""),
            ("budget", "#2a9d3a", "6 4"),
            ("limit: budget + 48 MiB", "#d62828", "6 4"),
            ("under pressure: reduced budget + 48 MiB", "#f08c00", "3 3"),
        ]
        svg.append("<g class='legend'>")
        var legendX = plot.left
        let legendY = height - 14
        for entry in legend {
            let dash = entry.2.isEmpty ? "" : " stroke-dasharray='\(entry.2)'"
            svg.append(
                "<line x1='\(f(legendX))' y1='\(f(legendY - 4))' x2='\(f(legendX + 22))' y2='\(f(legendY - 4))' "
                    + "stroke='\(entry.1)' stroke-width='2'\(dash)/>"
                    + "<text x='\(f(legendX + 28))' y='\(f(legendY))'>\(entry.0.escapingMarkup)</text>")
            legendX += 44 + Double(entry.0.count) * 6
        }
        svg.append("</g>")
        svg.append("</svg>")
        return svg.joined(separator: "\n") + "\n"
    }

    private static func title(_ report: SoakReport) -> String {
        "rewind soak " + report.verdict
            + (report.failedInvariants.isEmpty ? "" : ": " + report.failedInvariants.joined(separator: ", "))
    }

    private static func settings(_ report: SoakReport) -> String {
        let configuration = report.configuration
        let fps = Double(configuration.frameDuration.timescale) / Double(configuration.frameDuration.value)
        return "\(configuration.layout) at \(String(format: "%g", fps)) fps, \(configuration.speed.rawValue) speed, "
            + "budget \(formatBytes(Int64(report.budgetBytes))): \(SoakEvent.formatTime(report.streamNanoseconds)) of "
            + "stream time in \(formatSeconds(report.wallNanoseconds))"
    }

    private static func figures(_ report: SoakReport) -> String {
        var text = "max RSS \(formatBytes(Int64(report.maxRSSBytes))) (limit \(formatBytes(Int64(report.limitBytes))))"
        if let slope = report.rssSlopeBytesPerSecond {
            text += ", slope \(slope < 0 ? "-" : "")\(formatBytes(Int64(abs(slope).rounded())))/s"
        }
        return text
            + "; frames: \(report.framesProduced) produced, \(report.framesVerified) verified, "
            + "\(report.framesLost) lost, \(report.corruptFrames) corrupt"
    }

    /// Round tick values from 0 to at least `maximum`: steps of 1, 2, 2.5 or 5 times a power of ten, about 4 to 9
    /// ticks.
    static func ticks(upTo maximum: Double) -> [Double] {
        guard maximum > 0, maximum.isFinite else { return [0, 1] }
        let rough = maximum / 8
        let power = pow(10, (log10(rough)).rounded(.down))
        let step = [1.0, 2.0, 2.5, 5.0, 10.0].map { $0 * power }.first { $0 >= rough } ?? 10 * power
        let count = Int((maximum / step).rounded(.up))
        return (0...max(1, count)).map { Double($0) * step }
    }

    private static func label(_ value: Double) -> String {
        value.rounded() == value ? String(Int(value)) : String(format: "%g", value)
    }

    private static func f(_ value: Double) -> String { String(format: "%.1f", value) }

    private static func line(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double) -> String {
        "<line x1='\(f(x1))' y1='\(f(y1))' x2='\(f(x2))' y2='\(f(y2))'/>"
    }

    private static func polyline(_ points: [(Double, Double)], _ name: String, _ color: String, _ width: Double)
        -> String
    {
        let coordinates = points.map { "\(f($0.0)),\(f($0.1))" }.joined(separator: " ")
        return "<polyline class='\(name)' fill='none' stroke='\(color)' stroke-width='\(width)' "
            + "stroke-linejoin='round' points='\(coordinates)'/>"
    }
}
