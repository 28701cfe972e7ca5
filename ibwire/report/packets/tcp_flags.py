"""TCP's analysis flags as tshark 4.0 shows them (packet-tcp.c tcp_print_sequence_number_analysis): each flag an
expert item under `[TCP Analysis Flags]` in tshark's order (ports reused, retransmissions, lost segments,
window, keep-alive, duplicate ACK, zero window), a retransmission's RTO, a duplicate ACK's number and the frame
it repeats."""

from ibwire.report.packets.ek_kinds import empty
from ibwire.report.packets.tcp_options import expert, line
from ibwire.report.packets.tcp_seq import (
    ACK_LOST,
    DUP_ACK,
    FAST_RETRANSMISSION,
    KEEP_ALIVE,
    KEEP_ALIVE_ACK,
    LOST,
    OUT_OF_ORDER,
    RETRANSMISSION,
    REUSED,
    SPURIOUS,
    WINDOW_FULL,
    WINDOW_UPDATE,
    ZERO_WINDOW,
    ZWP,
    ZWP_ACK,
    Acked,
)

RETRANSMITTED = ("retransmission", "This frame is a (suspected) retransmission", "Note")
EXPERTS = (  # flag: the expert items tshark adds for it (key after tcp.analysis., message, severity)
    (
        REUSED,
        [
            (
                "reused_ports",
                "A new tcp session is started with the same ports as an earlier session in this trace",
                "Note",
            )
        ],
    ),
    (RETRANSMISSION, [RETRANSMITTED]),
    (
        FAST_RETRANSMISSION,
        [("fast_retransmission", "This frame is a (suspected) fast retransmission", "Note"), RETRANSMITTED],
    ),
    (
        SPURIOUS,
        [("spurious_retransmission", "This frame is a (suspected) spurious retransmission", "Note"), RETRANSMITTED],
    ),
    (OUT_OF_ORDER, [("out_of_order", "This frame is a (suspected) out-of-order segment", "Warning")]),
    (LOST, [("lost_segment", "Previous segment(s) not captured (common at capture start)", "Warning")]),
    (ACK_LOST, [("ack_lost_segment", "ACKed segment that wasn't captured (common at capture start)", "Warning")]),
    (WINDOW_UPDATE, [("window_update", "TCP window update", "Chat")]),
    (WINDOW_FULL, [("window_full", "TCP window specified by the receiver is now completely full", "Warning")]),
    (KEEP_ALIVE, [("keep_alive", "TCP keep-alive segment", "Note")]),
    (KEEP_ALIVE_ACK, [("keep_alive_ack", "ACK to a TCP keep-alive segment", "Note")]),
    (DUP_ACK, []),  # its own items, after the flags
    (ZWP, [("zero_window_probe", "TCP Zero Window Probe", "Note")]),
    (ZERO_WINDOW, [("zero_window", "TCP Zero Window segment", "Warning")]),
    (ZWP_ACK, [("zero_window_probe_ack", "ACK to a TCP Zero Window Probe", "Note")]),
)


def analysis_flags(ta: Acked) -> list:
    """The items the flags of a frame's analysis add to its `[SEQ/ACK analysis]` (none without flags)."""
    if not ta.flags:
        return []
    flags = []
    for flag, experts in EXPERTS:
        if ta.flags & flag:
            flags += [expert(f"tcp.analysis.{key}", message, level) for key, message, level in experts]
        if flag == RETRANSMISSION and ta.flags & flag and ta.rto:
            rto = f"{ta.rto // 10**9}.{ta.rto % 10**9:09d}"
            flags += [
                ("tcp.analysis.rto", line(rto, f"[The RTO for this segment was: {rto} seconds]")),
                ("tcp.analysis.rto_frame", line(str(ta.rto_frame), f"[RTO based on delta from frame: {ta.rto_frame}]")),
            ]
        if flag == DUP_ACK and ta.flags & flag and ta.dupack_num:
            flags.append(("tcp.analysis.duplicate_ack", empty("[This is a TCP duplicate ack]")))
    items = [("tcp.analysis.flags", flags)]
    if ta.dupack_num:
        n, frame = ta.dupack_num, ta.dupack_frame
        items += [
            ("tcp.analysis.duplicate_ack_num", line(str(n), f"[Duplicate ACK #: {n}]")),
            ("tcp.analysis.duplicate_ack_frame", line(str(frame), f"[Duplicate to the ACK in frame: {frame}]")),
            (
                "tcp.analysis.duplicate_ack_frame_tree",
                [expert("tcp.analysis.duplicate_ack", f"Duplicate ACK (#{n})", "Note")],
            ),
        ]
    return items
