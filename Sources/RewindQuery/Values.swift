import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import SegmentStore

#if canImport(Glibc)
    import Glibc
#endif

/// A command-line value that could not be understood, with what was expected.
public struct ValueError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The text that was given.
    public let input: String
    /// What a valid value looks like.
    public let expected: String
    /// A valid value close to `input` (a bare number `5` given for a duration: `5s`), when there is one.
    public let suggestion: String?

    /// A value error for `input`, saying what was `expected` and, when known, a valid value close to it.
    public init(input: String, expected: String, suggestion: String? = nil) {
        self.input = input
        self.expected = expected
        self.suggestion = suggestion
    }

    /// The error in words: what was given and what was expected, with the suggestion when there is one.
    public var description: String {
        if let suggestion { return "'\(input)' has no unit: \(expected) needs one, as in \(suggestion)" }
        return "'\(input)' is not \(expected)"
    }
}

/// Parses the sizes, durations and times the CLI accepts. Integer arithmetic only: no value passes through a float.
public enum Values {
    private static let durationUnits: [(suffix: String, nanoseconds: Int64)] = [
        ("ns", 1), ("us", 1_000), ("µs", 1_000), ("ms", 1_000_000), ("s", 1_000_000_000),
        ("m", 60_000_000_000), ("min", 60_000_000_000), ("h", 3_600_000_000_000), ("d", 86_400_000_000_000),
    ]
    private static let sizeUnits: [(suffix: String, bytes: Int64)] = [
        ("B", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40), ("PiB", 1 << 50),
        ("EiB", 1 << 60), ("KB", 1_000), ("MB", 1_000_000), ("GB", 1_000_000_000), ("TB", 1_000_000_000_000),
        ("PB", 1_000_000_000_000_000), ("EB", 1_000_000_000_000_000_000),
        ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40), ("P", 1 << 50), ("E", 1 << 60),
    ]

    /// Parses a duration such as `5s`, `1500ms`, `10m`, `1h`, `7d`, `12.5s` or `250us`.
    ///
    /// A bare number (`5`) is refused: its unit is ambiguous; the error suggests seconds (`5s`). Fractions are
    /// exact down to the nanosecond (`0.0000000015s` is refused), and the result fits `Int64` nanoseconds, so its
    /// ``Swift/Duration/nanosecondsClamped`` is exact.
    /// - Throws: ``ValueError`` for anything else, negative values included.
    public static func duration(_ text: String) throws(ValueError) -> Duration {
        .nanoseconds(try durationNanoseconds(text))
    }

    /// Parses a duration like ``duration(_:)`` into whole nanoseconds.
    static func durationNanoseconds(_ text: String) throws(ValueError) -> Int64 {
        let expected = "a duration like 5s, 1500ms, 10m, 1h or 12.5s"
        if decimal(text) != nil {
            throw ValueError(input: text, expected: "a duration", suggestion: text + "s")
        }
        do {
            return try scaled(text, units: durationUnits.map { ($0.suffix, $0.nanoseconds) }, bare: 1_000_000_000)
        } catch .tooLarge {
            throw ValueError(input: text, expected: longestDuration)
        } catch .finerThanUnit {
            throw ValueError(input: text, expected: wholeNanoseconds)
        } catch {
            throw ValueError(input: text, expected: expected)
        }
    }

    /// What a duration or time with a fraction of a nanosecond is told it must be.
    static let wholeNanoseconds = "a duration in whole nanoseconds (at most nine decimals of a second)"

    /// What a duration or time too large for 64-bit nanoseconds is told it must be.
    static let longestDuration = "a duration of at most 106751d (about 292 years, the most whole nanoseconds count)"

    /// Parses a byte size such as `512MiB`, `2GiB`, `1.5GB`, `64K` or `4096` (bytes).
    ///
    /// Binary suffixes (`KiB`, `MiB`, `GiB`, and the short `K`, `M`, `G`) are powers of 1024; `KB`, `MB`, `GB`
    /// are powers of 1000. Suffixes are read in any case (`64k`, `2gib`: no two differ by case alone; `64k` was
    /// refused while the message offered `64K`).
    /// - Throws: ``ValueError`` for anything else.
    public static func size(_ text: String) throws(ValueError) -> Int {
        let expected = "a size like 512MiB, 2GiB, 64K or 4096"
        let units = sizeUnits.map { ($0.suffix.lowercased(), $0.bytes) }
        do {
            return Int(try scaled(text.lowercased(), units: units, bare: 1))
        } catch .tooLarge {
            // Well formed, past what 64 bits count: told the bound, not the form.
            throw ValueError(input: text, expected: "a size of at most 8EiB less a byte (a signed 64-bit count)")
        } catch {
            throw ValueError(input: text, expected: expected)
        }
    }

    /// Parses a frame size `WIDTHxHEIGHT` (`1920x1080`).
    public static func dimensions(_ text: String) throws(ValueError) -> (width: Int, height: Int) {
        let parts = text.split(separator: "x", omittingEmptySubsequences: false)
        guard parts.count == 2, let width = Int(parts[0]), let height = Int(parts[1]) else {
            throw ValueError(input: text, expected: "a frame size like 1920x1080")
        }
        // Well formed but out of range: told the range, not the form.
        let sides = 1...FrameLayout.maximumDimension
        guard sides.contains(width), sides.contains(height) else {
            throw ValueError(input: text, expected: "a frame size of 1 to \(sides.upperBound) pixels a side")
        }
        return (width, height)
    }

    /// Parses a frame rate: `60`, `29.97`, or a ratio `30000/1001`, into the duration of one frame.
    public static func frameRate(_ text: String) throws(ValueError) -> FrameTime {
        let error = ValueError(input: text, expected: "a frame rate like 60, 29.97 or 30000/1001")
        // Timestamps are whole nanoseconds: a frame must last at least one (value / timescale ≥ 1 ns).
        let tooFast = ValueError(input: text, expected: "a frame rate of at most one frame per nanosecond")
        if let slash = text.firstIndex(of: "/") {
            guard let numerator = Int32(text[..<slash]), let denominator = Int64(text[text.index(after: slash)...]),
                numerator > 0, denominator > 0
            else { throw error }
            // (The numerator is below 2^31, so a denominator above 2 is always slow enough.)
            guard denominator > 2 || denominator * 1_000_000_000 >= Int64(numerator) else { throw tooFast }
            return FrameTime(value: denominator, timescale: numerator)
        }
        // A decimal rate r = digits / 10^k frames per second; one frame lasts 10^k / digits seconds.
        guard let (digits, scale) = decimal(text), digits > 0, digits <= Int64(Int32.max) else { throw error }
        let (nanoseconds, overflow) = scale.multipliedReportingOverflow(by: 1_000_000_000)
        guard overflow || digits <= nanoseconds else { throw tooFast }
        return FrameTime(value: scale, timescale: Int32(digits))
    }

    /// Splits `12.5` into (125, 10): an exact decimal as integer digits over a power of ten.
    static func decimal(_ text: Substring) -> (digits: Int64, scale: Int64)? {
        guard !text.isEmpty else { return nil }
        var digits: Int64 = 0
        var scale: Int64 = 1
        var seenPoint = false
        var seenDigit = false
        for character in text {
            if character == "." {
                guard !seenPoint else { return nil }
                seenPoint = true
                continue
            }
            guard let digit = character.wholeNumberValue, character.isASCII else { return nil }
            seenDigit = true
            let (times10, overflow1) = digits.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(Int64(digit))
            guard !overflow1, !overflow2 else { return nil }
            digits = sum
            if seenPoint {
                let (nextScale, overflow) = scale.multipliedReportingOverflow(by: 10)
                guard !overflow else { return nil }
                scale = nextScale
            }
        }
        return seenDigit ? (digits, scale) : nil
    }

    static func decimal(_ text: String) -> (digits: Int64, scale: Int64)? { decimal(text[...]) }

    /// `number` × `unit` for the longest matching suffix, exactly; nil if not exact or out of range.
    private enum ScaleError: Error {
        /// Not a number with one of the units.
        case invalid
        /// A number with a unit, but beyond what 64 bits hold.
        case tooLarge
        /// A number with a unit, but with a fraction of the smallest unit counted (a nanosecond, a byte).
        case finerThanUnit
    }

    private static func scaled(_ text: String, units: [(String, Int64)], bare: Int64) throws(ScaleError) -> Int64 {
        var number = text[...]
        var multiplier = bare
        var bestLength = 0
        for (suffix, factor) in units where text.hasSuffix(suffix) && suffix.count > bestLength {
            bestLength = suffix.count
            multiplier = factor
        }
        number = text.dropLast(bestLength)
        guard let (digits, scale) = decimal(number) else {
            // Digits (and one point) that do not fit in 64 bits.
            let isNumber =
                number.contains { $0 != "." } && number.filter { $0 == "." }.count <= 1
                && number.allSatisfy { $0 == "." || ($0.isASCII && $0.isWholeNumber) }
            throw isNumber ? .tooLarge : .invalid
        }
        // Whole and fraction apart, the fraction over the scale and multiplier reduced by their common factor, so
        // `10.000000001s` (10 000 000 001 × 10⁹ would overflow) is exact and in range.
        let (whole, fraction) = (digits / scale, digits % scale)
        let divisor = greatestCommonDivisor(multiplier, scale)
        let (unit, denominator) = (multiplier / divisor, scale / divisor)
        guard fraction % denominator == 0 else { throw .finerThanUnit }
        let (wholePart, overflow) = whole.multipliedReportingOverflow(by: multiplier)
        let (sum, overflowSum) = wholePart.addingReportingOverflow(fraction / denominator * unit)
        guard !overflow, !overflowSum else { throw .tooLarge }
        return sum
    }
}

