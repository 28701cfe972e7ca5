/* Reliable-connection sequencing per conversation (IBA Vol 1 §9.7): PSN gaps and drops, late and
 * retransmitted requests, ACK/NAK/RNR accounting, READ request/response matching, latencies, message
 * lengths checked against the RETH DMA length.  The responder's view of each requester→responder
 * channel, packet by packet in capture order; the rules are those documented in
 * ibwire/analyze/flows.py.  Bounded state per channel: insertion-ordered PSN maps (`odict`) of at most
 * SEEN_WINDOW recent PSNs, MISSING_MAX missing PSNs, PENDING_MAX pending requests, READs and candidate
 * duplicates. */
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "flows.h"

#define PSN_MOD (1LL << 24)
#define LAT_SAMPLES (1 << 20)             /* latency samples kept per channel and kind; later ones not */
#define PENDING_MAX 16384
#define SEEN_WINDOW 4096
#define MISSING_MAX 4096

static inline int64_t psn_diff(int64_t a, int64_t b)
{
    int64_t x = (a - b + (1LL << 23)) % PSN_MOD;
    if (x < 0)
        x += PSN_MOD;
    return x - (1LL << 23);
}

/* ---- an insertion-ordered map from PSN to a small value (Python dict semantics) ---------------- */
typedef struct {
    double t;
    int64_t got;
    uint32_t dmalen;
    int32_t plast;        /* < 2^26: a PSN plus at most 2^24 response packets */
    int64_t tns;          /* pending requests and READs: when sent, and in which frame */
    uint32_t frame;
} val_t;

typedef struct {
    val_t v;
    uint32_t key;
    int32_t alive;
} ent_t;

typedef struct {
    ent_t *ring;          /* entries in insertion order, positions head..tail-1 (dead ones skipped) */
    int64_t head, tail, cap;
    int32_t *idx;         /* open addressing: ring slot, -1 empty */
    int64_t icap;
    int64_t n;            /* live entries */
} odict;

static inline uint64_t hkey(int64_t k) { return (uint64_t)k * 0x9E3779B97F4A7C15ULL; }

static ent_t *at(const odict *d, int64_t pos) { return &d->ring[pos & (d->cap - 1)]; }

static int32_t *slot_of(const odict *d, int64_t key)
{
    if (!d->icap)
        return NULL;
    uint64_t m = (uint64_t)d->icap - 1, s = (hkey(key) >> 20) & m;
    for (;;) {
        int32_t p = d->idx[s];
        if (p < 0 || at(d, p)->key == key)
            return &d->idx[s];
        s = (s + 1) & m;
    }
}

static int od_rebuild(odict *d, int64_t need)
{
    int64_t cap = 8;
    while (cap < need + need / 4 + 8)
        cap <<= 1;
    ent_t *ring = malloc((size_t)cap * sizeof *ring);
    int32_t *idx = malloc((size_t)cap * 2 * sizeof *idx);
    if (!ring || !idx) {
        free(ring);
        free(idx);
        return -1;
    }
    int64_t n = 0;
    for (int64_t p = d->head; p < d->tail; p++)
        if (at(d, p)->alive)
            ring[n++] = *at(d, p);
    free(d->ring);
    free(d->idx);
    d->ring = ring, d->cap = cap, d->head = 0, d->tail = n, d->idx = idx, d->icap = cap * 2;
    memset(idx, 0xFF, (size_t)d->icap * sizeof *idx);
    for (int64_t p = 0; p < n; p++)
        *slot_of(d, ring[p].key) = (int32_t)p;
    return 0;
}

static void od_free(odict *d)
{
    free(d->ring);
    free(d->idx);
    memset(d, 0, sizeof *d);
}

static val_t *od_get(const odict *d, int64_t key)
{
    int32_t *s = slot_of(d, key);
    return s && *s >= 0 ? &at(d, *s)->v : NULL;
}

/* d[key] = v: a new key goes last, an existing one keeps its place. */
static int od_set(odict *d, int64_t key, val_t v)
{
    val_t *old = od_get(d, key);
    if (old) {
        *old = v;
        return 0;
    }
    if (d->tail - d->head >= d->cap && od_rebuild(d, d->n + 1) < 0)
        return -1;
    int64_t p = d->tail++;
    *at(d, p) = (ent_t){v, (uint32_t)key, 1};
    *slot_of(d, key) = (int32_t)(p & (d->cap - 1));
    d->n++;
    return 0;
}

/* Remove the slot's entry from the hash (backward-shift deletion keeps probe chains whole). */
static void unindex(odict *d, int32_t *slot)
{
    uint64_t m = (uint64_t)d->icap - 1, i = (uint64_t)(slot - d->idx), j = i;
    d->idx[i] = -1;
    for (;;) {
        j = (j + 1) & m;
        int32_t p = d->idx[j];
        if (p < 0)
            return;
        uint64_t k = (hkey(at(d, p)->key) >> 20) & m;
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
            d->idx[i] = p;
            d->idx[j] = -1;
            i = j;
        }
    }
}

