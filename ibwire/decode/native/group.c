/* Exact group-by on record fields with an open-addressing hash table: O(n), no sort.  Keys are the
 * concatenated bytes of the fields, zero-padded to whole 8-byte words; equal hashes are confirmed word
 * for word, so groups never merge.  The table starts small and doubles (rehashed from the stored hashes)
 * to stay at most half full: a batch has few groups, and a small table stays in the CPU's first cache. */
#include <stdlib.h>
#include <string.h>

#include "group.h"

#define KEY_WORDS ((GROUP_MAX_KEY + 7) / 8)

/* Multiply-xorshift over 8-byte words (`len` bytes, zero-padded to a whole word). */
static inline uint64_t key_hash(const uint64_t *w, int len)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)len;
    for (int i = 0; i < (len + 7) / 8; i++) {
        h = (h ^ w[i]) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    return h;
}

static inline int same_key(const uint64_t *a, const uint64_t *b, int words)
{
    for (int i = 0; i < words; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* memcpy with the sizes record fields have spelled out, so that each is a plain load and store. */
static inline void copy_field(uint8_t *dst, const uint8_t *src, int64_t size)
{
    switch (size) {
    case 1: memcpy(dst, src, 1); break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 6: memcpy(dst, src, 6); break;
    case 8: memcpy(dst, src, 8); break;
    case 16: memcpy(dst, src, 16); break;
    default: memcpy(dst, src, (size_t)size);
    }
}

/* Place group g (hash h) in the first empty slot of its probe sequence. */
static inline void place(int64_t *slot, uint64_t cap, uint64_t h, int64_t g)
{
    uint64_t s = h & (cap - 1);
    while (slot[s] >= 0)
        s = (s + 1) & (cap - 1);
    slot[s] = g;
}

int64_t group_records(const group_job *j)
{
    const int64_t *rows = j->rows, *off = j->off, *size = j->size;
    int64_t n = j->n, *inverse = j->inverse, *first = j->first;
    uint64_t *hashes = j->hashes;
    int nfields = j->nfields;
    int klen = 0;
    for (int f = 0; f < nfields; f++)
        klen += (int)size[f];
    int words = (klen + 7) / 8 ? (klen + 7) / 8 : 1;
    uint64_t cap = 64;
    int64_t *slot = malloc(cap * sizeof *slot);            /* group number, -1 empty */
    uint64_t *keys = malloc((size_t)(n ? n : 1) * (size_t)words * sizeof *keys);   /* each group's key */
    if (!slot || !keys) {
        free(slot);
        free(keys);
        return -1;
    }
    memset(slot, 0xFF, cap * sizeof *slot);
    int64_t groups = 0, other = -1;   /* other: the last group before the previous row's that differed */
    uint64_t key[KEY_WORDS] = {0};
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *r = j->rec + (rows ? rows[i] : i) * j->itemsize;
        int at = 0;
        for (int f = 0; f < nfields; f++) {
            copy_field((uint8_t *)key + at, r + off[f], size[f]);
            at += (int)size[f];
        }
        int64_t prev = i ? inverse[i - 1] : -1;
        if (prev >= 0 && same_key(keys + prev * words, key, words)) {   /* a run of one group: no lookup */
            inverse[i] = prev;
            continue;
        }
        if (other >= 0 && same_key(keys + other * words, key, words)) {   /* two groups taking turns */
            inverse[i] = other;
            other = prev;
            continue;
        }
        other = prev;   /* (the lookup finds neither: the group before this row's is prev) */
        uint64_t h = key_hash(key, klen), s = h & (cap - 1);
        for (;;) {
            int64_t g = slot[s];
            if (g < 0) {
                g = groups++;
                memcpy(keys + g * words, key, (size_t)words * sizeof *keys);
                first[g] = i;
                hashes[g] = h;
                inverse[i] = g;
                if (2 * (uint64_t)groups > cap) {                 /* grow: place every group again */
                    int64_t *bigger = malloc(2 * cap * sizeof *bigger);
                    if (!bigger) {
                        free(slot);
                        free(keys);
                        return -1;
                    }
                    free(slot);
                    slot = bigger;
                    cap *= 2;
                    memset(slot, 0xFF, cap * sizeof *slot);
                    for (int64_t k = 0; k < groups; k++)
                        place(slot, cap, hashes[k], k);
                } else {
                    slot[s] = g;
                }
                break;
            }
            if (hashes[g] == h && same_key(keys + g * words, key, words)) {
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
