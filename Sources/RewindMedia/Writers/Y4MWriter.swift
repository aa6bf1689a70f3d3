import Dispatch
import Foundation
import RewindCore
import RewindSystem

/// Writes frames as a YUV4MPEG2 (`.y4m`) stream at the stream's constant frame rate.
///
///     YUV4MPEG2 W1920 H1080 F60:1 Ip A1:1 C420jpeg XYSCSS=420JPEG XCOLORRANGE=LIMITED\n
///     FRAME\n <Y> <Cb> <Cr>        (each plane packed, rows without padding)
///
/// Pixel formats:
/// - `i420` is written as is; `nv12` as the same I420 (chroma de-interleaved into a reused buffer);
/// - `gray8` as `Cmono`;
/// - `p010` as `C420p10`: 16-bit little-endian samples holding the 10-bit value in their low bits, chroma
///   de-interleaved;
/// - `bgra` is refused: YUV4MPEG2 has no RGB format (export `.mkv` or `.mp4` instead).
///
/// The header says the stream's chroma siting (4:2:0 at 8 bits: `C420mpeg2` left, `C420paldv` top-left, `C420jpeg`
/// centred or not known, as ffmpeg writes it; `C420p10` and `Cmono` have no siting to say) and its pixel aspect
/// (`A0:0` when not known), so ffmpeg reads the export as it read the input.
///
/// Gaps: the file has one frame per frame duration, a grid of slots from the first frame. Each frame goes to the
/// slot of its pts, `round((pts − first pts) / duration)` (a tie to the earlier slot), so rounding never adds up
/// over many gaps; the slots a gap leaves empty repeat the previous frame, counted in
/// ``ExportSummary/filledFrames``. Frames are never reordered or dropped: one whose slot is already taken (frames
/// closer than a frame duration) goes to the next free slot, and the frames after it return to their own slots as
/// soon as those are free. On a file this writer created, the repeat is read back from the file at the first gap;
/// on a descriptor (a pipe) a copy of the latest payload is kept, one extra copy per frame.
public final class Y4MWriter: Exporter {
    /// The stream given at creation; every frame written must have its layout.
    public let stream: StreamDescription
    private let destination: ExportDestination
    private let output: OutputFile
    private var tally: ExportTally
    private var filledFrames = 0
    /// Frames in the file so far, the filled ones included: the next free slot of the grid.
    private var nextSlot: Int64 = 0
    /// The converted payload (nv12, p010) or the copy of the latest frame (pipes); empty when neither is needed.
    private let scratch: UnsafeMutableRawBufferPointer
    private let convertsPayload: Bool
    private let keepsCopy: Bool
    private var previousPayloadOffset: Int64 = -1
    /// The previous payload read back from a regular file to fill a gap; allocated at the first gap.
    private var readBack: UnsafeMutableRawBufferPointer?
    private static let frameLine = Array("FRAME\n".utf8)
    /// Where each placed frame's payload starts (see ``place(_:)``), and the gaps between them: the frame before
    /// each and the slots it fills.
    private var placedOffsets: [Int64] = []
    private var placedGaps: [(after: Int, slots: Range<Int64>)] = []
    /// De-interleaves NV12 chroma on a second thread while the luma is written (frames of 256 KiB of chroma or
    /// more, where a system call is long enough to hide the conversion).
    private let helper: ConversionThread?

    /// Opens the destination and writes the header.
    ///
    /// - Parameters:
    ///   - stream: the stream every frame will belong to.
    ///   - destination: a path, or a descriptor the caller keeps.
    ///   - fileSystem: where the file's system calls go (a fault-injecting one in tests).
    ///   - convertsOnHelper: de-interleave NV12 chroma on a helper thread while the luma is written (frames from
    ///     memory); false converts on the writing thread, for a caller whose frames come from a decoder that keeps
    ///     another core busy, where a third busy thread would only take the decoder's time.
    /// - Throws: ``ExportError`` for a `bgra` stream or when the destination cannot be opened or written.
    public init(
        stream: StreamDescription, destination: ExportDestination, fileSystem: any FileSystem = POSIXFileSystem(),
        convertsOnHelper: Bool = true
    ) throws(ExportError) {
        guard stream.layout.format != .bgra else {
            throw ExportError(
                destination: destination.description, reason: .unsupportedPixelFormat(.bgra, format: .y4m))
        }
        self.stream = stream
        self.destination = destination
        self.tally = ExportTally(stream: stream)
        self.output = try OutputFile(destination, fileSystem: fileSystem)
        convertsPayload = stream.layout.format == .nv12 || stream.layout.format == .p010
        keepsCopy = !output.isReadable
        let needsScratch = convertsPayload || keepsCopy
        scratch = .allocate(byteCount: needsScratch ? stream.layout.byteCount : 0, alignment: 16)
        if convertsOnHelper && stream.layout.format == .nv12 && stream.layout.plane(1).byteCount >= 256 << 10 {
            let chroma = UnsafeRawBufferPointer(rebasing: scratch[stream.layout.plane(0).byteCount...])
            helper = ConversionThread(name: "rewind-y4m-chroma") { Y4MWriter.deinterleave($0, into: chroma) }
        } else {
            helper = nil
        }
        try output.write(Array(Y4MWriter.header(stream).utf8))
    }

