"""Queue-pair conversations and reliable-connection analysis (IBA Vol 1 §9.7: PSNs, ACK/NAK, READ).

One streaming pass decodes the capture (the file's two halves in two threads on large pcap files), learns
the half-flows (source, destination, destination QP) and writes each transport packet's few sequencing
fields to a compact spill (in memory, then a temporary file: memory stays flat however large the
capture).  Pairing then decides which half-flows belong together — from CM REQ/REP QPNs
(§12.6.5/§12.6.8) where present, else from request PSNs answered by ACK/response PSNs the other way,
else from the addresses alone — and the compiled sequencer (ibwire/decode/native/flows.c) replays the
spill conversation by conversation in capture order, as the responder would see it (§9.7.4):
  * a request PSN beyond the expected one is a gap; each missing PSN is then one of three things: resent
    after a NAK/RNR NAK or followed by go-back-N resends (lost on the wire: a drop, and a retransmission),
    arriving late with neither (out of order), or never resent at all (not captured: the responder went
    on, so the wire delivered it and the mirror or the capture missed it); an already accepted PSN is a
    retransmission; a bad ICRC is dropped silently by the responder;
  * a READ request reserves one PSN per response packet (dmalen/4096 to dmalen/256); its responses are
    matched to it, completed READs acknowledge what precedes them; ACKs retire pending requests
    (coalescing), NAKs and RNR NAKs are counted by code and timer;
  * ACK latency runs from a request's first transmission to the first ACK (or READ completion) covering its
    PSN, resends and late requests included: what the requester waited; READ latency from a READ request's
    first transmission to its first response.  Percentiles summarise up to 2^20 samples per direction;
  * a message's bytes are checked against its RETH DMA length (WRITE) or the READ's.
"""

import os
import tempfile
import threading
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

import numpy as np

from dissectors.opcodes import NAK_CODES, RNR_TIMER_MS, lookup
from ibwire.analyze import frames as F
from ibwire.analyze import retries
from ibwire.analyze.hashing import group_rows
from ibwire.decode import _native
from ibwire.decode import records as R
from ibwire.decode.scan import scan
from ibwire.files.split import MIN_SPAN, processes, spans
from ibwire.files.walk import SpanContextLost

SAMPLE = 128  # distinct PSNs per half-flow kept for pairing (requests, and responses)
SPILL_IN_MEMORY = 1 << 16  # packets kept in memory before the spill moves to a temporary file
OP = [lookup(c).op for c in range(256)]
TRANSPORT = [lookup(c).transport for c in range(256)]
_IS_CNP = np.array([t == "CNP" for t in TRANSPORT])
REQUEST_OPS = {"send", "write", "read_req", "atomic", "flush", "atomic_write", "resync"}
ONE_SIDED = {"write", "read_req", "atomic", "flush", "atomic_write"}
SEQUENCED = ("RC", "XRC", "DC", "UC")  # transports whose PSNs the sequencer follows (§9.7)
ACKNOWLEDGED = ("RC", "XRC", "DC")  # and whose responders acknowledge them
MESSAGE_KINDS = ("send", "write", "read", "atomic", "flush", "atomic_write", "resync", "unknown")

