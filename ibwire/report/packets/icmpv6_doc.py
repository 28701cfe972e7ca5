"""ICMPv6 in tshark 4.0's shape (packet-icmpv6.c): the `icmpv6` layer of -T json / -T ek, each item's -V line
its title.

The checksum verified over the IPv6 pseudo-header, an echo's identifier and sequence number, a reply's request
frame and response time (tshark's single pass, as ICMP's), its data as a `data` object inside the layer; router
and neighbour solicitations and neighbour advertisements with their link-layer address options, MLDv2 reports
with their records; errors (unreachable, packet too big, time exceeded, parameter problem) with the datagram they
carry (icmp_carried).  Other messages and options end the layer where tshark would word them (not yet shown,
docs/tshark-output.md).
"""

import ipaddress

from ibwire.report.packets.ek_kinds import flag
from ibwire.report.packets.icmp_carried import Node, carried
from ibwire.report.packets.icmp_doc import checksum_items, end, in_cksum, start
from ibwire.report.packets.tcp_options import line
from ibwire.report.packets.values import bytes_text, ipv6_text

TYPES = {  # tshark's names of ICMPv6 message types (packet-icmpv6.c), also the summary line's
    1: "Destination Unreachable",
    2: "Packet Too Big",
    3: "Time Exceeded",
    4: "Parameter Problem",
    128: "Echo (ping) request",
    129: "Echo (ping) reply",
    133: "Router Solicitation",
    134: "Router Advertisement",
    135: "Neighbor Solicitation",
    136: "Neighbor Advertisement",
    143: "Multicast Listener Report Message v2",
}
SHOWN = frozenset(TYPES) - {134}  # the messages this layer shows (docs/tshark-output.md: not yet the others)
UNREACHABLE = (
    "no route to destination",
    "Administratively prohibited",
    "Beyond scope of source address",
    "Address unreachable",
    "Port unreachable",
    "Source address failed ingress/egress policy",
    "Reject route to destination",
    "Error in Source Routing Header",
)
PROBLEMS = (
    "erroneous header field encountered",
    "unrecognized Next Header type encountered",
    "unrecognized IPv6 option encountered",
    "IPv6 First Fragment has incomplete IPv6 Header Chain",
)
UNKNOWN_CODES = {1: "Unknown", 3: "Unknown ({})", 4: "Unknown ({})"}  # (other types: no name)
CODES = {
    **{(1, c): name for c, name in enumerate(UNREACHABLE)},
    (3, 0): "hop limit exceeded in transit",
    (3, 1): "fragment reassembly time exceeded",
    **{(4, c): name for c, name in enumerate(PROBLEMS)},
}
REQUEST, REPLY = 128, 129
OPTIONS = {1: ("Source link-layer address", "src"), 2: ("Target link-layer address", "target")}
RECORDS = {
    1: "Include",
    2: "Exclude",
    3: "Changed to include",
    4: "Changed to exclude",
    5: "Allow new sources",
    6: "Block old sources",
}
NA_FLAGS = (("r", "Router", 31), ("s", "Solicited", 30), ("o", "Override", 29))


def icmpv6_layer(
    raw: bytes, reported: int, src: bytes, dst: bytes, frame: int, ns: int, session, walk=None, nested=False
) -> list:
    """The icmpv6 layer of a message: `raw` its captured bytes, `reported` its length by the IPv6 header,
    `src`/`dst` the 16-byte addresses, `frame` the frame's number; `walk` (a scapy packet -> its layers) for
    the datagram an error carries; `nested`: the message is inside one (an echo's fields alone, unverified):
    [icmpv6 items, layers after them]."""
    if len(raw) < 4 or raw[0] not in SHOWN:
        return [[], []]
    kind, code = raw[0], raw[1]
    name = CODES.get((kind, code), UNKNOWN_CODES.get(kind, "")).format(code) or None
    items = [
        ("icmpv6.type", line(str(kind), f"Type: {TYPES[kind]} ({kind})")),
        ("icmpv6.code", line(str(code), f"Code: {code}" + (f" ({name})" if name else ""))),
    ]
    if nested and raw[0] in (REQUEST, REPLY) and len(raw) >= 8:
        text = f"0x{int.from_bytes(raw[2:4], 'big'):04x}"
        items += [
            ("icmpv6.checksum", line(text, f"Checksum: {text} [unverified] [in ICMP error packet]")),
            ("icmpv6.checksum.status", line("2", "[Checksum Status: Unverified]")),
        ]
        return [items + _echo(raw, kind, frozenset(), frame, ns, None), []]
    if len(raw) < reported or len(raw) < 8 or nested:  # an unverifiable checksum: not yet
        return [items, []]
    pseudo = src + dst + reported.to_bytes(4, "big") + b"\0\0\0\x3a"
    items += checksum_items("icmpv6", raw, in_cksum(pseudo + raw), "icmpv6.checksum_bad.expert")
    if kind in (REQUEST, REPLY):
        return [items + _echo(raw, kind, frozenset((src, dst)), frame, ns, session), []]
    if kind in (1, 2, 3, 4):
        return _error(raw, items, walk)
    if kind == 143:
        return [items + _mld_report(raw), []]
    body = 8
    if kind == 136:
        items.append(_na_flags(int.from_bytes(raw[4:8], "big")))
        items.append(("icmpv6.nd.na.flag_tree", _na_bits(int.from_bytes(raw[4:8], "big"))))
    else:
        items.append(("icmpv6.reserved", line(bytes_text(raw[4:8]), f"Reserved: {raw[4:8].hex()}")))
    if kind in (135, 136):
        if len(raw) < 24:
            return [items, []]
        target = ipv6_text(str(ipaddress.IPv6Address(raw[8:24])))
        key = f"icmpv6.nd.{'ns' if kind == 135 else 'na'}.target_address"
        items.append((key, line(target, f"Target Address: {target}")))
        body = 24
    return [items + _options(raw[body:]), []]


