/* The fast path's three sequential loops, compiled: following pcap record lengths and the per-packet
 * CRCs (ICRC: CRC-32 via zlib's polynomial, folded with PCLMULQDQ where the CPU has it; VCRC: a table-driven CRC-16 whose table the caller passes in).
 *
 * Everything vectorisable stays in numpy (the Python modules beside this file); these functions only take buffers
 * (numpy arrays, bytes, memoryviews) and fill caller-allocated output arrays, so no numpy C API is
 * needed.  Layout of a pcap record header: pcap(5) -- ts_sec, ts_frac, incl_len, orig_len (u32 each).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CLMUL_PATH 1
#endif

#define MAX_RECORD 0x4000000u
enum { OK = 0, NEED = 1, IMPOSSIBLE = 2 };

typedef struct { Py_buffer v; int held; } buf_t;

static int get(PyObject *o, buf_t *b, int writable, Py_ssize_t itemsize, const char *what)
{
    if (PyObject_GetBuffer(o, &b->v, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    b->held = 1;
    if (itemsize && b->v.len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: length is not a multiple of %zd bytes", what, itemsize);
        return -1;
    }
    return 0;
}

static void release(buf_t *b, int n)
{
    for (int i = 0; i < n; i++)
        if (b[i].held)
            PyBuffer_Release(&b[i].v);
}

static inline uint32_t rd32(const uint8_t *p, int big)
{
    return big ? ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3])
               : ((uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0]);
}

/* CRC-32 (the zlib/Ethernet polynomial, reflected) by carry-less multiplication where the CPU has it:
 * the folding method of Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction" (Intel, 2009), with the constants published there for this polynomial.  Four 128-bit lanes
 * fold 64 bytes at a time, then fold to one lane, reduce to 64 and 32 bits, Barrett-reduce.  It works on
 * the raw CRC register (zlib's value inverted); the last len % 16 bytes and short inputs go to zlib. */
#ifdef HAVE_CLMUL_PATH
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(uint32_t raw, const uint8_t *p, size_t len)   /* len >= 64, len % 16 == 0 */
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)raw));
    p += 64;
    len -= 64;
#define FOLD(x, k, next) \
    x = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next)
    while (len >= 64) {
        FOLD(x1, k1k2, _mm_loadu_si128((const __m128i *)(p + 0x00)));
        FOLD(x2, k1k2, _mm_loadu_si128((const __m128i *)(p + 0x10)));
        FOLD(x3, k1k2, _mm_loadu_si128((const __m128i *)(p + 0x20)));
        FOLD(x4, k1k2, _mm_loadu_si128((const __m128i *)(p + 0x30)));
        p += 64;
        len -= 64;
    }
    FOLD(x1, k3k4, x2);
    FOLD(x1, k3k4, x3);
    FOLD(x1, k3k4, x4);
    while (len >= 16) {
        FOLD(x1, k3k4, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
#undef FOLD
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);                  /* 128 -> 64 bits */
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);                                  /* 64 -> 32 bits */
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), x2);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);   /* Barrett reduction */
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, x2), 1);
}

static int have_clmul;
#endif

/* zlib-compatible crc32(c, p, len) for any length. */
static uint32_t crc32_any(uint32_t c, const uint8_t *p, size_t len)
{
#ifdef HAVE_CLMUL_PATH
    if (have_clmul && len >= 64) {
        size_t bulk = len & ~(size_t)15;
        c = ~crc32_clmul(~c, p, bulk);
        p += bulk;
        len -= bulk;
    }
#endif
    while (len > 0) {                            /* zlib's uInt is 32-bit: feed huge spans in pieces */
        uInt k = len > 0x40000000 ? 0x40000000 : (uInt)len;
        c = (uint32_t)crc32(c, p, k);
        p += k;
        len -= k;
    }
    return c;
}

PyDoc_STRVAR(crc32_doc,
"crc32(data, value=0) -> int\n\n"
"CRC-32 of a buffer, the same function as zlib.crc32 (exposed so tests can check the compiled path).");

static PyObject *crc32_py(PyObject *self, PyObject *args)
{
    Py_buffer v;
    unsigned int c = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &v, &c))
        return NULL;
    uint32_t r = crc32_any(c, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(r);
}

