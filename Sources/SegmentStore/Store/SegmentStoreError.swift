import RewindCore
import RewindSQLite
import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// What went wrong in the segment store, with the file, frame and byte it concerns.
///
/// Every error that leaves the store's public API (open, queries, writes, verify) is one of these, a
/// ``StoreIndexError``, a ``FrameDecodeError`` or a ``FrameError``: the index's SQLite errors are translated into
/// ``index(path:problem:detail:)`` (and ``damagedIndex(path:isDatabase:detail:)``), so callers never see SQLite types.
public enum SegmentStoreError: Error, Sendable, CustomStringConvertible {
    /// A record failed a check: its bytes are never returned as a frame.
    case damaged(file: String, frame: Int, offset: Int64, detail: String)
    /// A file in `segments/` is not a readable segment (bad or torn header).
    case notASegment(file: String, detail: String)
    /// The index has frames in a segment file that is not in `segments/` (under either of its names).
    case missingSegment(file: String, frames: Int)
    /// Retention deleted a segment while it was being read, after some of the read's frames were delivered (a
    /// recorder in another process keeping its `--disk`, `--max-age` or `--min-free`): its frames are gone, nothing
    /// is damaged.
    case deletedWhileRead(file: String)
    /// The index's rows of a segment file do not match it (rows deleted or changed by another program): the file
    /// is intact, and a repair rebuilds the rows from it.
    case indexDisagrees(file: String, detail: String)
    /// The disk filled while writing; what was durable before stays.
    case diskFull(file: String, durableFrames: Int, durablePTS: Int64?, cause: FileSystemError)
    /// A write or sync failed for another reason; what was durable before stays.
    case writeFailed(file: String, durableFrames: Int, durablePTS: Int64?, cause: FileSystemError)
    /// A system call failed outside a write (open, read, rename…).
    case io(FileSystemError)
    /// A frame was refused (pts order, layout).
    case frame(FrameError)
    /// Another process holds the store open for writing.
    case storeLocked(directory: String)
    /// No stream of that name in the store.
    case unknownStream(String)
    /// The store was opened read-only; `action` is what was refused (`write stream 'camera'`).
    case readOnly(String)
    /// `DIR/index.sqlite` is not a SQLite database (`isDatabase` false), or its pages are corrupt; the segment
    /// files are intact and the index can be rebuilt from them. `detail` is SQLite's own message.
    case damagedIndex(path: String, isDatabase: Bool, detail: String)
    /// `DIR/index.sqlite` describes other segment files than those in `segments/` (another store's index put in its
    /// place, or another store's files put in the directory): none of the `files` readable there was made when any of
    /// the index's `segments` was, and files under the numbers it gives its own show it. The files are intact; the
    /// index can be kept aside and rebuilt from them.
    case foreignIndex(path: String, segments: Int, files: Int)
    /// Any other failure of the index (`DIR/index.sqlite`): what went wrong, and SQLite's own message.
    case index(path: String, problem: IndexProblem, detail: String)

    /// What went wrong with the index, beyond damage.
    public enum IndexProblem: Sendable, Hashable {
        /// Another connection held the lock for longer than the busy timeout (`SQLITE_BUSY`, `SQLITE_LOCKED`).
        case locked(codeName: String)
        /// The index could not grow: the disk is full (`SQLITE_FULL`).
        case full
        /// The index's file (or its WAL) could not be opened: too many files are open (`EMFILE`, `ENFILE`).
        case tooManyOpenFiles
        /// Another SQLite failure: its code name (`SQLITE_IOERR`, `SQLITE_CANTOPEN`, `SQLITE_READONLY`…), extended
        /// code and the statement, if any.
        case failed(codeName: String, extendedCode: Int32, sql: String?)
        /// The index was written by a newer build, with a schema this build does not know.
        case schemaNewerThanThisBuild(databaseVersion: Int, codeVersion: Int)
        /// A read-only open found an index that still needs migrations this build would apply when writing.
        case schemaOutdated(databaseVersion: Int, codeVersion: Int)
        /// An applied migration's recorded text differs from the one this build ships: another build made it.
        case editedMigration(version: Int, fileName: String, recordedFileName: String)
        /// An applied migration's recorded text no longer matches the checksum recorded with it: the index is
        /// damaged.
        case damagedMigrationRecord(version: Int, fileName: String)
        /// A migration failed and was rolled back; the schema stays at `version - 1`. `refused`: SQLite refused a
        /// statement of it for what the index holds (a table or column it adds is there already): the index's record
        /// of its schema disagrees with its tables, as only another program leaves it.
        case migrationFailed(version: Int, fileName: String, refused: Bool = false)
        /// A read found no schema in the index while a `-wal` beside it held something: a store whose making was cut
        /// short (its first transaction never committed).
        case unfinished
        /// The index has tables but no `schema_migrations` table saying which schema they are, or one that lacks the
        /// row of `missingVersion`, whose tables it has: another program changed it.
        case unrecordedSchema(missingVersion: Int? = nil)

