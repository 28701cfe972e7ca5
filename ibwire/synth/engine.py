"""The traffic engine: turns a `Scenario` into time-ordered frames following the IBA transport rules.

Each queue pair is a generator that simulates requester and responder (IBA Vol 1 §9.7): segmentation by
PMTU, PSNs modulo 2^24, ACK coalescing with credits and MSN (§9.7.5), READ responses and atomic
acknowledgements, PSN sequence error NAK and go-back-N retransmission (§9.7.5.2.4), RNR NAK and retry after
the RNR timer, local ACK timeout with retry count, CNPs answering ECN/FECN-marked data (RoCE Annex A17.9,
IBA Annex A10), P_Key checks at the receiver (§10.9.3) with trap 257 to the SM, Q_Key checks of
datagrams (§10.2.4.3, §9.6.1.1) with trap 258.  Management traffic (SM
sweep, SA PathRecord, CM REQ/REP/RTU and DREQ/DREP, IPoIB ARP/ICMP) comes from the same context.  Flows
are merged by time with heapq.merge, so memory does not grow with the number of packets.
"""

import heapq
import itertools
import math
import random
from typing import Iterator, List, Optional, Tuple

from dissectors.numbers import GSI_QKEY, PERMISSIVE_LID
from dissectors.opcodes import CREDITS, RNR_TIMER_MS
from ibwire.synth import mads
from ibwire.synth.headers import CNP_PAD, SYN_NAK_PSN, SYN_RNR, ext_headers, transport
from ibwire.synth.links import ECN_CE, Link
from ibwire.synth.scenario import PMTUS, QP, Scenario

Event = Tuple[float, int, bytes]
M24 = 0xFFFFFF
MCAST_QPN = 0xFFFFFF
RNR_DELAY = tuple(ms * 1e-3 for ms in RNR_TIMER_MS)


def psn_ge(a: int, b: int) -> bool:
    """a is at or after b in 24-bit PSN space (IBA §9.7.1)."""
    return ((a - b) & M24) < 0x800000


def accepts(table: List[int], pkey: int) -> bool:
    """P_Key match rule (IBA §10.9.3): same base and at least one of the two is a full member."""
    base = pkey & 0x7FFF
    return any((k & 0x7FFF) == base and ((k | pkey) & 0x8000) for k in table if k & 0x7FFF)


def credit_code(n: int) -> int:
    return max(i for i, c in enumerate(CREDITS[:31]) if c <= n)


