/* ibwire.decode._native: the fast path's per-packet loops, compiled.  Following record/block lengths and
 * decoding each packet into a record are inherently sequential, and grouping records by key is a hash
 * table's job; numpy does everything else.
 * Functions take buffers (numpy arrays, bytes, memoryviews) and fill caller-allocated outputs or return
 * bytes, so no numpy C API is needed.  Each checks its arguments and hands the C function one struct of
 * them (decode_job, group_job, render_job, walk_job, nspcap_job) or a few parameters. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crc.h"
#include "decode.h"
#include "dump.h"
#include "flows.h"
#include "columns.h"
#include "group.h"
#include "health.h"
#include "nspcap.h"
#include "render.h"
#include "walk.h"

typedef struct {
    Py_buffer v;
    int held;
} buf_t;

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

/* A buffer argument: its name in errors, its item size in bytes (0: any length), and whether it is
 * written to (WRITTEN) or may be None (OPTIONAL, then left unheld). */
enum { WRITTEN = 1, OPTIONAL = 2 };
typedef struct {
    const char *name;
    Py_ssize_t item;
    unsigned flags;
} buf_arg;

/* Buffers b[i] of the n objects o[i] as spec[i] describes them (b zeroed first).  On failure all are
 * released: -1. */
static int get_all(PyObject *const *o, buf_t *b, const buf_arg *spec, int n)
{
    memset(b, 0, (size_t)n * sizeof *b);
    for (int i = 0; i < n; i++) {
        if ((spec[i].flags & OPTIONAL) && o[i] == Py_None)
            continue;
        if (get(o[i], &b[i], spec[i].flags & WRITTEN, spec[i].item, spec[i].name) < 0) {
            release(b, n);
            return -1;
        }
    }
    return 0;
}

/* The arguments (rec, itemsize, then the buffers of spec[1..n)) of a function over records of itemsize
 * bytes: b[0] is rec, as spec[0] describes it.  -1 with an exception set (nothing held) when they are not. */
static int record_args(PyObject *args, const buf_arg *spec, int n, buf_t *b, Py_ssize_t *itemsize)
{
    PyObject *o[8];
    Py_ssize_t given = PyTuple_GET_SIZE(args);
    if (n > 8 || given != n + 1) {
        PyErr_Format(PyExc_TypeError, "function takes exactly %d arguments (%zd given)", n + 1, given);
        return -1;
    }
    *itemsize = PyNumber_AsSsize_t(PyTuple_GET_ITEM(args, 1), PyExc_OverflowError);
    if (*itemsize == -1 && PyErr_Occurred())
        return -1;
    o[0] = PyTuple_GET_ITEM(args, 0);
    for (int i = 1; i < n; i++)
        o[i] = PyTuple_GET_ITEM(args, i + 1);
    return get_all(o, b, spec, n);
}

/* Release the buffers and raise ValueError(bad). */
static PyObject *refuse(buf_t *b, int n, const char *bad)
{
    release(b, n);
    PyErr_SetString(PyExc_ValueError, bad);
    return NULL;
}

/* Why the row indices rows[0..n) (NULL: every record) do not all name one of nrec records, or NULL. */
static const char *rows_outside(const int64_t *rows, Py_ssize_t n, Py_ssize_t nrec)
{
    for (Py_ssize_t i = 0; rows && i < n; i++)
        if (rows[i] < 0 || rows[i] >= nrec)
            return "a row index is out of range";
    return NULL;
}

PyDoc_STRVAR(walk_pcap_doc,
"walk_pcap(buf, off, big, offsets, headers) -> (n, next_off, status)\n\n"
"Follow pcap record lengths from byte `off` of `buf`, writing up to len(offsets) record offsets into\n"
"the int64 array `offsets` and each record header's four words (seconds, fraction, captured and\n"
"original length) into the int64 array `headers` (4 per record).  status: 0 the array is full, 1 the\n"
"next record does not fit in buf, 2 the next record's captured length is impossible (damage); next_off\n"
"is where that record starts.");

static PyObject *walk_pcap(PyObject *self, PyObject *args)
{
    PyObject *o[3];
    long long off;
    int big;
    buf_t b[3];
    if (!PyArg_ParseTuple(args, "OLpOO", &o[0], &off, &big, &o[1], &o[2]))
        return NULL;
    static const buf_arg spec[3] = {{"buf", 0, 0}, {"offsets", 8, WRITTEN}, {"headers", 8, WRITTEN}};
    if (get_all(o, b, spec, 3) < 0)
        return NULL;
    int64_t max = b[1].v.len / 8 < b[2].v.len / 32 ? b[1].v.len / 8 : b[2].v.len / 32;
    walk_job w = {b[0].v.buf, b[0].v.len, off, big, b[1].v.buf, NULL, b[2].v.buf, max, 0};
    int status;
    Py_BEGIN_ALLOW_THREADS          /* (flows, export and decode's read-ahead work on other threads meanwhile) */
    status = walk_pcap_records(&w);
    Py_END_ALLOW_THREADS
    release(b, 3);
    return Py_BuildValue("LLi", (long long)w.n, (long long)w.off, status);
}

PyDoc_STRVAR(walk_pcapng_doc,
"walk_pcapng(buf, off, big, offsets, types, headers) -> (n, next_off, status)\n\n"
"Follow pcapng block lengths from byte `off` of `buf` (section byte order big-endian if `big`), writing\n"
"the offsets of Enhanced and Simple Packet Blocks into the int64 array `offsets`, their block types\n"
"(6 or 3) into the uint8 array `types` and six words of each into the int64 array `headers` (the block\n"
"length, then the words at bytes 8 to 24; 0 past the end of buf); other blocks are skipped.  status: 0\n"
"the arrays are full, 1 the next block does not fit in buf, 2 its length is impossible, 3 it is a\n"
"Section Header, Interface Description or Interface Statistics Block, whole in buf, for the caller to\n"
"read; next_off is where that block starts.");

