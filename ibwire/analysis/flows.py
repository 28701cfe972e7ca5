"""Queue-pair conversations and reliable-connection analysis (IBA Vol 1 §9.7: PSNs, ACK/NAK, READ).

Two streaming passes over the capture keep memory proportional to the number of conversations:
pass 1 learns which half-flows (source, destination, destination QP) belong together — from CM REQ/REP
QPNs (§12.6.5/§12.6.8) where present, else from request PSNs answered by ACK/response PSNs the other way,
else from the addresses alone; pass 2 runs each conversation's sequence logic in time order.
"""
import multiprocessing
import os
import zlib
from collections import OrderedDict, defaultdict
from typing import Dict, List, Optional, Tuple

import numpy as np

from dissectors.opcodes import NAK_CODES, OPCODES, RNR_TIMER_MS, lookup
from ..fast import records as R
from ..fast import scan
from ..fast.split import MIN_SPLIT
from .hashing import group_rows

PSN_MOD = 1 << 24
SAMPLE = 128            # PSNs per half-flow kept for pairing
LAT_SAMPLES = 4096      # latency samples kept per channel (the first ones)
PENDING_MAX = 1 << 14   # unacknowledged requests / outstanding READs tracked per channel
SEEN_WINDOW = 4096      # accepted PSNs remembered per channel to recognise retransmissions
# Per-opcode facts as plain lists: the per-packet loop indexes them a million times a second.
OP = [lookup(c).op for c in range(256)]
SEG = [lookup(c).seg for c in range(256)]
TRANSPORT = [lookup(c).transport for c in range(256)]
REQUEST_OPS = {"send", "write", "read_req", "atomic", "flush", "atomic_write", "resync"}
ONE_SIDED = {"write", "read_req", "atomic", "flush", "atomic_write"}


def _psn_diff(a: int, b: int) -> int:
    """a - b in 24-bit serial arithmetic (IBA §9.7.1), in [-2^23, 2^23)."""
    return ((a - b + (1 << 23)) % PSN_MOD) - (1 << 23)


HalfKey = Tuple[bytes, bytes, int, int, int]   # src, dst, slid, dlid, destqp


class _Half:
    __slots__ = ("transport", "req_psn", "resp_psn", "packets")

    def __init__(self, transport):
        self.transport = transport
        self.req_psn, self.resp_psn, self.packets = set(), set(), 0


def _batch_halves(b: np.ndarray):
    """Distinct half-flow keys of a batch (src, dst, slid, dlid, destqp), the first row of each, and
    each row's index into them."""
    src, dst, sl, dl, qp = (b[k] for k in ("src", "dst", "slid", "dlid", "destqp"))
    _, first, inv = group_rows(b, ("src", "dst", "slid", "dlid", "destqp"))
    keys = [(bytes(src[i]), bytes(dst[i]), int(sl[i]), int(dl[i]), int(qp[i])) for i in first.tolist()]
    return keys, first, inv


_IS_REQ = np.array([OP[c] in REQUEST_OPS for c in range(256)])
_IS_RESP = np.array([OP[c] in ("ack", "read_resp", "atomic_ack") for c in range(256)])


def _learn(scan_batches):
    """Pass 1: half-flows with PSN samples, and CM REQ/REP (address, QPN) facts."""
    halves: Dict[HalfKey, _Half] = {}
    reqs, reps = {}, {}
    for rec in scan_batches:
        b = rec[(rec["flags"] & R.F_BTH) > 0]
        if not len(b):
            continue
        keys, first, inv = _batch_halves(b)
        ops, psns = b["opcode"], b["psn"]
        counts = np.bincount(inv, minlength=len(keys))
        isreq, isresp = _IS_REQ[ops], _IS_RESP[ops]
        for j, k in enumerate(keys):
            h = halves.get(k)
            if h is None:
                op = int(ops[first[j]])
                h = halves[k] = _Half(TRANSPORT[op] if op != 0x81 else "CNP")
            h.packets += int(counts[j])
            for want, sample in ((isreq, h.req_psn), (isresp, h.resp_psn)):
                if len(sample) < SAMPLE:
                    sel = psns[(inv == j) & want][:SAMPLE - len(sample)]
                    sample.update(sel.tolist())
        cm = b[(b["mad_class"] == 0x07) & ((b["flags"] & R.F_MAD) > 0)]
        for r in cm:
            ends = (bytes(r["src"]), int(r["slid"]), bytes(r["dst"]), int(r["dlid"]))
            if r["mad_attrid"] == 0x10:
                reqs[int(r["cm_comm_id"])] = (ends, int(r["cm_qpn"]))
            elif r["mad_attrid"] == 0x13:
                reps[int(r["cm_remote_comm_id"])] = (ends, int(r["cm_qpn"]))
    return halves, reqs, reps


