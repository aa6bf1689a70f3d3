#define _GNU_SOURCE
#include "cplatform.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#ifdef __linux__
#include <linux/falloc.h>
#endif

#ifdef __GLIBC__
#include <malloc.h>
#endif

int rewind_start_writeback(int fd, int64_t offset, int64_t length) {
#ifdef __linux__
    return sync_file_range(fd, (off_t)offset, (off_t)length, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd;
    (void)offset;
    (void)length;
    errno = ENOSYS;
    return -1;
#endif
}

int rewind_reserve_blocks(int fd, int64_t offset, int64_t length) {
#ifdef __linux__
    if (length <= 0) return 0;
    return fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length);
#else
    (void)fd;
    (void)offset;
    (void)length;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

// Fills `address` with `path`. A path longer than `sun_path` holds (a store deep in the file system) is reached
// through a descriptor of its directory, as `/proc/self/fd/N/NAME`, which Linux resolves to the same place; the
// descriptor goes to `*directory` (-1 when none), for the caller to close once bound or connected.
static int fill_address(struct sockaddr_un *address, const char *path, int *directory) {
    *directory = -1;
    memset(address, 0, sizeof *address);
    address->sun_family = AF_UNIX;
    size_t length = strlen(path);
    if (length == 0) return -ENAMETOOLONG;
    if (length < sizeof address->sun_path) {
        memcpy(address->sun_path, path, length + 1);
        return 0;
    }
#ifdef __linux__
    const char *slash = strrchr(path, '/');
    if (slash == NULL) return -ENAMETOOLONG;
    size_t parent_length = slash == path ? 1 : (size_t)(slash - path);
    char *parent = strndup(path, parent_length);
    if (parent == NULL) return -ENOMEM;
    int fd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int error = errno;
    free(parent);
    if (fd < 0) return -error;
    int written = snprintf(address->sun_path, sizeof address->sun_path, "/proc/self/fd/%d/%s", fd, slash + 1);
    if (written < 0 || (size_t)written >= sizeof address->sun_path) {
        close(fd);
        return -ENAMETOOLONG;
    }
    *directory = fd;
    return 0;
#else
    return -ENAMETOOLONG;
#endif
}

int rewind_unix_listen(const char *path, int backlog) {
    struct sockaddr_un address;
    int directory;
    int bad = fill_address(&address, path, &directory);
    if (bad) return bad;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int error = errno;
        if (directory >= 0) close(directory);
        return -error;
    }
    // Only the owner may connect: chmod before listen, so no connection is accepted before the mode is set.
    int failed = bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || chmod(path, 0600) != 0 ||
                 listen(fd, backlog) != 0;
    int error = errno;
    if (directory >= 0) close(directory);
    if (failed) {
        close(fd);
        return -error;
    }
    return fd;
}

int rewind_unix_connect(const char *path) {
    struct sockaddr_un address;
    int directory;
    int bad = fill_address(&address, path, &directory);
    if (bad) return bad;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int error = errno;
    while (fd >= 0 && connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        if (errno == EINTR) continue;
        error = errno;
        close(fd);
        fd = -1;
    }
    if (directory >= 0) close(directory);
    return fd < 0 ? -error : fd;
}

int rewind_accept(int socket) {
    int fd;
    do {
        fd = accept4(socket, NULL, NULL, SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : fd;
}

int rewind_socket_peer_is_stopped(int fd) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0 || credentials.pid <= 0) return -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)credentials.pid);
    FILE *file = fopen(path, "re");
    if (file == NULL) return -1;
    char line[512];
    size_t count = fread(line, 1, sizeof line - 1, file);
    fclose(file);
    line[count] = 0;
    // "PID (COMM) STATE …": the command may hold spaces and parentheses, so the state follows the last ')'.
    char *end = strrchr(line, ')');
    if (end == NULL || end[1] != ' ') return -1;
    return end[2] == 'T' || end[2] == 't';
}

int rewind_wake_pipe(int fds[2]) {
    return pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0 ? 0 : -errno;
}

int rewind_limit_heap_retention(void) {
#ifdef __GLIBC__
    return mallopt(M_MMAP_THRESHOLD, 512 * 1024) == 1 && mallopt(M_TRIM_THRESHOLD, 1024 * 1024) == 1;
#else
    return 0;
#endif
}

int rewind_signal_is_ignored(int number) {
    struct sigaction current;
    if (sigaction(number, NULL, &current) != 0) return 0;
    return !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN;
}

int rewind_limit_malloc_arenas(int count) {
#ifdef __GLIBC__
    return mallopt(M_ARENA_MAX, count) == 1;
#else
    (void)count;
    return 0;
#endif
}