/// A point in time given on the command line: stream time, absolute wall-clock time, or a time of day.
public enum TimeSpec: Sendable, Equatable {
    /// Stream (pts) time in nanoseconds: `12.5s`, `1500ms`.
    case stream(Int64)
    /// Wall-clock time, Unix nanoseconds: `2026-11-30T14:03:05.200Z`, `2026-11-30T14:03:05+01:00`,
    /// or without a zone, local time.
    case wall(Int64)
    /// A time of day, nanoseconds after midnight: `14:03:05.200` (local time), or with a zone `14:03:05.200Z`,
    /// `14:03:05.200+01:00` (`utcOffsetSeconds`); resolved against the day, in that zone, the store's first frame
    /// was captured.
    case timeOfDay(Int64, utcOffsetSeconds: Int64? = nil)

    /// What a time of day may look like, for messages.
    static let timeOfDayForms =
        "HH:MM:SS or HH:MM:SS.fraction, two digits each (14:03:05, 14:03:05.200; hours 00-23, minutes 00-59, "
        + "seconds 00-60), local time or with a zone (14:03:05.200Z, 14:03:05+01:00)"

    /// Parses `12.5s` / `1500ms` (stream time), ISO-8601 date-times, and `HH:MM:SS[.fff]` times of day.
    ///
    /// Hours, minutes and seconds are two digits each, and a fraction of a second follows them (`14:03:05.5`;
    /// `14:03:5` and `14:03:.5` are refused). A date-time without a zone is local time, and must name one moment:
    /// a local time daylight saving time skips or repeats on its date is refused, with the offsets that name each.
    public init(parsing text: String) throws(ValueError) {
        let expected = "a time like 12.5s, 1500ms, 2026-11-30T14:03:05.200Z or 14:03:05.200"
        if text.contains("T") && text.contains("-") {
            guard let ns = TimeSpec.parseISO8601(text) else {
                // A well-formed date past what 64-bit nanoseconds since 1970 reach is told so, not the syntax.
                if let year = Int(text.prefix(4)), text.dropFirst(4).first == "-", !(1678...2261).contains(year) {
                    throw ValueError(
                        input: text,
                        expected: "a date-time from 1678 to 2261 (what 64-bit nanoseconds since 1970 reach)")
                }
                if let problem = TimeSpec.dateProblem(text) { throw ValueError(input: text, expected: problem) }
                throw ValueError(
                    input: text,
                    expected: "a date-time YYYY-MM-DDTHH:MM:SS[.fraction], two digits each but the year's four "
                        + "(2026-11-30T14:03:05.200), local time or with a zone (…Z, …+01:00)")
            }
            let zone = TimeSpec.splitZone(text[...])?.1
            let local = ns / 1_000_000_000 - (ns % 1_000_000_000 < 0 ? 1 : 0)
            if zone == nil, let problem = TimeSpec.localTimeProblem(text, localSeconds: local, date: "that date") {
                throw ValueError(input: text, expected: problem)
            }
            self = .wall(TimeSpec.utcNanoseconds(ofLocal: ns, zoned: zone))
        } else if text.contains(":") {
            guard let (clock, offset) = TimeSpec.splitZone(text[...]), let ns = TimeSpec.parseClock(clock) else {
                throw ValueError(input: text, expected: "a time of day " + TimeSpec.timeOfDayForms)
            }
            self = .timeOfDay(ns, utcOffsetSeconds: offset)
        } else {
            // Recorder time may lie before 0 (a save's range that began before the first frame, `from_ns` < 0).
            let negative = text.hasPrefix("-")
            do {
                let magnitude = try Values.durationNanoseconds(negative ? String(text.dropFirst()) : text)
                self = .stream(negative ? -magnitude : magnitude)
            } catch {
                if error.expected == Values.longestDuration {
                    throw ValueError(input: text, expected: "a time within 106751d (about 292 years) of 0")
                }
                if error.expected == Values.wholeNanoseconds {
                    throw ValueError(
                        input: text, expected: "a time in whole nanoseconds (at most nine decimals of a second)")
                }
                guard let suggestion = error.suggestion else { throw ValueError(input: text, expected: expected) }
                throw ValueError(input: text, expected: "a time", suggestion: (negative ? "-" : "") + suggestion)
            }
        }
    }

