import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindTesting
import SegmentStore

/// What ``StoreIndexBenchmark/measureTimeToFirstFrame(path:seconds:fps:samples:)`` measured.
public struct StoreIndexTimeToFirstFrame: Sendable, Hashable {
    /// Frames in the index.
    public var frames: Int
    /// Time to insert them all (in 1 s batches, 1 min segments, each sealed), nanoseconds.
    public var insertNanoseconds: Int64
    /// For each sampled 1 s range: the time from calling `frames(in:)` to its first row, nanoseconds.
    public var samples: [Int64]
    /// For each sampled range: the pts of the first row returned (for checking), nanoseconds.
    public var firstPTS: [Int64]
    /// For each sampled range: its start, nanoseconds.
    public var rangeStarts: [Int64]
    /// The first query on a connection opened afterwards (read-only, empty page cache, statement not yet
    /// prepared), nanoseconds: what `rewind clip` pays.
    public var coldNanoseconds: Int64

    /// The median of `samples`, nanoseconds.
    public var medianNanoseconds: Int64 { samples.sorted()[samples.count / 2] }
    /// The largest of `samples`, nanoseconds.
    public var maximumNanoseconds: Int64 { samples.max() ?? 0 }
}

/// Measures the index's range queries on a synthetic recording, for `rewind bench` (`ttff_ms_1min`,
/// `ttff_ms_1h`) and for reports. Not a test: it asserts nothing about time.
public enum StoreIndexBenchmark {
    /// Builds an index at `path` holding `seconds` of `fps` frames (a key frame each second), then times
    /// ``StoreIndex/frames(streamID:in:_:)`` to its first row for `samples` 1 s ranges spread over the recording.
    ///
    /// - Parameters:
    ///   - path: A database file that does not exist yet.
    ///   - seconds: Length of the synthetic recording.
    ///   - fps: Frames per second.
    ///   - samples: How many ranges to time (the first one also warms the statement cache and is included).
    /// - Returns: The timings and the first pts each query returned.
    /// - Throws: ``SQLiteError``, ``MigrationError``, ``StoreIndexError``.
    /// - Complexity: O(seconds × fps × log n) to build, then O(samples × log n).
    public static func measureTimeToFirstFrame(
        path: String, seconds: Int, fps: Int = 60, samples: Int = 25
    ) throws -> StoreIndexTimeToFirstFrame {
        precondition(seconds > 0 && fps > 0 && samples > 0, "seconds, fps and samples must be positive")
        let clock = ContinuousClock()
        let insertStart = clock.now
        let (index, stream) = try buildIndex(path: path, seconds: seconds, fps: fps)
        let inserted = clock.now - insertStart
        func pts(_ frame: Int) -> Int64 { Int64(frame) * 1_000_000_000 / Int64(fps) }

        var result = StoreIndexTimeToFirstFrame(
            frames: seconds * fps, insertNanoseconds: nanoseconds(inserted), samples: [], firstPTS: [], rangeStarts: [],
            coldNanoseconds: 0)
        for sample in 0..<samples {
            // Spread over the recording, not on frame boundaries: start half a frame after a frame.
            let second = seconds == 1 ? 0 : (sample * 7919) % (seconds - 1)
            let start = pts(second * fps + sample % fps) + 1_000_000_000 / Int64(fps * 2)
            var first: Int64 = -1
            let queryStart = clock.now
            var elapsed = Duration.zero
            try index.frames(streamID: stream.id, in: start..<(start + 1_000_000_000)) { row in
                elapsed = clock.now - queryStart
                first = row.ptsNanoseconds
                return false
            }
            result.samples.append(nanoseconds(elapsed))
            result.firstPTS.append(first)
            result.rangeStarts.append(start)
        }
        let reader = try StoreIndex(path: path, readOnly: true)
        let middle = pts(seconds * fps / 2)
        let coldStart = clock.now
        var cold = Duration.zero
        try reader.frames(streamID: stream.id, in: middle..<(middle + 1_000_000_000)) { _ in
            cold = clock.now - coldStart
            return false
        }
        result.coldNanoseconds = nanoseconds(cold)
        return result
    }

    /// Builds an index at `path` holding `seconds` of `fps` 1080p NV12 frame rows of stream `bench` (a key frame each
    /// second, 1 s batches, one-minute segments, each sealed), with no segment files behind it.
    ///
    /// - Returns: the index and the stream's row.
    /// - Throws: ``SQLiteError``, ``MigrationError``, ``StoreIndexError``.
    package static func buildIndex(path: String, seconds: Int, fps: Int) throws -> (StoreIndex, StreamRow) {
        let index = try StoreIndex(path: path)
        let layout = try FrameLayout(format: .nv12, width: 1920, height: 1080)
        let description = StreamDescription(
            layout: layout, frameDuration: FrameTime(value: 1, timescale: Int32(fps)), color: .bt709Video)
        let stream = try index.stream(named: "bench", description: description)
        func pts(_ frame: Int) -> Int64 { Int64(frame) * 1_000_000_000 / Int64(fps) }
        var batch: [FrameRow] = []
        batch.reserveCapacity(fps)
        var segment: Int64 = 0
        var offset: Int64 = 0
        for second in 0..<seconds {
            if second % 60 == 0 {
                if second > 0 { try index.sealSegment(id: segment, fileName: "\(segment).rws") }
                segment = try index.insertSegment(
                    streamID: stream.id, fileName: "\(second).partial", formatVersion: 1, createdWallNanoseconds: 0)
                offset = 64
            }
            batch.removeAll(keepingCapacity: true)
            for frame in second * fps..<(second + 1) * fps {
                let stored = 400_000 + frame % 1000
                batch.append(
                    FrameRow(
                        ptsNanoseconds: pts(frame), wallNanoseconds: pts(frame), segmentID: segment,
                        fileOffset: offset, storedLength: stored, rawLength: layout.byteCount,
                        flags: frame % fps == 0 ? FrameRow.keyFrameFlag : 0, codec: 1))
                offset += Int64(stored + SegmentFormat.recordHeaderLength)
            }
            try index.addFrames(batch, streamID: stream.id)
        }
        try index.sealSegment(id: segment, fileName: "\(segment).rws")
        try index.checkpoint()
        return (index, stream)
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
