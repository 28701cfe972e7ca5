"""Scapy packet → Wireshark-named fields: nested by layer for JSON, flat for filters and CSV.

IB layers name themselves (dissectors.base); the few non-IB layers a RoCE or IPoIB frame carries are
mapped here to Wireshark's names (`eth.src`, `vlan.id`, `ip.dsfield.ecn`, `udp.dstport` …).
"""

import ipaddress

from scapy.contrib.lldp import (
    LLDPDUChassisID,
    LLDPDUEndOfLLDPDU,
    LLDPDUGenericOrganisationSpecific,
    LLDPDUManagementAddress,
    LLDPDUPortDescription,
    LLDPDUPortID,
    LLDPDUSystemCapabilities,
    LLDPDUSystemDescription,
    LLDPDUSystemName,
    LLDPDUTimeToLive,
)
from scapy.fields import IP6Field
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6MLReport2,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6ND_RS,
    ICMPv6PacketTooBig,
    ICMPv6ParamProblem,
    ICMPv6TimeExceeded,
    ICMPv6Unknown,
    IPv6,
)
from scapy.layers.l2 import ARP, CookedLinux, Dot1Q, Ether
from scapy.packet import NoPayload, Padding, Raw

from dissectors.base import IBLayer
from dissectors.dcbfacts import LLDP_CAPABILITIES
from dissectors.lldp_org import org_tlv

ICMPV6 = (
    ICMPv6DestUnreach,
    ICMPv6PacketTooBig,
    ICMPv6ParamProblem,
    ICMPv6TimeExceeded,
    ICMPv6EchoRequest,
    ICMPv6EchoReply,
    ICMPv6ND_RS,
    ICMPv6ND_RA,
    ICMPv6ND_NS,
    ICMPv6ND_NA,
    ICMPv6MLReport2,
    ICMPv6Unknown,
)


def _plain(value):
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _eth(p):
    return "eth", {"dst": p.dst, "src": p.src, "type": p.type}


def _vlan(p):
    return "vlan", {"priority": p.prio, "dei": p.dei, "id": p.vlan, "etype": p.type}


def _ip(p):
    return "ip", {
        "version": p.version,
        "hdr_len": p.ihl * 4 if p.ihl else None,
        "dsfield.dscp": p.tos >> 2,
        "dsfield.ecn": p.tos & 3,
        "len": p.len,
        "id": p.id,
        "ttl": p.ttl,
        "proto": p.proto,
        "checksum": p.chksum,
        "src": p.src,
        "dst": p.dst,
    }


def _ipv6(p):
    return "ipv6", {
        "tclass": p.tc,
        "tclass.dscp": p.tc >> 2,
        "tclass.ecn": p.tc & 3,
        "flow": p.fl,
        "plen": p.plen,
        "nxt": p.nh,
        "hlim": p.hlim,
        "src": p.src,
        "dst": p.dst,
    }


def _udp(p):
    return "udp", {"srcport": p.sport, "dstport": p.dport, "length": p.len, "checksum": p.chksum}


def _arp(p):
    hw = "hw_mac" if p.hwlen == 6 else "hw"  # Wireshark: an Ethernet address, else bytes
    return "arp", {
        "hw.type": p.hwtype,
        "proto.type": p.ptype,
        "hw.size": p.hwlen,
        "proto.size": p.plen,
        "opcode": p.op,
        f"src.{hw}": _plain(p.hwsrc) if isinstance(p.hwsrc, bytes) else p.hwsrc,
        "src.proto_ipv4": p.psrc,
        f"dst.{hw}": _plain(p.hwdst) if isinstance(p.hwdst, bytes) else p.hwdst,
        "dst.proto_ipv4": p.pdst,
    }


def _tcp(p):
    return "tcp", {
        "srcport": p.sport,
        "dstport": p.dport,
        "seq": p.seq,
        "ack": p.ack,
        "flags": int(p.flags),
        "window_size_value": p.window,
    }


def _icmp(p):
    out = {"type": p.type, "code": p.code}
    if p.type in (0, 8):  # echo (RFC 792): Wireshark's icmp.ident, icmp.seq
        out.update({"ident": p.id, "seq": p.seq})
    return "icmp", out


