import CSQLite
import RewindCore
import RewindMigrations
import RewindSQLite
import RewindSystem

extension StoreIndex {
    // MARK: Row decoding

    static func missingOrDeleting(_ id: Int64, _ connection: SQLiteConnection) throws -> StoreIndexError {
        let select = try connection.statement("SELECT state FROM segments WHERE id = ?")
        defer { select.reset() }
        try select.bind(id, at: 1)
        return try select.step() ? .segmentIsDeleting(id: id) : .unknownSegment(id: id)
    }

    /// The `SELECT` ``streamRow(_:)`` reads; `shaped` when the table has the chroma siting and pixel aspect
    /// columns of migration 7, else they read as not known.
    static func streamColumns(shaped: Bool) -> String {
        """
        SELECT id, name, pixel_format, width, height, frame_duration_value, frame_duration_timescale,
            color_matrix, color_range, clock_offset_ns, clock_wall_ns,
            \(shaped ? "chroma_siting, pixel_aspect_num, pixel_aspect_den" : "'unspecified', 0, 0") FROM streams
        """
    }

    static let segmentColumns = """
        SELECT id, stream_id, file_name, state, format_version, first_pts_ns, last_pts_ns, frame_count, raw_bytes,
            stored_bytes, created_wall_ns, sealed_wall_ns FROM segments
        """

    static let frameFields = "pts_ns, wall_ns, segment_id, file_offset, stored_length, raw_length, flags, codec"

    static let frameColumns = "SELECT \(frameFields) FROM frames"

    static func streamRow(_ row: SQLiteStatement) throws -> StreamRow {
        let id = row.int64(0)
        let formatName = row.text(2)
        guard let format = PixelFormat(name: formatName) else {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "unknown pixel format '\(formatName)'")
        }
        let matrixName = row.text(7)
        guard let matrix = ColorInfo.Matrix.allCases.first(where: { $0.name == matrixName }) else {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "unknown colour matrix '\(matrixName)'")
        }
        let rangeName = row.text(8)
        guard let range = ColorInfo.Range.allCases.first(where: { $0.name == rangeName }) else {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "unknown colour range '\(rangeName)'")
        }
        let width = Int(row.int64(3))
        let height = Int(row.int64(4))
        let layout: FrameLayout
        do {
            layout = try FrameLayout(format: format, width: width, height: height)
        } catch {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "\(error)")
        }
        let durationValue = row.int64(5)
        let timescale = row.int64(6)
        guard durationValue > 0, timescale > 0, timescale <= Int64(Int32.max) else {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "frame duration \(durationValue)/\(timescale)")
        }
        let sitingName = row.text(11)
        guard let siting = ChromaSiting(name: sitingName) else {
            throw StoreIndexError.invalidStreamRow(id: id, detail: "unknown chroma siting '\(sitingName)'")
        }
        guard let aspect = PixelAspect(numerator: Int(row.int64(12)), denominator: Int(row.int64(13))) else {
            throw StoreIndexError.invalidStreamRow(
                id: id, detail: "pixel aspect \(row.int64(12)):\(row.int64(13)) is not a ratio of 16-bit terms")
        }
        let description = StreamDescription(
            layout: layout, frameDuration: FrameTime(value: durationValue, timescale: Int32(timescale)),
            color: ColorInfo(matrix: matrix, range: range), chromaSiting: siting, pixelAspect: aspect)
        var clock: StreamClock?
        if let offset = row.optionalInt64(9), let wall = row.optionalInt64(10) {
            // Recorder time minus pts, each within 100 years: farther is a damaged or edited row, whose times would
            // overflow wherever they are mapped.
            guard offset.magnitude <= StreamClock.farthestOffsetNanoseconds.magnitude else {
                throw StoreIndexError.invalidStreamRow(
                    id: id, detail: "clock offset \(offset) ns is more than twice 100 years")
            }
            clock = StreamClock(offsetNanoseconds: offset, wallNanoseconds: wall)
        }
        return StreamRow(id: id, name: row.text(1), description: description, clock: clock)
    }

    static func segmentRow(_ row: SQLiteStatement) throws -> SegmentRow {
        let stateName = row.text(3)
        guard let state = SegmentRow.State(rawValue: stateName) else {
            throw StoreIndexError.invalidSegmentRow(id: row.int64(0), detail: "unknown state '\(stateName)'")
        }
        return SegmentRow(
            id: row.int64(0), streamID: row.int64(1), fileName: row.text(2), state: state,
            formatVersion: Int(row.int64(4)), firstPTS: row.optionalInt64(5), lastPTS: row.optionalInt64(6),
            frameCount: Int(row.int64(7)), rawBytes: row.int64(8), storedBytes: row.int64(9),
            createdWallNanoseconds: row.int64(10), sealedWallNanoseconds: row.optionalInt64(11))
    }

    static func frameRow(_ row: SQLiteStatement) -> FrameRow {
        FrameRow(
            ptsNanoseconds: row.int64(0), wallNanoseconds: row.int64(1), segmentID: row.int64(2),
            fileOffset: row.int64(3), storedLength: Int(row.int64(4)), rawLength: Int(row.int64(5)),
            flags: UInt8(truncatingIfNeeded: row.int64(6)), codec: UInt8(truncatingIfNeeded: row.int64(7)))
    }

    /// The counters one batch adds to one segment.
    struct SegmentTotals {
        var segmentID: Int64
        var firstPTS: Int64
        var lastPTS: Int64
        var count: Int64 = 0
        var rawBytes: Int64 = 0
        var storedBytes: Int64 = 0

        init(row: FrameRow) {
            segmentID = row.segmentID
            firstPTS = row.ptsNanoseconds
            lastPTS = row.ptsNanoseconds
        }

        mutating func add(_ row: FrameRow) {
            lastPTS = row.ptsNanoseconds
            count += 1
            rawBytes += Int64(row.rawLength)
            storedBytes += Int64(row.storedLength)
        }
    }

    static func apply(_ totals: SegmentTotals, streamID: Int64, _ connection: SQLiteConnection) throws {
        let update = try connection.statement(
            """
            UPDATE segments SET
                first_pts_ns = CASE WHEN first_pts_ns IS NULL OR ?1 < first_pts_ns THEN ?1 ELSE first_pts_ns END,
                last_pts_ns = CASE WHEN last_pts_ns IS NULL OR ?2 > last_pts_ns THEN ?2 ELSE last_pts_ns END,
                frame_count = frame_count + ?3, raw_bytes = raw_bytes + ?4, stored_bytes = stored_bytes + ?5
            WHERE id = ?6 AND stream_id = ?7 AND state = 'open'
            """)
        try update.bind(totals.firstPTS, at: 1)
        try update.bind(totals.lastPTS, at: 2)
        try update.bind(totals.count, at: 3)
        try update.bind(totals.rawBytes, at: 4)
        try update.bind(totals.storedBytes, at: 5)
        try update.bind(totals.segmentID, at: 6)
        try update.bind(streamID, at: 7)
        try update.run()
        guard connection.changes == 1 else {
            throw StoreIndexError.segmentNotOpen(segmentID: totals.segmentID, streamID: streamID)
        }
    }
}
