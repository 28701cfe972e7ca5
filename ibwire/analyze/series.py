"""Per-packet time series with numpy from the fast-path records: packets and bytes per interval, and for
chosen conversations each packet's time, PSN and kind, sequenced like a tcptrace graph (IBA Vol 1 §9.7).

Sequencing of one requester→responder channel, vectorised over its packets in capture order:
* PSNs are unwrapped (24-bit serial arithmetic, §9.7.1) so a wrap 0xffffff → 0 keeps going up;
* the next expected PSN is the highest PSN + 1 seen so far (a READ request moves it by at least
  dmalen/4096, its responses by one each);
* a request above the expected PSN leaves a gap; one below it repeats a PSN: a retransmission — unless it
  fills a gap first seen and no NAK came yet (late, not lost: out of order), undone when the next packet
  repeats the PSN after it (go-back-N); a skipped PSN resent later was lost on the wire (a drop), one
  never resent was delivered but not captured (the mirror or the capture missed it);
* PSNs a pending READ's responses may use (up to dmalen/256 of them) are no gap;
* a request whose ICRC is bad is discarded by the responder: marked, and its PSN becomes a gap;
* NAKs and RNR NAKs come from the AETH syndrome (§9.7.5.2); an RNR wait lasts from the RNR NAK to the
  requester's next packet; ACK latency is from a request's first transmission to the first ACK (or READ
  completion) covering its PSN; READ latency from the READ request to its first response.
"""

from typing import Dict, Iterable, List, Optional

import numpy as np

from dissectors.opcodes import AETH_ACK, AETH_NAK, AETH_RNR_NAK, aeth_kind, lookup
from ibwire.analyze.flows import end_text
from ibwire.analyze.hashing import group_rows
from ibwire.decode import records as R
from ibwire.decode.scan import scan

PSN_MOD = 1 << 24
MAX_MARKS = 20000  # drop marks drawn per channel
KEEP_PACKETS = 1 << 18  # packets kept per conversation drawn (26 bytes each); later ones only if they mark
_OP = [lookup(c).op for c in range(256)]
_SEG = [lookup(c).seg for c in range(256)]
IS_REQ = np.array(
    [o in ("send", "write", "read_req", "atomic", "flush", "atomic_write", "resync", "unknown") for o in _OP]
)
IS_READ_REQ = np.array([o == "read_req" for o in _OP])
IS_READ_RESP = np.array([o == "read_resp" for o in _OP])
IS_READ_FIRST = np.array([o == "read_resp" and s in ("first", "only") for o, s in zip(_OP, _SEG)])
IS_READ_LAST = np.array([o == "read_resp" and s in ("last", "only") for o, s in zip(_OP, _SEG)])
HAS_AETH = np.array(["aeth" in lookup(c).headers for c in range(256)])
IS_RC = np.array([lookup(c).transport in ("RC", "XRC") for c in range(256)])
KEPT = ("time", "opcode", "psn", "aeth_syndrome", "reth_dmalen", "frame")  # per packet drawn: 24 bytes
BINNED = ("time_ns", "len", "flags", "opcode", "aeth_syndrome", "ecn")  # what TimeBins counts


def aeth_kinds(opcode: np.ndarray, syndrome: np.ndarray, where=True) -> np.ndarray:
    """Each packet's AETH kind (dissectors.opcodes.aeth_kind), -1 where it carries no AETH or `where` is
    false."""
    return np.where(where & HAS_AETH[opcode], aeth_kind(syndrome.astype(np.int64)), -1)


