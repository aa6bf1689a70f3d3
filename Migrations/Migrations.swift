/// One versioned schema step, compiled into the binary.
public struct Migration: Sendable, Hashable {
    /// The number in the file name (`0001_initial.sql` → 1). Applied in increasing order.
    public let version: Int
    /// The file name, e.g. `0001_initial.sql`.
    public let fileName: String
    /// The SQL text, exactly as shipped.
    public let sql: String
    /// Whether a database that stops before this migration reads the same to this build (the step changes only how
    /// rows are written): a read-only open, which cannot migrate, then accepts it.
    public let readsLikePrevious: Bool

    init(version: Int, fileName: String, bytes: [UInt8], readsLikePrevious: Bool = false) {
        self.version = version
        self.fileName = fileName
        self.sql = String(decoding: bytes, as: UTF8.self)
        self.readsLikePrevious = readsLikePrevious
    }

    /// Makes a migration from its text: for tests that need migrations other than the shipped ones.
    ///
    /// - Parameters:
    ///   - version: The migration's number, from 1.
    ///   - fileName: The file it would ship as, e.g. `0002_segments.sql`.
    ///   - sql: The SQL text.
    ///   - readsLikePrevious: whether a database without it reads the same.
    public init(version: Int, fileName: String, sql: String, readsLikePrevious: Bool = false) {
        self.version = version
        self.fileName = fileName
        self.sql = sql
        self.readsLikePrevious = readsLikePrevious
    }
}

extension Migration {
    /// Every shipped migration, in order. A new `.sql` file must be added here and to `Package.swift`; SwiftPM
    /// names its bytes after the file with the first character replaced (`0002_x.sql` → `_002_x_sql`).
    public static let all: [Migration] = [
        Migration(version: 1, fileName: "0001_initial.sql", bytes: PackageResources._001_initial_sql),
        Migration(version: 2, fileName: "0002_segments.sql", bytes: PackageResources._002_segments_sql),
        Migration(
            version: 3, fileName: "0003_stream_clocks.sql", bytes: PackageResources._003_stream_clocks_sql),
        Migration(version: 4, fileName: "0004_markers.sql", bytes: PackageResources._004_markers_sql),
        // Only how new marker ids are chosen: a store not yet migrated reads the same.
        Migration(
            version: 5, fileName: "0005_marker_ids.sql", bytes: PackageResources._005_marker_ids_sql,
            readsLikePrevious: true),
        // Only where a new recording of a stream continues: a store not yet migrated reads the same.
        Migration(
            version: 6, fileName: "0006_stream_newest_pts.sql", bytes: PackageResources._006_stream_newest_pts_sql,
            readsLikePrevious: true),
        // Streams' chroma siting and pixel aspect: a store not yet migrated reads as if neither were known.
        Migration(
            version: 7, fileName: "0007_stream_shape.sql", bytes: PackageResources._007_stream_shape_sql,
            readsLikePrevious: true),
    ]
}