def _error(raw: bytes, items: list, walk) -> list:
    """An error's second word (RFC 4884's length in 64-bit words where set; the datagram then: not yet) and
    the datagram it carries."""
    kind, word = raw[0], raw[4:8]
    if kind == 2:
        mtu = int.from_bytes(word, "big")
        items.append(("icmpv6.mtu", line(str(mtu), f"MTU: {mtu}")))
    elif kind == 4:
        pointer = int.from_bytes(word, "big")
        items.append(("icmpv6.pointer", line(str(pointer), f"Pointer: {pointer}")))
    elif word[0]:
        items.append(("icmpv6.length", line(str(word[0]), f"Length of original datagram: {word[0]}")))
        return [items + [("icmpv6.reserved", line(bytes_text(word[1:]), f"Reserved: {word[1:].hex()}"))], []]
    else:
        items.append(("icmpv6.reserved", line(bytes_text(word), f"Reserved: {word.hex()}")))
    inside, after = carried(raw[8:], walk, 6)
    return [items + inside, after]


def _echo(raw: bytes, kind: int, ends: frozenset, frame: int, ns: int, session) -> list:
    """Identifier, sequence number, the request a reply answers (packet-icmpv6.c: a request is keyed by its
    checksum, a reply by the checksum its request carried), the data."""
    ident, seq = int.from_bytes(raw[4:6], "big"), int.from_bytes(raw[6:8], "big")
    items = [
        ("icmpv6.echo.identifier", line(f"0x{ident:04x}", f"Identifier: 0x{ident:04x}")),
        ("icmpv6.echo.sequence_number", line(str(seq), f"Sequence: {seq}")),
    ]
    checksum = int.from_bytes(raw[2:4], "big")
    if session is None:  # inside an error: not matched
        pass
    elif kind == REQUEST:
        start(session, ("v6", ends, checksum, raw[4:8]), frame, ns)
    else:  # the request's checksum: this one's less the types' difference (0x0100)
        key = in_cksum(((~checksum) & 0xFFFF).to_bytes(2, "big") + b"\xfe\xff") or 0xFFFF
        got = end(session, ("v6", ends, key, raw[4:8]), ns)
        if got is not None:
            items += [
                ("icmpv6.resp_to", line(str(got[0]), f"[Response To: {got[0]}]")),
                ("icmpv6.resptime", line(f"{got[1]:.15g}", f"[Response Time: {got[1]:.3f} ms]")),
            ]
    data = raw[8:]
    if data:
        items.append(("data", [("data.data", bytes_text(data)), ("data.len", str(len(data)))]))
    return items


def _na_flags(flags: int) -> tuple:
    names = [label for _, label, bit in NA_FLAGS if flags >> bit & 1]
    text = f"0x{flags:08x}"
    return ("icmpv6.nd.na.flag", line(text, ", ".join([f"Flags: {text}"] + names)))


def _na_bits(flags: int) -> list:
    out = []
    for key, label, bit in NA_FLAGS:
        on = flags >> bit & 1
        picture = _picture(on << bit, 1 << bit)
        out.append((f"icmpv6.nd.na.flag.{key}", flag(on, f"{picture} = {label}: {'Set' if on else 'Not set'}")))
    rsv = flags & 0x1FFFFFFF
    out.append(("icmpv6.nd.na.flag.rsv", line(str(rsv), f"{_picture(rsv, 0x1FFFFFFF)} = Reserved: {rsv}")))
    return out


