import Foundation
import RewindKit

/// What the command line makes of an error: the message to print, the exit status, and the advice to add.
///
/// The one place that maps error types and cases to exit statuses and advice. Library errors state what failed;
/// what to do about it (which command to run, which option to change) is said here, never by matching on
/// message text.
struct CommandFailure {
    var message: String
    var status: Int32
    /// A line of advice printed after the message, when there is one.
    var advice: String?
    /// Whether the command's help follows the message (usage errors).
    var showsHelp = false
    /// Whether only the help's usage line follows (a bad value: the message says what it must look like).
    var showsUsageLineOnly = false

    init(message: String, status: Int32 = ExitStatus.failure, advice: String? = nil, showsHelp: Bool = false) {
        self.message = message
        self.status = status
        self.advice = advice
        self.showsHelp = showsHelp
    }

    /// The failure for `error` thrown by the command `command` (`clip`, `record`…).
    init(_ error: any Error, command: String) {
        self.init(message: "\(error)")
        // Out of file descriptors, wherever it struck (the index, a segment, an output file): a limit of the
        // system, with what to raise.
        if Self.isOutOfDescriptors(error) {
            status = ExitStatus.systemLimit
            advice = Self.raiseDescriptorLimit
            return
        }
        switch error {
        case let error as UsageError:
            self.init(message: error.message, status: ExitStatus.usage, showsHelp: error.showsHelp)
            showsUsageLineOnly = error.showsUsageLineOnly
        case let error as CommandError:
            status = error.status
        case let error as UnknownLosses:
            // What was written is kept (1, as an export kept without the end of its range); what to do is the
            // store error's advice, or, for a recorder's (whose error comes as text), to check its index.
            advice =
                error.cause.map { CommandFailure($0, command: command).advice }
                ?? "once the recorder stops, run 'rewind verify' to check the index ('rewind verify --repair' moves a "
                + "damaged one aside and rebuilds it from the segment files)"
        case is ValueError:
            status = ExitStatus.usage
        case let error as ClipError:
            switch error {
            case .badRange:
                status = ExitStatus.usage
                // The message says the range is empty and why; what to change, once.
                advice = command == "clip" ? "give a --to later than --from" : nil
            case .nonPositiveDuration:
                status = ExitStatus.usage
                advice = command == "save" ? "--last must be longer than 0s" : nil
            case .badBucketCount:
                status = ExitStatus.usage
            case .empty, .noFrames:
                break
            }
        case let error as ControlError:
            switch error {
            case .refused(let refusal):
                switch refusal.code {
                case .badRequest: status = ExitStatus.usage
                case .stopping, .unavailable: status = ExitStatus.unavailable
                case .tooMany:
                    status = ExitStatus.unavailable
                    advice =
                        "try again once some are done ('rewind status' counts them), or cancel a waiting one "
                        + "(DELETE /v1/saves/ID)"
                case .systemLimit: status = ExitStatus.systemLimit
                case .notFound: advice = command == "unmark" ? "'rewind markers' lists the markers" : nil
                default: break
                }
            case .recorderStopped:
                status = ExitStatus.unavailable
                switch command {
                case "clip":
                    advice =
                        "check the recorder's log; 'rewind clip' without a recorder reads the store on disk (none, when "
                        + "it recorded with --spill off: its frames were in its memory only)"
                case "save":
                    advice =
                        "check the recorder's log; 'rewind save' without a recorder saves from the store on disk (none, "
                        + "when it recorded with --spill off: its frames were in its memory only)"
                case "mark", "unmark":
                    advice = "check the recorder's log; 'rewind markers' says whether the change was made"
                default: advice = "check the recorder's log"
                }
            case .connectionDropped:
                status = ExitStatus.unavailable
                advice = "check the recorder's log; raise its limit on threads (a pids cgroup, TasksMax, ulimit -u)"
            case .eventStreamBroken(let afterStopping):
                status = ExitStatus.unavailable
                advice =
                    afterStopping
                    ? "saves it had not finished were not written: 'rewind clip' makes them from the store on disk"
                    : "check the recorder's log (and dmesg for a kill)"
            case .eventStreamDropped:
                status = ExitStatus.unavailable
                advice =
                    "read the events as they come; 'rewind events --since ID' (the last id had) goes on from there"
            case .noAnswer(let request, _):
                status = ExitStatus.unavailable
                advice = "resume it ('fg', or kill -CONT PID) or stop it; 'ps' shows its state (T: stopped)"
                let words = request.split(separator: " ")
                if words.count == 2, ["save", "clip"].contains(words[0]), let id = Int(words[1]) {
                    // It has the save: once resumed it writes the file.
                    advice! +=
                        "; resumed, it still writes \(request): to cancel it, before resuming it, run 'curl "
                        + "--unix-socket DIR/rewind.sock -X DELETE http://rewind/v1/saves/\(id)'"
                } else if request == "the save" || request == "the clip" {
                    // Asked, never answered: a resumed recorder reads the request then.
                    advice! += "; resumed, it may still make \(request) ('rewind status' counts saves waiting)"
                } else if command == "save" || command == "clip" {
                    advice! += "; nothing was asked of it yet: run the command again once it records"
                }
            case .badListenAddress(_, let reason):
                switch reason {
                case .system(let errno):
                    // The address was fine; the system refused it (a port in use): not a usage error.
                    status = ExitStatus.unavailable
                    if errno == Errno(rawValue: EADDRINUSE) {
                        advice = "stop what listens there (ss -ltnp shows it) or choose another port"
                    }
                case .notLoopback:
                    status = ExitStatus.usage
                    advice = "give --listen-any to listen there on purpose"
                default:
                    status = ExitStatus.usage
                }
            case .tokenFile(_, let problem):
                status = ExitStatus.usage
                switch problem {
                case .empty:
                    advice = "write the token into it, or name a file that does not exist yet (a token is made for you)"
                case .readableByOthers:
                    advice =
                        "keep the token file readable by its owner only (chmod 600), or choose another with --token-file"
                case .uncarriableCharacter, .tooShort:
                    // The problem says what the token lacks and how to make one.
                    advice = nil
                case .unreadable, .cannotCreate, .cannotWrite:
                    advice = "choose another with --token-file, or name a file that does not exist yet"
                }
            default:
                break
            }
        case FrameError.ptsOutOfRange:
            // A source whose frames lie beyond the time a stream keeps (an absurd rate, or a stream continued past it).
            status = ExitStatus.dataError
        case let error as InputError:
            status = error.isMalformed ? ExitStatus.dataError : ExitStatus.failure
            if case .cannotOpen = error.problem { status = ExitStatus.noInput }
            advice = Self.advice(for: error)
        case let error as ExportError:
            if case .missingTool = error.reason { status = ExitStatus.unavailable }
            if case .toolRefused = error.reason { status = ExitStatus.systemLimit }
            if case .toolShortOfAddressSpace = error.reason { status = ExitStatus.systemLimit }
            if case .interrupted = error.reason { status = ExitStatus.interrupted }
            advice = Self.advice(for: error)
        case is ThreadStartFailed:
            status = ExitStatus.systemLimit
        case let error as RecorderError:
            switch error {
            case .finishFailed(let cause): advice = CommandFailure(cause, command: command).advice
            case .wallClockOutOfRange:
                status = ExitStatus.systemLimit
                advice = "set the system clock to the date (date -s, or timedatectl set-ntp true) and record again"
            }
        default:
            // Another recorder holds the store: the service is taken, as when its socket or port is (69).
            if ["record", "soak", "demo"].contains(command), case SegmentStoreError.storeLocked = error {
                status = ExitStatus.unavailable
            }
            advice = Self.advice(forStoreError: error, command: command)
        }
    }

