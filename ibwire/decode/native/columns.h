/* Records to columns: the per-field arrays Arrow and Parquet take, in one pass over the records. */
#ifndef IBWIRE_COLUMNS_H
#define IBWIRE_COLUMNS_H
#include <stdint.h>

/* Copy field f (size[f] bytes at byte off[f]) of each of the n records (itemsize bytes apart) to
 * out + n * start_f + i * size[f], where start_f is the sum of the sizes of the fields before f.
 * Returns 0, or -1 when out of memory. */
int split_columns(const uint8_t *rec, int64_t itemsize, int64_t n, const int64_t *off, const int64_t *size,
                   int nfields, uint8_t *out);

/* Copy the fields (size[f] bytes at byte off[f]) of the records rows[0..n) (NULL: the first n) to out, one
 * after another in field order: records of sum(size) bytes, packed. */
void pick_fields(const uint8_t *rec, int64_t itemsize, const int64_t *rows, int64_t n, const int64_t *off,
                 const int64_t *size, int nfields, uint8_t *out);

#endif
