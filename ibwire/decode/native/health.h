/* What `ibwire health` keeps of a batch of packets (ibwire/analyze/healthrows.py), compiled: each packet is
 * decoded as decode() decodes it, into one record in the CPU's cache; a RoCE packet (one with a BTH) then
 * gives a row of columns and its QP key, any other packet its whole record.  No batch of full records is
 * written, zeroed and read again. */
#ifndef IBWIRE_HEALTH_H
#define IBWIRE_HEALTH_H
#include <Python.h>
#include <stdint.h>

#include "decode.h"

/* A RoCE packet's columns, in their order in the block: name, bytes.  The given ones come from the caller's
 * arrays, the decoded ones from the record's field of the same name (its type in decode.h, checked). */
#define HEALTH_GIVEN(X) X(FRAME, "frame", 4) X(TIME_NS, "time_ns", 8) X(LEN, "len", 4)
#define HEALTH_DECODED(X) \
    X(PSN, "psn", 4) X(VLAN, "vlan", 4) X(UDP_SRC, "udp_src", 2) X(OPCODE, "opcode", 1) X(FLAGS, "flags", 1) \
    X(PCP, "pcp", 1) X(DSCP, "dscp", 1) X(ECN, "ecn", 1) X(FECN, "fecn", 1) X(LINK, "link", 1) \
    X(MAD_CLASS, "mad_class", 1)
#define HEALTH_COLUMNS(X) HEALTH_GIVEN(X) HEALTH_DECODED(X)
/* A RoCE packet's QP key (one direction of a QP): these record fields packed one after another. */
#define HEALTH_KEY(X) X(SRC, "src", 16) X(DST, "dst", 16) X(SLID, "slid", 2) X(DLID, "dlid", 2) X(DESTQP, "destqp", 4)
/* What the caller sets of a record (decode() leaves them to numpy), for the records of other packets. */
#define HEALTH_PRESETS(X) X(FRAME, "frame", 4) X(LEN, "len", 4) X(TIME_NS, "time_ns", 8) X(LINKTYPE, "linktype", 2)

#define AS_ENUM(id, name, size) HC_##id,
enum { HEALTH_COLUMNS(AS_ENUM) N_HEALTH_COLUMNS };
#undef AS_ENUM
#define AS_ENUM(id, name, size) HP_##id,
enum { HEALTH_PRESETS(AS_ENUM) N_HEALTH_PRESETS };
#undef AS_ENUM

#define HEALTH_RECORD_MAX 1024   /* bytes of a record the decoder fills (on the stack) */

/* One health_rows() call over the batch of dec (dec.field_off: a record's layout, dec.n packets). */
typedef struct {
    decode_job dec;
    const int64_t *frame, *time_ns, *len;  /* [n] each: a packet's frame number, time (NULL: 0), length */
    const int64_t *preset_off;             /* [N_HEALTH_PRESETS]: where a record holds them */
    int64_t record_size;
    uint8_t *cols;                         /* column c of row r at cols + capacity * start_c + r * size_c */
    int64_t capacity, at;                  /* the RoCE packets' rows from row `at` */
    uint8_t *keys;                         /* their QP keys, one after another from the first */
    uint8_t *rest;                         /* the other packets' records, one after another */
    int64_t *rest_rows;                    /* and their positions in the batch */
    int64_t kept, nrest;                   /* set: RoCE packets, other packets */
} health_job;

void health_rows(health_job *job);

/* The Python functions (module.c lists them). */
PyObject *health_rows_py(PyObject *self, PyObject *args, PyObject *kw);
PyObject *health_layout_py(PyObject *self, PyObject *unused);
extern const char health_rows_doc[], health_layout_doc[];

#endif