# What the compiled sequencer reads per packet (native/flows.h flow_pkt, the same layout).
SPILL = np.dtype(
    [
        ("t", "f8"),
        ("tns", "i8"),
        ("half", "u4"),
        ("psn", "u4"),
        ("len", "u4"),
        ("paylen", "i4"),
        ("dmalen", "u4"),
        ("destqp", "u4"),
        ("frame", "u4"),
        ("p_key", "u2"),
        ("op", "u1"),
        ("syn", "u1"),
        ("ecn", "u1"),
        ("bad", "u1"),
        ("pad", "V6"),
    ]
)
COUNTERS = [c.lower() for c in _native.FLOW_COUNTERS]
_NC, _NK = len(COUNTERS), len(MESSAGE_KINDS)
SUMMARY = np.dtype(
    [
        ("packets", "i8", 2),
        ("bytes", "i8", 2),
        ("payload", "i8", 2),
        ("cnps", "i8", 2),
        ("ecn_ce", "i8", 2),
        ("qpn", "i8", 2),
        ("first_frame", "i8"),
        ("first_tns", "i8"),
        ("first", "f8"),
        ("last", "f8"),
        ("first_op", "i8"),
        ("counters", "i8", (2, _NC)),
        ("ops", "i8", (2, _NK)),
        ("op_bytes", "i8", (2, _NK)),
        ("ops_order", "i8", (2, _NK)),
        ("bytes_order", "i8", (2, _NK)),
        ("nak", "i8", (2, 32)),
        ("nak_order", "i8", (2, 32)),
        ("rnr", "i8", (2, 32)),
        ("rnr_order", "i8", (2, 32)),
        ("n_pkeys", "i8"),
        ("episodes", "i8", (2, 3)),
        ("timeout_wait_min", "f8", 2),
        ("timeout_wait_max", "f8", 2),
        ("max_retries", "i8", 2),
        ("stall_retries", "i8", 2),
        ("stall_psn", "i8", 2),
        ("stall_frame", "i8", 2),
        ("stall_answers", "i8", 2),
        ("stall_cause", "i8", 2),
    ]
)
_SPILL_OFF = np.array(
    [R.RECORD.fields[name][1] for name, typ in _native.SPILL_FIELDS if R.RECORD[name].str.lstrip("<>|=") == typ],
    np.int64,
)
if (
    len(_SPILL_OFF) != len(_native.SPILL_FIELDS)
    or SPILL.itemsize != _native.FLOW_PKT_SIZE
    or SUMMARY.itemsize != _native.FLOW_SUMMARY_SIZE
):
    raise ImportError("ibwire.decode._native's flow records differ from ibwire.analyze.flows'; rebuild it")


def _tables():
    """Per-opcode facts for the sequencer: class, message kind, segment, transport (native/flows.h)."""
    cls, kind, seg, tr = (np.zeros(256, np.uint8) for _ in range(4))
    classes = {"read_req": 1, "read_resp": 2, "ack": 3, "atomic_ack": 4, "cnp": 5}
    segs = {"": 0, "first": 1, "middle": 2, "last": 3, "only": 4}
    trs = {"RC": 1, "UC": 2, "DC": 3, "UD": 4, "CNP": 5, "XRC": 6}
    for c in range(256):
        o = lookup(c)
        cls[c] = classes.get(o.op, 0)
        kind[c] = (
            MESSAGE_KINDS.index(o.op)
            if o.op in MESSAGE_KINDS
            else MESSAGE_KINDS.index("read")
            if o.op == "read_req"
            else 0
        )
        seg[c] = segs[o.seg]
        tr[c] = trs.get(o.transport, 0)
    return cls, kind, seg, tr


_TABLES = _tables()
_IS_REQ = np.array([OP[c] in REQUEST_OPS for c in range(256)])
_IS_RESP = np.array([OP[c] in ("ack", "read_resp", "atomic_ack") for c in range(256)])
_IS_UD = np.array([0x60 <= c < 0x80 for c in range(256)])

HalfKey = Tuple[bytes, bytes, int, int, int]  # src, dst, slid, dlid, destqp


class _Half:
    __slots__ = ("id", "transport", "req_psn", "resp_psn", "packets")

    def __init__(self, hid, transport):
        self.id, self.transport = hid, transport
        self.req_psn, self.resp_psn, self.packets = {}, {}, 0  # PSN samples: dicts keep first-seen order


class _Spill:
    """The sequencing fields of every transport packet, in capture order: in memory while small, then
    appended to an unlinked temporary file and read back in pieces."""

    def __init__(self):
        self.parts: List[np.ndarray] = []
        self.n = 0
        self.file = None

    def add(self, rows: np.ndarray) -> None:
        self.n += len(rows)
        if self.file is None and self.n > SPILL_IN_MEMORY:
            self.file = tempfile.TemporaryFile(prefix="ibwire-flows-")
            for p in self.parts:
                p.tofile(self.file)
            self.parts = []
        if self.file is not None:
            rows.tofile(self.file)
        else:
            self.parts.append(rows)

    def __iter__(self):
        if self.file is None:
            yield from self.parts
            return
        self.file.seek(0)
        buf = np.empty(1 << 16, SPILL)  # one buffer for every piece: no heap churn on large captures
        while True:
            n = self.file.readinto(buf.view(np.uint8)) // SPILL.itemsize
            if not n:
                return
            yield buf[:n]

    def close(self):
        if self.file is not None:
            self.file.close()


