/* ICRC (IBA Vol 1 §7.8.1; RoCE Annexes A16/A17) and VCRC (§7.8.2) of one packet.
 *
 * CRC-32 (the zlib/Ethernet polynomial, reflected) runs by carry-less multiplication where the CPU has
 * it: the folding method of Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction" (Intel, 2009), with the constants published there for this polynomial.  Four 128-bit
 * lanes fold 64 bytes at a time, then fold to one lane, reduce to 64 and 32 bits, Barrett-reduce.  CPUs
 * with VPCLMULQDQ on 512-bit registers fold four such registers, 256 bytes at a time, first.  A fold
 * over a distance of D bits multiplies by x^(D+32) and x^(D-32) mod P (bit-reflected, shifted left by
 * one).  It works on the raw CRC register (zlib's value inverted).  Inputs shorter than 64 bytes go
 * through a byte table, longer ones on CPUs without PCLMULQDQ to zlib. */
#include <string.h>
#include <zlib.h>

#include "crc.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CLMUL_PATH 1

/* The fold constants of one distance: (x^(D+32), x^(D-32)) in the low and high quadword. */
#define K(lo, hi) _mm_set_epi64x((long long)(hi), (long long)(lo))
#define K128 K(0x1751997d0ULL, 0x0ccaa009eULL)
#define K256 K(0x0f1da05aaULL, 0x15a546366ULL)
#define K384 K(0x03db1ecdcULL, 0x174359406ULL)
#define K512 K(0x154442bd4ULL, 0x1c6e41596ULL)
#define K2048 K(0x11542778aULL, 0x1322d1430ULL)

/* x folded over the distance of the constants k, plus the next 16 bytes. */
#define FOLD(x, k, next) \
    x = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next)

/* Byte shuffles for the last len % 16 bytes: loaded at offset r, SHIFT_DOWN moves bytes r..15 to 0..15-r
 * and SHIFT_UP bytes 0..r-1 to 16-r..15; the others become zero (index with the top bit set). */
static const uint8_t SHIFT_DOWN[32] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                       0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                       0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};
static const uint8_t SHIFT_UP[32] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                     0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                     0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* One 128-bit lane, then 16 bytes at a time, then the last len % 16: the lane and those r bytes are
 * re-cut into r bytes (folded over 128 bits) and the 16 that follow them, whose new bytes are read
 * from the 16 ending at p + len (at least 16 bytes lie before that end); then the reductions to 32 bits. */
__attribute__((target("pclmul,sse4.1")))
static inline uint32_t fold_finish(__m128i x1, const uint8_t *p, size_t len)
{
    const __m128i k3k4 = K128;
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i x2;
    while (len >= 16) {
        FOLD(x1, k3k4, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    if (len) {
        const __m128i up = _mm_loadu_si128((const __m128i *)(SHIFT_UP + len));
        __m128i head = _mm_shuffle_epi8(x1, up);
        __m128i rest = _mm_blendv_epi8(_mm_loadu_si128((const __m128i *)(p + len - 16)),
                                       _mm_shuffle_epi8(x1, _mm_loadu_si128((const __m128i *)(SHIFT_DOWN + len))), up);
        FOLD(head, k3k4, rest);
        x1 = head;
    }
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);                         /* 128 -> 64 bits */
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);                                         /* 64 -> 32 bits */
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), x2);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);   /* Barrett reduction */
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, x2), 1);
}

__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(uint32_t raw, const uint8_t *p, size_t len)   /* len >= 64 */
{
    const __m128i k1k2 = K512, k3k4 = K128;
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)raw));
    p += 64;
    len -= 64;
    while (len >= 64) {
        FOLD(x1, k1k2, _mm_loadu_si128((const __m128i *)(p + 0x00)));
        FOLD(x2, k1k2, _mm_loadu_si128((const __m128i *)(p + 0x10)));
        FOLD(x3, k1k2, _mm_loadu_si128((const __m128i *)(p + 0x20)));
        FOLD(x4, k1k2, _mm_loadu_si128((const __m128i *)(p + 0x30)));
        p += 64;
        len -= 64;
    }
    FOLD(x1, k3k4, x2);
    FOLD(x1, k3k4, x3);
    FOLD(x1, k3k4, x4);
    return fold_finish(x1, p, len);
}

/* The same folding four 512-bit registers at a time (each four 128-bit lanes). */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))
static uint32_t crc32_vclmul(uint32_t raw, const uint8_t *p, size_t len)  /* len >= 256 */
{
    const __m512i k2048 = _mm512_broadcast_i32x4(K2048), k512 = _mm512_broadcast_i32x4(K512);
    /* lane i of the last register is 3 - i lanes from the end: fold it by that distance (lane 3 stays) */
    const __m512i kend = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_setzero_si512(),
                                            K384, 0), K256, 1), K128, 2);
    __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
    __m512i x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
    x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)raw)));
    p += 256;
    len -= 256;
