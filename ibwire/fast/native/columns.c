/* Records to columns in one pass: each record is read once (a cache line at a time) and each field is
 * appended to its own column, where numpy's per-field copies would walk the whole batch once per field. */
#include <stdlib.h>
#include <string.h>

#include "columns.h"

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
            const uint8_t *src = rec + off[f];
            switch (size[f]) {          /* constant sizes: one load and one store each */
            case 1: *to[f] = *src; break;
            case 2: memcpy(to[f], src, 2); break;
            case 4: memcpy(to[f], src, 4); break;
            case 8: memcpy(to[f], src, 8); break;
            case 16: memcpy(to[f], src, 16); break;
            default: memcpy(to[f], src, (size_t)size[f]);
            }
            to[f] += size[f];
        }
    }
    free(to);
    return 0;
}
