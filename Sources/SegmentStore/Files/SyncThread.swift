import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A thread that runs one job at a time for a stream writer: the `fdatasync` of its open segment, while the writer
/// goes on compressing and writing the next frames instead of waiting for the disk.
///
/// The thread starts with the first job and sleeps between jobs; ``stop()`` (or `deinit`) ends it. One owner starts
/// jobs and collects their results, from one thread at a time.
package final class SyncThread: @unchecked Sendable {
    /// What the owner and the thread share; the thread holds it too, so it outlives the owner's last reference.
    private final class Shared: @unchecked Sendable {
        let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        let changed = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
        // Guarded by `lock`.
        var job: (@Sendable () -> FileSystemError?)?
        var result: FileSystemError??
        var stopping = false
        /// Whether a started job has not finished yet; read without the lock.
        let running = Atomic<Bool>(false)

        init() {
            pthread_mutex_init(lock, nil)
            pthread_cond_init(changed, nil)
        }

        deinit {
            pthread_mutex_destroy(lock)
            pthread_cond_destroy(changed)
            lock.deallocate()
            changed.deallocate()
        }

        func loop() {
            pthread_mutex_lock(lock)
            while true {
                while !stopping && (job == nil || result != nil) { pthread_cond_wait(changed, lock) }
                // A job started before the stop still runs: its owner may be waiting for it.
                guard let body = job, result == nil else { break }
                pthread_mutex_unlock(lock)
                let outcome = body()
                pthread_mutex_lock(lock)
                result = .some(outcome)
                running.store(false, ordering: .releasing)
                pthread_cond_broadcast(changed)
            }
            pthread_mutex_unlock(lock)
        }
    }

    private let shared = Shared()
    private var thread: pthread_t?

    package init() {}

    deinit { stop() }

    /// Whether the last job started has not finished.
    package var isRunning: Bool { shared.running.load(ordering: .acquiring) }

    /// Runs `body` on the thread; on the calling thread, before returning, when the system refuses a thread (the
    /// sync then costs the caller its time, nothing else). The previous job's result must have been collected
    /// (``wait()``).
    package func start(_ body: @escaping @Sendable () -> FileSystemError?) {
        let shared = self.shared
        let hasThread = thread != nil || launch()
        pthread_mutex_lock(shared.lock)
        precondition(shared.job == nil && shared.result == nil, "a sync job is still running or uncollected")
        shared.job = body
        if hasThread {
            shared.running.store(true, ordering: .releasing)
            pthread_cond_broadcast(shared.changed)
        } else {
            shared.result = .some(body())
        }
        pthread_mutex_unlock(shared.lock)
    }

    /// Waits for the job started last and returns its error (nil when it succeeded, or none was started).
    package func wait() -> FileSystemError? {
        let shared = self.shared
        pthread_mutex_lock(shared.lock)
        defer { pthread_mutex_unlock(shared.lock) }
        while shared.job != nil && shared.result == nil { pthread_cond_wait(shared.changed, shared.lock) }
        let outcome = shared.result ?? nil
        shared.result = nil
        shared.job = nil
        return outcome
    }

    /// Lets a running job finish and ends the thread (a later ``start(_:)`` starts a new one).
    package func stop() {
        guard let running = thread else { return }
        pthread_mutex_lock(shared.lock)
        shared.stopping = true
        pthread_cond_broadcast(shared.changed)
        pthread_mutex_unlock(shared.lock)
        pthread_join(running, nil)
        thread = nil
        pthread_mutex_lock(shared.lock)
        shared.stopping = false
        pthread_mutex_unlock(shared.lock)
    }

    /// Starts the thread; false when the system refuses it.
    private func launch() -> Bool {
        let start = Unmanaged.passRetained(shared)
        var created = pthread_t()
        let rc = pthread_create(
            &created, nil,
            { raw in
                Unmanaged<Shared>.fromOpaque(raw!).takeRetainedValue().loop()
                return nil
            }, start.toOpaque())
        guard rc == 0 else {
            start.release()
            return false
        }
        thread = created
        return true
    }
}