static PyObject *walk_pcapng(PyObject *self, PyObject *args)
{
    PyObject *o[4];
    long long off;
    int big;
    buf_t b[4];
    if (!PyArg_ParseTuple(args, "OLpOOO", &o[0], &off, &big, &o[1], &o[2], &o[3]))
        return NULL;
    static const buf_arg spec[4] = {{"buf", 0, 0}, {"offsets", 8, WRITTEN}, {"types", 1, WRITTEN},
                                    {"headers", 8, WRITTEN}};
    if (get_all(o, b, spec, 4) < 0)
        return NULL;
    int64_t max = b[1].v.len / 8 < b[2].v.len ? b[1].v.len / 8 : b[2].v.len;
    if (b[3].v.len / 48 < max)
        max = b[3].v.len / 48;
    walk_job w = {b[0].v.buf, b[0].v.len, off, big, b[1].v.buf, b[2].v.buf, b[3].v.buf, max, 0};
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = walk_pcapng_blocks(&w);
    Py_END_ALLOW_THREADS
    release(b, 4);
    return Py_BuildValue("LLi", (long long)w.n, (long long)w.off, status);
}

PyDoc_STRVAR(decode_doc,
"decode(buf, data, caplen, wirelen, linktype, ext_off, ext_len, known, vtable, field_off, field_step,\n"
"       roce2_port, roce1_ethertype, mad_qp_max, mad_header_len, icrc, out)\n\n"
"Decode packet i (buf[data[i]:data[i]+caplen[i]], link type linktype[i]; int64 arrays) into row i of\n"
"`out` (zero-filled): field f of FIELDS at byte field_off[f] + i * field_step[f] (int64 arrays; records\n"
"one after another or each field in a column of its own).\n"
"ext_off: int16 [len(EXT_HEADERS)][256] offsets after the BTH (-1 absent); ext_len: int16 [256];\n"
"known: uint8 [256], bit 0 opcode defined, bit 1 payload allowed, bit 2 SEND First/Only, bit 3 a MAD when\n"
"either QP is at most mad_qp_max (malformed under mad_header_len bytes); vtable: the VCRC's uint16 byte\n"
"table; icrc: verify ICRC and VCRC.  Arguments by position or by name.");

enum { D_BUF, D_DATA, D_CAPLEN, D_WIRELEN, D_LT, D_EXT_OFF, D_EXT_LEN, D_KNOWN, D_VTABLE, D_FIELD_OFF,
       D_FIELD_STEP, D_OUT, D_NB };

/* Why decode()'s buffers do not fit together (packets outside buf, fields outside out, tables of the
 * wrong size), or NULL. */
static const char *decode_misfit(const buf_t *b)
{
    Py_ssize_t n = b[D_DATA].v.len / 8;
    if (b[D_CAPLEN].v.len / 8 != n || b[D_WIRELEN].v.len / 8 != n || b[D_LT].v.len / 8 != n)
        return "data, caplen, wirelen and linktype must have the same length";
    if (b[D_EXT_OFF].v.len != N_EXT * 256 * 2 || b[D_EXT_LEN].v.len != 512 || b[D_KNOWN].v.len != 256 ||
        b[D_VTABLE].v.len != 512 || b[D_FIELD_OFF].v.len != N_FIELDS * 8 || b[D_FIELD_STEP].v.len != N_FIELDS * 8)
        return "a table has the wrong size";
    const int64_t *field_off = b[D_FIELD_OFF].v.buf, *field_step = b[D_FIELD_STEP].v.buf;
#define AS_TYPE(id, name, type) type,
    static const char *const types[N_FIELDS] = {RECORD_FIELDS(AS_TYPE)};   /* "u4", "V16": kind, bytes */
#undef AS_TYPE
    for (int f = 0; f < N_FIELDS; f++) {
        int64_t size = atoi(types[f] + 1);
        if (field_off[f] < 0 || field_step[f] < size ||
            (n && field_off[f] + (n - 1) * field_step[f] + size > b[D_OUT].v.len))
            return "a field of some row lies outside out";
    }
    const int64_t *pd = b[D_DATA].v.buf, *pc = b[D_CAPLEN].v.buf;     /* each packet's bytes lie inside buf */
    for (Py_ssize_t i = 0; i < n; i++)
        if (pd[i] < 0 || pc[i] < 0 || pd[i] > b[D_BUF].v.len || pc[i] > b[D_BUF].v.len - pd[i])
            return "a packet's data offset or captured length lies outside buf";
    return NULL;
}

