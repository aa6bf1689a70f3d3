import Testing

@testable import RewindCore

@Suite struct FrameTimeTests {
    @Test(arguments: [
        (FrameTime(value: 1, timescale: 30), FrameTime(value: 2, timescale: 60)),
        (
            FrameTime(value: 1001, timescale: 30000),
            FrameTime(value: 33_366_666, timescale: 1_000_000_000 / 1000 * 1000)
        ),
        (FrameTime(value: -2, timescale: 4), FrameTime(value: -1, timescale: 2)),
        (FrameTime(value: 0, timescale: 5), FrameTime(value: 0, timescale: Int32.max)),
        (FrameTime(value: Int64.max, timescale: 1), FrameTime(value: Int64.max, timescale: 1)),
        (FrameTime(value: Int64.min, timescale: 1), FrameTime(value: Int64.min, timescale: 1)),
        (FrameTime(value: Int64(Int32.max) * 3, timescale: Int32.max), FrameTime(value: 3, timescale: 1)),
    ])
    func timesThatAreEqual(_ lhs: FrameTime, _ rhs: FrameTime) {
        if lhs.value == 1001 {
            // 1001/30000 s is 33 366 666.66… ns: not equal to a whole number of nanoseconds.
            #expect(lhs != rhs)
            #expect(rhs < lhs)
            return
        }
        #expect(lhs == rhs)
        #expect(!(lhs < rhs) && !(rhs < lhs))
        #expect(lhs.hashValue == rhs.hashValue)
        #expect(Set([lhs, rhs]).count == 1)
    }

    @Test func orderingAtTheExtremes() {
        let maxOverOne = FrameTime(value: Int64.max, timescale: 1)
        let maxOverMax = FrameTime(value: Int64.max, timescale: Int32.max)
        let minOverOne = FrameTime(value: Int64.min, timescale: 1)
        let minOverMax = FrameTime(value: Int64.min, timescale: Int32.max)
        #expect(maxOverMax < maxOverOne)
        #expect(minOverOne < minOverMax)
        #expect(minOverMax < maxOverMax)
        #expect(FrameTime(value: Int64.max - 1, timescale: Int32.max) < maxOverMax)
        #expect(FrameTime(value: Int64.min + 1, timescale: 1) > minOverOne)
        // Cross-multiplied values that would overflow 64 bits still compare exactly.
        #expect(FrameTime(value: Int64.max, timescale: 2) > FrameTime(value: Int64.max / 2, timescale: 1))
        #expect(FrameTime(value: Int64.max, timescale: 2) < FrameTime(value: Int64.max / 2 + 1, timescale: 1))
        #expect(maxOverOne.hashValue == FrameTime(value: Int64.max, timescale: 1).hashValue)
    }

    @Test func nanosecondsConvertExactlyAndRoundDown() throws {
        #expect(FrameTime(value: 1, timescale: 1).nanoseconds == 1_000_000_000)
        #expect(FrameTime(value: 1, timescale: 3).nanoseconds == 333_333_333)
        #expect(FrameTime(value: -1, timescale: 3).nanoseconds == -333_333_334)
        #expect(FrameTime(value: -3, timescale: 3).nanoseconds == -1_000_000_000)
        #expect(FrameTime(value: 1001, timescale: 60000).nanoseconds == 16_683_333)
        #expect(FrameTime(value: -1001, timescale: 60000).nanoseconds == -16_683_334)
        #expect(FrameTime(nanoseconds: Int64.max).nanoseconds == Int64.max)
        #expect(FrameTime(nanoseconds: Int64.min).nanoseconds == Int64.min)
        // 2^63 - 1 units of 1/(2^31 - 1) s is about 4.29e18 ns: fits, and is exact to the floor.
        let wide = Int128(Int64.max) * 1_000_000_000 / Int128(Int32.max)
        #expect(Int128(try #require(FrameTime(value: Int64.max, timescale: Int32.max).nanoseconds)) == wide)
        #expect(Int128(try #require(FrameTime(value: Int64.min, timescale: Int32.max).nanoseconds)) == -wide - 1)
    }

