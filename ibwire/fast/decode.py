"""Vectorised decoding of a batch of packets into `RECORD` rows.

Layouts: Ethernet/802.1Q, Linux cooked v1/v2 (SLL/SLL2), ERF (types 21 and 25), raw InfiniBand LRH
(IBA Vol 1 §7.7), GRH (§8.3), BTH and extended headers (§9.2-9.3), MAD common header (§13.4.3), CM REQ/REP
(§12.6.5, -.8), RoCEv1 (Annex A16, ethertype 0x8915) and RoCEv2 (Annex A17, UDP 4791).  Extended header
order comes from dissectors.opcodes; a UDP packet on another port counts as RoCEv2 only when its first
bytes form a plausible BTH and its ICRC matches.
"""
import numpy as np

from dissectors.opcodes import HEADER_LEN, OPCODES, ROCE_V1_ETHERTYPE, ROCE_V2_PORT

from . import records as R
from .crc import icrc_batch, vcrc_batch
from .kernels import gather
from .walk import Positions

_HDRS = ("rdeth", "deth", "xrceth", "reth", "aeth", "atomiceth", "atomicacketh", "immdt", "ieth", "feth",
         "cnp", "dcext")


def _opcode_tables():
    """Per-opcode offset (after the 12-byte BTH) of each extended header, -1 when absent; total length."""
    off = {h: np.full(256, -1, np.int64) for h in _HDRS}
    total = np.zeros(256, np.int64)
    known = np.zeros(256, bool)
    for code, op in OPCODES.items():
        o = 0
        for h in op.headers:
            off[h][code] = o
            o += HEADER_LEN[h]
        total[code] = o
        known[code] = True
    return off, total, known


EXT_OFF, EXT_LEN, KNOWN = _opcode_tables()
BTH_WIN = 48    # BTH and the longest extended-header chain (DC: 8 + 4 + 8 + 16)
_ETH_VLAN = (0x8100, 0x88A8, 0x9100)


HEAD = 128      # bytes copied from the start of every packet; deeper windows come from the buffer


def _align(w: np.ndarray, rel: np.ndarray, width: int):
    """Per-row windows w[i, rel[i]:rel[i]+width], grouped by distinct offset (few per batch), and a mask
    of the rows that fit inside w."""
    ok = (rel >= 0) & (rel + width <= w.shape[1])
    if len(rel) and ok.all() and (rel == rel[0]).all():
        return w[:, rel[0]:rel[0] + width], ok
    out = np.zeros((len(w), width), np.uint8)
    for u in np.unique(rel[ok]).tolist():
        m = rel == u
        out[m] = w[m, u:u + width]
    return out, ok


class _Bytes:
    """The first HEAD bytes of each packet of a batch, and windows at any absolute offset."""

    def __init__(self, buf: np.ndarray, d: np.ndarray, lim: np.ndarray):
        self.buf, self.d, self.lim = buf, d, lim
        self.head = gather(buf, d, lim, HEAD)

    def window(self, rows: np.ndarray, start: np.ndarray, width: int) -> np.ndarray:
        """width bytes from absolute offsets `start` for packets `rows`, zero beyond their captured end."""
        head = self.head if len(rows) == len(self.head) else self.head[rows]
        out, ok = _align(head, start - self.d[rows], width)
        if not ok.all():
            out = np.array(out)
            bad = ~ok
            out[bad] = gather(self.buf, start[bad], self.lim[rows][bad], width)
        return out


def _be(w: np.ndarray, col: int, n: int) -> np.ndarray:
    """Big-endian integer of n bytes at column `col` of window w."""
    v = w[:, col].astype(np.uint64)
    for k in range(1, n):
        v = (v << np.uint64(8)) | w[:, col + k]
    return v


