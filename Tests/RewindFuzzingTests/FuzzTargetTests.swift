import Foundation
import RewindControl
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore
import Testing

@testable import RewindFuzzing

/// The fuzz targets in every test run: their seeds, the inputs fuzzing once broke them with (the reproducers), and
/// a few thousand mutations of each seed, all read without a broken invariant or a crash.
@Suite struct FuzzTargetTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    static let reproducers = root.appendingPathComponent("Reproducers")

    @Test(arguments: FuzzTarget.all.map(\.name))
    func everySeedPasses(name: String) throws {
        let target = try #require(FuzzTarget.named(name))
        let seeds = try target.seeds()
        #expect(seeds.count >= 3, "\(name) has \(seeds.count) seeds")
        for (index, seed) in seeds.enumerated() {
            #expect(throws: Never.self, "\(name) seed \(index)") { try target.run(seed) }
        }
    }

    /// Every input kept under `Reproducers/TARGET/` (what fuzzing found, minimized) is read correctly now.
    @Test func everyReproducerPasses() throws {
        let folders = try FileManager.default.contentsOfDirectory(atPath: Self.reproducers.path).sorted()
        #expect(!folders.isEmpty)
        var count = 0
        for folder in folders {
            let target = try #require(FuzzTarget.named(folder), "Reproducers/\(folder) names no target")
            let folderURL = Self.reproducers.appendingPathComponent(folder)
            for file in try FileManager.default.contentsOfDirectory(atPath: folderURL.path).sorted() {
                let bytes = try Data(contentsOf: folderURL.appendingPathComponent(file))
                #expect(throws: Never.self, "\(folder)/\(file)") { try target.run(Array(bytes)) }
                count += 1
            }
        }
        #expect(count > 0)
    }

    /// Bit flips, cut ends, inserted, repeated and deleted bytes of every seed: what a damaged file or a mangled
    /// request looks like, and a fraction of what `make fuzz` tries, in every test run.
    @Test(arguments: FuzzTarget.all.map(\.name))
    func mutationsOfEverySeedPass(name: String) throws {
        let target = try #require(FuzzTarget.named(name))
        var random = SplitMix64(seed: 0x5EED_0000 &+ UInt64(name.utf8.count))
        for seed in try target.seeds() {
            for round in 0..<300 {
                var bytes = seed
                for _ in 0...(round % 4) { Self.mutate(&bytes, &random) }
                #expect(throws: Never.self, "\(name) mutation \(round): \(bytes.prefix(64))") { try target.run(bytes) }
            }
        }
    }

    /// A fuzzing run ends at its first finding by a crash, which leaves its scratch directory: the next run removes
    /// those of processes that ended, and nothing else.
    @Test func scratchDirectoriesOfEndedRunsAreRemoved() throws {
        let base = try TemporaryDirectory.shared.directory("scratch")
        let ended = Process()
        ended.executableURL = URL(fileURLWithPath: "/bin/true")
        try ended.run()
        ended.waitUntilExit()
        let names = [
            "rewind-fuzz-\(ended.processIdentifier)-a1b2c3", "rewind-fuzz-\(getpid())-d4e5f6", "rewind-fuzz-1-g7h8i9",
            "rewind-fuzz-k1l2m3", "rewind-fuzz-x-n4o5p6", "other-\(ended.processIdentifier)-q7r8s9",
        ]
        for name in names {
            try FileManager.default.createDirectory(
                atPath: "\(base)/\(name)/thread-1", withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: "\(base)/\(name)/thread-1/input.seg", contents: Data([1])))
        }
        FuzzScratch.removeAbandoned(in: base)
        #expect(try FileManager.default.contentsOfDirectory(atPath: base).sorted() == names.dropFirst().sorted())
    }

    /// The Makefile's `make fuzz` runs every target.
    @Test func makeFuzzRunsEveryTarget() throws {
        let makefile = try String(
            contentsOf: Self.root.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(
                "Makefile"), encoding: .utf8)
        let line = try #require(makefile.split(separator: "\n").first { $0.hasPrefix("FUZZ_TARGETS ?=") })
        let listed = line.dropFirst("FUZZ_TARGETS ?=".count).split(separator: " ").map(String.init)
        #expect(listed == FuzzTarget.all.map(\.name))
    }

    static func mutate(_ bytes: inout [UInt8], _ random: inout SplitMix64) {
        let at = bytes.isEmpty ? 0 : Int(random.next() % UInt64(bytes.count))
        switch random.next() % 6 {
        case 0 where !bytes.isEmpty: bytes[at] ^= UInt8(1 << (random.next() % 8))
        case 1 where !bytes.isEmpty: bytes[at] = UInt8(truncatingIfNeeded: random.next())
        case 2: bytes.removeLast(min(bytes.count, Int(random.next() % 64)))
        case 3: bytes.insert(contentsOf: [0xFF, 0x00, 0x7F, 0x80].prefix(Int(random.next() % 4) + 1), at: at)
        case 4 where !bytes.isEmpty:
            let end = min(bytes.count, at + Int(random.next() % 32) + 1)
            bytes.removeSubrange(at..<end)
        default:
            let end = min(bytes.count, at + Int(random.next() % 64))
            bytes.insert(contentsOf: Array(bytes[at..<end]), at: at)
        }
    }
}