static int od_pop(odict *d, int64_t key, val_t *out)
{
    int32_t *s = slot_of(d, key);
    if (!s || *s < 0)
        return 0;
    ent_t *e = at(d, *s);
    if (out)
        *out = e->v;
    e->alive = 0;
    unindex(d, s);
    d->n--;
    while (d->head < d->tail && !at(d, d->head)->alive)
        d->head++;
    return 1;
}

static ent_t *od_first(const odict *d)
{
    for (int64_t p = d->head; p < d->tail; p++)
        if (at(d, p)->alive)
            return at(d, p);
    return NULL;
}

static ent_t *od_last(const odict *d)
{
    for (int64_t p = d->tail - 1; p >= d->head; p--)
        if (at(d, p)->alive)
            return at(d, p);
    return NULL;
}

static void od_popfirst(odict *d)
{
    ent_t *e = od_first(d);
    if (e)
        od_pop(d, e->key, NULL);
}

/* ---- the event log -------------------------------------------------------------------------------- */
typedef struct {
    flow_event *ev;
    int64_t n, cap, lost;
    int failed;
} evlog;

static void emit(evlog *log, int32_t conv, int side, int kind, int64_t frame, int64_t value)
{
    if (!log)
        return;
    if (log->n == log->cap) {
        int64_t cap = log->cap ? log->cap * 2 : 1024;
        flow_event *e = log->n < EVENTS_MAX ? realloc(log->ev, (size_t)cap * sizeof *e) : NULL;
        if (!e) {
            log->failed |= log->n < EVENTS_MAX;
            log->lost++;
            return;
        }
        log->ev = e, log->cap = cap;
    }
    log->ev[log->n++] = (flow_event){(uint32_t)frame, conv, (uint8_t)kind, (uint8_t)side, 0, (uint32_t)value};
}

/* ---- channels and conversations ---------------------------------------------------------------- */
typedef struct {
    int has_expected, nak_seen, has_fill, msg_active, msg_has_len;
    int64_t expected, fill, msg_bytes, msg_len;
    odict missing, pending, reads, seen;
    int pending_mixed;                    /* a request waits behind a higher PSN (see ack) */
    odict cand;                           /* resends that are duplicates once an ACK covers them: frame -> PSN */
    int64_t c[N_FC];
    int64_t ops[N_MK], op_bytes[N_MK], ops_order[N_MK], bytes_order[N_MK];
    int64_t nak[32], nak_order[32], rnr[32], rnr_order[32];
    int64_t stamp;                        /* first-seen order of the keys above (Python dict order) */
    double *lat[2];                       /* ACK and READ latency samples, seconds */
    int64_t nlat[2];
    /* retransmission forensics */
    int has_last_req, nak_since, rnr_since, in_episode, acked_since;
    int has_accepted;                     /* the responder's expected PSN, as its ACKs and NAKs tell it */
    int64_t accepted;
    double last_req_t, fill_t, fill_prev_t;
    int64_t episode_psn, last_resent, retries, max_retries, answers_since, last_resend_frame;
    int64_t episodes[3];
    double wait_min, wait_max;
    int ep_open, ep_cause;                /* the episode under way, counted when it ends */
    double ep_wait;
    int64_t ep_frame, fill_frame;
    evlog *log;                           /* where this channel's events go, and as whose */
    int32_t conv;
    uint8_t side;
} channel;

#define EMIT(ch, kind, frame, value) emit((ch)->log, (ch)->conv, (ch)->side, kind, frame, value)

#define TTR_MIN (2 * 4.096e-6)            /* the shortest local ACK timeout (timeout = 1, §9.7.6.1.3) */

/* Count the episode under way: into `episodes` and, for a timeout, its wait into the wait range. */
static void close_episode(const channel *ch, int64_t episodes[3], double *wmin, double *wmax)
{
    if (!ch->ep_open)
        return;
    episodes[ch->ep_cause]++;
    if (ch->ep_cause == EP_TIMEOUT) {
        if (episodes[EP_TIMEOUT] == 1 || ch->ep_wait < *wmin)
            *wmin = ch->ep_wait;
        if (ch->ep_wait > *wmax)
            *wmax = ch->ep_wait;
    }
}

static void end_episode(channel *ch)
{
    if (ch->ep_open)
        EMIT(ch, EV_RETRY_TIMEOUT + ch->ep_cause, ch->ep_frame, ch->episode_psn);
    close_episode(ch, ch->episodes, &ch->wait_min, &ch->wait_max);
    ch->ep_open = ch->in_episode = 0;
}

