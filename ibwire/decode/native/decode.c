/* One captured packet -> one record: link-layer framing, LRH/GRH/IP/UDP, BTH and extended headers, the
 * common MAD header and CM REQ/REP QPNs, ICRC/VCRC status.
 *
 * Layouts: Ethernet/802.1Q (up to two tags), Linux cooked v1/v2 (SLL/SLL2), ERF types 21 and 25 with
 * chained extension headers, raw InfiniBand (link type 247); LRH (IBA Vol 1 §7.7), GRH (§8.3), BTH and
 * extended headers (§9.2-9.3, offsets per opcode from dissectors.opcodes), MAD common header (§13.4.3),
 * CM REQ/REP (§12.6.5, §12.6.8), RoCEv1 (Annex A16) and RoCEv2 (Annex A17); MAC control PAUSE and PFC
 * frames (IEEE 802.3 Annex 31B, 802.1Qbb).  A UDP packet on another port
 * counts as RoCEv2 only when its first bytes form a plausible BTH and its ICRC matches.  Bytes beyond a
 * packet's captured end read as zero, so truncated packets decode as far as they go and are flagged. */
#include <string.h>

#include "crc.h"
#include "decode.h"
#include "numbers.h"

typedef struct {
    const uint8_t *p;
    int64_t lim;        /* absolute end of the packet's captured bytes */
} pkt;

/* Where a packet's headers lie (absolute offsets in buf, -1 absent) as the steps below find them. */
typedef struct {
    int kind;
    int64_t lrh, l3, udp, bth, end;   /* l3: a GRH, IPv4 or IPv6 header; end: where the ICRC starts */
    int64_t vlan;
    uint64_t et;                      /* the ethertype after any VLAN tags; roce1_ethertype after an LRH */
    unsigned flags;
} hdrs;

static inline unsigned B(const pkt *k, int64_t o)
{
    return (o >= 0 && o < k->lim) ? k->p[o] : 0;
}

static inline uint64_t BE(const pkt *k, int64_t o, int n)
{
    uint64_t v = 0;
    if (o >= 0 && o + n <= k->lim) {
        for (int i = 0; i < n; i++)
            v = v << 8 | k->p[o + i];
    } else {
        for (int i = 0; i < n; i++)
            v = v << 8 | B(k, o + i);
    }
    return v;
}

static inline uint64_t LE(const pkt *k, int64_t o, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | B(k, o + i);
    return v;
}

/* `out` is restrict: rows never overlap the packet bytes or the tables, so no store to them makes the
 * compiler load the tables again. */
#define AT(f) (out + c->field_off[f] + row * c->field_step[f])
static inline void put8(uint8_t *q, uint64_t v) { *q = (uint8_t)v; }
static inline void put16(uint8_t *q, uint64_t v) { uint16_t x = (uint16_t)v; memcpy(q, &x, 2); }
static inline void put32(uint8_t *q, uint64_t v) { uint32_t x = (uint32_t)v; memcpy(q, &x, 4); }
static inline void puti32(uint8_t *q, int64_t v) { int32_t x = (int32_t)v; memcpy(q, &x, 4); }
static inline void put64(uint8_t *q, uint64_t v) { memcpy(q, &v, 8); }

static void copy_bytes(const pkt *k, int64_t o, uint8_t *q, int n)
{
    for (int i = 0; i < n; i++)
        q[i] = (uint8_t)B(k, o + i);
}

static inline int is_vlan_tpid(uint64_t e)
{
    return e == ETHERTYPE_VLAN || e == ETHERTYPE_QINQ || e == ETHERTYPE_QINQ_OLD;
}

static inline uint64_t ext_field(const decode_job *c, const pkt *k, int h, unsigned op, int64_t bth, int at, int n)
{
    int o = c->ext_off[h * 256 + op];
    return o < 0 ? 0 : BE(k, bth + 12 + o + at, n);
}

/* Does a SEND's payload start with an IPoIB header (RFC 4391 §6: ethertype, 16 reserved zero bits) and a
 * plausible IPv4, IPv6 or IB ARP packet?  As dissectors/payloads.py decides (Wireshark's ethertype
 * heuristic on InfiniBand payloads). */
