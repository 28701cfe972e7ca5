"""TCP in tshark 4.0's shape (packet-tcp.c): the `tcp` layer of -T json / -T ek, each item's -V line its title.

tshark keeps state per TCP conversation (either direction) and this keeps the same, frame after frame as
tshark's single pass does: the stream index, relative sequence and ack numbers (from the SYN, or one before
the first sequence number seen), the conversation's completeness as it stood before the frame, times since
the stream's first and previous frame, the window scaling learned from the SYNs, and the SEQ/ACK analysis
(the segment an ACK acknowledges and its RTT, the handshake's iRTT, bytes in flight, bytes since the last
PSH, and the analysis flags: tcp_seq computes them, tcp_flags words them).
"""

import ipaddress
import weakref
from typing import List, Optional

from ibwire.report.packets.ek_kinds import flag
from ibwire.report.packets.tcp_flags import analysis_flags
from ibwire.report.packets.tcp_options import SEVERITY, expert, line, options
from ibwire.report.packets.tcp_seq import ACK, FIN, RST, SYN, Acked, M, analyze
from ibwire.report.packets.values import bytes_text, seconds

FLAG_NAMES = ("FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR", "AE")
FLAG_LETTERS = "RRRACEUAPRSF"  # bit 11 down to bit 0, as tcp.flags.str shows them
FLAG_BITS = (  # key, label, mask of the 12 flag bits
    ("res", "Reserved", 0xE00),
    ("ae", "Accurate ECN", 0x100),
    ("cwr", "Congestion Window Reduced", 0x80),
    ("ece", "ECN-Echo", 0x40),
    ("urg", "Urgent", 0x20),
    ("ack", "Acknowledgment", 0x10),
    ("push", "Push", 0x08),
    ("reset", "Reset", 0x04),
    ("syn", "Syn", 0x02),
    ("fin", "Fin", 0x01),
)
COMPLETENESS = {
    1: "Incomplete, SYN_SENT",
    3: "Incomplete, CLIENT_ESTABLISHED",
    7: "Incomplete, ESTABLISHED",
    15: "Incomplete, DATA",
    **{v: "Complete, WITH_DATA" for v in (31, 47, 63)},
    **{v: "Complete, NO_DATA" for v in (23, 39, 55)},
}


class Flow:
    """One direction of a conversation (packet-tcp.c's tcp_flow_t and its seq analysis)."""

    def __init__(self):
        self.base_seq: Optional[int] = None
        self.win_scale = -1
        self.window = M - 1
        self.nextseq = self.nextseqtime = self.lastack = self.lastacktime = self.maxseqtobeacked = 0
        self.segments: List[list] = []  # unacknowledged [frame, seq, nextseq, ns], newest first
        self.valid_bif, self.push_set_last, self.push_bytes_sent = True, False, 0
        self.dupacknum = self.lastsegmentflags = self.lastnondupack = self.nextseqframe = 0
        self.closing_initiator = self.is_first_ack = False
        self.sack: List[tuple] = []


class Stream:
    def __init__(self, index: int, ns: int):
        self.index, self.first, self.prev = index, ns, ns
        self.completeness = 0
        self.flows = {}
        self.mru_syn = self.first_rtt = 0


class Streams:
    """The TCP conversations of a capture, numbered in order of appearance."""

    def __init__(self):
        self.by_ends = {}
        self.count = 0

    def stream(self, ends, src, seq: int, flags: int, ns: int) -> tuple:
        """(stream, this direction's flow, the other's, is the conversation new, are its ports reused): a SYN
        with a new ISN on a known conversation starts a new one, as tshark's does, and a SYN+ACK with a new
        ISN is marked too."""
        st = self.by_ends.get(ends)
        new, reused = st is None, False
        old = st.flows.get(src) if st is not None else None
        if old is not None and old.base_seq is not None and flags & SYN:
            reused = seq != old.base_seq
            if flags & ACK == 0 and seq != old.base_seq:
                st = None
            elif flags & ACK == 0:
                old.nextseq = old.maxseqtobeacked
            elif reused:
                old.base_seq = seq
        if st is None:
            st = self.by_ends[ends] = Stream(self.count, ns)
            self.count += 1
            st.completeness = 0 if new else 1
        fwd = st.flows.setdefault(src, Flow())
        rev = st.flows.setdefault(next((e for e in ends if e != src), src), Flow())
        return st, fwd, rev, new, reused


_SESSIONS = weakref.WeakKeyDictionary()  # tshark_doc.Session -> its Streams


