/// A presentation time as an exact rational: `value / timescale` seconds, like a media time.
///
/// Comparison and equality are exact across timescales (`FrameTime(value: 1, timescale: 30)` equals
/// `FrameTime(value: 2, timescale: 60)`), computed in 128-bit arithmetic so no value overflows.
public struct FrameTime: Sendable, Comparable, Hashable, CustomStringConvertible {
    /// Nanoseconds in one second: the timescale of ``init(nanoseconds:)`` and the unit of ``nanoseconds``.
    public static let nanosecondsPerSecond: Int64 = 1_000_000_000

    /// The numerator, in units of `1 / timescale` seconds.
    public let value: Int64
    /// Units per second; always positive.
    public let timescale: Int32

    /// Makes `value / timescale` seconds. `timescale` must be positive.
    public init(value: Int64, timescale: Int32) {
        precondition(timescale > 0, "FrameTime timescale must be positive, got \(timescale)")
        self.value = value
        self.timescale = timescale
    }

    /// Makes an exact time from integer nanoseconds (timescale 1 000 000 000).
    public init(nanoseconds: Int64) {
        self.init(value: nanoseconds, timescale: Int32(FrameTime.nanosecondsPerSecond))
    }

    /// The time of frame number `index` of a stream whose frames last `frameDuration`.
    ///
    /// - Returns: nil when the result does not fit in `Int64` units of `frameDuration.timescale`.
    public static func frame(_ index: Int64, duration frameDuration: FrameTime) -> FrameTime? {
        let (product, overflow) = index.multipliedReportingOverflow(by: frameDuration.value)
        return overflow ? nil : FrameTime(value: product, timescale: frameDuration.timescale)
    }

    /// The time in whole nanoseconds, rounded toward negative infinity; nil when it does not fit in `Int64`
    /// (beyond about ±292 years).
    public var nanoseconds: Int64? { nanoseconds(roundingUp: false) }

    /// The time in whole nanoseconds, rounded toward positive infinity (a duration that ends at or past the next
    /// frame's pts, never a nanosecond short of it); nil when it does not fit in `Int64`.
    public var nanosecondsRoundedUp: Int64? { nanoseconds(roundingUp: true) }

    /// The time in whole nanoseconds, rounded down or up; nil when it does not fit in `Int64`.
    private func nanoseconds(roundingUp: Bool) -> Int64? {
        let wide = Int128(value) * Int128(FrameTime.nanosecondsPerSecond)
        let divisor = Int128(timescale)
        var quotient = wide / divisor
        if wide % divisor != 0 {
            if roundingUp && wide > 0 { quotient += 1 }
            if !roundingUp && wide < 0 { quotient -= 1 }
        }
        guard quotient >= Int128(Int64.min), quotient <= Int128(Int64.max) else { return nil }
        return Int64(quotient)
    }

    /// Seconds as a floating-point number, for display only.
    public var seconds: Double { Double(value) / Double(timescale) }

    /// The fraction as written, `value/timescale` (not reduced), such as `1001/30000`.
    public var description: String { "\(value)/\(timescale)" }

    /// Whether two times are the same instant, whatever their timescales (`1/30 == 2/60`).
    public static func == (lhs: FrameTime, rhs: FrameTime) -> Bool {
        Int128(lhs.value) * Int128(rhs.timescale) == Int128(rhs.value) * Int128(lhs.timescale)
    }

    /// Whether `lhs` is earlier than `rhs`, compared exactly across timescales.
    public static func < (lhs: FrameTime, rhs: FrameTime) -> Bool {
        Int128(lhs.value) * Int128(rhs.timescale) < Int128(rhs.value) * Int128(lhs.timescale)
    }

    /// Hashes the reduced fraction, so times that are equal across timescales hash equally.
    ///
    /// - Complexity: O(log(min(|value|, timescale))) for the greatest common divisor.
    public func hash(into hasher: inout Hasher) {
        // Hash the reduced fraction so equal times hash equally.
        let divisor = max(1, greatestCommonDivisor(value.magnitude, UInt64(timescale)))
        hasher.combine(value / Int64(divisor))
        hasher.combine(Int64(timescale) / Int64(divisor))
    }
}