static int ipoib_payload(const pkt *k, int64_t p, int64_t len)
{
    uint64_t etype = BE(k, p, 2), first = B(k, p + 4);
    if (len < 4 || BE(k, p + 2, 2) != 0)
        return 0;
    if (etype == ETHERTYPE_IPV4)
        return len >= 24 && first >> 4 == 4 && (first & 15) >= 5;
    if (etype == ETHERTYPE_IPV6)
        return len >= 44 && first >> 4 == 6;
    return etype == ETHERTYPE_ARP && len >= 12 && BE(k, p + 4, 4) == 0x00200800;    /* ARP, hardware type 32 */
}

/* BTH and extended headers. */
static void bth_fields(const decode_job *c, const pkt *k, uint8_t *restrict out, int64_t row, int64_t b)
{
    unsigned op = B(k, b), b1 = B(k, b + 1), b4 = B(k, b + 4);
    put8(AT(R_OPCODE), op);
    put8(AT(R_SE), b1 >> 7);
    put8(AT(R_M), (b1 >> 6) & 1);
    put8(AT(R_PADCNT), (b1 >> 4) & 3);
    put8(AT(R_TVER), b1 & 15);
    put16(AT(R_P_KEY), BE(k, b + 2, 2));
    put8(AT(R_FECN), b4 >> 7);
    put8(AT(R_BECN), (b4 >> 6) & 1);
    put32(AT(R_DESTQP), BE(k, b + 5, 3));
    put8(AT(R_A), B(k, b + 8) >> 7);
    put32(AT(R_PSN), BE(k, b + 9, 3));

    put32(AT(R_DETH_Q_KEY), ext_field(c, k, H_DETH, op, b, 0, 4));
    put32(AT(R_DETH_SRCQP), ext_field(c, k, H_DETH, op, b, 5, 3));
    put32(AT(R_XRCSRQ), ext_field(c, k, H_XRCETH, op, b, 1, 3));
    put64(AT(R_RETH_VA), ext_field(c, k, H_RETH, op, b, 0, 8));
    put32(AT(R_RETH_R_KEY), ext_field(c, k, H_RETH, op, b, 8, 4));
    put32(AT(R_RETH_DMALEN), ext_field(c, k, H_RETH, op, b, 12, 4));
    put8(AT(R_AETH_SYNDROME), ext_field(c, k, H_AETH, op, b, 0, 1));
    put32(AT(R_AETH_MSN), ext_field(c, k, H_AETH, op, b, 1, 3));
    put64(AT(R_ATOMIC_VA), ext_field(c, k, H_ATOMICETH, op, b, 0, 8));
    put32(AT(R_ATOMIC_R_KEY), ext_field(c, k, H_ATOMICETH, op, b, 8, 4));
    put64(AT(R_ATOMIC_SWAPDT), ext_field(c, k, H_ATOMICETH, op, b, 12, 8));
    put64(AT(R_ATOMIC_CMPDT), ext_field(c, k, H_ATOMICETH, op, b, 20, 8));
    put64(AT(R_ATOMICACK), ext_field(c, k, H_ATOMICACKETH, op, b, 0, 8));
    put32(AT(R_IMMDT), ext_field(c, k, H_IMMDT, op, b, 0, 4));
    put32(AT(R_IETH), ext_field(c, k, H_IETH, op, b, 0, 4));
}

