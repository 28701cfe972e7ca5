/* `ibwire health`'s reading of a batch (health.h): each packet decoded by decode.c into one record that stays
 * in the CPU's cache, then a RoCE packet's columns and QP key, or another packet's whole record, copied out.
 * Only the fields a RoCE packet gives are cleared before each packet (a whole record, 289 bytes, took as
 * long to clear as to decode); another packet is decoded again into a whole cleared record. */
#include <stdlib.h>
#include <string.h>

#include "crc.h"
#include "health.h"
#include "numbers.h"

#define HEALTH_AHEAD 8   /* packets ahead whose first two cache lines are requested before their turn */

#define AS_SIZE(id, name, size) size,
static const int64_t column_size[N_HEALTH_COLUMNS] = {HEALTH_COLUMNS(AS_SIZE)};
static const int64_t preset_size[N_HEALTH_PRESETS] = {HEALTH_PRESETS(AS_SIZE)};
#undef AS_SIZE
#define AS_BYTES(id, name, size) +size
enum { KEY_BYTES = 0 HEALTH_KEY(AS_BYTES) };
#undef AS_BYTES
_Static_assert(KEY_BYTES == 40, "roce2_direct() writes the key as src, dst, slid, dlid, destqp");

static inline void put_int(uint8_t *q, int64_t v, int64_t size)
{
    uint8_t b1 = (uint8_t)v;
    uint16_t b2 = (uint16_t)v;
    uint32_t b4 = (uint32_t)v;
    switch (size) {
    case 1: memcpy(q, &b1, 1); break;
    case 2: memcpy(q, &b2, 2); break;
    case 4: memcpy(q, &b4, 4); break;
    default: memcpy(q, &v, 8);
    }
}

/* The columns of row k the caller gives for the batch's packet i. */
static inline void given(const health_job *job, uint8_t *const col[], int64_t k, int64_t i)
{
    put_int(col[HC_FRAME] + k * 4, job->frame[i], 4);
    put_int(col[HC_TIME_NS] + k * 8, job->time_ns ? job->time_ns[i] : 0, 8);
    put_int(col[HC_LEN] + k * 4, job->len[i], 4);
}

/* A RoCE packet's record `rec`, the batch's packet i: its columns at row k and its QP key. */
static void keep(const health_job *job, uint8_t *const col[], int64_t k, const uint8_t *rec, int64_t i)
{
    const int64_t *fo = job->dec.field_off;
    given(job, col, k, i);
#define TAKE(id, name, size) memcpy(col[HC_##id] + k * size, rec + fo[R_##id], size);
    HEALTH_DECODED(TAKE)
#undef TAKE
    uint8_t *key = job->keys + k * KEY_BYTES;
#define KEY(id, name, size) memcpy(key, rec + fo[R_##id], size); key += size;
    HEALTH_KEY(KEY)
#undef KEY
}

static inline unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static inline unsigned be24(const uint8_t *p) { return (unsigned)p[0] << 16 | (unsigned)p[1] << 8 | p[2]; }

/* The addresses, classes and UDP header of an IPv4 or IPv6 packet at l3 as decode.c's ip_header() gives them
 * (IPv4 as v4-mapped IPv6); -1 when it is neither, carries no UDP or is not captured as far as the BTH. */
static int64_t ip_udp(const uint8_t *b, int64_t l3, int64_t lim, unsigned et, uint8_t *src, uint8_t *dst,
                      unsigned cls[2])
{
    if (et == ETHERTYPE_IPV4 && l3 + 20 <= lim) {
        unsigned b0 = b[l3];
        int64_t ihl = (b0 & 0x0F) * 4;
        if (b[l3 + 9] != 17 || b0 >> 4 != 4 || ihl < 20 || (be16(b + l3 + 6) & 0x3FFF) || l3 + ihl + 20 > lim)
            return -1;
        cls[0] = b[l3 + 1] & 3;
        cls[1] = b[l3 + 1] >> 2;
        memset(src, 0, 10);
        memset(dst, 0, 10);
        src[10] = src[11] = dst[10] = dst[11] = 0xFF;
        memcpy(src + 12, b + l3 + 12, 4);
        memcpy(dst + 12, b + l3 + 16, 4);
        return l3 + ihl;
    }
    if (et != ETHERTYPE_IPV6 || l3 + 40 + 20 > lim || b[l3 + 6] != 17 || b[l3] >> 4 != 6)
        return -1;
    cls[0] = (b[l3 + 1] >> 4) & 3;
    cls[1] = (b[l3] & 0x0F) << 2 | b[l3 + 1] >> 6;
    memcpy(src, b + l3 + 8, 16);
    memcpy(dst, b + l3 + 24, 16);
    return l3 + 40;
}