def _settle_cnp_halves(hs: List[_Half], inv: np.ndarray, ops: np.ndarray) -> None:
    """A half-flow whose first packet was a CNP takes the transport of its first other packet: a responder's
    CNPs (RoCE Annex A17.9) go to the QP its ACKs go to, and often come first."""
    cnp_first = [j for j, h in enumerate(hs) if h.transport == "CNP"]
    if not cnp_first:
        return
    other = np.flatnonzero(~_IS_CNP[ops])
    first_other = np.full(len(hs), len(ops))
    np.minimum.at(first_other, inv[other], other)
    for j in cnp_first:
        if first_other[j] < len(ops):
            hs[j].transport = TRANSPORT[int(ops[first_other[j]])]


class _Learner:
    """Half-flows with PSN samples, CM REQ/REP facts and UD directions, from batches in capture order;
    every transport packet goes to the spill with the number of its half-flow (or UD direction)."""

    def __init__(self):
        self.drops: dict = {}  # the pcapng's interface statistics: packets the capture dropped
        self.halves: Dict[HalfKey, _Half] = {}
        self.ud: Dict[tuple, int] = {}  # (src, dst, slid, dlid, destqp, srcqp) -> number
        self.reqs, self.reps = {}, {}
        self.ids = 0
        self.spill = _Spill()

    def _id(self) -> int:
        self.ids += 1
        return self.ids - 1

    def add(self, rec: np.ndarray, frames: Optional[np.ndarray] = None) -> None:
        """Learn from a batch (`frames`: its frame numbers when the records cannot say)."""
        bth = (rec["flags"] & R.F_BTH) > 0
        rows = None if bth.all() else np.flatnonzero(bth)  # field by field: a masked copy of whole records is slow
        if rows is not None and not len(rows):
            return

        def col(f):
            return rec[f] if rows is None else rec[f][rows]

        src, dst, sl, dl, qp = (col(k) for k in ("src", "dst", "slid", "dlid", "destqp"))
        ops, psns = col("opcode"), col("psn")
        _, first, inv = group_rows(rec, ("src", "dst", "slid", "dlid", "destqp"), rows)
        counts = np.bincount(inv, minlength=len(first))
        hs = []
        for j, i in enumerate(first.tolist()):
            k = (bytes(src[i]), bytes(dst[i]), int(sl[i]), int(dl[i]), int(qp[i]))
            h = self.halves.get(k)
            if h is None:
                h = self.halves[k] = _Half(self._id(), TRANSPORT[int(ops[i])])
            h.packets += int(counts[j])
            hs.append(h)
        _settle_cnp_halves(hs, inv, ops)
        for want, attr in ((_IS_REQ[ops], "req_psn"), (_IS_RESP[ops], "resp_psn")):
            need = np.array([len(getattr(h, attr)) < SAMPLE for h in hs])
            if not need.any():
                continue
            sel = np.nonzero(want & need[inv])[0]
            if not len(sel):
                continue
            sel = sel[np.argsort(inv[sel], kind="stable")]
            for part in np.split(sel, np.flatnonzero(np.diff(inv[sel])) + 1):
                sample = getattr(hs[inv[part[0]]], attr)
                for p in psns[part].tolist():
                    if len(sample) >= SAMPLE:
                        break
                    sample[p] = True
        half = np.array([h.id for h in hs], np.uint32)[inv]
        ud = _IS_UD[ops]
        if ud.any():
            u = np.nonzero(ud)[0]
            sqp = col("deth_srcqp")
            _, ufirst, uinv = group_rows(
                rec, ("src", "dst", "slid", "dlid", "destqp", "deth_srcqp"), u if rows is None else rows[u]
            )
            ids = []
            for i in u[ufirst].tolist():
                k = (bytes(src[i]), bytes(dst[i]), int(sl[i]), int(dl[i]), int(qp[i]), int(sqp[i]))
                if k not in self.ud:
                    self.ud[k] = self._id()
                ids.append(self.ud[k])
            half[u] = np.array(ids, np.uint32)[uinv]
        mad = np.flatnonzero(col("flags") & R.F_MAD)
        for i in mad[col("mad_class")[mad] == 0x07].tolist():
            r = rec[i if rows is None else rows[i]]
            ends = (bytes(r["src"]), int(r["slid"]), bytes(r["dst"]), int(r["dlid"]))
            if r["mad_attrid"] == 0x10:
                self.reqs[int(r["cm_comm_id"])] = (ends, int(r["cm_qpn"]))
            elif r["mad_attrid"] == 0x13:
                self.reps[int(r["cm_remote_comm_id"])] = (ends, int(r["cm_qpn"]))
        out = np.empty(len(ops), SPILL)
        _native.flows_spill(
            np.ascontiguousarray(rec),
            rec.dtype.itemsize,
            rows,
            _SPILL_OFF,
            half,
            None if frames is None else np.ascontiguousarray(frames, np.uint32),
            out,
        )
        self.spill.add(out)


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
        (_, qb) = reps[comm]
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
        scores = sorted(
            (
                (
                    len(halves[x].req_psn.keys() & halves[y].resp_psn.keys())
                    + len(halves[y].req_psn.keys() & halves[x].resp_psn.keys()),
                    x,
                    y,
                )
                for x in ks
                for y in back
            ),
            reverse=True,
        )
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


