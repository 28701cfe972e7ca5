/* Text rendering of records: each row is printed by a small program of literal text and field formats
 * (ibwire/output/program.py compiles them; one program per group of rows that share everything but
 * their per-packet numbers).  Formats: decimal, zero-padded hex, fixed-point time, date-time, duration,
 * IPv4/IPv6/GID address, MAC address. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "render.h"

typedef struct {
    char *p;
    size_t n, cap;
} out_t;

static int reserve(out_t *o, size_t more)
{
    if (o->n + more <= o->cap)
        return 0;
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

static int udec(char *q, uint64_t v)
{
    char t[24];
    int n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int i = 0; i < n; i++)
        q[i] = t[n - 1 - i];
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
        uint64_t fp = v % 1000000000u;
        for (int i = decimals; i < 9; i++)
            fp /= 10;
        q[n++] = '.';
        for (int i = decimals - 1; i >= 0; i--) {
            q[n + i] = (char)('0' + fp % 10);
            fp /= 10;
        }
        n += decimals;
    }
    return n;
}

#define FIELD_TEXT 96       /* room for any one field's text */

/* The field at f printed by `op` into t (a, *w: the op's operands; formats that pad themselves clear *w;
 * TIME subtracts `base` nanoseconds): its length, or -1 for an unknown op. */
static int format_field(int op, const uint8_t *f, unsigned a, unsigned *w, int64_t base, char *t)
{
    int n = 0;
    switch (op) {
    case OP_UDEC:
        n = udec(t, load(f, (int)a));
        break;
    case OP_IDEC: {
        int64_t v = (int64_t)load(f, (int)a);
        if (a == 4)
            v = (int32_t)v;
        if (v < 0) {
            t[n++] = '-';
            v = -v;
        }
        n += udec(t + n, (uint64_t)v);
        break;
    }
    case OP_HEX: {
        uint64_t v = load(f, (int)a);
        int digits = 1;
        while (digits < 16 && (v >> (4 * digits)))
            digits++;
        if (digits < (int)*w)
            digits = (int)*w;
        for (int i = digits - 1; i >= 0; i--) {
            t[i] = "0123456789abcdef"[v & 15];
            v >>= 4;
        }
        n = digits;
        *w = 0;
        break;
    }
    case OP_TIME: {
        int64_t v;
        memcpy(&v, f, 8);
        n = fixed_ns(t, v - base, (int)a);
        break;
    }
    case OP_SPAN: {        /* a duration in nanoseconds, as seconds with a decimals */
        int64_t v;
        memcpy(&v, f, 8);
        n = fixed_ns(t, v, (int)a);
        break;
    }
    case OP_DATE: {        /* a: decimals; w: bit 0 the date too, bit 1 UTC, bit 2 the date alone */
        int64_t v;
        memcpy(&v, f, 8);
        int64_t sec = v >= 0 ? v / 1000000000 : -((-v + 999999999) / 1000000000);
        char fr[32];
        fixed_ns(fr, v - sec * 1000000000, (int)a);      /* "0.xxxxxx" */
        time_t s = (time_t)sec;
        struct tm tm;
        if (*w & 2)
            gmtime_r(&s, &tm);
        else
            localtime_r(&s, &tm);
        n = (int)strftime(t, 40, (*w & 4) ? "%Y-%m-%d" : (*w & 1) ? "%Y-%m-%d %H:%M:%S" : "%H:%M:%S", &tm);
        if (a) {
            memcpy(t + n, fr + 1, (size_t)a + 1);
            n += (int)a + 1;
        }
        *w = 0;
        break;
    }
    case OP_ADDR: {        /* w: 1 always IPv6 (a GID; IPv4-mapped as ::ffff:a.b.c.d), else IPv4 if mapped */
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!(*w & 1) && !memcmp(f, mapped, 12))
            inet_ntop(AF_INET, f + 12, t, FIELD_TEXT);
        else
            inet_ntop(AF_INET6, f, t, FIELD_TEXT);
        n = (int)strlen(t);
        *w = 0;
        break;
    }
    case OP_MAC:
        for (int i = 0; i < 6; i++) {
            t[n++] = "0123456789abcdef"[f[i] >> 4];
            t[n++] = "0123456789abcdef"[f[i] & 15];
            if (i < 5)
                t[n++] = ':';
        }
        break;
    default:
        return -1;
    }
    return n;
}

int render_rows(const render_job *j, char **result, size_t *result_len)
{
    out_t o = {NULL, 0, 0};
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
            unsigned off = pc[0] | pc[1] << 8, a = pc[2], w = pc[3];
            pc += 4;
            int n = format_field(op, r + off, a, &w, base, t);
            if (n < 0) {
                free(o.p);
                return -2;
            }
            if (pad_left(&o, t, n, (int)w) < 0)
                goto fail;
        }
    }
    *result = o.p;
    *result_len = o.n;
    return 0;
fail:
    free(o.p);
    return -1;
}
