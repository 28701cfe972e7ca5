/* Exact group-by on record fields with an open-addressing hash table: O(n), no sort.  Keys are the
 * concatenated bytes of the fields; equal hashes are confirmed byte for byte, so groups never merge. */
#include <stdlib.h>
#include <string.h>

#include "group.h"

/* Multiply-xorshift over 8-byte words (the key buffer is zero-padded to a whole word). */
static inline uint64_t key_hash(const uint8_t *p, int len)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)len;
    for (int i = 0; i < len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    return h;
}

int64_t group_records(const uint8_t *rec, int64_t itemsize, const int64_t *rows, int64_t n,
                      const int64_t *off, const int64_t *size, int nfields,
                      int64_t *inverse, int64_t *first, uint64_t *hashes)
{
    int klen = 0;
    for (int f = 0; f < nfields; f++)
        klen += (int)size[f];
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n)
        cap <<= 1;
    int64_t *slot = malloc(cap * sizeof *slot);            /* group number, -1 empty */
    uint8_t *keys = malloc((size_t)(n ? n : 1) * (size_t)(klen ? klen : 1));
    if (!slot || !keys) {
        free(slot);
        free(keys);
        return -1;
    }
    memset(slot, 0xFF, cap * sizeof *slot);
    int64_t groups = 0;
    uint8_t key[GROUP_MAX_KEY + 8] = {0};
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *r = rec + (rows ? rows[i] : i) * itemsize;
        int at = 0;
        for (int f = 0; f < nfields; f++) {
            memcpy(key + at, r + off[f], (size_t)size[f]);
            at += (int)size[f];
        }
        uint64_t h = key_hash(key, klen), s = h & (cap - 1);
        for (;;) {
            int64_t g = slot[s];
            if (g < 0) {
                slot[s] = g = groups++;
                memcpy(keys + g * klen, key, (size_t)klen);
                first[g] = i;
                hashes[g] = h;
                inverse[i] = g;
                break;
            }
            if (hashes[g] == h && !memcmp(keys + g * klen, key, (size_t)klen)) {
                inverse[i] = g;
                break;
            }
            s = (s + 1) & (cap - 1);
        }
    }
    free(slot);
    free(keys);
    return groups;
}
