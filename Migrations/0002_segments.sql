-- 0002: streams, segment files, one row per stored frame, gaps and drop counters.
-- Every time is integer nanoseconds (`*_ns`): presentation times (`pts_ns`) on the stream's clock, wall times
-- (`*_wall_ns`, `wall_ns`) since the Unix epoch.

-- What a stream is. Pixel format, matrix and range by name, as `rewind info` prints them.
CREATE TABLE streams (
    id                       INTEGER PRIMARY KEY,
    name                     TEXT    NOT NULL UNIQUE,
    pixel_format             TEXT    NOT NULL,
    width                    INTEGER NOT NULL CHECK (width > 0),
    height                   INTEGER NOT NULL CHECK (height > 0),
    frame_duration_value     INTEGER NOT NULL CHECK (frame_duration_value > 0),
    frame_duration_timescale INTEGER NOT NULL CHECK (frame_duration_timescale > 0),
    color_matrix             TEXT    NOT NULL,
    color_range              TEXT    NOT NULL CHECK (color_range IN ('video', 'full')),
    created_wall_ns          INTEGER NOT NULL
) STRICT;

-- One row per segment file in DIR/segments. An open segment is still being written (`file_name` ends in
-- `.partial`); sealed is final and durable; deleting is on its way out (its frame rows are already gone).
-- first/last pts are NULL until the first frame is added.
CREATE TABLE segments (
    id              INTEGER PRIMARY KEY,
    stream_id       INTEGER NOT NULL REFERENCES streams (id),
    file_name       TEXT    NOT NULL UNIQUE,
    state           TEXT    NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'sealed', 'deleting')),
    format_version  INTEGER NOT NULL,
    first_pts_ns    INTEGER,
    last_pts_ns     INTEGER,
    frame_count     INTEGER NOT NULL DEFAULT 0 CHECK (frame_count >= 0),
    raw_bytes       INTEGER NOT NULL DEFAULT 0 CHECK (raw_bytes >= 0),
    stored_bytes    INTEGER NOT NULL DEFAULT 0 CHECK (stored_bytes >= 0),
    created_wall_ns INTEGER NOT NULL,
    sealed_wall_ns  INTEGER
) STRICT;

CREATE INDEX segments_by_time ON segments (stream_id, first_pts_ns);

-- One row per stored frame, clustered by (stream, pts): "frames in [t0, t1)" is one range scan of the primary
-- key and the first frame of any range is found in O(log n).
-- flags: bit 0 = key frame (decodable alone). codec: the frame codec id written in the segment file.
-- key_pts_ns: the pts of the key frame at or before this frame (itself when it is one), NULL when none precedes
-- it, so "key frame at or before t" is two primary-key lookups.
CREATE TABLE frames (
    stream_id     INTEGER NOT NULL REFERENCES streams (id),
    pts_ns        INTEGER NOT NULL,
    segment_id    INTEGER NOT NULL REFERENCES segments (id) ON DELETE CASCADE,
    file_offset   INTEGER NOT NULL CHECK (file_offset >= 0),
    stored_length INTEGER NOT NULL CHECK (stored_length >= 0),
    raw_length    INTEGER NOT NULL CHECK (raw_length >= 0),
    wall_ns       INTEGER NOT NULL,
    flags         INTEGER NOT NULL,
    codec         INTEGER NOT NULL,
    key_pts_ns    INTEGER,
    PRIMARY KEY (stream_id, pts_ns)
) STRICT, WITHOUT ROWID;

CREATE INDEX frames_by_segment ON frames (segment_id);

-- Missing frames or frame-rate changes, as [start_ns, end_ns) on the stream's pts clock.
CREATE TABLE gaps (
    id        INTEGER PRIMARY KEY,
    stream_id INTEGER NOT NULL REFERENCES streams (id),
    start_ns  INTEGER NOT NULL,
    end_ns    INTEGER NOT NULL CHECK (end_ns >= start_ns),
    reason    TEXT    NOT NULL
) STRICT;

CREATE INDEX gaps_by_time ON gaps (stream_id, start_ns);

-- Frames dropped before they reached the store, counted by reason (e.g. 'backpressure', 'non_monotonic_pts').
CREATE TABLE drops (
    stream_id INTEGER NOT NULL REFERENCES streams (id),
    reason    TEXT    NOT NULL,
    count     INTEGER NOT NULL CHECK (count >= 0),
    PRIMARY KEY (stream_id, reason)
) STRICT, WITHOUT ROWID;
