/* Text rendering of records: each row is printed by a small program of literal text and field formats
 * (ibwire/report/packets/program.py compiles them; one program per group of rows that share everything but
 * their per-packet numbers).  Formats: decimal, zero-padded hex, fixed-point time, date-time, duration,
 * IPv4/IPv6/GID address, MAC address; of the frame's own bytes: integers and bit fields, hex runs, addresses. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dump.h"
#include "render.h"

typedef struct {
    char *p;
    size_t n, cap;
    int fixed, full;  /* the caller's buffer (never grown), and whether it ran out */
} out_t;

static int reserve(out_t *o, size_t more)
{
    if (o->n + more <= o->cap)
        return 0;
    if (o->fixed) {
        o->full = 1;
        return -1;
    }
    size_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->n + more)
        cap *= 2;
    char *q = realloc(o->p, cap);
    if (!q)
        return -1;
    o->p = q;
    o->cap = cap;
    return 0;
}

static uint64_t load(const uint8_t *r, int size)
{
    uint8_t a;
    uint16_t b;
    uint32_t c;
    uint64_t d;
    switch (size) {
    case 1: memcpy(&a, r, 1); return a;
    case 2: memcpy(&b, r, 2); return b;
    case 4: memcpy(&c, r, 4); return c;
    default: memcpy(&d, r, 8); return d;
    }
}

static char DIG2[100][2];          /* each number below 100 as two digits (filled by render_rows) */

/* Decimal digits of v. */
static inline int ndigits(uint64_t v)
{
    for (int n = 1;; n += 4) {
        if (v < 10)
            return n;
        if (v < 100)
            return n + 1;
        if (v < 1000)
            return n + 2;
        if (v < 10000)
            return n + 3;
        v /= 10000;
    }
}

/* The last n decimal digits of v, zero-padded, at q (two digits a division, in 32 bits when v fits). */
static inline void digits(char *q, uint64_t v, int n)
{
    char *e = q + n;
    if (v >> 32) {
        for (; n >= 2; n -= 2, v /= 100) {
            e -= 2;
            memcpy(e, DIG2[v % 100], 2);
        }
        if (n)
            e[-1] = (char)('0' + v % 10);
        return;
    }
    uint32_t w = (uint32_t)v;
    for (; n >= 2; n -= 2, w /= 100) {
        e -= 2;
        memcpy(e, DIG2[w % 100], 2);
    }
    if (n)
        e[-1] = (char)('0' + w % 10);
}

static int udec(char *q, uint64_t v)
{
    int n = ndigits(v);
    digits(q, v, n);
    return n;
}

static int pad_left(out_t *o, const char *s, int n, int width)
{
    if (reserve(o, (size_t)(n > width ? n : width)) < 0)
        return -1;
    for (int i = n; i < width; i++)
        o->p[o->n++] = ' ';
    memcpy(o->p + o->n, s, (size_t)n);
    o->n += (size_t)n;
    return 0;
}

/* ns nanoseconds as seconds with `decimals` digits (truncated, as tshark prints times) */
static int fixed_ns(char *q, int64_t ns, int decimals)
{
    int n = 0;
    uint64_t v = ns < 0 ? (uint64_t)(-ns) : (uint64_t)ns;
    if (ns < 0)
        q[n++] = '-';
    n += udec(q + n, v / 1000000000u);
    if (decimals > 0) {
        static const uint32_t down[10] = {1000000000, 100000000, 10000000, 1000000, 100000, 10000, 1000, 100, 10, 1};
        q[n++] = '.';
        digits(q + n, v % 1000000000u / down[decimals < 9 ? decimals : 9], decimals);
        n += decimals;
    }
    return n;
}

#define FIELD_TEXT 96       /* room for any one field's text */

/* x as Python's repr() writes a float: the fewest digits that read back as x, in fixed notation when its
 * decimal exponent is in [-4, 16), else as d.ddde±XX; a whole number in fixed notation ends in ".0". */
