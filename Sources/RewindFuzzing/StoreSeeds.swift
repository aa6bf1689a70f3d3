import Foundation
import RewindCore
import RewindSystem
import SegmentStore

/// Valid inputs for the store's targets, made by the store's own writers: where the fuzzer starts.
enum StoreSeeds {
    /// Two small streams: NV12 in several chunks a plane, and an odd-sized gray one in one chunk.
    static let layouts: [(layout: FrameLayout, chunkSize: Int)] = [
        (try! FrameLayout(format: .nv12, width: 96, height: 64), 4096),
        (try! FrameLayout(format: .gray8, width: 33, height: 7), 4096),
    ]

    /// `count` frames of `layout`: a gradient that moves a little each frame, with a noisy corner.
    static func frames(_ layout: FrameLayout, count: Int) -> [[UInt8]] {
        (0..<count).map { k in
            (0..<layout.byteCount).map { i in
                let gradient = UInt8(truncatingIfNeeded: i / 3 + k)
                return i % 97 < 5 ? UInt8(truncatingIfNeeded: i &* 2_654_435_761 >> 13 &+ k) : gradient
            }
        }
    }

    /// Segment files written by ``SegmentFileWriter``: sealed (footer, trailer) and unsealed, with key and delta
    /// frames, behind the target's first byte (repair or not).
    @Sendable static func segments() throws -> [[UInt8]] {
        var seeds: [[UInt8]] = []
        let folder = try FuzzScratch.shared.makeFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        for (index, (layout, chunkSize)) in layouts.enumerated() {
            let stream = StreamDescription(
                layout: layout, frameDuration: FrameTime(value: 1, timescale: 30),
                color: ColorInfo(matrix: .bt709, range: .video))
            for sealed in [true, false] {
                let header = SegmentHeader(
                    stream: stream, streamName: "camera", sequence: UInt64(1 + index), keyInterval: 3,
                    chunkSize: chunkSize, createdWallNanoseconds: 1_700_000_000_000_000_000)
                let fileSystem = POSIXFileSystem()
                let writer = try SegmentFileWriter(
                    directory: folder, header: header, fileSystem: fileSystem)
                let encoder = FrameEncoder(
                    layout: layout, workerCount: 1, chunkSize: chunkSize,
                    headerSpace: SegmentFormat.recordHeaderLength)
                for (k, frame) in frames(layout, count: 5).enumerated() {
                    let encoded = frame.withUnsafeBytes { encoder.encode($0, key: k % 3 == 0) }
                    try writer.append(
                        pieces: encoder.pieces, ptsNanoseconds: Int64(k) * 33_333_333,
                        wallNanoseconds: 1_700_000_000_000_000_000 + Int64(k) * 33_333_333, encoded: encoded)
                }
                let path = sealed ? folder + "/" + (try writer.seal()) : writer.path
                writer.close()
                guard let bytes = FileManager.default.contents(atPath: path) else {
                    throw FuzzFailure("the seed segment \(path) cannot be read")
                }
                try fileSystem.unlink(path)
                seeds.append([1] + Array(bytes))
                if sealed { seeds.append([0] + Array(bytes)) }
            }
        }
        return seeds
    }

    /// Payloads of key and delta frames, behind the settings bytes the payload target reads.
    @Sendable static func payloads() -> [[UInt8]] {
        layouts.flatMap { layout, chunkSize -> [[UInt8]] in
            let encoder = FrameEncoder(layout: layout, workerCount: 1, chunkSize: chunkSize, headerSpace: 0)
            let settings: [UInt8] = [
                UInt8(PixelFormat.allCases.firstIndex(of: layout.format)!), UInt8(layout.width - 1),
                UInt8(layout.height - 1), 0,
            ]
            return frames(layout, count: 2).enumerated().map { k, frame in
                _ = frame.withUnsafeBytes { encoder.encode($0, key: k == 0) }
                return settings + [UInt8(k)] + encoder.recordBytes()
            }
        }
    }

    /// Settings for each format and policy, and pixels with runs and noise.
    @Sendable static func codec() -> [[UInt8]] {
        let pixels = (0..<256).map { UInt8(truncatingIfNeeded: $0 < 128 ? $0 / 16 : $0 &* 37) }
        return PixelFormat.allCases.indices.flatMap { format in
            (0..<4).map { policy in
                [UInt8(format), 63, 31, 0, UInt8(policy), 0, 0b0100, 255, 3, 0b1010] + pixels
            }
        }
    }

    /// A losses journal and a markers journal with a record of every kind, behind the target's first byte.
    @Sendable static func journals() -> [[UInt8]] {
        let gap = LossJournal.Gap(start: 1_000, end: 5_000, reason: .inputInterval)
        let losses: [LossJournal.Record] = [
            .gapAdded(stream: "front", gap),
            .gapExtended(stream: "front", end: 5_000, newEnd: 9_000, reason: .inputInterval),
            .dropsAdded(stream: "rear", reason: .spillBehind, count: 3), .gapRemoved(stream: "front", gap),
            .gapsRemoved(stream: "rear", startingBefore: 2_000),
        ]
        let marker = MarkerRow(
            id: 4, streamID: 1, atNanoseconds: 2_500, label: "door", hold: 1_000..<4_000,
            createdWallNanoseconds: 1_700_000_000_000_000_000)
        let markers: [MarkerJournal.Record] = [
            .added(MarkerJournal.Entry(marker, streamName: "front")), .removed(4), .idsUsed(9),
        ]
        let lossFile = JournalFraming.header(magic: LossJournal.Contents.magic) + losses.flatMap(LossJournal.encode)
        let markerFile =
            JournalFraming.header(magic: MarkerJournal.Contents.magic) + markers.flatMap(MarkerJournal.encode)
        return [[0] + lossFile, [2] + lossFile, [1] + markerFile, [3] + markerFile]
    }
}
