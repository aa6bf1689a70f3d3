extension Duration {
    /// This duration as whole nanoseconds, the unit every time inside Rewind is kept in.
    ///
    /// Durations at the public surface (windows, segment lengths, retention ages, sync intervals) are `Duration`;
    /// each is converted with this property once, where it is stored, so nothing converts per frame. A fraction of a
    /// nanosecond is dropped (truncation toward zero: 1.9 ns is 1 ns, −1.9 ns is −1 ns), and a duration beyond
    /// the range of `Int64` nanoseconds (about ±292 years) saturates to `Int64.max` or `Int64.min`.
    public var nanosecondsClamped: Int64 {
        Int64(clamping: attoseconds / 1_000_000_000)
    }
}

extension Range where Bound == Int64 {
    /// The pts range of the last `duration` up to and including `newest`: `(newest − duration, newest]` as a
    /// half-open range of nanoseconds, saturating at the ends of `Int64`. A negative duration gives an empty range.
    package init(last duration: Duration, endingAt newest: Int64) {
        let end = newest == .max ? newest : newest + 1
        let (start, overflow) = end.subtractingReportingOverflow(Swift.max(0, duration.nanosecondsClamped))
        self = (overflow ? .min : start)..<end
    }
}

/// Nanoseconds as seconds with millisecond precision, as the command line writes times: `12.500s`, `-0.033s`. The one
/// spelling of a time in messages, from the store's errors up (`formatSeconds` in the query layer is this).
package func secondsText(_ nanoseconds: Int64) -> String {
    let milliseconds = nanoseconds.magnitude / 1_000_000
    let fraction = String(milliseconds % 1000)
    return (nanoseconds < 0 ? "-" : "") + "\(milliseconds / 1000)." + String(repeating: "0", count: 3 - fraction.count)
        + fraction + "s"
}
