import Foundation
import RewindTesting
import Synchronization
import Testing

@testable import RewindSQLite
@testable import SegmentStore

@Suite(.timeLimit(.minutes(45))) struct SQLiteDatabaseTests {
    @Test func opensInWALWithTheDocumentedPragmas() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        let values = try database.withConnection { connection in
            [
                try connection.scalarText("PRAGMA journal_mode"),
                try connection.scalarInt64("PRAGMA synchronous").map(String.init),
                try connection.scalarInt64("PRAGMA busy_timeout").map(String.init),
                try connection.scalarInt64("PRAGMA foreign_keys").map(String.init),
            ]
        }
        #expect(values == ["wal", "1", "5000", "1"])  // synchronous 1 = NORMAL
    }

    @Test func durableWriteRestoresNormalSynchronous() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        let inside = try database.durableWrite { connection in
            try connection.execute("CREATE TABLE t (x INTEGER) STRICT")
            return try connection.scalarInt64("PRAGMA synchronous")
        }
        #expect(inside == 2)  // FULL
        #expect(try database.withConnection { try $0.scalarInt64("PRAGMA synchronous") } == 1)
    }

    /// A write that finds the database full (`SQLITE_FULL`, here from `max_page_count`) is rolled back and tried
    /// once more when the handler freed space; when it frees nothing, or the second try is full too, it fails.
    @Test func aWriteThatFindsTheDiskFullIsTriedOnceMoreWhenSpaceWasFreed() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        let pages = try database.write { connection in
            try connection.execute("CREATE TABLE t (x BLOB) STRICT")
            return try connection.scalarInt64("PRAGMA page_count") ?? 0
        }
        try database.withConnection { try $0.execute("PRAGMA max_page_count = \(pages)") }
        func insert() throws {
            try database.write { connection in
                try connection.execute("INSERT INTO t VALUES (zeroblob(65536))")
            }
        }
        func count() throws -> Int64 {
            try database.withConnection { try $0.scalarInt64("SELECT count(*) FROM t") } ?? -1
        }
        // No handler: the error, nothing written.
        let full = try #require(throws: SQLiteError.self) { try insert() }
        #expect(full.isFull)
        #expect(try count() == 0)
        // A handler that frees nothing: the same.
        let calls = Mutex(0)
        database.onDiskFull {
            calls.withAnnotatedLock { $0 += 1 }
            return false
        }
        #expect(throws: SQLiteError.self) { try insert() }
        #expect(try calls.withAnnotatedLock { $0 } == 1 && count() == 0)
        // One that frees room: written, with one call.
        database.onDiskFull {
            calls.withAnnotatedLock { $0 += 1 }
            try? database.withConnection { try $0.execute("PRAGMA max_page_count = \(pages + 100)") }
            return true
        }
        try insert()
        #expect(try calls.withAnnotatedLock { $0 } == 2 && count() == 1)
        // Full again after the handler: tried once more only, then the error.
        try database.withConnection { try $0.execute("PRAGMA max_page_count = \(pages + 17)") }
        database.onDiskFull {
            calls.withAnnotatedLock { $0 += 1 }
            return true
        }
        #expect(throws: SQLiteError.self) { try insert() }
        #expect(try calls.withAnnotatedLock { $0 } == 3 && count() == 1)
    }

    @Test func garbageFileIsRefusedWithAClearError() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let garbage = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        try garbage.write(to: URL(fileURLWithPath: directory.indexPath))
        for readOnly in [false, true] {
            let error = try #require(throws: SQLiteError.self) {
                _ = try StoreIndex(path: directory.indexPath, readOnly: readOnly)
            }
            #expect(error.code == 26)  // SQLITE_NOTADB
            #expect(error.path == directory.indexPath)
            #expect(error.description.hasPrefix("database \(directory.indexPath) is not a SQLite database"))
            #expect(!error.description.contains("rewind "))
        }
    }

    @Test func corruptPagesAreReportedNotCrashed() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let index = try StoreIndex(path: directory.indexPath)
            let stream = try index.stream(named: "camera", description: IndexFixtures.description)
            let segment = try index.insertSegment(
                streamID: stream.id, fileName: "a.partial", formatVersion: 1, createdWallNanoseconds: 0)
            try index.addFrames(IndexFixtures.frames(count: 5000, segmentID: segment), streamID: stream.id)
            try index.database.withConnection { try $0.execute("PRAGMA wal_checkpoint(TRUNCATE)") }
        }
        // Keep the 100-byte header, overwrite everything after the first page with garbage.
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: directory.indexPath))
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: 4096)
        try handle.write(contentsOf: Data(repeating: 0xA5, count: Int(size) - 4096))
        try handle.close()
        var caught: (any Error)?
        do {
            let index = try StoreIndex(path: directory.indexPath)
            _ = try index.summary()
            try index.frames(streamID: 1, in: 0..<Int64.max) { _ in true }
        } catch {
            caught = error
        }
        let error = try #require(caught as? SQLiteError, "expected an SQLiteError, got \(String(describing: caught))")
        #expect(error.code == 11 || error.code == 26)  // SQLITE_CORRUPT or SQLITE_NOTADB
        #expect(!error.description.contains("rewind "))
    }

    @Test func missingFileReadOnlyIsNotCreated() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let error = try #require(throws: SQLiteError.self) {
            _ = try SQLiteDatabase(path: directory.indexPath, readOnly: true)
        }
        #expect(error.codeName == "SQLITE_CANTOPEN")
        #expect(!FileManager.default.fileExists(atPath: directory.indexPath))
    }

    @Test func readOnlyConnectionCannotWrite() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        _ = try StoreIndex(path: directory.indexPath)
        let reader = try StoreIndex(path: directory.indexPath, readOnly: true)
        let error = try #require(throws: SQLiteError.self) {
            try reader.addDrops(streamID: 1, reason: .diskError, count: 1)
        }
        #expect(error.codeName == "SQLITE_READONLY")
        #expect(error.description.contains("cannot be written"))
    }

    @Test
    func schemaIsReadableWithTheSQLiteShell() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let index = try StoreIndex(path: directory.indexPath)
        let stream = try index.stream(named: "camera", description: IndexFixtures.description)
        let segment = try index.insertSegment(
            streamID: stream.id, fileName: "a.partial", formatVersion: 1, createdWallNanoseconds: 5)
        try index.addFrames(IndexFixtures.frames(count: 10, segmentID: segment), streamID: stream.id)
        let output = try SQLiteShell.run([
            directory.indexPath,
            """
            PRAGMA journal_mode;
            SELECT max(version) FROM schema_migrations;
            SELECT name, pixel_format, width, height, frame_duration_value, frame_duration_timescale FROM streams;
            SELECT file_name, state, frame_count, first_pts_ns, last_pts_ns FROM segments;
            SELECT count(*), sum(flags & 1) FROM frames;
            """,
        ])
        #expect(output.status == 0, "sqlite3 failed: \(output.stderr)")
        let expected = [
            "wal", "\(MigrationRunner().latestVersion)", "camera|nv12|1920|1080|1|60", "a.partial|open|10|0|150000000",
            "10|1",
        ]
        #expect(output.output.split(separator: "\n").map(String.init) == expected)
    }

    @Test
    func rangeQueriesUseThePrimaryKeyNotAScan() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        _ = try StoreIndex(path: directory.indexPath)
        let queries = [
            "SELECT pts_ns FROM frames WHERE stream_id = 1 AND pts_ns >= 5 AND pts_ns < 10 ORDER BY pts_ns LIMIT 64",
            "SELECT pts_ns FROM frames WHERE stream_id = 1 AND pts_ns <= 5 ORDER BY pts_ns DESC LIMIT 1",
            "SELECT id FROM segments WHERE stream_id = 1 AND first_pts_ns >= 5 AND first_pts_ns < 9",
            "DELETE FROM frames WHERE segment_id = 3",
            "SELECT pts_ns, wall_ns FROM frames WHERE segment_id = 3 ORDER BY stream_id, pts_ns",
        ]
        for query in queries {
            let output = try SQLiteShell.run([directory.indexPath, "EXPLAIN QUERY PLAN \(query)"])
            #expect(output.status == 0, "sqlite3 failed: \(output.stderr)")
            let plan = output.output
            #expect(plan.contains("SEARCH"), "\(query): \(plan)")
            #expect(!plan.contains("SCAN"), "\(query) scans: \(plan)")
            #expect(!plan.contains("TEMP B-TREE"), "\(query) sorts: \(plan)")
        }
        let rangePlan = try SQLiteShell.run([directory.indexPath, "EXPLAIN QUERY PLAN \(queries[0])"]).output
        #expect(rangePlan.contains("PRIMARY KEY (stream_id=? AND pts_ns>? AND pts_ns<?)"), "\(rangePlan)")
    }
}
