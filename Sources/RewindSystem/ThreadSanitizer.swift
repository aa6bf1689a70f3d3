import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Announces lock ordering to ThreadSanitizer when the process runs under it, and does nothing otherwise.
///
/// `Mutex` on Linux locks with atomics and futexes inside the (uninstrumented) Synchronization library, so a
/// sanitized build does not see that two critical sections are ordered and reports every access to the state as a
/// race. Calling ``acquire(_:)`` first thing inside a critical section and ``release(_:)`` last thing, with one
/// address per lock, tells it. The hooks are looked up once with `dlsym`; without the sanitizer they are absent
/// and each call is one load and one branch.
package enum ThreadSanitizer {
    private typealias Hook = @convention(c) (UnsafeRawPointer?) -> Void

    private struct Hooks: @unchecked Sendable {
        let acquire: Hook
        let release: Hook
    }

    private static let hooks: Hooks? = {
        // RTLD_DEFAULT: search the executable and every loaded library.
        guard let acquire = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__tsan_acquire"),
            let release = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__tsan_release")
        else { return nil }
        return Hooks(acquire: unsafeBitCast(acquire, to: Hook.self), release: unsafeBitCast(release, to: Hook.self))
    }()

    /// Whether the process runs under ThreadSanitizer.
    package static var isActive: Bool { hooks != nil }

    /// Call right after taking the lock identified by `address`.
    @inline(__always)
    package static func acquire(_ address: UnsafeRawPointer) {
        if let hooks { hooks.acquire(address) }
    }

    /// Call right before giving up the lock identified by `address`.
    @inline(__always)
    package static func release(_ address: UnsafeRawPointer) {
        if let hooks { hooks.release(address) }
    }
}

extension Mutex where Value: ~Copyable {
    /// `withLock`, announced to ``ThreadSanitizer`` with the mutex's address: a sanitized build then sees the
    /// critical sections of one mutex ordered, as it sees a pthread mutex's. Every `Mutex` here is locked this way.
    @inline(__always)
    package borrowing func withAnnotatedLock<Result: ~Copyable, Failure: Error>(
        _ body: (inout sending Value) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result {
        let token = sanitizerToken
        return try withLock { (value: inout sending Value) throws(Failure) -> sending Result in
            ThreadSanitizer.acquire(token)
            defer { ThreadSanitizer.release(token) }
            return try body(&value)
        }
    }

    /// The mutex's address, as the name of its lock to ThreadSanitizer (never read through). A `Mutex` stays where
    /// it is stored, a class's `let` or a global, since its lock word must.
    @inline(__always)
    fileprivate var sanitizerToken: UnsafeRawPointer {
        withUnsafePointer(to: self) { UnsafeRawPointer($0) }
    }
}

extension Mutex where Value == Void {
    /// `withLock` of a mutex that only orders, announced as ``withAnnotatedLock(_:)`` is. Its value takes no bytes,
    /// so it lies at the address of whatever is stored after the mutex: handed to `body` as it is, ThreadSanitizer
    /// would count that as a write there, racing with every read of the next field. `body` gets a value of its own.
    @inline(__always)
    package borrowing func withAnnotatedLock<Result: ~Copyable, Failure: Error>(
        _ body: (inout sending Void) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result {
        let token = sanitizerToken
        return try withLock { (_: inout sending Void) throws(Failure) -> sending Result in
            ThreadSanitizer.acquire(token)
            defer { ThreadSanitizer.release(token) }
            var none: Void = ()
            return try body(&none)
        }
    }

    /// `withLockIfAvailable` of a mutex that only orders, announced as ``withAnnotatedLock(_:)`` is.
    @inline(__always)
    package borrowing func withAnnotatedLockIfAvailable<Result: ~Copyable, Failure: Error>(
        _ body: (inout sending Void) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result? {
        let token = sanitizerToken
        return try withLockIfAvailable { (_: inout sending Void) throws(Failure) -> sending Result in
            ThreadSanitizer.acquire(token)
            defer { ThreadSanitizer.release(token) }
            var none: Void = ()
            return try body(&none)
        }
    }
}
