"""One decoded frame as tshark 4.0's `-T json` and `-T ek` documents (epan/print.c).

A document is a list of (key, node) pairs, a node being a value or another such list, in tshark's order
and nesting: `frame`, `erf`, `eth`, `vlan`, `ip`/`ipv6`, `udp` layers with tshark's keys (names resolved as
`tshark -n` resolves them: a MAC stands for itself, with `eth.*.oui_resolved` its vendor's name from
Wireshark's manuf file where this machine has one, ibwire.report.packets.manuf), then one
`infiniband` layer holding each IB header as its bytes (`infiniband.bth`) and a `*_tree` of its fields,
reserved bits tshark does not name as `infiniband.reserved` bytes, the ICRC/VCRC last, then `data`.  Keys
repeat where tshark repeats them (`ip.addr`, `udp.port`).  Every value is tshark's text
(ibwire.report.packets.values); ek writes booleans as true/false.  MADs sit in tshark's containers of their
class (MAD_CLASSES); an attribute's fields are listed in its container without tshark's subtrees of
single attributes but PortInfo's CapabilityMask bits (BIT_TREES), a Notice's trap and a CM REQ's service ID,
and without reserved fields.
"""

import ipaddress
import json
import time
from typing import List, NamedTuple, Optional

from scapy.fields import BitField
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import NoPayload, Raw

from dissectors.base import IBLayer
from dissectors.mad.notice import TRAP_LAYERS, Notice
from dissectors.numbers import LINKTYPE_ERF, LINKTYPE_ETHERNET, LINKTYPE_IPOIB, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2
from ibwire.decode.fields import FOREIGN, MERGED, mad_layer_entries
from ibwire.decode.fieldtypes import TSHARK_DISPLAY
from ibwire.report.packets import length_experts, manuf
from ibwire.report.packets.dcb_doc import dcb_layer, pairs
from ibwire.report.packets.ek_kinds import CARRIED, OBJECTS, Empty, Flag, ek_name, is_field
from ibwire.report.packets.icmp_doc import icmp_items
from ibwire.report.packets.icmpv6_doc import icmpv6_items
from ibwire.report.packets.session import Session
from ibwire.report.packets.tcp_doc import tcp_items
from ibwire.report.packets.tcp_error_doc import carried, error_tcp_items
from ibwire.report.packets.values import SELF_NAMED, bytes_text, ipv6_text, seconds, value_text

# Wiretap's encapsulation numbers (frame.encap_type) of the link types tshark 4.0 reads (not 247: tshark
# cannot open it, so the link type itself stands there).
ENCAP_TYPES = {
    LINKTYPE_ETHERNET: 1,
    LINKTYPE_LINUX_SLL: 25,
    LINKTYPE_ERF: 98,
    LINKTYPE_IPOIB: 180,
    LINKTYPE_LINUX_SLL2: 210,
}
IB_PREFIX = "infiniband."
FILTERED = "filtered"  # what -j/-J leave of a protocol or subtree not selected


class Times(NamedTuple):
    """Nanoseconds of a frame: since the epoch, since the previous frame, since the previous frame shown,
    since the first frame."""

    epoch: int
    delta: int
    delta_displayed: int
    relative: int


def _hex(value: int, digits: int) -> str:
    return f"0x{value:0{digits}x}"


def _flag(value) -> bool:
    return bool(value)


