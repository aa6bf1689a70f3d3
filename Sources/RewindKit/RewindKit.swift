@_exported import RewindCore
@_exported import SegmentStore

/// The version printed by `rewind --version`.
public let rewindVersion = "0.1.0"