    /// The number `count` ASCII digits write (no sign: `Int64("+1")` would take `+1` for two digits); nil for
    /// anything else.
    static func digits(_ text: Substring, count: Int) -> Int64? {
        guard text.count == count, text.allSatisfy({ $0.isASCII && $0.isWholeNumber }) else { return nil }
        return Int64(text)
    }

    /// `HH:MM:SS[.fraction]` → nanoseconds after midnight: two digits for each of hours, minutes and seconds (up to
    /// 60, a leap second), then one to nine digits of a fraction after a point; nil for anything else.
    static func parseClock(_ text: Substring) -> Int64? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, let hours = digits(parts[0], count: 2), let minutes = digits(parts[1], count: 2),
            (0..<24).contains(hours), (0..<60).contains(minutes)
        else { return nil }
        let point = parts[2].firstIndex(of: ".") ?? parts[2].endIndex
        guard let seconds = digits(parts[2][..<point], count: 2), seconds <= 60 else { return nil }
        var fraction: Int64 = 0
        if point < parts[2].endIndex {
            let decimals = parts[2][parts[2].index(after: point)...]
            guard (1...9).contains(decimals.count), let value = digits(decimals, count: decimals.count) else {
                return nil
            }
            fraction = value
            for _ in decimals.count..<9 { fraction *= 10 }
        }
        return ((hours * 60 + minutes) * 60 + seconds) * 1_000_000_000 + fraction
    }

    /// Why a date-time's date does not exist (`2026-02-30`: February 2026 has 28 days), when its date is written
    /// well (`YYYY-MM-DD`, a month 1 to 12, a day 1 to 31) but is not a day of that month; nil otherwise.
    static func dateProblem(_ text: String) -> String? {
        guard let t = text.firstIndex(of: "T") else { return nil }
        let date = text[..<t].split(separator: "-", omittingEmptySubsequences: false)
        guard date.count == 3, let year = digits(date[0], count: 4), let month = digits(date[1], count: 2),
            let day = digits(date[2], count: 2), (1...12).contains(month), (1...31).contains(day),
            day > daysIn(month: month, year: year)
        else { return nil }
        let months = [
            "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
            "November", "December",
        ]
        return "a date that exists: \(months[Int(month) - 1]) \(year) has \(daysIn(month: month, year: year)) days"
    }

    /// `YYYY-MM-DDTHH:MM:SS[.fraction][Z|±HH:MM]` → Unix nanoseconds.
    static func parseISO8601(_ text: String) -> Int64? {
        guard let t = text.firstIndex(of: "T") else { return nil }
        let date = text[..<t].split(separator: "-", omittingEmptySubsequences: false)
        guard date.count == 3, let year = digits(date[0], count: 4), let month = digits(date[1], count: 2),
            let day = digits(date[2], count: 2),
            (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day),
            // Nanoseconds since 1970 in 64 bits reach from 1677-09-21 to 2262-04-11.
            (1678...2261).contains(year)
        else { return nil }
        guard let (rest, offsetSeconds) = splitZone(text[text.index(after: t)...]), let clock = parseClock(rest) else {
            return nil
        }
        let days = daysFromCivil(year: year, month: month, day: day)
        return days * 86_400_000_000_000 + clock
    }

    /// The Unix nanoseconds of `local` (a date-time's nanoseconds since 1970 as written, as if it were UTC) at the
    /// zone's offset `zone` (seconds east of UTC), or without one in the local zone at its own moment's offset.
    static func utcNanoseconds(ofLocal local: Int64, zoned zone: Int64?) -> Int64 {
        if let zone { return local - zone * 1_000_000_000 }
        let seconds = local / 1_000_000_000
        return local - (seconds - utcSeconds(ofLocalSeconds: seconds)) * 1_000_000_000
    }

    /// The UTC moments (seconds since 1970) the local wall time `local` (seconds since 1970 as if local were UTC)
    /// names, earliest first, each with the zone's offset then: one on most days, none in an hour daylight saving
    /// time skips, two in one it repeats.
    ///
    /// - Parameter offset: the zone's offset from UTC in seconds at a UTC moment (the local zone by default).
    package static func moments(
        ofLocalSeconds local: Int64, offset: (Int64) -> Int64 = { localUTCOffsetSeconds(atUTCSeconds: $0) }
    ) -> (valid: [(utc: Int64, offset: Int64)], around: (before: Int64, after: Int64)) {
        // At the offsets a day before and a day after (changes are months apart), and as ``utcSeconds(
        // ofLocalSeconds:offset:)`` finds it.
        let guess = local - offset(local)
        let corrected = local - offset(guess)
        let candidates = Set([
            guess, corrected, local - offset(local - 86_400), local - offset(local + 86_400),
        ]).sorted()
        let valid = candidates.filter { local - $0 == offset($0) }.map { (utc: $0, offset: offset($0)) }
        return (valid, (offset(candidates[0]), offset(candidates[candidates.count - 1])))
    }

    /// Why the zone-less local time `text` (`localSeconds` since 1970 as if it were UTC) names no moment or two in
    /// the local zone — daylight saving time skips or repeats it on its date (`date`, as the message names it) —,
    /// with the offsets that would name each; nil when it names one.
    static func localTimeProblem(_ text: String, localSeconds: Int64, date: String) -> String? {
        let (valid, around) = moments(ofLocalSeconds: localSeconds)
        func zoned(_ offset: Int64) -> String { text + offsetText(offset) }
        switch valid.count {
        case 0:
            return "a local time that exists: daylight saving time skips it on \(date) in this zone (the clocks "
                + "go from \(offsetText(around.before)) to \(offsetText(around.after))); give the offset you mean, "
                + "\(zoned(around.before)) or \(zoned(around.after))"
        case 2:
            return "a local time that comes once: it comes twice on \(date) in this zone, as daylight saving time "
                + "ends (first at \(offsetText(valid[0].offset)), then at \(offsetText(valid[1].offset))); give "
                + "the offset of the one you mean, \(zoned(valid[0].offset)) or \(zoned(valid[1].offset))"
        default:
            return nil
        }
    }

    /// Why the zone-less time of day `sinceMidnight` (nanoseconds after midnight) names no moment or two on the
    /// date the UTC moment `day` (seconds since 1970) has in the local zone, as ``localTimeProblem(_:localSeconds:
    /// date:)`` says it; nil when it names one.
    package static func timeOfDayProblem(_ sinceMidnight: Int64, onDateOf day: Int64) -> ValueError? {
        let midnight = localMidnight(onDateOf: day, zone: nil)
        let seconds = sinceMidnight / 1_000_000_000
        var text = "\(twoDigits(seconds / 3600)):\(twoDigits(seconds / 60 % 60)):\(twoDigits(seconds % 60))"
        if sinceMidnight % 1_000_000_000 != 0 {
            var fraction = String(sinceMidnight % 1_000_000_000 + 1_000_000_000).dropFirst()
            while fraction.hasSuffix("0") { fraction = fraction.dropLast() }
            text += "." + fraction
        }
        let date = String((SegmentStore.utcText(seconds: midnight, iso8601: true) ?? "").prefix(10))
        return localTimeProblem(text, localSeconds: midnight + seconds, date: date + ", the recording's first day,")
            .map { ValueError(input: text, expected: $0) }
    }

    /// `value` (0 to 99) in two digits, as a time's fields are written.
    private static func twoDigits(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }

    /// The midnight (seconds since 1970, as if local time were UTC) of the date the UTC moment `day` (seconds since
    /// 1970) has in `zone` (seconds east of UTC), or without one in the local zone.
    static func localMidnight(onDateOf day: Int64, zone: Int64?) -> Int64 {
        let local = day + (zone ?? localUTCOffsetSeconds(atUTCSeconds: day))
        return local - ((local % 86_400) + 86_400) % 86_400
    }

    /// `+01:00`, `-05:00`, `+05:30`: an offset from UTC in seconds as a zone is written.
    static func offsetText(_ offset: Int64) -> String {
        let minutes = abs(offset) / 60
        return (offset < 0 ? "-" : "+") + twoDigits(minutes / 60) + ":" + twoDigits(minutes % 60)
    }

    /// The UTC moment (seconds since 1970) of the local wall time `local` (seconds since 1970 as if local were UTC):
    /// less the zone's offset at that moment, not at `local` read as UTC — the two differ for as long as the offset
    /// around each change of daylight saving time. A local time the change skips takes the offset before it; one it
    /// repeats, the first.
    ///
    /// - Parameter offset: the zone's offset from UTC in seconds at a UTC moment (the local zone by default).
    package static func utcSeconds(
        ofLocalSeconds local: Int64, offset: (Int64) -> Int64 = { localUTCOffsetSeconds(atUTCSeconds: $0) }
    ) -> Int64 {
        let guess = local - offset(local)
        let corrected = local - offset(guess)
        // A moment is the local time when the zone's offset there is what separates them. Both are (a repeated
        // hour): the first; neither (a skipped one): the later moment, at the offset before the change.
        let valid = [guess, corrected].filter { local - $0 == offset($0) }
        return valid.min() ?? max(guess, corrected)
    }

    /// The UTC moment (seconds since 1970, whole) of the time of day `sinceMidnight` (nanoseconds after midnight) on
    /// the date the UTC moment `day` has in `zone` (seconds east of UTC), or without one in the local zone: the time
    /// itself taken to UTC at its own offset, since on a day daylight saving time begins or ends 03:00 is not
    /// midnight's offset plus three hours.
    package static func utcSeconds(ofTimeOfDay sinceMidnight: Int64, onDateOf day: Int64, zone: Int64?) -> Int64 {
        let time = localMidnight(onDateOf: day, zone: zone) + sinceMidnight / 1_000_000_000
        return zone.map { time - $0 } ?? utcSeconds(ofLocalSeconds: time)
    }

    /// Splits a trailing zone (`Z`, `±HH:MM`) off a time: the time and the zone's offset from UTC in seconds (nil
    /// without a zone); nil when the zone is malformed.
    static func splitZone(_ text: Substring) -> (Substring, Int64?)? {
        if text.hasSuffix("Z") { return (text.dropLast(), 0) }
        guard let sign = text.lastIndex(where: { $0 == "+" || $0 == "-" }) else { return (text, nil) }
        let zone = text[text.index(after: sign)...].split(separator: ":")
        guard zone.count == 2, let zh = digits(zone[0], count: 2), let zm = digits(zone[1], count: 2),
            (0...18).contains(zh), (0..<60).contains(zm)
        else { return nil }
        return (text[..<sign], (zh * 3600 + zm * 60) * (text[sign] == "-" ? -1 : 1))
    }

    /// `text` (a time as given) with this process's zone written into it when it is a wall-clock time or a time of
    /// day without one, so that another process (a recorder in another zone) reads the same moment. A time of day
    /// lies on the date of `firstWallNanoseconds` (the store's first frame) and takes the zone's offset at that time
    /// on that date, as a reader of the store takes it (summer's 12:00 read in winter was an hour off); without a
    /// first frame, the offset now.
    ///
    /// - Throws: ``ValueError`` for a time of day daylight saving time skips or repeats on that date.
    public static func withLocalZone(_ text: String, firstWallNanoseconds: Int64? = nil) throws(ValueError) -> String {
        let offset: Int64
        switch try? TimeSpec(parsing: text) {
        case .wall(let ns)? where splitZone(text[...])?.1 == nil:
            offset = localUTCOffsetSeconds(atUTCSeconds: ns / 1_000_000_000)
        case .timeOfDay(let sinceMidnight, nil)?:
            if let day = firstWallNanoseconds.map({ $0 / 1_000_000_000 }),
                let problem = timeOfDayProblem(sinceMidnight, onDateOf: day)
            {
                throw ValueError(input: text, expected: problem.expected)
            }
            let moment =
                firstWallNanoseconds.map {
                    utcSeconds(ofTimeOfDay: sinceMidnight, onDateOf: $0 / 1_000_000_000, zone: nil)
                } ?? System.wallClockNanoseconds() / 1_000_000_000
            offset = localUTCOffsetSeconds(atUTCSeconds: moment)
        default:
            return text
        }
        return text + offsetText(offset)
    }

    /// Days in `month` (1…12) of `year` in the proleptic Gregorian calendar.
    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The local zone's offset from UTC in seconds at about the given moment.
    package static func localUTCOffsetSeconds(atUTCSeconds seconds: Int64) -> Int64 {
        var time = time_t(seconds)
        var local = tm()
        guard localtime_r(&time, &local) != nil else { return 0 }
        return Int64(local.tm_gmtoff)
    }
}
