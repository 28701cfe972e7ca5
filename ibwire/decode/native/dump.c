/* tshark -V's hex dump of a Data item (print.c, print_hex_data_buffer): for every 16 bytes, the offset in
 * four hex digits, two spaces, the bytes in hex separated by spaces and padded to 47 columns, three spaces,
 * the bytes as ASCII (a dot for anything outside 0x20-0x7e).  A blank line comes before the first. */
#include "dump.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

const char dumps_doc[] = "dumps(text, show, out) -> n: text with its marker lines replaced by tshark's hex dumps written "
                         "to the writable buffer out (n bytes), or -size when out is smaller than it must be";

static int16_t pair_of[65536];  /* two hex digits (first in the high byte) -> their byte, -1 if not hex */
static char hex3[256][4];       /* a byte as two hex digits and a space */

static void fill_tables(void)
{
    static const char digits[] = "0123456789abcdef";
    static int8_t value_of[256];
    memset(value_of, -1, sizeof value_of);
    for (int i = 0; i < 16; i++) {
        value_of[(uint8_t)digits[i]] = (int8_t)i;
        value_of[(uint8_t)("0123456789ABCDEF"[i])] = (int8_t)i;
    }
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++)
            pair_of[a << 8 | b] = value_of[a] < 0 || value_of[b] < 0 ? -1 : (int16_t)(value_of[a] << 4 | value_of[b]);
    for (int b = 0; b < 256; b++) {
        hex3[b][0] = digits[b >> 4];
        hex3[b][1] = digits[b & 15];
        hex3[b][2] = ' ';
        hex3[b][3] = ' ';
    }
}

/* The tables, filled once whichever thread (render's, the writer's) comes first. */
static void tables(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_tables);
}

/* The bytes dump() writes for n bytes: a blank line, 73 per 16 bytes, 57 and one per byte for a shorter
 * last line, the offset's digits beyond four. */
size_t dump_size(size_t n)
{
    size_t wide = 0;
    for (size_t at = 0x10000; at < n; at += 16)
        wide += (size_t)snprintf(NULL, 0, "%zx", at) - 4;
    return 1 + n / 16 * 73 + (n % 16 ? 57 + n % 16 : 0) + wide;
}

/* 1 when the 2n characters at h are hex digits, else 0. */
static size_t hex_pairs(const uint8_t *h, size_t n)
{
    int16_t any = 0;
    for (size_t j = 0; j < n; j++)
        any |= pair_of[h[2 * j] << 8 | h[2 * j + 1]];
    return any >= 0;
}

/* One dump line: the offset, the k (<= 16) bytes at b in hex padded to 47 columns, three spaces, their
 * ASCII, a newline; returns the end of what it wrote. */
static uint8_t *line(uint8_t *o, size_t at, const uint8_t *b, size_t k)
{
    static const char digits[] = "0123456789abcdef";
    if (at > 0xffff) {
        o += sprintf((char *)o, "%04zx", at);
    } else {
        o[0] = (uint8_t)digits[at >> 12 & 15];
        o[1] = (uint8_t)digits[at >> 8 & 15];
        o[2] = (uint8_t)digits[at >> 4 & 15];
        o[3] = (uint8_t)digits[at & 15];
        o += 4;
    }
    o[0] = o[1] = ' ';
    o += 2;
    uint8_t *ascii = o + 50;
    for (size_t j = 0; j < k; j++) {
        memcpy(o + 3 * j, hex3[b[j]], 4); /* its fourth byte is the next's first, or padding */
        ascii[j] = b[j] >= 0x20 && b[j] < 0x7f ? b[j] : '.';
    }
    memset(o + 3 * k, ' ', 50 - 3 * k);
    o = ascii + k;
    *o++ = '\n';
    return o;
}

size_t dump_bytes(const uint8_t *b, size_t n, uint8_t *out)
{
    tables();
    uint8_t *o = out;
    *o++ = '\n';
    for (size_t at = 0; at < n; at += 16)
        o = line(o, at, b + at, n - at < 16 ? n - at : 16);
    return (size_t)(o - out);
}

/* Writes the dump of the n bytes whose hex is at h into out; returns the bytes written, or 0 when h holds
 * something other than hex digits. */
static size_t dump(const uint8_t *h, size_t n, uint8_t *out)
{
    uint8_t *o = out, b[16];
    int16_t any = 0;
    *o++ = '\n';
    for (size_t at = 0; at < n; at += 16) {
        size_t k = n - at < 16 ? n - at : 16;
        for (size_t j = 0; j < k; j++) {
            int16_t v = pair_of[h[2 * (at + j)] << 8 | h[2 * (at + j) + 1]];
            any |= v;
            b[j] = (uint8_t)v;
        }
        o = line(o, at, b, k);
    }
    return any < 0 ? 0 : (size_t)(o - out);
}

/* The first marker line that starts at or after p (NULL: none). */
static const uint8_t *next_mark(const uint8_t *s, const uint8_t *p, const uint8_t *end)
{
    const uint8_t *m = memchr(p, DUMP_MARK, (size_t)(end - p));
    while (m && m > s && m[-1] != '\n')
        m = memchr(m + 1, DUMP_MARK, (size_t)(end - m - 1));
    return m;
}

PyObject *dumps_py(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer t, b;
    int show;
    if (!PyArg_ParseTuple(args, "y*pw*", &t, &show, &b))
        return NULL;
    tables();
    const uint8_t *s = t.buf, *end = s + t.len;
    /* the output's size: each marker line gives way to its dump (with show) or to nothing */
    size_t cap = (size_t)t.len;
    for (const uint8_t *m = next_mark(s, s, end); m; m = next_mark(s, m + 1, end)) {
        const uint8_t *nl = memchr(m, '\n', (size_t)(end - m)), *stop = nl ? nl + 1 : end;
        size_t n = (size_t)(stop - m - 1 - (nl != NULL)) / 2;
        cap -= (size_t)(stop - m);
        if (show)
            cap += dump_size(n);
    }
    if (cap > (size_t)b.len) {  /* the caller's buffer is too small: how much it needs */
        PyBuffer_Release(&t);
        PyBuffer_Release(&b);
        return PyLong_FromSsize_t(-(Py_ssize_t)cap);
    }
    uint8_t *o = b.buf;
    const uint8_t *p = s;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    while (p < end) {
        const uint8_t *m = next_mark(s, p, end), *upto = m ? m : end;
        memcpy(o, p, (size_t)(upto - p));  /* the text up to the marker, whole */
        o += upto - p;
        if (!m)
            break;
        const uint8_t *h = m + 1, *nl = memchr(h, '\n', (size_t)(end - h)), *he = nl ? nl : end;
        size_t n = (size_t)(he - h) / 2, wrote = (he - h) % 2 ? 0 : show ? dump(h, n, o) : hex_pairs(h, n);
        if (!wrote) {
            bad = 1;
            break;
        }
        if (show)
            o += wrote;
        p = nl ? nl + 1 : end;
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t n = (Py_ssize_t)(o - (uint8_t *)b.buf);
    PyBuffer_Release(&t);
    PyBuffer_Release(&b);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "dumps: a marker line holds something other than hex pairs");
        return NULL;
    }
    return PyLong_FromSsize_t(n);
}