/* The common MAD header at m, and a CM REQ's or REP's comm IDs and QPN. */
static void mad_header(const decode_job *c, const pkt *k, uint8_t *restrict out, int64_t row, int64_t m)
{
    unsigned cls = B(k, m + 1);
    uint64_t aid = BE(k, m + 16, 2);
    put8(AT(R_MAD_CLASS), cls);
    put8(AT(R_MAD_CLASSVER), B(k, m + 2));
    put8(AT(R_MAD_METHOD), B(k, m + 3));
    put16(AT(R_MAD_STATUS), BE(k, m + 4, 2));
    put64(AT(R_MAD_TID), BE(k, m + 8, 8));
    put16(AT(R_MAD_ATTRID), aid);
    put32(AT(R_MAD_ATTRMOD), BE(k, m + 20, 4));
    if (cls == 0x07) {                                   /* CM: local/remote comm IDs, QPN */
        put32(AT(R_CM_COMM_ID), BE(k, m + 24, 4));
        if (aid != 0x10)
            put32(AT(R_CM_REMOTE_COMM_ID), BE(k, m + 28, 4));
        if (aid == 0x10)
            put32(AT(R_CM_QPN), BE(k, m + 56, 3));       /* REQ: local QPN */
        else if (aid == 0x13)
            put32(AT(R_CM_QPN), BE(k, m + 36, 3));       /* REP: local QPN */
    }
}

/* ICRC status of a packet whose captured bytes reach past its ICRC unless `truncated`. */
static int icrc_status(const decode_job *c, const pkt *k, const hdrs *h, int truncated)
{
    int st = c->icrc ? C_GOOD : C_UNCHECKED;
    if (truncated)
        st = C_TRUNC;
    if (h->end < h->bth + 12)
        st = C_ABSENT;
    if (c->icrc && st == C_GOOD) {
        int kind = h->kind, native = kind == K_IB || kind == K_IBGRH;
        icrc_span s;
        s.start = native ? h->lrh : h->l3 - 8;
        s.end = h->end;
        s.lrh_vl = kind == K_IB ? h->lrh : -1;
        s.ones8 = kind == K_IB ? -1 : s.start;
        s.grh = (kind == K_IBGRH || kind == K_ROCE1 || kind == K_ROCE2V6) ? h->l3 : -1;
        s.ip4 = kind == K_ROCE2V4 ? h->l3 : -1;
        s.udp = (kind == K_ROCE2V4 || kind == K_ROCE2V6) ? h->udp : -1;
        s.bth = h->bth;
        if (icrc_of(c->buf, c->size, &s) != (uint32_t)LE(k, h->end, 4))
            st = C_BAD;
    }
    return st;
}

/* VCRC status of a native IB packet (an LRH). */
static int vcrc_status(const decode_job *c, const pkt *k, const hdrs *h)
{
    if (h->end + 6 > k->lim)
        return C_TRUNC;
    if (c->icrc && vcrc_of(c->buf, c->size, h->lrh, h->end + 4, c->vtable) != (uint16_t)LE(k, h->end + 4, 2))
        return C_BAD;
    return c->icrc ? C_GOOD : C_UNCHECKED;
}

/* The transport part: BTH, extended headers, MAD header or IPoIB payload, CRC status.  What the packet is
 * (MAD or not, malformed) follows dissectors.decisions through the `known` table. */
static void transport(const decode_job *c, const pkt *k, uint8_t *restrict out, int64_t row, hdrs *h)
{
    int64_t b = h->bth, e = h->end;
    unsigned op = B(k, b), b1 = B(k, b + 1);
    uint64_t destqp = BE(k, b + 5, 3), srcqp = ext_field(c, k, H_DETH, op, b, 5, 3);
    bth_fields(c, k, out, row, b);

    int64_t hdr_end = b + 12 + c->ext_len[op];
    int64_t paylen = e - hdr_end - ((c->known[op] & 2) ? (b1 >> 4) & 3 : 0);   /* no payload, no pad */
    int mad = (c->known[op] & 8) && (destqp <= c->mad_qp_max || (c->ext_off[H_DETH * 256 + op] >= 0 &&
                                                                  srcqp <= c->mad_qp_max));
    h->flags |= FL_BTH;
    if (paylen < 0 || (mad && paylen < c->mad_header_len))
        h->flags |= FL_MALFORMED;
    puti32(AT(R_PAYLEN), paylen < 0 ? 0 : paylen);
    int truncated = e + 4 > k->lim;
    if (truncated)
        h->flags |= FL_TRUNCATED;

    if (mad) {
        pkt declared = {k->p, e < k->lim ? e : k->lim};     /* the MAD's bytes end where its packet says */
        h->flags |= FL_MAD;
        mad_header(c, &declared, out, row, hdr_end);
    } else if ((c->known[op] & 4) && ipoib_payload(k, hdr_end, paylen)) {
        h->flags |= FL_IPOIB;
    }

    put8(AT(R_ICRC), icrc_status(c, k, h, truncated));
    if (h->lrh >= 0)
        put8(AT(R_VCRC), vcrc_status(c, k, h));
}