def _pair(halves: Dict[HalfKey, _Half], reqs, reps):
    """Half-flow -> (conversation id, side 0/1, how paired); conversations list their halves."""
    conv_of: Dict[HalfKey, Tuple[int, int]] = {}
    convs: List[dict] = []

    def new(a: Optional[HalfKey], b: Optional[HalfKey], how: str):
        cid = len(convs)
        convs.append({"halves": (a, b), "paired_by": how})
        if a is not None:
            conv_of[a] = (cid, 0)
        if b is not None:
            conv_of[b] = (cid, 1)

    for comm, (req_ends, qa) in reqs.items():
        if comm not in reps:
            continue
        (rep_ends, qb) = reps[comm]
        a_src, a_lid, b_src, b_lid = req_ends
        ab = (a_src, b_src, a_lid, b_lid, qb)
        ba = (b_src, a_src, b_lid, a_lid, qa)
        if ab in halves or ba in halves:
            if ab not in conv_of and ba not in conv_of:
                new(ab if ab in halves else None, ba if ba in halves else None, "cm")
    by_pair = defaultdict(list)
    for k, h in halves.items():
        if k in conv_of or h.transport in ("CNP", "UD"):
            continue
        by_pair[(k[0], k[2], k[1], k[3])].append(k)
    done = set()
    for ends, ks in by_pair.items():
        rev = (ends[2], ends[3], ends[0], ends[1])
        if ends in done:
            continue
        done.update((ends, rev))
        back = [k for k in by_pair.get(rev, []) if k not in conv_of]
        scores = sorted(((len(halves[x].req_psn & halves[y].resp_psn) + len(halves[y].req_psn & halves[x].resp_psn), x, y)
                         for x in ks for y in back), reverse=True)
        used = set()
        for sc, x, y in scores:
            if sc > 0 and x not in used and y not in used:
                used.update((x, y))
                new(x, y, "psn")
        left_a, left_b = [k for k in ks if k not in used], [k for k in back if k not in used]
        if len(left_a) == 1 and len(left_b) == 1 and halves[left_a[0]].transport == halves[left_b[0]].transport:
            new(left_a[0], left_b[0], "addresses")
            left_a, left_b = [], []
        for k in left_a + left_b:
            new(k, None, "one direction")
    return conv_of, convs


class _Channel:
    """One requester→responder direction of an RC/UC/XRC conversation."""

    def __init__(self):
        self.expected: Optional[int] = None
        self.missing = OrderedDict()
        self.pending = OrderedDict()      # psn -> request time (messages awaiting ACK/response)
        self.reads = OrderedDict()        # first response psn -> (time, dmalen, last psn allowed)
        self.msg = None                   # [op, bytes so far, declared dmalen or None]
        self.seen = OrderedDict()         # PSNs already accepted (bounded window)
        self.nak_seen = False             # a NAK/RNR NAK was sent: late PSNs are retransmissions
        self.fill = None                  # a late PSN provisionally counted as out of order
        self.c = defaultdict(int)
        self.ops = defaultdict(int)
        self.op_bytes = defaultdict(int)
        self.ack_lat: List[float] = []
        self.read_lat: List[float] = []
        self.rnr_timers = defaultdict(int)
        self.max_outstanding = 0