    /// The lines to print on standard error: `rewind COMMAND: message`, the advice, and the help when it belongs.
    func text(command: String, help: String, stream: String? = nil) -> String {
        var text = "rewind \(command): " + (stream.map { "stream '\($0)': " } ?? "") + message
        if let advice { text += "\nrewind \(command): \(advice)" }
        if showsHelp && showsUsageLineOnly, let usage = help.split(separator: "\n\n", maxSplits: 1).first {
            text += "\n\n\(usage)\n('rewind \(command) --help' lists every option)"
        } else if showsHelp {
            text += "\n\n\(help)"
        }
        return text
    }

    private static let repair = "run 'rewind verify --repair'"

    private static let raiseDescriptorLimit =
        "raise the limit on open files (ulimit -n 1024, systemd's LimitNOFILE=) and run again"

    /// Whether `error` says the process (or the system) ran out of file descriptors (`EMFILE`, `ENFILE`).
    static func isOutOfDescriptors(_ error: any Error) -> Bool {
        let codes = [EMFILE, ENFILE]
        switch error {
        case SegmentStoreError.index(_, .tooManyOpenFiles, _):
            return true
        case SegmentStoreError.io(let failure), SegmentStoreError.diskFull(_, _, _, let failure),
            SegmentStoreError.writeFailed(_, _, _, let failure):
            return codes.contains(failure.code)
        case let failure as FileSystemError:
            return codes.contains(failure.code)
        case let error as ExportError:
            if case .system(_, let errno) = error.reason { return codes.contains(errno.rawValue) }
            return false
        default:
            return false
        }
    }