PyDoc_STRVAR(walk_pcap_doc,
"walk_pcap(buf, off, big, offsets) -> (n, next_off, status)\n\n"
"Follow pcap record lengths from byte `off` of `buf`, writing up to len(offsets) record offsets into\n"
"the int64 array `offsets`.  status: 0 the array is full, 1 the next record does not fit in buf,\n"
"2 the next record's captured length is impossible (damage); next_off is where that record starts.");

static PyObject *walk_pcap(PyObject *self, PyObject *args)
{
    PyObject *bo, *oo;
    Py_ssize_t off;
    int big;
    buf_t b[2];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "OnpO", &bo, &off, &big, &oo))
        return NULL;
    if (get(bo, &b[0], 0, 0, "buf") < 0 || get(oo, &b[1], 1, 8, "offsets") < 0) {
        release(b, 2);
        return NULL;
    }
    const uint8_t *p = b[0].v.buf;
    Py_ssize_t size = b[0].v.len, max_n = b[1].v.len / 8, n = 0;
    int64_t *out = b[1].v.buf;
    int status = OK;
    if (off < 0)
        off = 0;
    while (n < max_n) {
        if (off + 16 > size) { status = NEED; break; }
        uint32_t incl = rd32(p + off + 8, big);
        if (incl > MAX_RECORD) { status = IMPOSSIBLE; break; }
        if (off + 16 + (Py_ssize_t)incl > size) { status = NEED; break; }
        out[n++] = off;
        off += 16 + incl;
    }
    release(b, 2);
    return Py_BuildValue("nni", n, off, status);
}

PyDoc_STRVAR(icrc_spans_doc,
"icrc_spans(buf, start, end, lrh_vl, ones8, grh, ip4, udp, bth, out)\n\n"
"Invariant CRC (IBA Vol 1 section 7.8.1; RoCE Annexes A16/A17) of buf[start[i]:end[i]] into the uint32\n"
"array `out`: zlib's CRC-32 after setting the variant fields to ones.  The other int64 arrays give,\n"
"per packet, the absolute offset of each header whose variant fields are masked, or -1 when absent:\n"
"  lrh_vl  an LRH whose VL (high nibble of byte 0) is variant (local IB packets),\n"
"  ones8   8 bytes replaced by ones entirely (the LRH of routed packets, the pseudo-LRH of RoCE),\n"
"  grh     a GRH or IPv6 header: traffic class low nibble of byte 0, bytes 1-3 (traffic class,\n"
"          flow label), byte 7 (hop limit),\n"
"  ip4     an IPv4 header: byte 1 (DSCP/ECN), byte 8 (TTL), bytes 10-11 (checksum),\n"
"  udp     a UDP header: bytes 6-7 (checksum),\n"
"  bth     the BTH: byte 4 (resv8a).\n"
"Every masked byte must lie in the first 128 bytes of the span; spans outside buf give 0.");

#define MASKED 128

static inline void ones(uint8_t *t, int64_t at, int64_t h, uint8_t bits)
{
    if (at >= 0 && at < h)
        t[at] |= bits;
}

