"""Every display-filter field ibwire knows, with its type: the names a filter, `-e` and JSON keys use.

Encapsulation fields carry Wireshark's names and types (tshark -G fields); InfiniBand fields come from the
scapy layers themselves (dissectors/: `ws_name`, field classes, `ws_alias`, `ws_extra`), read the first
time a filter names one, so a filter on transport fields never loads scapy.
"""
from functools import lru_cache
from typing import Dict, Optional

UINT, INT, FLOAT, STRING, BYTES, MAC, IPV4, IPV6, PROTO = (
    "uint", "int", "float", "string", "bytes", "mac", "ipv4", "ipv6", "protocol")


def _group(proto: str, ftype: str, *names: str) -> Dict[str, str]:
    return {f"{proto}.{n}": ftype for n in names}


ENCAP: Dict[str, str] = {
    **{p: PROTO for p in ("frame", "eth", "vlan", "ip", "ipv6", "udp", "tcp", "arp", "icmp", "icmpv6", "sll", "erf",
                          "ipoib", "infiniband", "infiniband_link", "_ws.malformed")},
    **_group("frame", UINT, "number", "len", "cap_len", "linktype"), "frame.protocols": STRING,
    **_group("frame", FLOAT, "time_epoch", "time_relative", "time_delta"),
    **_group("eth", MAC, "src", "dst", "addr"), "eth.type": UINT,
    **_group("vlan", UINT, "id", "priority", "dei", "etype"),
    **_group("ip", IPV4, "src", "dst", "addr"),
    **_group("ip", UINT, "version", "hdr_len", "dsfield", "dsfield.dscp", "dsfield.ecn", "len", "id", "ttl",
             "proto", "checksum"),
    **_group("ipv6", IPV6, "src", "dst", "addr"),
    **_group("ipv6", UINT, "tclass", "tclass.dscp", "tclass.ecn", "flow", "plen", "nxt", "hlim"),
    **_group("udp", UINT, "srcport", "dstport", "port", "length", "checksum"),
    **_group("arp", UINT, "hw.type", "proto.type", "hw.size", "proto.size", "opcode"),
    **_group("arp", BYTES, "src.hw", "dst.hw"), **_group("arp", MAC, "src.hw_mac", "dst.hw_mac"),
    **_group("arp", IPV4, "src.proto_ipv4", "dst.proto_ipv4"),
    **_group("icmp", UINT, "type", "code", "ident", "seq"),
    **_group("icmpv6", UINT, "type", "code", "echo.identifier", "echo.sequence_number", "nd.na.flag.r",
             "nd.na.flag.s", "nd.na.flag.o"), **_group("icmpv6", IPV6, "nd.ns.target_address", "nd.na.target_address"),
    **_group("tcp", UINT, "srcport", "dstport", "port", "seq", "ack", "flags", "window_size_value"),
    **_group("sll", UINT, "pkttype", "hatype", "halen", "etype"),
    # ibwire's own, in the same style: CRC verdicts, the encapsulation kind, RoCE payload length
    **_group("icrc", STRING, "status"), **_group("vcrc", STRING, "status"), "link.kind": STRING,
    "payload.len": UINT, "mad.summary": STRING, "payload": PROTO, "padding": PROTO,
    "payload.data": BYTES, "payload.length": UINT, "padding.data": BYTES,
    "rmpp.reassembled": PROTO, **_group("rmpp.reassembled", UINT, "segments", "records", "complete"),
}

# Fields present several times per frame by definition: Wireshark's "either end" fields, in header order.
EITHER = {"eth.addr": ("eth.dst", "eth.src"), "ip.addr": ("ip.src", "ip.dst"), "ipv6.addr": ("ipv6.src", "ipv6.dst"),
          "udp.port": ("udp.srcport", "udp.dstport"), "tcp.port": ("tcp.srcport", "tcp.dstport")}


# Widths in bits of the record fields narrower than their storage (IBA §9.2-9.3, IEEE 802.1Q, RFC 3168).
NARROW = {"bth.psn": 24, "bth.destqp": 24, "aeth.msn": 24, "deth.srcqp": 24, "xrceth.xrcsrq": 24, "bth.padcnt": 2,
          "bth.tver": 4, "lrh.sl": 4, "lrh.vl": 4, "vlan.id": 12, "ip.dsfield.ecn": 2, "ipv6.tclass.ecn": 2}