/* Ethernet with 802.1Q/802.1ad tags, Linux cooked v1/v2, IPoIB, ERF with extension headers, raw IB: where
 * the LRH or the layer-3 header starts, and its ethertype. */
static void link_layer(const decode_job *c, const pkt *k, uint8_t *restrict out, int64_t row, int64_t d, hdrs *h)
{
    int64_t lt = c->linktype[row];
    if (lt == LINKTYPE_ETHERNET) {                             /* Ethernet, 802.1Q/802.1ad tags */
        copy_bytes(k, d, AT(R_ETH_DST), 6);
        copy_bytes(k, d + 6, AT(R_ETH_SRC), 6);
        int64_t at = 14;
        h->et = BE(k, d + 12, 2);
        for (int t = 0; t < 2 && is_vlan_tpid(h->et); t++) {
            if (h->vlan < 0) {
                h->vlan = BE(k, d + 14 + 4 * t, 2) & 0xFFF;
                put8(AT(R_PCP), B(k, d + 14 + 4 * t) >> 5);   /* 802.1Q priority code point */
            }
            h->et = BE(k, d + 16 + 4 * t, 2);
            at += 4;
        }
        h->l3 = d + at;
    } else if (lt == LINKTYPE_LINUX_SLL || lt == LINKTYPE_LINUX_SLL2) {   /* Linux cooked v1 / v2 */
        int v1 = lt == LINKTYPE_LINUX_SLL;
        int hl = v1 ? 16 : 20, et_at = v1 ? 14 : 0, arphrd_at = v1 ? 2 : 8;
        h->et = BE(k, d + et_at, 2);
        h->l3 = d + hl;
        if (BE(k, d + arphrd_at, 2) == 32)                     /* ARPHRD_INFINIBAND: IPoIB */
            h->kind = K_IPOIB;
    } else if (lt == LINKTYPE_IPOIB) {
        h->kind = K_IPOIB;
    } else if (lt == LINKTYPE_ERF) {                           /* ERF: type, extension headers */
        unsigned t = B(k, d + 8);
        int64_t at = 16;
        int more = (t & 0x80) != 0;
        while (more && d + at + 8 <= k->lim) {                 /* 8-byte extension headers, chained by bit 7 */
            more = (B(k, d + at) & 0x80) != 0;
            at += 8;
        }
        t &= 0x7F;
        if (t == 21)
            h->lrh = d + at;
        else if (t == 25)
            h->kind = K_IBLINK;
    } else if (lt == LINKTYPE_INFINIBAND) {
        h->lrh = d;
    }
}

/* Native InfiniBand: the LRH, and the GRH or BTH after it. */
static void lrh(const decode_job *c, const pkt *k, uint8_t *restrict out, int64_t row, hdrs *h)
{
    int64_t l = h->lrh;
    unsigned b0 = B(k, l), b1 = B(k, l + 1), lnh = b1 & 3;
    int64_t len = (int64_t)(BE(k, l + 4, 2) & 0x7FF) * 4;
    put8(AT(R_VL), b0 >> 4);
    put8(AT(R_SL), b1 >> 4);
    put16(AT(R_DLID), BE(k, l + 2, 2));
    put16(AT(R_SLID), BE(k, l + 6, 2));
    h->kind = lnh == 3 ? K_IBGRH : K_IB;
    if (lnh == 3) {
        h->l3 = l + 8;
        h->et = c->roce1_ethertype;                            /* a GRH follows, as in RoCEv1 */
    }
    if (lnh >= 2) {
        h->bth = l + (lnh == 3 ? 48 : 8);
        if (len < 8)
            h->flags |= FL_MALFORMED;
    }
    h->end = l + len - 4;
}

