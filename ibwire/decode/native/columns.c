/* Records to columns in one pass: each record is read once (a cache line at a time) and each field is
 * appended to its own column, where numpy's per-field copies would walk the whole batch once per field.
 * pick_fields does the same into narrower records. */
#include <stdlib.h>
#include <string.h>

#include "columns.h"

/* One field of size bytes from src to dst (constant sizes: one load and one store each). */
static inline void copy_field(uint8_t *dst, const uint8_t *src, int64_t size)
{
    switch (size) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    case 16: memcpy(dst, src, 16); break;
    default: memcpy(dst, src, (size_t)size);
    }
}

void pick_fields(const uint8_t *rec, int64_t itemsize, const int64_t *rows, int64_t n, const int64_t *off,
                 const int64_t *size, int nfields, uint8_t *out)
{
    for (int64_t k = 0; k < n; k++) {
        const uint8_t *r = rec + (rows ? rows[k] : k) * itemsize;
        for (int f = 0; f < nfields; f++) {
            copy_field(out, r + off[f], size[f]);
            out += size[f];
        }
    }
}

int split_columns(const uint8_t *rec, int64_t itemsize, int64_t n, const int64_t *off, const int64_t *size,
                   int nfields, uint8_t *out)
{
    uint8_t **to = malloc((size_t)(nfields ? nfields : 1) * sizeof *to);
    if (!to)
        return -1;
    int64_t at = 0;
    for (int f = 0; f < nfields; f++) {
        to[f] = out + n * at;
        at += size[f];
    }
    for (int64_t i = 0; i < n; i++, rec += itemsize) {
        for (int f = 0; f < nfields; f++) {
            copy_field(to[f], rec + off[f], size[f]);
            to[f] += size[f];
        }
    }
    free(to);
    return 0;
}
