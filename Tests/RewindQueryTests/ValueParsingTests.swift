import RewindCore
import RewindQuery
import Testing

@Suite struct ValueParsingTests {
    @Test(
        arguments: [
            ("5s", 5_000_000_000), ("1500ms", 1_500_000_000), ("10m", 600_000_000_000), ("1h", 3_600_000_000_000),
            ("12.5s", 12_500_000_000), ("250us", 250_000), ("7ns", 7), ("0.001s", 1_000_000),
            ("0s", 0), ("2min", 120_000_000_000),
            // Exact to the nanosecond, also where digits × unit would not fit in 64 bits.
            ("10.000000001s", 10_000_000_001), ("9223.372037s", 9_223_372_037_000),
            ("36000.123456s", 36_000_123_456_000), ("100.12345678s", 100_123_456_780), ("0.000000001s", 1),
            ("1.5h", 5_400_000_000_000),
        ] as [(String, Int64)])
    func durations(text: String, nanoseconds: Int64) throws {
        #expect(try Values.duration(text) == .nanoseconds(nanoseconds))
    }

    @Test(
        arguments: [
            "", "s", "-5s", "5 s", "5sec", "1.2.3s", "0.5ns", "99999999999999999999s", "5x", ".s", "0.0000000001s",
            "9300000000s", "9223372036.854775808s",
        ])
    func badDurations(text: String) {
        #expect(throws: ValueError.self) { try Values.duration(text) }
    }

    @Test(
        arguments: [
            ("512MiB", 512 << 20), ("2GiB", 2 << 30), ("64K", 64 << 10), ("4096", 4096), ("1.5GB", 1_500_000_000),
            ("1KB", 1000), ("10B", 10), ("0.5MiB", 1 << 19), ("64k", 64 << 10), ("2gib", 2 << 30), ("1kb", 1000),
            ("3m", 3 << 20), ("1PiB", 1 << 50), ("2E", 2 << 60),
        ] as [(String, Int)])
    func sizes(text: String, bytes: Int) throws {
        #expect(try Values.size(text) == bytes)
    }

    @Test(arguments: ["", "MiB", "-1MiB", "1.5B", "12 MiB", "1QiB", "0.3B"])
    func badSizes(text: String) {
        #expect(throws: ValueError.self) { try Values.size(text) }
    }

