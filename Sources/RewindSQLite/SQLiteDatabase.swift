import CSQLite
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// What ``SQLiteDatabase/onDiskFull(_:)`` keeps: the closure in a struct, since a bare closure kept in a `Mutex` comes
/// back from each generic `inout` access wrapped in two more reabstraction thunks.
struct FreeSpaceHandler: Sendable {
    let free: @Sendable () -> Bool
}

/// One SQLite connection, shared safely between threads.
///
/// The connection lives behind a `Mutex`: every use runs inside ``withConnection(_:)``, one caller at a time, and
/// statements are prepared once and cached by their SQL text (finalized when the connection closes).
///
/// On open the connection is configured for a recorder that writes while other processes read:
///
/// | pragma         | value    | why                                                                  |
/// |----------------|----------|----------------------------------------------------------------------|
/// | `journal_mode` | `WAL`    | readers never block the writer and never see "database is locked"   |
/// | `synchronous`  | `NORMAL` | no fsync per commit; the WAL is synced at each checkpoint            |
/// | `busy_timeout` | 5000 ms  | a second writer waits instead of failing with `SQLITE_BUSY`           |
/// | `foreign_keys` | `ON`     | frames cannot point at a missing segment or stream                   |
///
/// A read-only database (``init(path:readOnly:busyTimeoutMilliseconds:)`` with `readOnly: true`) opens with
/// `SQLITE_OPEN_READONLY`, never creates the file and never changes its journal mode.
package final class SQLiteDatabase: Sendable {
    /// The database file.
    package let path: String
    /// Whether the connection was opened with `SQLITE_OPEN_READONLY`.
    package let isReadOnly: Bool
    private let connection: Mutex<SQLiteConnection>
    /// What frees space for a write that found the disk full (``onDiskFull(_:)``).
    private let freeSpace = Mutex<FreeSpaceHandler?>(nil)

    /// The bytes SQLite's allocator holds in this process, for every connection (page caches, prepared statements,
    /// schemas): `sqlite3_memory_used()`.
    package static var memoryInUse: Int { Int(sqlite3_memory_used()) }

    /// Opens (or, unless `readOnly`, creates) the database at `path` and applies the pragmas above.
    ///
    /// - Parameters:
    ///   - path: The database file, e.g. `DIR/index.sqlite`.
    ///   - readOnly: Open with `SQLITE_OPEN_READONLY`: for other processes reading a store while it records.
    ///   - busyTimeoutMilliseconds: How long a statement waits for another connection's lock before failing.
    /// - Throws: ``SQLiteError`` when the file cannot be opened or is not a database (`SQLITE_NOTADB`,
    ///   `SQLITE_CORRUPT`), with advice on what to do.
    package init(path: String, readOnly: Bool = false, busyTimeoutMilliseconds: Int32 = 5000) throws(SQLiteError) {
        self.path = path
        self.isReadOnly = readOnly
        var connection = try Self.connect(
            path, flags: (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE))
        try Self.configure(
            &connection, path: path, readOnly: readOnly, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        self.connection = Mutex(connection)
    }

    /// Opens the database at `path` as an immutable file: read as it is, without locks, shared memory or a look at a
    /// WAL, and nothing made beside it (a read-only open of a database in WAL mode leaves a `-shm` and an empty `-wal`
    /// behind). Only for a file no process writes and whose `-wal` holds nothing.
    package init(immutable path: String) throws(SQLiteError) {
        self.path = path
        self.isReadOnly = true
        let connection = try Self.connectImmutable(path)
        try connection.execute("PRAGMA foreign_keys = ON")
        self.connection = Mutex(connection)
    }

    /// The pragmas above, and a first read that fails at once on a file that is not a database.
    private static func configure(
        _ connection: inout SQLiteConnection, path: String, readOnly: Bool, busyTimeoutMilliseconds: Int32
    ) throws(SQLiteError) {
        // The first statement reads the file header: garbage fails here with SQLITE_NOTADB, not later.
        try connection.execute("PRAGMA busy_timeout = \(busyTimeoutMilliseconds)")
        if readOnly {
            do {
                _ = try connection.scalarInt64("SELECT count(*) FROM sqlite_schema")
            } catch  where Self.sharedMemoryFailures.contains(error.extendedCode) && Self.hasNoWALFrames(path) {
                // No -shm file can be made (a full disk, a directory this reader may not write), and nothing is in
                // a WAL that only it could tell about: the database file alone is the whole index, read as it is,
                // without locks or shared memory.
                connection = try Self.connectImmutable(path)
            }
        } else {
            let mode = try connection.scalarText("PRAGMA journal_mode = WAL")
            guard mode?.lowercased() == "wal" else {
                throw SQLiteError(
                    code: SQLITE_ERROR, message: "journal_mode is \(mode ?? "unknown"), WAL is required",
                    sql: "PRAGMA journal_mode = WAL", path: path)
            }
            try connection.execute("PRAGMA synchronous = NORMAL")
        }
        try connection.execute("PRAGMA foreign_keys = ON")
    }

    /// A connection that reads the file at `path` as it is (`immutable=1`: no locks, no shared memory, no WAL), its
    /// header read once so that a file that is not a database fails here.
    private static func connectImmutable(_ path: String) throws(SQLiteError) -> SQLiteConnection {
        let connection = try connect(
            "file:" + uriPath(path) + "?immutable=1", flags: SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, shownAs: path)
        _ = try connection.scalarInt64("SELECT count(*) FROM sqlite_schema")
        return connection
    }

    /// `SQLITE_READONLY_ROLLBACK`: a read-only open found a hot journal it cannot roll back.
    package static let readOnlyRollback = SQLITE_READONLY | (3 << 8)

    /// `SQLITE_IOERR_SHMOPEN`, `_SHMSIZE`, `_SHMMAP`: the WAL's shared-memory file could not be made (a full disk);
    /// `SQLITE_READONLY_CANTINIT`, `_DIRECTORY`: nor may it be, by a reader who may not write the store's directory
    /// (after a clean stop the recorder leaves no -shm file behind); `SQLITE_CANTOPEN`: nor on a read-only file
    /// system (a stopped store copied onto read-only media).
    private static let sharedMemoryFailures: Set<Int32> = [
        SQLITE_IOERR | (18 << 8), SQLITE_IOERR | (19 << 8), SQLITE_IOERR | (21 << 8), SQLITE_READONLY | (5 << 8),
        SQLITE_READONLY | (6 << 8), SQLITE_CANTOPEN,
    ]

    /// Whether the database's `-wal` file is missing or empty (every commit is in the database file).
    /// Whether the file at `path` is an SQLite database in rollback-journal mode (its header's read and write
    /// versions 1; WAL mode writes 2): one a write open would switch to WAL.
    package static func usesRollbackJournal(_ path: String) -> Bool { fileFormatVersions(path) == 1 }

    /// Whether the file at `path` is an SQLite database in WAL mode (its header's versions 2) with neither a `-wal`
    /// nor a `-shm` beside it.
    package static func usesWALAlone(_ path: String) -> Bool {
        var status = stat()
        guard stat(path + "-wal", &status) != 0, stat(path + "-shm", &status) != 0 else { return false }
        return fileFormatVersions(path) == 2
    }

    /// The read and write format versions in the header of the SQLite database at `path` when they agree (1: rollback
    /// journal, 2: WAL); nil for anything else, or a file that is not a database.
    private static func fileFormatVersions(_ path: String) -> UInt8? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var header = [UInt8](repeating: 0, count: 20)
        guard pread(fd, &header, 20, 0) == 20, header.prefix(16).elementsEqual(Array("SQLite format 3\0".utf8)),
            header[18] == header[19]
        else { return nil }
        return header[18]
    }

    private static func hasNoWALFrames(_ path: String) -> Bool {
        var status = stat()
        return stat(path + "-wal", &status) != 0 || status.st_size == 0
    }

    /// `path` with the characters a URI gives meaning to (`%`, `?`, `#`) escaped.
    private static func uriPath(_ path: String) -> String {
        var escaped = ""
        for character in path {
            switch character {
            case "%": escaped += "%25"
            case "?": escaped += "%3f"
            case "#": escaped += "%23"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    /// Opens a connection with `flags` (and `SQLITE_OPEN_NOMUTEX`), extended result codes on.
    private static func connect(_ name: String, flags: Int32, shownAs path: String? = nil) throws(SQLiteError)
        -> SQLiteConnection
    {
        var handle: OpaquePointer?
        let status = sqlite3_open_v2(name, &handle, flags | SQLITE_OPEN_NOMUTEX, nil)
        guard status == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(status))
            let extended = handle.map { sqlite3_extended_errcode($0) } ?? status
            let systemErrno = handle.map { sqlite3_system_errno($0) } ?? 0
            sqlite3_close_v2(handle)
            throw SQLiteError(
                code: status, extendedCode: extended, message: message, path: path ?? name, systemErrno: systemErrno)
        }
        sqlite3_extended_result_codes(handle, 1)
        return SQLiteConnection(handle: handle, path: path ?? name)
    }

    /// Runs `body` with exclusive use of the connection.
    ///
    /// Do not call back into this database from `body`: the lock is not reentrant.
    ///
    /// - Parameter body: Work on the connection; its statements stay cached for the next caller.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws.
    package func withConnection<Result: Sendable>(
        _ body: (SQLiteConnection) throws -> Result
    ) throws -> Result {
        // The connection's statement cache is used by one thread at a time.
        try connection.withAnnotatedLock { connection throws -> Result in try body(connection) }
    }

    /// Runs `body` inside `BEGIN IMMEDIATE … COMMIT` (rolled back if `body` throws); a transaction that finds the
    /// disk full runs once more after ``onDiskFull(_:)``'s handler freed space, so `body` must only touch the
    /// database.
    ///
    /// - Parameter body: The transaction's work.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws, or ``SQLiteError`` when the transaction cannot begin or commit.
    package func write<Result: Sendable>(_ body: (SQLiteConnection) throws -> Result) throws -> Result {
        try retryingWhenFull {
            try withConnection { connection in try connection.transaction { try body(connection) } }
        }
    }

    /// Sets what frees space when a write finds the disk full (`SQLITE_FULL`): the write, rolled back, is tried
    /// once more when `free` returns true (it freed something).
    ///
    /// - Parameter free: called outside the connection's lock; returns whether it freed space.
    package func onDiskFull(_ free: @escaping @Sendable () -> Bool) {
        freeSpace.withAnnotatedLock { $0 = FreeSpaceHandler(free: free) }
    }

    /// Runs `attempt`; when it fails with `SQLITE_FULL` and ``onDiskFull(_:)``'s handler frees space, once more.
    private func retryingWhenFull<Result>(_ attempt: () throws -> Result) throws -> Result {
        do {
            return try attempt()
        } catch let error as SQLiteError where error.isFull {
            guard let handler = freeSpace.withAnnotatedLock({ $0 }), handler.free() else { throw error }
            return try attempt()
        }
    }

    /// Runs `body` inside a transaction whose commit is durable on return: the commit is made with
    /// `synchronous = FULL`, which fsyncs the WAL, then `NORMAL` is restored.
    ///
    /// Like ``write(_:)``, it runs once more when it found the disk full and space was freed. Used when a segment is
    /// sealed: the sealed state must survive a power cut, while ordinary frame batches
    /// only need to survive a crash of the process (which `NORMAL` gives).
    ///
    /// - Parameter body: The transaction's work.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws, or ``SQLiteError``.
    package func durableWrite<Result: Sendable>(_ body: (SQLiteConnection) throws -> Result) throws -> Result {
        try retryingWhenFull {
            try withConnection { connection in
                try connection.execute("PRAGMA synchronous = FULL")
                defer { try? connection.execute("PRAGMA synchronous = NORMAL") }
                return try connection.transaction { try body(connection) }
            }
        }
    }

    /// Copies committed pages from the WAL into the database file without waiting for readers or writers
    /// (`PRAGMA wal_checkpoint(PASSIVE)`), so the WAL does not grow without bound while readers are active.
    ///
    /// SQLite also checkpoints automatically every 1000 pages; call this at quiet moments (e.g. after a seal). Like a
    /// write, it runs once more when it found the disk full and ``onDiskFull(_:)``'s handler freed space (the
    /// database file may have to grow).
    ///
    /// - Returns: The WAL size in pages and how many of them are now in the database file.
    /// - Throws: ``SQLiteError``.
    @discardableResult
    package func checkpoint() throws -> (walPages: Int, checkpointedPages: Int) {
        try retryingWhenFull { try checkpointOnce() }
    }

    private func checkpointOnce() throws -> (walPages: Int, checkpointedPages: Int) {
        try withConnection { connection in
            let handle = connection.handle
            var logPages: Int32 = 0
            var checkpointed: Int32 = 0
            let status = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, &logPages, &checkpointed)
            guard status == SQLITE_OK else { throw connection.error(status, sql: "PRAGMA wal_checkpoint(PASSIVE)") }
            return (Int(logPages), Int(checkpointed))
        }
    }
}