static int float_repr(char *t, double x)
{
    char e[40];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, x);
    char *ep = strchr(e, 'e');
    if (!ep)
        return (int)strlen(strcpy(t, e));              /* inf, nan */
    int exp = atoi(ep + 1);
    if (exp < -4 || exp >= 16) {
        char mant[32];
        size_t m = (size_t)(ep - e);
        memcpy(mant, e, m);
        mant[m] = 0;
        return snprintf(t, FIELD_TEXT, "%se%c%02d", mant, exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    int decimals = p - 1 - exp;
    int n = snprintf(t, FIELD_TEXT, "%.*f", decimals > 0 ? decimals : 0, x);
    if (decimals <= 0) {
        memcpy(t + n, ".0", 3);
        n += 2;
    }
    return n;
}

/* A signed integer of a bytes (1, 2, 4 or 8) at f in decimal. */
static int idec(char *t, const uint8_t *f, unsigned a)
{
    int n = 0;
    int64_t v = (int64_t)load(f, (int)a);
    if (a == 4)
        v = (int32_t)v;
    if (v < 0) {
        t[n++] = '-';
        v = -v;
    }
    return n + udec(t + n, (uint64_t)v);
}

/* v in lower-case hex with at least `digits` digits, zero-padded. */
static int hex_min(char *t, uint64_t v, int digits)
{
    int n = 1;
    while (n < 16 && (v >> (4 * n)))
        n++;
    if (n < digits)
        n = digits;
    for (int i = n - 1; i >= 0; i--) {
        t[i] = "0123456789abcdef"[v & 15];
        v >>= 4;
    }
    return n;
}

/* v nanoseconds since the epoch as a date and/or time with `decimals` digits of the second; w: bit 0 the
 * date too, bit 1 UTC instead of local time, bit 2 the date alone, bit 3 tshark's frame.time ("Aug  5, 2025
 * 07:41:54.194697000 UTC"). */
static int date_time(char *t, int64_t v, unsigned decimals, unsigned w)
{
    int64_t sec = v >= 0 ? v / 1000000000 : -((-v + 999999999) / 1000000000);
    char fr[32];
    fixed_ns(fr, v - sec * 1000000000, (int)decimals);      /* "0.xxxxxx" */
    time_t s = (time_t)sec;
    struct tm tm;
    if (w & 2)
        gmtime_r(&s, &tm);
    else
        localtime_r(&s, &tm);
    const char *form = (w & 8) ? "%b %e, %Y %H:%M:%S" : (w & 4) ? "%Y-%m-%d" : (w & 1) ? "%Y-%m-%d %H:%M:%S" : "%H:%M:%S";
    int n = (int)strftime(t, 40, form, &tm);
    if (decimals) {
        memcpy(t + n, fr + 1, (size_t)decimals + 1);
        n += (int)decimals + 1;
    }
    if (w & 8) {
        t[n++] = ' ';
        n += (int)strftime(t + n, 16, "%Z", &tm);
    }
    return n;
}

/* The 16-byte address at f: IPv4 when it is IPv4-mapped and w's bit 0 is clear, else IPv6 (a GID). */
static int address(char *t, const uint8_t *f, unsigned w)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!(w & 1) && !memcmp(f, mapped, 12))
        inet_ntop(AF_INET, f + 12, t, FIELD_TEXT);
    else
        inet_ntop(AF_INET6, f, t, FIELD_TEXT);
    return (int)strlen(t);
}

/* The 6-byte MAC address at f as aa:bb:cc:dd:ee:ff. */
static int mac(char *t, const uint8_t *f)
{
    int n = 0;
    for (int i = 0; i < 6; i++) {
        t[n++] = "0123456789abcdef"[f[i] >> 4];
        t[n++] = "0123456789abcdef"[f[i] & 15];
        if (i < 5)
            t[n++] = ':';
    }
    return n;
}

static int64_t i8_at(const uint8_t *f)
{
    int64_t v;
    memcpy(&v, f, 8);
    return v;
}

/* The field at f printed by `op` into t (a, *w: the op's operands; formats that pad themselves clear *w;
 * TIME subtracts `base` nanoseconds): its length, or -1 for an unknown op. */
