import Glibc
import RewindCore
import RewindSystem

/// A buffered reader over a file descriptor that reads short lines through its buffer and large payloads straight
/// into the caller's memory.
///
///     buffer:  | consumed ... | readIndex ..... pending ..... writeIndex | free ... capacity |
///     offset:  byte offset in the input of the next byte a caller receives
///
/// Every read goes through a ``FileSystem``, so faults injected there reach inputs. Owns its buffer and, when
/// `ownsDescriptor`, the descriptor: both are released in `deinit`. One reader at a time.
final class BufferedFileReader {
    let name: String
    private let descriptor: Int32
    private let fileSystem: any FileSystem
    private let ownsDescriptor: Bool
    private let buffer: UnsafeMutableRawBufferPointer
    private var readIndex = 0
    private var writeIndex = 0
    private var isAtEndOfInput = false
    /// Bytes handed out (or skipped) so far: the offset of the next byte.
    private(set) var offset: Int64 = 0

    init(
        descriptor: Int32, name: String, ownsDescriptor: Bool, fileSystem: any FileSystem,
        capacity: Int = 64 * 1024
    ) {
        precondition(capacity > 0, "reader capacity must be positive")
        self.descriptor = descriptor
        self.fileSystem = fileSystem
        self.name = name
        self.ownsDescriptor = ownsDescriptor
        self.buffer = .allocate(byteCount: capacity, alignment: 16)
    }

    /// Opens `path` for reading through `fileSystem`.
    ///
    /// - Throws: ``InputError`` naming the path and the system's reason.
    convenience init(path: String, fileSystem: any FileSystem) throws(InputError) {
        // open(2) accepts a directory for reading; refuse it here rather than at the first read.
        var info = stat()
        if stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR {
            throw InputError(input: path, byteOffset: nil, problem: .cannotOpen(Errno(rawValue: EISDIR)))
        }
        let fd: Int32
        do {
            fd = try fileSystem.open(path, flags: O_RDONLY, mode: 0)
        } catch {
            throw InputError(input: path, byteOffset: nil, problem: .cannotOpen(Errno(rawValue: error.code)))
        }
        self.init(descriptor: fd, name: path, ownsDescriptor: true, fileSystem: fileSystem)
    }

    deinit {
        buffer.deallocate()
        if ownsDescriptor { fileSystem.close(descriptor) }
    }

    /// Reads one line ending in `\n` (the `\n` is consumed, not returned).
    ///
    /// - Parameter maximumLength: the longest line accepted, without its `\n`.
    /// - Returns: the line's bytes, or nil at the end of input before any byte.
    /// - Throws: ``InputError`` when the input ends inside the line, the line is too long, or reading fails.
    func readLine(maximumLength: Int) throws(InputError) -> [UInt8]? {
        var line: [UInt8] = []
        let start = offset
        while true {
            if readIndex == writeIndex {
                try refill()
                if readIndex == writeIndex {
                    if line.isEmpty { return nil }
                    throw InputError(input: name, byteOffset: offset, problem: .unterminatedLine(lineStart: start))
                }
            }
            let pending = UnsafeRawBufferPointer(rebasing: buffer[readIndex..<writeIndex])
            if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                line.append(contentsOf: pending[pending.startIndex..<newline])
                let consumed = newline - pending.startIndex + 1
                readIndex += consumed
                offset += Int64(consumed)
                guard line.count <= maximumLength else { throw lineTooLong(start: start, maximumLength) }
                return line
            }
            line.append(contentsOf: pending)
            offset += Int64(pending.count)
            readIndex = writeIndex
            guard line.count <= maximumLength else { throw lineTooLong(start: start, maximumLength) }
        }
    }

    /// Consumes `expected` when the input continues with exactly those bytes (the common `FRAME\n`), without
    /// allocating.
    ///
    /// - Returns: whether the bytes were there and consumed; when false, nothing was consumed.
    /// - Throws: ``InputError`` when reading fails.
    func consume(ifNextBytesAre expected: [UInt8]) throws(InputError) -> Bool {
        precondition(expected.count <= buffer.count, "expected bytes longer than the buffer")
        if writeIndex - readIndex < expected.count { try refill() }
        guard writeIndex - readIndex >= expected.count else { return false }
        for k in 0..<expected.count where buffer[readIndex + k] != expected[k] { return false }
        readIndex += expected.count
        offset += Int64(expected.count)
        return true
    }

    /// Fills `destination` completely, or as far as the input goes.
    ///
    /// Buffered bytes are copied first; the rest is read straight into `destination`, with no intermediate copy.
    /// - Returns: the number of bytes stored; less than `destination.count` only at the end of input.
    /// - Throws: ``InputError`` when reading fails.
    func read(into destination: UnsafeMutableRawBufferPointer) throws(InputError) -> Int {
        var filled = min(writeIndex - readIndex, destination.count)
        if filled > 0 {
            destination.baseAddress!.copyMemory(from: buffer.baseAddress! + readIndex, byteCount: filled)
            readIndex += filled
        }
        while filled < destination.count && !isAtEndOfInput {
            let remaining = destination.count - filled
            if remaining < buffer.count / 2 {
                // A short tail: one buffered read is cheaper than a small direct one.
                try refill()
                let take = min(writeIndex - readIndex, remaining)
                (destination.baseAddress! + filled).copyMemory(from: buffer.baseAddress! + readIndex, byteCount: take)
                readIndex += take
                filled += take
            } else {
                let count = try systemRead(UnsafeMutableRawBufferPointer(rebasing: destination[filled...]))
                if count == 0 { isAtEndOfInput = true }
                filled += count
            }
        }
        offset += Int64(filled)
        return filled
    }

    /// Moves pending bytes to the front and reads more after them, unless the input has ended.
    private func refill() throws(InputError) {
        guard !isAtEndOfInput else { return }
        if readIndex == writeIndex {
            readIndex = 0
            writeIndex = 0
        } else if readIndex > 0 {
            let pending = writeIndex - readIndex
            buffer.baseAddress!.copyMemory(from: buffer.baseAddress! + readIndex, byteCount: pending)
            readIndex = 0
            writeIndex = pending
        }
        guard writeIndex < buffer.count else { return }
        let count = try systemRead(UnsafeMutableRawBufferPointer(rebasing: buffer[writeIndex...]))
        if count == 0 { isAtEndOfInput = true }
        writeIndex += count
    }

    /// One read at the descriptor's position into `destination`; 0 at the end of input.
    private func systemRead(_ destination: UnsafeMutableRawBufferPointer) throws(InputError) -> Int {
        do {
            return try fileSystem.read(descriptor, into: destination, path: name)
        } catch {
            throw InputError(input: name, byteOffset: offset, problem: .readFailed(Errno(rawValue: error.code)))
        }
    }

    private func lineTooLong(start: Int64, _ maximumLength: Int) -> InputError {
        InputError(input: name, byteOffset: start, problem: .lineTooLong(maximumLength: maximumLength))
    }
}