static PyObject *decode(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buf", "data", "caplen", "wirelen", "linktype", "ext_off", "ext_len", "known",
                             "vtable", "field_off", "field_step", "roce2_port", "roce1_ethertype", "mad_qp_max",
                             "mad_header_len", "icrc", "out", NULL};
    PyObject *o[D_NB];
    unsigned roce2_port, roce1_ethertype, mad_qp_max, mad_header_len;
    int icrc;
    buf_t b[D_NB];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOOOOOOIIIIpO", kwlist, &o[D_BUF], &o[D_DATA], &o[D_CAPLEN],
                                     &o[D_WIRELEN], &o[D_LT], &o[D_EXT_OFF], &o[D_EXT_LEN], &o[D_KNOWN],
                                     &o[D_VTABLE], &o[D_FIELD_OFF], &o[D_FIELD_STEP], &roce2_port,
                                     &roce1_ethertype, &mad_qp_max, &mad_header_len, &icrc, &o[D_OUT]))
        return NULL;
    static const buf_arg spec[D_NB] = {{"buf", 0, 0},       {"data", 8, 0},       {"caplen", 8, 0},
                                       {"wirelen", 8, 0},   {"linktype", 8, 0},   {"ext_off", 2, 0},
                                       {"ext_len", 2, 0},   {"known", 1, 0},      {"vtable", 2, 0},
                                       {"field_off", 8, 0}, {"field_step", 8, 0}, {"out", 0, WRITTEN}};
    if (get_all(o, b, spec, D_NB) < 0)
        return NULL;
    const char *bad = decode_misfit(b);
    if (bad)
        return refuse(b, D_NB, bad);
    uint16_t vt[4][256];
    vcrc_slices(b[D_VTABLE].v.buf, vt);
    decode_job job = {
        .buf = b[D_BUF].v.buf, .size = b[D_BUF].v.len, .data = b[D_DATA].v.buf, .caplen = b[D_CAPLEN].v.buf,
        .wirelen = b[D_WIRELEN].v.buf, .linktype = b[D_LT].v.buf, .n = b[D_DATA].v.len / 8,
        .ext_off = b[D_EXT_OFF].v.buf, .ext_len = b[D_EXT_LEN].v.buf, .known = b[D_KNOWN].v.buf,
        .vtable = (const uint16_t (*)[256])vt, .field_off = b[D_FIELD_OFF].v.buf,
        .field_step = b[D_FIELD_STEP].v.buf, .out = b[D_OUT].v.buf, .roce2_port = roce2_port,
        .roce1_ethertype = roce1_ethertype, .mad_qp_max = mad_qp_max, .mad_header_len = mad_header_len,
        .icrc = icrc,
    };
    Py_BEGIN_ALLOW_THREADS
    decode_packets(&job);
    Py_END_ALLOW_THREADS
    release(b, D_NB);
    Py_RETURN_NONE;
}

/* group() and pick(): records `rec` of itemsize bytes, the int64 `rows` of them (None: all), and the fields'
 * byte `offsets` and `sizes` (int64), the first four buffers of their spec. */
typedef struct {
    Py_ssize_t itemsize, nrec, n, nf;
    const int64_t *rows, *off, *size;
} fields_view;

static int fields_args(PyObject *args, const buf_arg *spec, int nb, buf_t *b, fields_view *f)
{
    if (record_args(args, spec, nb, b, &f->itemsize) < 0)
        return -1;
    f->nrec = f->itemsize > 0 ? b[0].v.len / f->itemsize : 0;
    f->n = b[1].held ? b[1].v.len / 8 : f->nrec;
    f->nf = b[2].v.len / 8;
    f->rows = b[1].held ? b[1].v.buf : NULL;
    f->off = b[2].v.buf;
    f->size = b[3].v.buf;
    return 0;
}

PyDoc_STRVAR(group_doc,
"group(rec, itemsize, rows, offsets, sizes, inverse, first, hashes) -> number of groups\n\n"
"Exact group-by of the records in `rec` (itemsize bytes each) listed in the int64 array `rows` (None:\n"
"all) on the fields at byte `offsets` of `sizes` bytes (int64 arrays).  Fills, for len(rows) rows:\n"
"inverse (int64, each row's group, numbered by first appearance), first (int64, each group's first\n"
"row as a position in rows) and hashes (uint64, a 64-bit hash of each group's key).");

static PyObject *group(PyObject *self, PyObject *args)
{
    enum { REC, ROWS, OFF, SIZE, INV, FIRST, HASH, NB };
    static const buf_arg spec[NB] = {{"rec", 0, 0}, {"rows", 8, OPTIONAL}, {"offsets", 8, 0}, {"sizes", 8, 0},
                                     {"inverse", 8, WRITTEN}, {"first", 8, WRITTEN}, {"hashes", 8, WRITTEN}};
    buf_t b[NB];
    fields_view f;
    if (fields_args(args, spec, NB, b, &f) < 0)
        return NULL;
    Py_ssize_t itemsize = f.itemsize, nrec = f.nrec, n = f.n, nf = f.nf;
    const int64_t *rows = f.rows, *off = f.off, *size = f.size;
    const char *bad = NULL;
    int64_t klen = 0;
    if (itemsize <= 0 || b[REC].v.len % itemsize)
        bad = "rec does not hold whole records of itemsize bytes";
    else if (b[SIZE].v.len / 8 != nf || b[INV].v.len / 8 < n || b[FIRST].v.len / 8 < n || b[HASH].v.len / 8 < n)
        bad = "offsets/sizes differ in length, or an output is shorter than rows";
    for (Py_ssize_t f = 0; !bad && f < nf; f++) {
        klen += size[f];
        if (off[f] < 0 || size[f] < 0 || off[f] + size[f] > itemsize || klen > GROUP_MAX_KEY)
            bad = "a key field lies outside the record, or the key is too long";
    }
    if (!bad)
        bad = rows_outside(rows, n, nrec);
    if (bad)
        return refuse(b, NB, bad);
    group_job job = {b[REC].v.buf, itemsize, rows, n, off, size, (int)nf, b[INV].v.buf, b[FIRST].v.buf, b[HASH].v.buf};
    int64_t g;
    Py_BEGIN_ALLOW_THREADS
    g = group_records(&job);
    Py_END_ALLOW_THREADS
    release(b, NB);
    if (g < 0)
        return PyErr_NoMemory();
    return PyLong_FromLongLong(g);
}


/* Why n records' fields (at byte offsets off, of sizes size: int64 buffers) cannot be copied out of the
 * records in rec (itemsize bytes each) to out, one after another, or NULL. */