    private static func advice(for error: InputError) -> String? {
        switch error.problem {
        case .unsupportedColorSpace(let token):
            // More than 8 bits (`C422p10`, `Cmono12`: digits after `p` or `mono` at the end) keeps 10 of them in the
            // one deeper format taken, 4:2:0 10-bit.
            let digits = token.reversed().prefix(while: \.isNumber).count
            let base = token.dropLast(digits)
            guard digits > 0, base.hasSuffix("p") || base.hasSuffix("mono") else {
                return "convert first, e.g. ffmpeg -i in -pix_fmt yuv420p -f yuv4mpegpipe out.y4m"
            }
            return "convert first, keeping 10 bits, e.g. ffmpeg -i in -pix_fmt yuv420p10le -strict -1 -f "
                + "yuv4mpegpipe out.y4m (or -pix_fmt yuv420p for 8 bits)"
        case .interlaced:
            return "deinterlace first, e.g. ffmpeg -vf bwdif"
        default:
            return nil
        }
    }

    private static func advice(for error: ExportError) -> String? {
        switch error.reason {
        case .missingTool(let tool):
            "install \(tool) (apt-get install \(tool)) or export .y4m/.mkv instead"
        case .unsupportedPixelFormat(_, .y4m):
            "export to .mkv (uncompressed BGRA) or .mp4 instead"
        case .system(_, let errno) where errno == Errno(rawValue: ENOSPC):
            "free some space or write elsewhere"
        case .noRoom:
            "free some space or write elsewhere"
        case .toolShortOfAddressSpace:
            "raise the limit on address space (ulimit -v unlimited; systemd's LimitAS=) and run again, or export "
                + ".mkv or .y4m, which need no ffmpeg"
        case .temporaryDirectoryUnusable:
            "point TMPDIR at a directory that exists and can be written (TMPDIR=/var/tmp), or unset it for /tmp"
        case .gapTooLarge:
            "export .mkv, which keeps each frame's time with no repeats, or clip the parts before and after the gap"
        case .frameTooLarge:
            "export .mkv or .y4m, which take any size"
        default:
            nil
        }
    }

