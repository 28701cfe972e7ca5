/* Records -> text by per-group programs (render.c); opcodes shared with ibwire/report/packets/program.py. */
#ifndef IBWIRE_RENDER_H
#define IBWIRE_RENDER_H
#include <stddef.h>
#include <stdint.h>

/* Each op but OP_LIT is followed by: u16 byte offset in the record, u8 a, u8 width (left space padding).
 * OP_LIT: u16 length, then the bytes.  a = field size for UDEC/IDEC/HEX (HEX: width = minimum digits,
 * zero-padded), decimals for TIME/DATE/SPAN (on i8 nanoseconds; SPAN: a duration, no base).  DATE's width: bit 0
 * the date too, bit 1 in UTC instead of local time, bit 2 the date alone.  ADDR's width: bit 0 always IPv6. */
enum { OP_LIT, OP_UDEC, OP_IDEC, OP_HEX, OP_TIME, OP_DATE, OP_ADDR, OP_MAC, OP_SPAN, OP_REPR };
/* OP_REPR: an i8 of nanoseconds as Python's repr() of its seconds (a float: "1e-06", "0.25", "2.0"). */

/* Ops on the row's frame bytes (its captured packet), each followed by: u16 at, u8 a, u8 b, u8 c, u8 d.  A
 * position with bit 15 set counts back from the frame's end.  FINT: a big-endian integer of `a` bytes at `at`
 * (little-endian when a's bit 7 is set),
 * shifted right by b and kept to c bits, in decimal (d = 0) or as d or more zero-padded hex digits.  FHEX:
 * the bytes from at to the position b | c << 8, as hex pairs joined by the character d (0: none).  FIP4,
 * FIP6, FMAC: the address at `at` (IPv6 as inet_ntop writes it).  Nothing is printed where the frame is
 * shorter than the op reads.  DATE's width bit 3: tshark's frame.time ("Aug  5, 2025 07:41:54.194697000 UTC"). */
enum { OP_FINT = 10, OP_FHEX, OP_FIP4, OP_FIP6, OP_FMAC, OP_LAST = OP_FMAC };

/* One render() call: rows[k] of rec (itemsize bytes a record) printed by program progs[prog_of[k]] (prog_len
 * bytes); TIME prints the row's i8 nanoseconds minus base[k] (base may be NULL); frame ops read row k's frame. */
typedef struct {
    const uint8_t *rec;
    int64_t itemsize;
    const int64_t *rows;
    int64_t nrows;
    const int32_t *prog_of;
    const uint8_t *const *progs;
    const int64_t *prog_len;
    const int64_t *base;
    const uint8_t *buf;     /* frame bytes: row k's frame is buf[fstart[k]], flen[k] bytes (NULL: no frame ops) */
    const int64_t *fstart;
    const int64_t *flen;
    int dumps;              /* a payload's hex on a -V dump marker line printed as tshark's dump (native/dump.c) */
    char *into;             /* the caller's buffer of into_cap bytes to render into (NULL: the kept one) */
    size_t into_cap;
} render_job;

/* *result lies in the caller's buffer `into`, else in a buffer kept for the calling thread's next call (never
 * free it; copy it before calling again).  Returns 0, -1 out of memory, -2 a bad program, -3 `into` too small. */
int render_rows(const render_job *job, char **result, size_t *result_len);
#endif
