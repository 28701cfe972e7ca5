"""tshark 4.0's TCP sequence analysis of one segment (packet-tcp.c tcp_analyze_sequence_number), ported step
for step: which segment an ACK acknowledges, bytes in flight, bytes since the last PSH, and the analysis
flags, which decide whether tshark shows a SEQ/ACK analysis for the frame."""

from typing import Optional

M = 1 << 32
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
SFR = SYN | FIN | RST
# packet-tcp.c TCP_A_* (those read back: keep-alive, zero window probe; the others only mark the frame)
RETRANSMISSION, LOST, ACK_LOST, KEEP_ALIVE, DUP_ACK, ZERO_WINDOW, WINDOW_FULL, WINDOW_UPDATE = (
    1 << b for b in range(8)
)
ZWP, ZWP_ACK, KEEP_ALIVE_ACK, OUT_OF_ORDER, FAST_RETRANSMISSION, REUSED, SPURIOUS = (1 << b for b in range(8, 15))
FAST_RT_WINDOW = 20_000_000  # ns: a retransmission this soon after the second duplicate ACK is fast
OOO_DEFAULT = 3_000_000  # ns: the out-of-order threshold before the handshake's RTT is known
MAX_UNACKED = 10000


def gt(a: int, b: int) -> bool:
    return 0 < (a - b) % M < M // 2


def le(a: int, b: int) -> bool:
    return not gt(a, b)


class Acked:
    """What tshark's analysis found of one frame (struct tcp_acked)."""

    def __init__(self):
        self.frame_acked = self.rtt = self.bytes_in_flight = self.push_bytes_sent = self.flags = 0
        self.dupack_num = self.dupack_frame = self.rto = self.rto_frame = 0


def analyze(st, fwd, rev, frame: int, ns: int, h, seglen: int, reused: bool) -> Optional[Acked]:
    """The frame's analysis, or None when tshark keeps none for it."""
    box = []

    def ta():
        if not box:
            box.append(Acked())
        return box[0]

    seq, ack, flags, window = h.seq, h.ack, h.flags, h.win
    if reused:
        ta().flags |= REUSED
    if fwd.base_seq is None:
        fwd.base_seq = seq if flags & SYN else (seq - 1) % M
    if rev.base_seq is None and flags & ACK:
        rev.base_seq = (ack - 1) % M
    if flags & ACK:
        rev.valid_bif = True
    _flags_fwd(fwd, rev, seq, ack, seglen, flags, window, ta)
    if ack != fwd.lastack:
        fwd.lastnondupack, fwd.dupacknum = frame, 0
    if rev.maxseqtobeacked and gt(ack, rev.maxseqtobeacked) and flags & ACK:
        t = ta()
        if rev.maxseqtobeacked > rev.nextseq:
            rev.maxseqtobeacked = rev.nextseq
            t.flags |= ACK_LOST
        else:
            if rev.dupacknum == 0:
                t.flags |= ACK_LOST
            rev.dupacknum = -1
    if seglen > 0 or flags & (SYN | FIN):
        _retransmission(st, fwd, rev, ns, seq, seglen, flags, ta, box)
    nextseq = (seq + seglen) % M
    if (seglen or flags & (SYN | FIN)) and len(fwd.segments) < MAX_UNACKED:
        nextseq = (nextseq + (1 if flags & (SYN | FIN) else 0)) % M
        fwd.segments.insert(0, [frame, seq, nextseq, ns])
    probe = bool(box) and box[0].flags & ZWP
    if (gt(nextseq, fwd.nextseq) or not fwd.nextseq) and not probe:
        fwd.nextseq, fwd.nextseqtime, fwd.nextseqframe = nextseq, ns, frame
    if (seq == fwd.maxseqtobeacked or not fwd.maxseqtobeacked) and not probe:
        fwd.maxseqtobeacked = fwd.nextseq
    fwd.window, fwd.lastack, fwd.lastacktime = window, ack, ns
    fwd.lastsegmentflags = box[0].flags if box else 0
    kept = []
    for ual in rev.segments:  # drop what this acknowledges (an exact match: the segment it ACKs)
        if ack == ual[2]:
            t = ta()
            t.frame_acked, t.rtt = ual[0], ns - ual[3]
        elif gt(ack, ual[1]) and le(ack, ual[2]):
            ual[1] = ack
            kept.append(ual)
        elif gt(ual[2], ack):
            kept.append(ual)
    rev.segments = kept
    _in_flight(fwd, rev, seglen, flags, ta)
    return box[0] if box else None