static int format_field(int op, const uint8_t *f, unsigned a, unsigned *w, int64_t base, char *t)
{
    int n;
    switch (op) {
    case OP_UDEC: return udec(t, load(f, (int)a));
    case OP_IDEC: return idec(t, f, a);
    case OP_HEX:
        n = hex_min(t, load(f, (int)a), (int)*w);
        *w = 0;
        return n;
    case OP_TIME: return fixed_ns(t, i8_at(f) - base, (int)a);
    case OP_SPAN: return fixed_ns(t, i8_at(f), (int)a);       /* a duration in nanoseconds */
    case OP_DATE:
        n = date_time(t, i8_at(f), a, *w);
        *w = 0;
        return n;
    case OP_ADDR:
        n = address(t, f, *w);
        *w = 0;
        return n;
    case OP_REPR: return float_repr(t, (double)i8_at(f) / 1e9);
    case OP_MAC: return mac(t, f);
    default: return -1;
    }
}

static const char HEXD[] = "0123456789abcdef";
static char HEX2[256][2];          /* each byte's two hex digits (filled by render_rows) */

/* A frame position: at, or (bit 15 set) counted back from the end of a frame of n bytes. */
static int64_t frame_pos(unsigned at, int64_t n)
{
    return (at & 0x8000) ? n - (int64_t)(at & 0x7fff) : (int64_t)at;
}

/* A frame op (OP_FINT … OP_FMAC) on frame f of n bytes into o; operands q[0..5]. */
static int frame_field(out_t *o, int op, const uint8_t *q, const uint8_t *f, int64_t n)
{
    int64_t at = frame_pos(q[0] | q[1] << 8, n);
    unsigned a = q[2], b = q[3], c = q[4], d = q[5];
    char t[FIELD_TEXT];
    int len = 0;
    if (op == OP_FHEX) {
        int64_t stop = frame_pos(b | c << 8, n);
        if (stop > n)
            stop = n;
        if (at < 0 || stop <= at)
            return 0;
        if (reserve(o, (size_t)(stop - at) * 3) < 0)
            return -1;
        char *q = o->p + o->n;
        *q++ = HEXD[f[at] >> 4];
        *q++ = HEXD[f[at] & 15];
        for (int64_t i = at + 1; i < stop; i++) {
            if (d)
                *q++ = (char)d;
            memcpy(q, HEX2[f[i]], 2);
            q += 2;
        }
        o->n = (size_t)(q - o->p);
        return 0;
    }
    int little = op == OP_FINT && (a & 0x80);
    a &= 0x7f;
    int64_t need = op == OP_FINT ? a : op == OP_FIP4 ? 4 : op == OP_FIP6 ? 16 : 6;
    if (at < 0 || at + need > n)
        return 0;
    f += at;
    if (op == OP_FINT) {
        uint64_t v = 0;
        for (unsigned i = 0; i < a; i++)
            v = v << 8 | f[little ? a - 1 - i : i];
        v >>= b;
        if (c < 64)
            v &= (UINT64_C(1) << c) - 1;
        if (!d)
            len = udec(t, v);
        else {
            int digits = 1;
            while (digits < 16 && (v >> (4 * digits)))
                digits++;
            if (digits < (int)d)
                digits = (int)d;
            for (int i = digits - 1; i >= 0; i--, v >>= 4)
                t[i] = HEXD[v & 15];
            len = digits;
        }
    } else if (op == OP_FIP4)
        len = snprintf(t, sizeof t, "%u.%u.%u.%u", f[0], f[1], f[2], f[3]);
    else if (op == OP_FIP6) {
        inet_ntop(AF_INET6, f, t, FIELD_TEXT);
        len = (int)strlen(t);
    } else
        for (int i = 0; i < 6; i++) {
            t[len++] = HEXD[f[i] >> 4];
            t[len++] = HEXD[f[i] & 15];
            if (i < 5)
                t[len++] = ':';
        }
    return pad_left(o, t, len, 0);
}

/* -V's marker line of a payload (a line holding DUMP_MARK and then the hex an OP_FHEX prints, ended by the
 * next literal's newline) written as tshark's dump of those bytes instead: 1 when it was, 0 when the op at
 * q is not the whole of such a line, -1 out of memory.  The caller skips the op and that newline. */