def _pct(v: np.ndarray) -> Optional[dict]:
    if not len(v):
        return None
    a = np.asarray(v) * 1e6
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {
        "n": len(a),
        "p50": round(float(p50), 3),
        "p90": round(float(p90), 3),
        "p99": round(float(p99), 3),
        "max": round(float(a.max()), 3),
    }


def _hex(q):
    return None if q is None or q < 0 else f"0x{q:06x}"


def end_text(addr: bytes, lid: int) -> str:
    """An endpoint as `ibwire flows` names it: 'LID n', the GID/IP, or both."""
    parts = []
    if lid:
        parts.append(f"LID {lid}")
    if addr.strip(b"\0"):
        parts.append(R.addr_text(addr))
    return " ".join(parts) or "-"


def _ordered(counts, order, names) -> dict:
    """Channel 0's keys in first-seen order, then channel 1's new ones (Python dict-merge order)."""
    out = {}
    for ch in (0, 1):
        for i in sorted(np.flatnonzero(order[ch]).tolist(), key=lambda i: order[ch][i]):
            out[names[i]] = out.get(names[i], 0) + int(counts[ch][i])
    return out


_NAK_NAMES = [NAK_CODES.get(c, f"NAK code {c}") for c in range(32)]
_RNR_NAMES = [str(RNR_TIMER_MS[c]) for c in range(32)]