class _Conv:
    def __init__(self, cid: int, info: dict):
        self.cid, self.info = cid, info
        self.ch = (_Channel(), _Channel())
        self.packets = [0, 0]
        self.bytes = [0, 0]
        self.payload = [0, 0]
        self.first = self.last = None
        self.transport = None
        self.p_keys = set()
        self.cnps = [0, 0]
        self.ecn_ce = [0, 0]
        self.qpn = [None, None]           # QPN of side 0 and side 1 (learned from destqp of the other way)
        self.first_frame = 0              # frame number of its first packet (orders ties in the output)

    def packet(self, side: int, t: float, op: int, psn: int, ln: int, pay: int, dmalen: int, syn: int,
               ecn: int, p_key: int, destqp: int, crc_bad: bool = False, tns: int = 0):
        if self.first is None:
            self.first, self.first_ns = t, tns
        self.last = t
        self.packets[side] += 1
        self.bytes[side] += ln
        self.payload[side] += pay
        self.qpn[1 - side] = destqp
        if ecn == 3:
            self.ecn_ce[side] += 1
        if op == 0x81:
            self.cnps[1 - side] += 1      # the CNP goes to side (1-side): it is the notified sender
            return
        self.p_keys.add(p_key)
        tr = TRANSPORT[op]
        self.transport = self.transport or tr
        o, seg = OP[op], SEG[op]
        if tr == "UD":
            self.ch[side].ops["send"] += 1
            self.ch[side].op_bytes["send"] += pay
            return
        if o in REQUEST_OPS or o == "unknown":
            self._request(self.ch[side], t, o, seg, psn, pay, dmalen, tr, crc_bad)
        else:
            self._response(self.ch[1 - side], t, o, seg, psn, pay, syn)

    def _request(self, ch: _Channel, t, o, seg, psn, pay, dmalen, tr, crc_bad):
        """Sequence a request packet as the responder would (IBA §9.7.4.1): new, retransmitted or late."""
        c = ch.c
        c["request_packets"] += 1
        if crc_bad:                     # the responder drops it silently; it will show up as a gap
            c["bad_icrc"] += 1
            return
        if ch.fill is not None:
            if _psn_diff(psn, ch.fill) == 1 and psn in ch.seen:
                self._refile(ch)        # go-back-N resends what follows: the late PSN was a retransmission
            ch.fill = None
        if psn in ch.seen:
            c["retransmissions"] += 1
            return
        if ch.expected is not None:
            d = _psn_diff(psn, ch.expected)
            if d > 0 and ch.reads:      # PSNs a pending READ's responses may use are not a gap
                p0, (_, _, plast, _) = next(reversed(ch.reads.items()))
                if _psn_diff(psn, p0) > 0 and _psn_diff(psn - 1, plast) <= 0:
                    d = 0
            if d > 0:
                c["psn_gaps"] += 1
                c["drops"] += d
                for k in range(min(d, 4096)):
                    ch.missing[(ch.expected + k) % PSN_MOD] = True
                while len(ch.missing) > 4096:
                    ch.missing.popitem(last=False)
                ch.msg = None           # a message with a hole cannot be checked against its length
            elif d < 0:
                if ch.missing.pop(psn, None):
                    if ch.nak_seen:
                        c["retransmissions"] += 1
                    else:               # late, not lost — unless a NAK or go-back-N resends show otherwise
                        c["out_of_order"] += 1
                        c["drops"] -= 1
                        ch.fill = psn
                else:
                    c["retransmissions"] += 1
                ch.msg = None
        ch.seen[psn] = True
        while len(ch.seen) > SEEN_WINDOW:
            ch.seen.popitem(last=False)
        nxt = psn + 1
        if o == "read_req":
            # a READ consumes one PSN per response packet: at least dmalen/4096, at most dmalen/256
            nxt = psn + max(1, -(-dmalen // 4096))
            ch.reads[psn] = (t, dmalen, psn + max(1, -(-dmalen // 256)) - 1, 0)
            while len(ch.reads) > PENDING_MAX:
                ch.reads.popitem(last=False)
            ch.ops["read"] += 1
            ch.op_bytes["read"] += dmalen
        if ch.expected is None or _psn_diff(nxt, ch.expected) > 0:
            ch.expected = nxt % PSN_MOD
        if o != "read_req":
            ch.op_bytes[o] += 8 if o == "atomic" else pay
            if seg in ("first", "only"):
                ch.msg = [o, 0, dmalen if o == "write" else None]
            if ch.msg is not None:
                ch.msg[1] += pay
            if seg in ("last", "only", ""):
                ch.ops[o] += 1
                m = ch.msg
                if m is not None and m[2] is not None and m[1] != m[2]:
                    c["length_mismatch"] += 1
                ch.msg = None
            if tr in ("RC", "XRC"):
                ch.pending[psn] = t
                while len(ch.pending) > PENDING_MAX:
                    ch.pending.popitem(last=False)
                    c["untracked_requests"] += 1
        if tr in ("RC", "XRC"):
            ch.max_outstanding = max(ch.max_outstanding, len(ch.pending) + len(ch.reads))

    @staticmethod
    def _refile(ch: _Channel):
        ch.c["out_of_order"] -= 1
        ch.c["drops"] += 1
        ch.c["retransmissions"] += 1
        ch.fill = None

    def _response(self, ch: _Channel, t, o, seg, psn, pay, syn):
        c = ch.c
        if o == "read_resp":
            c["read_response_packets"] += 1
            for p0 in list(ch.reads):
                t0, dmalen, plast, got = ch.reads[p0]
                d0, d1 = _psn_diff(psn, p0), _psn_diff(plast, psn)
                if d0 >= 0 and d1 >= 0:
                    if d0 == 0 and seg in ("first", "only") and len(ch.read_lat) < LAT_SAMPLES:
                        ch.read_lat.append(t - t0)
                    got += pay
                    ch.reads[p0] = (t0, dmalen, plast, got)
                    if seg in ("last", "only"):
                        if got != dmalen:
                            c["length_mismatch"] += 1
                        del ch.reads[p0]
                        c["reads_completed"] += 1
                        self._ack(ch, t, psn)
                        ch.expected = (psn + 1) % PSN_MOD if ch.expected is not None and _psn_diff(psn + 1, ch.expected) > 0 else ch.expected
                    break
            else:
                c["unmatched_read_responses"] += 1
            return
        kind = (syn >> 5) & 3
        if kind == 0:
            c["acks"] += 1
            self._ack(ch, t, psn)
        elif kind == 1:
            c["rnr_naks"] += 1
            ch.nak_seen = True
            if ch.fill is not None:
                self._refile(ch)
            ch.rnr_timers[RNR_TIMER_MS[syn & 0x1F]] += 1
        elif kind == 3:
            name = NAK_CODES.get(syn & 0x1F, f"NAK code {syn & 0x1F}")
            c["nak " + name] += 1
            c["naks"] += 1
            ch.nak_seen = True
            if ch.fill is not None:
                self._refile(ch)
        if o == "atomic_ack":
            c["atomic_acks"] += 1

    def _ack(self, ch: _Channel, t, psn):
        n = 0
        while ch.pending:
            p0, t0 = next(iter(ch.pending.items()))
            if _psn_diff(psn, p0) < 0:
                break
            ch.pending.popitem(last=False)
            n += 1
            if len(ch.ack_lat) < LAT_SAMPLES:
                ch.ack_lat.append(t - t0)
        ch.c["acked_requests"] += n

    def row(self, halves_text) -> dict:
        dur = (self.last - self.first) if self.first is not None else 0.0
        a, b = halves_text
        out = {"conversation": self.cid, "transport": self.transport or "CNP", "a": a, "b": b,
               "qpn_a": _hex(self.qpn[0]), "qpn_b": _hex(self.qpn[1]),
               "p_key": ",".join(f"0x{p:04x}" for p in sorted(self.p_keys)), "paired_by": self.info["paired_by"],
               "packets_a_to_b": self.packets[0], "packets_b_to_a": self.packets[1],
               "bytes_a_to_b": self.bytes[0], "bytes_b_to_a": self.bytes[1],
               "payload_bytes": self.payload[0] + self.payload[1], "first_time": self.first,
               "first_time_ns": self.first_ns if self.first is not None else None,
               "duration_s": dur}
        out["goodput_bps"] = (out["payload_bytes"] * 8 / dur) if dur > 0 else None
        ops, obytes = defaultdict(int), defaultdict(int)
        c = defaultdict(int)
        rnr = defaultdict(int)
        ack_lat, read_lat = [], []
        depth = 0
        for ch in self.ch:
            for k, v in ch.ops.items():
                ops[k] += v
            for k, v in ch.op_bytes.items():
                obytes[k] += v
            for k, v in ch.c.items():
                c[k] += v
            for k, v in ch.rnr_timers.items():
                rnr[k] += v
            ack_lat += ch.ack_lat
            read_lat += ch.read_lat
            depth = max(depth, ch.max_outstanding)
        out["messages"] = dict(ops)
        out["message_bytes"] = dict(obytes)
        out["one_sided"] = sum(v for k, v in ops.items() if k in ONE_SIDED or k == "read")
        out["two_sided"] = ops.get("send", 0)
        if self.transport in ("RC", "XRC", "UC"):
            out.update({k: c.get(k, 0) for k in ("psn_gaps", "drops", "retransmissions", "out_of_order",
                                                  "length_mismatch", "bad_icrc")})
        if self.transport in ("RC", "XRC"):
            naks = {k[4:]: v for k, v in c.items() if k.startswith("nak ")}
            out.update({"acks": c.get("acks", 0), "naks": naks, "rnr_naks": c.get("rnr_naks", 0),
                        "rnr_timer_ms": {str(k): v for k, v in rnr.items()},
                        "ack_coalescing": (c["acked_requests"] / c["acks"]) if c.get("acks") else None,
                        "max_outstanding": depth, "reads_completed": c.get("reads_completed", 0),
                        "unmatched_read_responses": c.get("unmatched_read_responses", 0),
                        "unacknowledged_at_end": sum(len(ch.pending) + len(ch.reads) for ch in self.ch)
                        + c.get("untracked_requests", 0),
                        "read_latency_us": _pct(read_lat), "ack_latency_us": _pct(ack_lat)})
        out["cnp_received_a"], out["cnp_received_b"] = self.cnps
        out["ecn_ce"] = sum(self.ecn_ce)
        return out


def _pct(v: List[float]) -> Optional[dict]:
    if not v:
        return None
    a = np.asarray(v) * 1e6
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"n": len(a), "p50": round(float(p50), 3), "p90": round(float(p90), 3), "p99": round(float(p99), 3),
            "max": round(float(a.max()), 3)}


def _hex(q):
    return None if q is None else f"0x{q:06x}"


def _end_text(addr: bytes, lid: int) -> str:
    parts = []
    if lid:
        parts.append(f"LID {lid}")
    if addr.strip(b"\0"):
        parts.append(R.addr_text(addr))
    return " ".join(parts) or "-"


def _batches(path, icrc, mask, progress=None, problems=None):
    """Record batches of the capture (optionally only the packets `mask` selects)."""
    s = scan(path, icrc=icrc)
    for rec in s:
        if mask is not None:
            rec = rec[mask(rec)]
        if progress:
            progress(len(rec), s.bytes_done)
        yield rec
    if problems is not None:
        problems.extend(s.problems)


def _mine(key, share) -> bool:
    """Whether a conversation belongs to this process's share: (k, n) takes those hashing to k mod n."""
    k, n = share
    return n == 1 or zlib.crc32(repr(key).encode()) % n == k


def _sequence(path, icrc, mask, conv_of, convs, share=(0, 1), progress=None):
    """Pass 2 for the conversations of `share`: [(sort key, row)] and the file's problems."""
    state: Dict[int, _Conv] = {}
    ud: Dict[tuple, _Conv] = {}
    problems: List[str] = []
    for rec in _batches(path, icrc, mask, progress, problems):
        b = rec[(rec["flags"] & R.F_BTH) > 0]
        if not len(b):
            continue
        keys, first, inv = _batch_halves(b)
        frames = b["frame"]
        ops = b["opcode"]
        is_ud = (ops >= 0x60) & (ops < 0x80)
        objs = np.empty(len(keys), object)
        sides = np.zeros(len(keys), np.int64)
        for j, k in enumerate(keys):
            cs = conv_of.get(k)
            if cs is not None:
                cid, sides[j] = cs
                if cid not in state:
                    if not _mine(cid, share):
                        continue
                    state[cid] = _Conv(cid, convs[cid])
                    state[cid].first_frame = int(frames[first[j]])
                objs[j] = state[cid]
        row_obj, row_side = objs[inv], sides[inv]
        if is_ud.any():                   # UD: both QPNs are in the packet (DETH source QP)
            u = np.nonzero(is_ud)[0]
            src, dst, sl, dl, qp, sqp = (b[k][u] for k in ("src", "dst", "slid", "dlid", "destqp", "deth_srcqp"))
            _, ufirst, uinv = group_rows(b, ("src", "dst", "slid", "dlid", "destqp", "deth_srcqp"), u)
            uobj, uside = np.empty(len(ufirst), object), np.zeros(len(ufirst), np.int64)
            for j, i in enumerate(ufirst.tolist()):
                a_end, b_end = (bytes(src[i]), int(sl[i]), int(sqp[i])), (bytes(dst[i]), int(dl[i]), int(qp[i]))
                fwd = a_end <= b_end
                uk = a_end + b_end if fwd else b_end + a_end
                if uk not in ud:
                    if not _mine(uk, share):
                        continue
                    ud[uk] = _Conv(-1, {"paired_by": "deth", "ends": uk})
                    ud[uk].qpn = [uk[2], uk[5]]
                    ud[uk].first_frame = int(frames[u[i]])
                uobj[j], uside[j] = ud[uk], 0 if fwd else 1
            row_obj[u], row_side[u] = uobj[uinv], uside[uinv]
        sel = np.nonzero(np.not_equal(row_obj, None))[0]
        if not len(sel):
            continue
        cols = [b[k][sel].tolist() for k in ("time", "opcode", "psn", "len", "paylen", "reth_dmalen",
                                               "aeth_syndrome", "ecn", "p_key", "destqp", "icrc", "time_ns")]
        for cv, side, t, op, psn, ln, pay, dml, syn, ecn, pk, qp, crc, tns in zip(
                row_obj[sel].tolist(), row_side[sel].tolist(), *cols):
            cv.packet(side, t, op, psn, ln, pay, dml, syn, ecn, pk, qp, crc == R.BAD, tns)
    rows = []
    for cid, cv in state.items():
        a, b = convs[cid]["halves"]
        h = a or (b[1], b[0], b[3], b[2], 0)
        rows.append((cv, cv.row((_end_text(h[0], h[2]), _end_text(h[1], h[3]))), 0))
    for uk, cv in ud.items():
        rows.append((cv, cv.row((_end_text(uk[0], uk[1]), _end_text(uk[3], uk[4]))), 1))
    # sorted by bytes; ties in the order conversations first appear (paired ones before UD), whatever the share
    return [((-(r["bytes_a_to_b"] + r["bytes_b_to_a"]), kind, cv.first_frame), r) for cv, r, kind in rows], problems


_FORKED = None          # what the pass-2 worker processes inherit: (path, icrc, mask, conv_of, convs, n)


def _forked_share(k: int):
    path, icrc, mask, conv_of, convs, n = _FORKED
    return _sequence(path, icrc, mask, conv_of, convs, (k, n))


def analyse(path: str, icrc: bool = True, mask=None, progress=None, workers: int = 0) -> dict:
    """Conversations of a capture (read twice: pairing, then sequencing).  `icrc` verifies ICRCs in the
    second pass (a bad one is a drop); `mask(batch)` optionally selects the packets to analyse.  The
    sequencing is shared among `workers` processes by conversation (0: one per CPU for captures of 64 MiB
    and more); the result does not depend on how many."""
    global _FORKED
    size = os.path.getsize(path)
    first_half = second_half = None
    if progress:                      # one bar for both passes, each packet counted half in each
        def first_half(n, done):
            progress(n / 2, done // 2)

        def second_half(n, done):
            progress(n / 2, size // 2 + done // 2)
    halves, reqs, reps = _learn(_batches(path, False, mask, first_half))
    conv_of, convs = _pair(halves, reqs, reps)
    n = workers or ((os.cpu_count() or 1) if size >= MIN_SPLIT else 1)
    if n > 1:
        _FORKED = (path, icrc, mask, conv_of, convs, n)
        try:
            with multiprocessing.get_context("fork").Pool(n - 1) as pool:
                pending = [pool.apply_async(_forked_share, (k,)) for k in range(1, n)]
                parts = [_sequence(path, icrc, mask, conv_of, convs, (0, n), second_half)]
                parts += [p.get() for p in pending]
        finally:
            _FORKED = None
    else:
        parts = [_sequence(path, icrc, mask, conv_of, convs, (0, 1), second_half)]
    ranked = sorted((kr for rows, _ in parts for kr in rows), key=lambda kr: kr[0])
    rows = [r for _, r in ranked]
    for i, r in enumerate(rows):
        r["conversation"] = i + 1
    return {"conversations": rows, "problems": parts[0][1]}