typedef struct {
    int started, first_op;
    double first, last;
    int64_t first_tns, first_frame;
    int64_t packets[2], bytes[2], payload[2], cnps[2], ecn_ce[2], qpn[2];
    uint16_t *pkeys;
    int64_t npkeys, pkcap;
    channel ch[2];
} conv;

struct flow_state {
    conv *c;
    int64_t n;
    evlog log;
    int finished;
};

flow_state *flows_new(int64_t nconv)
{
    flow_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->c = calloc((size_t)(nconv ? nconv : 1), sizeof *s->c);
    if (!s->c) {
        free(s);
        return NULL;
    }
    s->n = nconv;
    for (int64_t i = 0; i < nconv; i++) {
        s->c[i].first_op = -1;
        s->c[i].qpn[0] = s->c[i].qpn[1] = -1;
    }
    return s;
}

void flows_set_qpn(flow_state *s, int64_t c, int64_t q0, int64_t q1)
{
    s->c[c].qpn[0] = q0;
    s->c[c].qpn[1] = q1;
}

void flows_free(flow_state *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->n; i++) {
        conv *v = &s->c[i];
        free(v->pkeys);
        for (int k = 0; k < 2; k++) {
            channel *ch = &v->ch[k];
            od_free(&ch->missing);
            od_free(&ch->pending);
            od_free(&ch->reads);
            od_free(&ch->seen);
            od_free(&ch->cand);
            free(ch->lat[0]);
            free(ch->lat[1]);
        }
    }
    free(s->c);
    free(s->log.ev);
    free(s);
}

static void count_op(channel *ch, int k, int64_t msgs, int64_t bytes)
{
    if (msgs) {
        if (!ch->ops_order[k])
            ch->ops_order[k] = ++ch->stamp;
        ch->ops[k] += msgs;
    }
    if (bytes >= 0) {
        if (!ch->bytes_order[k])
            ch->bytes_order[k] = ++ch->stamp;
        ch->op_bytes[k] += bytes;
    }
}

static int add_lat(channel *ch, int which, double v)
{
    int64_t n = ch->nlat[which];
    if (n >= LAT_SAMPLES)
        return 0;
    if (!(n & (n - 1)) && n >= 64) {      /* grow at 64, 128, 256, ... samples */
        double *a = realloc(ch->lat[which], (size_t)n * 2 * sizeof(double));
        if (!a)
            return -1;
        ch->lat[which] = a;
    } else if (!ch->lat[which] && !(ch->lat[which] = malloc(64 * sizeof(double))))
        return -1;
    ch->lat[which][ch->nlat[which]++] = v;
    return 0;
}

static void refile(channel *ch)
{
    EMIT(ch, EV_RESENT_LATE, ch->fill_frame, ch->fill);
    ch->c[FC_OUT_OF_ORDER]--;
    ch->c[FC_DROPS]++;
    ch->c[FC_RETRANSMISSIONS]++;
    ch->has_fill = 0;
}

/* Forget the oldest missing PSN: never resent, so the wire delivered it and the capture missed it. */
static void forget_missing(channel *ch)
{
    ent_t *e = od_first(&ch->missing);
    if (e)
        EMIT(ch, EV_NOT_CAPTURED, e->v.got, e->key);
    od_popfirst(&ch->missing);
    ch->c[FC_NOT_CAPTURED]++;
}

/* The request frame a response answers (EV_ACKS) and the time since it was sent (EV_ACK_RTT). */
static void answers(channel *ch, const flow_pkt *p, const val_t *req)
{
    float rtt = (float)((p->tns - req->tns) * 1e-9);
    uint32_t bits;
    memcpy(&bits, &rtt, sizeof bits);
    EMIT(ch, EV_ACKS, p->frame, req->frame);
    EMIT(ch, EV_ACK_RTT, p->frame, bits);
}

/* An ACK (or a READ's last response) at time t accepts every request up to `psn`: each pending request it
 * covers is retired and its ACK latency measured from its first transmission (the requester's completion
 * time).  Requests wait in the order first seen; once a late or resent one follows a higher PSN
 * (`pending_mixed`), every waiting request is checked, not only those at the head. */
static int ack(channel *ch, const flow_pkt *p, double t, int64_t psn)
{
    int64_t n = 0;
    for (int64_t q = ch->pending.head; q < ch->pending.tail; q++) {
        ent_t *e = at(&ch->pending, q);
        if (!e->alive)
            continue;
        if (psn_diff(psn, e->key) < 0) {
            if (!ch->pending_mixed)
                break;
            continue;
        }
        double t0 = e->v.t;
        if (p && e->key == psn)
            answers(ch, p, &e->v);
        od_pop(&ch->pending, e->key, NULL);
        n++;
        if (add_lat(ch, 0, t - t0) < 0)
            return -1;
    }
    if (!ch->pending.n)
        ch->pending_mixed = 0;
    ch->c[FC_ACKED_REQUESTS] += n;
    return 0;
}

