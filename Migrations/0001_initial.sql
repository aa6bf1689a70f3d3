-- 0001: the index's bookkeeping. Later migrations add streams, segments and frames.
CREATE TABLE store_info (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT;