def _row(cid: int, paired_by: str, ends, raw) -> dict:
    """One conversation's row from the sequencer's summary (raw: flows_result's tuple)."""
    s = np.frombuffer(raw[0], SUMMARY)[0]
    ack_lat, read_lat = np.frombuffer(raw[1], np.float64), np.frombuffer(raw[2], np.float64)
    pkeys = sorted(np.frombuffer(raw[3], np.uint16).tolist())
    first_op = int(s["first_op"])
    transport = TRANSPORT[first_op] if first_op >= 0 else None
    dur = float(s["last"] - s["first"])
    c = {k: int(s["counters"][0][i] + s["counters"][1][i]) for i, k in enumerate(COUNTERS)}
    out = {
        "conversation": cid,
        "transport": transport or "CNP",
        "a": ends[0],
        "b": ends[1],
        "qpn_a": _hex(int(s["qpn"][0])),
        "qpn_b": _hex(int(s["qpn"][1])),
        "p_key": ",".join(f"0x{p:04x}" for p in pkeys),
        "paired_by": paired_by,
        "packets_a_to_b": int(s["packets"][0]),
        "packets_b_to_a": int(s["packets"][1]),
        "bytes_a_to_b": int(s["bytes"][0]),
        "bytes_b_to_a": int(s["bytes"][1]),
        "payload_bytes": int(s["payload"].sum()),
        "first_time": float(s["first"]),
        "first_time_ns": int(s["first_tns"]),
        "duration_s": dur,
    }
    out["goodput_bps"] = (out["payload_bytes"] * 8 / dur) if dur > 0 else None
    ops = _ordered(s["ops"], s["ops_order"], MESSAGE_KINDS)
    out["messages"] = ops
    out["message_bytes"] = _ordered(s["op_bytes"], s["bytes_order"], MESSAGE_KINDS)
    out["one_sided"] = sum(v for k, v in ops.items() if k in ONE_SIDED or k == "read")
    out["two_sided"] = ops.get("send", 0)
    out["bad_icrc"] = c["bad_icrc"]
    sequenced = int(s["packets"].sum() - s["cnps"].sum()) - c["bad_icrc"]
    if not sequenced and c["bad_icrc"]:
        out["not_analysed"] = (
            f"every frame ({c['bad_icrc']}) fails its ICRC, so none was sequenced: receivers "
            "discard them (a mirror or switch that rewrites headers without recomputing the "
            "ICRC does this; --no-icrc analyses them as if good)"
        )
    if transport in SEQUENCED:
        out.update(
            {
                k: c[k]
                for k in ("psn_gaps", "drops", "not_captured", "retransmissions", "out_of_order", "length_mismatch")
            }
        )
    if transport in ACKNOWLEDGED:
        out.update(
            {
                "acks": c["acks"],
                "naks": _ordered(s["nak"], s["nak_order"], _NAK_NAMES),
                "rnr_naks": c["rnr_naks"],
                "rnr_timer_ms": _ordered(s["rnr"], s["rnr_order"], _RNR_NAMES),
                "ack_coalescing": (c["acked_requests"] / c["acks"]) if c["acks"] else None,
                "max_outstanding": int(s["counters"][:, COUNTERS.index("max_outstanding")].max()),
                "reads_completed": c["reads_completed"],
                "unmatched_read_responses": c["unmatched_read_responses"],
                "unacknowledged_at_end": c["unacknowledged"] + c["untracked"],
                "read_latency_us": _pct(read_lat),
                "ack_latency_us": _pct(ack_lat),
                "retries_a": retries.channel(s, 0),
                "retries_b": retries.channel(s, 1),
            }
        )
    out["cnp_received_a"], out["cnp_received_b"] = int(s["cnps"][0]), int(s["cnps"][1])
    out["ecn_ce"] = int(s["ecn_ce"].sum())
    return out


def _read_span(path, icrc, mask, span, progress=None, upto=None) -> Tuple[_Learner, int, List[str]]:
    """Decode one byte span (or the whole file, or its first `upto` frames) into a learner; also its record
    count and problems."""
    s = scan(path, icrc=icrc, span=span)
    learner, n = _Learner(), 0
    for rec in s:
        if upto is not None:
            rec = rec[: max(upto - n, 0)]
            if not len(rec):
                break
        frames = np.arange(n + 1, n + 1 + len(rec)) if span else None  # a span's reader cannot number them
        n += len(rec)
        if mask is not None:
            keep = mask(rec)
            rec, frames = rec[keep], None if frames is None else frames[keep]
        learner.add(rec, frames)
        if progress:
            progress(len(rec), s.bytes_done)
    learner.drops = dict(s.walk.drops)
    learner.drop_log = list(s.walk.drop_log)
    return learner, n, list(s.problems)


def _merge(parts) -> Tuple[_Learner, List[np.ndarray], List[str]]:
    """One learner for the whole file from its spans' (in order); each span's half numbers -> merged ones."""
    main, _, problems = parts[0]
    maps = [np.arange(main.ids, dtype=np.int64)]
    offset = parts[0][1]
    for learner, n, probs in parts[1:]:
        local = np.zeros(learner.ids, np.int64)
        for k, h in learner.halves.items():
            m = main.halves.get(k)
            if m is None:
                m = main.halves[k] = _Half(main._id(), h.transport)
            m.packets += h.packets
            for attr in ("req_psn", "resp_psn"):
                sample = getattr(m, attr)
                for p in getattr(h, attr):
                    if len(sample) >= SAMPLE:
                        break
                    sample[p] = True
            local[h.id] = m.id
        for k, i in learner.ud.items():
            if k not in main.ud:
                main.ud[k] = main._id()
            local[i] = main.ud[k]
        for comm, v in learner.reqs.items():
            main.reqs.setdefault(comm, v)
        for comm, v in learner.reps.items():
            main.reps.setdefault(comm, v)
        learner.frame_offset = offset
        offset += n
        maps.append(local)
        problems += probs
    return main, maps, problems


