/* Exact group-by of records on some of their fields (what a SQL GROUP BY over those columns gives). */
#ifndef IBWIRE_GROUP_H
#define IBWIRE_GROUP_H
#include <stdint.h>

#define GROUP_MAX_KEY 128     /* bytes of all key fields together */

/* One group() call: the n records rows[] of rec (NULL: records 0..n-1) grouped on the fields at byte off[f]
 * of size[f] bytes; inverse[], first[] and hashes[] hold n entries each. */
typedef struct {
    const uint8_t *rec;
    int64_t itemsize;
    const int64_t *rows;
    int64_t n;
    const int64_t *off, *size;
    int nfields;
    int64_t *inverse, *first;
    uint64_t *hashes;
} group_job;

/* Writes each row's group number (groups numbered by first appearance) to inverse[], each group's first row
 * (as a position in rows) to first[] and a 64-bit hash of its key to hashes[]; returns the number of groups,
 * or -1 when out of memory. */
int64_t group_records(const group_job *job);

#endif