static int dump_line(out_t *o, int op, const uint8_t *q, const uint8_t *end, const uint8_t *f, int64_t n)
{
    const uint8_t *next = q + 6;
    if (op != OP_FHEX || q[5] || o->n < 2 || o->p[o->n - 1] != DUMP_MARK || o->p[o->n - 2] != '\n')
        return 0;
    if (next + 4 > end || next[0] != OP_LIT || !(next[1] | next[2] << 8) || next[3] != '\n')
        return 0;
    int64_t at = frame_pos(q[0] | q[1] << 8, n), stop = frame_pos(q[3] | q[4] << 8, n);
    if (stop > n)
        stop = n;
    if (at < 0 || stop <= at)
        return 0;
    o->n--;  /* the marker */
    if (reserve(o, dump_size((size_t)(stop - at))) < 0)
        return -1;
    o->n += dump_bytes(f + at, (size_t)(stop - at), (uint8_t *)o->p + o->n);
    return 1;
}

static void fill_tables(void)
{
    for (int b = 0; b < 256; b++) {
        HEX2[b][0] = HEXD[b >> 4];
        HEX2[b][1] = HEXD[b & 15];
    }
    for (int b = 0; b < 100; b++) {
        DIG2[b][0] = (char)('0' + b / 10);
        DIG2[b][1] = (char)('0' + b % 10);
    }
}

int render_rows(const render_job *j, char **result, size_t *result_len)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;  /* (threads render parts of a batch at once) */
    pthread_once(&once, fill_tables);
    static __thread out_t kept;        /* the last call's buffer: no fresh pages to fault in per batch */
    out_t o = kept;
    o.n = 0;
    if (j->into)
        o = (out_t){j->into, 0, j->into_cap, 1, 0};
    char t[FIELD_TEXT];
    for (int64_t k = 0; k < j->nrows; k++) {
        const uint8_t *r = j->rec + j->rows[k] * j->itemsize;
        const uint8_t *pc = j->progs[j->prog_of[k]], *end = pc + j->prog_len[j->prog_of[k]];
        int64_t base = j->base ? j->base[k] : 0;
        while (pc < end) {
            int op = *pc++;
            if (op == OP_LIT) {
                unsigned len = pc[0] | pc[1] << 8;
                pc += 2;
                if (reserve(&o, len) < 0)
                    goto fail;
                memcpy(o.p + o.n, pc, len);
                o.n += len;
                pc += len;
                continue;
            }
            if (op >= OP_FINT) {
                if (!j->buf || op > OP_LAST) {
                    if (!o.fixed)
                        kept = o;
                    return -2;
                }
                int dumped = j->dumps ? dump_line(&o, op, pc, end, j->buf + j->fstart[k], j->flen[k]) : 0;
                if (dumped < 0 || (!dumped && frame_field(&o, op, pc, j->buf + j->fstart[k], j->flen[k]) < 0))
                    goto fail;
                pc += dumped ? 6 + 3 : 6;  /* a dump also takes the newline that ended the marker line */
                if (dumped && pc[-2] | pc[-1] << 8) {  /* that literal had more after its newline */
                    unsigned len = (unsigned)(pc[-2] | pc[-1] << 8) - 1;
                    if (reserve(&o, len) < 0)
                        goto fail;
                    memcpy(o.p + o.n, pc + 1, len);
                    o.n += len;
                    pc += len + 1;
                }
                continue;
            }
            unsigned off = pc[0] | pc[1] << 8, a = pc[2], w = pc[3];
            pc += 4;
            int n = format_field(op, r + off, a, &w, base, t);
            if (n < 0) {
                if (!o.fixed)
                    kept = o;
                return -2;
            }
            if (pad_left(&o, t, n, (int)w) < 0)
                goto fail;
        }
    }
    if (!o.fixed)
        kept = o;
    *result = o.p;
    *result_len = o.n;
    return 0;
fail:
    if (!o.fixed)
        kept = o;
    return o.full ? -3 : -1;
}