class TimeBins:
    """Packets, bytes and event counts per interval of `width` seconds from `t0_ns` (default: the first
    packet; like tshark -z io,stat);
    grows as packets arrive, so it streams over a capture of any length."""

    KEYS = ("packets", "bytes", "naks", "rnr_naks", "cnps", "ecn_ce")
    MAX = 1_000_000  # intervals kept; packets later than that are counted in `beyond`

    def __init__(self, width: float, t0_ns: Optional[int] = None):
        if not width > 0:
            raise ValueError("interval must be positive")
        self.width, self.t0_ns = float(width), t0_ns
        self.width_ns = max(1, round(width * 1e9))
        self.beyond = 0
        self.acc = {k: np.zeros(0, np.int64) for k in self.KEYS}

    def _add(self, key: str, idx: np.ndarray, weights=None):
        if not len(idx):
            return
        c = np.bincount(idx, weights=weights).astype(np.int64) if weights is not None else np.bincount(idx)
        a = self.acc[key]
        if len(c) > len(a):
            a = np.concatenate([a, np.zeros(len(c) - len(a), np.int64)])
        a[: len(c)] += c
        self.acc[key] = a

    def index(self, ns: np.ndarray) -> np.ndarray:
        """Interval of each time (integer nanoseconds since the epoch: exact, as tshark reads them)."""
        if self.t0_ns is None and len(ns):
            self.t0_ns = int(ns[0])
        return np.maximum((ns - self.t0_ns) // self.width_ns, 0).astype(np.int64)

    @property
    def t0(self) -> Optional[float]:
        return None if self.t0_ns is None else self.t0_ns / 1e9

    def add(self, rec) -> None:
        """Count a record batch (or a dict of its columns)."""
        if not len(rec["time_ns"]):
            return
        idx = self.index(rec["time_ns"])
        ok = idx < self.MAX
        if not ok.all():  # a timestamp far beyond the others (a damaged or spliced capture)
            self.beyond += int((~ok).sum())
            idx = idx[ok]
            rec = {k: rec[k][ok] for k in ("len", "flags", "opcode", "aeth_syndrome", "ecn")}
        self._add("packets", idx)
        self._add("bytes", idx, rec["len"].astype(np.float64))
        bth = (rec["flags"] & R.F_BTH) > 0
        op = rec["opcode"]
        syn = aeth_kinds(op, rec["aeth_syndrome"], bth)
        self._add("naks", idx[syn == AETH_NAK])
        self._add("rnr_naks", idx[syn == AETH_RNR_NAK])
        self._add("cnps", idx[bth & (op == 0x81)])
        self._add("ecn_ce", idx[rec["ecn"] == 3])

    def rows(self) -> List[dict]:
        n = max((len(a) for a in self.acc.values()), default=0)
        out = []
        for i in range(n):
            row = {"start_s": round(i * self.width, 9), "end_s": round((i + 1) * self.width, 9)}
            for k, a in self.acc.items():
                row[k] = int(a[i]) if i < len(a) else 0
            row["bits_per_s"] = row["bytes"] * 8 / self.width
            out.append(row)
        return out


def interval_table(path: str, interval: float, icrc: bool = True) -> dict:
    """`ibwire stats --interval`: the capture's TimeBins rows in one pass."""
    from ibwire.errors import UserError

    if not interval > 0:
        raise UserError(f"--interval takes a positive number of seconds, not {interval}")
    tb = TimeBins(interval)
    s = scan(path, icrc=icrc)
    for rec in s:
        tb.add(rec)
    problems = list(s.problems)
    if tb.beyond:
        problems.append(
            f"{tb.beyond} packets are more than {tb.MAX:,} intervals after the first packet (a wrong "
            "timestamp?) and are left out of the table"
        )
    return {"interval_s": interval, "first_time": tb.t0, "intervals": tb.rows(), "problems": problems}


def interval_for(duration: float, bins: int = 100) -> float:
    """A round interval giving about `bins` intervals over `duration` seconds."""
    if not duration > 0:
        return 1.0
    raw = duration / bins
    mag = 10 ** np.floor(np.log10(raw))
    return float(next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))


class Collected:
    """What one pass over a capture gathered: total time bins, per-conversation bins and packet columns;
    `thinned`: conversation -> (packets kept whole, packets seen, time of the first one not kept) for those
    longer than KEEP_PACKETS, whose later packets are kept only where something is to be marked (see
    `Thinning`)."""

    def __init__(
        self,
        total: TimeBins,
        per_conv: Dict[int, TimeBins],
        packets: Dict[int, dict],
        cm: np.ndarray,
        thinned: Optional[Dict[int, tuple]] = None,
    ):
        self.total, self.per_conv, self.packets, self.cm = total, per_conv, packets, cm
        self.thinned = thinned or {}


def _naks(kinds: np.ndarray) -> np.ndarray:
    """NAKs and RNR NAKs among AETH kinds (`aeth_kinds`)."""
    return (kinds == AETH_NAK) | (kinds == AETH_RNR_NAK)


