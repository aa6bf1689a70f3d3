import Dispatch
import Foundation
import RewindCapture
import RewindCore
import RewindMedia
import RewindSystem
import SegmentStore
import Synchronization

/// Why a clip could not be made.
public enum ClipError: Error, Sendable, CustomStringConvertible {
    /// The range holds no frame; the message says what the store does hold.
    case empty(String)
    /// The range is backwards or empty.
    case badRange(String)

    public var description: String {
        switch self {
        case .empty(let message), .badRange(let message): message
        }
    }
}
