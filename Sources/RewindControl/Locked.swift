import Foundation

/// A value behind a pthread mutex: the control's shared state.
///
/// `Mutex` (Synchronization) locks inside an uninstrumented library, so ThreadSanitizer cannot see its critical
/// sections ordered; a pthread mutex it intercepts, so the control's locking is checked by `make test-tsan` without
/// annotations. Nothing here is on the capture path. Decide under the lock, act outside it.
final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock.
    func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