def _flags_fwd(fwd, rev, seq, ack, seglen, flags, window, ta) -> None:
    """Zero window (probe), lost segment, keep-alive, window update and full, their ACKs, duplicate ACKs."""
    if seglen == 1 and seq == fwd.nextseq and rev.window == 0:
        ta().flags |= ZWP
        return
    if window == 0 and not flags & SFR:
        ta().flags |= ZERO_WINDOW
    if fwd.nextseq and gt(seq, fwd.nextseq) and not flags & RST:
        ta().flags |= LOST
        fwd.valid_bif = False
    same = seq == fwd.nextseq and ack == fwd.lastack and not flags & SFR
    if seglen in (0, 1) and seq == (fwd.nextseq - 1) % M and not flags & SFR:
        ta().flags |= KEEP_ALIVE
    if seglen == 0 and window and window != fwd.window and same:
        ta().flags |= WINDOW_UPDATE
    shift = 0 if rev.is_first_ack or rev.win_scale == -2 else rev.win_scale
    edge = (rev.lastack + ((rev.window << shift) if shift >= 0 else rev.window)) % M
    if seglen > 0 and rev.win_scale != -1 and (seq + seglen) % M == edge and not flags & SFR:
        ta().flags |= WINDOW_FULL
    if seglen == 0 and window and window == fwd.window and same and rev.lastsegmentflags & KEEP_ALIVE:
        ta().flags |= KEEP_ALIVE_ACK
        return
    if seglen == 0 and window == 0 and window == fwd.window and same and rev.lastsegmentflags & ZWP:
        ta().flags |= ZWP_ACK
        return
    if seglen == 0 and window and window == fwd.window and same:
        fwd.dupacknum = 1 if fwd.dupacknum == -1 else fwd.dupacknum + 1
        t = ta()
        t.flags |= DUP_ACK
        t.dupack_num, t.dupack_frame = fwd.dupacknum, fwd.lastnondupack


def _retransmission(st, fwd, rev, ns, seq, seglen, flags, ta, box) -> None:
    """Spurious, fast, out-of-order or plain retransmissions of data (or of a SYN or FIN)."""
    behind = bool(fwd.nextseq) and gt(fwd.nextseq, seq)
    if box and box[0].flags & KEEP_ALIVE:
        return
    if seglen > 1 and (fwd.nextseq - 1) % M == seq:
        behind = False
    if seglen > 0 and rev.lastack and le((seq + seglen) % M, rev.lastack):
        ta().flags |= SPURIOUS
        return
    if behind and rev.dupacknum >= 2 and rev.lastack == seq and ns - rev.lastacktime < FAST_RT_WINDOW:
        ta().flags |= FAST_RETRANSMISSION
        return
    threshold = st.first_rtt or OOO_DEFAULT
    ends = (seq + seglen + (1 if flags & (SYN | FIN) else 0)) % M
    if behind and ns - fwd.nextseqtime < threshold and fwd.nextseq != ends:
        ta().flags |= OUT_OF_ORDER
        return
    if behind:  # its RTO: from the oldest segment not yet acknowledged (else the latest new one)
        t = ta()
        t.flags |= RETRANSMISSION
        t.rto, t.rto_frame = ns - fwd.nextseqtime, fwd.nextseqframe
        if fwd.segments:
            t.rto, t.rto_frame = ns - fwd.segments[-1][3], fwd.segments[-1][0]


def _in_flight(fwd, rev, seglen, flags, ta) -> None:
    """Bytes in flight after this segment and bytes sent since the last PSH (data segments only)."""
    if not (seglen and fwd.segments and fwd.valid_bif):
        return
    base = fwd.base_seq
    first = min((u[1] - base) % M for u in fwd.segments)
    last = max((u[2] - base) % M for u in fwd.segments)
    flight = (last - first) % M
    blocks = rev.sack
    flight -= sum((blocks[i + 1][1] - blocks[i + 1][0]) % M for i in range(len(blocks)) if i + 1 < len(blocks))
    if 0 < flight < 2_000_000_000:
        ta().bytes_in_flight = flight - (1 if flags & (SYN | FIN) else 0)
    push = bool(flags & PSH)
    if push and not fwd.push_set_last:
        fwd.push_bytes_sent += seglen
    elif push or fwd.push_set_last:
        fwd.push_bytes_sent = seglen
    else:
        fwd.push_bytes_sent += seglen
    fwd.push_set_last = push
    ta().push_bytes_sent = fwd.push_bytes_sent