/* The responder expects `psn` next (an ACK of psn - 1, a PSN sequence error or RNR NAK of psn): what precedes
 * it was accepted. */
static void expects(channel *ch, int64_t psn)
{
    if (!ch->has_accepted || psn_diff(psn, ch->accepted) > 0)
        ch->accepted = psn % PSN_MOD;
    ch->has_accepted = 1;
}

/* A resend of a PSN the responder had accepted: a duplicate it drops and ACKs again (rxe counts it in
 * duplicate_request).  Accepted: its first sending came in sequence (no PSN missing before it: `was->got`)
 * and no NAK since asked for it again, or an ACK or NAK has said the responder expects a later PSN.
 * Resends of what it discarded (go-back-N after a PSN sequence error, a request it RNR-NAKed) are not. */
static int duplicate(channel *ch, const flow_pkt *p, const val_t *was)
{
    if (ch->has_accepted && psn_diff(p->psn, ch->accepted) < 0)
        EMIT(ch, EV_DUPLICATE, p->frame, p->psn);
    else if (was && was->got) {          /* in sequence, but did the responder take it? its next ACK says */
        if (od_set(&ch->cand, p->frame, (val_t){0, p->psn, 0, 0, 0, 0}) < 0)
            return -1;
        while (ch->cand.n > PENDING_MAX)
            od_popfirst(&ch->cand);
    }
    return 0;
}

/* An ACK of `psn`: the candidate duplicates it covers were duplicates; a NAK asking for `psn` again: those from
 * it on were not (confirm = 0). */
static void settle(channel *ch, int64_t psn, int confirm)
{
    for (int64_t q = ch->cand.head; q < ch->cand.tail; q++) {
        ent_t *e = at(&ch->cand, q);
        if (!e->alive)
            continue;
        int64_t d = psn_diff(psn, e->v.got);
        if (confirm ? d >= 0 : d <= 0) {
            if (confirm)
                EMIT(ch, EV_DUPLICATE, e->key, e->v.got);
            od_pop(&ch->cand, e->key, NULL);
        }
    }
}

/* A NAK asking for `psn` again: the responder holds neither it nor what was sent after it. */
static void unaccept(channel *ch, int64_t psn)
{
    for (int64_t q = ch->seen.head; q < ch->seen.tail; q++) {
        ent_t *e = at(&ch->seen, q);
        if (e->alive && psn_diff(e->key, psn) >= 0)
            e->v.got = 0;
    }
}

/* A request sent again: ACKs and NAKs now answer this sending (EV_ACKS, EV_ACK_RTT). */
static void sent_again(channel *ch, const flow_pkt *p)
{
    val_t *v = od_get(&ch->pending, p->psn);
    if (v) {
        v->tns = p->tns;
        v->frame = p->frame;
    }
}

/* A resent request at time t whose PSN was last sent at t0.  Resends going up one PSN after another are
 * one episode (go-back-N); any other opens an episode, caused by a NAK or RNR NAK answered since, else by
 * the local ACK timer; one resending the PSN the previous episode began with, with no ACK since, is one
 * more retry of it. */
static void resent(channel *ch, int64_t psn, double t, double t0, int64_t frame)
{
    int goes_on = ch->in_episode && psn_diff(psn, ch->last_resent) > 0;
    ch->last_resend_frame = frame;
    ch->last_resent = psn;
    if (goes_on)
        return;
    end_episode(ch);
    ch->in_episode = ch->ep_open = 1;
    ch->ep_frame = frame;
    ch->ep_cause = ch->nak_since ? EP_NAK : ch->rnr_since ? EP_RNR : EP_TIMEOUT;
    ch->ep_wait = t - t0;
    ch->nak_since = ch->rnr_since = 0;
    ch->retries = psn == ch->episode_psn && !ch->acked_since ? ch->retries + 1 : 1;
    ch->episode_psn = psn;
    ch->acked_since = 0;
    ch->answers_since = 0;
    if (ch->retries > ch->max_retries)
        ch->max_retries = ch->retries;
}

/* A request PSN against the one expected: a gap opens missing PSNs (lost until resent, late, or never
 * captured); one behind fills a missing PSN (lost after a NAK, else late) or is a retransmission. */
