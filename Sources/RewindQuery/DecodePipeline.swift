import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import SegmentStore
import Synchronization

/// Overlaps reading and decoding frames from the segment store (on its own thread) with writing them (on the
/// caller's). Frames are decoded straight into `depth + 2` buffers allocated once per export and handed over
/// without a copy: the decoder writes frames k + depth + 1 and k + depth + 2 into the buffers of frames k and k + 1
/// only after the writer is done with them. Where there are two cores, each frame's chunks are shared out between
/// two decoding threads while the writer waits for frames, and decoded on one while the decoder waits for the
/// writer (a ``DecodeSplitting`` flipped by whichever side waits): an export of hard-to-decode footage gets both
/// cores for decoding, one of easy footage leaves the writer a core of its own.
///
///     reader thread (+ a decode helper): frames(in:into: buffers) ──filled──▶ caller: write(frame k) ──free──▶ reader
///
/// A new `.y4m` file of `nv12`, `i420` or `gray8` frames goes another way (``exportInPlace(store:stream:range:description:destination:fileSystem:progress:)``):
/// one buffer, each frame decoded in place over the one before (unchanged chunks cost nothing), its chunks written
/// straight to their places in the file right behind the decoding.
final class DecodePipeline: @unchecked Sendable {
    private static let depth = 3
    private let buffers: DecodeBuffers
    /// One slot per frame in flight: the reader fills slot k before signalling `filled`, the writer empties it
    /// before signalling `free` (raw memory, so the two threads never share an array's storage).
    private let views: UnsafeMutableBufferPointer<FrameView?>
    /// Made with value 0 and signalled `depth` times: libdispatch traps when a semaphore is freed with a value
    /// below the one it was made with, which an export that stops early (a failed write) leaves behind.
    private let free = DispatchSemaphore(value: 0)
    private let filled = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    // Written by the reader before it signals `filled` (or `finished`); read by the writer after waiting.
    private var readerError: (any Error)?
    private let isCancelled = Atomic<Bool>(false)
    /// Two decoding threads while the writer waits for frames, one while the reader waits for it.
    private let splitting = DecodeSplitting(false)

    init(layout: FrameLayout) {
        buffers = DecodeBuffers(byteCount: layout.byteCount, count: Self.depth + 2)
        views = .allocate(capacity: Self.depth)
        views.initialize(repeating: nil)
        for _ in 0..<Self.depth { free.signal() }
    }

    deinit {
        views.deinitialize()
        views.deallocate()
    }

    /// Streams `range` of `stream` in `store` through `write` (which returns false to stop), in pts order.
    func run(
        store: SegmentStore, stream: String, range: Range<Int64>, _ write: (FrameView) throws -> Bool
    ) throws {
        try Threads.start(named: "rewind-export-read") { [self] in
            var slot = 0
            do {
                let threads = min(2, System.onlineProcessorCount)
                try store.frames(
                    streamName: stream, in: range, into: buffers, decodeThreads: threads, splitting: splitting
                ) { view in
                    if free.wait(timeout: .now()) == .timedOut {
                        // The writer is the slower side: one decoding thread leaves it a core.
                        splitting.want(false)
                        free.wait()
                    }
                    if isCancelled.load(ordering: .acquiring) { return false }
                    views[slot] = view
                    filled.signal()
                    slot = (slot + 1) % Self.depth
                    return true
                }
            } catch {
                readerError = error
            }
            filled.signal()
            finished.signal()
        }
        defer {
            isCancelled.store(true, ordering: .releasing)
            for _ in 0..<Self.depth { free.signal() }
            finished.wait()
        }
        var slot = 0
        while true {
            if filled.wait(timeout: .now()) == .timedOut {
                // The decoding is the slower side: two threads on each frame.
                splitting.want(true)
                filled.wait()
            }
            guard let view = views[slot] else {
                // Only the end marker arrives with no frame in the slot.
                if let readerError { throw readerError }
                return
            }
            views[slot] = nil
            let keepGoing = try write(view)
            free.signal()
            if !keepGoing { return }
            slot = (slot + 1) % Self.depth
        }
    }

    /// Exports `range` of `stream` to `writer` through `wavefront`: a thread of its own decodes each frame in place
    /// while this one writes it right behind (see ``FrameWavefront``); `progress` is called after each frame.

    /// Exports `range` of `stream` to a new `.y4m` file at `destination`: a reader thread decodes each frame in
    /// place while this one writes each decoded chunk straight to its place in the file (see
    /// ``SegmentStore/decodeInPlace(streamName:in:planarChroma:frames:piece:done:)``); `progress` is called after
    /// each frame.
    static func exportInPlace(
        store: SegmentStore, stream: String, range: Range<Int64>, description: StreamDescription,
        destination: ExportDestination, fileSystem: any FileSystem, progress: ((Int, Int64) throws -> Void)?
    ) throws -> ExportSummary {
        var writer: Y4MWriter?
        var infos: [FrameInfo] = []
        var reported = 0
        try store.decodeInPlace(
            streamName: stream, in: range, planarChroma: true,
            frames: { frames in
                var delivered = description
                delivered.layout = frames.layout
                writer = try Y4MWriter(stream: delivered, destination: destination, fileSystem: fileSystem)
                try writer!.place(frames.infos)
                infos = frames.infos
            },
            piece: { frame, offset, bytes in try writer!.write(frame: frame, offset: offset, bytes) },
            done: { complete in
                while reported < complete {
                    reported += 1
                    try progress?(reported, infos[reported - 1].ptsNanoseconds)
                }
            })
        return try writer!.finish()
    }
}
