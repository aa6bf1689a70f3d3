-- 0007: where a stream's chroma samples sit and the shape of its pixels, as its source said (YUV4MPEG2's C420mpeg2
-- and A10:11, say), so exports say the same. 'unspecified' and 0:0 when the source did not say, as for every stream
-- recorded before this migration; a later recording that says fills them in.
ALTER TABLE streams ADD COLUMN chroma_siting TEXT NOT NULL DEFAULT 'unspecified'
    CHECK (chroma_siting IN ('unspecified', 'center', 'left', 'topleft'));
ALTER TABLE streams ADD COLUMN pixel_aspect_num INTEGER NOT NULL DEFAULT 0
    CHECK (pixel_aspect_num BETWEEN 0 AND 65535);
ALTER TABLE streams ADD COLUMN pixel_aspect_den INTEGER NOT NULL DEFAULT 0
    CHECK (pixel_aspect_den BETWEEN 0 AND 65535);