def _picture(value: int, mask: int) -> str:
    """Wireshark's picture of a 32-bit field's bits under `mask`."""
    chars = ["." if not mask >> (31 - i) & 1 else str(value >> (31 - i) & 1) for i in range(32)]
    return " ".join("".join(chars[i : i + 4]) for i in range(0, 32, 4))


def _options(raw: bytes) -> list:
    """The link-layer address options, in order; another option, or one cut short, ends the list."""
    items, at = [], 0
    while at + 2 <= len(raw) and raw[at] in OPTIONS and raw[at + 1] and at + 8 * raw[at + 1] <= len(raw):
        kind, units = raw[at], raw[at + 1]
        name, side = OPTIONS[kind]
        body = raw[at + 2 : at + 8 * units]
        mac = units == 1
        addr = ":".join(f"{b:02x}" for b in body) if mac else bytes_text(body)
        shown = addr if mac else body.hex()
        inner = [
            ("icmpv6.opt.type", line(str(kind), f"Type: {name} ({kind})")),
            ("icmpv6.opt.length", line(str(units), f"Length: {units} ({8 * units} bytes)")),
            ("icmpv6.opt.linkaddr", line(addr, f"Link-layer address: {shown}")),
            (f"icmpv6.opt.{side}_linkaddr", addr),  # hidden in -V
        ]
        items.append(("icmpv6.opt", Node(f"ICMPv6 Option ({name}{' : ' + addr if mac else ''})", inner)))
        at += 8 * units
    return items


def _mld_report(raw: bytes) -> list:
    """An MLDv2 report (RFC 3810 §5.2): its records with their sources; a record with auxiliary data, or cut
    short, ends the list."""
    count = int.from_bytes(raw[6:8], "big")
    items = [
        ("icmpv6.reserved", line(bytes_text(raw[4:6]), f"Reserved: {raw[4:6].hex()}")),
        ("icmpv6.mldr.nb_mcast_records", line(str(count), f"Number of Multicast Address Records: {count}")),
    ]
    at = 8
    for _ in range(count):
        if at + 20 > len(raw):
            break
        kind, aux, nsrc = raw[at], raw[at + 1], int.from_bytes(raw[at + 2 : at + 4], "big")
        if aux or kind not in RECORDS or at + 20 + 16 * nsrc > len(raw):
            break
        group = _address(raw[at + 4 : at + 20])
        inner = [
            ("icmpv6.mldr.mar.record_type", line(str(kind), f"Record Type: {RECORDS[kind]} ({kind})")),
            ("icmpv6.mldr.mar.aux_data_len", line("0", "Aux Data Len: 0")),
            ("icmpv6.mldr.mar.nb_sources", line(str(nsrc), f"Number of Sources: {nsrc}")),
            ("icmpv6.mldr.mar.multicast_address", line(group, f"Multicast Address: {group}")),
        ]
        for i in range(nsrc):
            source = _address(raw[at + 20 + 16 * i : at + 36 + 16 * i])
            inner.append(("icmpv6.mldr.mar.source_address", line(source, f"Source Address: {source}")))
        items.append(("icmpv6.mldr.mar", Node(f"Multicast Address Record {RECORDS[kind]}: {group}", inner)))
        at += 20 + 16 * nsrc
    return items


def _address(raw: bytes) -> str:
    return ipv6_text(str(ipaddress.IPv6Address(raw)))


def icmpv6_items(icmp, flat: dict, ns: int, session, walk=None) -> list:
    """The layers of a scapy ICMPv6 layer, [("icmpv6", icmpv6_layer()), what follows the datagram an error
    carries]: its bytes, its length and addresses by the IPv6 header above it (past any extension headers),
    the frame's number and lengths from `flat`."""
    raw = bytes(icmp.original or b"")
    in_frame = len(raw) + max(int(flat.get("frame.len", 0)) - int(flat.get("frame.cap_len", 0)), 0)
    ip = icmp.underlayer
    while ip is not None and not hasattr(ip, "plen"):
        ip = ip.underlayer
    if ip is None:
        return [("icmpv6", [])]
    reported = min(ip.plen - (len(bytes(ip.payload.original or b"")) - len(raw)), in_frame)
    src, dst = (ipaddress.IPv6Address(a).packed for a in (ip.src, ip.dst))
    nested = getattr(ip, "in_error", False)
    frame, cut = flat.get("frame.number", 0), max(ip.plen if nested else reported, 0)
    items, after = icmpv6_layer(raw[:cut], cut, src, dst, frame, ns, session, walk, nested)
    return [("icmpv6", items)] + after