    deinit {
        scratch.deallocate()
        readBack?.deallocate()
    }

    /// The header line for `stream`, with its newline.
    static func header(_ stream: StreamDescription) -> String {
        let rate = reduced(Int64(stream.frameDuration.timescale), stream.frameDuration.value)
        let colorSpace: String
        switch stream.layout.format {
        case .gray8: colorSpace = "Cmono"
        case .p010: colorSpace = "C420p10 XYSCSS=420P10"
        case .nv12, .i420, .bgra:
            switch stream.chromaSiting {
            case .left: colorSpace = "C420mpeg2 XYSCSS=420MPEG2"
            case .topLeft: colorSpace = "C420paldv XYSCSS=420PALDV"
            case .center, .unspecified: colorSpace = "C420jpeg XYSCSS=420JPEG"
            }
        }
        let aspect = stream.pixelAspect
        let range = stream.color.range == .full ? "FULL" : "LIMITED"
        return "YUV4MPEG2 W\(stream.layout.width) H\(stream.layout.height) F\(rate.0):\(rate.1) Ip "
            + "A\(aspect.numerator):\(aspect.denominator) "
            + "\(colorSpace) XCOLORRANGE=\(range)\n"
    }

    /// Writes `frame`, after repeating the previous frame over any gap before it.
    ///
    /// - Throws: ``FrameError`` for a frame of another layout or out of pts order; ``ExportError`` when writing
    ///   fails.
    /// - Complexity: O(frame bytes × (1 + filled frames)).
    public func write(_ frame: FrameView) throws {
        try begin(frame)
        switch stream.layout.format {
        case .nv12:
            let chroma = UnsafeRawBufferPointer(rebasing: scratch[stream.layout.plane(0).byteCount...])
            if let helper {
                // The chroma is de-interleaved on the helper thread while this one writes the frame line and luma.
                helper.start(frame.plane(1).baseAddress!)
                defer { helper.wait() }
                try output.write(frame.plane(0))
                if keepsCopy {
                    scratch.baseAddress!.copyMemory(from: frame.bytes.baseAddress!, byteCount: frame.plane(0).count)
                }
                helper.wait()
                try output.write(chroma)
            } else {
                if keepsCopy {
                    scratch.baseAddress!.copyMemory(from: frame.bytes.baseAddress!, byteCount: frame.plane(0).count)
                }
                Y4MWriter.deinterleave(frame.plane(1).baseAddress!, into: chroma)
                // The frame line, the luma and the converted chroma go out in one system call.
                try output.write(frame.plane(0), chroma)
            }
        case .p010:
            PlanarTenBit.convert(frame, into: scratch.baseAddress!)
            try output.write(UnsafeRawBufferPointer(scratch))
        case .i420, .gray8, .bgra:
            try output.write(frame.bytes)
            if keepsCopy {
                scratch.baseAddress!.copyMemory(from: frame.bytes.baseAddress!, byteCount: frame.bytes.count)
            }
        }
    }

