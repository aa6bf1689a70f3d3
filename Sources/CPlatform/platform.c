#define _GNU_SOURCE
#include "cplatform.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/falloc.h>
#endif

#ifdef __GLIBC__
#include <malloc.h>
#endif

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

static int fill_address(struct sockaddr_un *address, const char *path) {
    memset(address, 0, sizeof *address);
    address->sun_family = AF_UNIX;
    size_t length = strlen(path);
    if (length == 0 || length >= sizeof address->sun_path) return -ENAMETOOLONG;
    memcpy(address->sun_path, path, length + 1);
    return 0;
}

int rewind_unix_listen(const char *path, int backlog) {
    struct sockaddr_un address;
    int bad = fill_address(&address, path);
    if (bad) return bad;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(fd, backlog) != 0) {
        int error = errno;
        close(fd);
        return -error;
    }
    return fd;
}

int rewind_unix_connect(const char *path) {
    struct sockaddr_un address;
    int bad = fill_address(&address, path);
    if (bad) return bad;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    while (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        if (errno == EINTR) continue;
        int error = errno;
        close(fd);
        return -error;
    }
    return fd;
}

ssize_t rewind_send_with_descriptor(int socket, const void *bytes, size_t length, int fd) {
    struct iovec vector = {(void *)bytes, length};
    struct msghdr message;
    memset(&message, 0, sizeof message);
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    if (fd >= 0) {
        memset(&control, 0, sizeof control);
        message.msg_control = control.space;
        message.msg_controllen = sizeof control.space;
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(header), &fd, sizeof(int));
    }
    ssize_t sent;
    do {
        sent = sendmsg(socket, &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    return sent < 0 ? -errno : sent;
}

ssize_t rewind_receive_with_descriptor(int socket, void *bytes, size_t capacity, int *fd) {
    *fd = -1;
    struct iovec vector = {bytes, capacity};
    struct msghdr message;
    memset(&message, 0, sizeof message);
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(4 * sizeof(int))];
    } control;
    message.msg_control = control.space;
    message.msg_controllen = sizeof control.space;
    ssize_t received;
    do {
        received = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
    } while (received < 0 && errno == EINTR);
    if (received < 0) return -errno;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int received_fd;
            memcpy(&received_fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
            if (*fd < 0) *fd = received_fd; else close(received_fd);
        }
    }
    return received;
}

int rewind_accept(int socket) {
    int fd;
    do {
        fd = accept4(socket, NULL, NULL, SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : fd;
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
