import CLZ4
import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import Testing

@testable import SegmentStore

@Suite(.timeLimit(.minutes(45))) struct FrameCodecTests {
    @Test func crc32cCheckValue() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([]) == 0)
        // Continuing over pieces equals one pass.
        let bytes = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let whole = CRC32C.checksum(bytes)
        let split = bytes.withUnsafeBytes { raw in
            CRC32C.checksum(
                UnsafeRawBufferPointer(rebasing: raw[500...]),
                continuing: CRC32C.checksum(
                    UnsafeRawBufferPointer(rebasing: raw[..<500])))
        }
        #expect(whole == split)
    }

    @Test func hardwareAndTableChecksumsAgreeOnEveryLengthAndAlignment() {
        #if arch(x86_64)
            #expect(CRC32C.hasHardware, "x86-64 machines running this have SSE4.2")
        #endif
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<70_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes.withUnsafeBytes { raw in
            for start in 0..<9 {
                // Short lengths, and lengths around the interleaved blocks (3 × 256 and 3 × 8192 bytes).
                let lengths =
                    [0, 1, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 1000, 4096]
                    + [767, 768, 769, 1536, 24_575, 24_576, 24_577, 25_344, 49_152 + 777, 69_000]
                for length in lengths {
                    let slice = UnsafeRawBufferPointer(rebasing: raw[start..<(start + length)])
                    let expected = slice.isEmpty ? 0 : CRC32C.softwareChecksum(slice.baseAddress!, count: length)
                    #expect(CRC32C.checksum(slice) == expected, "start \(start), length \(length)")
                    #expect(
                        CRC32C.checksum(slice, continuing: 0x1234_5678)
                            == (slice.isEmpty
                                ? 0x1234_5678
                                : CRC32C.softwareChecksum(slice.baseAddress!, count: length, continuing: 0x1234_5678)))
                }
            }
        }
    }

    static let policies: [CodecPolicy] = [.automatic, .forced(.raw), .forced(.lz4), .forced(.lz4Delta)]

    @Test(arguments: PixelFormat.allCases, policies)
    func roundTripIsBitExact(format: PixelFormat, policy: CodecPolicy) throws {
        let frames = try TestFrames(format: format, width: 333, height: 211)
        defer { frames.deallocate() }
        for workers in [1, 2, 3] {
            let encoder = FrameEncoder(
                layout: frames.layout, workerCount: workers, chunkSize: 16384, headerSpace: 56, policy: policy)
            let decoder = FrameDecoder(layout: frames.layout, chunkSize: 16384)
            var codecs: Set<FrameCodec> = []
            for i in 0..<12 {
                let frame = frames.frame(i)
                let encoded = encoder.encode(frame.bytes, key: i % 5 == 0)
                codecs.insert(encoded.codec)
                if i % 5 == 0 { #expect(encoded.isKey) }
                let record = encoder.recordBytes()
                #expect(record.count == 56 + encoded.storedLength)
                try record.withUnsafeBytes { bytes in
                    let payload = UnsafeRawBufferPointer(rebasing: bytes[56...])
                    try decoder.decode(payload, expectedCRC: encoded.storedCRC, hasPrevious: i > 0)
                }
                #expect(decoder.frame.elementsEqual(frame.bytes), "frame \(i) \(format) \(policy) workers \(workers)")
            }
            switch policy {
            case .forced(.raw): #expect(codecs == [.raw])
            case .forced(.lz4): #expect(codecs == [.lz4])
            case .forced(.lz4Delta): #expect(codecs == [.lz4, .lz4Delta])
            default: #expect(!codecs.isEmpty)
            }
        }
    }

    @Test func automaticChoosesDeltaOnStaticFramesAndRawOnNoise() throws {
        let layout = try FrameLayout(format: .gray8, width: 512, height: 512)
        let encoder = FrameEncoder(layout: layout, workerCount: 2, headerSpace: 0)
        var noise = [UInt8](repeating: 0, count: layout.byteCount)
        var seed: UInt64 = 42
        for i in noise.indices {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            noise[i] = UInt8(truncatingIfNeeded: seed >> 33)
        }
        let first = noise.withUnsafeBytes { encoder.encode($0, key: true) }
        #expect(first.codec == .raw, "random bytes do not compress")
        #expect(first.storedLength <= layout.byteCount + 4 + 12 * ChunkPlan(layout: layout).count)
        // The same noise again: the delta is all zeros.
        let second = noise.withUnsafeBytes { encoder.encode($0, key: false) }
        #expect(second.codec == .lz4Delta)
        #expect(!second.isKey)
        #expect(second.storedLength < layout.byteCount / 100)
    }

    /// After a black frame, a frame's difference from it is the frame itself: a delta is no smaller than LZ4 of
    /// the frame, and costs a subtraction pass more, so the chunks are stored as LZ4 and the frame decodes on its
    /// own. Frames that repeat it are stored as deltas (all zeros, far smaller) from the chunks' next comparison on
    /// (8 frames later at most).
    @Test func aDeltaNoSmallerThanLZ4IsNotChosenAndTheFrameStaysAKeyFrame() throws {
        let layout = try FrameLayout(format: .gray8, width: 512, height: 512)
        let encoder = FrameEncoder(layout: layout, workerCount: 2, chunkSize: 65536, headerSpace: 0)
        let decoder = FrameDecoder(layout: layout, chunkSize: 65536)
        let black = [UInt8](repeating: 0, count: layout.byteCount)
        // Compressible, with no run the prefix dictionary of a black frame would help with.
        let pattern = (0..<layout.byteCount).map { UInt8(truncatingIfNeeded: ($0 / 7) &* 37 ^ ($0 / 1531)) }
        let frames: [[UInt8]] = [black] + Array(repeating: pattern, count: 11)
        for i in frames.indices {
            let encoded = frames[i].withUnsafeBytes { bytes in
                frames[max(i - 1, 0)].withUnsafeBytes { previous in
                    encoder.encode(bytes, key: i == 0, previous: i == 0 ? nil : previous.baseAddress, keepsCopy: false)
                }
            }
            switch i {
            case 1:
                #expect(encoded.codec == .lz4 && encoded.isKey, "frame 1: \(encoded)")
                #expect(encoded.storedLength < layout.byteCount / 2, "frame 1 compresses: \(encoded.storedLength)")
            case frames.count - 1:
                #expect(encoded.codec == .lz4Delta && !encoded.isKey, "last frame: \(encoded)")
                #expect(encoded.storedLength < layout.byteCount / 100, "last frame: \(encoded.storedLength)")
            default: break
            }
            let record = encoder.recordBytes()
            try record.withUnsafeBytes { payload in
                try decoder.decode(payload, expectedCRC: encoded.storedCRC, hasPrevious: i > 0)
            }
            frames[i].withUnsafeBytes { #expect(decoder.frame.elementsEqual($0), "frame \(i)") }
        }
    }

    /// Static frames first (the delta wins), then a random block that jumps to a new place every frame (LZ4 of the
    /// frame is half the size of LZ4 of the difference): a comparison switches the chunks to LZ4, trying it without
    /// the prefix dictionary, and every frame still decodes exactly.
    @Test func aChunkThatStopsResemblingThePreviousFrameSwitchesToLZ4AndDecodesExactly() throws {
        let layout = try FrameLayout(format: .gray8, width: 256, height: 1024)
        let chunkSize = 65536
        let encoder = FrameEncoder(layout: layout, workerCount: 2, chunkSize: chunkSize, headerSpace: 0)
        let decoder = FrameDecoder(layout: layout, chunkSize: chunkSize)
        var frame = [UInt8](repeating: 0, count: layout.byteCount)
        var seed: UInt64 = 7
        func randomBlock() -> [UInt8] {
            (0..<4096).map { _ in
                seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return UInt8(truncatingIfNeeded: seed >> 33)
            }
        }
        let still = randomBlock()
        var nonKeyCodecs: [FrameCodec] = []
        for i in 0..<48 {
            frame.withUnsafeMutableBytes { _ = $0.initializeMemory(as: UInt8.self, repeating: 0) }
            let moving = i >= 4
            for chunk in 0..<(layout.byteCount / chunkSize) {
                let start = chunk * chunkSize + (moving ? (i * 5003) % (chunkSize - 4096) : 1000)
                frame.replaceSubrange(start..<start + 4096, with: moving ? randomBlock() : still)
            }
            let encoded = frame.withUnsafeBytes { encoder.encode($0, key: i == 0) }
            if i > 0 { nonKeyCodecs.append(encoded.codec) }
            try encoder.recordBytes().withUnsafeBytes { payload in
                try decoder.decode(payload, expectedCRC: encoded.storedCRC, hasPrevious: i > 0)
            }
            #expect(decoder.frame.elementsEqual(frame), "frame \(i)")
        }
        #expect(nonKeyCodecs.prefix(3).allSatisfy { $0 == .lz4Delta }, "static frames: \(nonKeyCodecs.prefix(3))")
        #expect(nonKeyCodecs.suffix(8).allSatisfy { $0 == .lz4 }, "moving block: \(nonKeyCodecs.suffix(8))")
    }

    /// The shortcut for unchanged chunks: a block is taken for zeros exactly when its data was all zeros, and a
    /// damaged block it takes for zeros really decodes to them.
    @Test func zeroBlocksAreRecognisedWithoutDecodingAndNothingElseIs() {
        var seed: UInt64 = 11
        func next() -> UInt64 {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return seed >> 33
        }
        func compressed(_ data: [UInt8]) -> [UInt8] {
            var block = [UInt8](repeating: 0, count: LZ4Block.compressBound(data.count))
            let n = data.withUnsafeBytes { source in
                block.withUnsafeMutableBytes { LZ4Block.compress(source, into: $0) }
            }
            return Array(block[..<n])
        }
        func isZeros(_ block: [UInt8], _ count: Int) -> Bool {
            block.withUnsafeBytes { LZ4Block.decodesToZeros($0, count: count) }
        }
        func decoded(_ block: [UInt8], _ count: Int) -> [UInt8]? {
            var out = [UInt8](repeating: 0xEE, count: count)
            let n = block.withUnsafeBytes { source in
                out.withUnsafeMutableBytes { target in
                    LZ4_decompress_safe(
                        source.baseAddress!.assumingMemoryBound(to: CChar.self),
                        target.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(source.count), Int32(count))
                }
            }
            return n == count ? out : nil
        }
        for count in [1, 5, 12, 13, 14, 100, 4096, 65_536, 262_144] {
            let zeros = [UInt8](repeating: 0, count: count)
            let zeroBlock = compressed(zeros)
            #expect(isZeros(zeroBlock, count), "\(count) zeros")
            #expect(!isZeros(zeroBlock, count + 1), "\(count) zeros taken for \(count + 1)")
            if count > 1 { #expect(!isZeros(zeroBlock, count - 1), "\(count) zeros taken for \(count - 1)") }
            // One changed byte anywhere, and sparse changes: never zeros.
            for position in [0, count / 3, count / 2, count - 1] {
                var data = zeros
                data[position] = UInt8(1 + next() % 255)
                #expect(!isZeros(compressed(data), count), "\(count) bytes, byte \(position) changed")
            }
            var sparse = zeros
            for _ in 0..<max(1, count / 5000) { sparse[Int(next() % UInt64(count))] = 7 }
            #expect(!isZeros(compressed(sparse), count))
            // Damaged copies of the zero block: whatever is taken for zeros decodes to exactly that.
            for _ in 0..<400 {
                var damaged = zeroBlock
                switch next() % 3 {
                case 0: damaged[Int(next() % UInt64(damaged.count))] = UInt8(truncatingIfNeeded: next())
                case 1: damaged.removeLast(Int(next() % UInt64(damaged.count)))
                default:
                    damaged.append(contentsOf: (0..<(1 + next() % 8)).map { _ in UInt8(truncatingIfNeeded: next()) })
                }
                guard isZeros(damaged, count) else { continue }
                #expect(decoded(damaged, count) == zeros, "a damaged block of \(count) zeros taken for zeros")
            }
        }
        #expect(!isZeros([], 1))
        #expect(!isZeros([0x00], 0), "an empty output is never a chunk")
        // Hand-made blocks: a match reaching before the start, and a block ending in a match.
        #expect(!isZeros([0x1F, 0x00, 0x02, 0x00, 0x00], 24))
        #expect(!isZeros([0x1F, 0x00, 0x01, 0x00, 0x00], 20))
        let handMade: [UInt8] = [0x1A, 0x00, 0x01, 0x00, 0x50, 0, 0, 0, 0, 0]
        #expect(isZeros(handMade, 20), "1 literal, a match of 14, 5 literals")
        #expect(decoded(handMade, 20) == [UInt8](repeating: 0, count: 20))
    }

    /// Unchanged chunks of a delta frame are taken from the previous frame, decoded into another buffer or in place.
    @Test func unchangedChunksComeFromThePreviousFrameExactly() throws {
        let layout = try FrameLayout(format: .gray8, width: 256, height: 1024)
        let chunkSize = 65536
        let encoder = FrameEncoder(
            layout: layout, workerCount: 2, chunkSize: chunkSize, headerSpace: 0, policy: .forced(.lz4Delta))
        let decoders = [
            FrameDecoder(layout: layout, chunkSize: chunkSize),
            FrameDecoder(
                layout: layout, chunkSize: chunkSize, buffers: DecodeBuffers(byteCount: layout.byteCount, count: 3)),
        ]
        var seed: UInt64 = 3
        var frame = (0..<layout.byteCount).map { _ in
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: seed >> 40) & 0x0F
        }
        var zeroChunks = 0
        for i in 0..<12 {
            // Frames 1, 2, 5, … repeat the one before; the others change one byte in one chunk.
            if i > 0 && i % 3 == 0 { frame[(i * 70_001) % frame.count] &+= 1 }
            let encoded = frame.withUnsafeBytes { encoder.encode($0, key: i == 0) }
            let payload = encoder.recordBytes()
            try payload.withUnsafeBytes { bytes in
                for decoder in decoders {
                    try decoder.decode(bytes, expectedCRC: encoded.storedCRC, hasPrevious: i > 0)
                    #expect(decoder.frame.elementsEqual(frame), "frame \(i), \(decoder.buffers.count) buffers")
                }
                if i > 0 { zeroChunks += Self.zeroChunks(bytes, chunks: layout.byteCount / chunkSize) }
            }
        }
        #expect(zeroChunks >= 11 * (layout.byteCount / chunkSize - 1), "the shortcut ran: \(zeroChunks) chunks")
    }

    /// How many chunks of a payload are LZ4 blocks of zeros.
    static func zeroChunks(_ payload: UnsafeRawBufferPointer, chunks: Int) -> Int {
        var cursor = 4 + 12 * chunks
        var zeros = 0
        for chunk in 0..<chunks {
            let length = Int(payload.loadUnaligned(fromByteOffset: 4 + 12 * chunk + 4, as: UInt32.self))
            let stored = UnsafeRawBufferPointer(rebasing: payload[cursor..<cursor + length])
            if LZ4Block.decodesToZeros(stored, count: 65536) { zeros += 1 }
            cursor += length
        }
        return zeros
    }

    @Test func damagedPayloadIsRejectedNotDecoded() throws {
        let frames = try TestFrames(format: .i420, width: 160, height: 120)
        defer { frames.deallocate() }
        let encoder = FrameEncoder(layout: frames.layout, workerCount: 1, chunkSize: 4096, headerSpace: 0)
        let decoder = FrameDecoder(layout: frames.layout, chunkSize: 4096)
        let encoded = encoder.encode(frames.frame(0).bytes, key: true)
        let payload = encoder.recordBytes()
        for position in stride(from: 0, to: payload.count, by: max(1, payload.count / 97)) {
            var damaged = payload
            damaged[position] ^= 0x10
            #expect(throws: FrameDecodeError.self) {
                try damaged.withUnsafeBytes {
                    try decoder.decode($0, expectedCRC: encoded.storedCRC, hasPrevious: false)
                }
            }
        }
    }

    /// A chunk says more stored bytes than LZ4 can make of its length: damage, whatever its checksums say.
    @Test func aChunkLongerThanLZ4CanMakeIsRefusedWhateverItsChecksums() throws {
        let layout = try FrameLayout(format: .gray8, width: 64, height: 64)
        let plan = ChunkPlan(layout: layout, chunkSize: 4096)
        try #require(plan.count == 1)
        let decoder = FrameDecoder(layout: layout, chunkSize: 4096)
        for extra in [0, 1] {
            let length = plan.largestStored(0) + extra
            let chunk = [UInt8](repeating: 0, count: length)
            var payload: [UInt8] = []
            for word in [UInt32(1), 1, UInt32(length), CRC32C.checksum(chunk)] {
                withUnsafeBytes(of: word.littleEndian) { payload += $0 }
            }
            let tableCRC = CRC32C.checksum(payload)
            payload += chunk
            let error = #expect(throws: FrameDecodeError.self) {
                try payload.withUnsafeBytes { try decoder.decode($0, expectedCRC: tableCRC, hasPrevious: false) }
            }
            #expect((error == .chunkLengthInvalid(chunk: 0)) == (extra == 1), "\(length): \(String(describing: error))")
        }
        #expect(plan.largestPayload == plan.tableLength + 4096 + 4096 / 255 + 16)
    }

    /// A record whose header, checksum intact, says more stored bytes than any frame of its stream can take is
    /// damage, refused before a buffer of that size is asked for (it was: hundreds of gigabytes, and the reader died).
    @Test func aRecordLongerThanAnyPayloadIsDamageNotAnAllocation() throws {
        let directory = TemporaryDirectory.shared
        let layout = try FrameLayout(format: .gray8, width: 64, height: 64)
        let stream = StreamDescription(
            layout: layout, frameDuration: FrameTime(value: 1, timescale: 30),
            color: ColorInfo(matrix: .bt709, range: .video))
        let header = SegmentHeader(
            stream: stream, streamName: "camera", sequence: 1, keyInterval: 1, chunkSize: 4096,
            createdWallNanoseconds: 0)
        let folder = try directory.directory("huge-record")
        let writer = try SegmentFileWriter(directory: folder, header: header, fileSystem: POSIXFileSystem())
        let encoder = FrameEncoder(
            layout: layout, workerCount: 1, chunkSize: 4096, headerSpace: SegmentFormat.recordHeaderLength)
        let frame = [UInt8](repeating: 7, count: layout.byteCount)
        let encoded = frame.withUnsafeBytes { encoder.encode($0, key: true) }
        let entry = try writer.append(pieces: encoder.pieces, ptsNanoseconds: 0, wallNanoseconds: 0, encoded: encoded)
        let path = writer.path
        writer.close()
        var bytes = try #require(FileManager.default.contents(atPath: path)).map { $0 }
        let record = Int(entry.offset)
        bytes.withUnsafeMutableBytes { raw in
            let base = raw.baseAddress! + record
            base.put(UInt64(1) << 39, at: 32)
            base.put(CRC32C.checksum(UnsafeRawBufferPointer(start: base, count: 52)), at: 52)
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let reader = try SegmentFileReader(path: path, fileSystem: POSIXFileSystem())
        defer { reader.close() }
        let error = #expect(throws: SegmentStoreError.self) { try reader.readRecord(at: entry.offset, frame: 0) }
        #expect(
            String(describing: error).contains("more than a frame of this stream can take"),
            "\(String(describing: error))")
        let scan = try reader.scan()
        #expect(scan.entries.isEmpty && scan.damage != nil)
    }

    /// A stream name that is not UTF-8 (checksum intact) makes the header invalid: read with replacement characters
    /// it would be longer than its bytes, and every record would be looked for at the wrong offset.
    @Test func aSegmentHeaderWhoseStreamNameIsNotUTF8IsRefused() throws {
        let stream = StreamDescription(
            layout: try FrameLayout(format: .gray8, width: 16, height: 16),
            frameDuration: FrameTime(value: 1, timescale: 30),
            color: ColorInfo(matrix: .bt709, range: .video))
        let header = SegmentHeader(
            stream: stream, streamName: "camera", sequence: 1, keyInterval: 1, chunkSize: 4096,
            createdWallNanoseconds: 0)
        var bytes = header.encoded()
        #expect(try bytes.withUnsafeBytes { try SegmentHeader.parse($0) } == header)
        bytes.replaceSubrange(66..<72, with: [0x9A, 0x92, 0x9E, 0x9A, 0x8D, 0x9E])
        bytes.withUnsafeMutableBytes { raw in
            raw.baseAddress!.put(CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<72])), at: 72)
        }
        #expect(throws: SegmentHeader.ParseError.invalidField("stream name (not UTF-8)")) {
            try bytes.withUnsafeBytes { try SegmentHeader.parse($0) }
        }
    }
}
