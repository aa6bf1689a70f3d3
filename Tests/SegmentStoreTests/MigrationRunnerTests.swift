import CSQLite
import Foundation
import RewindMigrations
import RewindTesting
import Testing

@testable import RewindSQLite
@testable import SegmentStore

@Suite struct MigrationRunnerTests {
    static let one = Migration(
        version: 1, fileName: "0001_a.sql", sql: "CREATE TABLE a (x INTEGER NOT NULL) STRICT;")
    static let two = Migration(
        version: 2, fileName: "0002_b.sql", sql: "CREATE TABLE b (y TEXT NOT NULL) STRICT;\nINSERT INTO a VALUES (7);")

    @Test func freshDatabaseGetsEveryShippedMigrationRecorded() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        let runner = MigrationRunner()
        #expect(try runner.migrate(database) == Migration.all.map(\.version))
        let applied = try runner.appliedMigrations(database)
        #expect(applied.map(\.version) == Migration.all.map(\.version))
        #expect(applied.map(\.fileName) == Migration.all.map(\.fileName))
        #expect(applied.map(\.sql) == Migration.all.map(\.sql))
        for row in applied {
            #expect(row.sqlHash.count == 16)
            #expect(UInt64(row.sqlHash, radix: 16) == MigrationRunner.fnv1a64(row.sql))
            #expect(row.appliedWallNanoseconds > 1_600_000_000_000_000_000)
        }
        #expect(try runner.migrate(database).isEmpty, "a second run applies nothing")
        try runner.validate(database)
    }

    @Test func upgradeAppliesOnlyTheNewMigration() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        #expect(try MigrationRunner(migrations: [Self.one]).migrate(database) == [1])
        let firstApplied = try MigrationRunner(migrations: [Self.one]).appliedMigrations(database)
        let runner = MigrationRunner(migrations: [Self.one, Self.two])
        #expect(try runner.migrate(database) == [2])
        let applied = try runner.appliedMigrations(database)
        #expect(applied.map(\.version) == [1, 2])
        #expect(applied[0] == firstApplied[0], "migration 1 is not run or recorded again")
        // Migration 2 ran exactly once: it inserted one row.
        let rows = try database.withConnection { try $0.scalarInt64("SELECT count(*) FROM a") }
        #expect(rows == 1)
    }

    /// Marker ids are never given twice, in a new index and in one upgraded from before migration 0005 (whose
    /// markers keep their ids): a late delete of a deleted marker's id cannot remove another marker and its hold.
    @Test func markerIdsAreNeverReusedAndSurviveTheUpgrade() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        let before = Array(Migration.all.prefix { $0.version < 5 })
        #expect(try MigrationRunner(migrations: before).migrate(database) == before.map(\.version))
        func insertMarker(_ label: String) throws -> Int64 {
            try database.withConnection { connection in
                try connection.execute(
                    "INSERT INTO markers (stream_id, at_pts_ns, label, created_wall_ns) VALUES (1, 0, '\(label)', 1)")
                return try connection.scalarInt64("SELECT last_insert_rowid()") ?? -1
            }
        }
        try database.withConnection { connection in
            try connection.execute(
                "INSERT INTO streams (id, name, pixel_format, width, height, frame_duration_value, "
                    + "frame_duration_timescale, color_matrix, color_range, created_wall_ns) "
                    + "VALUES (1, 'camera', 'nv12', 2, 2, 1, 30, 'bt709', 'video', 1)")
        }
        #expect(try insertMarker("a") == 1)
        #expect(try insertMarker("b") == 2)
        try database.withConnection {
            try $0.execute("UPDATE markers SET hold_from_ns = 5, hold_to_ns = 9 WHERE id = 2")
        }

        #expect(try MigrationRunner().migrate(database) == [5, 6, 7])
        let kept = try database.withConnection { connection in
            try connection.scalarInt64(
                "SELECT count(*) FROM markers WHERE (id = 1 AND label = 'a') "
                    + "OR (id = 2 AND label = 'b' AND hold_from_ns = 5 AND hold_to_ns = 9)")
        }
        #expect(kept == 2, "the markers keep their ids, labels and holds")
        try database.withConnection { try $0.execute("DELETE FROM markers WHERE id = 2") }
        #expect(try insertMarker("c") == 3, "the deleted newest id is not given again")
        try database.withConnection { try $0.execute("DELETE FROM markers WHERE id = 3") }
        #expect(try insertMarker("d") == 4)
        try MigrationRunner().validate(database)
    }

    @Test func databaseNewerThanTheCodeIsRefused() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        try MigrationRunner(migrations: [Self.one, Self.two]).migrate(database)
        let old = MigrationRunner(migrations: [Self.one])
        let error = try #require(throws: MigrationError.self) { try old.migrate(database) }
        #expect(
            error.description
                == "\(directory.indexPath) was written by a newer build (schema 2, this build knows 1)"
        )
        #expect(throws: MigrationError.self) { try old.validate(database) }
    }

    @Test func editedAppliedMigrationIsRefused() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        try MigrationRunner(migrations: [Self.one]).migrate(database)
        let edited = Migration(version: 1, fileName: "0001_a.sql", sql: Self.one.sql + "\n-- tweaked")
        let runner = MigrationRunner(migrations: [edited, Self.two])
        let error = try #require(throws: MigrationError.self) { try runner.migrate(database) }
        guard case .editedMigration(_, let version, let fileName, _) = error else {
            Issue.record("expected editedMigration, got \(error)")
            return
        }
        #expect(version == 1 && fileName == "0001_a.sql")
        #expect(error.description.contains("different text"))
        #expect(try runner.appliedMigrations(database).map(\.version) == [1], "nothing else was applied")
    }

    @Test func failingMigrationRollsBackAndKeepsThePreviousVersion() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        try MigrationRunner(migrations: [Self.one]).migrate(database)
        // The first statement succeeds, the second fails: the table must not survive.
        let broken = Migration(
            version: 2, fileName: "0002_broken.sql",
            sql: "CREATE TABLE c (z INTEGER) STRICT;\nINSERT INTO no_such_table VALUES (1);")
        let error = try #require(throws: MigrationError.self) {
            try MigrationRunner(migrations: [Self.one, broken]).migrate(database)
        }
        #expect(error.description.contains("0002_broken.sql failed"))
        #expect(error.description.contains("schema stays at version 1"))
        let runner = MigrationRunner(migrations: [Self.one])
        #expect(try runner.appliedMigrations(database).map(\.version) == [1])
        let tableC = try database.withConnection {
            try $0.scalarInt64("SELECT count(*) FROM sqlite_schema WHERE name = 'c'")
        }
        #expect(tableC == 0, "the failed migration's table was rolled back")
        try runner.validate(database)
        // Fixed in a later build, the upgrade goes through.
        #expect(try MigrationRunner(migrations: [Self.one, Self.two]).migrate(database) == [2])
    }

    /// Tables without a `schema_migrations` table (another program dropped it) are refused, read-only or not, rather
    /// than taken for an empty database or migrated again over the tables the migrations made.
    @Test func tablesWithoutARecordOfTheirSchemaAreRefused() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        let runner = MigrationRunner(migrations: [Self.one, Self.two])
        try runner.migrate(database)
        try database.withConnection { try $0.execute("DROP TABLE schema_migrations") }
        for check in [{ try runner.validate(database) }, { _ = try runner.migrate(database) }] {
            let error = try #require(throws: MigrationError.self) { try check() }
            guard case .unrecordedSchema = error else {
                Issue.record("expected unrecordedSchema, got \(error)")
                continue
            }
            #expect(error.description.contains("no record in schema_migrations"), "\(error)")
        }
        let translated = SegmentStoreError.translating(
            try #require(throws: MigrationError.self) {
                try runner.validate(database)
            })
        #expect(SegmentStoreError.indexDamage(translated) != nil, "a repair rebuilds it")
    }

    /// A migration whose statement SQLite refuses for what the index holds (its row deleted from
    /// `schema_migrations`, so it runs again over its own table) is damage a repair rebuilds; one refused for the
    /// disk is not.
    @Test func aMigrationRefusedForTheTablesThereIsDamage() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        let runner = MigrationRunner(migrations: [Self.one, Self.two])
        try runner.migrate(database)
        try database.withConnection { try $0.execute("DELETE FROM schema_migrations WHERE version = 2") }
        let error = try #require(throws: MigrationError.self) { try runner.migrate(database) }
        let translated = SegmentStoreError.translating(error)
        #expect(SegmentStoreError.indexDamage(translated) != nil, "\(translated)")
        #expect("\(translated)".contains("another program changed it"), "\(translated)")
        #expect(!"\(translated)".contains("statement:"), "the migration is named, not quoted: \(translated)")
        let full = SegmentStoreError.translating(
            MigrationError.failed(
                path: "/p", version: 2, fileName: "0002_b.sql",
                cause: SQLiteError(code: SQLITE_FULL, message: "full", path: "/p")))
        #expect(SegmentStoreError.indexDamage(full) == nil, "\(full)")
    }

    @Test func readOnlyOpenRefusesAnOutdatedSchema() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        try MigrationRunner(migrations: [Self.one]).migrate(database)
        let error = try #require(throws: MigrationError.self) {
            _ = try StoreIndex(path: directory.indexPath, readOnly: true, migrations: [Self.one, Self.two])
        }
        guard case .schemaOutdated(_, 1, 2) = error else {
            Issue.record("expected schemaOutdated(1, 2), got \(error)")
            return
        }
        // Opening for writing upgrades it; then a read-only open is accepted.
        _ = try StoreIndex(path: directory.indexPath, migrations: [Self.one, Self.two])
        _ = try StoreIndex(path: directory.indexPath, readOnly: true, migrations: [Self.one, Self.two])
    }

    /// A database that lacks only migrations which change how rows are written (not how they read) is accepted by a
    /// read-only check as it is; one that lacks another is refused. The shipped 0005, 0006 and 0007 are such steps.
    @Test func readOnlyChecksAcceptAMissingStepThatReadsLikeThePrevious() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.indexPath)
        let three = Migration(
            version: 3, fileName: "0003_c.sql", sql: "CREATE TABLE c (z INTEGER) STRICT;", readsLikePrevious: true)
        try MigrationRunner(migrations: [Self.one]).migrate(database)
        #expect(throws: MigrationError.self) {
            try MigrationRunner(migrations: [Self.one, Self.two, three]).validate(database)
        }
        try MigrationRunner(migrations: [Self.one, Self.two]).migrate(database)
        try MigrationRunner(migrations: [Self.one, Self.two, three]).validate(database)
        #expect(Migration.all.suffix(3).map(\.version) == [5, 6, 7])
        #expect(Migration.all.suffix(3).allSatisfy { $0.readsLikePrevious })
    }

    @Test func fnv1a64MatchesTheReferenceVectors() {
        #expect(MigrationRunner.fnv1a64("") == 0xcbf2_9ce4_8422_2325)
        #expect(MigrationRunner.fnv1a64("a") == 0xaf63_dc4c_8601_ec8c)
        #expect(MigrationRunner.fnv1a64("foobar") == 0x85944171f73967e8)
    }
}
