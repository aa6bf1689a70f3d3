-- 0004: markers, labelled moments of a stream, and the ranges they hold on disk against retention.
-- `at_pts_ns` and the hold bounds are on the stream clock; the held range is [hold_from_ns, hold_to_ns), both NULL
-- when the marker holds nothing.
CREATE TABLE markers (
    id              INTEGER PRIMARY KEY,
    stream_id       INTEGER NOT NULL REFERENCES streams (id),
    at_pts_ns       INTEGER NOT NULL,
    label           TEXT    NOT NULL,
    hold_from_ns    INTEGER,
    hold_to_ns      INTEGER,
    created_wall_ns INTEGER NOT NULL,
    CHECK ((hold_from_ns IS NULL) = (hold_to_ns IS NULL)),
    CHECK (hold_to_ns IS NULL OR hold_to_ns > hold_from_ns)
) STRICT;

CREATE INDEX markers_by_time ON markers (stream_id, at_pts_ns);
