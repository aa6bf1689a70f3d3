import Dispatch
import Foundation
import Glibc
import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import SegmentStore
import Synchronization

extension ClipSource {
    /// Throws ``ClipError/empty(range:held:)``, saying what the source holds, when no frame lies in `range`. Both are
    /// said in recorder time, the clock `--from` and `--to` are given on (a stream's own pts may lie elsewhere).
    ///
    /// - Parameter range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    public func requireFrames(in range: Range<Int64>) throws {
        guard try !hasFrames(in: range) else { return }
        let clock = try clock()
        let start = clock.recorderTime(ofPTS: range.lowerBound)
        throw ClipError.empty(
            range: start..<max(start, clock.recorderTime(ofPTS: range.upperBound)),
            held: try span().map {
                clock.recorderTime(ofPTS: $0.lowerBound)...clock.recorderTime(ofPTS: $0.upperBound)
            },
            // The range is refused either way: gaps that cannot be read leave out only the words on lost frames.
            lost: ((try? lostGaps(in: range)) ?? []).map { $0.onRecorderClock(clock) })
    }

    /// The markers whose time lies in `range`, as chapters of an export (none without a store, or when they
    /// cannot be read: chapters never fail an export).
    ///
    /// - Parameter range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    public func chapters(in range: Range<Int64>) -> [ExportChapter] {
        let markers = try? storedStream().map { store, row in try store.markers(streamName: row.name, in: range) }
        return (markers ?? []).map { ExportChapter(ptsNanoseconds: $0.atNanoseconds, title: $0.label) }
    }

    /// The stream's gaps where frames were lost (``LossReason/isLoss``: not its source's own pauses or end, not what
    /// retention deleted) that reach into `range`, as the store records them (without one, as the recorder keeps
    /// them: ``RecorderStream/memoryGaps``), by start. An export of the range holds no frame of them, and says so.
    ///
    /// A gap a recording noted between two frames starts at the frame before it, which is kept: a range that reaches
    /// only that frame of the gap lost nothing (a save of the last seconds just before a pause said it had).
    ///
    /// - Parameter range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    /// - Throws: store errors when the gaps, or the frames beside them, cannot be read: the losses are then unknown,
    ///   never taken for none.
    /// - Complexity: O(gaps) index reads.
    public func lostGaps(in range: Range<Int64>) throws -> [GapRow] {
        let gaps = try recordedGaps()
        // Frames a live recorder accepted and could not write (a disk error) are read from its memory while it holds
        // them: such a gap lost only what left memory before the ring's oldest frame (it said frames were lost when
        // the file held every one).
        let oldest = live.flatMap { $0.store == nil ? nil : $0.ring.statistics.firstPTSNanoseconds }
        let step = stream.frameStepNanoseconds
        return try gaps.compactMap { found -> GapRow? in
            var gap = found
            if let oldest, gap.reason.isLossOfAcceptedFrames, gap.endNanoseconds > oldest {
                // The gap starts at the frame kept before it (or, with none, at its first lost one): memory holding
                // the frame after that one (half a step allowed for a live source's jitter) holds every frame lost.
                let start = gap.startNanoseconds
                let keptAtStart = try start < Int64.max && hasFrames(in: start..<(start + 1))
                guard oldest > (keptAtStart ? start.addingSaturating(step + step / 2) : start) else { return nil }
                gap.endNanoseconds = oldest
            }
            guard gap.reason.isLoss, gap.startNanoseconds < range.upperBound, gap.endNanoseconds > range.lowerBound
            else { return nil }
            let start = gap.startNanoseconds
            guard start < Int64.max, range.upperBound <= start + 1 else { return gap }
            return try hasFrames(in: start..<(start + 1)) ? nil : gap
        }.sorted { $0.startNanoseconds < $1.startNanoseconds }
    }

    /// Every gap of the stream, of any reason: as the store records them, or without one as the recorder keeps them
    /// itself (``RecorderStream/memoryGaps``); none when the store has no such stream yet. A live recorder's writes
    /// failing now leave a gap the index holds up to a second late: it counts up to their newest
    /// (``RecorderStream/lossInProgress``).
    ///
    /// - Throws: store errors when the index's gaps cannot be read.
    func recordedGaps() throws -> [GapRow] {
        if let live, live.store == nil { return live.memoryGaps }
        let stored = try storedStream()
        var gaps = try stored.map { store, row in try store.gaps(streamName: row.name) } ?? []
        if var loss = live?.lossInProgress {
            loss.streamID = stored?.1.id ?? 0
            // The index's row of the same stretch, recorded so far.
            gaps.removeAll {
                $0.reason == loss.reason && $0.startNanoseconds == loss.startNanoseconds
                    && $0.endNanoseconds <= loss.endNanoseconds
            }
            gaps.append(loss)
        }
        return gaps
    }

    /// Exports every frame in `range` to `destination` (markers in it as chapters, in Matroska).
    ///
    /// - Parameters:
    ///   - range: pts nanoseconds on the stream clock, start inclusive, end exclusive.
    ///   - format: the file format.
    ///   - destination: a path or standard output.
    ///   - quality: how `mp4` is encoded (``ExportQuality``; the uncompressed formats ignore it).
    ///   - fileSystem: where the output file's system calls go (a fault-injecting one in tests).
    ///   - progress: called after each frame with the count so far and the frame's pts (nanoseconds); an error it
    ///     throws ends the export (the partial file is removed) and is rethrown.
    /// - Returns: what was written.
    /// - Throws: ``ClipError/badRange(from:to:)`` for an empty range; ``ClipError/empty(range:held:)`` when no
    ///   frame lies in the range (nothing is written);
    ///   ``ExportError`` and store errors. A partial file is removed when the export fails.
    public func export(
        range: Range<Int64>, format: ExportFormat, to destination: ExportDestination, quality: ExportQuality = .fast,
        fileSystem: any FileSystem = POSIXFileSystem(), progress: ((Int, Int64) throws -> Void)? = nil
    ) throws -> ExportSummary {
        guard !range.isEmpty else {
            throw ClipError.badRange(from: range.lowerBound, to: range.upperBound)
        }
        try requireFrames(in: range)
        let staging = try StagedExport(destination, fileSystem: fileSystem)
        let fromDisk = if case .store = self { true } else { false }
        do {
            if case .store(let store, let row) = self, format == .y4m, staging.finalPath != nil,
                SegmentStore.decodesInPlace(stream.layout.format)
            {
                // A new .y4m file from disk: each frame decoded in place on a thread of its own, and its chunks
                // written to their places in the file right behind.
                return try staging.complete(
                    DecodePipeline.exportInPlace(
                        store: store, stream: row.name, range: range, description: stream,
                        destination: staging.writtenDestination, fileSystem: fileSystem, progress: progress))
            }
            var exporter = try makeExporter(
                format: format, stream: stream, destination: staging.writtenDestination, quality: quality,
                fileSystem: fileSystem, chapters: chapters(in: range), framesFromDecoder: fromDisk)
            var count = 0
            let write = { (view: FrameView) throws -> Bool in
                try exporter.write(view)
                count += 1
                try progress?(count, view.info.ptsNanoseconds)
                return true
            }
            if case .store(let store, let row) = self {
                // Frames from disk: decode on a second thread while this one writes (and converts, if it must:
                // the decoder keeps the other core busy).
                try DecodePipeline(layout: stream.layout).run(store: store, stream: row.name, range: range, write)
            } else {
                try frames(in: range, write)
            }
            return try staging.complete(exporter.finish())
        } catch {
            throw staging.abandon(after: error)
        }
    }
}

