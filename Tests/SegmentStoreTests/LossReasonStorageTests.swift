import Foundation
import RewindCore
import RewindTesting
import Testing

@testable import SegmentStore

/// Loss reasons as the index stores them: raw values any program reads, and rows from other builds.
@Suite struct LossReasonStorageTests {
    @Test func everyReasonRoundTripsThroughTheIndexAndReadsTheSameInTheSQLiteShell() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let index = try StoreIndex(path: directory.indexPath)
        let stream = try index.stream(named: "camera", description: IndexFixtures.description)
        var expectedDrops: [LossReason: Int] = [:]
        for (offset, reason) in LossReason.allCases.enumerated() {
            let start = Int64(offset) * 1_000
            try index.recordGap(
                GapRow(streamID: stream.id, startNanoseconds: start, endNanoseconds: start + 500, reason: reason))
            try index.addDrops(streamID: stream.id, reason: reason, count: offset + 1)
            expectedDrops[reason] = offset + 1
        }
        #expect(try index.gaps(streamID: stream.id).map(\.reason) == LossReason.allCases)
        #expect(try index.drops(streamID: stream.id) == expectedDrops)
        #expect(try index.drops() == expectedDrops)

        let output = try SQLiteShell.run([
            directory.indexPath,
            "SELECT 'gap|' || reason FROM gaps ORDER BY start_ns; SELECT 'drop|' || reason || '|' || count FROM drops;",
        ])
        #expect(output.status == 0, "sqlite3 failed: \(output.stderr)")
        let lines = output.output.split(separator: "\n").map(String.init)
        #expect(lines.filter { $0.hasPrefix("gap|") } == LossReason.allCases.map { "gap|\($0.rawValue)" })
        #expect(
            Set(lines.filter { $0.hasPrefix("drop|") })
                == Set(expectedDrops.map { "drop|\($0.key.rawValue)|\($0.value)" }))
    }

    @Test func rowsWrittenByOlderAndNewerBuildsRead() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let index = try StoreIndex(path: directory.indexPath)
        let stream = try index.stream(named: "camera", description: IndexFixtures.description)
        try index.addDrops(streamID: stream.id, reason: .spillBehind, count: 4)
        // An older build's gap after drops on arrival, and reasons only a newer build knows, written by another
        // program.
        let output = try SQLiteShell.run([
            directory.indexPath,
            """
            INSERT INTO gaps (stream_id, start_ns, end_ns, reason) VALUES
                (\(stream.id), 100, 200, 'frames dropped on arrival'),
                (\(stream.id), 300, 400, 'shutter jammed'),
                (\(stream.id), 500, 600, 'input interval');
            INSERT INTO drops (stream_id, reason, count) VALUES
                (\(stream.id), 'shutter jammed', 2), (\(stream.id), 'lens capped', 3);
            """,
        ])
        #expect(output.status == 0, "sqlite3 failed: \(output.stderr)")
        #expect(
            try index.gaps(streamID: stream.id).map(\.reason) == [.droppedOnArrival, .unrecognized, .inputInterval])
        #expect(try index.drops(streamID: stream.id) == [.spillBehind: 4, .unrecognized: 5])
        #expect(try index.drops() == [.spillBehind: 4, .unrecognized: 5])
    }
}