def _icmpv6(p):
    """ICMPv6 (RFC 4443) and neighbour discovery (RFC 4861) with Wireshark's icmpv6.* names."""
    out = {"type": p.type, "code": p.fields.get("code", p.fields.get("res", 0))}  # MLDv2's code is scapy's `res`
    if p.type in (128, 129):
        out.update({"echo.identifier": p.id, "echo.sequence_number": p.seq})
    elif p.type == 135:
        out["nd.ns.target_address"] = p.tgt
    elif p.type == 136:
        out.update({"nd.na.flag.r": p.R, "nd.na.flag.s": p.S, "nd.na.flag.o": p.O, "nd.na.target_address": p.tgt})
    return "icmpv6", out


def _lldp_tlv(p, named):
    """One of scapy's standard LLDP TLVs (IEEE 802.1AB §8.5) under Wireshark's lldp.* names."""
    out = {"tlv.type": p._type, "tlv.len": p._length}
    out.update(named)
    return "lldp", out


def _lldp_id(p, what, mac_subtype):
    value = p.id if p.subtype == mac_subtype else _text(p.id)
    return _lldp_tlv(
        p, {f"{what}.subtype": p.subtype, f"{what}.id.mac" if p.subtype == mac_subtype else f"{what}.id": value}
    )


def _lldp_capabilities(p):
    """System Capabilities (IEEE 802.1AB §8.5.8): what the system can be, what it has enabled, bit by bit."""
    raw = bytes(p)[2:6].ljust(4, b"\0")
    out = {}
    for which, word in (("system_cap", raw[:2]), ("enable_system_cap", raw[2:])):
        bits = int.from_bytes(word, "big")
        out[f"tlv.{which}"] = bits
        out.update({f"tlv.{which}.{name}": bits >> i & 1 for i, name in enumerate(LLDP_CAPABILITIES)})
    return _lldp_tlv(p, out)


