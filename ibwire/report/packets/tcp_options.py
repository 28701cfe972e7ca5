"""TCP options as tshark 4.0 shows them (packet-tcp.c): each option's bytes, its title (`TCP Option - Window
scale: 7 (multiply by 128)`) and fields; the helpers TCP's items are written with (an item's -V line as its
title, an expert item)."""

from ibwire.report.packets.ek_kinds import empty
from ibwire.report.packets.nvme_data_words import Titled
from ibwire.report.packets.tcp_seq import ACK, M, gt
from ibwire.report.packets.values import bytes_text

SEVERITY = {"Chat": "2097152", "Note": "4194304", "Warning": "6291456"}
SEQUENCE = "33554432"  # the expert group Sequence
OPTIONS = {  # kind: (key, the option's name in the Options line, Kind's value name)
    0: ("eol", "End of Option List (EOL)", "End of Option List"),
    1: ("nop", "No-Operation (NOP)", "No-Operation"),
    2: ("mss", "Maximum segment size", "Maximum Segment Size"),
    3: ("wscale", "Window scale", "Window Scale"),
    4: ("sack_perm", "SACK permitted", "SACK Permitted"),
    5: ("sack", "SACK", "SACK"),
    8: ("timestamp", "Timestamps", "Time Stamp Option"),
}
OPTION_LENGTHS = {2: (4,), 3: (3,), 4: (2,), 5: (10, 18, 26, 34), 8: (10,)}


def line(value: str, title: str) -> Titled:
    """An item's -T json value that -V shows as `title`."""
    out = Titled(value)
    out.title = title
    return out


def expert(key: str, message: str, severity: str) -> tuple:
    return (
        "_ws.expert",
        [
            (key, empty(f"[{message}]")),
            ("_ws.expert.message", message),
            ("_ws.expert.severity", line(SEVERITY[severity], f"[Severity level: {severity}]")),
            ("_ws.expert.group", line(SEQUENCE, "[Group: Sequence]")),
        ],
    )


def options(raw: bytes, h, fwd, rev) -> list:
    """The options tshark dissects, in order; an option it would word otherwise (unknown kind, bad length)
    ends the list (docs/tshark-output.md, "Not yet")."""
    if not raw:
        return []
    tree, names, at = [], [], 0
    while at < len(raw):
        kind = raw[at]
        if kind not in OPTIONS:
            break
        key, name, kind_name = OPTIONS[kind]
        size = 1 if kind in (0, 1) else raw[at + 1] if at + 1 < len(raw) else 0
        if kind > 1 and (size not in OPTION_LENGTHS[kind] or at + size > len(raw)):
            break
        body = raw[at : at + size]
        inner = [("tcp.option_kind", line(str(kind), f"Kind: {kind_name} ({kind})"))]
        if kind > 1:
            inner.append(("tcp.option_len", line(str(size), f"Length: {size}")))
        head = f"TCP Option - {name}"
        if kind == 2:
            mss = int.from_bytes(body[2:4], "big")
            inner.append(("tcp.options.mss_val", line(str(mss), f"MSS Value: {mss}")))
            head += f": {mss} bytes"
        elif kind == 3:
            shift = body[2]
            inner += [
                ("tcp.options.wscale.shift", line(str(shift), f"Shift count: {shift}")),
                (
                    "tcp.options.wscale.multiplier",
                    line(str(1 << min(shift, 14)), f"[Multiplier: {1 << min(shift, 14)}]"),
                ),
            ]
            head += f": {shift} (multiply by {1 << min(shift, 14)})"
            fwd.win_scale = min(shift, 14)
        elif kind == 8:
            tsval, tsecr = int.from_bytes(body[2:6], "big"), int.from_bytes(body[6:10], "big")
            inner += [
                ("tcp.options.timestamp.tsval", line(str(tsval), f"Timestamp value: {tsval}")),
                ("tcp.options.timestamp.tsecr", line(str(tsecr), f"Timestamp echo reply: {tsecr}")),
            ]
            head += f": TSval {tsval}, TSecr {tsecr}"
        elif kind == 5:
            head, more = _sack(body, h, fwd, rev)
            inner += more
        tree += [(f"tcp.options.{key}", line(bytes_text(body), head)), (f"tcp.options.{key}_tree", inner)]
        names.append(name)
        at += size
    shown = ", ".join([f"Options: ({len(raw)} bytes)"] + names)
    return [("tcp.options", line(bytes_text(raw), shown)), ("tcp.options_tree", tree)]


def _sack(body: bytes, h, fwd, rev) -> tuple:
    """A SACK option's title and items: each block's edges relative to the other direction's first
    sequence number, the count, and a D-SACK (a first block at or below the ACK, RFC 2883)."""
    base = rev.base_seq or 0
    items, head = [], "TCP Option - SACK"
    blocks = [
        (int.from_bytes(body[i : i + 4], "big"), int.from_bytes(body[i + 4 : i + 8], "big"))
        for i in range(2, len(body), 8)
    ]
    for le, re in blocks:
        rle, rre = (le - base) % M, (re - base) % M
        items += [
            ("tcp.options.sack_le", line(str(rle), f"left edge = {rle} (relative)")),
            ("tcp.options.sack_re", line(str(rre), f"right edge = {rre} (relative)")),
        ]
        head += f" {rle}-{rre}"
    fwd.sack = blocks
    items.append(("tcp.options.sack.count", line(str(len(blocks)), f"[TCP SACK Count: {len(blocks)}]")))
    le, re = blocks[0]
    if h.flags & ACK and not gt(re, h.ack):
        rle, rre = (le - base) % M, (re - base) % M
        items += [
            ("tcp.options.sack.dsack_le", line(str(rle), f"[D-SACK Left Edge = {rle} (relative)]")),
            ("tcp.options.sack.dsack_re", line(str(rre), f"[D-SACK Right Edge = {rre} (relative)]")),
            ("D-SACK Sequence", [expert("tcp.options.sack.dsack", "D-SACK Sequence", "Warning")]),
        ]
    return head, items