int64_t rewind_heap_bytes_in_use(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 info = mallinfo2();
    return (int64_t)(info.uordblks + info.hblkhd);
#else
    return -1;
#endif
}

int rewind_trim_heap(void) {
#ifdef __GLIBC__
    return malloc_trim(0);
#else
    return 0;
#endif
}

int rewind_flush_standard_output(void) {
    if (fflush(stdout) != 0) return errno != 0 ? errno : EIO;
    return ferror(stdout) ? EIO : 0;
}

int rewind_tcp_listen(const char *host, int port, int backlog, int *bound_port, int *is_loopback) {
    struct sockaddr_storage storage;
    memset(&storage, 0, sizeof storage);
    socklen_t length;
    int family;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&storage;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&storage;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        family = AF_INET;
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        length = sizeof *v4;
        *is_loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        family = AF_INET6;
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        length = sizeof *v6;
        *is_loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
    } else {
        return -EINVAL;
    }
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&storage, length) != 0 || listen(fd, backlog) != 0 ||
        getsockname(fd, (struct sockaddr *)&storage, &length) != 0) {
        int error = errno;
        close(fd);
        return -error;
    }
    *bound_port = ntohs(family == AF_INET ? v4->sin_port : v6->sin6_port);
    return fd;
}

int rewind_tcp_connect(int port) {
    struct sockaddr_in address;
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_port = htons((uint16_t)port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    while (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        if (errno == EINTR) continue;
        int error = errno;
        close(fd);
        return -error;
    }
    return fd;
}

int rewind_lower_this_thread_priority(int increment) {
#if defined(__linux__)
    pid_t thread = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int current = getpriority(PRIO_PROCESS, (id_t)thread);
    if (current == -1 && errno != 0) return errno;
    return setpriority(PRIO_PROCESS, (id_t)thread, current + increment) == 0 ? 0 : errno;
#else
    (void)increment;
    return 0;
#endif
}

void rewind_name_this_thread(const char *name) {
#if defined(__linux__) && defined(__GLIBC__)
    char shortened[16];
    strncpy(shortened, name, sizeof shortened - 1);
    shortened[sizeof shortened - 1] = 0;
    (void)pthread_setname_np(pthread_self(), shortened);
#else
    (void)name;
#endif
}

/// The children started and not yet forgotten (0: a free slot). Slots are taken and freed with atomic operations,
/// so a signal handler can read them at any moment.
#define REWIND_CHILD_SLOTS 64
static int rewind_children[REWIND_CHILD_SLOTS];

static void rewind_remember_child(int pid) {
    for (int slot = 0; slot < REWIND_CHILD_SLOTS; slot++) {
        int free_slot = 0;
        if (__atomic_compare_exchange_n(&rewind_children[slot], &free_slot, pid, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            return;
        }
    }
    // More children at once than slots: this one is not killed with the rest (no rewind command starts so many).
}

void rewind_forget_child(int pid) {
    for (int slot = 0; slot < REWIND_CHILD_SLOTS; slot++) {
        int expected = pid;
        if (__atomic_compare_exchange_n(&rewind_children[slot], &expected, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            return;
        }
    }
}

void rewind_kill_children(int signal) {
    for (int slot = 0; slot < REWIND_CHILD_SLOTS; slot++) {
        int pid = __atomic_load_n(&rewind_children[slot], __ATOMIC_SEQ_CST);
        if (pid > 0) kill(pid, signal);
    }
}

int rewind_spawn(const char *path, char *const argv[], int in_fd, int out_fd, int err_fd) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int rc = posix_spawn_file_actions_init(&actions);
    if (rc != 0) return -rc;
    rc = posix_spawnattr_init(&attributes);
    if (rc != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return -rc;
    }
    const int sources[3] = {in_fd, out_fd, err_fd};
    for (int target = 0; target < 3 && rc == 0; target++) {
        if (sources[target] < 0) {
            rc = posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0);
        } else {
            rc = posix_spawn_file_actions_adddup2(&actions, sources[target], target);
        }
    }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    if (rc == 0) rc = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
    sigset_t none, all;
    sigemptyset(&none);
    sigemptyset(&all);
    for (int signal = 1; signal < 32; signal++) {
        if (signal != SIGKILL && signal != SIGSTOP) sigaddset(&all, signal);
    }
    if (rc == 0) rc = posix_spawnattr_setsigmask(&attributes, &none);
    if (rc == 0) rc = posix_spawnattr_setsigdefault(&attributes, &all);
    if (rc == 0) rc = posix_spawnattr_setpgroup(&attributes, 0);
    if (rc == 0) {
        rc = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    }
    pid_t pid = -1;
    if (rc == 0) rc = posix_spawn(&pid, path, &actions, &attributes, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (rc != 0) return -rc;
    rewind_remember_child((int)pid);
    return (int)pid;
}