def _oid(ber: bytes) -> str:
    """An object identifier's BER content octets as dotted numbers (X.690 §8.19)."""
    arcs, n = [], 0
    for b in ber:
        n = n << 7 | b & 0x7F
        if not b & 0x80:
            arcs.append(n)
            n = 0
    if not arcs:
        return ""
    first = min(arcs[0] // 40, 2)
    return ".".join(map(str, [first, arcs[0] - 40 * first, *arcs[1:]]))


def _lldp_management(p):
    """Management Address (IEEE 802.1AB §8.5.9): the address by its IANA family, the interface, the OID."""
    addr, kind = bytes(p.management_address), p.management_address_subtype
    key = "mgn.addr.ip4" if kind == 1 and len(addr) == 4 else "mgn.addr.ip6" if kind == 2 and len(addr) == 16 else ""
    value = str(ipaddress.ip_address(addr)) if key else addr
    out = {
        "mgn.address.len": p._management_address_string_length,
        "mgn.address.subtype": kind,
        key or "mgn.addr.hex": value,
        "mgn.interface.subtype": p.interface_numbering_subtype,
        "mgn.interface.number": p.interface_number,
        "mgn.obj.len": p._oid_string_length,
    }
    if p._oid_string_length:
        out["mgn.obj.id"] = _oid(bytes(p.object_id))
    return _lldp_tlv(p, out)


def _lldp_org(p):
    """An organisationally specific TLV (IEEE 802.1AB §8.6), read by dissectors.lldp_org as Wireshark does."""
    return _lldp_tlv(p, org_tlv(p.org_code, p.subtype, bytes(p.data)))


LLDP = {
    LLDPDUChassisID: lambda p: _lldp_id(p, "chassis", 4),
    LLDPDUPortID: lambda p: _lldp_id(p, "port", 3),
    LLDPDUTimeToLive: lambda p: _lldp_tlv(p, {"time_to_live": p.ttl}),
    LLDPDUEndOfLLDPDU: lambda p: _lldp_tlv(p, {}),
    LLDPDUSystemName: lambda p: _lldp_tlv(p, {"tlv.system.name": _text(p.system_name)}),
    LLDPDUSystemDescription: lambda p: _lldp_tlv(p, {"tlv.system.desc": _text(p.description)}),
    LLDPDUPortDescription: lambda p: _lldp_tlv(p, {"port.desc": _text(p.description)}),
    LLDPDUSystemCapabilities: _lldp_capabilities,
    LLDPDUManagementAddress: _lldp_management,
    LLDPDUGenericOrganisationSpecific: _lldp_org,
}
MERGED = ("lldp", "macc")  # protocols made of several scapy layers: one entry, repeated fields as lists


def _text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _sll(p):
    return "sll", {"pkttype": p.pkttype, "hatype": p.lladdrtype, "halen": p.lladdrlen, "etype": p.proto}


FOREIGN = {
    Ether: _eth,
    Dot1Q: _vlan,
    IP: _ip,
    IPv6: _ipv6,
    UDP: _udp,
    TCP: _tcp,
    ARP: _arp,
    ICMP: _icmp,
    CookedLinux: _sll,
}
FOREIGN.update({cls: _icmpv6 for cls in ICMPV6})
FOREIGN.update(LLDP)


def ib_layer_fields(layer: IBLayer) -> dict:
    out = {}
    for f in layer.fields_desc:
        if f.name.startswith("_") or (layer.truncated and f.name not in layer.fields):  # not captured
            continue
        value = layer.getfieldval(f.name)
        if isinstance(f, IP6Field) and value is not None:
            value = str(ipaddress.IPv6Address(value))
        out[f.name] = _plain(value)
    out.update({k: _plain(v) for k, v in layer.ws_extra().items()})
    return out


def mad_layer_entries(layer):
    """A MAD layer's fields, following the attribute records and entries it holds (dissectors.mad)."""
    from dissectors.mad.base import _walk

    out = {}
    _walk(layer, out)
    groups = {}
    for key, value in out.items():
        prefix, _, name = key.rpartition(".")
        groups.setdefault(prefix or key, {})[name] = _plain(value)
    return [(prefix, fields, _MadGroup(prefix)) for prefix, fields in groups.items()]


class _MadGroup:
    """Stands for one group of MAD fields in nest_and_flatten (keys are already full names)."""

    def __init__(self, prefix):
        self.ws_name = prefix
        self.ws_alias = {}


def layer_fields(pkt):
    """[(layer key, {field: value}, layer)] for every decoded layer, outermost first."""
    result = []
    layer = pkt
    while not isinstance(layer, NoPayload):
        if type(layer).__module__.startswith("dissectors.mad"):
            result += mad_layer_entries(layer)
        elif hasattr(layer, "ws_fields"):  # dissectors.dcb: MAC control, DCBX
            result.append((layer.ws_proto, {k: _plain(v) for k, v in layer.ws_fields().items()}, layer))
        elif isinstance(layer, IBLayer):
            result.append((layer.ws_name, ib_layer_fields(layer), layer))
        elif type(layer) in FOREIGN:
            key, fields = FOREIGN[type(layer)](layer)
            result.append((key, fields, layer))
        elif isinstance(layer, Padding):
            result.append(("padding", {"data": bytes(layer.load).hex()}, layer))
        elif isinstance(layer, Raw):
            result.append(("payload", {"data": bytes(layer.load).hex(), "length": len(layer.load)}, layer))
        layer = layer.payload
    return result


def _merge(into: dict, fields: dict) -> None:
    """Add `fields` to `into`; a field seen again becomes the list of its values, in frame order."""
    for name, value in fields.items():
        if name not in into:
            into[name] = value
            continue
        have = into[name] if isinstance(into[name], list) else [into[name]]
        into[name] = have + (value if isinstance(value, list) else [value])


def nest_and_flatten(entries):
    """Nested {layer: {field: v}} (repeated layers merged, a second GRH/IP becoming a list) and the flat
    Wireshark-style key → value map (aliases applied; the outermost occurrence wins)."""
    nested, flat = {}, {}
    for key, fields, layer in entries:
        if key in MERGED:
            _merge(nested.setdefault(key, {}), fields)
            _merge(flat, {f"{key}.{name}": value for name, value in fields.items()})
            flat[key] = True
            continue
        if key in nested:
            if key in ("bth",):
                nested[key].update(fields)
            else:
                key = next(f"{key}{i}" for i in range(2, 99) if f"{key}{i}" not in nested)
                nested[key] = fields
        else:
            nested[key] = dict(fields)
        alias = getattr(layer, "ws_alias", {})
        base = getattr(layer, "ws_name", key) or key
        for name, value in fields.items():
            for full in (f"{base}.{name}", alias.get(name)):
                if full and full not in flat:
                    flat[full] = value
        if base not in flat:
            flat[base] = True
    return nested, flat
