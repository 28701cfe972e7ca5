"""Per-packet time series with numpy from the fast-path records: packets and bytes per interval, and for
chosen conversations each packet's time, PSN and kind, drawn like a tcptrace graph (IBA Vol 1 §9.7).

What each request was is the RC sequencer's verdict (ibwire/decode/native/flows.c; its frames a PSN graph
marks, ibwire.analyze.frames.marked, looked up by frame number): a retransmission, lost on the wire (a drop),
late (out of order), after a PSN gap.  Of one requester→responder channel, in capture order:
* PSNs are unwrapped (24-bit serial arithmetic, §9.7.1) so a wrap 0xffffff → 0 keeps going up;
* each PSN skipped before a request is drawn there: lost when a request the sequencer found lost resent
  it, none when it came late, else not captured (the mirror or the capture missed it);
* NAKs and RNR NAKs come from the AETH syndrome (§9.7.5.2); an RNR wait lasts from the RNR NAK to the
  requester's next packet.  (ACK and READ latencies are the sequencer's too: flows.analyse's
  `latency_samples`.)
"""

from typing import Dict, Iterable, List, Optional

import numpy as np

from dissectors.opcodes import AETH_NAK, AETH_RNR_NAK, aeth_kind, lookup
from ibwire.analyze import frames as F
from ibwire.analyze.flows import end_text
from ibwire.analyze.hashing import group_rows
from ibwire.decode import records as R
from ibwire.decode.scan import scan

PSN_MOD = 1 << 24
MAX_MARKS = 20000  # drop marks drawn per channel
KEEP_PACKETS = 1 << 18  # packets kept per conversation drawn (31 bytes each); later ones only if they mark
_OP = [lookup(c).op for c in range(256)]
_SEG = [lookup(c).seg for c in range(256)]
IS_REQ = np.array(
    [o in ("send", "write", "read_req", "atomic", "flush", "atomic_write", "resync", "unknown") for o in _OP]
)
IS_READ_RESP = np.array([o == "read_resp" for o in _OP])
IS_READ_LAST = np.array([o == "read_resp" and s in ("last", "only") for o, s in zip(_OP, _SEG)])
HAS_AETH = np.array(["aeth" in lookup(c).headers for c in range(256)])
KEPT = ("time", "opcode", "psn", "aeth_syndrome", "reth_dmalen", "frame")  # per packet drawn: 22 bytes
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


class Thinning:
    """Which packets of a conversation past KEEP_PACKETS are kept for its PSN graphs: those marked (NAKs,
    RNR NAKs, bad ICRCs, the sequencer's verdicts) and the first request after each NAK or RNR NAK (where
    an RNR wait ends), followed across batches from the first packet."""

    def __init__(self):
        self.after_nak: Dict[tuple, bool] = {}  # (conversation, side) -> a NAK came after its last request

    def feed(self, ci: int, cols: dict, room: int) -> np.ndarray:
        """Which rows of the batch `cols` (one conversation's packets: KEPT's and MARKED's columns, side,
        bad_icrc) to keep, the first `room` of them whole."""
        op, side, n = cols["opcode"], cols["side"], len(cols["opcode"])
        nak = _naks(aeth_kinds(op, cols["aeth_syndrome"]))
        keep = (np.arange(n) < room) | nak | cols["bad_icrc"]
        for c in F.MARKED:
            keep |= cols[c] != 0
        for s in (0, 1):
            key = (ci, s)
            req = np.flatnonzero((side == s) & IS_REQ[op] & ~cols["bad_icrc"])
            naks = np.flatnonzero((side != s) & nak)
            if not len(req):
                self.after_nak[key] = self.after_nak.get(key, False) or bool(len(naks))
                continue
            after = np.searchsorted(req, naks, "right")
            pick = np.concatenate([after[after < len(req)], [0] if self.after_nak.get(key) else []])
            keep[req[pick.astype(np.int64)]] = True
            self.after_nak[key] = bool(len(naks)) and naks[-1] > req[-1]
        return keep


def _halves(conversations: List[dict], keep: set) -> dict:
    """(source, destination, destination QP) -> (position, side) of each half of the conversations kept."""
    halves = {}
    for i, r in enumerate(conversations):
        if i in keep:
            for side, (src, dst, qpn) in enumerate(((r["a"], r["b"], r["qpn_b"]), (r["b"], r["a"], r["qpn_a"]))):
                if qpn is not None:
                    halves[(src, dst, int(qpn, 16))] = (i, side)
    return halves


def _sides(rec, bth: np.ndarray, halves: dict, known: dict) -> tuple:
    """Each BTH row's conversation position (-1: not kept) and side; `known` caches them by half-flow hash."""
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
    return conv[inv], side[inv]