def _psn_span(opcode: np.ndarray, dmalen: np.ndarray) -> np.ndarray:
    """PSNs each request takes: one, or a READ request one per 4096-byte response (at least one), which is
    how far it moves the next expected PSN (§9.7.1)."""
    return np.where(IS_READ_REQ[opcode], np.maximum(1, -(-dmalen.astype(np.int64) // 4096)), 1)


class Thinning:
    """Which packets of a conversation past KEEP_PACKETS are kept for its PSN graphs: those with a mark of
    their own (NAKs, RNR NAKs, bad ICRCs); each request that breaks its channel's sequence (its PSN is not
    the one the requester's previous request leads to: a drop before it or a retransmission) together with
    the request before it; and the first request after each NAK or RNR NAK (where an RNR wait ends).  A kept request
    that follows its channel's sequence is flagged `cont`, so that `channel` draws no gap before it for the
    in-sequence requests left out.  The sequence is followed across batches from the first packet."""

    def __init__(self):
        self.nxt: Dict[tuple, int] = {}  # (conversation, side) -> PSN the last request leads to
        self.last: Dict[tuple, dict] = {}  # ... -> that request's columns (one row), while not kept
        self.after_nak: Dict[tuple, bool] = {}

    def feed(self, ci: int, cols: dict, room: int):
        """Follow the batch `cols` (one conversation's packets: KEPT's columns, side, bad_icrc) of which the
        first `room` are kept whole.  Returns the rows to keep, their `cont` flags and rows of earlier
        batches to add (their `cont` set)."""
        op, side, n = cols["opcode"], cols["side"], len(cols["opcode"])
        nak = _naks(aeth_kinds(op, cols["aeth_syndrome"]))
        keep = np.arange(n) < room
        if room < n:
            keep |= nak | cols["bad_icrc"]  # a mark of their own
        cont = np.zeros(n, bool)
        extra = []
        for s in (0, 1):
            key = (ci, s)
            req = np.flatnonzero((side == s) & IS_REQ[op] & ~cols["bad_icrc"])
            naks = np.flatnonzero((side != s) & nak)
            if not len(req):
                self.after_nak[key] = self.after_nak.get(key, False) or bool(len(naks))
                continue
            p = cols["psn"][req].astype(np.int64)
            nxt = (p + _psn_span(op[req], cols["reth_dmalen"][req])) % PSN_MOD
            expected = np.empty(len(p), np.int64)
            expected[1:] = nxt[:-1]
            expected[0] = self.nxt.get(key, p[0])
            brk = p != expected
            if room < n:
                before = np.flatnonzero(brk) - 1
                if len(before) and before[0] < 0 and key in self.last:
                    extra.append(self.last[key])
                after = np.searchsorted(req, naks, "right")
                pick = np.concatenate(
                    [
                        np.flatnonzero(brk),
                        before[before >= 0],
                        after[after < len(req)],
                        [0] if self.after_nak.get(key) else [],
                    ]
                ).astype(np.int64)
                keep[req[pick]] = True
                cont[req] = ~brk & (req >= room)
            self.after_nak[key] = bool(len(naks)) and naks[-1] > req[-1]
            self.nxt[key] = int(nxt[-1])
            if keep[req[-1]]:
                self.last.pop(key, None)
            else:
                self.last[key] = dict({k: v[req[-1:]] for k, v in cols.items()}, cont=np.ones(1, bool))
        return keep, cont, extra


def collect(
    path: str, conversations: List[dict], keep: Iterable[int], interval: float, icrc: bool = True, mask=None
) -> Collected:
    """One pass: time bins for everything; for the conversations at positions `keep` in `conversations` (rows
    of `flows.analyse`) time bins and packet columns (side 0 = a→b); every CM MAD (for ladder diagrams)."""
    keep = set(keep)
    halves = {}
    for i, r in enumerate(conversations):
        if i not in keep:
            continue
        for side, (src, dst, qpn) in enumerate(((r["a"], r["b"], r["qpn_b"]), (r["b"], r["a"], r["qpn_a"]))):
            if qpn is not None:
                halves[(src, dst, int(qpn, 16))] = (i, side)
    total = TimeBins(interval)
    per_conv: Dict[int, TimeBins] = {}
    parts: Dict[int, list] = {i: [] for i in keep}
    cms = []
    known: Dict[int, tuple] = {}  # half-flow key hash -> (conversation or -1, side)
    kept: Dict[int, int] = {}  # packets of each conversation kept whole
    seen: Dict[int, int] = {}  # ... and seen
    since: Dict[int, float] = {}  # time of the first packet not kept whole
    thinning = Thinning()
    for rec in scan(path, icrc=icrc):
        if mask is not None:
            rec = rec[mask(rec)]
        if not len(rec):
            continue
        total.add(rec)
        bth = np.nonzero((rec["flags"] & R.F_BTH) > 0)[0]
        if not len(bth):
            continue
        cm = bth[((rec["flags"][bth] & R.F_MAD) > 0) & (rec["mad_class"][bth] == 0x07)]
        if len(cm):
            cms.append(rec[cm])
        if not halves:
            continue
        hashes, first, inv = group_rows(rec, ("src", "dst", "slid", "dlid", "destqp"), bth)
        conv = np.full(len(first), -1, np.int64)
        side = np.zeros(len(first), np.int64)
        for j, (h, i) in enumerate(zip(hashes.tolist(), bth[first].tolist())):
            hit = known.get(h)
            if hit is None:
                key = (
                    end_text(bytes(rec["src"][i]), int(rec["slid"][i])),
                    end_text(bytes(rec["dst"][i]), int(rec["dlid"][i])),
                    int(rec["destqp"][i]),
                )
                hit = known[h] = halves.get(key, (-1, 0))
            conv[j], side[j] = hit
        rc, rs = conv[inv], side[inv]
        mine = np.nonzero(rc >= 0)[0]
        if not len(mine):
            continue
        order = mine[np.argsort(rc[mine], kind="stable")]
        cuts = np.nonzero(np.diff(rc[order]))[0] + 1
        for part in np.split(order, cuts):
            ci = int(rc[part[0]])
            rows = bth[part]
            if ci not in per_conv:
                per_conv[ci] = TimeBins(interval, total.t0_ns)
            per_conv[ci].add({k: rec[k][rows] for k in BINNED})
            cols = {k: rec[k][rows] for k in KEPT}
            cols["side"] = rs[part].astype(np.int8)
            cols["bad_icrc"] = rec["icrc"][rows] == R.BAD
            seen[ci] = seen.get(ci, 0) + len(rows)
            room = max(KEEP_PACKETS - kept.get(ci, 0), 0)
            keep_rows, cols["cont"], extra = thinning.feed(ci, cols, room)
            if room < len(rows):  # memory stays bounded: beyond the cap only what is marked
                since.setdefault(ci, float(cols["time"][room]))
                cols = {k: v[keep_rows] for k, v in cols.items()}
                parts[ci].extend(extra)
            kept[ci] = kept.get(ci, 0) + min(room, len(rows))
            parts[ci].append(cols)
    packets = {ci: _in_order({k: np.concatenate([p[k] for p in ps]) for k in ps[0]}) for ci, ps in parts.items() if ps}
    thinned = {ci: (kept[ci], seen[ci], t) for ci, t in since.items()}
    return Collected(total, per_conv, packets, np.concatenate(cms) if cms else np.zeros(0, R.RECORD), thinned)


def _in_order(pk: dict) -> dict:
    """A conversation's kept packets in capture order (a request kept from an earlier batch comes late)."""
    f = pk["frame"]
    if len(f) < 2 or (np.diff(f.astype(np.int64)) >= 0).all():
        return pk
    order = np.argsort(f, kind="stable")
    return {k: v[order] for k, v in pk.items()}


def unwrap(psn: np.ndarray) -> np.ndarray:
    """24-bit PSNs as a continuing int64 sequence (each step taken as the shortest serial distance)."""
    if not len(psn):
        return psn.astype(np.int64)
    p = psn.astype(np.int64)
    d = ((np.diff(p) + (1 << 23)) % PSN_MOD) - (1 << 23)
    return np.concatenate([[p[0]], p[0] + np.cumsum(d)])


def _exclusive_cummax(v: np.ndarray, start: int) -> np.ndarray:
    out = np.empty(len(v), np.int64)
    if len(v):
        out[0] = start
        out[1:] = np.maximum.accumulate(np.maximum(v[:-1], start))
    return out


def _gaps(ch: dict, dmalen: np.ndarray, live: np.ndarray, cont: Optional[np.ndarray]) -> tuple:
    """The next expected PSN before each packet (bad-ICRC requests and ACKs/NAKs do not move it), the PSNs
    skipped before each live request after the first (none where a pending READ's responses may go, nor
    before a kept request of a thinned conversation that followed the sequence) and the requests going back."""
    u, o, is_req, bad = ch["psn"], ch["opcode"], ch["is_req"], ch["bad"]
    nxt = u + _psn_span(o, dmalen)
    moves = (is_req & ~bad) | (IS_READ_RESP[o] & ~is_req)
    lo = int(u.min()) - 1
    expected = _exclusive_cummax(np.where(moves, nxt, lo), lo)
    rread = IS_READ_REQ[o] & is_req
    allow = _exclusive_cummax(np.where(rread & ~bad, u + np.maximum(1, -(-dmalen // 256)), lo), lo)
    first_live = np.argmax(live) if live.any() else len(u)
    counted = live & (np.arange(len(u)) > first_live)
    gap = np.where(counted, u - expected, 0)
    gap = np.where((gap > 0) & (u <= allow), 0, gap)
    gap = np.maximum(gap, 0)
    if cont is not None:  # requests left out of a thinned conversation followed the sequence
        gap = np.where(cont, 0, gap)
    return expected, gap, counted & (u < expected)


def _late(ch: dict, live: np.ndarray, back: np.ndarray) -> tuple:
    """The first sight of each live PSN, and the requests going back that are late (out of order): the first
    sight of a PSN (inside a gap) before any NAK of this channel, unless the next request repeats the PSN
    after it (go-back-N: a retransmission after all)."""
    u = ch["psn"]
    firsts = np.zeros(len(u), bool)
    req_idx = np.nonzero(live)[0]
    if len(req_idx):
        _, fi = np.unique(u[req_idx], return_index=True)
        firsts[req_idx[fi]] = True
    nak_before = np.maximum.accumulate(_naks(ch["syn"]))
    nak_before = np.r_[False, nak_before[:-1]] if len(nak_before) else nak_before
    late = back & firsts & ~nak_before
    pos = np.searchsorted(req_idx, np.nonzero(late)[0])
    for k, i in zip(pos.tolist(), np.nonzero(late)[0].tolist()):
        if k + 1 < len(req_idx):
            j = req_idx[k + 1]
            if u[j] == u[i] + 1 and not firsts[j]:
                late[i] = False
    return firsts, late


def _left_out(u: np.ndarray, live: np.ndarray, cont: Optional[np.ndarray]) -> tuple:
    """PSN ranges [lo, hi) sent by the requests a thinned conversation left out: those between a kept request
    flagged `cont` and the live request before it (after a gap: resent, so lost); sorted by lo."""
    if cont is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    li = np.nonzero(live)[0]
    after = li[1:][cont[li[1:]]]
    before = li[np.searchsorted(li, after) - 1]
    order = np.argsort(u[before])
    return u[before][order] + 1, np.maximum.accumulate(u[after][order])


def _missing_marks(
    ch: dict, expected: np.ndarray, gap: np.ndarray, late: np.ndarray, resent: np.ndarray, left_out: tuple
) -> tuple:
    """(time, PSN) of each PSN skipped before a request and not filled late: dropped when resent later (or
    by a request left out), else not captured; one mark per PSN, at most MAX_MARKS each (more says no more)."""
    t, u = ch["time"], ch["psn"]
    filled = set(u[late].tolist())
    lost = set(u[resent].tolist())
    cover_lo, cover_hi = left_out

    def resent_later(p):
        k = np.searchsorted(cover_lo, p, "right") - 1
        return p in lost or (k >= 0 and p < cover_hi[k])

    drop_psns, gap_psns = [], []
    for i in np.nonzero(gap)[0].tolist():
        if len(drop_psns) >= MAX_MARKS and len(gap_psns) >= MAX_MARKS:
            break
        for p in range(int(expected[i]), min(int(u[i]), int(expected[i]) + 4 * MAX_MARKS)):
            if p not in filled:
                marks = drop_psns if resent_later(p) else gap_psns
                if len(marks) < MAX_MARKS:
                    marks.append((float(t[i]), p))
    return drop_psns, gap_psns


def _ack_latency(ch: dict, firsts: np.ndarray) -> np.ndarray:
    """From each first transmission of an RC request (READs aside) to the first ACK or READ completion
    covering its PSN."""
    t, u, o, is_req = ch["time"], ch["psn"], ch["opcode"], ch["is_req"]
    acks = ((ch["syn"] == AETH_ACK) & ~is_req) | (IS_READ_LAST[o] & ~is_req)
    ai = np.nonzero(acks)[0]
    pend = np.nonzero(firsts & IS_RC[o] & ~(IS_READ_REQ[o] & is_req))[0]
    if not (len(ai) and len(pend)):
        return np.zeros(0)
    cm = np.maximum.accumulate(u[ai])
    k = np.maximum(np.searchsorted(ai, pend), np.searchsorted(cm, u[pend], "left"))
    ok = k < len(ai)
    return t[ai[k[ok]]] - t[pend[ok]]


def _read_latency(ch: dict, firsts: np.ndarray) -> np.ndarray:
    """From each READ request's first transmission to the first response with its PSN."""
    t, u, o, is_req = ch["time"], ch["psn"], ch["opcode"], ch["is_req"]
    rq = np.nonzero(IS_READ_REQ[o] & is_req & firsts)[0]
    rf = np.nonzero(IS_READ_FIRST[o] & ~is_req)[0]
    if not (len(rq) and len(rf)):
        return np.zeros(0)
    first_resp = {}
    for i in rf.tolist():
        first_resp.setdefault(int(u[i]), i)
    return np.array(
        [t[first_resp[int(u[i])]] - t[i] for i in rq.tolist() if int(u[i]) in first_resp and first_resp[int(u[i])] > i]
    )


def _rnr_waits(t: np.ndarray, rnr: np.ndarray, req_idx: np.ndarray) -> list:
    """(start, end) of each RNR wait: from the RNR NAK to the requester's next packet (none: the NAK's time)."""
    waits = []
    for i in rnr.tolist():
        nxt_req = req_idx[np.searchsorted(req_idx, i)] if np.searchsorted(req_idx, i) < len(req_idx) else None
        waits.append((t[i], t[nxt_req] if nxt_req is not None else t[i]))
    return waits


def channel(pk: dict, side: int) -> Optional[dict]:
    """The sequencing of requests sent by `side` and the responses to them (see the module docstring).
    Returns the arrays to draw and the event counts, or None when that side sent no request."""
    op = pk["opcode"]
    s = pk["side"]
    req = (s == side) & IS_REQ[op]
    if not req.any():
        return None
    resp = (s != side) & (IS_READ_RESP[op] | HAS_AETH[op]) & ~IS_REQ[op]
    sel = np.nonzero(req | resp)[0]
    o, is_req = op[sel], req[sel]
    ch = {
        "time": pk["time"][sel],
        "psn": unwrap(pk["psn"][sel]),
        "frame": pk["frame"][sel],
        "is_req": is_req,
        "bad": pk["bad_icrc"][sel] & is_req,
        "syn": aeth_kinds(o, pk["aeth_syndrome"][sel], ~is_req),
        "opcode": o,
    }
    cont = pk["cont"][sel] if "cont" in pk else None
    live = is_req & ~ch["bad"]
    expected, gap, back = _gaps(ch, pk["reth_dmalen"][sel].astype(np.int64), live, cont)
    firsts, late = _late(ch, live, back)
    retrans = back & ~late
    resent = back & firsts & ~late  # a missing PSN's first sight after a NAK or go-back-N: it was lost
    drop_psns, gap_psns = _missing_marks(ch, expected, gap, late, resent, _left_out(ch["psn"], live, cont))
    rnr = np.nonzero(ch["syn"] == AETH_RNR_NAK)[0]
    return {
        **ch,
        "retrans": retrans,
        "late": late,
        "drop_points": drop_psns,
        "gap_points": gap_psns,
        "rnr_waits": _rnr_waits(ch["time"], rnr, np.nonzero(live)[0]),
        "ack_latency": _ack_latency(ch, firsts),
        "read_latency": _read_latency(ch, firsts),
        "counts": {
            "drops": int(resent.sum()),
            "not_captured": int(gap.sum()) - int(late.sum()) - int(resent.sum()),
            "retransmissions": int(retrans.sum()),
            "out_of_order": int(late.sum()),
            "naks": int((ch["syn"] == AETH_NAK).sum()),
            "rnr_naks": int(len(rnr)),
            "bad_icrc": int(ch["bad"].sum()),
            "requests": int(is_req.sum()),
        },
    }
