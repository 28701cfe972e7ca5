/* Records -> text by per-group programs (render.c); opcodes shared with ibwire/output/program.py. */
#ifndef IBWIRE_RENDER_H
#define IBWIRE_RENDER_H
#include <stddef.h>
#include <stdint.h>

/* Each op but OP_LIT is followed by: u16 byte offset in the record, u8 a, u8 width (left space padding).
 * OP_LIT: u16 length, then the bytes.  a = field size for UDEC/IDEC/HEX (HEX: width = minimum digits,
 * zero-padded), decimals for TIME/DATE/SPAN (on i8 nanoseconds; SPAN: a duration, no base).  DATE's width: bit 0
 * the date too, bit 1 in UTC instead of local time, bit 2 the date alone.  ADDR's width: bit 0 always IPv6. */
enum { OP_LIT, OP_UDEC, OP_IDEC, OP_HEX, OP_TIME, OP_DATE, OP_ADDR, OP_MAC, OP_SPAN };

/* One render() call: rows[k] of rec (itemsize bytes a record) printed by program progs[prog_of[k]] (prog_len
 * bytes); TIME prints the row's i8 nanoseconds minus base[k] (base may be NULL). */
typedef struct {
    const uint8_t *rec;
    int64_t itemsize;
    const int64_t *rows;
    int64_t nrows;
    const int32_t *prog_of;
    const uint8_t *const *progs;
    const int64_t *prog_len;
    const int64_t *base;
} render_job;

/* *result is malloc'ed.  Returns 0, -1 out of memory, -2 a bad program. */
int render_rows(const render_job *job, char **result, size_t *result_len);
#endif
