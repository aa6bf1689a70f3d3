import Glibc

/// A buffered writer over a file descriptor: small writes gather in a buffer, large ones go straight to the file.
///
///     buffer: | pending (count bytes) | free ... capacity |
///     bytesWritten counts every byte accepted, pending or not.
///
/// Owns the buffer, and the descriptor when it opened it (from a path): ``close()`` flushes and closes; `deinit`
/// closes without flushing.
final class OutputFile {
    let name: String
    let descriptor: Int32
    private let ownsDescriptor: Bool
    /// Whether earlier bytes can be read back with ``read(at:into:)`` (a regular file opened read-write).
    let isReadable: Bool
    /// Whether the output is a regular file (so it can be patched with ``patch(at:_:)``).
    let isRegularFile: Bool
    private let buffer: UnsafeMutableRawBufferPointer
    private var count = 0
    private var isClosed = false
    private(set) var bytesWritten: Int64 = 0

    /// Opens `destination`: creates or truncates a path (mode 0644), or adopts a descriptor the caller keeps.
    ///
    /// - Throws: ``ExportError`` with the system's reason when the path cannot be opened.
    init(_ destination: ExportDestination, capacity: Int = 1 << 20) throws(ExportError) {
        switch destination {
        case .path(let path):
            let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                throw ExportError(
                    destination: path, message: "cannot create the file: \(String(cString: strerror(errno)))")
            }
            descriptor = fd
            name = path
            ownsDescriptor = true
            isReadable = true
        case .fileDescriptor(let fd, let label):
            descriptor = fd
            name = label
            ownsDescriptor = false
            isReadable = false
        }
        var status = stat()
        isRegularFile = fstat(descriptor, &status) == 0 && (status.st_mode & S_IFMT) == S_IFREG
        buffer = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit {
        buffer.deallocate()
        if ownsDescriptor && !isClosed { Glibc.close(descriptor) }
    }

    /// Appends `bytes`.
    ///
    /// - Throws: ``ExportError`` when the system write fails.
    func write(_ bytes: UnsafeRawBufferPointer) throws(ExportError) {
        guard bytes.count > 0 else { return }
        if bytes.count >= buffer.count / 2 {
            try flush()
            try writeFully(bytes)
        } else {
            if count + bytes.count > buffer.count { try flush() }
            (buffer.baseAddress! + count).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            count += bytes.count
        }
        bytesWritten += Int64(bytes.count)
    }

    func write(_ bytes: [UInt8]) throws(ExportError) {
        let result = bytes.withUnsafeBytes { raw in Result { () throws(ExportError) in try write(raw) } }
        try result.get()
    }

    /// Writes out the pending bytes.
    func flush() throws(ExportError) {
        guard count > 0 else { return }
        let pending = count
        count = 0
        try writeFully(UnsafeRawBufferPointer(rebasing: buffer[0..<pending]))
    }

    /// Reads back bytes already written (the pending ones are flushed first).
    ///
    /// - Throws: ``ExportError`` when reading fails or comes up short.
    func read(at offset: Int64, into destination: UnsafeMutableRawBufferPointer) throws(ExportError) {
        precondition(isReadable, "output \(name) cannot be read back")
        try flush()
        var done = 0
        while done < destination.count {
            let result = pread(
                descriptor, destination.baseAddress! + done, destination.count - done, off_t(offset) + off_t(done))
            if result < 0 && errno == EINTR { continue }
            guard result > 0 else { throw failure("reading back", result < 0 ? errno : EIO) }
            done += result
        }
    }

    /// Overwrites bytes already written, without moving the write position (regular files only).
    func patch(at offset: Int64, _ bytes: [UInt8]) throws(ExportError) {
        precondition(isRegularFile, "output \(name) cannot be patched")
        try flush()
        let result = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress!, $0.count, off_t(offset)) }
        guard result == bytes.count else { throw failure("patching", result < 0 ? errno : EIO) }
    }

    /// Flushes and, when the descriptor is owned, closes it.
    func close() throws(ExportError) {
        guard !isClosed else { return }
        try flush()
        isClosed = true
        if ownsDescriptor && Glibc.close(descriptor) != 0 { throw failure("closing", errno) }
    }

    private func writeFully(_ bytes: UnsafeRawBufferPointer) throws(ExportError) {
        var done = 0
        while done < bytes.count {
            let result = Glibc.write(descriptor, bytes.baseAddress! + done, bytes.count - done)
            if result < 0 && errno == EINTR { continue }
            guard result > 0 else { throw failure("writing", result < 0 ? errno : EIO) }
            done += result
        }
    }

    private func failure(_ action: String, _ code: Int32) -> ExportError {
        let hint = code == ENOSPC ? "; free some space or write elsewhere" : ""
        return ExportError(destination: name, message: "\(action) failed: \(String(cString: strerror(code)))\(hint)")
    }
}
