import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import SegmentStore
import Synchronization

extension ClipSource {
    /// Throws ``ClipError/empty(range:held:)``, saying what the source holds, when no frame lies in `range`.
    ///
    /// - Parameter range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    public func requireFrames(in range: Range<Int64>) throws {
        guard try !hasFrames(in: range) else { return }
        throw ClipError.empty(range: range, held: try span())
    }

    /// Exports every frame in `range` to `destination`.
    ///
    /// - Parameters:
    ///   - range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    ///   - format: the file format.
    ///   - destination: a path or standard output.
    ///   - quality: how `mp4` is encoded (``ExportQuality``; the uncompressed formats ignore it).
    ///   - fileSystem: where the output file's system calls go (a fault-injecting one in tests).
    ///   - progress: called after each frame with the count so far and the frame's pts (nanoseconds).
    /// - Returns: what was written.
    /// - Throws: ``ClipError/badRange(from:to:)`` for an empty range; ``ClipError/empty(range:held:)`` when no
    ///   frame lies in the range (nothing is written);
    ///   ``ExportError`` and store errors. A partial file is removed when the export fails.
    public func export(
        range: Range<Int64>, format: ExportFormat, to destination: ExportDestination, quality: ExportQuality = .fast,
        fileSystem: any FileSystem = POSIXFileSystem(), progress: ((Int, Int64) -> Void)? = nil
    ) throws -> ExportSummary {
        guard !range.isEmpty else {
            throw ClipError.badRange(from: range.lowerBound, to: range.upperBound)
        }
        try requireFrames(in: range)
        var exporter = try makeExporter(
            format: format, stream: stream, destination: destination, quality: quality, fileSystem: fileSystem)
        do {
            var count = 0
            let write = { (view: FrameView) throws -> Bool in
                try exporter.write(view)
                count += 1
                progress?(count, view.info.ptsNanoseconds)
                return true
            }
            if case .store(let store, let row) = self {
                // Frames from disk: decode on a second thread while this one writes.
                try DecodePipeline(layout: stream.layout).run(store: store, stream: row.name, range: range, write)
            } else {
                try frames(in: range, write)
            }
            return try exporter.finish()
        } catch {
            if case .path(let path) = destination { try? fileSystem.unlink(path) }
            throw error
        }
    }
}
