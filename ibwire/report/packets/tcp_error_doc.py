"""The TCP header an ICMP or ICMPv6 error carries, as tshark 4.0 shows it (packet-tcp.c in an error packet): the
numbers on the wire (the sequence number alone, the ACK labelled relative but raw), the conversation's stream
index and completeness (which the error moves on as a segment without data, and its handshake time, but not its
SEQ/ACK analysis), no segment length, the window unscaled beside the stream's scaling factor.
A header shorter than 20 bytes: its ports and sequence number (icmp_carried).
"""

from ibwire.report.packets.tcp_doc import (
    _SESSIONS,
    Flow,
    Header,
    Streams,
    _complete,
    _completeness,
    _flags,
    _ports,
    _since,
    payload_item,
    segment,
)
from ibwire.report.packets.tcp_options import line, options
from ibwire.report.packets.tcp_seq import ACK, SYN
from ibwire.report.packets.values import seconds


def carried(layer) -> bool:
    """Is this scapy TCP layer inside the datagram an ICMP error carries (icmp_carried marks its IP layer)?"""
    return getattr(layer.underlayer, "in_error", False)


def error_tcp_items(tcp, ns: int, session) -> list:
    """The tcp items of a carried header (20 bytes or more), `ns` the frame's time."""
    raw, reported, src, dst = segment(tcp)
    h = Header(raw)
    streams = _SESSIONS.setdefault(session, Streams())
    a, b = (src, h.sport), (dst, h.dport)
    st, fwd, rev, new, _ = streams.stream(frozenset((a, b)), a, h.seq, h.flags, ns)
    since_first, since_prev = ns - st.first, ns - st.prev
    st.prev = ns
    ack = "    (relative ack number)" if h.flags & ACK else ""
    items = _ports(raw) + [
        ("tcp.seq", line(str(h.seq), f"Sequence Number: {h.seq}")),
        ("tcp.stream", line(str(st.index), f"[Stream index: {st.index}]")),
        ("tcp.completeness", line(str(st.completeness), f"[Conversation completeness: {_completeness(st)}]")),
        ("tcp.ack", line(str(h.ack), f"Acknowledgment Number: {h.ack}{ack}")),
        ("tcp.ack_raw", line(str(h.ack), f"Acknowledgment number (raw): {h.ack}")),
        ("tcp.hdr_len", line(str(h.hlen), f"{h.hlen >> 2:04b} .... = Header Length: {h.hlen} bytes ({h.hlen >> 2})")),
    ]
    items += _flags(h, st, Flow(), Flow())  # (no state moves on: a FIN closes nothing)
    items += [
        ("tcp.window_size_value", line(str(h.win), f"Window: {h.win}")),
        ("tcp.window_size", line(str(h.win), f"[Calculated window size: {h.win}]")),
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
    _complete(st, new, h.flags, 0)  # (as a segment without data: tshark knows no length in an error)
    if h.flags & SYN and not h.flags & ACK:  # (the first ACK after a SYN times the handshake: iRTT)
        st.mru_syn = ns
    elif h.flags & ACK and st.mru_syn and not st.first_rtt:
        st.first_rtt = ns - st.mru_syn
    if len(raw) < h.hlen:  # options the error does not carry: their length alone
        items.append(("tcp.options", line("", f"Options: ({h.hlen - 20} bytes)")))
    else:
        items += options(raw[20 : h.hlen], h, Flow(), rev)
    items.append(
        (
            "Timestamps",
            [
                ("tcp.time_relative", line(seconds(since_first), _since("first", since_first))),
                ("tcp.time_delta", line(seconds(since_prev), _since("previous", since_prev))),
            ],
        )
    )
    return items + payload_item(raw[h.hlen : reported])


def error_title(items: list) -> str:
    """The carried header's -V title: its ports, sequence number and (with ACK set) acknowledgment number."""
    get = {k: v for k, v in items if not isinstance(v, list)}
    text = f"Transmission Control Protocol, Src Port: {get['tcp.srcport']}, Dst Port: {get['tcp.dstport']}"
    text += f", Seq: {get['tcp.seq']}"
    return text + (f", Ack: {get['tcp.ack']}" if int(get["tcp.flags"], 16) & ACK else "")