/* The common packet read directly, without a record: RoCEv2 (UDP to or from roce2_port) over IPv4 or IPv6 on
 * Ethernet with up to two VLAN tags, captured as far as its BTH, neither a UD SEND (a MAD maybe) nor a SEND
 * First or Only (IPoIB maybe).  Its columns at row k and its QP key, the values decode.c gives (flags: BTH,
 * GRH on IPv6, malformed, truncated): 1; 0 for any other packet, left to the decoder. */
static int roce2_direct(const health_job *job, uint8_t *const col[], int64_t k, int64_t i)
{
    const decode_job *d = &job->dec;
    const uint8_t *b = d->buf;
    int64_t p = d->data[i], lim = p + d->caplen[i] < d->size ? p + d->caplen[i] : d->size, at = p + 12;
    if (d->linktype[i] != LINKTYPE_ETHERNET || at + 2 > lim)
        return 0;
    unsigned et = be16(b + at), pcp = 0, cls[2];
    int64_t vlan = -1;
    for (int t = 0; t < 2 && (et == ETHERTYPE_VLAN || et == ETHERTYPE_QINQ || et == ETHERTYPE_QINQ_OLD); t++) {
        if (at + 6 > lim)
            return 0;
        if (vlan < 0) {
            vlan = be16(b + at + 2) & 0xFFF;
            pcp = b[at + 2] >> 5;
        }
        et = be16(b + at + 4);
        at += 4;
    }
    uint8_t key[KEY_BYTES] = {0};       /* src, dst, slid and dlid (0: no LRH), destqp */
    int64_t u = ip_udp(b, at + 2, lim, et, key, key + 16, cls);
    if (u < 0 || (be16(b + u) != d->roce2_port && be16(b + u + 2) != d->roce2_port))
        return 0;
    int64_t ulen = be16(b + u + 4), bth = u + 8, e = u + ulen - 4;
    unsigned op = b[bth], pad = (b[bth + 1] >> 4) & 3;
    if (d->known[op] & (4 | 8))       /* (the `known` bits: SEND First or Only, UD SEND) */
        return 0;
    int64_t paylen = e - (bth + 12 + d->ext_len[op]) - ((d->known[op] & 2) ? pad : 0);
    unsigned flags = FL_BTH | (et == ETHERTYPE_IPV6 ? FL_GRH : 0);
    flags |= (ulen < 8 + 12 + 4 || paylen < 0) ? FL_MALFORMED : 0;
    flags |= (e + 4 > lim || d->wirelen[i] > d->caplen[i]) ? FL_TRUNCATED : 0;
    unsigned destqp = be24(b + bth + 5);
    memcpy(key + 36, &destqp, 4);
    memcpy(job->keys + k * KEY_BYTES, key, KEY_BYTES);
    given(job, col, k, i);
    put_int(col[HC_PSN] + k * 4, be24(b + bth + 9), 4);
    put_int(col[HC_VLAN] + k * 4, vlan, 4);
    put_int(col[HC_UDP_SRC] + k * 2, be16(b + u), 2);
    unsigned link = et == ETHERTYPE_IPV4 ? K_ROCE2V4 : K_ROCE2V6;
    const unsigned small[] = {op, flags, pcp, cls[1], cls[0], b[bth + 4] >> 7, link, 0};
    const int at_col[] = {HC_OPCODE, HC_FLAGS, HC_PCP, HC_DSCP, HC_ECN, HC_FECN, HC_LINK, HC_MAD_CLASS};
    for (int j = 0; j < 8; j++)
        col[at_col[j]][k] = (uint8_t)small[j];
    return 1;
}

