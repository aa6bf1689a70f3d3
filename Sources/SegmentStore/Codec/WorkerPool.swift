import RewindCore
import RewindSQLite
import RewindSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A fixed set of threads that run the items of one job at a time; the calling thread works too.
///
/// `run(items:_:)` hands out item numbers from an atomic counter, so items are load-balanced and the call returns
/// when all are done. No task or allocation per job: the threads, the lock and the conditions live as long as the
/// pool. One caller at a time (the spill thread that owns the encoder).
///
/// Frames come back to back while a writer catches up, and waking a sleeping thread costs tens of microseconds
/// (more on a virtual machine): so a pool made with a spin time has a helper that finishes a job, and a caller
/// waiting for the helpers, watch for the next step that long before they sleep. A pool whose threads share the
/// cores with other busy threads between jobs (an export's decoding, beside its writer) is better off without.
final class WorkerPool: @unchecked Sendable {
    /// Participants in a job, including the calling thread (worker 0).
    private(set) var workerCount = 1
    private var threads: [pthread_t] = []
    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let wake = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private let done = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    // Guarded by `lock`.
    private var generation = 0
    private var stopping = false
    private var busyHelpers = 0
    private var job: ((Int, Int) -> Void)?
    // Written under `lock` before `generation` changes; read by helpers after they see the new generation.
    private var itemCount = 0
    private let nextItem = Atomic<Int>(0)
    /// Mirrors of `generation` and `busyHelpers` that spinning threads read without the lock.
    private let publishedGeneration = Atomic<Int>(0)
    private let publishedBusy = Atomic<Int>(0)
    /// How long a thread watches for the next step before it sleeps.
    private let spinNanoseconds: UInt64

    private final class Start {
        let pool: WorkerPool
        let worker: Int
        init(pool: WorkerPool, worker: Int) {
            self.pool = pool
            self.worker = worker
        }
    }

    /// Starts `workerCount - 1` helper threads, or as many as the system allows.
    ///
    /// - Parameter spinNanoseconds: how long a thread watches for the next step before it sleeps (0: at once).
    init(workerCount: Int, spinNanoseconds: UInt64 = 0) {
        precondition(workerCount >= 1, "a worker pool needs at least one worker")
        self.spinNanoseconds = spinNanoseconds
        pthread_mutex_init(lock, nil)
        pthread_cond_init(wake, nil)
        pthread_cond_init(done, nil)
        for worker in 1..<workerCount {
            let start = Unmanaged.passRetained(Start(pool: self, worker: worker)).toOpaque()
            var thread = pthread_t()
            let rc = pthread_create(
                &thread, nil,
                { raw in
                    let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
                    start.pool.helperLoop(worker: start.worker)
                    return nil
                }, start)
            guard rc == 0 else {
                // Refused by the system: the pool works with the threads it has (the caller alone at least).
                Unmanaged<Start>.fromOpaque(start).release()
                break
            }
            threads.append(thread)
        }
        self.workerCount = threads.count + 1
    }

    /// Stops and joins the helper threads. Must be called before the pool is dropped.
    func shutdown() {
        pthread_mutex_lock(lock)
        stopping = true
        pthread_cond_broadcast(wake)
        pthread_mutex_unlock(lock)
        for thread in threads { pthread_join(thread, nil) }
        threads.removeAll()
    }

    deinit {
        precondition(threads.isEmpty, "WorkerPool dropped without shutdown()")
        pthread_mutex_destroy(lock)
        pthread_cond_destroy(wake)
        pthread_cond_destroy(done)
        lock.deallocate()
        wake.deallocate()
        done.deallocate()
    }

    /// Calls `body(item, worker)` for every item in `0..<items`, spread over the workers, and returns when all
    /// calls have returned. `worker` is in `0..<workerCount` and names the per-worker context to use.
    func run(items: Int, _ body: (Int, Int) -> Void) {
        if workerCount == 1 || items <= 1 {
            for item in 0..<items { body(item, 0) }
            return
        }
        withoutActuallyEscaping(body) { body in
            pthread_mutex_lock(lock)
            job = body
            itemCount = items
            nextItem.store(0, ordering: .relaxed)
            busyHelpers = threads.count
            publishedBusy.store(threads.count, ordering: .releasing)
            generation &+= 1
            publishedGeneration.store(generation, ordering: .releasing)
            pthread_cond_broadcast(wake)
            pthread_mutex_unlock(lock)
            drain(worker: 0, body)
            spin { publishedBusy.load(ordering: .acquiring) == 0 }
            pthread_mutex_lock(lock)
            while busyHelpers > 0 { pthread_cond_wait(done, lock) }
            job = nil
            pthread_mutex_unlock(lock)
        }
    }

    private func drain(worker: Int, _ body: (Int, Int) -> Void) {
        let count = itemCount
        while true {
            let item = nextItem.wrappingAdd(1, ordering: .relaxed).oldValue
            if item >= count { return }
            body(item, worker)
        }
    }

    /// Calls `condition` until it holds or ``spinNanoseconds`` have passed.
    private func spin(until condition: () -> Bool) {
        _ = watch(for: spinNanoseconds, until: condition)
    }

    private func helperLoop(worker: Int) {
        var seen = 0
        pthread_mutex_lock(lock)
        while true {
            if generation == seen && !stopping {
                pthread_mutex_unlock(lock)
                spin { publishedGeneration.load(ordering: .acquiring) != seen }
                pthread_mutex_lock(lock)
            }
            while generation == seen && !stopping { pthread_cond_wait(wake, lock) }
            if stopping { break }
            seen = generation
            let body = job!
            pthread_mutex_unlock(lock)
            drain(worker: worker, body)
            pthread_mutex_lock(lock)
            busyHelpers -= 1
            publishedBusy.store(busyHelpers, ordering: .releasing)
            if busyHelpers == 0 { pthread_cond_signal(done) }
        }
        pthread_mutex_unlock(lock)
    }
}

/// Calls `condition` until it holds (true) or `nanoseconds` have passed (false; 0: at once), yielding the core every
/// 64 calls: the watch only uses time no other runnable thread wants.
func watch(for nanoseconds: UInt64, until condition: () -> Bool) -> Bool {
    if condition() { return true }
    if nanoseconds == 0 { return false }
    let start = System.monotonicNanoseconds()
    var checks = 0
    while !condition() {
        checks &+= 1
        if checks & 63 == 0 {
            if UInt64(clamping: System.monotonicNanoseconds() &- start) > nanoseconds { return false }
            sched_yield()
        }
    }
    return true
}
