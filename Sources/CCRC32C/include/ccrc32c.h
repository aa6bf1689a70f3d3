#ifndef REWIND_CCRC32C_H
#define REWIND_CCRC32C_H

#include <stddef.h>
#include <stdint.h>

/// Whether this processor has the SSE4.2 CRC32 instruction (x86-64 only; 0 elsewhere).
int rewind_crc32c_has_hardware(void);

/// Feeds `length` bytes at `data` into a CRC-32C register `state` (no pre- or post-inversion) with the CRC32
/// instruction. Call only when rewind_crc32c_has_hardware() returned 1.
uint32_t rewind_crc32c_hardware(uint32_t state, const void *data, size_t length);

#endif