    /// A size too large for 64 bits is told the bound, not the form (it read as malformed).
    @Test func outOfRangeSizesSayTheBound() {
        for text in ["99999999999999999999", "8EiB", "10EB"] {
            #expect(
                throws: ValueError(input: text, expected: "a size of at most 8EiB less a byte (a signed 64-bit count)")
            ) {
                try Values.size(text)
            }
        }
    }

    @Test func dimensionsAndRates() throws {
        #expect(try Values.dimensions("1920x1080") == (1920, 1080))
        #expect(throws: ValueError.self) { try Values.dimensions("1920") }
        #expect(throws: ValueError.self) { try Values.dimensions("0x10") }
        #expect(throws: ValueError.self) { try Values.dimensions("99999x10") }
        // Well formed but out of range: the error gives the range.
        for text in ["0x10", "99999x10", "10x32769"] {
            #expect(throws: ValueError(input: text, expected: "a frame size of 1 to 32768 pixels a side")) {
                try Values.dimensions(text)
            }
        }
        #expect(throws: ValueError(input: "1920x", expected: "a frame size like 1920x1080")) {
            try Values.dimensions("1920x")
        }
        #expect(try Values.frameRate("60") == FrameTime(value: 1, timescale: 60))
        #expect(try Values.frameRate("30000/1001") == FrameTime(value: 1001, timescale: 30000))
        #expect(try Values.frameRate("29.97") == FrameTime(value: 100, timescale: 2997))
        #expect(throws: ValueError.self) { try Values.frameRate("0") }
        #expect(throws: ValueError.self) { try Values.frameRate("30/0") }
        // Timestamps are whole nanoseconds: at most one frame per nanosecond.
        #expect(try Values.frameRate("1000000000") == FrameTime(value: 1, timescale: 1_000_000_000))
        #expect(throws: ValueError.self) { try Values.frameRate("1000000001") }
        #expect(throws: ValueError.self) { try Values.frameRate("1000000000.5") }
        #expect(throws: ValueError.self) { try Values.frameRate("2000000001/2") }
        #expect(try Values.frameRate("2000000000/2") == FrameTime(value: 2, timescale: 2_000_000_000))
    }

    @Test func times() throws {
        #expect(try TimeSpec(parsing: "12.5s") == .stream(12_500_000_000))
        #expect(try TimeSpec(parsing: "1500ms") == .stream(1_500_000_000))
        #expect(try TimeSpec(parsing: "29.966666666s") == .stream(29_966_666_666))
        // Recorder time before 0: a save's range may begin there (`from_ns` < 0), and can be given back.
        #expect(try TimeSpec(parsing: "-833333333ns") == .stream(-833_333_333))
        #expect(try TimeSpec(parsing: "-0.5s") == .stream(-500_000_000))
        // Beyond 64-bit nanoseconds: said so, not "is not a time".
        for text in ["107000d", "-9223372036854775809ns", "99999999999999999999s"] {
            #expect {
                _ = try TimeSpec(parsing: text)
            } throws: { error in
                "\(error)".contains("is not a time within 106751d")
            }
        }
        #expect {
            _ = try Values.duration("300000d")
        } throws: { error in
            "\(error)".contains("is not a duration of at most 106751d")
        }
        #expect(throws: ValueError(input: "5x", expected: "a duration like 5s, 1500ms, 10m, 1h or 12.5s")) {
            _ = try Values.duration("5x")
        }
        // A well-formed value the store cannot hold is told what it may be, not that its syntax is wrong.
        #expect(
            throws: ValueError(
                input: "1.0000000001s", expected: "a duration in whole nanoseconds (at most nine decimals of a second)")
        ) {
            _ = try Values.duration("1.0000000001s")
        }
        #expect {
            _ = try TimeSpec(parsing: "1.0000000001s")
        } throws: { error in
            "\(error)".contains("is not a time in whole nanoseconds")
        }
        for text in ["2262-04-12T00:00:00Z", "1000-01-01T00:00:00Z"] {
            #expect {
                _ = try TimeSpec(parsing: text)
            } throws: { error in
                "\(error)".contains("is not a date-time from 1678 to 2261")
            }
        }
        #expect {
            _ = try TimeSpec(parsing: "2026-13-01T00:00:00Z")
        } throws: { error in
            "\(error)".contains("is not a date-time YYYY-MM-DDTHH:MM:SS[.fraction]")
        }
        #expect(try TimeSpec(parsing: "1970-01-01T00:00:01.5Z") == .wall(1_500_000_000))
        #expect(try TimeSpec(parsing: "2026-11-30T14:03:05.200Z") == .wall(1_796_047_385_200_000_000))
        #expect(try TimeSpec(parsing: "2026-11-30T15:03:05.200+01:00") == .wall(1_796_047_385_200_000_000))
        #expect(try TimeSpec(parsing: "14:03:05.200") == .timeOfDay(50_585_200_000_000))
        #expect(try TimeSpec(parsing: "14:03:05.200Z") == .timeOfDay(50_585_200_000_000, utcOffsetSeconds: 0))
        #expect(try TimeSpec(parsing: "14:03:05+05:30") == .timeOfDay(50_585_000_000_000, utcOffsetSeconds: 19_800))
        #expect(try TimeSpec(parsing: "14:03:05-03:00") == .timeOfDay(50_585_000_000_000, utcOffsetSeconds: -10_800))
        // A time without a zone gets this process's zone written into it, and still means the same moment.
        for text in ["2026-11-30T14:03:05.200", "14:03:05.200"] {
            let zoned = try TimeSpec.withLocalZone(text)
            #expect(zoned.count == text.count + 6, "\(zoned)")
            if case .wall = try TimeSpec(parsing: text) {
                #expect(try TimeSpec(parsing: zoned) == TimeSpec(parsing: text))
            } else {
                guard case .timeOfDay(let ns, let offset?) = try TimeSpec(parsing: zoned) else {
                    Issue.record("\(zoned) is not a time of day with a zone")
                    continue
                }
                #expect(ns == 50_585_200_000_000 && abs(offset) <= 18 * 3600)
            }
        }
        for text in ["12.5s", "2026-11-30T14:03:05.200Z", "2026-11-30T15:03:05+01:00", "14:03:05Z", "nonsense"] {
            #expect(try TimeSpec.withLocalZone(text) == text)
        }
        #expect(try TimeSpec(parsing: "2024-02-29T00:00:00Z") == .wall(1_709_164_800_000_000_000))
        #expect(try TimeSpec(parsing: "2261-12-31T23:59:59Z") == .wall(9_214_646_399_000_000_000))
        for bad in [
            "2026-13-01T00:00:00Z", "25:00:00", "14:03", "yesterday", "2026-11-30T14:03:05.200+0100",
            "14:03:05+99:00", "14:03:05+0100",
            // Impossible dates and zones; years whose nanoseconds do not fit in 64 bits.
            "2026-02-30T10:00:00Z", "2025-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-11-30T10:00:00+99:99",
            "9999-12-31T23:59:59Z", "2300-01-01T00:00:00Z", "1600-01-01T00:00:00Z", "0001-01-01T00:00:00Z",
            // Seconds whose nanoseconds do not fit in 64 bits (they trapped, ending the recorder that parsed them).
            "14:01:8565705100000000000", "2026-11-30T14:01:9223372037Z", "14:01:9223372036.9Z",
            // Two characters that are not two digits: a sign is not a digit.
            "+1:00:00", "2026-11-30T+1:00:00Z", "2026-+1-30T10:00:00Z", "2026-11-+3T10:00:00Z", "14:+3:05",
            "14:03:05++1:00", "2026-11-30T14:03:05Z+01:+0",
        ] {
            #expect(throws: ValueError.self, "\(bad)") { try TimeSpec(parsing: bad) }
        }
    }

    /// Minutes and seconds are two digits each, and a fraction follows the seconds' two digits: a one-digit seconds
    /// field or a bare fraction (`01:29:7Z`, `01:29:.5Z`) is refused, naming the value and showing the forms taken.
    @Test func timesOfDayNeedTwoDigitFieldsAndADigitBeforeTheFraction() throws {
        for bad in [
            "01:29:7Z", "01:29:.5Z", "01:29:07.Z", "01:29:7", "01:2:07", "1:29:07", "01:29:007", "01:29:07.1234567890",
            "01:29:07.+5", "01:29:7.5+01:00", "24:00:00", "12:60:00", "12:00:61",
        ] {
            #expect(
                throws: ValueError(
                    input: bad,
                    expected: "a time of day HH:MM:SS or HH:MM:SS.fraction, two digits each (14:03:05, 14:03:05.200; "
                        + "hours 00-23, minutes 00-59, seconds 00-60), local time or with a zone (14:03:05.200Z, "
                        + "14:03:05+01:00)"), "\(bad)"
            ) { try TimeSpec(parsing: bad) }
        }
        for bad in ["2026-11-30T01:29:7Z", "2026-11-30T01:29:.5Z", "2026-11-30T01:29:07.", "2026-1-30T01:29:07Z"] {
            #expect {
                _ = try TimeSpec(parsing: bad)
            } throws: { error in
                "\(error)".hasPrefix("'\(bad)' is not a date-time YYYY-MM-DDTHH:MM:SS[.fraction], two digits each")
            }
        }
        #expect(try TimeSpec(parsing: "01:29:07.5Z") == .timeOfDay(5_347_500_000_000, utcOffsetSeconds: 0))
        #expect(try TimeSpec(parsing: "01:29:07.123456789") == .timeOfDay(5_347_123_456_789))
        #expect(try TimeSpec(parsing: "23:59:60Z") == .timeOfDay(86_400_000_000_000, utcOffsetSeconds: 0))
        #expect(try TimeSpec(parsing: "2026-11-30T01:29:07.5Z") == .wall(1_796_002_147_500_000_000))
    }

    /// A date that no calendar has is told so, with the month's length, not that the text is not a time.
    @Test func anImpossibleDateIsSaidNotToExist() {
        for (text, month) in [
            ("2026-02-30T10:00:00Z", "February 2026 has 28 days"),
            ("2025-02-29T00:00:00Z", "February 2025 has 28 days"),
            ("2026-04-31T00:00:00", "April 2026 has 30 days"),
            ("2024-02-30T00:00:00+01:00", "February 2024 has 29 days"),
        ] {
            #expect(throws: ValueError(input: text, expected: "a date that exists: " + month)) {
                try TimeSpec(parsing: text)
            }
        }
    }

    @Test(arguments: ["5", "3", "12.5", "0"])
    func bareNumbersAreRefusedWithTheSecondsSpellingSuggested(text: String) {
        for parse in [{ _ = try Values.duration(text) }, { _ = try TimeSpec(parsing: text) }] as [() throws -> Void] {
            do {
                try parse()
                Issue.record("'\(text)' was accepted")
            } catch let error as ValueError {
                #expect(error.input == text)
                #expect(error.suggestion == text + "s")
                #expect(error.description.contains("'\(text)' has no unit"), "\(error)")
                #expect(error.description.contains(text + "s"), "\(error)")
            } catch {
                Issue.record("unexpected \(error)")
            }
        }
    }
}

