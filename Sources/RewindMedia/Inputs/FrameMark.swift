import RewindCore

/// The verifiable mark of a synthetic frame: 128 one-pixel cells in the first two rows of plane 0.
enum FrameMark {
    static let cells = 64
    static let magic: UInt64 = 0x5257

    /// Bytes per pixel of plane 0.
    static func pixelBytes(_ format: PixelFormat) -> Int {
        switch format {
        case .nv12, .i420, .gray8: 1
        case .p010: 2
        case .bgra: 4
        }
    }

    /// The bytes of one cell holding `bit`.
    @inline(__always)
    static func cell(_ bit: Bool, format: PixelFormat, byte: Int) -> UInt8 {
        switch format {
        case .p010: byte == 0 ? 0 : (bit ? 235 : 16)
        case .bgra: byte == 3 ? 255 : (bit ? 235 : 16)
        case .nv12, .i420, .gray8: bit ? 235 : 16
        }
    }

    static func write(index: Int64, into buffer: UnsafeMutableRawBufferPointer, layout: FrameLayout) {
        let rowBytes = layout.plane(0).bytesPerRow
        let unit = pixelBytes(layout.format)
        let word0 = magic << 48 | UInt64(index)
        let checksum = Self.checksum(UnsafeRawBufferPointer(buffer), layout: layout)
        for (row, word) in [(0, word0), (1, checksum)] {
            for bitIndex in 0..<cells {
                let bit = (word >> UInt64(63 - bitIndex)) & 1 == 1
                for b in 0..<unit {
                    buffer[row * rowBytes + bitIndex * unit + b] = cell(bit, format: layout.format, byte: b)
                }
            }
        }
    }

    static func read(_ bytes: UnsafeRawBufferPointer, layout: FrameLayout) -> VerifiedMark? {
        guard layout.width >= cells, layout.height >= 2, bytes.count == layout.byteCount else { return nil }
        let rowBytes = layout.plane(0).bytesPerRow
        let unit = pixelBytes(layout.format)
        var words: [UInt64] = [0, 0]
        for row in 0..<2 {
            var word: UInt64 = 0
            for bitIndex in 0..<cells {
                let at = row * rowBytes + bitIndex * unit
                let bit = bytes[at + unit - (layout.format == .bgra ? 2 : 1)] >= 128
                for b in 0..<unit where bytes[at + b] != cell(bit, format: layout.format, byte: b) { return nil }
                word = word << 1 | (bit ? 1 : 0)
            }
            words[row] = word
        }
        guard words[0] >> 48 == magic else { return nil }
        guard checksum(bytes, layout: layout) == words[1] else { return nil }
        return VerifiedMark(index: Int64(words[0] & 0xFFFF_FFFF_FFFF), checksum: words[1])
    }

    /// The checksum of every byte outside the mark cells.
    ///
    /// Each step `h = rotl((h ^ word) × odd, 29)` is a bijection of `h` for a fixed word and of the word for a fixed
    /// `h`, so changing any single word (any flipped bit) always changes the result.
    static func checksum(_ bytes: UnsafeRawBufferPointer, layout: FrameLayout) -> UInt64 {
        let rowBytes = layout.plane(0).bytesPerRow
        let markBytes = cells * pixelBytes(layout.format)
        var lanes: (UInt64, UInt64, UInt64, UInt64) = (1, 2, 3, 4)
        update(&lanes, UnsafeRawBufferPointer(rebasing: bytes[markBytes..<rowBytes]))
        update(&lanes, UnsafeRawBufferPointer(rebasing: bytes[(rowBytes + markBytes)..<(2 * rowBytes)]))
        update(&lanes, UnsafeRawBufferPointer(rebasing: bytes[(2 * rowBytes)...]))
        var h = lanes.0
        for lane in [lanes.1, lanes.2, lanes.3] { h = step(h, lane) }
        return h
    }

    @inline(__always)
    private static func step(_ h: UInt64, _ word: UInt64) -> UInt64 {
        let x = (h ^ word) &* 0x9E37_79B9_7F4A_7C15
        return x << 29 | x >> 35
    }

    /// Folds `bytes` into four independent lanes, 32 bytes at a time, then the tail into lane 0.
    private static func update(_ lanes: inout (UInt64, UInt64, UInt64, UInt64), _ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        var (a, b, c, d) = lanes
        var at = 0
        while at + 32 <= bytes.count {
            a = step(a, base.loadUnaligned(fromByteOffset: at, as: UInt64.self))
            b = step(b, base.loadUnaligned(fromByteOffset: at + 8, as: UInt64.self))
            c = step(c, base.loadUnaligned(fromByteOffset: at + 16, as: UInt64.self))
            d = step(d, base.loadUnaligned(fromByteOffset: at + 24, as: UInt64.self))
            at += 32
        }
        while at < bytes.count {
            var word: UInt64 = 0
            let take = min(8, bytes.count - at)
            for k in 0..<take { word |= UInt64(base.load(fromByteOffset: at + k, as: UInt8.self)) << UInt64(8 * k) }
            // The tail length goes into the word's top byte only when the word is short, so lengths stay distinct.
            a = step(a, take == 8 ? word : word | UInt64(take) << 56)
            at += take
        }
        lanes = (a, b, c, d)
    }
}
