#ifndef REWIND_CPLATFORM_H
#define REWIND_CPLATFORM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/// Reserves disk blocks for the `length` bytes at `offset` of the file open on `fd` without changing its size
/// (Linux `fallocate` with `FALLOC_FL_KEEP_SIZE`), so later writes into the range skip block allocation.
/// Returns 0, or −1 with `errno` set (EOPNOTSUPP where the file system or platform cannot reserve; EINTR is left
/// to the caller).
int rewind_reserve_blocks(int fd, int64_t offset, int64_t length);

/// Starts writeback of the `length` bytes at `offset` of the file open on `fd` without waiting for it (Linux
/// `sync_file_range` with `SYNC_FILE_RANGE_WRITE`). Returns 0, or −1 with `errno` set (ENOSYS elsewhere).
int rewind_start_writeback(int fd, int64_t offset, int64_t length);

/// Creates a Unix stream socket listening at `path` (which must not exist), mode 0600 (only the owner connects). Returns the descriptor, or −errno
/// (−ENAMETOOLONG when the path does not fit in sockaddr_un, even through its directory's /proc/self/fd entry:
/// a longer path is bound that way on Linux).
int rewind_unix_listen(const char *path, int backlog);

/// Accepts a connection on a listening socket, close-on-exec. Returns the descriptor, or −errno.
int rewind_accept(int socket);

/// Makes a pipe whose ends are close-on-exec and non-blocking. Returns 0, or −errno.
int rewind_wake_pipe(int fds[2]);

/// Connects to the Unix stream socket at `path` (a long one as rewind_unix_listen binds it). Returns the
/// descriptor, or −errno.
int rewind_unix_connect(const char *path);

/// Whether the process at the other end of the Unix socket `fd` is stopped (SIGSTOP, Ctrl-Z: state `T` or `t` in
/// `/proc/PID/stat`): 1 when it is, 0 when it runs, -1 when that cannot be told (not a Unix socket, no `/proc`).
int rewind_socket_peer_is_stopped(int fd);

/// Creates a TCP socket listening on the numeric IPv4 or IPv6 address `host` and `port` (0: any free port).
/// Stores the port bound in `*bound_port` and whether `host` is a loopback address in `*is_loopback`. Returns the
/// descriptor, or −errno (−EINVAL when `host` is not a numeric address).
int rewind_tcp_listen(const char *host, int port, int backlog, int *bound_port, int *is_loopback);

/// Connects to 127.0.0.1:`port`. Returns the descriptor, or −errno.
int rewind_tcp_connect(int port);

/// Makes malloc hand large freed blocks back to the system at once: blocks of 512 KiB or more get a mapping of
/// their own (unmapped when freed), and free memory at the top of a heap is trimmed past 1 MiB. With glibc's
/// defaults both thresholds grow with the largest block freed (up to 32 MiB), so a long-running process whose
/// queries allocate and free frame-sized buffers keeps tens of MiB of them resident in its heaps.
/// Returns 1 when applied, 0 where the C library has no such settings.
int rewind_limit_heap_retention(void);

/// Limits glibc's malloc to `count` arenas. Each arena reserves 64 MiB of address space, and glibc makes up to
/// eight per core for threads that allocate at once: a recorder's threads took over 1 GiB of address space for a
/// few MiB of heap, which an address-space limit (`ulimit -v`) refuses. Returns 1 when applied, 0 where the C
/// library has no such setting.
int rewind_limit_malloc_arenas(int count);

/// The bytes malloc has handed out and not had back (glibc's `mallinfo2`: in use in its heaps plus blocks mapped on
/// their own), or −1 where the C library cannot say. Walks malloc's free lists under its locks: for a status
/// request, not a hot path.
int64_t rewind_heap_bytes_in_use(void);

/// Gives the pages of free memory inside malloc's heaps back to the system (glibc's `malloc_trim(0)`: free chunks
/// anywhere in every arena, not only at a heap's top, which is all `free` itself gives back). Returns 1 when some
/// memory was released, 0 when none was or where the C library has no such call.
int rewind_trim_heap(void);

/// Whether signal `number` is ignored (`SIG_IGN`, as `nohup` leaves SIGHUP): 1 when it is, 0 otherwise.
int rewind_signal_is_ignored(int number);

/// Flushes the C library's `stdout` and says whether everything written to it so far reached the descriptor.
/// Returns 0, or an errno value (EIO when an earlier write failed and its reason is gone).
int rewind_flush_standard_output(void);

/// Names the calling thread (as `top -H` and debuggers show it), cut to the 15 bytes Linux keeps; does nothing
/// where the C library cannot.
void rewind_name_this_thread(const char *name);

/// Lowers the calling thread's scheduling priority by `increment` nice steps (Linux keeps a nice value per thread;
/// threads and processes it starts inherit it). Returns 0, or an errno value.
int rewind_lower_this_thread_priority(int increment);

/// Starts the program at `path` with `argv` (NULL-terminated, `argv[0]` first) as a child process: its standard
/// input, output and error on `in_fd`, `out_fd` and `err_fd` (each -1 for /dev/null), every other descriptor
/// closed, every signal at its default action and none blocked, in a process group of its own (a signal to the
/// caller's group — Ctrl-C in a terminal, `timeout`, `kill -- -PGID` — reaches only the caller, which decides what
/// becomes of its children). Needs no thread. Returns the child's pid, or −errno when it cannot be started. The
/// child is remembered for ``rewind_kill_children`` until ``rewind_forget_child``.
int rewind_spawn(const char *path, char *const argv[], int in_fd, int out_fd, int err_fd);

/// Forgets a child started by ``rewind_spawn`` (call it once the child was waited for).
void rewind_forget_child(int pid);

/// Sends `signal` to every child started by ``rewind_spawn`` and not yet forgotten. Async-signal-safe: a signal
/// handler ending the process at once calls it, so that no child outlives it.
void rewind_kill_children(int signal);

#endif