static const char *fields_refused(const buf_t *rec, Py_ssize_t itemsize, const buf_t *off, const buf_t *size,
                                  const buf_t *out, Py_ssize_t n)
{
    Py_ssize_t nf = off->v.len / 8;
    const int64_t *o = off->v.buf, *z = size->v.buf;
    int64_t total = 0;
    if (itemsize <= 0 || rec->v.len % itemsize)
        return "rec does not hold whole records of itemsize bytes";
    if (size->v.len / 8 != nf)
        return "offsets and sizes differ in length";
    for (Py_ssize_t f = 0; f < nf; f++) {
        total += z[f];
        if (o[f] < 0 || z[f] <= 0 || o[f] + z[f] > itemsize)
            return "a field lies outside the record";
    }
    return out->v.len < n * total ? "out is shorter than the fields of the records" : NULL;
}

PyDoc_STRVAR(columns_doc,
"columns(rec, itemsize, offsets, sizes, out)\n\n"
"The records in `rec` (itemsize bytes each) as columns: the field at byte offsets[f] of sizes[f] bytes\n"
"(int64 arrays) of every record goes, in record order, to `out` from byte n * (sizes of the fields\n"
"before f); `out` holds at least n * sum(sizes) bytes.");

static PyObject *columns(PyObject *self, PyObject *args)
{
    enum { REC, OFF, SIZE, OUT, NB };
    static const buf_arg spec[NB] = {{"rec", 0, 0}, {"offsets", 8, 0}, {"sizes", 8, 0}, {"out", 0, WRITTEN}};
    Py_ssize_t itemsize;
    buf_t b[NB];
    if (record_args(args, spec, NB, b, &itemsize) < 0)
        return NULL;
    Py_ssize_t n = itemsize > 0 ? b[REC].v.len / itemsize : 0, nf = b[OFF].v.len / 8;
    const int64_t *off = b[OFF].v.buf, *size = b[SIZE].v.buf;
    const char *bad = fields_refused(&b[REC], itemsize, &b[OFF], &b[SIZE], &b[OUT], n);
    if (bad)
        return refuse(b, NB, bad);
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = split_columns(b[REC].v.buf, itemsize, n, off, size, (int)nf, b[OUT].v.buf);
    Py_END_ALLOW_THREADS
    release(b, NB);
    if (status < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}


PyDoc_STRVAR(pick_doc,
"pick(rec, itemsize, rows, offsets, sizes, out) -> None\n\n"
"The records of `rec` (itemsize bytes each) listed in the int64 array `rows` (None: all) as narrower\n"
"records in `out`: the fields at byte offsets[f] of sizes[f] bytes (int64 arrays) one after another,\n"
"each record read once; `out` holds at least len(rows) * sum(sizes) bytes.");

static PyObject *pick(PyObject *self, PyObject *args)
{
    enum { REC, ROWS, OFF, SIZE, OUT, NB };
    static const buf_arg spec[NB] = {{"rec", 0, 0}, {"rows", 8, OPTIONAL}, {"offsets", 8, 0}, {"sizes", 8, 0},
                                     {"out", 0, WRITTEN}};
    buf_t b[NB];
    fields_view f;
    if (fields_args(args, spec, NB, b, &f) < 0)
        return NULL;
    const char *bad = fields_refused(&b[REC], f.itemsize, &b[OFF], &b[SIZE], &b[OUT], f.n);
    if (!bad)
        bad = rows_outside(f.rows, f.n, f.nrec);
    if (bad)
        return refuse(b, NB, bad);
    Py_BEGIN_ALLOW_THREADS
    pick_fields(b[REC].v.buf, f.itemsize, f.rows, f.n, f.off, f.size, (int)f.nf, b[OUT].v.buf);
    Py_END_ALLOW_THREADS
    release(b, NB);
    Py_RETURN_NONE;
}

/* ---- RC sequencing (flows.c): a capsule holds the per-conversation state between feeds ---- */
static void flows_capsule_free(PyObject *cap)
{
    flows_free(PyCapsule_GetPointer(cap, "ibwire.flows"));
}

static flow_state *flows_of(PyObject *cap)
{
    return PyCapsule_GetPointer(cap, "ibwire.flows");
}

PyDoc_STRVAR(flows_new_doc,
"flows_new(nconv) -> state\n\nSequencing state for `nconv` conversations (see flows.c).");

static PyObject *flows_new_py(PyObject *self, PyObject *args)
{
    long long n;
    if (!PyArg_ParseTuple(args, "L", &n))
        return NULL;
    if (n < 0 || n > (1LL << 31))
        return PyErr_Format(PyExc_ValueError, "bad conversation count %lld", n);
    flow_state *s = flows_new(n);
    if (!s)
        return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(s, "ibwire.flows", flows_capsule_free);
    if (!cap)
        flows_free(s);
    return cap;
}

PyDoc_STRVAR(flows_set_qpn_doc,
"flows_set_qpn(state, conv, qpn0, qpn1)\n\nThe QPNs a conversation starts with (UD: both ends' from DETH).");

static PyObject *flows_set_qpn_py(PyObject *self, PyObject *args)
{
    PyObject *cap;
    long long c, q0, q1;
    if (!PyArg_ParseTuple(args, "OLLL", &cap, &c, &q0, &q1))
        return NULL;
    flow_state *s = flows_of(cap);
    if (!s)
        return NULL;
    flows_set_qpn(s, c, q0, q1);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(flows_feed_doc,
"flows_feed(state, opclass, opkind, seg, transport, packets, conv_of, side_of)\n\n"
"Sequence `packets` (flow_pkt records, capture order).  opclass/opkind/seg/transport: uint8 [256] per-opcode\n"
"facts; conv_of (int32) and side_of (uint8) map each packet's half number to a conversation and side.");

static PyObject *flows_feed_py(PyObject *self, PyObject *args)
{
    enum { OPC, OPK, SEG, TR, PKT, CONV, SIDE, NB };
    PyObject *cap, *o[NB];
    buf_t b[NB];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &cap, &o[OPC], &o[OPK], &o[SEG], &o[TR], &o[PKT], &o[CONV], &o[SIDE]))
        return NULL;
    flow_state *s = flows_of(cap);
    if (!s)
        return NULL;
    static const buf_arg spec[NB] = {{"opclass", 1, 0}, {"opkind", 1, 0}, {"seg", 1, 0}, {"transport", 1, 0},
                                     {"packets", sizeof(flow_pkt), 0}, {"conv_of", 4, 0}, {"side_of", 1, 0}};
    if (get_all(o, b, spec, NB) < 0)
        return NULL;
    if (b[OPC].v.len != 256 || b[OPK].v.len != 256 || b[SEG].v.len != 256 || b[TR].v.len != 256 ||
        b[CONV].v.len / 4 != b[SIDE].v.len) {
        release(b, NB);
        PyErr_SetString(PyExc_ValueError, "a table has the wrong size");
        return NULL;
    }
    flow_tables tab = {b[OPC].v.buf, b[OPK].v.buf, b[SEG].v.buf, b[TR].v.buf};
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = flows_feed(s, &tab, b[PKT].v.buf, b[PKT].v.len / (Py_ssize_t)sizeof(flow_pkt), b[CONV].v.buf,
                     b[SIDE].v.buf, b[SIDE].v.len);
    Py_END_ALLOW_THREADS
    release(b, NB);
    if (err < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}


PyDoc_STRVAR(flows_spill_doc,
"flows_spill(rec, itemsize, rows, field_off, half, frames, out)\n\n"
"One flow_pkt in `out` per record of `rec` listed in the int64 array `rows` (None: all): the fields of\n"
"SPILL_FIELDS at byte offsets field_off (int64), half-flow numbers from `half` (uint32, one per listed\n"
"row), frame numbers from `frames` (uint32 per record of rec; None: the records' own).");

static PyObject *flows_spill_py(PyObject *self, PyObject *args)
{
    enum { REC, ROWS, OFF, HALF, FRAMES, OUT, NB };
    static const buf_arg spec[NB] = {{"rec", 0, 0}, {"rows", 8, OPTIONAL}, {"field_off", 8, 0}, {"half", 4, 0},
                                     {"frames", 4, OPTIONAL}, {"out", sizeof(flow_pkt), WRITTEN}};
    Py_ssize_t itemsize;
    buf_t b[NB];
    if (record_args(args, spec, NB, b, &itemsize) < 0)
        return NULL;
    Py_ssize_t nrec = itemsize > 0 ? b[REC].v.len / itemsize : 0;
    Py_ssize_t n = b[ROWS].held ? b[ROWS].v.len / 8 : nrec;
    const int64_t *rows = b[ROWS].held ? b[ROWS].v.buf : NULL, *off = b[OFF].v.buf;
    const char *bad = NULL;
    if (itemsize <= 0 || b[REC].v.len % itemsize)
        bad = "rec does not hold whole records";
    else if (b[OFF].v.len != N_SF * 8 || b[HALF].v.len / 4 != n || b[OUT].v.len / (Py_ssize_t)sizeof(flow_pkt) != n ||
             (b[FRAMES].held && b[FRAMES].v.len / 4 != nrec))
        bad = "field_off, half, frames or out has the wrong size";
#define SF_SIZE(id, name, type) (type[1] - '0'),
    static const int size[N_SF] = {SPILL_FIELDS(SF_SIZE)};
    for (int f = 0; !bad && f < N_SF; f++)
        if (off[f] < 0 || off[f] + size[f] > itemsize)
            bad = "a field offset lies outside the record";
    if (!bad)
        bad = rows_outside(rows, n, nrec);
    if (bad)
        return refuse(b, NB, bad);
    Py_BEGIN_ALLOW_THREADS
    flows_spill(b[REC].v.buf, itemsize, rows, n, off, b[HALF].v.buf, b[FRAMES].held ? b[FRAMES].v.buf : NULL,
                b[OUT].v.buf);
    Py_END_ALLOW_THREADS
    release(b, NB);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(flows_result_doc,
"flows_result(state, conv) -> (bytes of a flow_summary, ACK latencies, READ latencies, P_Keys)\n\n"
"Latencies: bytes of float64 seconds, channel 0's samples then channel 1's; P_Keys: bytes of uint16.");

static PyObject *flows_result_py(PyObject *self, PyObject *args)
{
    PyObject *cap;
    long long c;
    if (!PyArg_ParseTuple(args, "OL", &cap, &c))
        return NULL;
    flow_state *s = flows_of(cap);
    if (!s)
        return NULL;
    flow_summary sum;
    if (flows_summary(s, c, &sum) < 0)
        return PyErr_Format(PyExc_IndexError, "no conversation %lld", c);
    PyObject *lat[2] = {NULL, NULL};
    for (int w = 0; w < 2; w++) {
        const double *a, *b;
        int64_t na = flows_latency(s, c, 0, w, &a), nb = flows_latency(s, c, 1, w, &b);
        lat[w] = PyBytes_FromStringAndSize(NULL, (na + nb) * (Py_ssize_t)sizeof(double));
        if (!lat[w]) {
            Py_XDECREF(lat[0]);
            return NULL;
        }
        if (na)
            memcpy(PyBytes_AS_STRING(lat[w]), a, (size_t)na * sizeof(double));
        if (nb)
            memcpy(PyBytes_AS_STRING(lat[w]) + na * sizeof(double), b, (size_t)nb * sizeof(double));
    }
    int64_t nk;
    const uint16_t *k = flows_pkeys(s, c, &nk);
    return Py_BuildValue("y#NNy#", (const char *)&sum, (Py_ssize_t)sizeof sum, lat[0], lat[1],
                         (const char *)k, (Py_ssize_t)(nk * 2));
}

PyDoc_STRVAR(flows_events_doc,
"flows_events(state) -> (bytes of flow_event records, events not kept)\n\n"
"What the sequencer concluded about single frames; closes what is still open first (call after feeding).");

static PyObject *flows_events_py(PyObject *self, PyObject *args)
{
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap))
        return NULL;
    flow_state *s = flows_of(cap);
    if (!s)
        return NULL;
    int64_t n, lost;
    const flow_event *ev = flows_events(s, &n, &lost);
    if (n < 0)
        return PyErr_NoMemory();
    return Py_BuildValue("y#L", ev ? (const char *)ev : "", (Py_ssize_t)(n * (int64_t)sizeof *ev), (long long)lost);
}