    /// Sums and differences of 64-bit nanoseconds clamp at the ends of the range instead of trapping (times read from
    /// files may be anything).
    @Test func saturatingArithmeticClampsAtTheEnds() {
        #expect(Int64.max.addingSaturating(1) == .max)
        #expect(Int64.min.addingSaturating(-1) == .min)
        #expect(Int64(5).addingSaturating(-7) == -2)
        #expect(Int64.min.subtractingSaturating(1) == .min)
        #expect(Int64.max.subtractingSaturating(-1) == .max)
        #expect(Int64(0).subtractingSaturating(.min) == .max)
        #expect(Int64(-1).subtractingSaturating(.min) == .max)
        #expect(Int64(5).subtractingSaturating(7) == -2)
    }

    @Test func nanosecondsOverflowIsNil() {
        #expect(FrameTime(value: Int64.max, timescale: 1).nanoseconds == nil)
        #expect(FrameTime(value: Int64.min, timescale: 1).nanoseconds == nil)
        #expect(FrameTime(value: Int64.max / 1_000_000_000 + 1, timescale: 1).nanoseconds == nil)
        #expect(FrameTime(value: Int64.max / 1_000_000_000, timescale: 1).nanoseconds != nil)
        #expect(throws: FrameError.ptsOutOfRange(FrameTime(value: Int64.max, timescale: 1))) {
            try FrameInfo(pts: FrameTime(value: Int64.max, timescale: 1), wallNanoseconds: 0, color: .unspecified)
        }
    }

    @Test func frameIndexTimes() {
        let sixty = FrameTime(value: 1, timescale: 60)
        #expect(FrameTime.frame(120, duration: sixty) == FrameTime(value: 2, timescale: 1))
        #expect(FrameTime.frame(Int64.max, duration: FrameTime(value: 2, timescale: 60)) == nil)
    }
}

@Suite struct FrameLayoutTests {
    /// (bytes per row, rows) of each plane, computed independently of `FrameLayout`.
    static func expectedPlanes(_ format: PixelFormat, _ width: Int, _ height: Int) -> [(Int, Int)] {
        let cw = (width + 1) / 2
        let ch = (height + 1) / 2
        switch format {
        case .gray8: return [(width, height)]
        case .bgra: return [(width * 4, height)]
        case .nv12: return [(width, height), (cw * 2, ch)]
        case .p010: return [(width * 2, height), (cw * 4, ch)]
        case .i420: return [(width, height), (cw, ch), (cw, ch)]
        }
    }

    @Test(arguments: PixelFormat.allCases, [(1, 1), (2, 2), (3, 5), (7, 1), (641, 481), (1920, 1080), (3840, 2160)])
    func planeGeometry(_ format: PixelFormat, _ size: (Int, Int)) throws {
        let layout = try FrameLayout(format: format, width: size.0, height: size.1)
        let expected = Self.expectedPlanes(format, size.0, size.1)
        #expect(layout.planeCount == expected.count)
        var offset = 0
        for (index, (bytesPerRow, rows)) in expected.enumerated() {
            let plane = layout.plane(index)
            #expect(plane.offset == offset, "plane \(index) of \(layout)")
            #expect(plane.bytesPerRow == bytesPerRow, "plane \(index) of \(layout)")
            #expect(plane.rows == rows, "plane \(index) of \(layout)")
            offset += bytesPerRow * rows
        }
        #expect(layout.byteCount == offset)
    }

    @Test func knownSizes() throws {
        #expect(try FrameLayout(format: .nv12, width: 1920, height: 1080).byteCount == 3_110_400)
        #expect(try FrameLayout(format: .i420, width: 3, height: 3).byteCount == 9 + 4 + 4)
        #expect(try FrameLayout(format: .p010, width: 3, height: 3).byteCount == 18 + 16)
    }

    @Test(arguments: [(0, 1), (1, 0), (-1, 5), (FrameLayout.maximumDimension + 1, 1), (1, Int.max)])
    func invalidDimensionsThrow(_ size: (Int, Int)) {
        #expect(throws: FrameError.invalidDimensions(width: size.0, height: size.1)) {
            try FrameLayout(format: .nv12, width: size.0, height: size.1)
        }
    }

    @Test func equalityIgnoresNothingThatMatters() throws {
        let a = try FrameLayout(format: .nv12, width: 4, height: 4)
        #expect(a == (try FrameLayout(format: .nv12, width: 4, height: 4)))
        #expect(a != (try FrameLayout(format: .i420, width: 4, height: 4)))
        #expect(a.hashValue == (try FrameLayout(format: .nv12, width: 4, height: 4)).hashValue)
    }
}
