#ifndef REWIND_CPLATFORM_H
#define REWIND_CPLATFORM_H

#include <stdint.h>

/// Reserves disk blocks for the first `length` bytes of the file open on `fd` without changing its size
/// (Linux `fallocate` with `FALLOC_FL_KEEP_SIZE`), so later writes into the range skip block allocation.
/// Returns 0, or the errno (EOPNOTSUPP where the file system or platform cannot reserve).
int rewind_reserve_blocks(int fd, int64_t length);

#endif