class Header:
    """The fixed header's fields from its bytes."""

    def __init__(self, raw: bytes):
        self.sport, self.dport = int.from_bytes(raw[0:2], "big"), int.from_bytes(raw[2:4], "big")
        self.seq, self.ack = int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:12], "big")
        self.hlen = (raw[12] >> 4) * 4
        self.flags = int.from_bytes(raw[12:14], "big") & 0xFFF
        self.win = int.from_bytes(raw[14:16], "big")
        self.checksum, self.urgent = int.from_bytes(raw[16:18], "big"), int.from_bytes(raw[18:20], "big")


def tcp_layer(raw: bytes, reported: int, src: bytes, dst: bytes, frame: int, ns: int, session) -> list:
    """The tcp layer of a segment: `raw` its captured bytes (header on), `reported` its length by the IP
    header, `src`/`dst` its 16-byte addresses, `frame` the frame's number."""
    if len(raw) < 20:  # cut short: the ports, as far as the bytes go
        return _ports(raw)
    h = Header(raw)
    streams = _SESSIONS.setdefault(session, Streams())
    a, b = (src, h.sport), (dst, h.dport)
    st, fwd, rev, new, reused = streams.stream(frozenset((a, b)), a, h.seq, h.flags, ns)
    items = _ports(raw) + [
        ("tcp.stream", line(str(st.index), f"[Stream index: {st.index}]")),
        ("tcp.completeness", line(str(st.completeness), f"[Conversation completeness: {_completeness(st)}]")),
    ]
    since_first, since_prev = ns - st.first, ns - st.prev
    st.prev = ns
    if h.hlen < 20 or reported < h.hlen:
        return items  # tshark stops at a bogus header length; a short segment is not analysed
    seglen = reported - h.hlen
    fwd.sack = []  # SACK blocks are the latest segment's
    ta = analyze(st, fwd, rev, frame, ns, h, seglen, reused)
    seq, ack = (h.seq - fwd.base_seq) % M, (h.ack - rev.base_seq) % M if h.flags & ACK else h.ack
    window = h.win << fwd.win_scale if fwd.win_scale >= 0 and not h.flags & SYN else h.win
    _complete(st, new, h.flags, seglen)
    nxt = (seq + seglen + (1 if h.flags & (SYN | FIN) else 0)) % M
    items += [
        ("tcp.len", line(str(seglen), f"[TCP Segment Len: {seglen}]")),
        ("tcp.seq", line(str(seq), f"Sequence Number: {seq}    (relative sequence number)")),
        ("tcp.seq_raw", line(str(h.seq), f"Sequence Number (raw): {h.seq}")),
        ("tcp.nxtseq", line(str(nxt), f"[Next Sequence Number: {nxt}    (relative sequence number)]")),
        (
            "tcp.ack",
            line(str(ack), f"Acknowledgment Number: {ack}" + ("    (relative ack number)" if h.flags & ACK else "")),
        ),
        ("tcp.ack_raw", line(str(h.ack), f"Acknowledgment number (raw): {h.ack}")),
        ("tcp.hdr_len", line(str(h.hlen), f"{h.hlen >> 2:04b} .... = Header Length: {h.hlen} bytes ({h.hlen >> 2})")),
    ]
    items += _flags(h, st, fwd, rev)
    items += [
        ("tcp.window_size_value", line(str(h.win), f"Window: {h.win}")),
        ("tcp.window_size", line(str(window), f"[Calculated window size: {window}]")),
    ]
    if not h.flags & SYN:
        factor = 1 << fwd.win_scale if fwd.win_scale >= 0 else fwd.win_scale
        text = {-1: "-1 (unknown)", -2: "-2 (no window scaling used)"}.get(factor, str(factor))
        items.append(("tcp.window_size_scalefactor", line(str(factor), f"[Window size scaling factor: {text}]")))
    items += [
        ("tcp.checksum", line(f"0x{h.checksum:04x}", f"Checksum: 0x{h.checksum:04x} [unverified]")),
        ("tcp.checksum.status", line("2", "[Checksum Status: Unverified]")),
        ("tcp.urgent_pointer", line(str(h.urgent), f"Urgent Pointer: {h.urgent}")),
    ]
    if h.flags & SYN:
        if not h.flags & ACK:
            st.mru_syn = ns
        fwd.is_first_ack = True
    elif h.flags & ACK:
        if st.mru_syn and not st.first_rtt:
            st.first_rtt = ns - st.mru_syn
        fwd.is_first_ack = False
    items += options(raw[20 : h.hlen], h, fwd, rev)
    items.append(
        (
            "Timestamps",
            [
                ("tcp.time_relative", line(seconds(since_first), _since("first", since_first))),
                ("tcp.time_delta", line(seconds(since_prev), _since("previous", since_prev))),
            ],
        )
    )
    if ta is not None:
        items.append(("tcp.analysis", _analysis(ta, st)))
    if h.flags & SYN:
        _verify_scaling(fwd, rev, bool(h.flags & ACK))
    if not h.flags & RST:
        items += payload_item(raw[h.hlen : reported])
    return items


