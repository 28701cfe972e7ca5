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
import math
import itertools
import random
from typing import Iterator, List, Tuple

from dissectors.opcodes import CREDITS, RNR_TIMER_MS

from . import mads
from .headers import (CNP_PAD, SYN_NAK_PSN, SYN_RNR, ext_headers, transport)
from .links import ECN_CE, Link
from .scenario import PMTUS, QP, Scenario

Event = Tuple[float, int, bytes]
M24 = 0xFFFFFF
IPOIB_QKEY = 0x00000B1B
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
        return self.pool[o:o + n]

    def ud(self, src, dst, opcode, pkey, dqp, sqp, qkey, data, *, dlid=None, dgid=None, vl=0, slid=None,
           udp_sport=0xC001, ackreq=False):
        key = (src.name, sqp)
        psn = self.ud_psn.get(key, (src.lid * 7919 + sqp * 104729) & M24)
        self.ud_psn[key] = (psn + 1) & M24
        tp = transport(opcode, pkey, dqp, psn, ext_headers(opcode, qkey=qkey, src_qp=sqp), data, ackreq=ackreq)
        return self.link.frame(src, dst, tp, vl=vl, dlid=dlid, dgid=dgid, slid=slid, udp_sport=udp_sport)

    def mad(self, src, dst, mad: bytes, qp: int, *, pkey=0xFFFF, directed=False) -> bytes:
        """A MAD as a UD SEND Only to QP0 (SMI, VL15, Q_Key 0) or QP1 (GSI, Q_Key 0x80010000)."""
        perm = mads.PERMISSIVE_LID if directed else None
        return self.ud(src, dst, 0x64, pkey, qp, qp, 0 if qp == 0 else mads.GSI_QKEY, mad,
                       vl=15 if qp == 0 else 0, dlid=perm, slid=perm)

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
        self.send_trap(out, t, dst, mads.notice_bad_key(num, dst.lid, src.lid, dst.lid, key, 0, sqp, dqp,
                                                        src.gid, dst.gid))

    def send_trap(self, out: list, t: float, issuer, notice: bytes):
        """The issuer's SubnTrap(Notice) to the SM and the SM's TrapRepress (IBA §13.4.9)."""
        tid = next(self.tid)
        out.append((t + 2e-6, self.mad(issuer, self.sm, mads.trap(tid, notice), 0)))
        out.append((t + 4e-6, self.mad(self.sm, issuer, mads.trap_repress(tid, notice), 0)))


_SEND = {("first", ""): 0x00, ("middle", ""): 0x01, ("last", ""): 0x02, ("last", "imm"): 0x03,
         ("only", ""): 0x04, ("only", "imm"): 0x05, ("last", "inv"): 0x16, ("only", "inv"): 0x17}
_WRITE = {("first", ""): 0x06, ("middle", ""): 0x07, ("last", ""): 0x08, ("last", "imm"): 0x09,
          ("only", ""): 0x0A, ("only", "imm"): 0x0B}
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
            yield Seg(psn, base | table[(pos, suffix if pos in ("last", "only") else "")], m, i * mtu,
                      min(mtu, size - i * mtu), i == n - 1, kind, 1, size, no, ready)
            psn = (psn + 1) & M24


def _messages(scen: Scenario, qp: QP):
    def stream(o):
        return ((o.at + k * o.interval, o.kind, o.size) for k in range(o.count))
    ops = sorted((o for o in scen.ops if o.qp == qp.name), key=lambda o: o.at)
    return heapq.merge(*map(stream, ops), key=lambda m: m[0])