class Context:
    """State shared by all flows: link framing, sequence numbers, MAD transaction ids, P_Key tables."""

    def __init__(self, scen: Scenario, link: Link, seed: int):
        self.s, self.link = scen, link
        self.seq = itertools.count()
        self.tid = itertools.count(0x5000_0000_0000)
        self.comm = itertools.count(0x1000)
        self.ud_psn = {}
        self.pool = random.Random(seed).randbytes(1 << 17)
        self.trapped = set()
        self.sm = scen.ports[scen.sm] if scen.sm else None
        self.tables = {n: scen.port_pkeys(n) for n in scen.ports}
        self.violations = {n: 0 for n in scen.ports}
        # What the requesters did, by event sequence number of the captured request: resent it (any resend),
        # resent a PSN the capture never saw intact (lost), resent it when the local ACK timer ran out
        # (timeout), resent one the responder had accepted (duplicate), or sent it just after PSNs the
        # mirror missed (not_captured: how many).
        self.truth = {"resent": set(), "lost": set(), "timeout": set(), "duplicate": set(), "not_captured": {}}

    def rx_accepts(self, port, pkey: int) -> bool:
        return (not port.enforce) or accepts(self.tables[port.name], pkey)

    def vlan_drops(self, port, src) -> bool:
        """A RoCE port with a VLAN (the VF's eswitch-enforced tag) drops frames tagged with another VLAN,
        unless `enforce = false` (VLAN trunking left open to the guest)."""
        return not self.link.native and port.enforce and port.vlan is not None and src.vlan != port.vlan

    def payload(self, msg: int, off: int, n: int) -> bytes:
        o = (msg * 4099 + off) % 65536
        return self.pool[o : o + n]

    def ud(
        self,
        src,
        dst,
        opcode,
        pkey,
        dqp,
        sqp,
        qkey,
        data,
        *,
        dlid=None,
        dgid=None,
        vl=0,
        slid=None,
        udp_sport=0xC001,
        ackreq=False,
    ):
        key = (src.name, sqp)
        psn = self.ud_psn.get(key, (src.lid * 7919 + sqp * 104729) & M24)
        self.ud_psn[key] = (psn + 1) & M24
        tp = transport(opcode, pkey, dqp, psn, ext_headers(opcode, qkey=qkey, src_qp=sqp), data, ackreq=ackreq)
        return self.link.frame(src, dst, tp, vl=vl, dlid=dlid, dgid=dgid, slid=slid, udp_sport=udp_sport)

    def mad(self, src, dst, mad: bytes, qp: int, *, pkey=0xFFFF, directed=False) -> bytes:
        """A MAD as a UD SEND Only to QP0 (SMI, VL15, Q_Key 0) or QP1 (GSI, Q_Key 0x80010000)."""
        perm = PERMISSIVE_LID if directed else None
        return self.ud(
            src,
            dst,
            0x64,
            pkey,
            qp,
            qp,
            0 if qp == 0 else GSI_QKEY,
            mad,
            vl=15 if qp == 0 else 0,
            dlid=perm,
            slid=perm,
        )

    def trap_257(self, out: list, t: float, src, dst, pkey: int, sqp: int, dqp: int):
        """The receiving port counts the violation and, once per offender, sends trap 257 to the SM."""
        self.violations[dst.name] += 1
        self.bad_key_trap(out, t, 257, src, dst, pkey, sqp, dqp)

    def bad_key_trap(self, out: list, t: float, num: int, src, dst, key: int, sqp: int, dqp: int):
        """Trap 257 (bad P_Key) or 258 (bad Q_Key) from the receiving port, once per offender."""
        ident = (num, src.lid, dst.lid, key, sqp, dqp)
        if not self.link.native or self.sm is None or ident in self.trapped:
            return
        self.trapped.add(ident)
        self.send_trap(
            out, t, dst, mads.notice_bad_key(num, dst.lid, src.lid, dst.lid, key, 0, sqp, dqp, src.gid, dst.gid)
        )

    def send_trap(self, out: list, t: float, issuer, notice: bytes):
        """The issuer's SubnTrap(Notice) to the SM and the SM's TrapRepress (IBA §13.4.9)."""
        tid = next(self.tid)
        out.append((t + 2e-6, self.mad(issuer, self.sm, mads.trap(tid, notice), 0)))
        out.append((t + 4e-6, self.mad(self.sm, issuer, mads.trap_repress(tid, notice), 0)))


_SEND = {
    ("first", ""): 0x00,
    ("middle", ""): 0x01,
    ("last", ""): 0x02,
    ("last", "imm"): 0x03,
    ("only", ""): 0x04,
    ("only", "imm"): 0x05,
    ("last", "inv"): 0x16,
    ("only", "inv"): 0x17,
}
_WRITE = {
    ("first", ""): 0x06,
    ("middle", ""): 0x07,
    ("last", ""): 0x08,
    ("last", "imm"): 0x09,
    ("only", ""): 0x0A,
    ("only", "imm"): 0x0B,
}
_BASE = {"RC": 0x00, "UC": 0x20, "UD": 0x60, "XRC": 0xA0}


class Seg:
    __slots__ = ("psn", "opcode", "msg", "off", "length", "last", "kind", "span", "size", "no", "ready")

    def __init__(self, psn, opcode, msg, off, length, last, kind, span, size, no, ready):
        self.psn, self.opcode, self.msg, self.off, self.length = psn, opcode, msg, off, length
        self.last, self.kind, self.span, self.size, self.no, self.ready = last, kind, span, size, no, ready