/// An export to a path, written under a temporary name beside it and renamed to the requested name only when
/// complete, so a crash or a failure never leaves a truncated file under that name.
///
///     /exports/clip.mkv  ← rename ←  /exports/.clip.mkv.partial-<pid>-<n>   (written while the export runs)
///
/// A destination that exists and is not a regular file (`/dev/null`, a FIFO, a terminal) is written in place:
/// renaming over it would replace the device or pipe. A symbolic link is followed, so the file it names is the
/// one replaced. Descriptors are written as they are.
package struct StagedExport {
    /// The store file that an export to `path` would overwrite (through symbolic links too) — anything in
    /// `segments/`, the index and its WAL files, the control socket, the token — resolved; nil for any other path.
    package static func storeFile(writtenBy path: String, store: String) -> String? {
        func resolved(_ path: String) -> String? {
            guard let real = realpath(path, nil) else { return nil }
            defer { free(real) }
            return String(cString: real)
        }
        guard let root = resolved(store) else { return nil }
        // A dangling link is written through: what it names (followed link by link) is the file that would be made.
        var named = path
        for _ in 0..<40 {
            var info = stat()
            guard lstat(named, &info) == 0, info.st_mode & S_IFMT == S_IFLNK,
                let target = try? FileManager.default.destinationOfSymbolicLink(atPath: named)
            else { break }
            named =
                target.hasPrefix("/")
                ? target : URL(fileURLWithPath: named).deletingLastPathComponent().path + "/" + target
        }
        let url = URL(fileURLWithPath: named)
        guard
            let target = resolved(named)
                ?? resolved(url.deletingLastPathComponent().path).map({ $0 + "/" + url.lastPathComponent })
        else { return nil }
        let own = (SegmentStore.indexFileNames + ["rewind.sock", "token"]).map { root + "/" + $0 }
        return target.hasPrefix(root + "/segments/") || own.contains(target) ? target : nil
    }

    /// The requested path, symbolic links resolved; nil when the export is written in place.
    package let finalPath: String?
    /// Where the exporter writes: the temporary path, or the destination itself.
    package let writtenDestination: ExportDestination
    private let requested: ExportDestination
    private let fileSystem: any FileSystem

    private static let counter = Atomic<Int>(0)
    private static let writesInPlace = Atomic<Bool>(true)

    /// From now on, this process refuses to write an export in place into a destination that is not a regular
    /// file: a recorder, whose export threads a FIFO without a reader (or a reader that never reads) would block
    /// for ever, and with them cancels and the recorder's stop.
    package static func refuseSpecialFiles() { writesInPlace.store(false, ordering: .relaxed) }

    /// - Throws: ``ExportError`` for a destination that is not a regular file, after ``refuseSpecialFiles()``.
    package init(_ destination: ExportDestination, fileSystem: any FileSystem) throws {
        requested = destination
        self.fileSystem = fileSystem
        guard case .path(let path) = destination, let target = StagedExport.replaceableTarget(path) else {
            if case .path(let path) = destination, !StagedExport.writesInPlace.load(ordering: .relaxed) {
                throw ExportError(
                    destination: path,
                    reason: .system(
                        action:
                            "write \(StagedExport.specialFileKind(path) ?? "a file that is not a regular file") from the recorder",
                        Errno(rawValue: EINVAL)))
            }
            finalPath = nil
            writtenDestination = destination
            return
        }
        let slash = target.lastIndex(of: "/")
        let directory = slash.map { String(target[...$0]) } ?? ""
        let name = slash.map { String(target[target.index(after: $0)...]) } ?? target
        // Already this process's temporary name (a stream's file of an export of several, staged together): written
        // as it is, its staging's to rename or remove; staged again, its name would double and no later export of
        // that name would find it to remove.
        if name.hasPrefix("."), name.contains(".partial-\(getpid())-") {
            finalPath = nil
            writtenDestination = destination
            return
        }
        let serial = StagedExport.counter.add(1, ordering: .relaxed).newValue
        StagedExport.removeAbandonedPartials(in: directory, name: name, fileSystem: fileSystem)
        finalPath = target
        writtenDestination = .path("\(directory).\(name).partial-\(getpid())-\(serial)")
    }

    /// Removes the `.NAME.partial-PID-N` files in `directory` (ending in `/`, or empty for the current one) that
    /// processes no longer running left behind (an export killed part way): those for `name`, or every one when
    /// `name` is nil. Another running process's partial file stays.
    package static func removeAbandonedPartials(
        in directory: String, name: String? = nil, fileSystem: any FileSystem = POSIXFileSystem()
    ) {
        guard let entries = try? fileSystem.contentsOfDirectory(directory.isEmpty ? "." : directory) else { return }
        for entry in entries where entry.hasPrefix(".") {
            guard let marker = entry.range(of: ".partial-", options: .backwards),
                name.map({ entry[entry.index(after: entry.startIndex)..<marker.lowerBound] == $0 }) ?? true
            else { continue }
            let rest = entry[marker.upperBound...]
            guard let dash = rest.firstIndex(of: "-"), let pid = pid_t(rest[..<dash]),
                Int(rest[rest.index(after: dash)...]) != nil, System.hasEnded(pid: pid)
            else { continue }
            try? fileSystem.unlink(directory + entry)
        }
    }

    /// Why an export cannot write `path`, by its length alone: a name in it longer than the system allows (255
    /// bytes), counting for the file's own name the temporary name it is written under first
    /// (`.NAME.partial-PID-N`), or a path longer than the system's 4096 bytes; nil when it can (or is a FIFO or
    /// device, written in place).
    package static func lengthProblem(_ path: String) -> String? {
        let longest = Int(NAME_MAX)
        let name = (path as NSString).lastPathComponent
        let extra = ".\(name).partial-\(getpid())-\(Int64.max)".utf8.count - name.utf8.count
        if let long = path.split(separator: "/").dropLast().first(where: { $0.utf8.count > longest }) {
            return "a directory name in it is \(long.utf8.count) bytes long, more than the \(longest) a name may have"
        }
        guard specialFileKind(path) == nil else { return nil }
        if name.utf8.count + extra > longest {
            return "its file name is \(name.utf8.count) bytes long; an export writes it under a temporary name "
                + "\(extra) bytes longer first, so it may be at most \(longest - extra) bytes: give a shorter name"
        }
        if path.utf8.count + extra >= Int(PATH_MAX) {
            return "it is \(path.utf8.count) bytes long; with the temporary name an export writes first it may be at "
                + "most \(Int(PATH_MAX) - 1 - extra) bytes: give a shorter path"
        }
        return nil
    }

    /// What `path` is when it exists and is not a regular file (symbolic links followed): "a FIFO", "a device",
    /// "a directory", or "not a regular file"; nil for a regular file or nothing there.
    package static func specialFileKind(_ path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0, (info.st_mode & S_IFMT) != S_IFREG else { return nil }
        return switch info.st_mode & S_IFMT {
        case S_IFDIR: "a directory"
        case S_IFIFO: "a FIFO"
        case S_IFCHR, S_IFBLK: "a device"
        default: "not a regular file"
        }
    }

    /// `path` with symbolic links resolved when it can be replaced by a rename (a regular file, or nothing yet: a
    /// dangling link's target is created, the link kept); nil when it names something else.
    private static func replaceableTarget(_ path: String) -> String? {
        var info = stat()
        // Nothing there yet (or unreachable: the open says why).
        guard stat(path, &info) == 0 else { return System.followingLinks(path) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Renames the finished file to the requested name and reports it under that name.
    package func complete(_ summary: ExportSummary) throws -> ExportSummary {
        guard let finalPath else { return summary }
        try moveIntoPlace()
        var summary = summary
        summary.path = finalPath
        return summary
    }

    /// Renames the finished file to the requested name (nothing to do for a destination written in place).
    ///
    /// - Throws: ``ExportError`` when the rename fails (the temporary file is removed).
    package func moveIntoPlace() throws {
        guard let finalPath, case .path(let temporary) = writtenDestination else { return }
        // A file replaced keeps its permissions (a private file does not become readable to others).
        var replaced = stat()
        if stat(finalPath, &replaced) == 0 && (replaced.st_mode & S_IFMT) == S_IFREG {
            _ = chown(temporary, replaced.st_uid, replaced.st_gid)  // only when allowed (root, or the same owner)
            _ = chmod(temporary, replaced.st_mode & 0o777)
        }
        do {
            try fileSystem.rename(temporary, to: finalPath)
        } catch {
            try? fileSystem.unlink(temporary)
            throw ExportError(
                destination: finalPath,
                reason: .system(action: "cannot rename the finished file into place", Errno(rawValue: error.code)))
        }
    }

    /// Removes the partial file and returns `error`, naming the requested path instead of the temporary one. A
    /// destination written in place (a device, a FIFO, a link to one) is the user's and stays.
    package func abandon(after error: any Error) -> any Error {
        guard finalPath != nil, case .path(let written) = writtenDestination else { return error }
        try? fileSystem.unlink(written)
        if var exportError = error as? ExportError, exportError.destination == written {
            exportError.destination = requested.description
            return exportError
        }
        return error
    }
}

extension GapRow {
    /// The gap with its start and end moved from its stream's pts to the recorder clock (`clock`, the stream's).
    package func onRecorderClock(_ clock: StreamClock) -> GapRow {
        var moved = self
        moved.startNanoseconds = clock.recorderTime(ofPTS: startNanoseconds)
        moved.endNanoseconds = clock.recorderTime(ofPTS: endNanoseconds)
        return moved
    }
}