    /// Places `frames` (in pts order, none written before) on the file's grid, so that their bytes can then be
    /// written in pieces, in any order and from several threads at once (``write(frame:offset:_:)``): the file
    /// is made as long as it will be, each frame line written; the slots of gaps are filled by ``finish()``.
    ///
    /// - Precondition: a file this writer created, of a pixel format written as it is (`i420`, `gray8`).
    /// - Throws: ``FrameError`` for frames out of pts order; ``ExportError`` when the file cannot be made that
    ///   long (``ExportError/Reason/gapTooLarge(frames:bytes:available:)`` when gaps' repeats would not fit).
    public func place(_ frames: [FrameInfo]) throws {
        precondition(output.isReadable && !convertsPayload && nextSlot == 0, "frames cannot be placed here")
        try output.flush()
        let start = output.bytesWritten
        let slotBytes = Int64(Y4MWriter.frameLine.count + stream.layout.byteCount)
        var repeats = 0
        placedOffsets.reserveCapacity(frames.count)
        for info in frames {
            let previous = try tally.accept(ptsNanoseconds: info.ptsNanoseconds)
            if previous != nil, let first = tally.firstPTSNanoseconds {
                let slot = Y4MWriter.slot(of: info.ptsNanoseconds, from: first, stream.frameDuration)
                if slot > nextSlot {
                    placedGaps.append((after: placedOffsets.count - 1, slots: nextSlot..<slot))
                    repeats += Int(clamping: slot - nextSlot)
                    nextSlot = slot
                }
            }
            let place = nextSlot.multipliedReportingOverflow(by: slotBytes)
            guard !place.overflow, place.partialValue <= Int64.max / 2 else {
                throw gapTooLarge(repeats, bytes: .max)
            }
            placedOffsets.append(start + place.partialValue + Int64(Y4MWriter.frameLine.count))
            nextSlot += 1
        }
        let length = nextSlot * slotBytes
        if repeats > 0, let room = output.roomLeft(), length > room {
            throw gapTooLarge(repeats, bytes: Int64(repeats) * slotBytes)
        }
        try output.extend(to: start + length)
        for offset in placedOffsets {
            try output.patch(at: offset - Int64(Y4MWriter.frameLine.count), Y4MWriter.frameLine)
        }
    }

    private func gapTooLarge(_ frames: Int, bytes: Int64) -> ExportError {
        ExportError(
            destination: destination.description,
            reason: .gapTooLarge(
                frames: frames, bytes: bytes, available: (output.roomLeft() ?? 0) + OutputFile.keptFree))
    }

    /// Writes bytes `offset..<offset + bytes.count` of placed frame `frame` (see ``place(_:)``). Safe to call from
    /// several threads at once.
    ///
    /// - Throws: ``ExportError`` when the system write fails.
    public func write(frame: Int, offset: Int, _ bytes: UnsafeRawBufferPointer) throws {
        try output.write(bytes, at: placedOffsets[frame] + Int64(offset))
    }

    /// Fills the slots of the gaps between placed frames with the frame before each gap, read back from the file.
    private func fillPlacedGaps() throws(ExportError) {
        guard !placedGaps.isEmpty else { return }
        let payload = readBack ?? .allocate(byteCount: stream.layout.byteCount, alignment: 16)
        readBack = payload
        let slotBytes = Int64(Y4MWriter.frameLine.count + stream.layout.byteCount)
        let start = placedOffsets[0] - Int64(Y4MWriter.frameLine.count)
        for gap in placedGaps {
            try output.read(at: placedOffsets[gap.after], into: payload)
            for slot in gap.slots {
                let line = start + slot * slotBytes
                try output.patch(at: line, Y4MWriter.frameLine)
                try output.write(UnsafeRawBufferPointer(payload), at: line + Int64(Y4MWriter.frameLine.count))
                filledFrames += 1
            }
        }
    }

    /// Counts and checks `frame`, repeats the previous frame over any gap before it, and writes the frame line.
    private func begin(_ frame: FrameView) throws {
        let previous = try tally.accept(frame)
        if previous != nil, let first = tally.firstPTSNanoseconds {
            let slot = Y4MWriter.slot(of: frame.info.ptsNanoseconds, from: first, stream.frameDuration)
            if slot > nextSlot { try repeatPrevious(Int(clamping: slot - nextSlot)) }
        }
        nextSlot += 1
        try output.write(Y4MWriter.frameLine)
        previousPayloadOffset = output.bytesWritten
    }

    /// Flushes and closes the output; a descriptor the caller gave stays open.
    ///
    /// - Returns: what was written, with the frames repeated to fill gaps in ``ExportSummary/filledFrames``.
    /// - Throws: ``ExportError`` when writing or closing fails.
    public func finish() throws -> ExportSummary {
        try fillPlacedGaps()
        try output.close()
        return tally.summary(
            format: .y4m, destination: destination, filledFrames: filledFrames, bytes: output.bytesWritten)
    }

    /// The slot of the constant-rate grid that a frame at `pts` belongs to: its time since the first frame in frame
    /// durations, rounded to the nearest (a tie to the earlier slot, so a frame exactly 1.5 durations after the
    /// first is not a gap).
    ///
    /// - Parameters:
    ///   - pts: the frame's pts, nanoseconds.
    ///   - first: the first frame's pts, nanoseconds; at most `pts`.
    ///   - duration: the stream's frame duration.
    static func slot(of pts: Int64, from first: Int64, _ duration: FrameTime) -> Int64 {
        let unit = Int128(duration.value) * Int128(FrameTime.nanosecondsPerSecond)  // one duration, × timescale
        let scaled = (Int128(pts) - Int128(first)) * Int128(duration.timescale)
        return Int64(clamping: (scaled * 2 + unit - 1) / (unit * 2))
    }