PyDoc_STRVAR(render_doc,
"render(rec, itemsize, rows, prog_of, progs, base, buf=None, fstart=None, flen=None) -> bytes\n\n"
"Text of the records rows[k] (int64 indices into `rec`, records of itemsize bytes), each printed by program\n"
"progs[prog_of[k]] (int32 indices into a tuple of bytes; opcodes in render.h); base: int64 nanoseconds\n"
"subtracted from each row's time by time formats (None: 0); frame ops read row k's frame, flen[k] bytes at\n"
"buf[fstart[k]] (int64 arrays; uint8 buf).");

/* Why program p (len bytes) is cut short, has an unknown op, reads outside a record of itemsize bytes or
 * reads frames none were given for, or NULL. */
static const char *program_misfit(const uint8_t *p, int64_t len, Py_ssize_t itemsize, int frames)
{
    for (int64_t at = 0; at < len;) {
        int op = p[at];
        if (at + 3 > len)
            return "a program is cut short";
        if (op == OP_LIT)
            at += 3 + (p[at + 1] | p[at + 2] << 8);
        else if (op >= OP_FINT) {
            if (op > OP_LAST || at + 7 > len)
                return "a program is cut short or has an unknown op";
            if (!frames)
                return "a program reads frames and none were given";
            if (op == OP_FINT && ((p[at + 3] & 0x7f) < 1 || (p[at + 3] & 0x7f) > 8))
                return "a frame integer must be 1 to 8 bytes";
            at += 7;
        }
        else if (at + 5 > len || op > OP_REPR)
            return "a program is cut short or has an unknown op";
        else {
            unsigned off = p[at + 1] | p[at + 2] << 8, a = p[at + 3];
            int integer = op == OP_UDEC || op == OP_IDEC || op == OP_HEX;
            size_t need = integer ? a : op == OP_ADDR ? 16 : op == OP_MAC ? 6 : 8;  /* TIME … REPR: an i8 */
            if ((integer && a != 1 && a != 2 && a != 4 && a != 8) || off + need > (size_t)itemsize)
                return "a field lies outside the record";
            at += 5;
        }
        if (at > len)
            return "a literal runs past its program";
    }
    return NULL;
}

