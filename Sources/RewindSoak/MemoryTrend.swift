import RewindCapture
import RewindCore
import RewindMedia
import RewindQuery
import RewindTesting
import SegmentStore

/// Whether memory grows over time, told apart from the steps that pressure events legitimately cause.
///
/// A recorder's memory changes in steps when the operating system changes the memory pressure (the ring sheds at
/// once, and refills once the pressure eases), and stays level between them. Memory that grows in proportion to
/// time means buffers are being retained. The slope is therefore fitted with one intercept per stretch between
/// events (the "within" least-squares estimator): a step between stretches moves only an intercept, while a leak
/// tilts every stretch and shows in the common slope.
public enum MemoryTrend {
    /// The least-squares slope of `y` over `x` shared by all stretches, each with its own intercept:
    /// `Σₛ Σᵢ (xᵢ − x̄ₛ)(yᵢ − ȳₛ) / Σₛ Σᵢ (xᵢ − x̄ₛ)²`. With one stretch, the ordinary least-squares slope.
    ///
    /// - Parameter stretches: points of each stretch; stretches with fewer than two points carry no slope.
    /// - Returns: the slope, or nil when no stretch spans any `x` (too few points).
    /// - Complexity: O(points).
    public static func slope(_ stretches: [[(x: Double, y: Double)]]) -> Double? {
        var covariance = 0.0
        var variance = 0.0
        for points in stretches where points.count >= 2 {
            let count = Double(points.count)
            let meanX = points.reduce(0) { $0 + $1.x } / count
            let meanY = points.reduce(0) { $0 + $1.y } / count
            for point in points {
                covariance += (point.x - meanX) * (point.y - meanY)
                variance += (point.x - meanX) * (point.x - meanX)
            }
        }
        return variance > 0 ? covariance / variance : nil
    }
}