/// A raw SQLite connection: only reachable inside ``SQLiteDatabase/withConnection(_:)``, never shared.
///
/// Owns its handle and its cached statements; closing finalizes the statements, then the handle.
package final class SQLiteConnection {
    let handle: OpaquePointer
    /// The database file, for error messages.
    package let path: String
    private var statements: [String: SQLiteStatement] = [:]

    init(handle: OpaquePointer, path: String) {
        self.handle = handle
        self.path = path
    }

    deinit {
        statements.removeAll()
        sqlite3_close_v2(handle)
    }

    /// The error SQLite reports for `status` on this connection.
    func error(_ status: Int32, sql: String?) -> SQLiteError {
        SQLiteError(
            code: status, extendedCode: sqlite3_extended_errcode(handle),
            message: String(cString: sqlite3_errmsg(handle)), sql: sql, path: path,
            systemErrno: sqlite3_system_errno(handle))
    }

    /// Runs one or more statements that return no rows (`sqlite3_exec`).
    ///
    /// - Parameter sql: The SQL text; may hold several statements separated by `;`.
    /// - Throws: ``SQLiteError`` from the first statement that fails.
    package func execute(_ sql: String) throws(SQLiteError) {
        let status = sqlite3_exec(handle, sql, nil, nil, nil)
        guard status == SQLITE_OK else { throw error(status, sql: sql) }
    }

    /// The statement for `sql`, prepared once per connection and reset for reuse.
    ///
    /// - Parameter sql: One SQL statement with `?` parameters.
    /// - Returns: The cached statement, reset and with its bindings cleared.
    /// - Throws: ``SQLiteError`` when the SQL does not compile.
    package func statement(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        if let cached = statements[sql] {
            cached.reset()
            return cached
        }
        var raw: OpaquePointer?
        let status = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &raw, nil)
        guard status == SQLITE_OK, let raw else { throw error(status, sql: sql) }
        let statement = SQLiteStatement(handle: raw, connection: self, sql: sql)
        statements[sql] = statement
        return statement
    }

    /// Runs `body` inside `BEGIN IMMEDIATE … COMMIT`, rolling back if it throws.
    ///
    /// `IMMEDIATE` takes the write lock at once, so two writers wait on `busy_timeout` instead of deadlocking.
    ///
    /// - Parameter body: The transaction's work.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws, or ``SQLiteError``.
    package func transaction<Result>(_ body: () throws -> Result) throws -> Result {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            if sqlite3_get_autocommit(handle) == 0 { try? execute("ROLLBACK") }
            throw error
        }
    }

    /// The number of rows changed by the last INSERT, UPDATE or DELETE.
    package var changes: Int { Int(sqlite3_changes64(handle)) }

    /// The rowid of the last inserted row.
    package var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// The first column of the first row of `sql`, as an integer (nil for NULL or no row).
    package func scalarInt64(_ sql: String) throws(SQLiteError) -> Int64? {
        let statement = try statement(sql)
        defer { statement.reset() }
        guard try statement.step() else { return nil }
        return statement.optionalInt64(0)
    }

    /// The first column of the first row of `sql`, as text (nil for NULL or no row).
    package func scalarText(_ sql: String) throws(SQLiteError) -> String? {
        let statement = try statement(sql)
        defer { statement.reset() }
        guard try statement.step() else { return nil }
        return statement.optionalText(0)
    }
}

