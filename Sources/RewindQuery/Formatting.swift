import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import SegmentStore
import Synchronization

/// Formats nanoseconds as seconds with millisecond precision: `12.500s`.
package func formatSeconds(_ nanoseconds: Int64) -> String { secondsText(nanoseconds) }

/// Formats two times to compare, like ``formatSeconds(_:)-(Int64)``, but to the nanosecond (`33000000ns`) when to the
/// millisecond they would read the same (33 ms against a 33.333… ms frame), or one of them would read as zero
/// without being zero (`1ns`, not `0.000s`).
package func formatSecondsApart(_ first: Int64, _ second: Int64) -> (String, String) {
    let rounded = (formatSeconds(first), formatSeconds(second))
    let readsAsZero = { (value: Int64, text: String) in value != 0 && (text == "0.000s" || text == "-0.000s") }
    let apart =
        (rounded.0 == rounded.1 && first != second) || readsAsZero(first, rounded.0) || readsAsZero(second, rounded.1)
    return apart ? ("\(first)ns", "\(second)ns") : rounded
}

/// Formats times to be read together, like ``formatSeconds(_:)-(Int64)``, but each to the nanosecond (`2966666668ns`)
/// when to the millisecond it would read like another of them that differs (a range starting just after the last
/// frame the store holds), or as zero without being zero.
package func formatSecondsApart(_ values: [Int64]) -> [String] {
    let texts = values.map { formatSeconds($0) }
    return zip(values, texts).map { value, text in
        let readsAsZero = value != 0 && (text == "0.000s" || text == "-0.000s")
        let readsAsAnother = zip(values, texts).contains { $0.1 == text && $0.0 != value }
        return readsAsZero || readsAsAnother ? "\(value)ns" : text
    }
}

/// `nanoseconds` rounded up to a whole number of the largest unit that keeps it near: `1h` for an hour, `5s`, `34ms`
/// for 33.3 ms (what a flag takes, never less than the value).
package func roundedUpDuration(_ nanoseconds: Int64) -> String {
    for (unit, size) in [("h", Int64(3_600_000_000_000)), ("s", 1_000_000_000)] where nanoseconds >= size {
        if nanoseconds % size == 0 { return "\(nanoseconds / size)\(unit)" }
    }
    if nanoseconds >= 10_000_000_000 { return "\((nanoseconds + 999_999_999) / 1_000_000_000)s" }
    return "\((nanoseconds + 999_999) / 1_000_000)ms"
}

/// Formats a duration as seconds with millisecond precision: `12.500s`.
package func formatSeconds(_ duration: Duration) -> String { formatSeconds(duration.nanosecondsClamped) }

/// Formats two byte counts to compare, like ``formatBytes(_:)``, but in bytes (`118783 B`) when rounded they would
/// read the same (`116.0 KiB` against `116.0 KiB`).
package func formatBytesApart(_ first: Int64, _ second: Int64) -> (String, String) {
    let rounded = (formatBytes(first), formatBytes(second))
    return rounded.0 == rounded.1 && first != second ? ("\(first) B", "\(second) B") : rounded
}

/// Formats a byte count with a binary unit: `1.5 GiB`.
package func formatBytes(_ bytes: Int64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024 && unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
}
