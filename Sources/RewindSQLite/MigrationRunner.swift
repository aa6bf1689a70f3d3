import Glibc
import RewindMigrations
import RewindSystem

/// Brings a database's schema up to date with versioned migrations, and refuses databases it cannot safely use.
///
/// Rules:
/// - Migrations are numbered 1, 2, 3… and applied in order, each in its own `BEGIN IMMEDIATE` transaction
///   together with its row in `schema_migrations`; a migration that fails is rolled back and the schema stays at
///   the previous version.
/// - A database whose highest applied version is newer than this build knows is refused
///   (``MigrationError/newerThanCode(path:databaseVersion:codeVersion:)``).
/// - A database where an applied migration's recorded text differs from the shipped text is refused
///   (``MigrationError/editedMigration(path:version:fileName:recordedFileName:)``): shipped migrations are never
///   edited, a change is a new file.
///
/// `schema_migrations` is created by the runner itself (not by a migration):
///
///     version INTEGER PRIMARY KEY   -- 1, 2, 3…
///     file_name TEXT                -- 0002_segments.sql
///     sql_fnv1a64 TEXT              -- FNV-1a 64-bit hash of the text, 16 hex digits
///     sql TEXT                      -- the full text as applied
///     applied_wall_ns INTEGER       -- when, Unix epoch nanoseconds
package struct MigrationRunner: Sendable {
    /// The migrations this runner applies, in version order.
    package let migrations: [Migration]

    /// Makes a runner for `migrations`, which must be numbered 1, 2, 3… with no holes.
    ///
    /// - Parameter migrations: The shipped migrations, or a test's own list.
    package init(migrations: [Migration] = Migration.all) {
        for (index, migration) in migrations.enumerated() {
            precondition(migration.version == index + 1, "migration \(migration.fileName) must be number \(index + 1)")
        }
        self.migrations = migrations
    }

    /// The schema version this runner brings a database to.
    package var latestVersion: Int { migrations.last?.version ?? 0 }

    /// Applies every migration the database has not applied yet.
    ///
    /// Safe against another process migrating at the same time: each step re-reads the applied versions inside
    /// its write transaction.
    ///
    /// - Parameter database: A writable database.
    /// - Returns: The versions applied by this call, in order (empty when already up to date).
    /// - Throws: ``MigrationError`` when the database is newer than the code, an applied migration was edited, or
    ///   a migration fails; ``SQLiteError`` for other database failures.
    /// - Complexity: O(number of migrations) statements, plus the migrations themselves.
    @discardableResult
    package func migrate(_ database: SQLiteDatabase) throws -> [Int] {
        try database.withConnection { connection in
            try Self.checkSchemaIsRecorded(connection)
            try connection.execute(Self.createTable)
            var applied: [Int] = []
            for migration in migrations {
                let didApply = try connection.transaction { () throws -> Bool in
                    let recorded = try Self.recorded(connection)
                    try check(recorded, path: connection.path)
                    guard !recorded.contains(where: { $0.version == migration.version }) else { return false }
                    do {
                        try connection.execute(migration.sql)
                    } catch {
                        throw MigrationError.failed(
                            path: connection.path, version: migration.version, fileName: migration.fileName,
                            cause: error)
                    }
                    let insert = try connection.statement(
                        "INSERT INTO schema_migrations (version, file_name, sql_fnv1a64, sql, applied_wall_ns) "
                            + "VALUES (?, ?, ?, ?, ?)")
                    try insert.bind(Int64(migration.version), at: 1)
                    try insert.bind(migration.fileName, at: 2)
                    try insert.bind(Self.hexHash(migration.sql), at: 3)
                    try insert.bind(migration.sql, at: 4)
                    try insert.bind(System.wallClockNanoseconds(), at: 5)
                    try insert.run()
                    return true
                }
                if didApply { applied.append(migration.version) }
            }
            return applied
        }
    }

    /// Checks, without writing, that the database's schema is exactly what this build expects.
    ///
    /// Used by read-only opens, which cannot migrate.
    ///
    /// - Parameter database: Any database, read-only or not.
    /// - Throws: ``MigrationError/schemaOutdated(path:databaseVersion:codeVersion:)`` when migrations are missing,
    ///   and the errors of ``migrate(_:)`` for newer or edited schemas.
    package func validate(_ database: SQLiteDatabase) throws {
        try database.withConnection { connection in
            try Self.checkSchemaIsRecorded(connection)
            let hasTable = try connection.scalarInt64(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'")
            let recorded = hasTable == 1 ? try Self.recorded(connection) : []
            try check(recorded, path: connection.path)
            let version = recorded.last?.version ?? 0
            // An older schema whose tables are those of a later version: its newest rows of schema_migrations were
            // deleted by another program (writing would run those migrations again over their own tables, and fail).
            if version > 0, version < latestVersion, let shape = try? Self.schemaShape(connection),
                isShapeOfALaterVersion(shape, than: version)
            {
                throw MigrationError.unrecordedSchema(path: connection.path, missingVersion: version + 1)
            }
            // Newest migrations that change only how rows are written leave older schemas readable as they are.
            let readable = migrations.reversed().prefix { $0.readsLikePrevious }.last.map { $0.version - 1 }
            guard version == latestVersion || (readable.map { version >= $0 } ?? false) else {
                throw MigrationError.schemaOutdated(
                    path: connection.path, databaseVersion: version, codeVersion: latestVersion)
            }
        }
    }

    /// A database's tables, indexes and triggers as their `CREATE` statements (SQLite's own and `schema_migrations`
    /// left out), sorted: what the migrations applied so far made.
    private static func schemaShape(_ connection: SQLiteConnection) throws -> [String] {
        let select = try connection.statement(
            "SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_schema "
                + "WHERE name NOT GLOB 'sqlite_*' AND name != 'schema_migrations' ORDER BY type, name")
        defer { select.reset() }
        var rows: [String] = []
        while try select.step() { rows.append(select.text(0)) }
        return rows
    }

    /// Whether the migrations after `version` leave exactly `shape` at some version: built in a scratch database
    /// (only for a schema older than this build's, which a read-only open meets rarely); false when none does or the
    /// scratch database cannot be made.
    private func isShapeOfALaterVersion(_ shape: [String], than version: Int) -> Bool {
        let directory = getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
        let path = "\(directory)/rewind-schema-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } }
        guard let scratch = try? SQLiteDatabase(path: path) else { return false }
        let found = try? scratch.withConnection { connection -> Bool in
            for migration in migrations {
                try connection.execute(migration.sql)
                if migration.version > version, try Self.schemaShape(connection) == shape { return true }
            }
            return false
        }
        return found ?? false
    }

    /// The migrations recorded as applied in `database`, in version order.
    ///
    /// - Throws: ``SQLiteError``.
    package func appliedMigrations(_ database: SQLiteDatabase) throws -> [AppliedMigration] {
        try database.withConnection { connection in
            let hasTable = try connection.scalarInt64(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'")
            return hasTable == 1 ? try Self.recorded(connection) : []
        }
    }

    /// The FNV-1a 64-bit hash of `text`'s UTF-8 bytes: stable across builds and platforms.
    package static func fnv1a64(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return hash
    }

    private static func hexHash(_ text: String) -> String {
        let digits = String(fnv1a64(text), radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    private static let createTable = """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version         INTEGER PRIMARY KEY,
            file_name       TEXT    NOT NULL,
            sql_fnv1a64     TEXT    NOT NULL,
            sql             TEXT    NOT NULL,
            applied_wall_ns INTEGER NOT NULL
        ) STRICT
        """

    /// Refuses a database with tables but no record of the migrations that made them, reading only: a write open runs
    /// it on a database not in WAL mode (no store's is) before it switches the file to WAL, so another program's
    /// database is refused unchanged (its journal mode was switched first).
    ///
    /// - Throws: ``MigrationError/unrecordedSchema(path:missingVersion:)``; SQLite errors.
    package static func checkSchemaIsRecorded(_ database: SQLiteDatabase) throws {
        try database.withConnection { try checkSchemaIsRecorded($0) }
    }

    /// Refuses a database with tables but no record of the migrations that made them (another program dropped or
    /// emptied `schema_migrations`): the migrations would run again over tables they made. So too another program's
    /// database: a `schema_migrations` table not of this shape (Rails, dbmate and golang-migrate name theirs so),
    /// views, triggers or indexes of its own, or a file another program marked as its own (`application_id`,
    /// `user_version`), empty or not: the migrations would have added their tables to it.
    private static func checkSchemaIsRecorded(_ connection: SQLiteConnection) throws {
        let columns = try connection.scalarText(
            "SELECT group_concat(name, ',') FROM pragma_table_info('schema_migrations')")
        let hasTable = columns != nil
        if let columns,
            !Set(["version", "file_name", "sql_fnv1a64", "sql", "applied_wall_ns"]).isSubset(
                of: Set(columns.split(separator: ",").map(String.init)))
        {
            throw MigrationError.unrecordedSchema(path: connection.path)
        }
        let objects =
            try connection.scalarInt64(
                "SELECT count(*) FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*' AND tbl_name != 'schema_migrations'")
            ?? 0
        let applicationID = try connection.scalarInt64("PRAGMA application_id") ?? 0
        let userVersion = try connection.scalarInt64("PRAGMA user_version") ?? 0
        let marked = applicationID != 0 || userVersion != 0
        guard objects > 0 || marked else { return }
        let rows = hasTable ? try connection.scalarInt64("SELECT count(*) FROM schema_migrations") ?? 0 : 0
        if rows == 0 { throw MigrationError.unrecordedSchema(path: connection.path) }
    }

    private static func recorded(_ connection: SQLiteConnection) throws -> [AppliedMigration] {
        let select = try connection.statement(
            "SELECT version, file_name, sql_fnv1a64, sql, applied_wall_ns FROM schema_migrations ORDER BY version")
        defer { select.reset() }
        var rows: [AppliedMigration] = []
        while try select.step() {
            rows.append(
                AppliedMigration(
                    version: Int(select.int64(0)), fileName: select.text(1), sqlHash: select.text(2),
                    sql: select.text(3), appliedWallNanoseconds: select.int64(4)))
        }
        return rows
    }

    private func check(_ recorded: [AppliedMigration], path: String) throws {
        if let newest = recorded.last, newest.version > latestVersion {
            throw MigrationError.newerThanCode(path: path, databaseVersion: newest.version, codeVersion: latestVersion)
        }
        // Migrations are applied in order, each recorded as it is: a version missing below a recorded one is a row
        // another program deleted (running it again would fail over the tables it made).
        for (index, row) in recorded.enumerated() where row.version != index + 1 {
            throw MigrationError.unrecordedSchema(path: path, missingVersion: index + 1)
        }
        for row in recorded {
            // A record that no longer matches its own checksum was damaged, not written by another build.
            guard row.sqlHash == Self.hexHash(row.sql) else {
                throw MigrationError.damagedRecord(path: path, version: row.version, fileName: row.fileName)
            }
            let shipped = migrations[row.version - 1]
            guard row.fileName == shipped.fileName, row.sql == shipped.sql else {
                throw MigrationError.editedMigration(
                    path: path, version: row.version, fileName: shipped.fileName, recordedFileName: row.fileName)
            }
        }
    }
}

/// A migration recorded as applied in a database's `schema_migrations` table.
package struct AppliedMigration: Sendable, Hashable {
    package var version: Int
    package var fileName: String
    /// FNV-1a 64-bit hash of `sql`, 16 lower-case hex digits.
    package var sqlHash: String
    /// The full text as it was applied.
    package var sql: String
    package var appliedWallNanoseconds: Int64
}

/// Why a database's schema cannot be used by this build.
package enum MigrationError: Error, Sendable, CustomStringConvertible {
    /// The database was migrated by a newer build than this one.
    case newerThanCode(path: String, databaseVersion: Int, codeVersion: Int)
    /// An applied migration's recorded text (or file name) differs from the one this build ships.
    case editedMigration(path: String, version: Int, fileName: String, recordedFileName: String)
    /// An applied migration's recorded text no longer matches the checksum recorded with it: the row was damaged.
    case damagedRecord(path: String, version: Int, fileName: String)
    /// A read-only open found a database that still needs migrations.
    case schemaOutdated(path: String, databaseVersion: Int, codeVersion: Int)
    /// A migration failed and was rolled back; the schema stays at the previous version.
    case failed(path: String, version: Int, fileName: String, cause: any Error)
    /// The database has tables but no `schema_migrations` table saying which migrations made them, or a table that
    /// lacks the row of `missingVersion` whose tables it has (recording later ones, or tables of a later version:
    /// another program deleted the row).
    case unrecordedSchema(path: String, missingVersion: Int? = nil)

    package var description: String {
        switch self {
        case .newerThanCode(let path, let databaseVersion, let codeVersion):
            return "\(path) was written by a newer build (schema \(databaseVersion), this build knows \(codeVersion))"
        case .editedMigration(let path, let version, let fileName, let recordedFileName):
            return
                "\(path) has migration \(version) (\(recordedFileName)) applied with a different text than this "
                + "build's \(fileName): it was made by a different build"
        case .damagedRecord(let path, let version, let fileName):
            return
                "\(path) has a record of migration \(version) (\(fileName)) in schema_migrations whose text no longer "
                + "matches the checksum recorded with it (damaged)"
        case .schemaOutdated(let path, let databaseVersion, let codeVersion):
            return
                "\(path) has schema \(databaseVersion), this build needs \(codeVersion) and cannot upgrade it "
                + "read-only"
        case .failed(let path, let version, let fileName, let cause):
            return
                "migration \(fileName) failed on \(path) and was rolled back (schema stays at version "
                + "\(version - 1)): \(cause)"
        case .unrecordedSchema(let path, let missing?):
            return "\(path) has no record in schema_migrations of migration \(missing), which made its tables"
        case .unrecordedSchema(let path, nil):
            return "\(path) has tables but no record in schema_migrations of the migrations that made them"
        }
    }
}
