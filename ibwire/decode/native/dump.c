/* tshark -V's hex dump of a Data item (print.c, print_hex_data_buffer): for every 16 bytes, the offset in
 * four hex digits, two spaces, the bytes in hex separated by spaces and padded to 47 columns, three spaces,
 * the bytes as ASCII (a dot for anything outside 0x20-0x7e).  A blank line comes before the first. */
#include "dump.h"

#include <stdint.h>
#include <string.h>

const char dumps_doc[] = "dumps(text, show) -> bytes: the marker lines of -V text replaced by tshark's hex dumps";

static int8_t value_of[256];  /* a hex digit's value, -1 for anything else */
static char hex3[256][3];     /* a byte as two hex digits and a space */

static void tables(void)
{
    static const char digits[] = "0123456789abcdef";
    if (hex3[0][0])
        return;
    memset(value_of, -1, sizeof value_of);
    for (int i = 0; i < 16; i++) {
        value_of[(uint8_t)digits[i]] = (int8_t)i;
        value_of[(uint8_t)("0123456789ABCDEF"[i])] = (int8_t)i;
    }
    for (int b = 0; b < 256; b++) {
        hex3[b][0] = digits[b >> 4];
        hex3[b][1] = digits[b & 15];
        hex3[b][2] = ' ';
    }
}

/* Writes the dump of the n bytes whose hex is at h into out; returns the bytes written. */
static size_t dump(const uint8_t *h, size_t n, uint8_t *out)
{
    static const char digits[] = "0123456789abcdef";
    uint8_t *o = out;
    *o++ = '\n';
    for (size_t at = 0; at < n; at += 16) {
        size_t k = n - at < 16 ? n - at : 16;
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
        const uint8_t *q = h + 2 * at;
        for (size_t j = 0; j < k; j++, q += 2) {
            uint8_t b = (uint8_t)(value_of[q[0]] << 4 | value_of[q[1]]);
            memcpy(o + 3 * j, hex3[b], 3);
            ascii[j] = b >= 0x20 && b < 0x7f ? b : '.';
        }
        memset(o + 3 * k, ' ', 50 - 3 * k); /* the hex padded to 47 columns, then three spaces */
        o = ascii + k;
        *o++ = '\n';
    }
    return (size_t)(o - out);
}

PyObject *dumps_py(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer t;
    int show;
    if (!PyArg_ParseTuple(args, "y*p", &t, &show))
        return NULL;
    tables();
    const uint8_t *s = t.buf, *end = s + t.len;
    /* the output's size at most: 32 hex digits become a 73-byte line, and each marker adds a blank line and
     * at most one short last line (80 bytes) */
    size_t cap = 0;
    for (const uint8_t *p = s; p < end; p++)
        if (*p == DUMP_MARK && (p == s || p[-1] == '\n'))
            cap += 80;
    cap += (size_t)t.len * 3;
    PyObject *res = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
    if (!res) {
        PyBuffer_Release(&t);
        return NULL;
    }
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(res);
    const uint8_t *p = s;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *stop = nl ? nl + 1 : end;
        if (*p == DUMP_MARK) {
            const uint8_t *h = p + 1, *he = nl ? nl : end;
            size_t n = (size_t)(he - h) / 2;
            for (const uint8_t *c = h; c < he; c++)
                bad |= value_of[*c] < 0;
            bad |= (he - h) % 2;
            if (bad)
                break;
            if (show)
                o += dump(h, n, o);
        } else {
            memcpy(o, p, (size_t)(stop - p));
            o += stop - p;
        }
        p = stop;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&t);
    if (bad) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_ValueError, "dumps: a marker line holds something other than hex pairs");
        return NULL;
    }
    if (_PyBytes_Resize(&res, (Py_ssize_t)(o - (uint8_t *)PyBytes_AS_STRING(res))) < 0)
        return NULL;
    return res;
}