/* A batch's text goes straight into the bytes returned, sized by the last call's bytes per row on this thread
 * (a batch of -V trees is megabytes: a copy of it cost as much as rendering it); a text that outgrows them is
 * rendered again into the thread's kept buffer (render.c) and copied. */
static __thread Py_ssize_t per_row;

/* The bytes to render n rows into, or NULL (too few rows, nothing known yet, no memory). */
static PyObject *text_for(Py_ssize_t n)
{
    if (n < 64 || per_row <= 0 || per_row >= PY_SSIZE_T_MAX / 2 / n)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * per_row + n * per_row / 4 + 4096);
    if (!out)
        PyErr_Clear();
    return out;
}

/* render()'s result: `out` cut to the text rendered into it, else a copy of render.c's buffer; or the error. */
static PyObject *text_done(PyObject *out, int err, const char *text, size_t len, Py_ssize_t n)
{
    int into = out && !err && text == PyBytes_AS_STRING(out);
    if (!into)
        Py_CLEAR(out);
    if (err == -1)
        return PyErr_NoMemory();
    if (err)
        return PyErr_Format(PyExc_ValueError, "render: bad program");
    if (n)
        per_row = (Py_ssize_t)(len / (size_t)n) + 1;
    if (into)
        return _PyBytes_Resize(&out, (Py_ssize_t)len) < 0 ? NULL : out;
    return PyBytes_FromStringAndSize(text ? text : "", (Py_ssize_t)len);
}