static int gap_or_late(channel *ch, const flow_pkt *p, double prev_t)
{
    int64_t *c = ch->c, psn = p->psn;
    if (!ch->has_expected) {
        end_episode(ch);
        return 0;
    }
    int64_t d = psn_diff(psn, ch->expected);
    ent_t *last = d > 0 ? od_last(&ch->reads) : NULL;
    if (last && psn_diff(psn, last->key) > 0 && psn_diff(psn - 1, last->v.plast) <= 0)
        d = 0;                            /* PSNs a pending READ's responses may use are not a gap */
    if (d == 0) {
        end_episode(ch);                  /* a new PSN: the requester moved on */
        return 0;
    }
    ch->msg_active = 0;
    if (d > 0) {                          /* missing until resent (lost), late (out of order) or never */
        c[FC_PSN_GAPS]++;
        EMIT(ch, EV_PSN_GAP, p->frame, d);
        if (d > MISSING_MAX)
            c[FC_NOT_CAPTURED] += d - MISSING_MAX;
        for (int64_t k = d > MISSING_MAX ? d - MISSING_MAX : 0; k < d; k++)
            if (od_set(&ch->missing, (ch->expected + k) % PSN_MOD, (val_t){0, p->frame, 0, 0}) < 0)
                return -1;
        while (ch->missing.n > MISSING_MAX)
            forget_missing(ch);
        end_episode(ch);
    } else if (!od_pop(&ch->missing, psn, NULL)) {
        c[FC_RETRANSMISSIONS]++;
        EMIT(ch, EV_RETRANSMISSION, p->frame, psn);
        if (duplicate(ch, p, NULL) < 0)
            return -1;
        sent_again(ch, p);
        resent(ch, psn, p->t, prev_t, p->frame);
    } else if (ch->nak_seen) {            /* resent after a NAK: lost on the wire */
        c[FC_DROPS]++;
        c[FC_RETRANSMISSIONS]++;
        EMIT(ch, EV_LOST, p->frame, psn);
        EMIT(ch, EV_RETRANSMISSION, p->frame, psn);
        resent(ch, psn, p->t, prev_t, p->frame);
    } else {                              /* late, not lost, unless a NAK or go-back-N resends say so */
        c[FC_OUT_OF_ORDER]++;
        EMIT(ch, EV_OUT_OF_ORDER, p->frame, psn);
        ch->fill_frame = p->frame;
        ch->has_fill = 1;
        ch->fill = psn;
        ch->fill_t = p->t;
        ch->fill_prev_t = prev_t;
    }
    return 0;
}

/* A message's packets and bytes, its length checked against its RETH DMA length (WRITE). */
static void message(channel *ch, int kind, int seg, const flow_pkt *p)
{
    count_op(ch, kind, 0, kind == MK_ATOMIC ? 8 : p->paylen);
    if (seg == SEG_FIRST || seg == SEG_ONLY) {
        ch->msg_active = 1;
        ch->msg_bytes = 0;
        ch->msg_has_len = kind == MK_WRITE;
        ch->msg_len = p->dmalen;
    }
    if (ch->msg_active)
        ch->msg_bytes += p->paylen;
    if (seg == SEG_LAST || seg == SEG_ONLY || seg == SEG_NONE) {
        count_op(ch, kind, 1, -1);
        if (ch->msg_active && ch->msg_has_len && ch->msg_bytes != ch->msg_len)
            ch->c[FC_LENGTH_MISMATCH]++;
        ch->msg_active = 0;
    }
}

/* A request of an acknowledged transport waits for its ACK; one still waiting keeps its first sending. */
static int awaits_ack(channel *ch, const flow_pkt *p)
{
    if (od_get(&ch->pending, p->psn))
        return 0;
    ent_t *last = od_last(&ch->pending);
    if (last && psn_diff(p->psn, last->key) < 0)
        ch->pending_mixed = 1;
    if (od_set(&ch->pending, p->psn, (val_t){p->t, 0, 0, 0, p->tns, p->frame}) < 0)
        return -1;
    while (ch->pending.n > PENDING_MAX) {
        od_popfirst(&ch->pending);
        ch->c[FC_UNTRACKED]++;
    }
    return 0;
}

/* A request not sent before: the PSN the requester goes on from (a READ reserves one per response packet,
 * dmalen/4096 to dmalen/256), its message, and what now waits for an answer. */
static int advance(channel *ch, const flow_tables *tab, const flow_pkt *p)
{
    int64_t psn = p->psn, nxt = psn + 1, dmalen = p->dmalen;
    int op = p->op, tr = tab->transport[op];
    int rc = tr == TR_RC || tr == TR_XRC || tr == TR_DC;   /* acknowledged transports */
    if (tab->opclass[op] == OC_READ_REQ) {
        int64_t lo = (dmalen + 4095) / 4096, hi = (dmalen + 255) / 256;
        nxt = psn + (lo > 1 ? lo : 1);
        if (od_set(&ch->reads, psn, (val_t){p->t, 0, (uint32_t)dmalen, (int32_t)(psn + (hi > 1 ? hi : 1) - 1),
                                            p->tns, p->frame}) < 0)
            return -1;
        while (ch->reads.n > PENDING_MAX)
            od_popfirst(&ch->reads);
        count_op(ch, MK_READ, 1, dmalen);
    }
    if (!ch->has_expected || psn_diff(nxt, ch->expected) > 0) {
        ch->has_expected = 1;
        ch->expected = nxt % PSN_MOD;
    }
    if (tab->opclass[op] != OC_READ_REQ) {
        message(ch, tab->opkind[op], tab->seg[op], p);
        if (rc && awaits_ack(ch, p) < 0)
            return -1;
    }
    if (rc && ch->pending.n + ch->reads.n > ch->c[FC_MAX_OUTSTANDING])
        ch->c[FC_MAX_OUTSTANDING] = ch->pending.n + ch->reads.n;
    return 0;
}

