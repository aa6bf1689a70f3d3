#define _GNU_SOURCE
#include "cplatform.h"

#include <errno.h>
#include <fcntl.h>

#ifdef __linux__
#include <linux/falloc.h>
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
