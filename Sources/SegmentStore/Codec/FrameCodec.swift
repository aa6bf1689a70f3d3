import CLZ4
import RewindCore
import RewindSQLite
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// How a frame's bytes are stored. The raw value is written into every record (its `codec` byte).
///
/// A frame is cut into chunks (see ``ChunkPlan``); each chunk is stored raw, LZ4-compressed, or as the LZ4 of its
/// byte-wise difference from the same chunk of the previous frame, whichever is smallest. The record's codec
/// byte summarises the chunks: `lz4Delta` when any chunk needs the previous frame, else `lz4` when any chunk is
/// compressed, else `raw`.
public enum FrameCodec: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// Bytes as they are.
    case raw = 0
    /// LZ4 block of the bytes (acceleration 1, like `lz4 -1`).
    case lz4 = 1
    /// LZ4 block of `current &- previous`, byte by byte (wrapping), against the previous frame of the segment.
    case lz4Delta = 2

    /// The name tools print for the codec: `raw`, `lz4` or `lz4-delta`.
    public var description: String {
        switch self {
        case .raw: "raw"
        case .lz4: "lz4"
        case .lz4Delta: "lz4-delta"
        }
    }
}

/// Which codecs the encoder may use: the smallest per chunk, or one forced (for tests and measurements).
public enum CodecPolicy: Sendable, Hashable {
    /// Per chunk, the smallest of raw, LZ4 and LZ4 delta (delta only when the frame is not a key frame).
    case automatic
    /// Every chunk with this codec (`lz4Delta` falls back to `lz4` on key frames).
    case forced(FrameCodec)
}

/// How a frame of a given layout is cut into chunks: each plane into pieces of at most `chunkSize` bytes.
///
/// Chunks never cross a plane boundary, so each is a run of rows of one plane; they are compressed independently
/// (in parallel) and verified independently. The plan is a pure function of the layout and the chunk size, both
/// of which are in the segment header, so a reader derives the same plan.
package struct ChunkPlan: Sendable, Hashable {
    /// The default chunk size: 128 KiB (twice the LZ4 window; the prefix dictionary makes cutting cost almost no
    /// compression).
    package static let defaultChunkSize = StoreOptions.defaultChunkSize

    /// Byte offset of each chunk in the frame.
    package let offsets: [Int]
    /// Byte length of each chunk.
    package let lengths: [Int]
    package let chunkSize: Int

    package init(layout: FrameLayout, chunkSize: Int = ChunkPlan.defaultChunkSize) {
        precondition(chunkSize >= 4096, "chunk size must be at least 4096 bytes")
        var offsets: [Int] = []
        var lengths: [Int] = []
        for p in 0..<layout.planeCount {
            let plane = layout.plane(p)
            let pieces = max(1, (plane.byteCount + chunkSize - 1) / chunkSize)
            // Even pieces, so the last one is not a sliver.
            let base = plane.byteCount / pieces
            var offset = plane.offset
            for i in 0..<pieces {
                let length = i == pieces - 1 ? plane.offset + plane.byteCount - offset : base
                offsets.append(offset)
                lengths.append(length)
                offset += length
            }
        }
        self.offsets = offsets
        self.lengths = lengths
        self.chunkSize = chunkSize
        largestPayload = 4 + 12 * lengths.count + lengths.reduce(0) { $0 + Self.largestStored(length: $1) }
    }

    package var count: Int { offsets.count }

    /// Bytes of a payload's chunk table: a 4-byte count and 12 bytes per chunk.
    package var tableLength: Int { 4 + 12 * count }

    /// The most bytes a payload of this plan can take: its table and every chunk at its largest. A record that
    /// says more is damaged, whatever its checksums say (and is refused before anything of its size is allocated).
    package let largestPayload: Int

    /// The most stored bytes chunk `chunk` can take: LZ4's bound for its length (an LZ4 chunk of bytes that do not
    /// compress grows a little; a raw chunk is exactly its length).
    package func largestStored(_ chunk: Int) -> Int { Self.largestStored(length: lengths[chunk]) }

    /// `LZ4_COMPRESSBOUND(length)`, without its 32-bit limit.
    private static func largestStored(length: Int) -> Int { length + length / 255 + 16 }
}

/// Why stored bytes could not be turned back into a frame.
public enum FrameDecodeError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The stored bytes are not as long as the chunk table says: `needed` bytes, `actual` there (`actual` is the
    /// larger when bytes follow the last chunk).
    case payloadTooShort(needed: Int, actual: Int)
    /// The chunk table lists `actual` chunks; the stream's layout and chunk size make `expected`.
    case chunkCountMismatch(expected: Int, actual: Int)
    /// The chunk table's CRC-32C does not match its bytes.
    case tableChecksumMismatch
    /// Chunk `chunk`'s CRC-32C does not match its stored bytes.
    case chunkChecksumMismatch(chunk: Int)
    /// Chunk `chunk`'s stored length runs past the stored bytes, or a raw chunk's differs from the chunk's length.
    case chunkLengthInvalid(chunk: Int)
    /// Chunk `chunk` names a codec byte that is not a ``FrameCodec``.
    case unknownChunkCodec(chunk: Int, codec: UInt8)
    /// Chunk `chunk` is not a valid LZ4 block, or does not decompress to the chunk's length.
    case lz4Failed(chunk: Int)
    /// A delta chunk came with no previous frame to add it to (decoding must start at a key frame).
    case deltaWithoutPredecessor

    /// One line saying what is wrong, with the chunk number where there is one.
    public var description: String {
        switch self {
        case .payloadTooShort(let needed, let actual): "stored bytes too short (\(actual) of \(needed))"
        case .chunkCountMismatch(let expected, let actual): "chunk table has \(actual) chunks, layout needs \(expected)"
        case .tableChecksumMismatch: "stored-bytes checksum mismatch (chunk table)"
        case .chunkChecksumMismatch(let chunk): "stored-bytes checksum mismatch (chunk \(chunk))"
        case .chunkLengthInvalid(let chunk): "chunk \(chunk) has an impossible length"
        case .unknownChunkCodec(let chunk, let codec): "chunk \(chunk) has unknown codec \(codec)"
        case .lz4Failed(let chunk): "chunk \(chunk) does not decompress"
        case .deltaWithoutPredecessor: "delta frame without its previous frame"
        }
    }
}