def qp_flow(ctx: Context, qp: QP) -> Iterator[Event]:
    """All packets of one queue pair (both directions), in time order."""
    s, link = ctx.s, ctx.link
    A, B = s.ports[qp.src], s.ports[qp.dst]
    lat, rate = s.latency, s.rate_bps
    native = link.native
    heap: list = []
    seq = ctx.seq

    def push(t, frame):
        heapq.heappush(heap, (t, next(seq), frame))

    def flush(upto):
        while heap and heap[0][0] <= upto:
            yield heapq.heappop(heap)

    faults = [f for f in s.faults if f.args.get("qp") == qp.name]
    bad_qkey = any(f.kind == "bad_qkey" for f in faults)    # the receiving QP holds another Q_Key
    drops = {int(f.args["packet"]): f for f in faults if f.kind in ("drop", "bad_icrc", "bad_vcrc", "capture_gap")}
    rnr = {int(f.args.get("message", 1)) - 1: int(f.args.get("timer", 1)) for f in faults if f.kind == "rnr"}
    ecn = [(int(f.args.get("first", 1)), int(f.args.get("last", f.args.get("first", 1)))) for f in faults
           if f.kind == "ecn"]
    sport_a, sport_b = 0xC000 | (qp.src_qpn & 0x3FFF), 0xC000 | (qp.dst_qpn & 0x3FFF)
    sport_a = qp.udp_sport or sport_a
    base = _BASE[qp.type]
    reliable = qp.type in ("RC", "XRC")
    pkey = qp.pkey
    ccode = credit_code(qp.credits)
    side: list = []           # management frames (CM, traps) produced along the way

    msgs = _messages(s, qp)
    first = next(msgs, None)
    if first is None:
        return
    msgs = itertools.chain([first], msgs)
    t = first[0]

    # --- connection setup: SA PathRecord, CM REQ/REP/RTU (IBA §12.6; CM MADs carry the path's P_Key) ---
    connected = True
    if qp.cm and qp.type != "UD":
        tc = t - 40e-6
        if native and qp.path_query and ctx.sm is not None:
            tid = next(ctx.tid)
            q = mads.sa(mads.GET, mads.ATTR_PATH_RECORD, tid, mads.path_record(A.gid, B.gid, 0, 0, pkey),
                        mads.PR_MASK_QUERY)
            push(tc - 10e-6, ctx.mad(A, ctx.sm, q, 1))
            r = mads.sa(mads.GET_RESP, mads.ATTR_PATH_RECORD, tid,
                        mads.path_record(A.gid, B.gid, A.lid, B.lid, pkey, mtu=PMTUS[qp.pmtu]))
            push(tc - 8e-6, ctx.mad(ctx.sm, A, r, 1))
        comm_a, comm_b = next(ctx.comm), next(ctx.comm)
        tid = next(ctx.tid)
        req = mads.cm_req(comm_a, 0x0000000001000000 | qp.dst_qpn, A.guid, qp.src_qpn, qp.psn, pkey, A.lid, B.lid,
                          A.gid, B.gid, mtu=PMTUS[qp.pmtu], transport={"RC": 0, "UC": 1, "XRC": 3}[qp.type])
        push(tc, ctx.mad(A, B, mads.with_tid(req, tid), 1, pkey=pkey))
        if ctx.vlan_drops(B, A):
            connected = False
        elif not ctx.rx_accepts(B, pkey):
            ctx.trap_257(side, tc + lat, A, B, pkey, 1, 1)
            connected = False
        else:
            push(tc + 2 * lat + 5e-6, ctx.mad(B, A, mads.with_tid(mads.cm_rep(comm_b, comm_a, B.guid, qp.dst_qpn, qp.psn), tid), 1, pkey=pkey))
            push(tc + 4 * lat + 6e-6, ctx.mad(A, B, mads.with_tid(mads.cm_rtu(comm_a, comm_b), tid), 1, pkey=pkey))
    for ts, fr in side:
        push(ts, fr)
    side.clear()
    if not connected:
        yield from flush(float("inf"))
        return

    def req_frame(d: Seg, marked: bool, corrupt: str) -> bytes:
        op = d.opcode
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
            payload = ctx.payload(d.msg, d.off, d.length)
        tp = transport(op, pkey, qp.dst_qpn, d.psn, ext_headers(op, **kw), payload,
                       ackreq=reliable and d.last, se=d.last and d.kind.startswith("send"),
                       fecn=marked and native)
        return link.frame(A, B, tp, ecn=ECN_CE if marked and not native else None, udp_sport=sport_a, tclass=tclass,
                          bad_icrc=corrupt == "bad_icrc" or (corrupt == "bad_vcrc" and not native),
                          bad_vcrc=corrupt == "bad_vcrc" and native)

    def resp(t_at, opcode, psn, aeth=None, **kw):
        payload = kw.pop("payload", b"")
        ext = ext_headers(base | opcode, aeth=aeth or 0, **kw)
        push(t_at, link.frame(B, A, transport(base | opcode, pkey, qp.src_qpn, psn,
                                              ext, payload), udp_sport=sport_b, vlan=A.vlan, tclass=tclass))

    # responder state
    epsn, msn = qp.psn, 0
    nak_sent = False
    pending = 0              # messages completed but not yet acknowledged
    pend_psn = None
    last_arrival = 0.0
    last_cnp = -1.0
    cnp_heard: list = []     # times the requester receives a CNP
    cur_rate, cut_at = rate, -math.inf
    tclass = s.dscp << 2     # traffic class of data and ACKs (CNPs: s.cnp_dscp)
    sender_ev: list = []     # (time at requester, seq, kind, psn, delay)
    done_msgs = set()

    def ack_now(t_at, psn):
        nonlocal pending
        resp(t_at, 0x11, psn, aeth=(ccode << 24) | msn)
        heapq.heappush(sender_ev, (t_at + lat, next(seq), "ack", psn, 0.0))
        pending = 0

    def respond(d: Seg, ta: float, dropped: bool, marked: bool):
        """The responder's reaction to a request packet arriving at `ta`."""
        nonlocal epsn, msn, nak_sent, pending, pend_psn, last_arrival, last_cnp
        last_arrival = ta
        if dropped or ctx.vlan_drops(B, A):
            return
        if not ctx.rx_accepts(B, pkey):
            ctx.trap_257(side, ta, A, B, pkey, qp.src_qpn, qp.dst_qpn)
            return
        if bad_qkey:
            ctx.bad_key_trap(side, ta, 258, A, B, qp.qkey, qp.src_qpn, qp.dst_qpn)
            return
        if marked and qp.cnp and ta - last_cnp >= s.cnp_interval:
            last_cnp = ta
            cnp_heard.append(ta + 0.5e-6 + lat)        # when the requester receives it and reacts (DCQCN)
            tp = transport(0x81, pkey, qp.src_qpn, 0, CNP_PAD, becn=True)
            push(ta + 0.5e-6, link.frame(B, A, tp, tclass=s.cnp_dscp << 2, ecn=0, udp_sport=sport_b, vlan=A.vlan))
        if not reliable:
            return
        if d.psn != epsn:
            if psn_ge(d.psn, epsn):
                if not nak_sent:
                    nak_sent = True
                    resp(ta, 0x11, epsn, aeth=((SYN_NAK_PSN) << 24) | msn)
                    heapq.heappush(sender_ev, (ta + lat, next(seq), "nak", epsn, 0.0))
            else:  # duplicate: acknowledge what has been received (reads are answered again)
                if d.kind == "read":
                    read_resp(d, ta)
                else:
                    ack_now(ta, (epsn - 1) & M24)
            return
        if d.msg in rnr and d.off == 0 and d.kind.startswith("send"):
            timer = rnr.pop(d.msg)
            resp(ta, 0x11, d.psn, aeth=((SYN_RNR | timer) << 24) | msn)
            heapq.heappush(sender_ev, (ta + lat, next(seq), "rnr", d.psn, RNR_DELAY[timer]))
            nak_sent = False
            return
        nak_sent = False
        epsn = (epsn + d.span) & M24
        if not d.last:
            return
        if d.msg not in done_msgs:
            done_msgs.add(d.msg)
            msn = (msn + 1) & M24
        if d.kind == "read":
            read_resp(d, ta)
        elif d.kind in ("cmp_swap", "fetch_add"):
            resp(ta + 1e-6, 0x12, d.psn, aeth=(ccode << 24) | msn, orig=d.msg * 3)
            heapq.heappush(sender_ev, (ta + 1e-6 + lat, next(seq), "ack", d.psn, 0.0))
        else:
            pending += 1
            pend_psn = d.psn
            if pending >= qp.ack_every:
                ack_now(ta, d.psn)

    def read_resp(d: Seg, ta: float):
        n = d.span
        tr = ta + 0.5e-6
        for i in range(n):
            pos = "only" if n == 1 else "first" if i == 0 else "last" if i == n - 1 else "middle"
            op = {"only": 0x10, "first": 0x0D, "middle": 0x0E, "last": 0x0F}[pos]
            ln = min(qp.pmtu, d.size - i * qp.pmtu)
            pl = ctx.payload(d.msg + 7, i * qp.pmtu, ln) if ln > 0 else b""
            resp(tr, op, (d.psn + i) & M24, aeth=(ccode << 24) | msn if pos != "middle" else 0, payload=pl)
            tr += (len(pl) + 70) * 8 / rate
        heapq.heappush(sender_ev, (tr + lat, next(seq), "ack", (d.psn + n - 1) & M24, 0.0))

    # --- requester loop ---
    segs = _segments(qp, msgs)
    new = next(segs, None)
    unacked: List[Seg] = []
    sent_at: List[float] = []
    ptr = 0
    retries = 0
    last_send = t
    hold = 0.0                # RNR: no sending before this time
    timeout = qp.timeout_us * 1e-6
    gave_up = False
    lost: set = set()         # segments (numbers) whose first sending the capture never saw intact
    timed_out = False         # the next resend is the local ACK timer's
    missed = 0                # capture gaps since the last captured request

    def handle_events(upto):
        nonlocal ptr, hold, retries
        changed = False
        while sender_ev and sender_ev[0][0] <= upto:
            te, _, kind, psn, delay = heapq.heappop(sender_ev)
            if kind == "ack":
                k = 0
                while k < len(unacked) and psn_ge(psn, unacked[k].psn + unacked[k].span - 1 & M24):
                    k += 1
                if k:
                    del unacked[:k], sent_at[:k]
                    ptr = max(0, ptr - k)
                    retries = 0
                    changed = True
            else:  # nak or rnr: go back to psn
                for k, d in enumerate(unacked):
                    if d.psn == psn:
                        del unacked[:k], sent_at[:k]
                        ptr = 0
                        changed = True
                        break
                if kind == "rnr":
                    hold = max(hold, te + delay)
        return changed

    while True:
        if ptr < len(unacked):
            d, is_new = unacked[ptr], False
            ready = max(t, hold)
        elif new is not None:
            d, is_new = new, True
            ready = max(t, hold, d.ready)
        else:
            d = None
        if d is None:
            if not reliable or not unacked:
                break
            if pending:
                ack_now(last_arrival + s.ack_delay, pend_psn)
            if sender_ev:
                t = max(t, sender_ev[0][0])
                handle_events(t)
                continue
            if retries >= qp.retry_cnt:
                gave_up = True
                break
            retries += 1
            t = max(t, sent_at[0] + timeout if sent_at else t)
            ptr = 0
            timed_out = True
            continue
        if reliable and sender_ev and sender_ev[0][0] <= ready:
            handle_events(ready)
            continue
        if reliable and unacked and ptr > 0 and ready > sent_at[0] + timeout:
            if retries >= qp.retry_cnt:
                gave_up = True
                break
            retries += 1
            ptr = 0
            t = max(t, sent_at[0] + timeout)
            timed_out = True
            continue
        f = drops.get(d.no) if is_new else None
        marked = is_new and any(a <= d.no <= b for a, b in ecn)
        corrupt = f.kind if f is not None and f.kind in ("bad_icrc", "bad_vcrc") else ""
        frame = req_frame(d, marked, corrupt)
        if pending and ready + lat > last_arrival + s.ack_delay:
            ack_now(last_arrival + s.ack_delay, pend_psn)   # delayed ACK: no further request came in time
        for ts, fr in side:           # traps from the last arrival, before anything later is yielded
            push(ts, fr)
        side.clear()
        yield from flush(ready)
        # a capture gap: delivered to the responder, missing from the capture (the mirror missed it)
        seen = f is None or f.kind not in ("drop", "capture_gap") or bool(f.args.get("seen", False))
        if f is not None and f.kind != "capture_gap" and (not seen or corrupt):
            lost.add(d.no)
        missed += f is not None and f.kind == "capture_gap"
        if seen:
            n = next(seq)
            truth = ctx.truth
            if reliable and (f is None or f.kind == "capture_gap") and not psn_ge(d.psn, epsn):
                truth["duplicate"].add(n)         # the responder accepted this PSN already
            if not is_new:
                truth["resent"].add(n)
                if d.no in lost:
                    truth["lost"].add(n)
                    lost.discard(d.no)
                if timed_out:
                    truth["timeout"].add(n)
            if missed:
                truth["not_captured"][n] = missed
            missed = 0
            yield (ready, n, frame)
        timed_out = timed_out and is_new
        while cnp_heard and cnp_heard[0] <= ready:   # each CNP heard cuts the rate by qp.rate_cut
            cur_rate, cut_at = cur_rate * (1 - qp.rate_cut), cnp_heard.pop(0)
        if ready - cut_at > qp.recover_us * 1e-6:
            cur_rate = rate                             # recovered: back at line rate
        t = ready + len(frame) * 8 / cur_rate
        last_send = ready
        if is_new:
            new = next(segs, None)
            if reliable:
                unacked.append(d)
                sent_at.append(ready)
                ptr += 1
        else:
            sent_at[ptr] = ready
            ptr += 1
        respond(d, ready + lat, f is not None and f.kind != "capture_gap", marked)
    for ts, fr in side:
        push(ts, fr)
    # --- teardown: DREQ/DREP after the traffic (IBA §12.6.10-11) ---
    if qp.cm and qp.type != "UD" and not gave_up:
        td = max([last_send] + [h[0] for h in heap]) + 20e-6
        comm_a, comm_b = next(ctx.comm), next(ctx.comm)
        tid = next(ctx.tid)
        push(td, ctx.mad(A, B, mads.with_tid(mads.cm_dreq(comm_a, comm_b, qp.dst_qpn), tid), 1, pkey=pkey))
        push(td + 2 * lat + 3e-6, ctx.mad(B, A, mads.with_tid(mads.cm_drep(comm_b, comm_a), tid), 1, pkey=pkey))
    yield from flush(float("inf"))

