// CRC-32C (Castagnoli) with the SSE4.2 CRC32 instruction, used by SegmentStore's CRC32C when available.
//
// The instruction has a latency of three cycles and a throughput of one per cycle, so long buffers are cut into
// three interleaved streams whose registers are combined at the end of each block: a register is moved past a
// block of zero bytes by a multiplication modulo the polynomial, done with four table lookups (tables built once).
#include "ccrc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>

#define POLY 0x82f63b78u
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

int rewind_crc32c_has_hardware(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx & bit_SSE4_2) != 0;
}

// a × b modulo the polynomial, bit-reflected (bit 31 is x^0).
static uint32_t multiply_mod_poly(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, product = 0;
    for (;;) {
        if (a & m) {
            product ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ POLY : b >> 1;
    }
    return product;
}

// x^(8 × bytes) modulo the polynomial: the operator that moves a register past `bytes` zero bytes.
static uint32_t zero_bytes_operator(size_t bytes) {
    uint32_t result = 1u << 31;  // x^0
    uint32_t square = 1u << 23;  // x^8: one zero byte
    while (bytes) {
        if (bytes & 1) result = multiply_mod_poly(square, result);
        square = multiply_mod_poly(square, square);
        bytes >>= 1;
    }
    return result;
}

static uint32_t long_shift[4][256];
static uint32_t short_shift[4][256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_shift(uint32_t table[4][256], size_t bytes) {
    uint32_t op = zero_bytes_operator(bytes);
    for (uint32_t n = 0; n < 256; n++) {
        for (int j = 0; j < 4; j++) table[j][n] = multiply_mod_poly(op, n << (8 * j));
    }
}

static void build_tables(void) {
    build_shift(long_shift, LONG_BLOCK);
    build_shift(short_shift, SHORT_BLOCK);
}

static inline uint32_t shift(uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

static inline uint64_t load64(const unsigned char *p) {
    uint64_t word;
    memcpy(&word, p, 8);
    return word;
}

// Three interleaved streams over blocks of `block` bytes, while at least three blocks remain.
__attribute__((target("sse4.2")))
static uint32_t interleaved(uint32_t crc, const unsigned char **data, size_t *length, size_t block,
                            uint32_t table[4][256]) {
    const unsigned char *p = *data;
    size_t n = *length;
    uint64_t c0 = crc;
    while (n >= 3 * block) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + block;
        do {
            c0 = _mm_crc32_u64(c0, load64(p));
            c1 = _mm_crc32_u64(c1, load64(p + block));
            c2 = _mm_crc32_u64(c2, load64(p + 2 * block));
            p += 8;
        } while (p < end);
        c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * block;
        n -= 3 * block;
    }
    *data = p;
    *length = n;
    return (uint32_t)c0;
}

__attribute__((target("sse4.2")))
uint32_t rewind_crc32c_hardware(uint32_t state, const void *data, size_t length) {
    const unsigned char *p = (const unsigned char *)data;
    uint32_t c = state;
    if (length >= 3 * SHORT_BLOCK) {
        pthread_once(&tables_once, build_tables);
        c = interleaved(c, &p, &length, LONG_BLOCK, long_shift);
        c = interleaved(c, &p, &length, SHORT_BLOCK, short_shift);
    }
    uint64_t crc = c;
    while (length >= 8) {
        crc = _mm_crc32_u64(crc, load64(p));
        p += 8;
        length -= 8;
    }
    c = (uint32_t)crc;
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