def decode_batch(buf: np.ndarray, pos: Positions, icrc: bool = True) -> np.ndarray:
    n = len(pos.data)
    rec = np.zeros(n, R.RECORD)
    d, lim, lt = pos.data, pos.data + pos.caplen, pos.linktype
    rec["frame"], rec["time"], rec["caplen"], rec["len"] = pos.frame, pos.time, pos.caplen, pos.wirelen
    rec["vlan"] = -1
    kind = np.zeros(n, np.int64)
    lrh = np.full(n, -1, np.int64)   # native IB: LRH start
    l3 = np.full(n, -1, np.int64)    # GRH / IP start
    et = np.zeros(n, np.int64)       # ethertype of what starts at l3
    flags = np.zeros(n, np.int64)
    ctx = _Bytes(buf, d, lim)

    eth = lt == 1
    if eth.any():
        r = np.nonzero(eth)[0]
        w = ctx.head[r, :22] if len(r) < n else ctx.head[:, :22]
        rec["eth_dst"][r] = w[:, 0:6].copy().view("V6")[:, 0]
        rec["eth_src"][r] = w[:, 6:12].copy().view("V6")[:, 0]
        e, at = _be(w, 12, 2), np.full(len(r), 14, np.int64)
        vl = np.full(len(r), -1, np.int64)
        for k in range(2):
            tag = np.isin(e, _ETH_VLAN) & (at == 14 + 4 * k)
            if not tag.any():
                break
            vl = np.where(tag & (vl < 0), _be(w, 14 + 4 * k, 2).astype(np.int64) & 0xFFF, vl)
            e = np.where(tag, _be(w, 16 + 4 * k, 2), e)
            at = at + 4 * tag
        rec["vlan"][r] = vl
        et[r], l3[r] = e, d[r] + at
    for code, hl, et_col, arphrd_col in ((113, 16, 14, 2), (276, 20, 0, 8)):
        m = lt == code
        if m.any():
            r = np.nonzero(m)[0]
            w = ctx.head[r, :hl]
            et[r], l3[r] = _be(w, et_col, 2), d[r] + hl
            kind[r[_be(w, arphrd_col, 2) == 32]] = R.IPOIB
    kind[lt == 242] = R.IPOIB
    erf = lt == 197
    if erf.any():
        r = np.nonzero(erf)[0]
        w = ctx.head[r, :40]
        t = w[:, 8].astype(np.int64)
        at = np.full(len(r), 16, np.int64)
        more = (t & 0x80) > 0
        for _ in range(3):                      # ERF extension headers, 8 bytes each, chained by bit 7
            nxt = w[np.arange(len(r)), np.minimum(at, 39)] & 0x80
            at = at + 8 * more
            more = more & (nxt > 0)
        t &= 0x7F
        lrh[r[t == 21]] = (d[r] + at)[t == 21]
        kind[r[t == 25]] = R.IBLINK
    lrh[lt == 247] = d[lt == 247]

    # Native InfiniBand: LRH, optional GRH
    ib = lrh >= 0
    bth = np.full(n, -1, np.int64)
    end = np.full(n, -1, np.int64)            # absolute position of the ICRC
    if ib.any():
        r = np.nonzero(ib)[0]
        w = ctx.window(r, lrh[r], 8)
        rec["vl"][r], rec["sl"][r] = w[:, 0] >> 4, w[:, 1] >> 4
        rec["dlid"][r], rec["slid"][r] = _be(w, 2, 2), _be(w, 6, 2)
        lnh = w[:, 1] & 3
        pkt = (_be(w, 4, 2).astype(np.int64) & 0x7FF) * 4
        kind[r] = np.where(lnh == 3, R.IBGRH, R.IB)
        l3[r[lnh == 3]] = lrh[r][lnh == 3] + 8
        et[r[lnh == 3]] = ROCE_V1_ETHERTYPE      # a GRH follows, as in RoCEv1
        has = lnh >= 2
        bth[r[has]] = (lrh[r] + np.where(lnh == 3, 48, 8))[has]
        end[r] = lrh[r] + pkt - 4
        flags[r[(pkt < 8) & has]] |= R.F_MALFORMED

    # RoCEv1 / GRH
    g = et == ROCE_V1_ETHERTYPE
    if g.any():
        r = np.nonzero(g)[0]
        w = ctx.window(r, l3[r], 40)
        rec["src"][r] = w[:, 8:24].copy().view("V16")[:, 0]
        rec["dst"][r] = w[:, 24:40].copy().view("V16")[:, 0]
        rec["ecn"][r] = (w[:, 1] >> 4) & 3
        flags[r] |= R.F_GRH
        v1 = lrh[r] < 0
        kind[r[v1]] = R.ROCE1
        bth[r[v1]] = l3[r][v1] + 40
        end[r[v1]] = (l3[r] + 40 + _be(w, 4, 2).astype(np.int64) - 4)[v1]

    # IP / UDP for RoCEv2 (and the port heuristic)
    udp = np.full(n, -1, np.int64)
    cand = np.zeros(n, bool)
    for version, ethertype in ((4, 0x0800), (6, 0x86DD)):
        m = (et == ethertype) & (kind != R.IPOIB)
        if not m.any():
            continue
        r = np.nonzero(m)[0]
        w = ctx.window(r, l3[r], 48)
        if version == 4:
            ihl = (w[:, 0] & 0x0F).astype(np.int64) * 4
            isudp = (w[:, 9] == 17) & (w[:, 0] >> 4 == 4) & (ihl >= 20) & ((_be(w, 6, 2) & 0x3FFF) == 0)
            rec["ecn"][r] = w[:, 1] & 3
            mapped = np.zeros((len(r), 16), np.uint8)
            mapped[:, 10:12] = 0xFF
            mapped[:, 12:16] = w[:, 12:16]
            rec["src"][r] = mapped.view("V16")[:, 0]
            mapped[:, 12:16] = w[:, 16:20]
            rec["dst"][r] = mapped.copy().view("V16")[:, 0]
            u = l3[r] + ihl
        else:
            isudp = (w[:, 6] == 17) & (w[:, 0] >> 4 == 6)
            rec["ecn"][r] = (w[:, 1] >> 4) & 3
            rec["src"][r] = w[:, 8:24].copy().view("V16")[:, 0]
            rec["dst"][r] = w[:, 24:40].copy().view("V16")[:, 0]
            u = l3[r] + 40
        r, u = r[isudp], u[isudp]
        uw = ctx.window(r, u, 8)
        sp, dp, ulen = _be(uw, 0, 2), _be(uw, 2, 2), _be(uw, 4, 2).astype(np.int64)
        rec["udp_src"][r], rec["udp_dst"][r] = sp, dp
        udp[r] = u
        roce = (sp == ROCE_V2_PORT) | (dp == ROCE_V2_PORT)
        k = R.ROCE2V4 if version == 4 else R.ROCE2V6
        kind[r[roce]] = k
        bth[r] = u + 8
        end[r] = u + ulen - 4
        flags[r[roce & (ulen < 8 + 12 + 4)]] |= R.F_MALFORMED
        cand[r[~roce & (ulen >= 8 + 12 + 4)]] = True
        if version == 6:
            flags[r[roce]] |= R.F_GRH

    if cand.any():
        _heuristic(buf, np.nonzero(cand)[0], kind, l3, udp, bth, end, lim, flags, et)
    has_bth = (bth >= 0) & np.isin(kind, (R.ROCE1, R.ROCE2V4, R.ROCE2V6, R.IB, R.IBGRH))
    bth[~has_bth] = -1
    rec["link"] = kind
    if has_bth.any():
        _transport(ctx, rec, np.nonzero(has_bth)[0], bth, end, lim, flags, icrc, kind, lrh, l3, udp)
    rec["flags"] = flags | np.where(pos.wirelen > pos.caplen, R.F_TRUNCATED, 0)
    return rec