/// The seeds are what they are meant to be, valid inputs that the readers accept whole: a fuzzer starting from
/// them reaches past the first checks.
@Suite struct FuzzSeedTests {
    static func seeds(_ name: String) throws -> [[UInt8]] { try #require(FuzzTarget.named(name)).seeds() }

    @Test func segmentSeedsAreWholeSegmentFiles() throws {
        let directory = TemporaryDirectory.shared
        for (index, seed) in try Self.seeds("segment").enumerated() {
            let path = directory.file("seed-\(index).seg")
            try Data(seed.dropFirst()).write(to: URL(fileURLWithPath: path))
            let reader = try SegmentFileReader(path: path, fileSystem: POSIXFileSystem())
            let scan = try reader.scan()
            #expect(scan.entries.count == 5 && scan.damage == nil, "seed \(index): \(scan)")
            #expect(scan.entries.filter { $0.flags & SegmentFormat.keyFlag == 0 }.count == 3)
            reader.close()
        }
    }

    @Test func journalSeedsHoldEveryKindOfRecord() throws {
        for seed in try Self.seeds("journal") {
            let file = Array(seed.dropFirst())
            if seed[0] & 1 != 0 {
                let contents = MarkerJournal.Contents.parse(file)
                #expect(contents.records == 3 && contents.damage == nil && !contents.tornTail)
            } else {
                let contents = LossJournal.Contents.parse(file)
                #expect(contents.records == 5 && contents.damage == nil && !contents.tornTail)
            }
        }
    }

    @Test func y4mSeedsHaveTwoFramesEach() throws {
        for (index, seed) in try Self.seeds("y4m").enumerated() {
            let path = TemporaryDirectory.shared.file("seed-\(index).y4m")
            try Data(seed).write(to: URL(fileURLWithPath: path))
            var reader = try Y4MReader(path: path)
            let buffer = UnsafeMutableRawBufferPointer.allocate(
                byteCount: reader.stream.layout.byteCount, alignment: 64)
            defer { buffer.deallocate() }
            var frames = 0
            while try reader.readFrame(into: buffer) != nil { frames += 1 }
            #expect(frames == 2, "seed \(index)")
        }
    }

    /// Each request of the `api` seeds gets the answer it would from a real client: the fuzzer starts from requests
    /// that reach each endpoint's work, not from refusals.
    @Test func apiSeedsAreAnsweredAsTheirRequests() throws {
        let fixture = try APIFixture(directory: try TemporaryDirectory.store("api"))
        defer { fixture.stop() }
        var statuses: [Int] = []
        for seed in try Self.seeds("api") {
            let request = try #require(APIFixture.request(seed))
            statuses.append(try fixture.serve(request).status)
        }
        // Saves (waiting on a post-roll, extended and cancelled; mp4, since the last save, a clip), a marker with a
        // hold and its removal; each GET endpoint (the API's document among them); the page; TCP without and with the token; a browser's request by
        // an address and by a name not allowed.
        let expected =
            [200, 202, 200, 200, 202, 202, 200, 201, 200] + Array(repeating: 200, count: 16) + [401, 200]
            + [401, 202, 403]
        #expect(statuses == expected)
    }

    /// The `query` seeds record frames with gaps and pressure, and query them from memory and from disk while
    /// recording, under each spill policy.
    @Test func querySeedsReadFromMemoryAndDisk() throws {
        for (number, seed) in try Self.seeds("query").enumerated() {
            let directory = try TemporaryDirectory.store("query")
            let summary = try seed.withUnsafeBytes { bytes in
                try Result { () throws(FuzzFailure) in
                    var input = FuzzInput(bytes)
                    var run = try QueryRun(&input, directory: directory)
                    return try run.play(&input)
                }.get()
            }
            #expect(summary.accepted >= 32 && summary.queries == 2, "seed \(number): \(summary)")
            #expect(summary.fromMemory > 0 && summary.fromDisk > 0, "seed \(number): \(summary)")
        }
    }

    @Test func valueAndRequestSeedsAreAccepted() throws {
        for seed in try Self.seeds("values") {
            let text = String(decoding: seed.dropFirst(), as: UTF8.self)
            switch seed[0] {
            case 0: #expect(throws: Never.self, "\(text)") { try Values.duration(text) }
            case 1: #expect(throws: Never.self, "\(text)") { try Values.size(text) }
            case 2: #expect(throws: Never.self, "\(text)") { try Values.dimensions(text) }
            case 3: #expect(throws: Never.self, "\(text)") { try Values.frameRate(text) }
            default: #expect(throws: Never.self, "\(text)") { try TimeSpec(parsing: text) }
            }
        }
        for seed in try Self.seeds("request") {
            let body = Array(seed.dropFirst())
            switch seed[0] {
            case 0: #expect(throws: Never.self) { try SaveRequest.decode(body) }
            case 1: #expect(throws: Never.self) { try ClipRequest.decode(body) }
            case 2: #expect(throws: Never.self) { try ExtendRequest.decode(body) }
            default: #expect(throws: Never.self) { try MarkerRequest.decode(body) }
            }
        }
    }
}
