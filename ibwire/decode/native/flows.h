/* Reliable-connection sequencing of conversations (IBA Vol 1 §9.7), compiled: see flows.c. */
#ifndef IBWIRE_FLOWS_H
#define IBWIRE_FLOWS_H
#include <stdint.h>

/* One packet handed to the sequencer (ibwire.analyze.flows.SPILL has the same layout). */
typedef struct {
    double t;           /* seconds */
    int64_t tns;        /* nanoseconds */
    uint32_t half;      /* half-flow (or UD direction) number; the caller maps it to a conversation */
    uint32_t psn;
    uint32_t len;       /* frame length */
    int32_t paylen;
    uint32_t dmalen;    /* RETH DMA length (0 without RETH) */
    uint32_t destqp;
    uint32_t frame;
    uint16_t p_key;
    uint8_t op;
    uint8_t syn;        /* AETH syndrome */
    uint8_t ecn;
    uint8_t bad;        /* ICRC verified bad */
    uint8_t pad[6];
} flow_pkt;

/* Per-opcode facts (from dissectors.opcodes, handed over by Python). */
enum { OC_REQUEST, OC_READ_REQ, OC_READ_RESP, OC_ACK, OC_ATOMIC_ACK, OC_CNP };
enum { SEG_NONE, SEG_FIRST, SEG_MIDDLE, SEG_LAST, SEG_ONLY };
enum { TR_OTHER, TR_RC, TR_UC, TR_DC, TR_UD, TR_CNP, TR_XRC };
/* Message kinds counted per operation (ibwire.analyze.flows.MESSAGE_KINDS order). */
enum { MK_SEND, MK_WRITE, MK_READ, MK_ATOMIC, MK_FLUSH, MK_ATOMIC_WRITE, MK_RESYNC, MK_UNKNOWN, N_MK };
/* Channel counters, in this order in the results. */
#define FLOW_COUNTERS(X) X(REQUEST_PACKETS) X(BAD_ICRC) X(RETRANSMISSIONS) X(PSN_GAPS) X(DROPS) \
    X(NOT_CAPTURED) X(OUT_OF_ORDER) X(LENGTH_MISMATCH) X(UNTRACKED) X(READ_RESPONSE_PACKETS) X(READS_COMPLETED) \
    X(UNMATCHED_READ_RESPONSES) X(ACKS) X(RNR_NAKS) X(NAKS) X(ATOMIC_ACKS) X(ACKED_REQUESTS) \
    X(MAX_OUTSTANDING) X(UNACKNOWLEDGED)
#define AS_ENUM(n) FC_##n,
enum { FLOW_COUNTERS(AS_ENUM) N_FC };
#undef AS_ENUM

typedef struct {
    const uint8_t *opclass, *opkind, *seg, *transport;   /* [256] each */
} flow_tables;

/* Record fields flows_spill reads (ibwire.decode.records names, in this order). */
#define SPILL_FIELDS(X) X(TIME, "time", "f8") X(TIME_NS, "time_ns", "i8") X(PSN, "psn", "u4") X(LEN, "len", "u4") \
    X(PAYLEN, "paylen", "i4") X(DMALEN, "reth_dmalen", "u4") X(DESTQP, "destqp", "u4") X(FRAME, "frame", "u4") \
    X(P_KEY, "p_key", "u2") X(OPCODE, "opcode", "u1") X(SYNDROME, "aeth_syndrome", "u1") X(ECN, "ecn", "u1") \
    X(ICRC, "icrc", "u1")
#define AS_SF(id, name, type) SF_##id,
enum { SPILL_FIELDS(AS_SF) N_SF };
#undef AS_SF

void flows_spill(const uint8_t *rec, int64_t itemsize, const int64_t *rows, int64_t n, const int64_t *off,
                 const uint32_t *half, const uint32_t *frames, flow_pkt *out);

typedef struct flow_state flow_state;