static int request(channel *ch, const flow_tables *tab, const flow_pkt *p)
{
    int64_t *c = ch->c, psn = p->psn;
    c[FC_REQUEST_PACKETS]++;
    double prev_t = ch->has_last_req ? ch->last_req_t : p->t;
    ch->has_last_req = 1;
    ch->last_req_t = p->t;
    if (p->bad) {                         /* the responder drops it silently: it shows up as a gap */
        c[FC_BAD_ICRC]++;
        return 0;
    }
    if (ch->has_fill) {
        if (psn_diff(psn, ch->fill) == 1 && od_get(&ch->seen, psn)) {
            refile(ch);                   /* go-back-N resends what follows: the late PSN was resent */
            resent(ch, ch->fill, ch->fill_t, ch->fill_prev_t, ch->fill_frame);
        }
        ch->has_fill = 0;
    }
    val_t *was = od_get(&ch->seen, psn);
    if (was) {
        c[FC_RETRANSMISSIONS]++;
        EMIT(ch, EV_RETRANSMISSION, p->frame, psn);
        if (duplicate(ch, p, was) < 0)
            return -1;
        sent_again(ch, p);
        resent(ch, psn, p->t, was->t, p->frame);
        was->t = p->t;
        return 0;
    }
    if (gap_or_late(ch, p, prev_t) < 0)
        return -1;
    if (od_set(&ch->seen, psn, (val_t){p->t, ch->missing.n == 0, 0, 0}) < 0)   /* got: came in sequence */
        return -1;
    while (ch->seen.n > SEEN_WINDOW)
        od_popfirst(&ch->seen);
    return advance(ch, tab, p);
}

/* A NAK or RNR NAK during an episode that no timer can explain (it began sooner than the shortest local ACK
 * timeout): the capture shows the resends before the NAK that caused them (mirrored at another point). */
static void explain_episode(channel *ch, int cause)
{
    if (ch->ep_open && ch->ep_cause == EP_TIMEOUT && ch->ep_wait < TTR_MIN) {
        ch->ep_cause = cause;
        ch->nak_since = ch->rnr_since = 0;
    }
}

static int response(channel *ch, const flow_tables *tab, const flow_pkt *p)
{
    int64_t *c = ch->c, psn = p->psn;
    int oc = tab->opclass[p->op], seg = tab->seg[p->op];
    ch->answers_since++;
    if (oc == OC_READ_RESP) {
        c[FC_READ_RESPONSE_PACKETS]++;
        for (int64_t q = ch->reads.head; q < ch->reads.tail; q++) {
            ent_t *e = at(&ch->reads, q);
            if (!e->alive)
                continue;
            int64_t d0 = psn_diff(psn, e->key), d1 = psn_diff(e->v.plast, psn);
            if (d0 < 0 || d1 < 0)
                continue;
            EMIT(ch, EV_READ_REQUEST, p->frame, e->v.frame);
            if (d0 == 0 && !e->v.got && (seg == SEG_FIRST || seg == SEG_ONLY) && add_lat(ch, 1, p->t - e->v.t) < 0)
                return -1;
            e->v.got += p->paylen;
            if (seg == SEG_LAST || seg == SEG_ONLY) {
                if (e->v.got != (int64_t)e->v.dmalen)
                    c[FC_LENGTH_MISMATCH]++;
                od_pop(&ch->reads, e->key, NULL);
                c[FC_READS_COMPLETED]++;
                ch->acked_since = 1;
                expects(ch, psn + 1);
                if (ack(ch, NULL, p->t, psn) < 0)
                    return -1;
                if (ch->has_expected && psn_diff(psn + 1, ch->expected) > 0)
                    ch->expected = (psn + 1) % PSN_MOD;
            }
            return 0;
        }
        c[FC_UNMATCHED_READ_RESPONSES]++;
        return 0;
    }
    int kind = (p->syn >> 5) & 3, code = p->syn & 0x1F;
    if (kind == 0) {
        c[FC_ACKS]++;
        ch->acked_since = 1;
        ch->nak_since = ch->rnr_since = 0;
        expects(ch, psn + 1);
        settle(ch, psn, 1);
        if (ack(ch, p, p->t, psn) < 0)
            return -1;
    } else if (kind == 1 || kind == 3) {          /* a NAK answers the request of its PSN, still pending */
        val_t *req = od_get(&ch->pending, psn);
        if (req)
            answers(ch, p, req);
        if (kind == 1 || code == 0) {             /* RNR, PSN sequence error: the PSN it expects */
            expects(ch, psn);
            unaccept(ch, psn);
            settle(ch, psn, 0);
        }
    }
    if (kind == 1) {
        c[FC_RNR_NAKS]++;
        ch->nak_seen = 1;
        ch->rnr_since = 1;
        explain_episode(ch, EP_RNR);
        if (ch->has_fill)
            refile(ch);
        if (!ch->rnr_order[code])
            ch->rnr_order[code] = ++ch->stamp;
        ch->rnr[code]++;
    } else if (kind == 3) {
        if (!ch->nak_order[code])
            ch->nak_order[code] = ++ch->stamp;
        ch->nak[code]++;
        c[FC_NAKS]++;
        ch->nak_seen = 1;
        ch->nak_since = 1;
        explain_episode(ch, EP_NAK);
        if (ch->has_fill)
            refile(ch);
    }
    if (oc == OC_ATOMIC_ACK)
        c[FC_ATOMIC_ACKS]++;
    return 0;
}

