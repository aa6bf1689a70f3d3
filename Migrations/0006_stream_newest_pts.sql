-- 0006: the newest pts ever indexed for each stream. Retention may delete a recording's newest segments while holds
-- keep older ones; a new recording of the stream continues after this, not after the newest frame kept, so no pts
-- is used twice and the time the recorder ran is not taken for time it was stopped. NULL for a stream no frame of
-- which was indexed since this migration (the newest frame stored then stands in).
ALTER TABLE streams ADD COLUMN newest_pts_ns INTEGER;
