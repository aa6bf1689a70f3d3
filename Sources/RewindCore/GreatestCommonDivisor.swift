/// The greatest common divisor of `a` and `b` (Euclid), by which a ratio of them is reduced: a frame rate, a pixel
/// or display aspect, a unit over a decimal scale. 0 only when both are 0.
///
/// - Complexity: O(log(min(|a|, |b|))).
package func greatestCommonDivisor<T: BinaryInteger>(_ a: T, _ b: T) -> T {
    var (a, b) = (a.magnitude, b.magnitude)
    while b != 0 { (a, b) = (b, a % b) }
    return T(a)
}