#define VFOLD(x, k, next) \
    x = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), next, 0x96)
    while (len >= 256) {
        VFOLD(x0, k2048, _mm512_loadu_si512(p));
        VFOLD(x1, k2048, _mm512_loadu_si512(p + 64));
        VFOLD(x2, k2048, _mm512_loadu_si512(p + 128));
        VFOLD(x3, k2048, _mm512_loadu_si512(p + 192));
        p += 256;
        len -= 256;
    }
    VFOLD(x0, k512, x1);
    VFOLD(x0, k512, x2);
    VFOLD(x0, k512, x3);
    while (len >= 64) {
        VFOLD(x0, k512, _mm512_loadu_si512(p));
        p += 64;
        len -= 64;
    }
#undef VFOLD
    __m512i t = _mm512_xor_si512(_mm512_clmulepi64_epi128(x0, kend, 0x00), _mm512_clmulepi64_epi128(x0, kend, 0x11));
    __m128i r = _mm_xor_si128(_mm_xor_si128(_mm512_castsi512_si128(t), _mm512_extracti32x4_epi32(t, 1)),
                              _mm_xor_si128(_mm512_extracti32x4_epi32(t, 2), _mm512_extracti32x4_epi32(x0, 3)));
    return fold_finish(r, p, len);
}

static int have_clmul, have_vclmul;
#endif

static const z_crc_t *byte_table;   /* zlib's: the CRC register after one byte, for short spans */

void crc_init(void)
{
    byte_table = get_crc_table();
#ifdef HAVE_CLMUL_PATH
    __builtin_cpu_init();
    have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    have_vclmul = have_clmul && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
#endif
}

uint32_t crc32_any(uint32_t c, const uint8_t *p, size_t len)
{
#ifdef HAVE_CLMUL_PATH
    if (have_clmul && len >= 64)
        return have_vclmul && len >= 256 ? ~crc32_vclmul(~c, p, len) : ~crc32_clmul(~c, p, len);
#endif
    if (len < 64) {                              /* a call into zlib costs more than these few bytes */
        c = ~c;
        while (len--)
            c = byte_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
        return ~c;
    }
    while (len > 0) {                            /* zlib's uInt is 32-bit: feed huge spans in pieces */
        uInt k = len > 0x40000000 ? 0x40000000 : (uInt)len;
        c = (uint32_t)crc32(c, p, k);
        p += k;
        len -= k;
    }
    return c;
}

#define MASKED 128      /* every variant field lies in the first 128 bytes of the covered span */

static inline void ones(uint8_t *t, int64_t at, int64_t h, uint8_t bits)
{
    if (at >= 0 && at < h)
        t[at] |= bits;
}

uint32_t icrc_of(const uint8_t *buf, int64_t size, const icrc_span *s)
{
    int64_t a = s->start, z = s->end;
    if (a < 0 || z < a || z > size)
        return 0;
    int64_t h = z - a < MASKED ? z - a : MASKED;
    uint8_t t[MASKED];
    memcpy(t, buf + a, (size_t)h);
    if (s->lrh_vl >= 0)
        ones(t, s->lrh_vl - a, h, 0xF0);
    if (s->ones8 >= 0)
        for (int k = 0; k < 8; k++)
            ones(t, s->ones8 - a + k, h, 0xFF);
    if (s->grh >= 0) {
        int64_t g = s->grh - a;
        ones(t, g, h, 0x0F);
        for (int k = 1; k <= 3; k++)
            ones(t, g + k, h, 0xFF);
        ones(t, g + 7, h, 0xFF);
    }
    if (s->ip4 >= 0) {
        int64_t g = s->ip4 - a;
        ones(t, g + 1, h, 0xFF);
        ones(t, g + 8, h, 0xFF);
        ones(t, g + 10, h, 0xFF);
        ones(t, g + 11, h, 0xFF);
    }
    if (s->udp >= 0) {
        ones(t, s->udp - a + 6, h, 0xFF);
        ones(t, s->udp - a + 7, h, 0xFF);
    }
    if (s->bth >= 0)
        ones(t, s->bth - a + 4, h, 0xFF);
    return crc32_any(crc32_any(0, t, (size_t)h), buf + a + h, (size_t)(z - a - h));
}

void vcrc_slices(const uint16_t table[256], uint16_t out[4][256])
{
    for (int i = 0; i < 256; i++) {
        out[0][i] = table[i];
        for (int k = 1; k < 4; k++)
            out[k][i] = (uint16_t)((out[k - 1][i] >> 8) ^ table[out[k - 1][i] & 0xFF]);
    }
}

/* Four bytes a step (slicing: byte j of four passes through the table of the 3 - j bytes after it). */
uint16_t vcrc_of(const uint8_t *buf, int64_t size, int64_t a, int64_t z, const uint16_t t[4][256])
{
    if (a < 0 || z < a || z > size)
        return 0;
    uint16_t c = 0xFFFF;
    int64_t j = a;
    for (; j + 4 <= z; j += 4)
        c = (uint16_t)(t[3][(c ^ buf[j]) & 0xFF] ^ t[2][((c >> 8) ^ buf[j + 1]) & 0xFF] ^ t[1][buf[j + 2]] ^
                       t[0][buf[j + 3]]);
    for (; j < z; j++)
        c = (uint16_t)((c >> 8) ^ t[0][(c ^ buf[j]) & 0xFF]);
    return c ^ 0xFFFF;
}