def payload_item(payload: bytes) -> list:
    """A segment's `TCP payload (n bytes)` item, if it has any."""
    n = len(payload)
    return [("tcp.payload", line(bytes_text(payload), f"TCP payload ({n} byte{'s' if n != 1 else ''})"))] if n else []


def heading(items: list) -> str:
    """The layer's -V title (packet-tcp.c's summary in the tree)."""
    get = {k: v for k, v in items if not isinstance(v, list)}
    text = f"Transmission Control Protocol, Src Port: {get.get('tcp.srcport')}, Dst Port: {get.get('tcp.dstport')}"
    if "tcp.seq" in get:
        text += f", Seq: {get['tcp.seq']}"
    flags = int(get.get("tcp.flags", "0"), 16)
    if flags & ACK and "tcp.ack" in get:
        text += f", Ack: {get['tcp.ack']}"
    return text + (f", Len: {get['tcp.len']}" if "tcp.len" in get else "")


TEXT_TITLES = {"tcp.analysis": "[SEQ/ACK analysis]", "tcp.analysis.flags": "[TCP Analysis Flags]"}


def title(key: str, value) -> Optional[str]:
    """-V's title of a TCP text item: the SEQ/ACK analysis, an expert item TCP adds."""
    if key in TEXT_TITLES:
        return TEXT_TITLES[key]
    if key == "_ws.expert" and isinstance(value, list) and value and value[0][0].startswith("tcp."):
        got = dict(value)
        level = next((k for k, v in SEVERITY.items() if v == got.get("_ws.expert.severity")), "")
        return f"[Expert Info ({level}/Sequence): {got.get('_ws.expert.message', '')}]"
    return None


def _since(which: str, ns: int) -> str:
    return f"[Time since {which} frame in this TCP stream: {seconds(ns)} seconds]"


def _ports(raw: bytes) -> list:
    if len(raw) < 4:
        return []
    sport, dport = int.from_bytes(raw[0:2], "big"), int.from_bytes(raw[2:4], "big")
    return [
        ("tcp.srcport", line(str(sport), f"Source Port: {sport}")),
        ("tcp.dstport", line(str(dport), f"Destination Port: {dport}")),
        ("tcp.port", str(sport)),
        ("tcp.port", str(dport)),
    ]


def _completeness(st: Stream) -> str:
    v = st.completeness
    return f"{COMPLETENESS.get(v, 'Incomplete')} ({v})"


def _complete(st: Stream, new: bool, flags: int, seglen: int) -> None:
    """Move the conversation's completeness on (shown from the next frame on, as tshark shows it)."""
    if new:
        if flags & (SYN | ACK) == SYN:
            st.completeness |= 1 | (8 if seglen else 0)
        return
    if flags & (SYN | ACK) == SYN | ACK:
        st.completeness |= 2
    if flags & (SYN | ACK) == ACK:
        st.completeness |= 8 if seglen else 4
    if flags & (FIN | ACK) == FIN | ACK:
        st.completeness |= 16
    if flags & RST:
        st.completeness |= 32


def _picture(value: int, mask: int) -> str:
    chars = ["." if not mask >> (11 - i) & 1 else "1" if value >> (11 - i) & 1 else "0" for i in range(12)]
    return " ".join("".join(chars[i : i + 4]) for i in range(0, 12, 4))


