/// A read-only view of one frame: its layout, its timing and colour, and its packed plane bytes.
///
/// The bytes are borrowed: a view is valid only inside the closure that hands it out and must not escape it.
public struct FrameView {
    /// The frame's format, size and plane layout within ``bytes``.
    public let layout: FrameLayout
    /// The frame's pts, wall-clock capture time and colour.
    public let info: FrameInfo
    /// All planes, packed as `layout` describes (`layout.byteCount` bytes).
    public let bytes: UnsafeRawBufferPointer

    /// Makes a view of borrowed frame bytes.
    ///
    /// - Parameters:
    ///   - layout: the frame's geometry; `bytes` must hold exactly `layout.byteCount` bytes (checked).
    ///   - info: the frame's timing and colour.
    ///   - bytes: the packed planes; they must stay valid and unchanged for as long as the view is used.
    public init(layout: FrameLayout, info: FrameInfo, bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count == layout.byteCount, "frame bytes \(bytes.count) != layout \(layout.byteCount)")
        self.layout = layout
        self.info = info
        self.bytes = bytes
    }

    /// The bytes of plane `index` (`layout.plane(index).byteCount` bytes, rows packed without padding).
    ///
    /// - Parameter index: the plane, below `layout.planeCount`.
    public func plane(_ index: Int) -> UnsafeRawBufferPointer {
        let plane = layout.plane(index)
        return UnsafeRawBufferPointer(rebasing: bytes[plane.offset..<plane.offset + plane.byteCount])
    }
}

/// A producer of frames that writes each one straight into a caller's buffer (a pooled slab): the zero-copy path.
public protocol FrameSource {
    /// The stream every frame of this source belongs to.
    var stream: StreamDescription { get }

    /// Fills `buffer` (exactly `stream.layout.byteCount` bytes) with the next frame.
    ///
    /// - Returns: the frame's timing and colour, or nil at the end of the input.
    /// - Throws: when the input is malformed or unreadable; frames returned before stay valid.
    mutating func readFrame(into buffer: UnsafeMutableRawBufferPointer) throws -> FrameInfo?

    /// Waits until the next frame begins to arrive: false at the end of the input, where ``readFrame(into:)`` would
    /// return nil. A recorder asks before it takes room for a frame, so that the end of the input costs no frame
    /// dropped for want of room. A source that cannot tell ahead says true.
    mutating func nextFrameComes() throws -> Bool

    /// The pts the next frame will have, when the source knows it before reading the frame; nil otherwise.
    var nextPTS: Int64? { get }
}

extension FrameSource {
    /// True: the source cannot tell ahead (``readFrame(into:)`` says nil at the end).
    public mutating func nextFrameComes() throws -> Bool { true }

    /// Nil: the source knows a frame's pts once it has read it.
    public var nextPTS: Int64? { nil }
}

/// A consumer of frames in pts order: an exporter, a verifier, a counter.
public protocol FrameSink {
    /// Takes one frame; its bytes are only valid during the call.
    mutating func write(_ frame: FrameView) throws
}