static int add_pkey(conv *v, uint16_t k)
{
    for (int64_t i = 0; i < v->npkeys; i++)
        if (v->pkeys[i] == k)
            return 0;
    if (v->npkeys == v->pkcap) {
        int64_t cap = v->pkcap ? v->pkcap * 2 : 4;
        uint16_t *a = realloc(v->pkeys, (size_t)cap * sizeof *a);
        if (!a)
            return -1;
        v->pkeys = a, v->pkcap = cap;
    }
    v->pkeys[v->npkeys++] = k;
    return 0;
}

int flows_feed(flow_state *s, const flow_tables *tab, const flow_pkt *pk, int64_t n, const int32_t *conv_of,
               const uint8_t *side_of, int64_t nhalves)
{
    for (int64_t i = 0; i < n; i++) {
        const flow_pkt *p = &pk[i];
        if (p->half >= nhalves)
            continue;
        int32_t ci = conv_of[p->half];
        if (ci < 0 || ci >= s->n)
            continue;
        conv *v = &s->c[ci];
        int side = side_of[p->half] & 1, op = p->op;
        for (int k = 0; k < 2; k++) {
            v->ch[k].log = &s->log;
            v->ch[k].conv = ci;
            v->ch[k].side = (uint8_t)k;
        }
        if (!v->started) {
            v->started = 1;
            v->first = p->t;
            v->first_tns = p->tns;
            v->first_frame = p->frame;
        }
        v->last = p->t;
        v->packets[side]++;
        v->bytes[side] += p->len;
        v->payload[side] += p->paylen;
        v->qpn[1 - side] = p->destqp;
        if (p->ecn == 3)
            v->ecn_ce[side]++;
        if (op == 0x81) {                 /* the CNP goes to side 1-side: the notified sender */
            v->cnps[1 - side]++;
            continue;
        }
        if (add_pkey(v, p->p_key) < 0)
            return -1;
        if (v->first_op < 0)
            v->first_op = op;
        int oc = tab->opclass[op], req = oc == OC_REQUEST || oc == OC_READ_REQ;
        if (p->bad && !(req && tab->transport[op] != TR_UD)) {
            v->ch[req ? side : 1 - side].c[FC_BAD_ICRC]++;   /* discarded by its receiver, unanswered */
            continue;
        }
        if (tab->transport[op] == TR_UD) {
            count_op(&v->ch[side], MK_SEND, 1, p->paylen);
            continue;
        }
        int err = req ? request(&v->ch[side], tab, p) : response(&v->ch[1 - side], tab, p);
        if (err < 0)
            return -1;
    }
    return 0;
}

