import CSQLite
import Foundation
import RewindCore
import RewindSystem
import RewindTesting
import Testing

@testable import RewindSQLite
@testable import SegmentStore

/// Errors are data: each case carries what failed and where, and its description says so without advice.
@Suite struct ErrorValueTests {
    static let adviceWords = ["rewind ", "--", "run '", "check the", "upgrade rewind", "move the store"]

    static func expectNoAdvice(_ error: any Error, sourceLocation: SourceLocation = #_sourceLocation) {
        for word in adviceWords {
            #expect(!"\(error)".contains(word), "'\(word)' in: \(error)", sourceLocation: sourceLocation)
        }
    }

    static let full = FileSystemError(operation: "write", path: "/s/segments/000001.seg.partial", code: ENOSPC)

    @Test func everySegmentStoreErrorStatesTheFactWithItsData() {
        let cases: [(SegmentStoreError, [String])] = [
            (
                .damaged(file: "000001.seg", frame: 311, offset: 1_048_576, detail: "bad crc"),
                ["000001.seg", "311", "1048576"]
            ),
            (.damaged(file: "000001.seg", frame: -1, offset: 64, detail: "bad magic"), ["at byte 64: bad magic"]),
            (.notASegment(file: "x.seg", detail: "bad magic"), ["segments/x.seg", "bad magic"]),
            (.missingSegment(file: "000002.seg", frames: 60), ["segments/000002.seg", "missing", "60 frames"]),
            (
                .diskFull(file: "000001.seg.partial", durableFrames: 20, durablePTS: 5, cause: Self.full),
                ["000001.seg.partial", "20 of its frames", "pts 5 ns", "No space left on device"]
            ),
            (
                .writeFailed(file: "f.seg", durableFrames: 3, durablePTS: nil, cause: Self.full),
                ["f.seg", "3 of its frames"]
            ),
            (.io(Self.full), ["/s/segments/000001.seg.partial"]),
            (.frame(.duplicatePTS(nanoseconds: 7)), ["7"]),
            (.storeLocked(directory: "/s"), ["/s"]),
            (.unknownStream("camera"), ["camera"]),
            (.readOnly("repair"), ["repair", "read-only"]),
            (
                .damagedIndex(path: "/s/index.sqlite", isDatabase: false, detail: "file is not a database"),
                ["/s/index.sqlite", "is not a SQLite database", "SQLITE_NOTADB"]
            ),
            (.damagedIndex(path: "/s/index.sqlite", isDatabase: true, detail: "malformed"), ["SQLITE_CORRUPT"]),
            (
                .index(
                    path: "/s/index.sqlite", problem: .locked(codeName: "SQLITE_BUSY"), detail: "database is locked"),
                ["/s/index.sqlite", "SQLITE_BUSY"]
            ),
            (.index(path: "/s/index.sqlite", problem: .full, detail: "full"), ["/s/index.sqlite", "SQLITE_FULL"]),
            (
                .index(
                    path: "/s/i", problem: .failed(codeName: "SQLITE_IOERR", extendedCode: 778, sql: "SELECT 1"),
                    detail: "io"), ["/s/i", "SQLITE_IOERR", "778", "SELECT 1"]
            ),
            (
                .index(
                    path: "/s/i", problem: .schemaNewerThanThisBuild(databaseVersion: 9, codeVersion: 2), detail: ""),
                ["/s/i", "schema 9", "2"]
            ),
            (
                .index(path: "/s/i", problem: .schemaOutdated(databaseVersion: 1, codeVersion: 2), detail: ""),
                ["/s/i", "schema 1", "needs 2", "an older build made it, or the index.sqlite-wal"]
            ),
            (
                .index(path: "/s/i", problem: .schemaOutdated(databaseVersion: 0, codeVersion: 2), detail: ""),
                ["/s/i", "holds no schema", "index.sqlite-wal", "missing"]
            ),
            (
                .index(
                    path: "/s/i",
                    problem: .editedMigration(version: 1, fileName: "0001_a.sql", recordedFileName: "0001_b.sql"),
                    detail: ""), ["/s/i", "0001_a.sql", "0001_b.sql"]
            ),
            (
                .index(path: "/s/i", problem: .migrationFailed(version: 2, fileName: "0002_x.sql"), detail: "boom"),
                ["/s/i", "0002_x.sql", "version 1", "boom"]
            ),
            (
                .index(
                    path: "/s/i", problem: .damagedMigrationRecord(version: 2, fileName: "0002_x.sql"), detail: ""),
                ["/s/i", "migration 2 (0002_x.sql)", "no longer matches the checksum", "damaged"]
            ),
            (.index(path: "/s/i", problem: .unfinished, detail: ""), ["/s/i", "making was cut short"]),
            (
                .index(path: "/s/i", problem: .unrecordedSchema(), detail: ""),
                ["/s/i", "no record in schema_migrations"]
            ),
            (
                .index(path: "/s/i", problem: .unrecordedSchema(missingVersion: 2), detail: ""),
                ["/s/i", "no record in schema_migrations of migration 2", "another program changed it"]
            ),
            (.unknownStream("camera"), ["no stream named 'camera'"]),
        ]
        for (error, facts) in cases {
            for fact in facts { #expect("\(error)".contains(fact), "'\(fact)' missing in: \(error)") }
            Self.expectNoAdvice(error)
        }
    }

    @Test func storeIndexSQLiteAndMigrationErrorsCarryNoAdvice() {
        let stream = StreamDescription(
            layout: try! FrameLayout(format: .nv12, width: 64, height: 32),
            frameDuration: FrameTime(value: 1, timescale: 30),
            color: ColorInfo(matrix: .bt709, range: .video))
        let indexErrors: [StoreIndexError] = [
            .streamDescriptionMismatch(name: "camera", stored: stream, requested: stream),
            .invalidStreamRow(id: 3, detail: "pixel format"), .invalidSegmentRow(id: 2, detail: "state"),
            .contradictsItself(detail: "rows"), .segmentNotOpen(segmentID: 1, streamID: 2),
            .unknownSegment(id: 1), .unknownStream(id: 1), .segmentIsDeleting(id: 1), .fileNameInUse("a.seg"),
            .framesNotInPTSOrder(streamID: 1, previous: 2, next: 1), .duplicatePTS(streamID: 1, pts: 5),
        ]
        for error in indexErrors { Self.expectNoAdvice(error) }
        let codes = [
            SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_FULL,
            SQLITE_IOERR, SQLITE_PERM, SQLITE_ERROR,
        ]
        for code in codes {
            let error = SQLiteError(code: code, message: "m", sql: "SELECT 1", path: "/s/index.sqlite")
            #expect("\(error)".contains("/s/index.sqlite") && "\(error)".contains(error.codeName))
            Self.expectNoAdvice(error)
        }
        let migrations: [MigrationError] = [
            .newerThanCode(path: "/p", databaseVersion: 2, codeVersion: 1),
            .editedMigration(path: "/p", version: 1, fileName: "a", recordedFileName: "b"),
            .schemaOutdated(path: "/p", databaseVersion: 1, codeVersion: 2),
            .damagedRecord(path: "/p", version: 1, fileName: "a"),
            .failed(path: "/p", version: 2, fileName: "f", cause: Self.full),
        ]
        for error in migrations { Self.expectNoAdvice(error) }
    }

    @Test func indexErrorsBecomeTheStoresOwnWithTheirData() {
        let notADatabase = SQLiteError(code: SQLITE_NOTADB, message: "file is not a database", path: "/s/index.sqlite")
        guard
            case .damagedIndex(let path, let isDatabase, let detail)? =
                SegmentStoreError.translating(notADatabase) as? SegmentStoreError
        else {
            Issue.record("not damagedIndex")
            return
        }
        #expect(path == "/s/index.sqlite" && !isDatabase && detail == "file is not a database")
        let busy = SQLiteError(code: SQLITE_BUSY, message: "database is locked", path: "/s/index.sqlite")
        guard case .index(_, .locked(let codeName), _)? = SegmentStoreError.translating(busy) as? SegmentStoreError
        else {
            Issue.record("not indexLocked")
            return
        }
        #expect(codeName == "SQLITE_BUSY")
        let newer = MigrationError.newerThanCode(path: "/p", databaseVersion: 3, codeVersion: 1)
        guard
            case .index(_, .schemaNewerThanThisBuild(3, 1), _)? = SegmentStoreError.translating(newer)
                as? SegmentStoreError
        else {
            Issue.record("not schemaNewerThanThisBuild")
            return
        }
        let other = StoreIndexError.unknownSegment(id: 4)
        #expect(SegmentStoreError.translating(other) is StoreIndexError)
    }

    @Test func aGarbageIndexIsRefusedAsTheStoresOwnError() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: 8192).write(to: URL(fileURLWithPath: directory.indexPath))
        for open in [{ _ = try SegmentStore.openReadOnly(directory: directory.path) }] as [() throws -> Void] {
            #expect {
                try open()
            } throws: { error in
                guard case .damagedIndex(let path, false, _)? = error as? SegmentStoreError else { return false }
                return path == directory.indexPath
            }
        }
    }
}
