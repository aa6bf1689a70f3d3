import RewindCore
import RewindSQLite
import RewindSystem

/// What went wrong in the segment store, with the file, frame and byte it concerns and what to do about it.
public enum SegmentStoreError: Error, Sendable, CustomStringConvertible {
    /// A record failed a check: its bytes are never returned as a frame.
    case damaged(file: String, frame: Int, offset: Int64, detail: String)
    /// A file in `segments/` is not a readable segment (bad or torn header).
    case notASegment(file: String, detail: String)
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
    /// The store was opened read-only.
    case readOnly(String)
    /// `DIR/index.sqlite` is not a SQLite database (`isDatabase` false), or its pages are corrupt; the segment
    /// files are intact and the index can be rebuilt from them. `detail` is SQLite's own message.
    case damagedIndex(path: String, isDatabase: Bool, detail: String)

    public var description: String {
        switch self {
        case .damaged(let file, let frame, let offset, let detail):
            return "segment \(file) is damaged at byte \(offset) (frame \(frame)): \(detail); "
                + "run 'rewind verify --repair'"
        case .notASegment(let file, let detail):
            return "segments/\(file) is not a readable segment file (\(detail)); run 'rewind verify --repair' or "
                + "move it out of the store"
        case .diskFull(let file, let frames, let pts, let cause):
            return "disk full while writing segment \(file): \(frames) frames \(Self.upTo(pts)) are durable; "
                + "free space or lower --disk (\(cause))"
        case .writeFailed(let file, let frames, let pts, let cause):
            return "writing segment \(file) failed: \(frames) frames \(Self.upTo(pts)) are durable; "
                + "check the disk (\(cause))"
        case .io(let error):
            return error.description
        case .frame(let error):
            return error.description
        case .storeLocked(let directory):
            return "store \(directory) is open for recording by another process; stop it, or read with "
                + "'rewind info'/'rewind clip' (read-only)"
        case .unknownStream(let name):
            return "no stream named '\(name)' in the store; 'rewind info' lists the streams"
        case .readOnly(let what):
            return "cannot \(what): the store is open read-only"
        case .damagedIndex(let path, let isDatabase, let detail):
            let what = isDatabase ? "is corrupt (SQLITE_CORRUPT)" : "is not a SQLite database (SQLITE_NOTADB)"
            return "database \(path) \(what): run 'rewind verify --repair', which moves it aside and rebuilds it "
                + "from the segment files; sqlite says: \(detail)"
        }
    }

    private static func upTo(_ pts: Int64?) -> String {
        pts.map { "up to pts \($0) ns" } ?? "(none)"
    }
}
