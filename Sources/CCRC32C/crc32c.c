// CRC-32C (Castagnoli) with the SSE4.2 CRC32 instruction, used by SegmentStore's CRC32C when available.
#include "ccrc32c.h"

#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>

int rewind_crc32c_has_hardware(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx & bit_SSE4_2) != 0;
}

__attribute__((target("sse4.2")))
uint32_t rewind_crc32c_hardware(uint32_t state, const void *data, size_t length) {
    const unsigned char *p = (const unsigned char *)data;
    uint64_t crc = state;
    while (length >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = _mm_crc32_u64(crc, word);
        p += 8;
        length -= 8;
    }
    uint32_t c = (uint32_t)crc;
    while (length > 0) {
        c = _mm_crc32_u8(c, *p);
        p += 1;
        length -= 1;
    }
    return c;
}
#else
int rewind_crc32c_has_hardware(void) { return 0; }

uint32_t rewind_crc32c_hardware(uint32_t state, const void *data, size_t length) {
    (void)data;
    (void)length;
    return state;
}
#endif