def analyse(
    path: str, icrc: bool = True, mask=None, progress=None, workers: int = 0, events: list = None, upto=None
) -> dict:
    """Conversations of a capture (largest first).  `icrc` verifies ICRCs (a bad one is a drop);
    `mask(batch)` optionally selects the packets to analyse.  Large pcap/pcapng files are decoded by
    `workers` threads (0: one per CPU), each reading one part of the file; the result does not depend on
    how many.  `events`: a list the sequencer's conclusions are appended to, one row per frame
    (frames.TABLE), and then the number of its events past its limit, not kept.  `upto`: only the first
    frames, that many (read by one thread)."""
    workers = 1 if upto is not None else processes(workers, os.path.getsize(path) // MIN_SPAN)
    cut = spans(path, workers) if workers > 1 else None
    parts = None
    if cut:
        results: list = [None] * len(cut)
        errors: list = []
        share = len(cut)
        scaled = (lambda n, done: progress(n * share, done * share)) if progress else None

        def work(i):
            try:
                results[i] = _read_span(path, icrc, mask, cut[i], scaled if i == 0 else None)
            except BaseException as e:  # noqa: B036  (re-raised in the caller's thread)
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(1, len(cut))]
        for t in threads:
            t.start()
        work(0)
        for t in threads:
            t.join()
        if not errors:
            parts = results
        elif not all(isinstance(e, SpanContextLost) for e in errors):
            raise errors[0]
    if parts is None:
        parts = [_read_span(path, icrc, mask, None, progress, upto)]
    learner, maps, problems = _merge(parts)
    drops: dict = {}
    log = []
    for p in parts:
        drops.update(p[0].drops)
        log += [(f + getattr(p[0], "frame_offset", 0), key, n) for f, key, n in p[0].drop_log]
    kept = events if events is not None else []
    try:
        rows, latency = _sequence(learner, maps, [p[0] for p in parts], kept)
        capture = capture_drops(drops, rows, log, kept[-2] if kept else None)
        return {"conversations": rows, "problems": problems, "capture": capture, "latency_samples": latency}
    finally:
        for p in parts:
            p[0].spill.close()


def capture_drops(drops: dict, rows: List[dict], log=(), table=None) -> Optional[dict]:
    """The capture's own drop counters (pcapng interface statistics, `drops`: per interface) tied to the PSNs
    the sequencer found missing but never resent: at most that many of those gaps are the capture's own
    doing (the rest, and all of them when it dropped nothing, were missed before it: by the mirror).  When
    the capture recorded its drops as they happened (statistics blocks between packets, `log`: ibwire's verbs
    backend writes one each time its count rises), each rise is tied to the gaps since the block before it
    (`table`: frames.TABLE rows, the frames after PSNs not captured)."""
    if not drops:
        return None
    windows = _drop_windows(log, table)
    dropped, missed = sum(drops.values()), sum(r.get("not_captured") or 0 for r in rows)
    explained = min(dropped, missed)
    if not dropped:
        text = (
            f"the capture dropped no packets (pcapng interface statistics), so the {missed:,} PSNs not "
            f"captured were missed before it (by the mirror or port), not by the capture"
            if missed
            else "the capture dropped no packets (pcapng interface statistics)"
        )
    else:
        text = (
            f"the capture dropped {dropped:,} packets (pcapng interface statistics); "
            f"{explained:,} of the {missed:,} PSNs not captured are explained by them"
            + (
                f", the other {missed - explained:,} {'was' if missed - explained == 1 else 'were'} missed before the "
                f"capture (the mirror or port)"
                if missed > explained
                else ""
            )
        )
    out = {"dropped": dropped, "not_captured": missed, "explained": explained, "text": text}
    if len(windows) > 1:
        out["windows"] = windows
        out["text"] += ". " + "; ".join(w["text"] for w in windows)
    return out