/* A GRH: IB routed or RoCEv1. */
static void grh(const decode_job *c, const pkt *k, uint8_t *restrict out, int64_t row, hdrs *h)
{
    int64_t l3 = h->l3;
    copy_bytes(k, l3 + 8, AT(R_SRC), 16);
    copy_bytes(k, l3 + 24, AT(R_DST), 16);
    put8(AT(R_ECN), (B(k, l3 + 1) >> 4) & 3);
    put8(AT(R_DSCP), (B(k, l3) & 0x0F) << 2 | B(k, l3 + 1) >> 6);    /* traffic class >> 2 */
    h->flags |= FL_GRH;
    if (h->lrh < 0) {
        h->kind = K_ROCE1;
        h->bth = l3 + 40;
        h->end = l3 + 40 + (int64_t)BE(k, l3 + 4, 2) - 4;
    }
}

/* An IPv4 or IPv6 header: addresses (IPv4 as v4-mapped IPv6), ECN, DSCP; where its UDP header starts, or
 * -1 when it carries no UDP. */
static int64_t ip_header(const decode_job *c, const pkt *k, uint8_t *restrict out, int64_t row, const hdrs *h)
{
    int64_t l3 = h->l3;
    if (h->et == ETHERTYPE_IPV4) {
        unsigned b0 = B(k, l3);
        int64_t ihl = (b0 & 0x0F) * 4;
        int isudp = B(k, l3 + 9) == 17 && b0 >> 4 == 4 && ihl >= 20 && (BE(k, l3 + 6, 2) & 0x3FFF) == 0;
        put8(AT(R_ECN), B(k, l3 + 1) & 3);
        put8(AT(R_DSCP), B(k, l3 + 1) >> 2);
        uint8_t *s = AT(R_SRC), *t = AT(R_DST);
        memset(s, 0, 10);
        memset(t, 0, 10);
        s[10] = s[11] = t[10] = t[11] = 0xFF;
        copy_bytes(k, l3 + 12, s + 12, 4);
        copy_bytes(k, l3 + 16, t + 12, 4);
        return isudp ? l3 + ihl : -1;
    }
    int isudp = B(k, l3 + 6) == 17 && B(k, l3) >> 4 == 6;
    put8(AT(R_ECN), (B(k, l3 + 1) >> 4) & 3);
    put8(AT(R_DSCP), (B(k, l3) & 0x0F) << 2 | B(k, l3 + 1) >> 6);
    copy_bytes(k, l3 + 8, AT(R_SRC), 16);
    copy_bytes(k, l3 + 24, AT(R_DST), 16);
    return isudp ? l3 + 40 : -1;
}

/* The UDP header at u: RoCEv2 on roce2_port, or on another port when its first bytes form a plausible BTH
 * and its ICRC matches. */
static void udp(const decode_job *c, const pkt *k, uint8_t *restrict out, int64_t row, hdrs *h, int64_t u)
{
    int v4 = h->et == ETHERTYPE_IPV4;
    uint64_t sp = BE(k, u, 2), dp = BE(k, u + 2, 2);
    int64_t ulen = (int64_t)BE(k, u + 4, 2);
    int roce = sp == c->roce2_port || dp == c->roce2_port;
    put16(AT(R_UDP_SRC), sp);
    put16(AT(R_UDP_DST), dp);
    h->udp = u;
    h->bth = u + 8;
    h->end = u + ulen - 4;
    if (roce) {
        h->kind = v4 ? K_ROCE2V4 : K_ROCE2V6;
        if (ulen < 8 + 12 + 4)
            h->flags |= FL_MALFORMED;
        if (!v4)
            h->flags |= FL_GRH;
    } else if (ulen >= 8 + 12 + 4 && h->end + 4 <= k->lim && h->end >= h->bth + 12) {
        unsigned op = B(k, h->bth);                            /* another port: BTH plausible, ICRC matches */
        if ((c->known[op] & 1) && (B(k, h->bth + 1) & 0x0F) == 0 && h->end >= h->bth + 12 + c->ext_len[op]) {
            icrc_span s = {h->l3 - 8, h->end, -1, h->l3 - 8, v4 ? -1 : h->l3, v4 ? h->l3 : -1, u, h->bth};
            if (icrc_of(c->buf, c->size, &s) == (uint32_t)LE(k, h->end, 4)) {
                h->kind = v4 ? K_ROCE2V4 : K_ROCE2V6;
                h->flags |= FL_HEURISTIC | (v4 ? 0 : FL_GRH);
            }
        }
    }
}