class _Kept:
    """The drawn conversations' time bins and packet columns, each whole up to KEEP_PACKETS, then thinned."""

    def __init__(self, keep: set, interval: float, marks: np.ndarray):
        self.interval, self.marks = interval, marks
        self.per_conv: Dict[int, TimeBins] = {}
        self.parts: Dict[int, list] = {i: [] for i in keep}
        self.kept: Dict[int, int] = {}  # packets of each conversation kept whole
        self.seen: Dict[int, int] = {}  # ... and seen
        self.since: Dict[int, float] = {}  # time of the first packet not kept whole
        self.thinning = Thinning()

    def add(self, ci: int, rec, rows: np.ndarray, side: np.ndarray, t0_ns) -> None:
        if ci not in self.per_conv:
            self.per_conv[ci] = TimeBins(self.interval, t0_ns)
        self.per_conv[ci].add({k: rec[k][rows] for k in BINNED})
        cols = {k: rec[k][rows] for k in KEPT}
        cols.update(F.at_frames(self.marks, cols["frame"]))
        cols["side"] = side.astype(np.int8)
        cols["bad_icrc"] = rec["icrc"][rows] == R.BAD
        self.seen[ci] = self.seen.get(ci, 0) + len(rows)
        room = max(KEEP_PACKETS - self.kept.get(ci, 0), 0)
        keep_rows = self.thinning.feed(ci, cols, room)
        if room < len(rows):  # memory stays bounded: beyond the cap only what is marked
            self.since.setdefault(ci, float(cols["time"][room]))
            cols = {k: v[keep_rows] for k, v in cols.items()}
        self.kept[ci] = self.kept.get(ci, 0) + min(room, len(rows))
        self.parts[ci].append(cols)

    def packets(self) -> dict:
        return {ci: {k: np.concatenate([p[k] for p in ps]) for k in ps[0]} for ci, ps in self.parts.items() if ps}

    def thinned(self) -> dict:
        return {ci: (self.kept[ci], self.seen[ci], t) for ci, t in self.since.items()}


def collect(
    path: str,
    conversations: List[dict],
    keep: Iterable[int],
    interval: float,
    marks: np.ndarray,
    icrc: bool = True,
    mask=None,
) -> Collected:
    """One pass: time bins for everything; for the conversations at positions `keep` in `conversations` (rows
    of `flows.analyse`) time bins and packet columns (side 0 = a→b) with the sequencer's verdicts on them
    (`marks`: frames.marked of its table); every CM MAD (for ladder diagrams)."""
    keep = set(keep)
    halves = _halves(conversations, keep)
    total = TimeBins(interval)
    kept = _Kept(keep, interval, marks)
    cms = []
    known: Dict[int, tuple] = {}  # half-flow key hash -> (conversation or -1, side)
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
        rc, rs = _sides(rec, bth, halves, known)
        mine = np.nonzero(rc >= 0)[0]
        if not len(mine):
            continue
        order = mine[np.argsort(rc[mine], kind="stable")]
        for part in np.split(order, np.nonzero(np.diff(rc[order]))[0] + 1):
            kept.add(int(rc[part[0]]), rec, bth[part], rs[part], total.t0_ns)
    cm_rows = np.concatenate(cms) if cms else np.zeros(0, R.RECORD)
    return Collected(total, kept.per_conv, kept.packets(), cm_rows, kept.thinned())


def unwrap(psn: np.ndarray) -> np.ndarray:
    """24-bit PSNs as a continuing int64 sequence (each step taken as the shortest serial distance)."""
    if not len(psn):
        return psn.astype(np.int64)
    p = psn.astype(np.int64)
    d = ((np.diff(p) + (1 << 23)) % PSN_MOD) - (1 << 23)
    return np.concatenate([[p[0]], p[0] + np.cumsum(d)])


def _missing_marks(ch: dict, gap: np.ndarray, late: np.ndarray, lost: np.ndarray) -> tuple:
    """(time, PSN) of each PSN skipped before a request (`gap`: how many) and not filled late: dropped when
    a request found lost resent it, else not captured; one mark per PSN, at most MAX_MARKS each (more says no
    more)."""
    t, u = ch["time"], ch["psn"]
    filled, resent = set(u[late].tolist()), set(u[lost].tolist())
    drop_psns, gap_psns = [], []
    for i in np.nonzero(gap)[0].tolist():
        if len(drop_psns) >= MAX_MARKS and len(gap_psns) >= MAX_MARKS:
            break
        first = int(u[i]) - int(gap[i])
        for p in range(first, min(int(u[i]), first + 4 * MAX_MARKS)):
            if p not in filled:
                marks = drop_psns if p in resent else gap_psns
                if len(marks) < MAX_MARKS:
                    marks.append((float(t[i]), p))
    return drop_psns, gap_psns


def _rnr_waits(t: np.ndarray, rnr: np.ndarray, req_idx: np.ndarray) -> list:
    """(start, end) of each RNR wait: from the RNR NAK to the requester's next packet (none: the NAK's time)."""
    waits = []
    for i in rnr.tolist():
        nxt_req = req_idx[np.searchsorted(req_idx, i)] if np.searchsorted(req_idx, i) < len(req_idx) else None
        waits.append((t[i], t[nxt_req] if nxt_req is not None else t[i]))
    return waits


def channel(pk: dict, side: int) -> Optional[dict]:
    """The requests sent by `side` and the responses to them, with the sequencer's verdicts (see the module
    docstring).  Returns the arrays to draw and the event counts, or None when that side sent no request."""
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
    retrans, lost, late = (pk[c][sel] > 0 for c in ("an_retransmission", "an_lost", "an_out_of_order"))
    gap = pk["an_psn_gap"][sel].astype(np.int64)
    drop_psns, gap_psns = _missing_marks(ch, gap, late, lost)
    live = is_req & ~ch["bad"]
    rnr = np.nonzero(ch["syn"] == AETH_RNR_NAK)[0]
    return {
        **ch,
        "retrans": retrans,
        "late": late,
        "drop_points": drop_psns,
        "gap_points": gap_psns,
        "rnr_waits": _rnr_waits(ch["time"], rnr, np.nonzero(live)[0]),
        "counts": {
            "drops": int(lost.sum()),
            "not_captured": int(gap.sum()) - int(late.sum()) - int(lost.sum()),
            "retransmissions": int(retrans.sum()),
            "out_of_order": int(late.sum()),
            "naks": int((ch["syn"] == AETH_NAK).sum()),
            "rnr_naks": int(len(rnr)),
            "bad_icrc": int(ch["bad"].sum()),
            "requests": int(is_req.sum()),
        },
    }