int flows_summary(const flow_state *s, int64_t ci, flow_summary *o)
{
    if (ci < 0 || ci >= s->n)
        return -1;
    const conv *v = &s->c[ci];
    memset(o, 0, sizeof *o);
    for (int k = 0; k < 2; k++) {
        o->packets[k] = v->packets[k], o->bytes[k] = v->bytes[k], o->payload[k] = v->payload[k];
        o->cnps[k] = v->cnps[k], o->ecn_ce[k] = v->ecn_ce[k], o->qpn[k] = v->qpn[k];
        const channel *ch = &v->ch[k];
        memcpy(o->counters[k], ch->c, sizeof ch->c);
        o->counters[k][FC_UNACKNOWLEDGED] = ch->pending.n + ch->reads.n;
        o->counters[k][FC_NOT_CAPTURED] += ch->missing.n;   /* never resent by the capture's end */
        memcpy(o->ops[k], ch->ops, sizeof ch->ops);
        memcpy(o->op_bytes[k], ch->op_bytes, sizeof ch->op_bytes);
        memcpy(o->ops_order[k], ch->ops_order, sizeof ch->ops_order);
        memcpy(o->bytes_order[k], ch->bytes_order, sizeof ch->bytes_order);
        memcpy(o->nak[k], ch->nak, sizeof ch->nak);
        memcpy(o->nak_order[k], ch->nak_order, sizeof ch->nak_order);
        memcpy(o->rnr[k], ch->rnr, sizeof ch->rnr);
        memcpy(o->rnr_order[k], ch->rnr_order, sizeof ch->rnr_order);
        memcpy(o->episodes[k], ch->episodes, sizeof ch->episodes);
        o->timeout_wait_min[k] = ch->wait_min, o->timeout_wait_max[k] = ch->wait_max;
        close_episode(ch, o->episodes[k], &o->timeout_wait_min[k], &o->timeout_wait_max[k]);
        o->max_retries[k] = ch->max_retries;
        int stalled = ch->retries && !ch->acked_since && ch->pending.n + ch->reads.n > 0;
        o->stall_retries[k] = stalled ? ch->retries : 0;
        o->stall_psn[k] = stalled ? ch->episode_psn : -1;
        o->stall_frame[k] = stalled ? ch->last_resend_frame : -1;
        o->stall_answers[k] = stalled ? ch->answers_since : 0;
        o->stall_cause[k] = stalled ? ch->ep_cause : 0;
    }
    o->first_frame = v->started ? v->first_frame : -1;
    o->first_tns = v->first_tns;
    o->first = v->first, o->last = v->last;
    o->first_op = v->first_op;
    o->n_pkeys = v->npkeys;
    return v->started;
}

int64_t flows_latency(const flow_state *s, int64_t ci, int ch, int which, const double **samples)
{
    const channel *c = &s->c[ci].ch[ch & 1];
    *samples = c->lat[which & 1];
    return c->nlat[which & 1];
}

const uint16_t *flows_pkeys(const flow_state *s, int64_t ci, int64_t *n)
{
    *n = s->c[ci].npkeys;
    return s->c[ci].pkeys;
}

/* Gather one flow_pkt per listed record: `off` holds each source field's byte offset in a record, in
 * the order of SPILL_FIELDS (flows.h); `half` is each row's half-flow number. */
void flows_spill(const uint8_t *rec, int64_t itemsize, const int64_t *rows, int64_t n, const int64_t *off,
                 const uint32_t *half, const uint32_t *frames, flow_pkt *out)
{
#define RD(T, f) ({ T v_; memcpy(&v_, r + off[f], sizeof v_); v_; })
    for (int64_t i = 0; i < n; i++) {
        int64_t j = rows ? rows[i] : i;
        const uint8_t *r = rec + j * itemsize;
        flow_pkt *p = &out[i];
        memset(p, 0, sizeof *p);
        p->t = RD(double, SF_TIME);
        p->tns = RD(int64_t, SF_TIME_NS);
        p->half = half[i];
        p->psn = RD(uint32_t, SF_PSN);
        p->len = RD(uint32_t, SF_LEN);
        p->paylen = RD(int32_t, SF_PAYLEN);
        p->dmalen = RD(uint32_t, SF_DMALEN);
        p->destqp = RD(uint32_t, SF_DESTQP);
        p->frame = frames ? frames[j] : RD(uint32_t, SF_FRAME);
        p->p_key = RD(uint16_t, SF_P_KEY);
        p->op = RD(uint8_t, SF_OPCODE);
        p->syn = RD(uint8_t, SF_SYNDROME);
        p->ecn = RD(uint8_t, SF_ECN);
        p->bad = RD(uint8_t, SF_ICRC) == C_BAD;
    }
#undef RD
}

const flow_event *flows_events(flow_state *s, int64_t *n, int64_t *lost)
{
    for (int64_t i = 0; i < s->n && !s->finished; i++)
        for (int k = 0; k < 2; k++) {
            channel *ch = &s->c[i].ch[k];
            if (!ch->log)
                continue;
            end_episode(ch);
            for (int64_t q = ch->missing.head; q < ch->missing.tail; q++)
                if (at(&ch->missing, q)->alive)
                    EMIT(ch, EV_NOT_CAPTURED, at(&ch->missing, q)->v.got, at(&ch->missing, q)->key);
            if (ch->retries && !ch->acked_since && ch->pending.n + ch->reads.n > 0)
                EMIT(ch, EV_GAVE_UP, ch->last_resend_frame, ch->episode_psn);
        }
    s->finished = 1;
    *n = s->log.failed ? -1 : s->log.n;
    *lost = s->log.lost;
    return s->log.ev;
}