        /// Whether SQLite refused one of the store's own statements (fixed, and right for its schema): a constraint,
        /// an unsupported file format, a sum that overflows. The index is damaged or was changed by another program.
        public var isRefusedStatement: Bool {
            guard case .failed(let codeName, _, _) = self else { return false }
            return Self.refusedStatementCodes.contains(codeName)
        }

        /// The SQLite codes of a statement refused for what the index holds, not for what the system lacks.
        static let refusedStatementCodes: Set<String> = ["SQLITE_ERROR", "SQLITE_CONSTRAINT", "SQLITE_MISMATCH"]
    }

    /// Why the index cannot be trusted when this error says so (corrupt pages, not a database, a statement SQLite
    /// refused; ``StoreIndexError/isDamage`` for rows), for a repair to move it aside and rebuild it from the segment
    /// files; nil for any other error, the index's own or not.
    public static func indexDamage(_ error: any Error) -> String? {
        switch error {
        case SegmentStoreError.damagedIndex: "the damaged index"
        case SegmentStoreError.index(_, .failed(let codeName, _, _), let detail)
        where IndexProblem.refusedStatementCodes.contains(codeName):
            "the damaged index (SQLite refused it: \(codeName), \(detail))"
        case let error as StoreIndexError where error.isDamage: "the damaged index (\(error))"
        case SegmentStoreError.index(_, .migrationFailed(_, _, true), let detail):
            "the damaged index (its record of its schema disagrees with its tables: \(detail))"
        case SegmentStoreError.index(_, .unrecordedSchema, _):
            "the damaged index (it has no record of its schema)"
        case SegmentStoreError.index(_, .damagedMigrationRecord, _):
            "the damaged index (its record of its schema is damaged)"
        default: nil
        }
    }

    /// One line naming the file (and frame and byte offset where known), what went wrong, and for write
    /// failures how many frames, up to which pts, are durable.
    public var description: String {
        switch self {
        case .damaged(let file, let frame, let offset, let detail):
            // A record whose own header is damaged has no frame number to name (-1).
            return "segment \(file) is damaged at byte \(offset)\(frame >= 0 ? " (frame \(frame))" : ""): \(detail)"
        case .notASegment(let file, let detail):
            return "segments/\(file) is not a readable segment file (\(detail))"
        case .missingSegment(let file, let frames):
            return "segments/\(file) is missing: the index has \(frames) frames in it"
        case .deletedWhileRead(let file):
            return "segment \(file) was deleted by retention while it was being read (a recorder's --disk, --max-age "
                + "or --min-free): the frames in it are gone, and the read stopped there"
        case .indexDisagrees(let file, let detail):
            return "the index rows of segment \(file) disagree with its file: \(detail)"
        case .diskFull(let file, let frames, let pts, let cause):
            return "disk full while writing segment \(file): \(Self.durable(frames, pts)) (\(cause))"
        case .writeFailed(let file, let frames, let pts, let cause):
            return "writing segment \(file) failed: \(Self.durable(frames, pts)) (\(cause))"
        case .io(let error):
            return error.description
        case .frame(let error):
            return error.description
        case .storeLocked(let directory):
            return "store \(directory) is open for recording by another process"
        case .unknownStream(let name):
            return "no stream named '\(name)' in the store"
        case .readOnly(let what):
            return "cannot \(what): the store is open read-only"
        case .damagedIndex(let path, let isDatabase, let detail):
            let what = isDatabase ? "is corrupt (SQLITE_CORRUPT)" : "is not a SQLite database (SQLITE_NOTADB)"
            return "database \(path) \(what); sqlite says: \(detail); the index can be rebuilt from the segment files"
        case .foreignIndex(let path, let segments, let files):
            return "\(path) is not the index of the segment files beside it: none of its \(segments) segment"
                + (segments == 1 ? " was" : "s was") + " made when any of the \(files) file" + (files == 1 ? "" : "s")
                + " in segments/ was, and the files under its segments' numbers are others (another store's index "
                + "was put in its place, or another store's files in segments/)"
        case .index(let path, let problem, let detail):
            switch problem {
            case .locked(let codeName):
                return "database \(path) is locked by another process (\(codeName)) for longer than the busy "
                    + "timeout; sqlite says: \(detail)"
            case .full:
                return "database \(path) cannot grow (SQLITE_FULL): the disk is full; sqlite says: \(detail)"
            case .tooManyOpenFiles:
                return "database \(path) cannot be opened: too many open files (the process's limit on open files "
                    + "was reached); sqlite says: \(detail)"
            case .failed(let codeName, let extendedCode, let sql):
                var text =
                    "database \(path) failed (\(codeName), extended code \(extendedCode)); sqlite says: \(detail)"
                if let sql { text += "; statement: \(sql)" }
                return text
            case .schemaNewerThanThisBuild(let databaseVersion, let codeVersion):
                return "\(path) was written by a newer build (schema \(databaseVersion), this build knows "
                    + "\(codeVersion))"
            case .unfinished:
                return "\(path) holds no schema yet, and the index.sqlite-wal beside it no whole one: the store's "
                    + "making was cut short (a recorder killed as it began)"
            case .schemaOutdated(0, _):
                // No build writes a store without its schema: what there was is gone, not old.
                return "\(path) holds no schema (an empty database): if the store was recorded into, its index was "
                    + "still in the index.sqlite-wal file beside it, which is missing (a crash, or a copy without it)"
            case .schemaOutdated(let databaseVersion, let codeVersion):
                return "\(path) has schema \(databaseVersion), this build needs \(codeVersion) and cannot upgrade it "
                    + "read-only (an older build made it, or the index.sqlite-wal beside it, which holds the newer "
                    + "schema's pages, is cut short or damaged)"
            case .editedMigration(let version, let fileName, let recordedFileName):
                return "\(path) has migration \(version) (\(recordedFileName)) applied with a different text than "
                    + "this build's \(fileName): it was made by a different build"
            case .damagedMigrationRecord(let version, let fileName):
                return "\(path) has a record of migration \(version) (\(fileName)) in schema_migrations whose text "
                    + "no longer matches the checksum recorded with it: the index is damaged"
            case .migrationFailed(let version, let fileName, let refused):
                return "migration \(fileName) failed on \(path) and was rolled back (schema stays at version "
                    + "\(version - 1)): \(detail)"
                    + (refused
                        ? " (the index's schema_migrations table disagrees with its tables: another program changed "
                            + "it)" : "")
            case .unrecordedSchema(let missing?):
                return
                    "\(path) has no record in schema_migrations of migration \(missing), which made its tables "
                    + "(another program changed it)"
            case .unrecordedSchema(nil):
                return
                    "\(path) has tables but no record in schema_migrations of the migrations that made them (another "
                    + "program made or changed it)"
            }
        }
    }