/* Another packet's record, completed with what the caller sets of a record, as the batch's next other one. */
static void set_aside(health_job *job, uint8_t *rec, int64_t i)
{
    const int64_t given[N_HEALTH_PRESETS] = {job->frame[i], job->len[i], job->time_ns ? job->time_ns[i] : 0,
                                             job->dec.linktype[i]};
    for (int p = 0; p < N_HEALTH_PRESETS; p++)
        put_int(rec + job->preset_off[p], given[p], preset_size[p]);
    memcpy(job->rest + job->nrest * job->record_size, rec, (size_t)job->record_size);
    job->rest_rows[job->nrest++] = i;
}

void health_rows(health_job *job)
{
    const decode_job *d = &job->dec;
    uint8_t rec[HEALTH_RECORD_MAX] __attribute__((aligned(64)));
    static const int64_t no_step[N_FIELDS];   /* (one row: every field at its offset) */
    uint8_t *col[N_HEALTH_COLUMNS];
    int64_t start = 0;
    for (int c = 0; c < N_HEALTH_COLUMNS; c++) {
        col[c] = job->cols + job->capacity * start + job->at * column_size[c];
        start += column_size[c];
    }
    decode_job one = *d;
    one.n = 1;
    one.out = rec;
    one.field_step = no_step;
    job->kept = job->nrest = 0;
    for (int64_t i = 0; i < d->n; i++) {
        if (i + HEALTH_AHEAD < d->n) {
            __builtin_prefetch(d->buf + d->data[i + HEALTH_AHEAD]);
            __builtin_prefetch(d->buf + d->data[i + HEALTH_AHEAD] + 64);
        }
        if (roce2_direct(job, col, job->kept, i)) {
            job->kept++;
            continue;
        }
        one.data = d->data + i;
        one.caplen = d->caplen + i;
        one.wirelen = d->wirelen + i;
        one.linktype = d->linktype + i;
#define CLEAR(id, name, size) memset(rec + d->field_off[R_##id], 0, size);
        HEALTH_DECODED(CLEAR)   /* what keep() reads: the decoder writes into zeroed fields */
        HEALTH_KEY(CLEAR)
#undef CLEAR
        decode_packets(&one);
        if (rec[d->field_off[R_FLAGS]] & FL_BTH) {
            keep(job, col, job->kept++, rec, i);
        } else {                /* (few in a RoCE capture) decoded again into a whole zeroed record */
            memset(rec, 0, (size_t)job->record_size);
            decode_packets(&one);
            set_aside(job, rec, i);
        }
    }
}

/* ---- the Python functions ---- */

const char health_layout_doc[] =
    "health_layout() -> (columns, key, presets)\n\n"
    "health_rows()'s layouts as (name, bytes) pairs: a RoCE packet's columns in the block's order, its QP key's\n"
    "fields one after another, and the record fields it sets of another packet's record.";

PyObject *health_layout_py(PyObject *self, PyObject *unused)
{
#define AS_PAIR(id, name, size) "(si)"
#define AS_ARGS(id, name, size) , name, size
    return Py_BuildValue("((" HEALTH_COLUMNS(AS_PAIR) ")(" HEALTH_KEY(AS_PAIR) ")(" HEALTH_PRESETS(AS_PAIR) "))"
                         HEALTH_COLUMNS(AS_ARGS) HEALTH_KEY(AS_ARGS) HEALTH_PRESETS(AS_ARGS));
#undef AS_PAIR
#undef AS_ARGS
}

enum { H_BUF, H_DATA, H_CAPLEN, H_WIRELEN, H_LT, H_FRAME, H_TIME_NS, H_LEN, H_EXT_OFF, H_EXT_LEN, H_KNOWN, H_VTABLE,
       H_FIELD_OFF, H_PRESET_OFF, H_COLS, H_KEYS, H_REST, H_REST_ROWS, H_NB };

/* Bytes of a decoded record field, from its type in decode.h ("u4", "V16"). */
static int64_t field_bytes(int f)
{
#define AS_TYPE(id, name, type) type,
    static const char *const types[N_FIELDS] = {RECORD_FIELDS(AS_TYPE)};
#undef AS_TYPE
    return atoi(types[f] + 1);
}

