#define _GNU_SOURCE
#include "cplatform.h"

#include <errno.h>
#include <fcntl.h>

#ifdef __linux__
#include <linux/falloc.h>
#endif

#ifdef __GLIBC__
#include <malloc.h>
#endif

int rewind_reserve_blocks(int fd, int64_t length) {
#ifdef __linux__
    if (length <= 0) return 0;
    return fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)length) == 0 ? 0 : errno;
#else
    (void)fd;
    (void)length;
    return EOPNOTSUPP;
#endif
}

int rewind_limit_heap_retention(void) {
#ifdef __GLIBC__
    return mallopt(M_MMAP_THRESHOLD, 512 * 1024) == 1 && mallopt(M_TRIM_THRESHOLD, 1024 * 1024) == 1;
#else
    return 0;
#endif
}
