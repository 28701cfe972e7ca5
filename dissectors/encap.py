"""Where IB transport appears inside other protocols, and the link-level containers around it.

* RoCEv1: Ethernet (or 802.1Q) ethertype 0x8915, GRH first (RoCE annex A16).
* RoCEv2: UDP port 4791 in either direction, BTH first (annex A17); `looks_like_roce2` is the heuristic
  for other ports: a plausible BTH whose ICRC checks, so ordinary UDP is never claimed.
* LRH next-header: 0 raw (RWH), 1 IPv6, 2 BTH, 3 GRH (IBA §7.7.3).
* ERF records (LINKTYPE_ERF 197) of type 21 (InfiniBand) and 25 (InfiniBand link packets), as
  Endace and ibdump write them (ERF Types Reference Guide).
* IPoIB (RFC 4391): the 4-byte encapsulation header (ethertype, reserved) inside UD payloads and as
  LINKTYPE_IPOIB (242); ARP over IB uses 20-byte hardware addresses (RFC 4391 §4).
"""

import struct

from scapy.fields import BitField, ByteField, LEIntField, ShortField, StrFixedLenField, XShortEnumField, XShortField
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw, bind_layers

from dissectors import crc
from dissectors.base import IBLayer
from dissectors.ib import BTH, GRH, GRH_NXTHDR_BTH, LNH_GLOBAL, LNH_IPV6, LNH_LOCAL, LNH_RAW, LRH
from dissectors.numbers import ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCE_V1, ROCE_V2_PORT
from dissectors.opcodes import OPCODES

ERF_TYPE_INFINIBAND = 21
ERF_TYPE_INFINIBAND_LINK = 25
ETHERTYPES = {ETHERTYPE_IPV4: "IPv4", ETHERTYPE_ARP: "ARP", ETHERTYPE_IPV6: "IPv6"}


class RWH(IBLayer):
    """Raw header after an LRH with LNH=0: reserved 16 bits and an ethertype (IBA §5.3)."""

    ws_name = "rwh"
    fields_desc = [XShortField("reserved", 0), XShortEnumField("etype", ETHERTYPE_IPV4, ETHERTYPES)]


class IPoIB(IBLayer):
    """IPoIB encapsulation header (RFC 4391 §6) inside a UD SEND payload; Wireshark names the ethertype
    `infiniband.rwh.etype`."""

    ws_name = "ipoib"
    ws_alias = {"type": "rwh.etype"}
    fields_desc = [XShortEnumField("type", ETHERTYPE_IPV4, ETHERTYPES), XShortField("reserved", 0)]


class IPoIBLink(IBLayer):
    """LINKTYPE_IPOIB (242) frame header: the same 4 bytes (Wireshark `ipoib.type`, `ipoib.reserved`)."""

    name = "IPoIB"
    ws_name = "ipoib"
    fields_desc = [XShortEnumField("type", ETHERTYPE_IPV4, ETHERTYPES), XShortField("reserved", 0)]


class ERF(IBLayer):
    """ERF record header (16 bytes): 64-bit little-endian timestamp, type, flags, rlen, lctr, wlen."""

    ws_name = "erf"
    ws_alias = {"ts_frac": "", "ts_sec": "", "type": "types.type"}
    fields_desc = [
        LEIntField("ts_frac", 0),
        LEIntField("ts_sec", 0),
        BitField("ext_header", 0, 1),
        BitField("type", ERF_TYPE_INFINIBAND, 7),
        ByteField("flags", 4),
        ShortField("rlen", None),
        ShortField("lctr", 0),
        ShortField("wlen", None),
    ]

    def post_build(self, p, pay):
        if self.rlen is None:
            p = p[:10] + struct.pack(">H", 16 + len(pay)) + p[12:]
        if self.wlen is None:
            ext, layer = 0, self.payload
            while isinstance(layer, ERFExtension):
                ext, layer = ext + 8, layer.payload
            p = p[:14] + struct.pack(">H", len(pay) - ext)
        return p + pay

    def extract_padding(self, s):
        ext = 0
        while self.ext_header and ext + 8 <= len(s) and (ext == 0 or s[ext - 8] & 0x80):
            ext += 8  # extension headers precede the record's wlen bytes
        if self.wlen is not None and ext + self.wlen < len(s):
            return s[: ext + self.wlen], s[ext + self.wlen :]
        return s, b""

    def guess_payload_class(self, payload):
        if self.ext_header:
            return ERFExtension
        return super().guess_payload_class(payload)


class ERFExtension(IBLayer):
    """An 8-byte ERF extension header: a 'more follow' bit, its type, 56 bits of type-specific data."""

    name = "ERF extension header"
    ws_name = "erf.ehdr"
    fields_desc = [BitField("more", 0, 1), BitField("type", 0, 7), StrFixedLenField("data", b"\0" * 7, 7)]

    def guess_payload_class(self, payload):
        if self.more:
            return ERFExtension
        erf = self.underlayer
        while erf is not None and not isinstance(erf, ERF):
            erf = erf.underlayer
        return ERF_PAYLOADS.get(erf.type if erf is not None else None, Raw)


class IBLink(IBLayer):
    """InfiniBand link (flow-control) packet, IBA §7.9.4: op, FCTBS, VL, FCCL, LPCRC."""

    name = "IB link"
    ws_name = "infiniband_link"
    fields_desc = [
        BitField("op", 0, 4),
        BitField("fctbs", 0, 12),
        BitField("vl", 0, 4),
        BitField("fccl", 0, 12),
        XShortField("lpcrc", 0),
    ]


def looks_like_roce2(udp_payload: bytes, ip_bytes: bytes) -> bool:
    """True when a UDP payload on a non-RoCE port is a BTH with a known opcode and a matching ICRC."""
    if len(udp_payload) < 16 or udp_payload[0] not in OPCODES or (udp_payload[1] & 0x0F) != 0:
        return False
    try:
        return struct.pack("<I", crc.icrc_roce2(ip_bytes[:-4])) == ip_bytes[-4:]
    except (IndexError, ValueError):
        return False


bind_layers(Ether, GRH, type=ETHERTYPE_ROCE_V1)
bind_layers(Dot1Q, GRH, type=ETHERTYPE_ROCE_V1)
bind_layers(UDP, BTH, dport=ROCE_V2_PORT)
bind_layers(UDP, BTH, sport=ROCE_V2_PORT)
bind_layers(GRH, BTH, nxthdr=GRH_NXTHDR_BTH)
bind_layers(LRH, BTH, lnh=LNH_LOCAL)
bind_layers(LRH, GRH, lnh=LNH_GLOBAL)
bind_layers(LRH, IPv6, lnh=LNH_IPV6)
bind_layers(LRH, RWH, lnh=LNH_RAW)
ERF_PAYLOADS = {ERF_TYPE_INFINIBAND: LRH, ERF_TYPE_INFINIBAND_LINK: IBLink}
bind_layers(ERF, LRH, type=ERF_TYPE_INFINIBAND, ext_header=0)
bind_layers(ERF, IBLink, type=ERF_TYPE_INFINIBAND_LINK, ext_header=0)
for _cls, _field in ((RWH, "etype"), (IPoIB, "type"), (IPoIBLink, "type")):
    for _etype, _upper in ((ETHERTYPE_IPV4, IP), (ETHERTYPE_IPV6, IPv6), (ETHERTYPE_ARP, ARP)):
        bind_layers(_cls, _upper, **{_field: _etype})
