-- 0005: marker ids are never used twice. With a plain INTEGER PRIMARY KEY, deleting the newest marker let the next
-- one take its id, so a repeated or late delete of that id removed another marker and released its hold.
-- AUTOINCREMENT keeps the highest id ever given (in sqlite_sequence) and always goes past it.
CREATE TABLE markers_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    stream_id       INTEGER NOT NULL REFERENCES streams (id),
    at_pts_ns       INTEGER NOT NULL,
    label           TEXT    NOT NULL,
    hold_from_ns    INTEGER,
    hold_to_ns      INTEGER,
    created_wall_ns INTEGER NOT NULL,
    CHECK ((hold_from_ns IS NULL) = (hold_to_ns IS NULL)),
    CHECK (hold_to_ns IS NULL OR hold_to_ns > hold_from_ns)
) STRICT;

INSERT INTO markers_new (id, stream_id, at_pts_ns, label, hold_from_ns, hold_to_ns, created_wall_ns)
    SELECT id, stream_id, at_pts_ns, label, hold_from_ns, hold_to_ns, created_wall_ns FROM markers;

DROP TABLE markers;
ALTER TABLE markers_new RENAME TO markers;
CREATE INDEX markers_by_time ON markers (stream_id, at_pts_ns);