/// Local times around a change of daylight saving time.
@Suite struct DaylightSavingTests {
    /// New York on 2027-03-14: -5 h before 07:00Z, -4 h after; and on 2027-11-07: -4 h before 06:00Z, -5 h after.
    static func newYork(_ utc: Int64) -> Int64 {
        let spring: Int64 = 1_805_007_600  // 2027-03-14T07:00:00Z
        let autumn: Int64 = 1_825_567_200  // 2027-11-07T06:00:00Z
        return utc >= spring && utc < autumn ? -4 * 3600 : -5 * 3600
    }

    /// A local time goes to UTC at its own offset, not at the offset of the local time read as UTC (which put
    /// 03:00 EDT on the day of the change an hour late, and Berlin's 01:59:55 CET an hour early): a repeated time
    /// takes its first moment, a skipped one the offset before the change.
    @Test func aLocalTimeTakesTheOffsetOfItsOwnMoment() {
        let day: Int64 = 1_804_982_400  // 2027-03-14T00:00:00 (as if UTC)
        func utc(_ hours: Int64, _ minutes: Int64) -> Int64 {
            TimeSpec.utcSeconds(ofLocalSeconds: day + hours * 3600 + minutes * 60, offset: Self.newYork)
        }
        #expect(utc(1, 59) == day + 6 * 3600 + 59 * 60, "01:59 EST is 06:59Z")
        #expect(utc(3, 0) == day + 7 * 3600, "03:00 EDT is 07:00Z")
        #expect(utc(2, 30) == day + 7 * 3600 + 30 * 60, "02:30 is skipped: at EST, 07:30Z")
        let autumn: Int64 = 1_825_545_600  // 2027-11-07T00:00:00 (as if UTC)
        #expect(
            TimeSpec.utcSeconds(ofLocalSeconds: autumn + 5400, offset: Self.newYork) == autumn + 5400 + 4 * 3600,
            "01:30 comes twice: the first, EDT")
        // Berlin, 2027-03-28: +1 h before 01:00Z, +2 h after.
        let berlinDay: Int64 = 1_806_192_000  // 2027-03-28T00:00:00 (as if UTC)
        let berlin = { (utc: Int64) -> Int64 in utc >= berlinDay + 3600 ? 7200 : 3600 }
        #expect(
            TimeSpec.utcSeconds(ofLocalSeconds: berlinDay + 7195, offset: berlin) == berlinDay + 3595,
            "01:59:55 CET is 00:59:55Z")
    }

    /// The moments a local time names: none in the hour daylight saving time skips (with the offsets either side),
    /// two in the one it repeats (earliest first, each with its offset), one otherwise.
    @Test func aLocalTimeNamesNoMomentOneOrTwo() {
        let spring: Int64 = 1_804_982_400  // 2027-03-14T00:00:00 (as if UTC), New York
        let skipped = TimeSpec.moments(ofLocalSeconds: spring + 2 * 3600 + 1800, offset: Self.newYork)
        #expect(skipped.valid.isEmpty)
        #expect(skipped.around.before == -5 * 3600 && skipped.around.after == -4 * 3600)
        let autumn: Int64 = 1_825_545_600  // 2027-11-07T00:00:00 (as if UTC)
        let repeated = TimeSpec.moments(ofLocalSeconds: autumn + 5400, offset: Self.newYork)
        #expect(repeated.valid.map(\.utc) == [autumn + 5400 + 4 * 3600, autumn + 5400 + 5 * 3600])
        #expect(repeated.valid.map(\.offset) == [-4 * 3600, -5 * 3600])
        let once = TimeSpec.moments(ofLocalSeconds: autumn + 12 * 3600, offset: Self.newYork)
        #expect(once.valid.map(\.utc) == [autumn + 17 * 3600])
    }
}