    private static func advice(forStoreError error: any Error, command: String) -> String? {
        // Only `record` has retention to make room.
        let freeSpace =
            command == "record"
            ? "free space, or set --disk or --min-free so old segments are deleted to make room"
            : "free some space on the disk"
        switch error {
        case let error as SegmentStoreError:
            switch error {
            case .damaged: return repair
            case .notASegment: return "\(repair) or move it out of the store"
            case .missingSegment: return "put it back, or \(repair) to record its frames as lost"
            case .deletedWhileRead:
                return "read a later range ('rewind info' shows what the store holds now), or keep the range first "
                    + "with a marker's hold ('rewind mark --store DIR --label … --at TIME --hold DURATION')"
            case .indexDisagrees:
                return "\(repair), which rebuilds them from the file (or, for another recording's file, moves it aside)"
            case .diskFull: return freeSpace
            case .writeFailed: return "check the disk"
            case .storeLocked:
                return command == "verify"
                    ? "stop it (verify checks a store at rest), or read with 'rewind info'/'rewind clip' (read-only)"
                    : "stop it (one recorder per store), or give another --store"
            case .unknownStream: return "'rewind info' lists the streams"
            case .damagedIndex: return "\(repair), which moves it aside and rebuilds it from the segment files"
            case .foreignIndex:
                return "\(repair), which keeps it aside as index.sqlite.foreign-<unix seconds> and rebuilds the index "
                    + "from the segment files (or put this store's own index back)"
            case .index(let path, let problem, _):
                switch problem {
                case .locked: return "stop the other writer (only one 'rewind record' per store) and retry"
                case .full: return freeSpace
                case .tooManyOpenFiles:
                    return raiseDescriptorLimit
                case .failed(let codeName, _, _):
                    switch codeName {
                    case "SQLITE_IOERR":
                        // A disk that is full, not failing: even reading needs room for the index's -shm file.
                        let directory = System.parentDirectory(of: path)
                        if let free = try? POSIXFileSystem().availableBytes(directory), free < 1 << 20 {
                            return "the disk holding \(directory) is full (\(formatBytes(free)) free), and even "
                                + "reading the index needs room for its -shm file (32 KiB): free some space and retry"
                        }
                        // The -shm file says a writer has a -wal that is gone (deleted under a running recorder;
                        // the reader itself may have made an empty one since).
                        if !SegmentStoreError.hasWAL(path), FileManager.default.fileExists(atPath: path + "-shm"),
                            SegmentStore.isOpenForRecording(directory: directory)
                        {
                            return
                                "\((path as NSString).lastPathComponent)-wal is missing or empty (deleted?) while the "
                                + "recorder writes the index: it keeps the file open and writes every row into "
                                + "\((path as NSString).lastPathComponent) when it stops; stop it (Ctrl-C, SIGTERM), "
                                + "then read again"
                        }
                        return "check the disk"
                    case "SQLITE_READONLY" where FileManager.default.fileExists(atPath: path + "-journal"):
                        // A hot journal, which only a write open rolls back (not a matter of permissions).
                        return "\((path as NSString).lastPathComponent)-journal beside it holds a write another "
                            + "program left unfinished: \(repair) (or record into the store), which rolls it back, "
                            + "then read again"
                    case "SQLITE_READONLY":
                        return "check the file and directory permissions (reading needs write access to the store "
                            + "directory for the index's -shm file, unless it exists)"
                    case "SQLITE_CANTOPEN":
                        return "check that the directory exists and is readable; if index.sqlite is missing, "
                            + "\(repair), which rebuilds it from the segment files"
                    case "SQLITE_PERM", "SQLITE_AUTH": return "check the file permissions"
                    case _ where problem.isRefusedStatement:
                        return "\(repair), which moves a damaged index aside and rebuilds it from the segment files"
                    default: return nil
                    }
                case .schemaNewerThanThisBuild: return "upgrade rewind"
                case .unfinished:
                    return "record into it again (or \(repair)), which finishes making it"
                case .schemaOutdated(0, _):
                    return "put the -wal file back if there is one, else \(repair), which rebuilds the index from the "
                        + "segment files"
                case .schemaOutdated:
                    return "open the store once for writing (e.g. 'rewind verify --store DIR --repair')"
                case .editedMigration: return "open it with the build of rewind that made it, or move the store aside"
                case .unrecordedSchema(nil)
                where !SegmentStore.holdsStoreFiles(directory: System.parentDirectory(of: path)):
                    return "nothing else in \(System.parentDirectory(of: path)) is a rewind store's (no segments/, no "
                        + "journals): it is another program's database, left as it was; give --store a directory of "
                        + "its own"
                case .migrationFailed(_, _, true), .unrecordedSchema, .damagedMigrationRecord:
                    return "\(repair), which moves the index aside and rebuilds it from the segment files"
                case .migrationFailed: return nil
                }
            case .io, .frame, .readOnly: return nil
            }
        case let error as StoreIndexError:
            switch error {
            case .streamDescriptionMismatch: return "record into a new store directory or a stream of another name"
            case .invalidStreamRow, .invalidSegmentRow, .unknownSegment:
                return "\(repair), which moves the index aside and rebuilds it from the segment files"
            case .contradictsItself:
                return "\(repair), which rebuilds the index (or the rows it lacks) from the segment files"
            default: return nil
            }
        case is FrameDecodeError:
            return repair
        default:
            return nil
        }
    }
}