def _flags(h: Header, st: Stream, fwd: Flow, rev: Flow) -> list:
    f = h.flags
    names = [n for i, n in enumerate(FLAG_NAMES) if f >> i & 1] + (["Reserved"] if f & 0xE00 else [])
    bits = []
    for key, label, mask in FLAG_BITS:
        bits.append((f"tcp.flags.{key}", flag(f & mask, f"{_picture(f, mask)} = {label}: {_set(f & mask)}")))
        if key == "syn" and f & SYN:
            port = h.sport if f & ACK else h.dport
            kind = "acknowledge (SYN+ACK)" if f & ACK else "request (SYN)"
            key_ = "tcp.connection.synack" if f & ACK else "tcp.connection.syn"
            bits.append(
                ("tcp.flags.syn_tree", [expert(key_, f"Connection establish {kind}: server port {port}", "Chat")])
            )
        if key == "fin" and f & FIN:
            bits.append(("tcp.flags.fin_tree", [expert("tcp.connection.fin", "Connection finish (FIN)", "Chat")]))
        if key == "reset" and f & RST:
            bits.append(("tcp.flags.reset_tree", [expert("tcp.connection.rst", "Connection reset (RST)", "Warning")]))
    text = "".join(c if f >> (11 - i) & 1 else "\u00b7" for i, c in enumerate(FLAG_LETTERS))
    bits.append(("tcp.flags.str", line(text, f"[TCP Flags: {text}]")))
    if f & FIN:  # who closes first
        if rev.closing_initiator:
            closing = expert("tcp.connection.fin_passive", "This frame undergoes the connection closing", "Note")
        else:
            fwd.closing_initiator = True
            closing = expert("tcp.connection.fin_active", "This frame initiates the connection closing", "Note")
        bits.append(("tcp.flags.str_tree", [closing]))
    return [
        ("tcp.flags", line(f"0x{f:04x}", f"Flags: 0x{f:03x} ({', '.join(names) or '<None>'})")),
        ("tcp.flags_tree", bits),
    ]


def _set(on) -> str:
    return "Set" if on else "Not set"


def _verify_scaling(fwd: Flow, rev: Flow, synack: bool) -> None:
    """packet-tcp.c verify_tcp_window_scaling: no scaling unless both SYNs offered it."""
    if fwd.win_scale == -1:
        fwd.win_scale = rev.win_scale = -2
    elif synack and rev.win_scale == -2:
        fwd.win_scale = -2


def _analysis(ta: Acked, st: Stream) -> list:
    items = []
    if ta.frame_acked:
        items.append(
            (
                "tcp.analysis.acks_frame",
                line(str(ta.frame_acked), f"[This is an ACK to the segment in frame: {ta.frame_acked}]"),
            )
        )
        if ta.rtt:
            items.append(
                (
                    "tcp.analysis.ack_rtt",
                    line(seconds(ta.rtt), f"[The RTT to ACK the segment was: {seconds(ta.rtt)} seconds]"),
                )
            )
    if st.first_rtt:
        items.append(
            ("tcp.analysis.initial_rtt", line(seconds(st.first_rtt), f"[iRTT: {seconds(st.first_rtt)} seconds]"))
        )
    if ta.bytes_in_flight:
        items.append(
            ("tcp.analysis.bytes_in_flight", line(str(ta.bytes_in_flight), f"[Bytes in flight: {ta.bytes_in_flight}]"))
        )
    if ta.push_bytes_sent:
        items.append(
            (
                "tcp.analysis.push_bytes_sent",
                line(str(ta.push_bytes_sent), f"[Bytes sent since last PSH flag: {ta.push_bytes_sent}]"),
            )
        )
    return items + analysis_flags(ta)


def tcp_items(tcp, frame: int, ns: int, session) -> list:
    """tcp_layer() of a scapy TCP layer."""
    return tcp_layer(*segment(tcp), frame, ns, session)


def segment(tcp) -> tuple:
    """A scapy TCP layer's (bytes, length by the IP or IPv6 header above it, 16-byte source and destination)."""
    raw = bytes(tcp.original or b"")
    ip = tcp.underlayer
    while ip is not None and not hasattr(ip, "src"):
        ip = ip.underlayer
    if ip is None:
        return raw, len(raw), b"", b""
    if not hasattr(ip, "plen"):  # IPv4
        src, dst = (MAPPED + ipaddress.ip_address(a).packed for a in (ip.src, ip.dst))
        reported = ip.len - ip.ihl * 4 if ip.len is not None and ip.len >= ip.ihl * 4 else len(raw)
    else:
        src, dst = (ipaddress.ip_address(a).packed for a in (ip.src, ip.dst))
        reported = ip.plen - (len(bytes(ip.payload.original or b"")) - len(raw))
    return raw, max(reported, 0), src, dst


MAPPED = b"\0" * 10 + b"\xff\xff"  # an IPv4 address as its IPv6-mapped 16 bytes