def max_value(key: str) -> Optional[int]:
    """The largest value an unsigned field can hold, when ibwire knows its width without scapy."""
    if key in NARROW:
        return (1 << NARROW[key]) - 1
    from .fast.records import KEY_FIELDS, RECORD
    col = KEY_FIELDS.get(key)
    if col is not None and RECORD[col].kind == "u":
        return (1 << (8 * RECORD[col].itemsize)) - 1
    return None


WIDE = set()      # 64-bit fields (filled with layer_fields()): JSON writes them as "0x…" strings


@lru_cache(maxsize=1)
def layer_fields() -> Dict[str, str]:
    """Name -> type of every field and protocol the scapy layers define (loads scapy)."""
    return layer_field_types()


def field_type(key: str, load: bool = True) -> Optional[str]:
    """The type of a field or protocol name (without `infiniband.`), None when ibwire does not know it.
    With load=False only names known without scapy are answered."""
    if key in ENCAP:
        return ENCAP[key]
    rec = record_types()
    if key in rec:
        return rec[key]
    return layer_fields().get(key) if load else None


@lru_cache(maxsize=1)
def record_types() -> Dict[str, str]:
    """Name -> type of the fields the compiled records hold (ibwire.fast.records.FIELD_KEYS)."""
    from .fast.records import FIELD_KEYS, RECORD
    out = {}
    for col, key in FIELD_KEYS.items():
        kind = RECORD[col].kind
        if key.startswith("addr.") or key in ENCAP:
            continue
        out[key] = UINT if kind in "ui" else FLOAT if kind == "f" else BYTES
    out.update({"grh.sgid": IPV6, "grh.dgid": IPV6})
    for key in list(out):
        out.setdefault(key.split(".")[0], PROTO)
    return out


def known_names():
    return sorted(set(ENCAP) | set(record_types()) | set(layer_fields()))


def _scapy_type(field) -> str:
    from scapy.fields import IP6Field, IPField, MACField, SignedByteField, SignedIntField, SignedLongField, SignedShortField, StrField
    while hasattr(field, "fld"):                       # conditional / multiple-type wrappers
        field = field.fld
    if isinstance(field, IP6Field):
        return IPV6
    if isinstance(field, IPField):
        return IPV4
    if isinstance(field, MACField):
        return MAC
    if type(field).__name__ == "TextField":
        return STRING
    if isinstance(field, StrField):
        return BYTES
    if isinstance(field, (SignedByteField, SignedShortField, SignedIntField, SignedLongField)):
        return INT
    return UINT


def layer_field_types() -> dict:
    """Name -> type of every protocol and field the scapy layers of dissectors/ give a Wireshark name."""
    import importlib
    import pkgutil

    import dissectors
    import dissectors.mad
    from scapy.fields import PacketField, PacketListField
    from scapy.packet import Packet
    for pkg in (dissectors, dissectors.mad):
        for m in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{pkg.__name__}.{m.name}")
    out = {}
    todo = [Packet]
    seen = set()
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
        ws = getattr(cls, "ws_name", "") if cls.__module__.startswith("dissectors") else ""
        if not ws:
            continue
        out.setdefault(ws, PROTO)
        alias = getattr(cls, "ws_alias", {}) or {}
        for f in cls.fields_desc:
            if f.name.startswith("_") or isinstance(f, (PacketField, PacketListField)):
                continue
            ftype = _scapy_type(f)
            wide = getattr(f, "sz", 0) == 8 or getattr(f, "size", 0) == 64
            for key in (f"{ws}.{f.name}", alias.get(f.name)):
                if key:
                    out.setdefault(key, ftype)
                    if wide and ftype == UINT:
                        WIDE.add(key)
        try:
            extra = cls().ws_extra() if hasattr(cls, "ws_extra") else {}
        except Exception:
            extra = {}
        for name, value in extra.items():
            out.setdefault(f"{ws}.{name}", STRING if isinstance(value, str) else UINT)
    for key in list(out):                              # "cm.req.ip_cm" -> "cm", "cm.req" are protocols too
        parts = key.split(".")
        for i in range(1, len(parts)):
            out.setdefault(".".join(parts[:i]), PROTO)
    return out