def _heuristic(buf, rows, kind, l3, udp, bth, end, lim, flags, et):
    """Non-4791 UDP: RoCEv2 when the would-be BTH has a known opcode, TVer 0 and a matching ICRC."""
    b, e = bth[rows], end[rows]
    ok = (e + 4 <= lim[rows]) & (e >= b + 12)
    rows, b, e = rows[ok], b[ok], e[ok]
    w = gather(buf, b, lim[rows], 2)
    op = w[:, 0]
    ok = KNOWN[op] & (w[:, 1] & 0x0F == 0) & (e >= b + 12 + EXT_LEN[op])
    rows = rows[ok]
    if not len(rows):
        return
    guess = kind.copy()
    guess[rows] = np.where(et[rows] == 0x0800, R.ROCE2V4, R.ROCE2V6)
    stored = gather(buf, end[rows], lim[rows], 4).copy().view("<u4")[:, 0]
    hit = rows[icrc_batch(buf, guess, np.full(len(kind), -1), l3, udp, bth, end, rows) == stored]
    kind[hit] = guess[hit]
    flags[hit] |= R.F_HEURISTIC | np.where(et[hit] == 0x86DD, R.F_GRH, 0)


def _transport(ctx, rec, r, bth, end, lim, flags, icrc, kind, lrh, l3, udp):
    buf = ctx.buf
    b = bth[r]
    w = ctx.window(r, b, BTH_WIN)
    op = w[:, 0].astype(np.int64)
    sub = {}
    sub["opcode"] = op
    sub["se"], sub["m"], sub["padcnt"], sub["tver"] = w[:, 1] >> 7, (w[:, 1] >> 6) & 1, (w[:, 1] >> 4) & 3, w[:, 1] & 15
    sub["p_key"] = _be(w, 2, 2)
    sub["fecn"], sub["becn"] = w[:, 4] >> 7, (w[:, 4] >> 6) & 1
    sub["destqp"] = _be(w, 5, 3)
    sub["a"] = w[:, 8] >> 7
    sub["psn"] = _be(w, 9, 3)

    aligned = {}

    def field(h, at, nbytes, name):
        if h not in aligned:
            o = EXT_OFF[h][op]
            has = o >= 0
            aligned[h] = (_align(w, 12 + np.maximum(o, 0), HEADER_LEN[h])[0], has) if has.any() else None
        if aligned[h] is not None:
            hw, has = aligned[h]
            sub[name] = np.where(has, _be(hw, at, nbytes), 0)
    field("deth", 0, 4, "deth_q_key")
    field("deth", 5, 3, "deth_srcqp")
    field("xrceth", 1, 3, "xrcsrq")
    field("reth", 0, 8, "reth_va")
    field("reth", 8, 4, "reth_r_key")
    field("reth", 12, 4, "reth_dmalen")
    field("aeth", 0, 1, "aeth_syndrome")
    field("aeth", 1, 3, "aeth_msn")
    field("atomiceth", 0, 8, "atomic_va")
    field("atomiceth", 8, 4, "atomic_r_key")
    field("atomiceth", 12, 8, "atomic_swapdt")
    field("atomiceth", 20, 8, "atomic_cmpdt")
    field("atomicacketh", 0, 8, "atomicack")
    field("immdt", 0, 4, "immdt")
    field("ieth", 0, 4, "ieth")

    hdr_end = b + 12 + EXT_LEN[op]
    e = end[r]
    pad = sub["padcnt"].astype(np.int64)
    paylen = e - hdr_end - pad
    fl = flags[r]
    fl |= R.F_BTH
    fl[(paylen < 0) | ~KNOWN[op]] |= R.F_MALFORMED
    sub["paylen"] = np.maximum(paylen, 0)
    truncated = e + 4 > lim[r]
    fl[truncated | (hdr_end > lim[r])] |= R.F_TRUNCATED

    # MADs on QP0/QP1 (UD SEND Only): common MAD header right after the DETH; CM REQ/REP QPNs
    mad = ((op == 0x64) & (sub["destqp"] <= 1) & (paylen >= 24))
    if mad.any():
        mrows = np.nonzero(mad)[0]
        w = np.zeros((len(r), 80), np.uint8)
        w[mrows] = ctx.window(r[mrows], b[mrows] + 20, 60 + 20)
        c = 0
        fl[mad] |= R.F_MAD
        for name, at, nb in (("mad_class", 1, 1), ("mad_classver", 2, 1), ("mad_method", 3, 1),
                             ("mad_status", 4, 2), ("mad_tid", 8, 8), ("mad_attrid", 16, 2),
                             ("mad_attrmod", 20, 4)):
            sub[name] = np.where(mad, _be(w, c + at, nb), 0)
        cm = mad & (w[:, c + 1] == 0x07)
        aid = sub["mad_attrid"].astype(np.int64)
        req, rep = cm & (aid == 0x10), cm & (aid == 0x13)
        sub["cm_comm_id"] = np.where(cm, _be(w, c + 24, 4), 0)
        sub["cm_remote_comm_id"] = np.where(cm & (aid != 0x10), _be(w, c + 28, 4), 0)
        sub["cm_qpn"] = np.where(req, _be(w, c + 56, 3), np.where(rep, _be(w, c + 36, 3), 0))

    # ICRC (and VCRC on native IB)
    st = np.full(len(r), R.UNCHECKED if not icrc else R.GOOD, np.uint8)
    st[truncated] = R.TRUNC
    st[e < b + 12] = R.ABSENT
    if icrc:
        stored = ctx.window(r, e, 4).copy().view("<u4")[:, 0]
        chk = np.nonzero(st == R.GOOD)[0]
        got = icrc_batch(buf, kind, lrh, l3, udp, bth, end, r[chk])
        st[chk[got != stored[chk]]] = R.BAD
    sub["icrc"] = st
    native = lrh[r] >= 0
    if native.any():
        nr = np.nonzero(native)[0]
        vst = np.full(len(nr), R.UNCHECKED if not icrc else R.GOOD, np.uint8)
        vtr = e[nr] + 6 > lim[r][nr]
        vst[vtr] = R.TRUNC
        if icrc:
            ok = np.nonzero(~vtr)[0]
            got = vcrc_batch(buf, lrh[r][nr][ok], e[nr][ok] + 4)
            vstored = ctx.window(r[nr][ok], e[nr][ok] + 4, 2).copy().view("<u2")[:, 0]
            vst[ok[got != vstored]] = R.BAD
        v = np.zeros(len(r), np.uint8)
        v[nr] = vst
        sub["vcrc"] = v
    flags[r] = fl
    every = len(r) == len(rec)
    for k, v in sub.items():
        if every:
            rec[k] = v
        else:
            rec[k][r] = v
