import Foundation
import RewindSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// One kind of bytes that come from outside (a file on disk, a pipe, a request), the code that reads them, and what
/// must hold whatever the bytes are.
///
/// Every target holds its reader to: no crash, no trap, no read or write out of bounds (under AddressSanitizer), a
/// bounded run, and the target's own invariants (a frame encoded and decoded comes back bit-exact, a journal record
/// decoded and encoded decodes to the same record); a broken invariant throws ``FuzzFailure``. `rewind-fuzz` hands
/// them to libFuzzer; the tests replay the seeds and every reproducer kept in the tests' corpus.
public struct FuzzTarget: Sendable {
    /// What `rewind-fuzz` calls it.
    public let name: String
    /// What it reads, in one line.
    public let summary: String
    /// Valid examples that reach deep: where the fuzzer starts.
    public let seeds: @Sendable () throws -> [[UInt8]]
    let body: @Sendable (inout FuzzInput, FuzzScratch) throws(FuzzFailure) -> Void

    init(
        name: String, summary: String, seeds: @escaping @Sendable () throws -> [[UInt8]],
        body: @escaping @Sendable (inout FuzzInput, FuzzScratch) throws(FuzzFailure) -> Void
    ) {
        self.name = name
        self.summary = summary
        self.seeds = seeds
        self.body = body
    }

    /// Reads `bytes` as this target's input.
    ///
    /// - Throws: ``FuzzFailure`` when an invariant does not hold.
    public func run(_ bytes: UnsafeRawBufferPointer) throws(FuzzFailure) {
        var input = FuzzInput(bytes)
        try body(&input, FuzzScratch.shared)
    }

    /// Reads `bytes` as this target's input.
    public func run(_ bytes: [UInt8]) throws(FuzzFailure) {
        try bytes.withUnsafeBytes { raw in Result { () throws(FuzzFailure) in try run(raw) } }.get()
    }

    /// Every target, in the order `rewind-fuzz --list` shows them.
    public static let all: [FuzzTarget] = [segment, payload, codec, journal, y4m, values, request, api, query]

    /// The target called `name`, or nil.
    public static func named(_ name: String) -> FuzzTarget? { all.first { $0.name == name } }

    /// The largest frame the file targets decode: a header may declare up to 32768 × 32768 pixels, and a frame that
    /// size is a gigabyte of memory per input rather than a finding.
    static let largestFrame = 4 << 20
}

/// An invariant a target's reader broke, and the input's detail.
public struct FuzzFailure: Error, Sendable, CustomStringConvertible {
    public let description: String

    init(_ description: String) { self.description = description }
}

/// The fuzzer's bytes, consumed from the front: the first few choose a target's settings, the rest is its data.
struct FuzzInput {
    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// The next byte, or 0 once they are used up.
    mutating func byte() -> UInt8 {
        guard offset < bytes.count else { return 0 }
        defer { offset += 1 }
        return bytes[offset]
    }

    /// A number in `range`, from the next byte.
    mutating func number(in range: ClosedRange<Int>) -> Int {
        range.lowerBound + Int(byte()) % (range.count)
    }

    /// One of `choices`, from the next byte.
    mutating func choice<T>(_ choices: [T]) -> T { choices[Int(byte()) % choices.count] }

    /// Every byte not consumed yet (and none are left after).
    /// Whether every byte was used.
    var isEmpty: Bool { offset >= bytes.count }

    mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return offset < bytes.count ? Array(bytes[offset...]) : []
    }
}

/// A directory for the targets that read files (in `/dev/shm` when there is one: no disk I/O per input), removed
/// when the process exits.
final class FuzzScratch: Sendable {
    static let shared = FuzzScratch()

    let directory: String

    private init() {
        let base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp")
        Self.removeAbandoned(in: base)
        var template = Array("\(base)/\(Self.prefix)\(getpid())-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "cannot create a scratch directory in \(base): \(Errno.current)")
        directory = String(cString: made!)
        atexit { FuzzScratch.shared.remove() }
    }

    /// Writes `bytes` to the file `name` in the calling thread's folder of the scratch directory (tests run targets
    /// on several threads at once), replacing it, and returns its path.
    ///
    /// - Throws: ``FuzzFailure`` when it cannot be written (not the reader's fault, but no input can be tried).
    func write(_ bytes: [UInt8], as name: String) throws(FuzzFailure) -> String {
        let folder = directory + "/thread-\(pthread_self())"
        let path = folder + "/" + name
        if mkdir(folder, 0o700) != 0 && errno != EEXIST {
            throw FuzzFailure("cannot create \(folder): \(Errno.current)")
        }
        do {
            let fileSystem = POSIXFileSystem()
            let fd = try fileSystem.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode: 0o600)
            defer { fileSystem.close(fd) }
            try fileSystem.writeAll(fd, bytes, offset: 0, path: path)
        } catch {
            throw FuzzFailure("cannot write the input to \(path): \(error)")
        }
        return path
    }

    /// A new, empty folder in the scratch directory, for one caller.
    func makeFolder() throws(FuzzFailure) -> String {
        var template = Array("\(directory)/folder-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw FuzzFailure("cannot create a folder in \(directory): \(Errno.current)")
        }
        return String(cString: made)
    }

    private func remove() { try? FileManager.default.removeItem(atPath: directory) }

    /// The start of a scratch directory's name, before its process's id.
    static let prefix = "rewind-fuzz-"

    /// Removes the scratch directories in `base` of processes that ended without removing theirs: a fuzzing run
    /// ends at its first finding by a crash, which skips `atexit`.
    static func removeAbandoned(in base: String) {
        for name in (try? POSIXFileSystem().contentsOfDirectory(base)) ?? [] where name.hasPrefix(prefix) {
            let fields = name.dropFirst(prefix.count).split(separator: "-")
            guard fields.count == 2, let pid = pid_t(fields[0]), pid > 0, kill(pid, 0) != 0, errno == ESRCH else {
                continue
            }
            try? FileManager.default.removeItem(atPath: base + "/" + name)
        }
    }
}