flow_state *flows_new(int64_t nconv);
void flows_set_qpn(flow_state *s, int64_t c, int64_t q0, int64_t q1);
void flows_free(flow_state *s);
/* Feed packets in capture order; conv[i]/side[i] say where packet i goes (conv < 0: nowhere). */
int flows_feed(flow_state *s, const flow_tables *tab, const flow_pkt *p, int64_t n, const int32_t *conv_of,
               const uint8_t *side_of, int64_t nhalves);
/* Results of conversation `c`: see module.c's flows_result. */
typedef struct {
    int64_t packets[2], bytes[2], payload[2], cnps[2], ecn_ce[2];
    int64_t qpn[2];                /* -1 unknown */
    int64_t first_frame, first_tns;
    double first, last;
    int64_t first_op;              /* opcode of the first non-CNP packet, -1 none */
    int64_t counters[2][N_FC];
    int64_t ops[2][N_MK], op_bytes[2][N_MK], ops_order[2][N_MK], bytes_order[2][N_MK];
    int64_t nak[2][32], nak_order[2][32], rnr[2][32], rnr_order[2][32];
    int64_t n_pkeys;
    /* Retransmission episodes per requester channel (a run of resent requests), by what preceded them:
     * EP_TIMEOUT no ACK or NAK (the local ACK timer ran out), EP_NAK a NAK, EP_RNR an RNR NAK. */
    int64_t episodes[2][3];
    double timeout_wait_min[2], timeout_wait_max[2];   /* timeout episodes' waits since the resent PSN
                                                        * was last sent, seconds */
    int64_t max_retries[2];        /* most episodes in a row resending one PSN with no ACK between them */
    int64_t stall_retries[2];      /* the channel ended in such a run, unanswered: its episodes; 0 none */
    int64_t stall_psn[2], stall_frame[2], stall_answers[2];  /* its PSN, last resend, answers after it */
    int64_t stall_cause[2];        /* what began that run's last episode: EP_TIMEOUT, EP_NAK or EP_RNR */
} flow_summary;
enum { EP_TIMEOUT, EP_NAK, EP_RNR };
int flows_summary(const flow_state *s, int64_t c, flow_summary *out);
/* Latency samples (seconds) of conversation c, channel ch: which 0 ACK, 1 READ; returns the count. */
int64_t flows_latency(const flow_state *s, int64_t c, int ch, int which, const double **samples);
const uint16_t *flows_pkeys(const flow_state *s, int64_t c, int64_t *n);

/* What the sequencer concluded about single frames (ibwire.analyze.frames reads them), in the order it
 * concluded it: a frame may get several.  `value`: the PSN concerned (EV_PSN_GAP: how many were skipped;
 * EV_ACKS / EV_READ_REQUEST: the request frame this response answers; EV_ACK_RTT: the seconds since that request,
 * as the bits of a float). */
typedef struct {
    uint32_t frame;
    int32_t conv;
    uint8_t kind, side;               /* side: the requester's */
    uint16_t pad;
    uint32_t value;
} flow_event;
#define FLOW_EVENTS(X) X(RETRANSMISSION) X(LOST) X(OUT_OF_ORDER) X(RESENT_LATE) X(PSN_GAP) X(NOT_CAPTURED) \
    X(RETRY_TIMEOUT) X(RETRY_NAK) X(RETRY_RNR) X(GAVE_UP) X(DUPLICATE) X(ACKS) X(ACK_RTT) X(READ_REQUEST)
#define AS_EV(n) EV_##n,
enum { FLOW_EVENTS(AS_EV) N_EV };
#undef AS_EV
#define EVENTS_MAX (1 << 24)          /* events kept (256 MiB); later ones are counted, not kept */
/* Close what is still open (episodes, missing PSNs never resent, a requester that gave up) and return the
 * events; *lost counts those past EVENTS_MAX. */
const flow_event *flows_events(flow_state *s, int64_t *n, int64_t *lost);
#endif