    /// Whether the index at `path` has a `-wal` beside it that holds something.
    package static func hasWAL(_ path: String) -> Bool {
        var info = stat()
        return stat(path + "-wal", &info) == 0 && info.st_size > 0
    }

    /// What stays of a failed segment and its stream: the segment's durable frames, and the stream's up to `pts`
    /// (its last durable frame, in this segment or an earlier one).
    private static func durable(_ frames: Int, _ pts: Int64?) -> String {
        "\(frames) of its frames are durable"
            + (pts.map { ", the stream's up to pts \(seconds($0))" } ?? "")
    }

    /// `pts` in seconds with milliseconds, as the command line writes times (`14.266s`; it read `14266666666 ns`);
    /// under a millisecond in nanoseconds, which milliseconds would round to nothing.
    private static func seconds(_ pts: Int64) -> String {
        pts.magnitude >= 1_000_000 ? secondsText(pts) : "\(pts) ns"
    }

    /// The store's own error for an index error (``SQLiteError``, ``MigrationError``); other errors unchanged.
    static func translating(_ error: any Error) -> any Error {
        switch error {
        case let error as SQLiteError:
            if error.isDamagedDatabase {
                return SegmentStoreError.damagedIndex(
                    path: error.path, isDatabase: error.isCorrupt, detail: error.message)
            }
            let problem: IndexProblem =
                error.isLocked
                ? .locked(codeName: error.codeName)
                : error.isFull
                    ? .full
                    : error.isOutOfDescriptors
                        ? .tooManyOpenFiles
                        : .failed(codeName: error.codeName, extendedCode: error.extendedCode, sql: error.sql)
            return SegmentStoreError.index(path: error.path, problem: problem, detail: error.message)
        case let error as MigrationError:
            switch error {
            case .newerThanCode(let path, let databaseVersion, let codeVersion):
                return SegmentStoreError.index(
                    path: path,
                    problem: .schemaNewerThanThisBuild(databaseVersion: databaseVersion, codeVersion: codeVersion),
                    detail: "")
            case .schemaOutdated(let path, let databaseVersion, let codeVersion):
                return SegmentStoreError.index(
                    path: path, problem: .schemaOutdated(databaseVersion: databaseVersion, codeVersion: codeVersion),
                    detail: "")
            case .editedMigration(let path, let version, let fileName, let recordedFileName):
                return SegmentStoreError.index(
                    path: path,
                    problem: .editedMigration(version: version, fileName: fileName, recordedFileName: recordedFileName),
                    detail: "")
            case .damagedRecord(let path, let version, let fileName):
                return SegmentStoreError.index(
                    path: path, problem: .damagedMigrationRecord(version: version, fileName: fileName), detail: "")
            case .failed(let path, let version, let fileName, let cause):
                // The statement is the migration's file, named already.
                let sqlite = cause as? SQLiteError
                return SegmentStoreError.index(
                    path: path,
                    problem: .migrationFailed(
                        version: version, fileName: fileName,
                        refused: sqlite.map { IndexProblem.refusedStatementCodes.contains($0.codeName) } ?? false),
                    detail: sqlite.map { "\($0.codeName): \($0.message)" } ?? "\(cause)")
            case .unrecordedSchema(let path, let missing):
                return SegmentStoreError.index(
                    path: path, problem: .unrecordedSchema(missingVersion: missing), detail: "")
            }
        default:
            return error
        }
    }

    /// Runs `body`, turning index errors into the store's own (see ``translating(_:)``).
    package static func translatingIndexErrors<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch { throw translating(error) }
    }
}