/* A MAC control frame's payload at p (IEEE 802.3 Annex 31B): the opcode; a PAUSE's pause_time; a PFC's
 * class-enable vector and its eight pause times, enabled or not (IEEE 802.1Qbb §36.1.3), as tshark shows them. */
static void mac_control(const decode_job *c, const pkt *k, uint8_t *restrict out, int64_t row, int64_t p)
{
    uint64_t op = BE(k, p, 2);
    put16(AT(R_MACC_OPCODE), op);
    if (op == MACC_OPCODE_PAUSE)
        put16(AT(R_MACC_PAUSE_TIME), BE(k, p + 2, 2));
    if (op == MACC_OPCODE_PFC) {
        put16(AT(R_MACC_ENBV), BE(k, p + 2, 2));
        for (int q = 0; q < 8; q++)
            put16(AT(R_MACC_PAUSE_C0 + q), BE(k, p + 4 + 2 * q, 2));
    }
}

static void decode_one(const decode_job *c, int64_t row)
{
    int64_t d = c->data[row], caplen = c->caplen[row];
    pkt k = {c->buf, d + caplen < c->size ? d + caplen : c->size};
    uint8_t *restrict out = c->out;
    hdrs h = {K_OTHER, -1, -1, -1, -1, -1, -1, 0, 0};

    link_layer(c, &k, out, row, d, &h);
    if (h.lrh >= 0)
        lrh(c, &k, out, row, &h);
    if (h.et == c->roce1_ethertype)
        grh(c, &k, out, row, &h);
    if ((h.et == ETHERTYPE_IPV4 || h.et == ETHERTYPE_IPV6) && h.kind != K_IPOIB) {
        int64_t u = ip_header(c, &k, out, row, &h);
        if (u >= 0)
            udp(c, &k, out, row, &h, u);
    }

    if (h.et == ETHERTYPE_MAC_CONTROL && h.lrh < 0 && h.kind != K_IPOIB)
        mac_control(c, &k, out, row, h.l3);

    int has_bth = h.bth >= 0 && (h.kind == K_ROCE1 || h.kind == K_ROCE2V4 || h.kind == K_ROCE2V6 ||
                                 h.kind == K_IB || h.kind == K_IBGRH);
    put8(AT(R_LINK), h.kind);
    put16(AT(R_ETYPE), h.lrh < 0 ? h.et : 0);                  /* the ethertype after any VLAN tags */
    puti32(AT(R_VLAN), h.vlan);
    if (has_bth)
        transport(c, &k, out, row, &h);
    if (c->wirelen[row] > caplen)
        h.flags |= FL_TRUNCATED;
    put8(AT(R_FLAGS), h.flags);
}

/* Packets ahead whose first two cache lines (every header the decoder reads, for most packets) are
 * requested before their turn: the walk's prefetches have left them in the outer caches at best. */
#define DECODE_AHEAD 8

void decode_packets(const decode_job *c)
{
    for (int64_t i = 0; i < c->n; i++) {
        if (i + DECODE_AHEAD < c->n) {     /* a later packet's headers, fetched while this one is decoded */
            __builtin_prefetch(c->buf + c->data[i + DECODE_AHEAD]);
            __builtin_prefetch(c->buf + c->data[i + DECODE_AHEAD] + 64);
        }
        decode_one(c, i);
    }
}
