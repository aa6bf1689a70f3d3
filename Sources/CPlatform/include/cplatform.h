#ifndef REWIND_CPLATFORM_H
#define REWIND_CPLATFORM_H

#include <stdint.h>

/// Reserves disk blocks for the first `length` bytes of the file open on `fd` without changing its size
/// (Linux `fallocate` with `FALLOC_FL_KEEP_SIZE`), so later writes into the range skip block allocation.
/// Returns 0, or the errno (EOPNOTSUPP where the file system or platform cannot reserve).
int rewind_reserve_blocks(int fd, int64_t length);

/// Makes malloc hand large freed blocks back to the system at once: blocks of 512 KiB or more get a mapping of
/// their own (unmapped when freed), and free memory at the top of a heap is trimmed past 1 MiB. With glibc's
/// defaults both thresholds grow with the largest block freed (up to 32 MiB), so a long-running process whose
/// queries allocate and free frame-sized buffers keeps tens of MiB of them resident in its heaps.
/// Returns 1 when applied, 0 where the C library has no such settings.
int rewind_limit_heap_retention(void);

#endif
