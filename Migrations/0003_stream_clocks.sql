-- 0003: each stream's place on the recorder clock, the one clock every stream of a store shares.
-- recorder time = pts_ns + clock_offset_ns; recorder time 0 was the wall-clock time clock_wall_ns (Unix-epoch
-- nanoseconds, the same for every stream of a store). Set at the stream's first recorded frame; NULL for streams
-- an older build recorded (read as offset 0 and the wall time of the stream's first frame minus its pts).
ALTER TABLE streams ADD COLUMN clock_offset_ns INTEGER;
ALTER TABLE streams ADD COLUMN clock_wall_ns INTEGER;