static PyObject *render(PyObject *self, PyObject *args)
{
    enum { REC, ROWS, PROG_OF, BASE, BUF, FSTART, FLEN, NB };
    PyObject *o[NB] = {NULL}, *progs;
    Py_ssize_t itemsize;
    buf_t b[NB];
    int dumps = 0;
    o[BUF] = o[FSTART] = o[FLEN] = Py_None;
    if (!PyArg_ParseTuple(args, "OnOOO!O|OOOp", &o[REC], &itemsize, &o[ROWS], &o[PROG_OF], &PyTuple_Type, &progs,
                          &o[BASE], &o[BUF], &o[FSTART], &o[FLEN], &dumps))
        return NULL;
    static const buf_arg spec[NB] = {{"rec", 0, 0}, {"rows", 8, 0}, {"prog_of", 4, 0}, {"base", 8, OPTIONAL},
                                     {"buf", 1, OPTIONAL}, {"fstart", 8, OPTIONAL}, {"flen", 8, OPTIONAL}};
    if (get_all(o, b, spec, NB) < 0)
        return NULL;
    Py_ssize_t n = b[ROWS].v.len / 8, np_ = PyTuple_GET_SIZE(progs);
    Py_ssize_t nrec = itemsize > 0 ? b[REC].v.len / itemsize : 0;
    const int64_t *rows = b[ROWS].v.buf;
    const int32_t *prog_of = b[PROG_OF].v.buf;
    const char *bad = NULL;
    int frames = b[BUF].held && b[FSTART].held && b[FLEN].held;
    if (itemsize <= 0 || b[PROG_OF].v.len / 4 != n || (b[BASE].held && b[BASE].v.len / 8 != n))
        bad = "rows, prog_of and base must have the same length";
    else if (b[BUF].held != frames || b[FSTART].held != frames || b[FLEN].held != frames)
        bad = "buf, fstart and flen go together";
    else if (frames && (b[FSTART].v.len / 8 != n || b[FLEN].v.len / 8 != n))
        bad = "fstart and flen must have a value per row";
    const int64_t *fs = frames ? b[FSTART].v.buf : NULL, *fl = frames ? b[FLEN].v.buf : NULL;
    for (Py_ssize_t k = 0; !bad && frames && k < n; k++)
        if (fs[k] < 0 || fl[k] < 0 || fs[k] + fl[k] > b[BUF].v.len)
            bad = "a frame lies outside buf";
    for (Py_ssize_t k = 0; !bad && k < n; k++)
        if (rows[k] < 0 || rows[k] >= nrec || prog_of[k] < 0 || prog_of[k] >= np_)
            bad = "a row or program index is out of range";
    if (bad)
        return refuse(b, NB, bad);
    const uint8_t **pp = PyMem_Malloc(sizeof(*pp) * (np_ ? np_ : 1));
    int64_t *pl = PyMem_Malloc(sizeof(*pl) * (np_ ? np_ : 1));
    if (!pp || !pl) {
        PyMem_Free(pp);
        PyMem_Free(pl);
        release(b, NB);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; !bad && i < np_; i++) {
        PyObject *p = PyTuple_GET_ITEM(progs, i);
        if (!PyBytes_Check(p))
            bad = "programs must be bytes";
        else {
            pp[i] = (const uint8_t *)PyBytes_AS_STRING(p);
            pl[i] = PyBytes_GET_SIZE(p);
            bad = program_misfit(pp[i], pl[i], itemsize, frames);
        }
    }
    char *text = NULL;
    size_t len = 0;
    int err = 0;
    PyObject *out = bad ? NULL : text_for(n);
    if (!bad) {
        render_job job = {b[REC].v.buf, itemsize, rows, n, prog_of, pp, pl, b[BASE].held ? b[BASE].v.buf : NULL,
                          frames ? b[BUF].v.buf : NULL, fs, fl, dumps, out ? PyBytes_AS_STRING(out) : NULL,
                          out ? (size_t)PyBytes_GET_SIZE(out) : 0};
        Py_BEGIN_ALLOW_THREADS
        err = render_rows(&job, &text, &len);
        if (err == -3) {
            job.into = NULL;
            err = render_rows(&job, &text, &len);
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(pp);
    PyMem_Free(pl);
    if (bad)
        return refuse(b, NB, bad);
    release(b, NB);
    return text_done(out, err, text, len, n);
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

PyDoc_STRVAR(nspcap_doc,
"nspcap(buf, off, big_endian, num, den, budget) -> (records, off, count)\n\n"
"The run of whole pcapng Enhanced Packet Blocks at buf[off:] as nanosecond pcap records, at most `budget`\n"
"bytes of them; num and den (int64 arrays, one per interface) give each interface's nanoseconds per tick.\n"
"Returns the records, the offset after the blocks converted and their number; 0 when the block at off is\n"
"another type, not whole, past the budget, has a time unit beyond int64 or a time past 32-bit seconds (the\n"
"caller converts that one).");

static PyObject *nspcap_py(PyObject *self, PyObject *args)
{
    Py_buffer v, nv, dv;
    Py_ssize_t off, budget;
    int big;
    if (!PyArg_ParseTuple(args, "y*npy*y*n", &v, &off, &big, &nv, &dv, &budget))
        return NULL;
    PyObject *out = NULL;
    if (off < 0 || off > v.len || budget < 0 || nv.len != dv.len || nv.len % 8) {
        PyErr_SetString(PyExc_ValueError, "off, budget or the num/den arrays are out of range");
        goto done;
    }
    Py_ssize_t cap = v.len - off < budget ? v.len - off : budget;   /* a record is never longer than its block */
    out = PyBytes_FromStringAndSize(NULL, cap);
    if (!out)
        goto done;
    nspcap_job job = {v.buf, (size_t)v.len, (size_t)off, big, nv.buf, dv.buf, (size_t)nv.len / 8,
                      (uint8_t *)PyBytes_AS_STRING(out), (size_t)cap, 0};
    long n;
    Py_BEGIN_ALLOW_THREADS
    n = nspcap_epbs(&job);
    Py_END_ALLOW_THREADS
    if (_PyBytes_Resize(&out, (Py_ssize_t)job.out_len) < 0)
        goto done;
    PyObject *r = Py_BuildValue("(Nnl)", out, (Py_ssize_t)job.off, n);
    out = r;
done:
    PyBuffer_Release(&v);
    PyBuffer_Release(&nv);
    PyBuffer_Release(&dv);
    return out;
}

static PyMethodDef methods[] = {
    {"walk_pcap", walk_pcap, METH_VARARGS, walk_pcap_doc},
    {"walk_pcapng", walk_pcapng, METH_VARARGS, walk_pcapng_doc},
    {"decode", (PyCFunction)(void (*)(void))decode, METH_VARARGS | METH_KEYWORDS, decode_doc},
    {"group", group, METH_VARARGS, group_doc},
    {"columns", columns, METH_VARARGS, columns_doc},
    {"pick", pick, METH_VARARGS, pick_doc},
    {"health_rows", (PyCFunction)(void (*)(void))health_rows_py, METH_VARARGS | METH_KEYWORDS, health_rows_doc},
    {"health_layout", health_layout_py, METH_NOARGS, health_layout_doc},
    {"render", render, METH_VARARGS, render_doc},
    {"dumps", dumps_py, METH_VARARGS, dumps_doc},
    {"crc32", crc32_py, METH_VARARGS, crc32_doc},
    {"nspcap", nspcap_py, METH_VARARGS, nspcap_doc},
    {"flows_new", flows_new_py, METH_VARARGS, flows_new_doc},
    {"flows_set_qpn", flows_set_qpn_py, METH_VARARGS, flows_set_qpn_doc},
    {"flows_feed", flows_feed_py, METH_VARARGS, flows_feed_doc},
    {"flows_result", flows_result_py, METH_VARARGS, flows_result_doc},
    {"flows_events", flows_events_py, METH_VARARGS, flows_events_doc},
    {"flows_spill", flows_spill_py, METH_VARARGS, flows_spill_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "Compiled per-packet loops of the fast path (record walk, packet decoding, CRCs, grouping, columns, line\n"
    "rendering, RC sequencing, pcapng to nanosecond pcap).", -1, methods,
    NULL, NULL, NULL, NULL,
};

/* name -> value dictionaries the Python side checks against ibwire.decode.records. */
static int add_codes(PyObject *m, const char *attr, const char *const *names, const long *values, int n)
{
    PyObject *d = PyDict_New();
    if (!d)
        return -1;
    for (int i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(values[i]);
        if (!v || PyDict_SetItemString(d, names[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return -1;
        }
        Py_DECREF(v);
    }
    int err = PyModule_AddObjectRef(m, attr, d);
    Py_DECREF(d);
    return err;
}

/* A tuple of the n names, or NULL (an exception set). */
static PyObject *names_tuple(const char *const *names, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

PyMODINIT_FUNC PyInit__native(void)
{
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
#define AS_PAIR(id, name, type) "(ss)"
#define AS_ARGS(id, name, type) , name, type
    PyObject *fields = Py_BuildValue("(" RECORD_FIELDS(AS_PAIR) ")" RECORD_FIELDS(AS_ARGS));
#define AS_NAME(id, name) "s"
#define AS_ARG(id, name) , name
    PyObject *ext = Py_BuildValue("(" EXT_HEADERS(AS_NAME) ")" EXT_HEADERS(AS_ARG));
    static const char *const link[] = {"other", "roce1", "roce2v4", "roce2v6", "ib", "ib+grh", "ipoib", "iblink"};
    static const long link_v[] = {K_OTHER, K_ROCE1, K_ROCE2V4, K_ROCE2V6, K_IB, K_IBGRH, K_IPOIB, K_IBLINK};
    static const char *const crc[] = {"absent", "good", "bad", "truncated", "unchecked"};
    static const long crc_v[] = {C_ABSENT, C_GOOD, C_BAD, C_TRUNC, C_UNCHECKED};
    static const char *const flag[] = {"F_BTH", "F_MALFORMED", "F_TRUNCATED", "F_GRH", "F_MAD", "F_HEURISTIC", "F_IPOIB"};
    static const long flag_v[] = {FL_BTH, FL_MALFORMED, FL_TRUNCATED, FL_GRH, FL_MAD, FL_HEURISTIC, FL_IPOIB};
    int err = !fields || !ext || PyModule_AddObjectRef(m, "FIELDS", fields) < 0 ||
              PyModule_AddObjectRef(m, "EXT_HEADERS", ext) < 0 || add_codes(m, "LINK_KINDS", link, link_v, 8) < 0 ||
              add_codes(m, "CRC_STATUS", crc, crc_v, 5) < 0 || add_codes(m, "FLAGS", flag, flag_v, 7) < 0;
    Py_XDECREF(fields);
    Py_XDECREF(ext);
#define AS_STR(n) #n,
    static const char *const counters[] = {FLOW_COUNTERS(AS_STR)};
    PyObject *fc = names_tuple(counters, N_FC);
    static const char *const events[] = {FLOW_EVENTS(AS_STR)};
    PyObject *fe = names_tuple(events, N_EV);
    err = err || !fe || PyModule_AddObjectRef(m, "FLOW_EVENTS", fe) < 0 ||
          PyModule_AddIntConstant(m, "FLOW_EVENT_SIZE", sizeof(flow_event)) < 0 ||
          PyModule_AddIntConstant(m, "FLOW_EVENTS_MAX", EVENTS_MAX) < 0;
    Py_XDECREF(fe);
    err = err || !fc || PyModule_AddObjectRef(m, "FLOW_COUNTERS", fc) < 0 ||
          PyModule_AddIntConstant(m, "FLOW_PKT_SIZE", sizeof(flow_pkt)) < 0 ||
          PyModule_AddIntConstant(m, "FLOW_SUMMARY_SIZE", sizeof(flow_summary)) < 0;
    Py_XDECREF(fc);
#define SF_PAIR(id, name, type) "(ss)"
#define SF_ARGS(id, name, type) , name, type
    PyObject *sf = Py_BuildValue("(" SPILL_FIELDS(SF_PAIR) ")" SPILL_FIELDS(SF_ARGS));
    err = err || !sf || PyModule_AddObjectRef(m, "SPILL_FIELDS", sf) < 0;
    Py_XDECREF(sf);
    if (err) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
