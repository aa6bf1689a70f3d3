import CSQLite
import RewindSystem

#if canImport(Glibc)
    import Glibc
#endif

/// A failure reported by SQLite: the database, the result codes, SQLite's message and the statement.
///
/// `description` states what failed and nothing more, e.g.
/// `database /x/index.sqlite is corrupt (SQLITE_CORRUPT); sqlite says: database disk image is malformed`.
package struct SQLiteError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The primary result code (`SQLITE_BUSY`, `SQLITE_CORRUPT`, …).
    package var code: Int32
    /// The extended result code (`SQLITE_CONSTRAINT_PRIMARYKEY`, `SQLITE_IOERR_FSYNC`, …).
    package var extendedCode: Int32
    /// SQLite's own message (`sqlite3_errmsg`), e.g. `UNIQUE constraint failed: frames.stream_id, frames.pts_ns`.
    package var message: String
    /// The statement that failed, when there was one.
    package var sql: String?
    /// The database file.
    package var path: String
    /// The operating system's error behind it (`sqlite3_system_errno`), 0 when none was recorded.
    package var systemErrno: Int32

    package init(
        code: Int32, extendedCode: Int32? = nil, message: String, sql: String? = nil, path: String,
        systemErrno: Int32 = 0
    ) {
        self.code = code & 0xFF
        self.extendedCode = extendedCode ?? code
        self.message = message
        self.sql = sql
        self.path = path
        self.systemErrno = systemErrno
    }

    /// Whether a file could not be opened because the process (or the system) has too many open
    /// (`EMFILE`, `ENFILE`).
    package var isOutOfDescriptors: Bool {
        code == SQLITE_CANTOPEN && (systemErrno == EMFILE || systemErrno == ENFILE)
    }

    /// `SQLITE_CONSTRAINT_PRIMARYKEY` (a macro Swift does not import).
    package static let constraintPrimaryKey: Int32 = SQLITE_CONSTRAINT | (6 << 8)
    /// `SQLITE_CONSTRAINT_FOREIGNKEY` (a macro Swift does not import).
    package static let constraintForeignKey: Int32 = SQLITE_CONSTRAINT | (3 << 8)
    /// `SQLITE_CONSTRAINT_UNIQUE` (a macro Swift does not import).
    package static let constraintUnique: Int32 = SQLITE_CONSTRAINT | (8 << 8)

    /// Whether the file is not a database or its pages are corrupt (`SQLITE_NOTADB`, `SQLITE_CORRUPT`).
    package var isDamagedDatabase: Bool { code == SQLITE_NOTADB || code == SQLITE_CORRUPT }

    /// The symbolic name of the primary code, e.g. `SQLITE_CORRUPT`.
    package var codeName: String { Self.name(of: code) }

    package var description: String {
        let what: String
        switch code {
        case SQLITE_CORRUPT: what = "is corrupt (\(codeName))"
        case SQLITE_NOTADB: what = "is not a SQLite database (\(codeName))"
        case SQLITE_BUSY, SQLITE_LOCKED:
            what = "is locked by another process (\(codeName)) for longer than the busy timeout"
        case SQLITE_READONLY: what = "cannot be written (\(codeName))"
        case SQLITE_CANTOPEN: what = "cannot be opened (\(codeName))"
        case SQLITE_FULL: what = "cannot grow (\(codeName)): the disk is full"
        case SQLITE_IOERR: what = "hit an I/O error (\(codeName), extended code \(extendedCode))"
        case SQLITE_PERM, SQLITE_AUTH: what = "refused access (\(codeName))"
        default: what = "failed (\(codeName), extended code \(extendedCode))"
        }
        var text = "database \(path) \(what); sqlite says: \(message)"
        if let sql { text += "; statement: \(sql)" }
        return text
    }

    /// Whether another connection holds the lock (`SQLITE_BUSY`, `SQLITE_LOCKED`).
    package var isLocked: Bool { code == SQLITE_BUSY || code == SQLITE_LOCKED }
    /// Whether the disk is full (`SQLITE_FULL`).
    package var isFull: Bool { code == SQLITE_FULL }
    /// Whether the file is corrupt (`SQLITE_CORRUPT`), as opposed to not a database at all.
    package var isCorrupt: Bool { code == SQLITE_CORRUPT }

    static func name(of code: Int32) -> String {
        let names: [Int32: String] = [
            SQLITE_OK: "SQLITE_OK", SQLITE_ERROR: "SQLITE_ERROR", SQLITE_INTERNAL: "SQLITE_INTERNAL",
            SQLITE_PERM: "SQLITE_PERM", SQLITE_ABORT: "SQLITE_ABORT", SQLITE_BUSY: "SQLITE_BUSY",
            SQLITE_LOCKED: "SQLITE_LOCKED", SQLITE_NOMEM: "SQLITE_NOMEM", SQLITE_READONLY: "SQLITE_READONLY",
            SQLITE_INTERRUPT: "SQLITE_INTERRUPT", SQLITE_IOERR: "SQLITE_IOERR", SQLITE_CORRUPT: "SQLITE_CORRUPT",
            SQLITE_NOTFOUND: "SQLITE_NOTFOUND", SQLITE_FULL: "SQLITE_FULL", SQLITE_CANTOPEN: "SQLITE_CANTOPEN",
            SQLITE_PROTOCOL: "SQLITE_PROTOCOL", SQLITE_EMPTY: "SQLITE_EMPTY", SQLITE_SCHEMA: "SQLITE_SCHEMA",
            SQLITE_TOOBIG: "SQLITE_TOOBIG", SQLITE_CONSTRAINT: "SQLITE_CONSTRAINT", SQLITE_MISMATCH: "SQLITE_MISMATCH",
            SQLITE_MISUSE: "SQLITE_MISUSE", SQLITE_NOLFS: "SQLITE_NOLFS", SQLITE_AUTH: "SQLITE_AUTH",
            SQLITE_FORMAT: "SQLITE_FORMAT", SQLITE_RANGE: "SQLITE_RANGE", SQLITE_NOTADB: "SQLITE_NOTADB",
            SQLITE_NOTICE: "SQLITE_NOTICE", SQLITE_WARNING: "SQLITE_WARNING",
        ]
        return names[code & 0xFF] ?? "SQLite code \(code)"
    }
}