    private func repeatPrevious(_ count: Int) throws(ExportError) {
        // A long gap (hours between two recordings) would fill the disk with copies, and take the room a recording
        // on it needs: refused up front when it does not fit.
        let bytes = Int64(count).multipliedReportingOverflow(
            by: Int64(Y4MWriter.frameLine.count + stream.layout.byteCount))
        if let room = output.roomLeft(), bytes.overflow || bytes.partialValue > room {
            throw gapTooLarge(count, bytes: bytes.overflow ? .max : bytes.partialValue)
        }
        let payload: UnsafeMutableRawBufferPointer
        if keepsCopy {
            payload = scratch
        } else {
            payload = readBack ?? .allocate(byteCount: stream.layout.byteCount, alignment: 16)
            readBack = payload
            try output.read(at: previousPayloadOffset, into: payload)
        }
        for _ in 0..<count {
            try output.write(Y4MWriter.frameLine)
            try output.write(UnsafeRawBufferPointer(payload))
            filledFrames += 1
            nextSlot += 1
        }
    }

    /// De-interleaves NV12's CbCr pairs into the Cb and Cr planes that fill `planes` (Cb first, each half of it),
    /// 32 bytes at a time.
    static func deinterleave(_ source: UnsafeRawPointer, into planes: UnsafeRawBufferPointer) {
        let chroma = planes.count / 2
        let u = UnsafeMutableRawPointer(mutating: planes.baseAddress!)
        let v = u + chroma
        var i = 0
        while i + 16 <= chroma {
            // Little-endian pairs: U is each 16-bit word's low byte, V its high byte (a mask and a shift, then a
            // pack: about a tenth of the instructions `evenHalf` and `oddHalf` of bytes compile to).
            let pairs = source.loadUnaligned(fromByteOffset: 2 * i, as: SIMD16<UInt16>.self)
            u.storeBytes(of: SIMD16<UInt8>(truncatingIfNeeded: pairs), toByteOffset: i, as: SIMD16<UInt8>.self)
            v.storeBytes(of: SIMD16<UInt8>(truncatingIfNeeded: pairs &>> 8), toByteOffset: i, as: SIMD16<UInt8>.self)
            i += 16
        }
        while i < chroma {
            u.storeBytes(of: source.load(fromByteOffset: 2 * i, as: UInt8.self), toByteOffset: i, as: UInt8.self)
            v.storeBytes(of: source.load(fromByteOffset: 2 * i + 1, as: UInt8.self), toByteOffset: i, as: UInt8.self)
            i += 1
        }
    }

    private static func reduced(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        let divisor = greatestCommonDivisor(a, b)
        return (a / divisor, b / divisor)
    }
}

/// A thread that runs one fixed conversion at a time, so the caller can overlap it with a system call.
///
///     caller: start(source) ─▶ helper: convert(source) ─▶ caller: wait()
///
/// `start` and `wait` alternate, from one caller thread; the thread ends when the object is released.
final class ConversionThread: @unchecked Sendable {
    private let convert: (UnsafeRawPointer) -> Void
    private let go = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)
    // Written by the caller before `go` is signalled; read by the helper after waiting for it.
    private var source: UnsafeRawPointer?
    private var isRunning = false
    private var hasThread = false

    /// Starts the thread; nil when the system refuses it (the caller converts on its own thread then).
    init?(name: String, _ convert: @escaping (UnsafeRawPointer) -> Void) {
        self.convert = convert
        do {
            try Threads.start(named: name) { [go, done, exited, unowned(unsafe) self] in
                while true {
                    go.wait()
                    guard let source = self.source else { break }
                    self.convert(source)
                    done.signal()
                }
                exited.signal()
            }
        } catch {
            return nil
        }
        hasThread = true
    }

    deinit {
        guard hasThread else { return }
        source = nil
        go.signal()
        exited.wait()
    }

    /// Starts converting from `source`; the memory must stay valid until ``wait()`` returns.
    func start(_ source: UnsafeRawPointer) {
        precondition(!isRunning, "a conversion is already running")
        self.source = source
        isRunning = true
        go.signal()
    }

    /// Waits for the conversion started last, if it is still running.
    func wait() {
        guard isRunning else { return }
        done.wait()
        isRunning = false
    }
}