def _drop_windows(log, table) -> List[dict]:
    """Per statistics block that raised a drop count: the frames since the block before it, the packets
    dropped in between, the PSNs not captured in between (and after which frames, with a display filter)."""
    out, last, since = [], {}, 0
    for frame, key, dropped in sorted(log, key=lambda x: x[0]):
        rise, before = dropped - last.get(key, 0), since
        last[key], since = dropped, frame
        if rise <= 0:
            continue
        gaps = np.zeros(0, np.int64)
        if table is not None and len(table):
            sel = (table["frame"] > before) & (table["frame"] <= frame) & (table["an_not_captured"] > 0)
            gaps, missed = table["frame"][sel], int(table["an_not_captured"][sel].sum())
        else:
            missed = 0
        listed = gaps[: F.LISTED].tolist()
        text = f"frames {before + 1:,}-{frame:,}: {rise:,} dropped by the capture, {missed:,} PSNs not captured" + (
            f" (after frames {', '.join(map(str, listed))})" if listed else ""
        )
        out.append(
            {
                "first_frame": before + 1,
                "last_frame": frame,
                "dropped": rise,
                "not_captured": missed,
                "explained": min(rise, missed),
                "gap_frames": listed,
                "wireshark": "frame.number in {" + ", ".join(map(str, listed)) + "}" if listed else "",
                "text": text,
            }
        )
    return out


def _sequence(learner: _Learner, maps, learners, keep: list = None) -> Tuple[List[dict], dict]:
    """Pair the half-flows, replay every span's spill through the compiled sequencer, rank the rows.  Also
    each conversation's ACK and READ latency samples in seconds (by conversation number), which the
    percentiles in its row summarise."""
    conv_of, convs = _pair(learner.halves, learner.reqs, learner.reps)
    conv = np.full(learner.ids, -1, np.int32)
    side = np.zeros(learner.ids, np.uint8)
    ends, kinds = [], []
    for k, (cid, sd) in conv_of.items():
        conv[learner.halves[k].id], side[learner.halves[k].id] = cid, sd
    for info in convs:
        a, b = info["halves"]
        h = a or (b[1], b[0], b[3], b[2], 0)
        ends.append((end_text(h[0], h[2]), end_text(h[1], h[3])))
        kinds.append((0, info["paired_by"], None))
    ud_convs: Dict[tuple, int] = {}
    for k, i in learner.ud.items():  # UD: both QPNs are in the packet (DETH source QP)
        a_end, b_end = (k[0], k[2], k[5]), (k[1], k[3], k[4])
        fwd = a_end <= b_end
        uk = a_end + b_end if fwd else b_end + a_end
        if uk not in ud_convs:
            ud_convs[uk] = len(ends)
            ends.append((end_text(uk[0], uk[1]), end_text(uk[3], uk[4])))
            kinds.append((1, "deth", (uk[2], uk[5])))
        conv[i], side[i] = ud_convs[uk], 0 if fwd else 1
    state = _native.flows_new(len(ends))
    for c, (_, _, qpns) in enumerate(kinds):
        if qpns:
            _native.flows_set_qpn(state, c, *qpns)
    for part, local in zip(learners, maps):
        lut_conv, lut_side = conv[local], side[local]
        offset = getattr(part, "frame_offset", 0)
        for rows in part.spill:
            if offset:
                rows["frame"] += offset
            _native.flows_feed(state, *_TABLES, rows, lut_conv, lut_side)
    raw_events, lost = _native.flows_events(state)  # past 16M events the rest are only counted
    events = F.decode(raw_events)
    by_frame = F.table(events)
    if keep is not None:
        keep += [by_frame, lost]
    listed = F.per_conversation(events, by_frame)
    ranked = []
    for c, (kind, how, _) in enumerate(kinds):
        raw = _native.flows_result(state, c)
        s = np.frombuffer(raw[0], SUMMARY)[0]
        if s["first_frame"] < 0:
            continue  # a conversation none of whose packets the filter kept
        row = _row(0, how, ends[c], raw)
        if c in listed:
            row["frames"] = listed[c]
            row["wireshark"] = F.wireshark(listed[c])
        rank = (-(row["bytes_a_to_b"] + row["bytes_b_to_a"]), kind, int(s["first_frame"]))
        ranked.append((rank, row, (np.frombuffer(raw[1], np.float64), np.frombuffer(raw[2], np.float64))))
    ranked.sort(key=lambda kr: kr[0])
    rows = [r for _, r, _ in ranked]
    for i, r in enumerate(rows):
        r["conversation"] = i + 1
    return rows, {r["conversation"]: lat for _, r, lat in ranked}