def _segments(qp: QP, msgs) -> Iterator[Seg]:
    psn, no, base, mtu = qp.psn, 0, _BASE[qp.type], qp.pmtu
    for m, (ready, kind, size) in enumerate(msgs):
        if kind == "read":
            span = max(1, -(-size // mtu))
            no += 1
            yield Seg(psn, base | 0x0C, m, 0, 0, True, kind, span, size, no, ready)
            psn = (psn + span) & M24
            continue
        if kind in ("cmp_swap", "fetch_add"):
            no += 1
            yield Seg(psn, base | (0x13 if kind == "cmp_swap" else 0x14), m, 0, 0, True, kind, 1, 8, no, ready)
            psn = (psn + 1) & M24
            continue
        table = _SEND if kind.startswith("send") else _WRITE
        suffix = kind.partition("_")[2]
        n = max(1, -(-size // mtu))
        for i in range(n):
            pos = "only" if n == 1 else "first" if i == 0 else "last" if i == n - 1 else "middle"
            no += 1
            yield Seg(
                psn,
                base | table[(pos, suffix if pos in ("last", "only") else "")],
                m,
                i * mtu,
                min(mtu, size - i * mtu),
                i == n - 1,
                kind,
                1,
                size,
                no,
                ready,
            )
            psn = (psn + 1) & M24


def _messages(scen: Scenario, qp: QP):
    def stream(o):
        return ((o.at + k * o.interval, o.kind, o.size) for k in range(o.count))

    ops = sorted((o for o in scen.ops if o.qp == qp.name), key=lambda o: o.at)
    return heapq.merge(*map(stream, ops), key=lambda m: m[0])


def qp_flow(ctx: Context, qp: QP) -> Iterator[Event]:
    """All packets of one queue pair (both directions), in time order."""
    yield from _QPFlow(ctx, qp).events()


class _QPFlow:
    """One queue pair simulated end to end: the requester's sending loop, the responder's answers, the faults
    aimed at its requests and the CM exchanges around them.

    Frames wait in `heap` until the requester's clock passes them, so they come out in time order; the
    answers reach the requester through `sender_ev` (time, seq, kind, psn, delay) at their arrival time."""

    def __init__(self, ctx: Context, qp: QP):
        s = ctx.s
        self.ctx, self.qp, self.s, self.link, self.seq = ctx, qp, s, ctx.link, ctx.seq
        self.A, self.B = s.ports[qp.src], s.ports[qp.dst]
        self.lat, self.rate, self.native = s.latency, s.rate_bps, ctx.link.native
        self.sport_a = qp.udp_sport or 0xC000 | (qp.src_qpn & 0x3FFF)
        self.sport_b = 0xC000 | (qp.dst_qpn & 0x3FFF)
        self.base, self.reliable, self.pkey = _BASE[qp.type], qp.type in ("RC", "XRC"), qp.pkey
        self.ccode = credit_code(qp.credits)
        self.tclass = s.dscp << 2  # traffic class of data and ACKs (CNPs: s.cnp_dscp)
        self.heap: list = []  # frames of both directions, until the requester's clock passes them
        self.side: list = []  # management frames (CM, traps) produced along the way
        self._take_faults()
        # responder state
        self.epsn, self.msn = qp.psn, 0
        self.nak_sent = False
        self.pending = 0  # messages completed but not yet acknowledged
        self.pend_psn = None
        self.last_arrival = 0.0
        self.last_cnp = -1.0
        self.cnp_heard: list = []  # times the requester receives a CNP
        self.done_msgs: set = set()
        # requester state
        self.sender_ev: list = []  # (time at requester, seq, kind, psn, delay)
        self.cur_rate, self.cut_at = self.rate, -math.inf
        self.unacked: List[Seg] = []
        self.sent_at: List[float] = []
        self.ptr = 0  # next of `unacked` to resend
        self.retries = 0
        self.last_send = 0.0
        self.hold = 0.0  # RNR: no sending before this time
        self.timeout = qp.timeout_us * 1e-6
        self.gave_up = False
        self.lost: set = set()  # segments (numbers) whose first sending the capture never saw intact
        self.timed_out = False  # the next resend is the local ACK timer's
        self.missed = 0  # capture gaps since the last captured request

    def _take_faults(self):
        """The faults aimed at this QP, by what they strike: request packets (by number from 1), messages
        (RNR), ranges of packets (ECN marks) or every datagram (a wrong Q_Key)."""
        faults = [f for f in self.s.faults if f.args.get("qp") == self.qp.name]
        self.bad_qkey = any(f.kind == "bad_qkey" for f in faults)  # the receiving QP holds another Q_Key
        self.drops = {
            int(f.args["packet"]): f for f in faults if f.kind in ("drop", "bad_icrc", "bad_vcrc", "capture_gap")
        }
        # message -> [RNR timer code, RNR NAKs still to send for its first SEND]
        self.rnr = {
            int(f.args.get("message", 1)) - 1: [int(f.args.get("timer", 1)), int(f.args.get("times", 1))]
            for f in faults
            if f.kind == "rnr"
        }
        self.rnr_naks = 0  # RNR NAKs heard in a row, without progress (against qp.rnr_retry)
        self.ecn = [
            (int(f.args.get("first", 1)), int(f.args.get("last", f.args.get("first", 1))))
            for f in faults
            if f.kind == "ecn"
        ]

    def events(self) -> Iterator[Event]:
        """The flow's frames in time order: connection set-up, the traffic, teardown."""
        msgs = _messages(self.s, self.qp)
        first = next(msgs, None)
        if first is None:
            return
        self.last_send = first[0]
        connected = self._connect(first[0])
        self._push_side()
        if connected:
            yield from self._requester(_segments(self.qp, itertools.chain([first], msgs)), first[0])
            self._push_side()
            if self.qp.cm and self.qp.type != "UD" and not self.gave_up:
                self._disconnect()
        yield from self._flush(float("inf"))

    def _push(self, t: float, frame: bytes):
        """Queue `frame` for time `t`."""
        heapq.heappush(self.heap, (t, next(self.seq), frame))

    def _flush(self, upto: float) -> Iterator[Event]:
        """Yield the queued frames due by `upto`."""
        while self.heap and self.heap[0][0] <= upto:
            yield heapq.heappop(self.heap)

    def _push_side(self):
        """Queue the management frames (traps) produced since the last call."""
        for ts, fr in self.side:
            self._push(ts, fr)
        self.side.clear()

    # --- connection set-up and teardown ---

    def _connect(self, t: float) -> bool:
        """SA PathRecord and CM REQ/REP/RTU before the first message at `t` (IBA §12.6; CM MADs carry the
        path's P_Key).  False when the responder's port drops or refuses the REQ."""
        ctx, qp, A, B, pkey = self.ctx, self.qp, self.A, self.B, self.pkey
        if not qp.cm or qp.type == "UD":
            return True
        tc = t - 40e-6
        if self.native and qp.path_query and ctx.sm is not None:
            tid = next(ctx.tid)
            q = mads.sa(
                mads.GET, mads.ATTR_PATH_RECORD, tid, mads.path_record(A.gid, B.gid, 0, 0, pkey), mads.PR_MASK_QUERY
            )
            self._push(tc - 10e-6, ctx.mad(A, ctx.sm, q, 1))
            r = mads.sa(
                mads.GET_RESP,
                mads.ATTR_PATH_RECORD,
                tid,
                mads.path_record(A.gid, B.gid, A.lid, B.lid, pkey, mtu=PMTUS[qp.pmtu]),
            )
            self._push(tc - 8e-6, ctx.mad(ctx.sm, A, r, 1))
        comm_a, comm_b = next(ctx.comm), next(ctx.comm)
        tid = next(ctx.tid)
        req = mads.cm_req(
            comm_a,
            0x0000000001000000 | qp.dst_qpn,
            A.guid,
            qp.src_qpn,
            qp.psn,
            pkey,
            A.lid,
            B.lid,
            A.gid,
            B.gid,
            mtu=PMTUS[qp.pmtu],
            transport={"RC": 0, "UC": 1, "XRC": 3}[qp.type],
        )
        self._push(tc, ctx.mad(A, B, mads.with_tid(req, tid), 1, pkey=pkey))
        if ctx.vlan_drops(B, A):
            return False
        if not ctx.rx_accepts(B, pkey):
            ctx.trap_257(self.side, tc + self.lat, A, B, pkey, 1, 1)
            return False
        rep = mads.cm_rep(comm_b, comm_a, B.guid, qp.dst_qpn, qp.psn)
        self._push(tc + 2 * self.lat + 5e-6, ctx.mad(B, A, mads.with_tid(rep, tid), 1, pkey=pkey))
        rtu = mads.cm_rtu(comm_a, comm_b)
        self._push(tc + 4 * self.lat + 6e-6, ctx.mad(A, B, mads.with_tid(rtu, tid), 1, pkey=pkey))
        return True

    def _disconnect(self):
        """DREQ/DREP after the traffic (IBA §12.6.10-11)."""
        ctx, A, B, pkey = self.ctx, self.A, self.B, self.pkey
        td = max([self.last_send] + [h[0] for h in self.heap]) + 20e-6
        comm_a, comm_b = next(ctx.comm), next(ctx.comm)
        tid = next(ctx.tid)
        dreq, drep = mads.cm_dreq(comm_a, comm_b, self.qp.dst_qpn), mads.cm_drep(comm_b, comm_a)
        self._push(td, ctx.mad(A, B, mads.with_tid(dreq, tid), 1, pkey=pkey))
        self._push(td + 2 * self.lat + 3e-6, ctx.mad(B, A, mads.with_tid(drep, tid), 1, pkey=pkey))

    # --- the requester ---

    def _requester(self, segs: Iterator[Seg], t: float) -> Iterator[Event]:
        """New segments and go-back-N resends in order, from `t` on: paced by the link rate, held by RNR NAKs,
        rewound by the answers heard, retried when the local ACK timer runs out."""
        new = next(segs, None)
        while not self.gave_up:
            if self.ptr < len(self.unacked):
                d, is_new, ready = self.unacked[self.ptr], False, max(t, self.hold)
            elif new is not None:
                d, is_new, ready = new, True, max(t, self.hold, new.ready)
            elif not self.reliable or not self.unacked:
                return
            else:  # all sent, some unacknowledged: the delayed ACK, an answer or the timer
                if self.pending:
                    self._ack(self.last_arrival + self.s.ack_delay, self.pend_psn)
                if self.sender_ev:
                    t = max(t, self.sender_ev[0][0])
                    self._hear(t)
                    continue
                t = self._timeout_retry(t)
                if t is None:
                    return
                continue
            if self.reliable and self.sender_ev and self.sender_ev[0][0] <= ready:
                self._hear(ready)
                continue
            if self.reliable and self.unacked and self.ptr > 0 and ready > self.sent_at[0] + self.timeout:
                t = self._timeout_retry(t)
                if t is None:
                    return
                continue
            t = yield from self._transmit(d, is_new, ready)
            if is_new:
                new = next(segs, None)

    def _timeout_retry(self, t: float) -> Optional[float]:
        """The local ACK timer ran out: a retry episode resends from the oldest unacknowledged segment, at the
        time returned; after retry_cnt of them the requester gives up (None)."""
        if self.retries >= self.qp.retry_cnt:
            self.gave_up = True
            return None
        self.retries += 1
        self.ptr = 0
        self.timed_out = True
        return max(t, self.sent_at[0] + self.timeout)

    def _hear(self, upto: float):
        """The answers that reach the requester by `upto`: an ACK retires the segments it covers, a NAK or RNR
        NAK goes back to its PSN (go-back-N), an RNR NAK also holds sending for the RNR timer."""
        unacked, sent_at = self.unacked, self.sent_at
        while self.sender_ev and self.sender_ev[0][0] <= upto:
            te, _, kind, psn, delay = heapq.heappop(self.sender_ev)
            if kind == "ack":
                k = 0
                while k < len(unacked) and psn_ge(psn, unacked[k].psn + unacked[k].span - 1 & M24):
                    k += 1
                if k:
                    del unacked[:k], sent_at[:k]
                    self.ptr = max(0, self.ptr - k)
                    self.retries = self.rnr_naks = 0
            else:
                for k, d in enumerate(unacked):
                    if d.psn == psn:
                        del unacked[:k], sent_at[:k]
                        self.ptr = 0
                        break
                if kind == "rnr":
                    self.hold = max(self.hold, te + delay)
                    self.rnr_naks += 1
                    if self.qp.rnr_retry < 7 and self.rnr_naks > self.qp.rnr_retry:
                        self.gave_up = True  # IBV_WC_RNR_RETRY_EXC_ERR: the work request fails

    def _transmit(self, d: Seg, is_new: bool, ready: float) -> Iterator[Event]:
        """Send `d` at `ready`, struck by its fault if this is its first sending: first the frames due before
        it, then the request itself unless the capture misses it; the responder gets it unless it was lost.
        Returns the time the requester may send again."""
        f = self.drops.get(d.no) if is_new else None
        marked = is_new and any(a <= d.no <= b for a, b in self.ecn)
        corrupt = f.kind if f is not None and f.kind in ("bad_icrc", "bad_vcrc") else ""
        frame = self._request(d, marked, corrupt)
        if self.pending and ready + self.lat > self.last_arrival + self.s.ack_delay:
            self._ack(self.last_arrival + self.s.ack_delay, self.pend_psn)  # delayed ACK: no request came in time
        self._push_side()  # traps from the last arrival, before anything later is yielded
        yield from self._flush(ready)
        # a capture gap: delivered to the responder, missing from the capture (the mirror missed it)
        seen = f is None or f.kind not in ("drop", "capture_gap") or bool(f.args.get("seen", False))
        if f is not None and f.kind != "capture_gap" and (not seen or corrupt):
            self.lost.add(d.no)
        self.missed += f is not None and f.kind == "capture_gap"
        if seen:
            yield (ready, self._captured(d, is_new, f), frame)
        self.timed_out = self.timed_out and is_new
        t = self._paced(ready, frame)
        self.last_send = ready
        if is_new:
            if self.reliable:
                self.unacked.append(d)
                self.sent_at.append(ready)
                self.ptr += 1
        else:
            self.sent_at[self.ptr] = ready
            self.ptr += 1
        self._respond(d, ready + self.lat, f is not None and f.kind != "capture_gap", marked)
        return t

    def _captured(self, d: Seg, is_new: bool, f) -> int:
        """Number a request the capture holds and note in ctx.truth what the requester knows of it."""
        n = next(self.seq)
        truth = self.ctx.truth
        if self.reliable and (f is None or f.kind == "capture_gap") and not psn_ge(d.psn, self.epsn):
            truth["duplicate"].add(n)  # the responder accepted this PSN already
        if not is_new:
            truth["resent"].add(n)
            if d.no in self.lost:
                truth["lost"].add(n)
                self.lost.discard(d.no)
            if self.timed_out:
                truth["timeout"].add(n)
        if self.missed:
            truth["not_captured"][n] = self.missed
        self.missed = 0
        return n

    def _paced(self, ready: float, frame: bytes) -> float:
        """When the requester may send after `frame` left at `ready`: each CNP heard by then cuts its rate by
        qp.rate_cut (DCQCN); qp.recover_us without one brings it back to line rate."""
        while self.cnp_heard and self.cnp_heard[0] <= ready:
            self.cur_rate, self.cut_at = self.cur_rate * (1 - self.qp.rate_cut), self.cnp_heard.pop(0)
        if ready - self.cut_at > self.qp.recover_us * 1e-6:
            self.cur_rate = self.rate
        return ready + len(frame) * 8 / self.cur_rate

    def _request(self, d: Seg, marked: bool, corrupt: str) -> bytes:
        """The request frame of segment `d`: ECN-CE (RoCE) or FECN (IB) if `marked`, a bad ICRC or VCRC if
        `corrupt` says so."""
        op, qp, native = d.opcode, self.qp, self.native
        low = op & 0x1F
        va = 0x7F0000000000 + d.msg * 0x10000
        kw = {}
        payload = b""
        if d.kind in ("cmp_swap", "fetch_add"):
            kw = dict(va=va, rkey=0x1234, swap=d.msg + 1, compare=d.msg)
        elif low == 0x0C or low in (0x06, 0x0A, 0x0B):
            kw = dict(va=va, rkey=0x1234, dmalen=d.size)
        if d.kind.endswith("_imm"):
            kw["imm"] = 0xC0DE0000 | (d.msg & 0xFFFF)
        elif d.kind == "send_inv":
            kw["imm"] = 0x4321
        if qp.type == "UD":
            kw.update(qkey=qp.qkey, src_qp=qp.src_qpn)
        elif qp.type == "XRC":
            kw["xrcsrq"] = qp.xrc_srq
        if d.length:
            payload = self.ctx.payload(d.msg, d.off, d.length)
        tp = transport(
            op,
            self.pkey,
            qp.dst_qpn,
            d.psn,
            ext_headers(op, **kw),
            payload,
            ackreq=self.reliable and d.last,
            se=d.last and d.kind.startswith("send"),
            fecn=marked and native,
        )
        return self.link.frame(
            self.A,
            self.B,
            tp,
            ecn=ECN_CE if marked and not native else None,
            udp_sport=self.sport_a,
            tclass=self.tclass,
            bad_icrc=corrupt == "bad_icrc" or (corrupt == "bad_vcrc" and not native),
            bad_vcrc=corrupt == "bad_vcrc" and native,
        )

    # --- the responder ---

    def _respond(self, d: Seg, ta: float, dropped: bool, marked: bool):
        """The responder's reaction to a request packet arriving at `ta`."""
        self.last_arrival = ta
        if dropped or not self._admits(ta):
            return
        if marked and self.qp.cnp and ta - self.last_cnp >= self.s.cnp_interval:
            self._cnp(ta)
        if not self.reliable:
            return
        if d.psn != self.epsn:
            self._out_of_sequence(d, ta)
        elif d.msg in self.rnr and d.off == 0 and d.kind.startswith("send"):
            self._rnr_nak(d, ta)
        else:
            self._accept(d, ta)

    def _admits(self, ta: float) -> bool:
        """The responder's port takes the request in its VLAN and P_Key (else trap 257), its QP in the Q_Key
        (else trap 258)."""
        ctx, qp, A, B = self.ctx, self.qp, self.A, self.B
        if ctx.vlan_drops(B, A):
            return False
        if not ctx.rx_accepts(B, self.pkey):
            ctx.trap_257(self.side, ta, A, B, self.pkey, qp.src_qpn, qp.dst_qpn)
            return False
        if self.bad_qkey:
            ctx.bad_key_trap(self.side, ta, 258, A, B, qp.qkey, qp.src_qpn, qp.dst_qpn)
            return False
        return True

    def _cnp(self, ta: float):
        """A CNP answering the ECN/FECN mark of the request arriving at `ta` (at most one per cnp_interval)."""
        self.last_cnp = ta
        self.cnp_heard.append(ta + 0.5e-6 + self.lat)  # when the requester receives it and reacts (DCQCN)
        tp = transport(0x81, self.pkey, self.qp.src_qpn, 0, CNP_PAD, becn=True)
        self._push(
            ta + 0.5e-6,
            self.link.frame(
                self.B, self.A, tp, tclass=self.s.cnp_dscp << 2, ecn=0, udp_sport=self.sport_b, vlan=self.A.vlan
            ),
        )

    def _out_of_sequence(self, d: Seg, ta: float):
        """A request ahead of the expected PSN: one PSN sequence error NAK until the gap closes.  A duplicate:
        acknowledge what has been received (reads are answered again)."""
        if psn_ge(d.psn, self.epsn):
            if not self.nak_sent:
                self.nak_sent = True
                self._answer(ta, 0x11, self.epsn, aeth=(SYN_NAK_PSN << 24) | self.msn)
                self._notify(ta + self.lat, "nak", self.epsn)
        elif d.kind == "read":
            self._read_response(d, ta)
        else:
            self._ack(ta, (self.epsn - 1) & M24)

    def _rnr_nak(self, d: Seg, ta: float):
        """No receive WQE for the SEND starting at `d`: an RNR NAK with the fault's timer."""
        timer, times = self.rnr[d.msg]
        if times > 1:
            self.rnr[d.msg][1] -= 1
        else:
            del self.rnr[d.msg]
        self._answer(ta, 0x11, d.psn, aeth=((SYN_RNR | timer) << 24) | self.msn)
        self._notify(ta + self.lat, "rnr", d.psn, RNR_DELAY[timer])
        self.nak_sent = False

    def _accept(self, d: Seg, ta: float):
        """The expected request: advance the PSN; at a message's end count it and answer it (READ response,
        atomic ACK, or an ACK coalesced over qp.ack_every messages)."""
        self.nak_sent = False
        self.epsn = (self.epsn + d.span) & M24
        if not d.last:
            return
        if d.msg not in self.done_msgs:
            self.done_msgs.add(d.msg)
            self.msn = (self.msn + 1) & M24
        if d.kind == "read":
            self._read_response(d, ta)
        elif d.kind in ("cmp_swap", "fetch_add"):
            self._answer(ta + 1e-6, 0x12, d.psn, aeth=(self.ccode << 24) | self.msn, orig=d.msg * 3)
            self._notify(ta + 1e-6 + self.lat, "ack", d.psn)
        else:
            self.pending += 1
            self.pend_psn = d.psn
            if self.pending >= self.qp.ack_every:
                self._ack(ta, d.psn)

    def _read_response(self, d: Seg, ta: float):
        """The READ response packets of the READ request `d`, paced by the link rate."""
        n, pmtu = d.span, self.qp.pmtu
        tr = ta + 0.5e-6
        for i in range(n):
            pos = "only" if n == 1 else "first" if i == 0 else "last" if i == n - 1 else "middle"
            op = {"only": 0x10, "first": 0x0D, "middle": 0x0E, "last": 0x0F}[pos]
            ln = min(pmtu, d.size - i * pmtu)
            pl = self.ctx.payload(d.msg + 7, i * pmtu, ln) if ln > 0 else b""
            self._answer(
                tr, op, (d.psn + i) & M24, aeth=(self.ccode << 24) | self.msn if pos != "middle" else 0, payload=pl
            )
            tr += (len(pl) + 70) * 8 / self.rate
        self._notify(tr + self.lat, "ack", (d.psn + n - 1) & M24)

    def _ack(self, t_at: float, psn: int):
        """An ACK of everything up to `psn`."""
        self._answer(t_at, 0x11, psn, aeth=(self.ccode << 24) | self.msn)
        self._notify(t_at + self.lat, "ack", psn)
        self.pending = 0

    def _answer(self, t_at: float, opcode: int, psn: int, aeth=None, payload=b"", **kw):
        """A responder packet (ACK, NAK, READ response, atomic ACK) sent at `t_at`."""
        ext = ext_headers(self.base | opcode, aeth=aeth or 0, **kw)
        tp = transport(self.base | opcode, self.pkey, self.qp.src_qpn, psn, ext, payload)
        self._push(
            t_at, self.link.frame(self.B, self.A, tp, udp_sport=self.sport_b, vlan=self.A.vlan, tclass=self.tclass)
        )

    def _notify(self, t: float, kind: str, psn: int, delay: float = 0.0):
        """An ACK, NAK or RNR NAK (with its RNR delay) reaches the requester at `t`."""
        heapq.heappush(self.sender_ev, (t, next(self.seq), kind, psn, delay))