/* Why the record layout does not fit: a field or preset outside the record, or a column or key field whose
 * size is not the decoded field's; or NULL. */
static const char *layout_misfit(const int64_t *field_off, const int64_t *preset_off, int64_t record_size)
{
    if (record_size <= 0 || record_size > HEALTH_RECORD_MAX)
        return "record_size must be from 1 to 1024";
    for (int f = 0; f < N_FIELDS; f++)
        if (field_off[f] < 0 || field_off[f] + field_bytes(f) > record_size)
            return "a field lies outside the record";
    for (int p = 0; p < N_HEALTH_PRESETS; p++)
        if (preset_off[p] < 0 || preset_off[p] + preset_size[p] > record_size)
            return "a preset field lies outside the record";
    int bad = 0;
#define CHECK(id, name, size) bad |= field_bytes(R_##id) != size;
    HEALTH_DECODED(CHECK)
    HEALTH_KEY(CHECK)
#undef CHECK
    return bad ? "the compiled health layout disagrees with the decoder's fields; rebuild it" : NULL;
}

/* Why the buffers do not fit together (as decode() checks them, and the outputs' room), or NULL. */
static const char *rows_misfit(const Py_buffer *b, const int held[], int64_t record_size, int64_t capacity,
                               int64_t at)
{
    Py_ssize_t n = b[H_DATA].len / 8;
    const int per_packet[] = {H_CAPLEN, H_WIRELEN, H_LT, H_FRAME, H_LEN, H_TIME_NS};
    for (int j = 0; j < 6; j++)
        if ((held[per_packet[j]] && b[per_packet[j]].len != n * 8) || b[per_packet[j]].len % 8)
            return "data, caplen, wirelen, linktype, frame, time_ns and len must have the same length";
    if (b[H_EXT_OFF].len != N_EXT * 256 * 2 || b[H_EXT_LEN].len != 512 || b[H_KNOWN].len != 256 ||
        b[H_VTABLE].len != 512 || b[H_FIELD_OFF].len != N_FIELDS * 8 || b[H_PRESET_OFF].len != N_HEALTH_PRESETS * 8)
        return "a table has the wrong size";
    const char *bad = layout_misfit(b[H_FIELD_OFF].buf, b[H_PRESET_OFF].buf, record_size);
    if (bad)
        return bad;
    int64_t row = 0;
    for (int c = 0; c < N_HEALTH_COLUMNS; c++)
        row += column_size[c];
    if (capacity < 0 || at < 0 || at + n > capacity || b[H_COLS].len / row < capacity)
        return "the block has no room for the batch's rows";
    if (b[H_KEYS].len < n * KEY_BYTES || b[H_REST].len / record_size < n || b[H_REST_ROWS].len < n * 8)
        return "keys, rest or rest_rows is shorter than the batch";
    const int64_t *pd = b[H_DATA].buf, *pc = b[H_CAPLEN].buf;     /* each packet's bytes lie inside buf */
    for (Py_ssize_t i = 0; i < n; i++)
        if (pd[i] < 0 || pc[i] < 0 || pd[i] > b[H_BUF].len || pc[i] > b[H_BUF].len - pd[i])
            return "a packet's data offset or captured length lies outside buf";
    return NULL;
}

static void release_all(Py_buffer *b, const int held[])
{
    for (int i = 0; i < H_NB; i++)
        if (held[i])
            PyBuffer_Release(&b[i]);
}

const char health_rows_doc[] =
    "health_rows(buf, data, caplen, wirelen, linktype, frame, time_ns, len, ext_off, ext_len, known, vtable,\n"
    "            field_off, preset_off, record_size, cols, capacity, at, keys, rest, rest_rows, roce2_port,\n"
    "            roce1_ethertype, mad_qp_max, mad_header_len, icrc) -> (kept, others)\n\n"
    "Decode the batch as decode() does (its arguments; field_off: a record of record_size bytes) one packet at a\n"
    "time.  The RoCE packets' columns (health_layout()) go to rows at, at + 1, ... of the block `cols` (column c\n"
    "from byte capacity * (bytes of the columns before c)), their QP keys to `keys`; the other packets'\n"
    "records to `rest` (frame, len, time_ns and linktype set at preset_off) and their positions in the batch\n"
    "to the int64 `rest_rows`.  frame, time_ns (None: 0) and len: int64 per packet.  Arguments by name.";