def frame_time(ns: int) -> str:
    """frame.time as tshark 4.0 writes it: local time, nanoseconds, the zone's name."""
    tm = time.localtime(ns // 10**9)
    return (
        f"{time.strftime('%b', tm)} {tm.tm_mday:2d}, {tm.tm_year} {time.strftime('%H:%M:%S', tm)}."
        f"{ns % 10**9:09d} {tm.tm_zone}"
    )


def _udp(session: Session, p, ns: int, carried: Optional[int] = None) -> list:
    """The UDP layer, numbered in its conversation (udp.stream) by the session; `carried`: the IP payload's
    reported bytes (length_experts), where known."""
    ip = p.underlayer
    v6 = isinstance(ip, IPv6)
    index, first, prev = session.note(
        _addr16(getattr(ip, "src", None), v6), p.sport, _addr16(getattr(ip, "dst", None), v6), p.dport, ns
    )
    check = [("udp.checksum", _hex(p.chksum, 4))]
    check += (
        [("udp.checksum_tree", [("udp.checksum.status", "3")])] if p.chksum == 0 else [("udp.checksum.status", "2")]
    )
    payload = bytes(p.original[8 : p.len] if p.original else b"")
    return (
        [
            ("udp.srcport", str(p.sport)),
            ("udp.dstport", str(p.dport)),
            ("udp.port", str(p.sport)),
            ("udp.port", str(p.dport)),
            *length_experts.udp_length(p.len, carried),
        ]
        + check
        + [
            ("udp.stream", str(index)),
            ("Timestamps", [("udp.time_relative", seconds(ns - first)), ("udp.time_delta", seconds(ns - prev))]),
        ]
        + ([("udp.payload", bytes_text(payload))] if payload else [])
    )


def _frame(d, t: Times, session: "Session") -> list:
    f, flat = d.frame, d.flat
    items = []
    if f.linktype == LINKTYPE_ERF and len(f.data) >= 16:
        port = f.data[9] & 3
        name = f"Port {'ABCD'[port]} (ERF Interface {port})"
        items += [
            ("frame.interface_id", str(session.interface(port))),
            ("frame.interface_id_tree", [("frame.interface_name", name), ("frame.interface_description", name)]),
        ]
    items += [
        ("frame.encap_type", str(ENCAP_TYPES.get(f.linktype, f.linktype))),
        ("frame.time", frame_time(t.epoch)),
        ("frame.offset_shift", "0.000000000"),
        ("frame.time_epoch", seconds(t.epoch)),
        ("frame.time_delta", seconds(t.delta)),
        ("frame.time_delta_displayed", seconds(t.delta_displayed)),
        ("frame.time_relative", seconds(t.relative)),
        ("frame.number", str(f.number)),
        ("frame.len", str(flat.get("frame.len", f.wirelen))),
        ("frame.cap_len", str(flat.get("frame.cap_len", f.caplen))),
        ("frame.marked", False),
        ("frame.ignored", False),
        ("frame.protocols", flat.get("frame.protocols", "")),
    ]
    return items


def _erf(data: bytes) -> list:
    ts = int.from_bytes(data[:8], "little")
    rtype, flags = data[8], data[9]
    return [
        ("erf.ts", _hex(ts, 16)),
        ("erf.types", _hex(rtype, 2)),
        ("erf.types_tree", [("erf.types.type", str(rtype & 0x7F)), ("erf.types.ext_header", str(rtype >> 7))]),
        ("erf.flags", _hex(flags, 2)),
        (
            "erf.flags_tree",
            [
                ("erf.flags.cap", str(flags & 3)),
                ("erf.flags.vlen", str(flags >> 2 & 1)),
                ("erf.flags.trunc", str(flags >> 3 & 1)),
                ("erf.flags.rxe", str(flags >> 4 & 1)),
                ("erf.flags.dse", str(flags >> 5 & 1)),
                ("erf.flags.res", _hex(flags >> 6, 2)),
            ],
        ),
        ("erf.rlen", str(int.from_bytes(data[10:12], "big"))),
        ("erf.lctr", str(int.from_bytes(data[12:14], "big"))),
        ("erf.wlen", str(int.from_bytes(data[14:16], "big"))),
    ]


def _mac_tree(side: str, mac: str) -> list:
    first = int(mac[:2], 16)
    number = int(mac.replace(":", "")[:6], 16)
    oui, name = str(number), manuf.vendor(number)
    vendor = [("oui_resolved", name)] if name is not None else []
    return [
        (f"eth.{side}_resolved", mac),
        (f"eth.{side}.oui", oui),
        *((f"eth.{side}.{k}", v) for k, v in vendor),
        ("eth.addr", mac),
        ("eth.addr_resolved", mac),
        ("eth.addr.oui", oui),
        *((f"eth.addr.{k}", v) for k, v in vendor),
        (f"eth.{side}.lg", _flag(first & 2)),
        ("eth.lg", _flag(first & 2)),
        (f"eth.{side}.ig", _flag(first & 1)),
        ("eth.ig", _flag(first & 1)),
    ]


def _eth(p) -> list:
    return [
        ("eth.dst", p.dst),
        ("eth.dst_tree", _mac_tree("dst", p.dst)),
        ("eth.src", p.src),
        ("eth.src_tree", _mac_tree("src", p.src)),
        ("eth.type", _hex(p.type, 4)),
    ]


def _vlan(p) -> list:
    return [
        ("vlan.priority", str(p.prio)),
        ("vlan.dei", _flag(p.dei)),
        ("vlan.id", str(p.vlan)),
        ("vlan.etype", _hex(p.type, 4)),
    ]


def _ip(p, reported: Optional[int] = None) -> list:
    return [
        ("ip.version", str(p.version)),
        ("ip.hdr_len", str(p.ihl * 4)),
        ("ip.dsfield", _hex(p.tos, 2)),
        ("ip.dsfield_tree", [("ip.dsfield.dscp", str(p.tos >> 2)), ("ip.dsfield.ecn", str(p.tos & 3))]),
        ("ip.len", str(p.len)),
        *length_experts.ip_len(p.len, p.ihl * 4, reported),
        ("ip.id", _hex(p.id, 4)),
        ("ip.flags", _hex(int(p.flags), 2)),
        (
            "ip.flags_tree",
            [
                ("ip.flags.rb", _flag(int(p.flags) & 4)),
                ("ip.flags.df", _flag(int(p.flags) & 2)),
                ("ip.flags.mf", _flag(int(p.flags) & 1)),
            ],
        ),
        ("ip.frag_offset", str(p.frag)),  # in 8-byte units, as tshark holds it (-V shows bytes)
        ("ip.ttl", str(p.ttl)),
        ("ip.proto", str(p.proto)),
        ("ip.checksum", _hex(p.chksum, 4)),
        ("ip.checksum.status", "2"),
        ("ip.src", p.src),
        ("ip.addr", p.src),
        ("ip.src_host", p.src),
        ("ip.host", p.src),
        ("ip.dst", p.dst),
        ("ip.addr", p.dst),
        ("ip.dst_host", p.dst),
        ("ip.host", p.dst),
    ]


def _ipv6(p, reported: Optional[int] = None) -> list:
    src, dst = ipv6_text(p.src), ipv6_text(p.dst)
    return [
        ("ipv6.version", "6"),
        ("ip.version", "6"),
        ("ipv6.tclass", _hex(p.tc, 8)),
        ("ipv6.tclass_tree", [("ipv6.tclass.dscp", str(p.tc >> 2)), ("ipv6.tclass.ecn", str(p.tc & 3))]),
        ("ipv6.flow", _hex(p.fl, 6)),
        ("ipv6.plen", str(p.plen)),
        *length_experts.ipv6_plen(p.plen, reported),
        ("ipv6.nxt", str(p.nh)),
        ("ipv6.hlim", str(p.hlim)),
        ("ipv6.src", src),
        ("ipv6.addr", src),
        ("ipv6.src_host", src),
        ("ipv6.host", src),
        ("ipv6.dst", dst),
        ("ipv6.addr", dst),
        ("ipv6.dst_host", dst),
        ("ipv6.host", dst),
    ]


def _bits(f) -> int:
    return f.size if isinstance(f, BitField) else 8 * getattr(f, "sz", 0)


def _addr16(text, v6: bool) -> bytes:
    try:
        return ipaddress.ip_address(text).packed if v6 else b"\0" * 10 + b"\xff\xff" + ipaddress.ip_address(text).packed
    except ValueError:
        return b""


def _header_bytes(layer) -> bytes:
    """The bytes of a fixed-size header (the sum of its fields)."""
    return bytes(layer.original or b"")[: sum(_bits(f) for f in layer.fields_desc) // 8]


def _ib_tree(layer) -> list:
    """The fields tshark shows of an IB header, in wire order; bits tshark does not name become
    `infiniband.reserved` items of their bytes."""
    raw = _header_bytes(layer)
    ws, alias = layer.ws_name, getattr(layer, "ws_alias", {}) or {}
    items, bit, pending = [], 0, None
    for f in layer.fields_desc:
        if f.name == getattr(layer, "truncated", None):  # the capture or the packet ends here
            break
        size = _bits(f)
        key = alias.get(f.name) or f"{ws}.{f.name}"
        if key in TSHARK_DISPLAY and not f.name.startswith("_"):
            if pending is not None:
                items.append((IB_PREFIX + "reserved", bytes_text(raw[pending // 8 : (bit + 7) // 8])))
                pending = None
            value = layer.getfieldval(f.name)
            value = bool(value) if TSHARK_DISPLAY[key] == 1 else value
            if key == "aeth.syndrome":
                items += _syndrome(value)
                bit += size
                continue
            items.append(
                (IB_PREFIX + key, value if isinstance(value, bool) else value_text(key, value, width=size // 8))
            )
        elif pending is None:
            pending = bit
        bit += size
    if pending is not None:
        items.append((IB_PREFIX + "reserved", bytes_text(raw[pending // 8 : (bit + 7) // 8])))
    return items


def _syndrome(s: int) -> list:
    kind = (s >> 5) & 3
    low = ("credit_count", "timer", "reserved_value", "error_code")[kind]
    return [
        (IB_PREFIX + "aeth.syndrome", str(s)),
        (
            IB_PREFIX + "aeth.syndrome_tree",
            [
                (IB_PREFIX + "aeth.syndrome.reserved", str(s >> 7)),
                (IB_PREFIX + "aeth.syndrome.opcode", str(kind)),
                (IB_PREFIX + f"aeth.syndrome.{low}", str(s & 0x1F)),
            ],
        ),
    ]


def _header(layer) -> list:
    ws = layer.ws_name
    if ws in ("icrc", "vcrc"):
        key = "invariant.crc" if ws == "icrc" else "variant.crc"
        return [(IB_PREFIX + key, value_text(key, layer.value))]
    if ws in SELF_NAMED:  # tshark shows these as the header's bytes, tree and all
        text = bytes_text(_header_bytes(layer))
        return [(IB_PREFIX + ws, text), (IB_PREFIX + ws + "_tree", [(IB_PREFIX + ws, text)])]
    if ws == "mad":  # the whole MAD: common header and data
        return [
            (IB_PREFIX + "mad", bytes_text(bytes(layer.original or b"")[:256])),
            (IB_PREFIX + "mad_tree", _ib_tree(layer)),
        ]
    return [(IB_PREFIX + ws, bytes_text(_header_bytes(layer))), (IB_PREFIX + ws + "_tree", _ib_tree(layer))]


def _ipoib(layer) -> list:
    """tshark shows what follows the transport headers as `infiniband.payload` and reads IPoIB's
    encapsulation header in its tree (as the raw header, `rwh`); the CRCs are not payload."""
    raw = bytes(layer.original or b"")
    crcs = 4 + (2 if layer.firstlayer().haslayer("VCRC") else 0)
    return [
        (IB_PREFIX + "payload", bytes_text(raw[: len(raw) - crcs] if len(raw) > crcs else raw)),
        (
            IB_PREFIX + "payload_tree",
            [(IB_PREFIX + "rwh.etype", _hex(layer.type, 4)), (IB_PREFIX + "reserved", bytes_text(raw[2:4]))],
        ),
    ]


def _bits_of(word: str) -> list:
    """(mask, field) of each bit Wireshark registers under the flag word `word`, by mask: the order of its
    proto_tree_add_bitmask list (packet-infiniband.c)."""
    from ibwire.report.packets.ws_labels import FIELDS

    return sorted((spec[3], key) for key, spec in FIELDS.items() if key.startswith(word + ".") and spec[3])


# Flag words tshark shows with each bit under them (PortInfo's CapabilityMask: `.... 1... = TrapSupported: 0x1`)
BIT_TREES = {IB_PREFIX + "portinfo.capabilitymask": None}


def _bit_tree(key: str, value: int) -> tuple:
    """The `_tree` of a flag word: each bit's value shifted down, as hex of the word's width (-T json)."""
    if BIT_TREES[key] is None:
        BIT_TREES[key] = _bits_of(key)
    return key + "_tree", [(k, f"0x{(value & m) >> (m & -m).bit_length() - 1:08x}") for m, k in BIT_TREES[key]]


def _mad_items(layer) -> list:
    items = []
    for prefix, fields, _ in mad_layer_entries(layer):
        for name, value in fields.items():
            key = f"{prefix}.{name}"
            for v in value if isinstance(value, list) else [value]:
                if IB_PREFIX + key.rpartition(".")[0] in BIT_TREES:  # a bit: in its word's _tree
                    continue
                if key in TSHARK_DISPLAY and not isinstance(v, (dict, list)):
                    items.append((IB_PREFIX + key, bool(v) if TSHARK_DISPLAY[key] == 1 else value_text(key, v)))
                    if IB_PREFIX + key in BIT_TREES:
                        items.append(_bit_tree(IB_PREFIX + key, int(v)))
    return items


def _foreign(layer) -> Optional[tuple]:
    dcb = dcb_layer(layer)
    if dcb is not None:
        return dcb
    if hasattr(layer, "ws_fields"):
        name, fields = layer.ws_proto, layer.ws_fields()
    else:
        name, fields = FOREIGN[type(layer)](layer)
    return name, pairs(name, fields)


def document(d, t: Times, session: Session) -> list:
    """The layers of one decoded frame (ibwire.decode.Decoded) as tshark's -T json writes them."""
    layers = [("frame", _frame(d, t, session))]
    if d.frame.linktype == LINKTYPE_ERF and len(d.frame.data) >= 16:
        layers.append(("erf", _erf(d.frame.data)))
    ib = None
    try:
        ib = _layers(d.packet, layers, t, session, d.flat, d.frame.wirelen - len(d.frame.data))
    except Exception:  # damaged beyond what a layer can show: said as tshark says it
        layers.append(MALFORMED)
    if ib is not None and "bth.analysis" in d.layers:  # as tshark writes tcp.analysis in the tcp layer
        ib.append(
            (
                IB_PREFIX + "bth.analysis",
                [
                    (
                        IB_PREFIX + f"bth.analysis.{k}",
                        v if isinstance(v, bool) else f"{v:.9f}" if isinstance(v, float) else str(v),
                    )
                    for k, v in d.layers["bth.analysis"].items()
                ],
            )
        )
    if d.flat.get("nvme-rdma.cmd.qid") is not None or "nvme-rdma" in d.layers:
        from ibwire.report.packets.nvme_doc import frame_layers

        layers += frame_layers(d.flat, any(name.startswith("nvme") for name, _ in layers))
    if ib is not None:  # tshark writes the CRCs last in the infiniband layer
        crcs = [i for i in ib if i[0] in (IB_PREFIX + "invariant.crc", IB_PREFIX + "variant.crc")]
        ib[:] = [i for i in ib if i not in crcs] + crcs
    return layers


MALFORMED = (
    "_ws.malformed",
    [
        (
            "_ws.expert",
            [
                ("_ws.malformed", ""),
                ("_ws.expert.message", "Malformed Packet (Exception occurred)"),
                ("_ws.expert.severity", "8388608"),
                ("_ws.expert.group", "117440512"),
            ],
        )
    ],
)


def _ib_crc(layer) -> bool:
    """The ICRC or VCRC of an IPoIB frame (what follows an ICMP message there)."""
    return getattr(layer, "ws_name", "") in ("icrc", "vcrc") and isinstance(layer.firstlayer(), IBLayer)


def _walk(t: Times, session: "Session", flat):
    """scapy packet -> its layers, as _layers makes a frame's (for the datagram an ICMP error carries)."""
    return lambda p: (lambda out: _layers(p, out, t, session, flat) and out or out)([])


def _layers(layer, layers: list, t: Times, session: "Session", flat=None, spare: Optional[int] = None) -> list:
    """Append the layers of the scapy packet `layer` to `layers`; the infiniband layer's items (or None).
    `spare`: the frame's bytes past those captured (its IP and UDP lengths then checked, length_experts)."""
    ib, payload = None, None  # (the IP payload's reported bytes)
    while layer is not None and not isinstance(layer, NoPayload):
        reported = None if spare is None or layer.original is None else len(layer.original) + spare
        cls = type(layer)
        if cls is Ether:
            layers.append(("eth", _eth(layer)))
        elif cls is Dot1Q:
            layers.append(("vlan", _vlan(layer)))
        elif cls is IP:
            layers.append(("ip", _ip(layer, reported)))
            payload = length_experts.payload(layer.len, layer.ihl * 4, reported)
        elif cls is IPv6:
            layers.append(("ipv6", _ipv6(layer, reported)))
            payload = length_experts.payload(layer.plen + 40, 40, reported)
        elif cls is UDP:
            layers.append(
                ("udp", _udp(session, layer, t.epoch, payload if type(layer.underlayer) in (IP, IPv6) else None))
            )
        elif cls is TCP and carried(layer):  # in an ICMP error: tshark's error-packet TCP
            layers.append(("tcp", error_tcp_items(layer, t.epoch, session)))
        elif cls is TCP:
            layers.append(("tcp", tcp_items(layer, (flat or {}).get("frame.number", 0), t.epoch, session)))
        elif cls is ICMP:  # the message holds what follows it, up to the IB CRCs
            layers += icmp_items(layer, flat or {}, t.epoch, session, frame_time, _walk(t, session, flat))
            while not isinstance(layer.payload, NoPayload) and not _ib_crc(layer.payload):
                layer = layer.payload
        elif cls.__name__.startswith("ICMPv6") and cls.__module__ == "scapy.layers.inet6":
            layers += icmpv6_items(layer, flat or {}, t.epoch, session, _walk(t, session, flat))
            while not isinstance(layer.payload, NoPayload) and not _ib_crc(layer.payload):
                layer = layer.payload
        elif cls.__name__ == "MAD" and cls.__module__.startswith("dissectors.mad"):
            ib += _header(layer) + _mad_class(layer)
            break  # the MAD holds the rest of the packet but the CRCs
        elif cls.__module__ == "dissectors.nvme":
            from ibwire.report.packets.nvme_doc import nvme_layers

            layers += nvme_layers(layer, flat)
        elif cls.__module__ == "dissectors.iser":
            from ibwire.report.packets.iser_doc import iser_layers

            layers += iser_layers(layer, MALFORMED)
        elif cls.__module__ in ("dissectors.rpcrdma", "dissectors.smbdirect"):
            from ibwire.report.packets.rpcrdma_doc import tree_layers

            layers += tree_layers(layer, MALFORMED)
        elif isinstance(layer, IBLayer) and layer.ws_name not in ("erf", "erf.ehdr", "pad", "cnp"):
            if ib is None:
                ib = []
                layers.append(("infiniband", ib))
            ib += _ipoib(layer) if layer.ws_name == "ipoib" else _header(layer) if layer.ws_name != "rwh" else []
        elif cls is Raw and layer.load:  # with the BTH's pad bytes, which tshark counts in the payload
            load = layer.load + (layer.payload.pad if getattr(layer.payload, "ws_name", "") == "pad" else b"")
            layers.append(("data", [("data.data", bytes_text(load)), ("data.len", str(len(load)))]))
        elif cls in FOREIGN or hasattr(layer, "ws_fields"):
            name, items = _foreign(layer)
            if name in MERGED and layers and layers[-1][0] == name:
                layers[-1][1].extend(items)  # one lldp/macc layer for all its TLVs/parts, as tshark
            else:
                layers.append((name, items))
        layer = layer.payload
    if ib is not None and layer is not None and not isinstance(layer, NoPayload):
        for crc in ("ICRC", "VCRC"):  # after a MAD: its CRCs, which the walk stopped before
            if layer.haslayer(crc):
                ib += _header(layer.getlayer(crc))
    return ib


# tshark's containers of each MAD class's own header and attribute (packet-infiniband.c), by the whole MAD's
# byte ranges: (key of the container, its bytes, [items: header field names or (reserved from, to)], the
# attribute's container and its bytes).  SMInfo gets its attribute container twice, a Notice its own 64-byte one
# inside (NOTICE).
_SMP_DATA = ("smplid.smpdata", (64, 128))
MAD_CLASSES = {
    0x01: ("smplid", (0, 256), ["smplid.mkey", (32, 64)], _SMP_DATA, [(128, 256)]),
    0x81: (
        "smpdirected",
        (0, 256),
        [
            "smpdirected.d",
            "smpdirected.smpstatus",
            "smpdirected.hoppointer",
            "smpdirected.hopcount",
            "smplid.mkey",
            "smpdirected.drslid",
            "smpdirected.drdlid",
            (36, 64),
        ],
        _SMP_DATA,
        ["smpdirected.initialpath", "smpdirected.returnpath"],
    ),
    0x03: (
        "sa.drdlid",
        (0, 256),
        ["sa.smkey", "sa.attributeoffset", (50, 52), "sa.componentmask"],
        ("sa.drdlid", (56, 256)),
        [],
    ),
    0x07: (None, None, [], ("smplid.smpdata", (24, 256)), []),
}
TWICE = {"smplid.smpdata": (0x0020,), "sa.drdlid": None}  # attribute IDs (None: all)
NOTICE = IB_PREFIX + "smplid.smpdata"  # packet-infiniband.c's key of a Notice's container and of its trap's


def _mad_class(mad) -> list:
    """What follows the MAD's common header: the class's header fields and the attribute's, in tshark's
    containers where MAD_CLASSES knows them, else one after another."""
    raw = bytes(mad.original or b"")[:256]
    header, attr = {}, []
    for layer in _chain(mad.payload):
        for key, text in _mad_items(layer):
            if key.split(".")[1] in ("smplid", "smpdirected", "rmpp", "sa") and key.count(".") == 2:
                header.setdefault(key, text)
            else:
                attr.append((key, text))
    attr = _cm_nested(attr, raw)
    notice = _notice_nested(mad, attr)
    rmpp = [(k, v) for k, v in header.items() if k.startswith(IB_PREFIX + "rmpp.")]
    out = [(IB_PREFIX + "rmpp", bytes_text(raw[24:36])), (IB_PREFIX + "rmpp_tree", rmpp)] if rmpp else []
    spec = MAD_CLASSES.get(mad.mgmtclass)
    if spec is None or len(raw) < 256:
        return out + [(k, v) for k, v in header.items() if (k, v) not in rmpp] + attr
    name, span, head, (data_key, data_span), tail = spec

    def items(names):
        return [
            (IB_PREFIX + "reserved", bytes_text(raw[n[0] : n[1]]))
            if isinstance(n, tuple)
            else (IB_PREFIX + n, header.get(IB_PREFIX + n, ""))
            for n in names
        ]

    data = bytes_text(raw[data_span[0] : data_span[1]])
    if any(k == IB_PREFIX + "p_keytable.p_keybase" for k, _ in attr):  # tshark's P_KeyTable block subtree
        attr = [(IB_PREFIX + "p_keytable.p_keytableblock", data), (IB_PREFIX + "p_keytable.p_keytableblock_tree", attr)]
    twice = TWICE.get(data_key, ())
    inner = [(IB_PREFIX + data_key, data), (IB_PREFIX + data_key + "_tree", attr)]
    if notice is not None:
        start = data_span[0]
        inner = [
            (IB_PREFIX + data_key, data),
            (
                IB_PREFIX + data_key + "_tree",
                [(NOTICE, bytes_text(raw[start : start + 64])), (NOTICE + "_tree", notice)],
            ),
        ]
    elif twice is None or mad.attributeid in (twice or ()):
        inner = [(IB_PREFIX + data_key, data), (IB_PREFIX + data_key + "_tree", inner)]
    body = items(head) + inner + items(tail)
    if name is None:
        return out + body
    return out + [(IB_PREFIX + name, bytes_text(raw[span[0] : span[1]])), (IB_PREFIX + name + "_tree", body)]


def _notice_nested(mad, attr: list) -> Optional[list]:
    """A Notice's items as packet-infiniband.c nests them (None when the attribute is no Notice): its trap's
    fields under a container of the 54 DataDetails bytes placed before the DataDetails item, decoded by the
    TrapNumber/DeviceID whether IsGeneric is set or not (a trap tshark does not know: the container alone)."""
    notice = next((x for x in _chain(mad.payload) if isinstance(x, Notice)), None)
    if notice is None or IB_PREFIX + "notice.datadetails" not in dict(attr):
        return None if notice is None else attr
    trap = [(k, v) for k, v in attr if k.startswith(IB_PREFIX + "trap.")]
    known = TRAP_LAYERS.get(notice.trapnumberdeviceid)
    if not trap and known is not None:  # a vendor's notice (IsGeneric 0) numbered as a generic trap
        trap = _mad_items(known(notice.datadetails))
    out = []
    for k, v in attr:
        if k == IB_PREFIX + "notice.datadetails":
            out += [(NOTICE, v)] + ([(NOTICE + "_tree", trap)] if trap else [])
        if not k.startswith(IB_PREFIX + "trap."):
            out.append((k, v))
    return out


REQ_PRIVATE = slice(164, 256)  # a CM REQ's private data: the last 92 bytes of its MAD (IBA §12.6.5)


def _cm_nested(attr: list, raw: bytes) -> list:
    """A CM REQ's ServiceID parts under the ServiceID, and an IP CM private data's fields under
    `cm.req.ip_cm` in place of the private data (its IPv4 or its IPv6 addresses, by its IP version), as
    packet-infiniband.c nests them."""
    sid = [(k, v) for k, v in attr if k.startswith(IB_PREFIX + "cm.req.serviceid.")]
    ip = [(k, v) for k, v in attr if k.startswith(IB_PREFIX + "cm.req.ip_cm.")]
    if not sid and not ip:
        return attr
    v4 = dict(ip).get(IB_PREFIX + "cm.req.ip_cm.ipv") == "0x04"
    nested = {k for k, _ in sid + ip}
    ip = [(k, v) for k, v in ip if not k.endswith(("ip6", "ip4")) or k.endswith("ip4") == v4]
    ip_first = ip[0][0] if ip else None
    out = []
    for k, v in attr:
        if k == ip_first:  # the IP CM private data stands where the REQ's private data would
            out += [(IB_PREFIX + "cm.req.ip_cm", bytes_text(raw[REQ_PRIVATE])), (IB_PREFIX + "cm.req.ip_cm_tree", ip)]
        if k in nested:
            continue
        out.append((k, v))
        if k == IB_PREFIX + "cm.req.serviceid" and sid:
            out.append((IB_PREFIX + "cm.req.serviceid_tree", sid))
    return out


def _chain(layer):
    while (
        layer is not None and not isinstance(layer, NoPayload) and type(layer).__module__.startswith("dissectors.mad")
    ):
        yield layer
        layer = layer.payload


# ---- selection (-e, -j, -J) ----


def leaves(items: list, out: list) -> list:
    """Every (key, value) of a document, depth first."""
    for k, v in items:
        if isinstance(v, list):
            leaves(v, out)
        else:
            out.append((k, v))
    return out


def only_fields(layers: list, keys: List[str]) -> list:
    """-e: each named field's values as a list (Wireshark's names: `infiniband.bth.psn`), in -e order."""
    found = {}
    for _, items in layers:
        for k, v in leaves(items, []):
            found.setdefault(k, []).append(v)
    return [(k, found[k]) for k in keys if k in found]


def only_layers(layers: list, names: List[str], with_children: bool) -> list:
    """-j (the named protocols, their subtrees folded) / -J (the named protocols whole); every other layer
    is folded to {"filtered": name}, as tshark writes them."""
    out = []
    for name, items in layers:
        if name not in names:
            out.append((name, [(FILTERED, name)]))
        elif with_children:
            out.append((name, items))
        else:
            out.append(
                (
                    name,
                    [(k, [(FILTERED, k.removesuffix("_tree"))]) if isinstance(v, list) else (k, v) for k, v in items],
                )
            )
    return out


# ---- writers ----


def _text(v, ek: bool):
    if isinstance(v, bool):
        return v if ek else ("1" if v else "0")
    if ek and isinstance(v, (Flag, Empty)):
        return v == "1" if isinstance(v, Flag) else None
    return getattr(v, "iso", v) if ek else v  # (an absolute time: UTC, ISO 8601)


def json_text(index: str, layers: list, fields_only: bool = False) -> str:
    """One packet as tshark -T json writes it (two-space indent, keys repeated where tshark repeats them)."""
    lines = [
        "  {",
        f'    "_index": "{index}",',
        '    "_type": "doc",',
        '    "_score": null,',
        '    "_source": {',
        '      "layers": {' if layers else '      "layers": {}',
    ]  # {}: no -e field in the packet
    _write(layers, 8, lines, fields_only)
    lines += (["      }"] if layers else []) + ["    }", "  }"]
    return "\n".join(lines)


def _write(items: list, indent: int, lines: list, fields_only: bool) -> None:
    pad = " " * indent
    for i, (k, v) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(v, list) and fields_only:
            lines.append(f"{pad}{json.dumps(k)}: [")
            lines += [f"{pad}  {_json_string(_text(x, False))}{',' if j < len(v) - 1 else ''}" for j, x in enumerate(v)]
            lines.append(f"{pad}]{comma}")
        elif isinstance(v, list):
            lines.append(f"{pad}{json.dumps(k)}: {{")
            _write(v, indent + 2, lines, False)
            lines.append(f"{pad}}}{comma}")
        else:
            lines.append(f"{pad}{json.dumps(k)}: {_json_string(_text(v, False))}{comma}")


def _json_string(text: str) -> str:
    """A -T json value as tshark writes it: characters beyond ASCII as themselves (UTF-8), not \\u escapes."""
    return json.dumps(text, ensure_ascii=False)


def ek_text(timestamp_ms: int, layers: list, fields_only: bool = False, folded: bool = False) -> str:
    """The document line of tshark -T ek: keys `<layer>_<field>` with dots as underscores, trees
    flattened, siblings with one key merged into a list; with -e, the fields alone; with -j (`folded`),
    each item of a selected layer as {"filtered": its name}."""
    if fields_only:
        body = {k.replace(".", "_"): [_text(x, True) for x in v] for k, v in layers}
        return json.dumps({"timestamp": str(timestamp_ms), "layers": body}, separators=(",", ":"))
    parts = []
    for name, items in layers:
        if items and items[0][0] == FILTERED and len(items) == 1:
            inner = f'"filtered":{json.dumps(items[0][1])}'
        elif folded:
            folds = {}
            for k, v in items:
                if not (isinstance(v, list) and k.endswith("_tree")):
                    key = "text" if isinstance(v, list) else f"{name}_{k}".replace(".", "_")
                    folds.setdefault(key, (key, []))[1].append({FILTERED: "text" if isinstance(v, list) else k})
            inner = _ek_pairs(folds.values())
        else:
            inner = _ek_pairs(ek_groups(name, items))
        parts.append(f"{json.dumps(name)}:{{{inner}}}")
    return _ek_line(timestamp_ms, parts)


def _ek_line(timestamp_ms, parts: list) -> str:
    return f'{{"timestamp":"{timestamp_ms}","layers":{{{",".join(parts)}}}}}'


def ek_index(index: str) -> str:
    """The line tshark -T ek writes before each document."""
    return f'{{"index":{{"_index":"{index}","_type":"doc"}}}}\n'


def ek_grouped_text(timestamp_ms, layers: list) -> str:
    """ek_text of a whole document from its layers' groups [(layer, ek_groups(layer, items))]."""
    return _ek_line(timestamp_ms, [f"{json.dumps(name)}:{{{_ek_pairs(groups)}}}" for name, groups in layers])


def ek_groups(layer: str, items: list) -> list:
    """A layer's tree as tshark -T ek writes it (print.c, ek_fill_attr): every node, depth first, grouped by
    its own name and its parent's (a field's subtree is its parent, a text label's subtree "text", the top
    level the layer), each group once where its first node stands: [(name, [values])]; frame.time in UTC,
    ISO 8601."""
    groups = {}
    epoch = {k: v for k, v in items if not isinstance(v, list)}.get("frame.time_epoch")

    def walk(nodes, parent):
        for k, v in nodes:
            if k == "frame.time" and epoch:
                sec, _, frac = epoch.partition(".")
                v = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(sec))) + f".{frac}Z"
            if isinstance(v, list) and k.endswith("_tree"):
                walk(v, k[:-5])
            elif isinstance(v, list) and k in OBJECTS:  # an expert item's own field has no value
                v = [(x, Empty(y) if y == "" and not x.startswith(k) else y) for x, y in v]
                inner = _EkObject(f"{{{_ek_pairs(ek_groups(layer, v))}}}")
                groups.setdefault((parent, k), (ek_name(layer, k), []))[1].append(inner)
            elif isinstance(v, list) and k in CARRIED:  # its fields named after it
                inner = _EkObject(f"{{{_ek_pairs(ek_groups(k, v))}}}")
                groups.setdefault((parent, k), (k, []))[1].append(inner)
            elif isinstance(v, list) and is_field(k):
                groups.setdefault((parent, k), (ek_name(layer, k), []))[1].append(None)
                walk(v, k)
            elif isinstance(v, list):
                groups.setdefault((parent, "text"), ("text", []))[1].append(k)
                walk(v, "text")
            elif k == "_ws.malformed":  # a Malformed Packet item: a protocol's node without fields
                groups.setdefault((parent, k), ("_ws_malformed", []))[1].append(_EkObject("{}"))
            else:
                groups.setdefault((parent, k), (ek_name(layer, k), []))[1].append(_text(v, True))

    walk(items, layer)
    return list(groups.values())


class _EkObject(str):
    """A protocol's node as -T ek writes it inside a layer: the JSON text of its object."""


def _ek_value(v) -> str:
    return v if isinstance(v, _EkObject) else json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def _ek_pairs(groups) -> str:
    """`"name":value` of each (name, values) group, several values as a list; text in UTF-8, as tshark's."""
    return ",".join(
        f"{json.dumps(n)}:{_ek_value(v[0]) if len(v) == 1 else '[' + ','.join(map(_ek_value, v)) + ']'}"
        for n, v in groups
    )