/// A prepared statement, owned by one ``SQLiteConnection`` and finalized when it goes away.
///
/// Parameters and columns are numbered as SQLite numbers them: parameters from 1, columns from 0.
package final class SQLiteStatement {
    private let handle: OpaquePointer
    private unowned let connection: SQLiteConnection
    /// The statement's SQL text.
    package let sql: String

    init(handle: OpaquePointer, connection: SQLiteConnection, sql: String) {
        self.handle = handle
        self.connection = connection
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    /// Resets the statement for another run and clears its bindings.
    package func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Binds an integer to parameter `index` (from 1).
    package func bind(_ value: Int64, at index: Int32) throws(SQLiteError) {
        try check(sqlite3_bind_int64(handle, index, value))
    }

    /// Binds an integer, or NULL when `value` is nil, to parameter `index` (from 1).
    package func bind(_ value: Int64?, at index: Int32) throws(SQLiteError) {
        if let value { try bind(value, at: index) } else { try check(sqlite3_bind_null(handle, index)) }
    }

    /// Binds text (copied by SQLite) to parameter `index` (from 1).
    package func bind(_ value: String, at index: Int32) throws(SQLiteError) {
        let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)
        try check(sqlite3_bind_text(handle, index, value, -1, transient))
    }

    /// Binds text, or NULL when `value` is nil, to parameter `index` (from 1).
    package func bind(_ value: String?, at index: Int32) throws(SQLiteError) {
        if let value { try bind(value, at: index) } else { try check(sqlite3_bind_null(handle, index)) }
    }

    /// Runs the statement to its next row.
    ///
    /// - Returns: true when a row is available, false when the statement is done.
    /// - Throws: ``SQLiteError`` (the statement is reset so it can be reused).
    @discardableResult
    package func step() throws(SQLiteError) -> Bool {
        let status = sqlite3_step(handle)
        switch status {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let error = connection.error(status, sql: sql)
            sqlite3_reset(handle)
            throw error
        }
    }

    /// Runs a statement that returns no rows to completion, then resets it.
    package func run() throws(SQLiteError) {
        defer { reset() }
        while try step() {}
    }

    /// Column `index` (from 0) as an integer (0 for NULL).
    package func int64(_ index: Int32) -> Int64 { sqlite3_column_int64(handle, index) }

    /// Column `index` (from 0) as an integer, nil for NULL.
    package func optionalInt64(_ index: Int32) -> Int64? {
        sqlite3_column_type(handle, index) == SQLITE_NULL ? nil : sqlite3_column_int64(handle, index)
    }

    /// Column `index` (from 0) as text ("" for NULL).
    package func text(_ index: Int32) -> String { optionalText(index) ?? "" }

    /// Column `index` (from 0) as text, nil for NULL.
    package func optionalText(_ index: Int32) -> String? {
        guard let bytes = sqlite3_column_text(handle, index) else { return nil }
        return String(cString: bytes)
    }

    private func check(_ status: Int32) throws(SQLiteError) {
        guard status == SQLITE_OK else { throw connection.error(status, sql: sql) }
    }
}