PyObject *health_rows_py(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buf", "data", "caplen", "wirelen", "linktype", "frame", "time_ns", "len", "ext_off",
                             "ext_len", "known", "vtable", "field_off", "preset_off", "record_size", "cols",
                             "capacity", "at", "keys", "rest", "rest_rows", "roce2_port", "roce1_ethertype",
                             "mad_qp_max", "mad_header_len", "icrc", NULL};
    PyObject *o[H_NB];
    long long record_size, capacity, at;
    unsigned roce2_port, roce1_ethertype, mad_qp_max, mad_header_len;
    int icrc, held[H_NB] = {0};
    Py_buffer b[H_NB];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "$OOOOOOOOOOOOOOLOLLOOOIIIIp", kwlist, &o[H_BUF], &o[H_DATA],
                                     &o[H_CAPLEN], &o[H_WIRELEN], &o[H_LT], &o[H_FRAME], &o[H_TIME_NS], &o[H_LEN],
                                     &o[H_EXT_OFF], &o[H_EXT_LEN], &o[H_KNOWN], &o[H_VTABLE], &o[H_FIELD_OFF],
                                     &o[H_PRESET_OFF], &record_size, &o[H_COLS], &capacity, &at, &o[H_KEYS],
                                     &o[H_REST], &o[H_REST_ROWS], &roce2_port, &roce1_ethertype, &mad_qp_max,
                                     &mad_header_len, &icrc))
        return NULL;
    for (int i = 0; i < H_NB; i++) {
        int out = i == H_COLS || i == H_KEYS || i == H_REST || i == H_REST_ROWS;
        if (i == H_TIME_NS && o[i] == Py_None) {
            b[i].buf = NULL;
            b[i].len = 0;
            continue;
        }
        if (PyObject_GetBuffer(o[i], &b[i], PyBUF_C_CONTIGUOUS | (out ? PyBUF_WRITABLE : 0)) < 0) {
            release_all(b, held);
            return NULL;
        }
        held[i] = 1;
    }
    const char *bad = rows_misfit(b, held, record_size, capacity, at);
    if (bad) {
        release_all(b, held);
        PyErr_Format(PyExc_ValueError, "health_rows: %s", bad);
        return NULL;
    }
    uint16_t vt[4][256];
    vcrc_slices(b[H_VTABLE].buf, vt);
    health_job job = {
        .dec = {.buf = b[H_BUF].buf, .size = b[H_BUF].len, .data = b[H_DATA].buf, .caplen = b[H_CAPLEN].buf,
                .wirelen = b[H_WIRELEN].buf, .linktype = b[H_LT].buf, .n = b[H_DATA].len / 8,
                .ext_off = b[H_EXT_OFF].buf, .ext_len = b[H_EXT_LEN].buf, .known = b[H_KNOWN].buf,
                .vtable = (const uint16_t (*)[256])vt, .field_off = b[H_FIELD_OFF].buf, .roce2_port = roce2_port,
                .roce1_ethertype = roce1_ethertype, .mad_qp_max = mad_qp_max, .mad_header_len = mad_header_len,
                .icrc = icrc},
        .frame = b[H_FRAME].buf, .time_ns = b[H_TIME_NS].buf, .len = b[H_LEN].buf,
        .preset_off = b[H_PRESET_OFF].buf, .record_size = record_size, .cols = b[H_COLS].buf,
        .capacity = capacity, .at = at, .keys = b[H_KEYS].buf, .rest = b[H_REST].buf, .rest_rows = b[H_REST_ROWS].buf,
    };
    Py_BEGIN_ALLOW_THREADS
    health_rows(&job);
    Py_END_ALLOW_THREADS
    release_all(b, held);
    return Py_BuildValue("LL", (long long)job.kept, (long long)job.nrest);
}