static PyObject *icrc_spans(PyObject *self, PyObject *args)
{
    PyObject *o[10];
    buf_t b[10];
    memset(b, 0, sizeof b);
    static const char *names[10] = {"buf", "start", "end", "lrh_vl", "ones8", "grh", "ip4", "udp", "bth", "out"};
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &o[9]))
        return NULL;
    for (int k = 0; k < 10; k++)
        if (get(o[k], &b[k], k == 9, k == 0 ? 0 : k == 9 ? 4 : 8, names[k]) < 0) {
            release(b, 10);
            return NULL;
        }
    Py_ssize_t n = b[9].v.len / 4;
    for (int k = 1; k < 9; k++)
        if (b[k].v.len / 8 < n) {
            release(b, 10);
            PyErr_Format(PyExc_ValueError, "icrc_spans: %s is shorter than out", names[k]);
            return NULL;
        }
    const uint8_t *p = b[0].v.buf;
    const int64_t *s = b[1].v.buf, *e = b[2].v.buf, *vl = b[3].v.buf, *o8 = b[4].v.buf, *grh = b[5].v.buf,
                  *ip4 = b[6].v.buf, *udp = b[7].v.buf, *bth = b[8].v.buf;
    uint32_t *out = b[9].v.buf;
    Py_ssize_t size = b[0].v.len;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = s[i], z = e[i];
        if (a < 0 || z < a || z > size) { out[i] = 0; continue; }
        int64_t h = z - a < MASKED ? z - a : MASKED;
        uint8_t t[MASKED];
        memcpy(t, p + a, (size_t)h);
        if (vl[i] >= 0)
            ones(t, vl[i] - a, h, 0xF0);
        if (o8[i] >= 0)
            for (int k = 0; k < 8; k++)
                ones(t, o8[i] - a + k, h, 0xFF);
        if (grh[i] >= 0) {
            int64_t g = grh[i] - a;
            ones(t, g, h, 0x0F);
            ones(t, g + 1, h, 0xFF);
            ones(t, g + 2, h, 0xFF);
            ones(t, g + 3, h, 0xFF);
            ones(t, g + 7, h, 0xFF);
        }
        if (ip4[i] >= 0) {
            int64_t g = ip4[i] - a;
            ones(t, g + 1, h, 0xFF);
            ones(t, g + 8, h, 0xFF);
            ones(t, g + 10, h, 0xFF);
            ones(t, g + 11, h, 0xFF);
        }
        if (udp[i] >= 0) {
            ones(t, udp[i] - a + 6, h, 0xFF);
            ones(t, udp[i] - a + 7, h, 0xFF);
        }
        if (bth[i] >= 0)
            ones(t, bth[i] - a + 4, h, 0xFF);
        out[i] = crc32_any(crc32_any(0, t, (size_t)h), p + a + h, (size_t)(z - a - h));
    }
    Py_END_ALLOW_THREADS
    release(b, 10);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(crc16_spans_doc,
"crc16_spans(buf, table, starts, ends, out)\n\n"
"Reflected CRC-16 (init and final XOR 0xFFFF) of buf[starts[i]:ends[i]] into the uint16 array `out`,\n"
"with `table` the 256-entry uint16 byte table (crc = (crc >> 8) ^ table[(crc ^ byte) & 0xFF]).");

static PyObject *crc16_spans(PyObject *self, PyObject *args)
{
    PyObject *o[5];
    buf_t b[5];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4]))
        return NULL;
    if (get(o[0], &b[0], 0, 0, "buf") < 0 || get(o[1], &b[1], 0, 2, "table") < 0 ||
        get(o[2], &b[2], 0, 8, "starts") < 0 || get(o[3], &b[3], 0, 8, "ends") < 0 ||
        get(o[4], &b[4], 1, 2, "out") < 0) {
        release(b, 5);
        return NULL;
    }
    Py_ssize_t n = b[4].v.len / 2;
    if (b[1].v.len != 512 || b[2].v.len / 8 < n || b[3].v.len / 8 < n) {
        release(b, 5);
        PyErr_SetString(PyExc_ValueError, "crc16_spans: table must have 256 entries, starts/ends n");
        return NULL;
    }
    const uint8_t *p = b[0].v.buf;
    const uint16_t *t = b[1].v.buf;
    const int64_t *s = b[2].v.buf, *e = b[3].v.buf;
    uint16_t *out = b[4].v.buf;
    Py_ssize_t size = b[0].v.len;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = s[i], z = e[i];
        if (a < 0 || z < a || z > size) { out[i] = 0; continue; }
        uint16_t c = 0xFFFF;
        for (int64_t j = a; j < z; j++)
            c = (uint16_t)((c >> 8) ^ t[(c ^ p[j]) & 0xFF]);
        out[i] = c ^ 0xFFFF;
    }
    Py_END_ALLOW_THREADS
    release(b, 5);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"walk_pcap", walk_pcap, METH_VARARGS, walk_pcap_doc},
    {"crc32", crc32_py, METH_VARARGS, crc32_doc},
    {"icrc_spans", icrc_spans, METH_VARARGS, icrc_spans_doc},
    {"crc16_spans", crc16_spans, METH_VARARGS, crc16_spans_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "Compiled sequential loops of the fast path (record walk, per-packet CRCs).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
#ifdef HAVE_CLMUL_PATH
    __builtin_cpu_init();
    have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    return PyModule_Create(&module);
}
