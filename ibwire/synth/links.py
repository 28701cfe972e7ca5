"""Framing of an IB transport packet (BTH onwards) for each link type the generator writes.

roce2 / roce2-v6: Ethernet [802.1Q] / IPv4 or IPv6 / UDP 4791 / BTH… / ICRC (RoCE Annex A17);
roce1: Ethernet type 0x8915 / GRH / BTH… / ICRC (Annex A16); ib-erf and ib: LRH [GRH] / BTH… / ICRC / VCRC
(IBA §7.8), written as ERF type-21 records (link type 197) or raw (link type 247).  ICRC and VCRC are
computed with `dissectors.crc`; header templates are cached per flow so the per-packet work is small.
"""

import struct
from typing import Optional

from dissectors.crc import icrc_ib, icrc_roce1, icrc_roce2, vcrc
from dissectors.numbers import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_ROCE_V1,
    ETHERTYPE_VLAN,
    LINKTYPE_ERF,
    LINKTYPE_ETHERNET,
    LINKTYPE_INFINIBAND,
    ROCE_V2_PORT,
)
from ibwire.files.writers import erf_record
from ibwire.synth.headers import GRH, LRH

LINKS = ("roce2", "roce2-v6", "roce1", "ib-erf", "ib")
_IP4 = struct.Struct(">BBHHHBBH4s4s")
_IP6 = struct.Struct(">IHBB16s16s")
_UDP = struct.Struct(">HHHH")
_U32LE = struct.Struct("<I")
_U16LE = struct.Struct("<H")
NEXT_HDR_IBA = 0x1B
ECN_ECT0, ECN_CE = 0x02, 0x03
SRC_VLAN = object()  # frame(vlan=...) default: the sending port's own VLAN


def _ip4_checksum(hdr: bytes) -> int:
    s = sum(struct.unpack(">10H", hdr))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _udp6_checksum(src: bytes, dst: bytes, udp: bytes) -> int:
    data = src + dst + struct.pack(">IxxxB", len(udp), 17) + udp + (b"\0" if len(udp) & 1 else b"")
    s = sum(memoryview(data).cast("H"))  # native order sum, folded; byte-swapped below if little-endian
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    c = ~s & 0xFFFF
    if struct.pack("=H", 1) == b"\x01\x00":
        c = ((c & 0xFF) << 8) | (c >> 8)
    return c or 0xFFFF


class Link:
    """Turns transport bytes into a captured frame for one link type."""

    def __init__(self, name: str):
        if name not in LINKS:
            raise ValueError(name)
        self.name = name
        self.native = name in ("ib-erf", "ib")
        self.linktype = {"ib-erf": LINKTYPE_ERF, "ib": LINKTYPE_INFINIBAND}.get(name, LINKTYPE_ETHERNET)
        self._eth = {}
        self._ip4 = {}

    def frame(
        self,
        src,
        dst,
        tp: bytes,
        *,
        sl=0,
        vl=0,
        tclass=0,
        ecn: Optional[int] = None,
        dlid=None,
        dgid=None,
        slid=None,
        global_route=False,
        udp_sport=0xC000,
        bad_icrc=False,
        bad_vcrc=False,
        vlan=SRC_VLAN,
    ) -> bytes:
        """A whole frame from `src` to `dst` (ports) carrying `tp` (BTH onwards, padded).  `vlan` tags an
        Ethernet frame with another VLAN than src's (a responder answers in the VLAN the request came in)."""
        n = self.name
        if self.native:
            grh = b""
            lnh = 2
            if global_route or dgid is not None:
                lnh = 3
                grh = GRH.pack((6 << 28) | (tclass << 20), len(tp) + 4, NEXT_HDR_IBA, 0, src.gid, dgid or dst.gid)
            pkt = (
                LRH.pack(
                    (vl << 4),
                    (sl << 4) | lnh,
                    dst.lid if dlid is None else dlid,
                    (8 + len(grh) + len(tp) + 4) >> 2,
                    src.lid if slid is None else slid,
                )
                + grh
                + tp
            )
            icrc = icrc_ib(pkt) ^ (0xFFFFFFFF if bad_icrc else 0)
            pkt += _U32LE.pack(icrc)
            v = vcrc(pkt) ^ (0xFFFF if bad_vcrc else 0)
            return pkt + _U16LE.pack(v)
        ecn = ECN_ECT0 if ecn is None else ecn
        tos = (tclass & 0xFC) | ecn
        if n == "roce2":
            key = (src.ip4, dst.ip4, tos, len(tp))
            ip = self._ip4.get(key)
            if ip is None:
                h = _IP4.pack(0x45, tos, 20 + 8 + len(tp) + 4, 0, 0x4000, 64, 17, 0, src.ip4, dst.ip4)
                ip = h[:10] + struct.pack(">H", _ip4_checksum(h)) + h[12:]
                if len(self._ip4) > 4096:
                    self._ip4.clear()
                self._ip4[key] = ip
            body = ip + _UDP.pack(udp_sport, ROCE_V2_PORT, 8 + len(tp) + 4, 0) + tp
            icrc = icrc_roce2(body)
            ethertype = ETHERTYPE_IPV4
        elif n == "roce2-v6":
            ulen = 8 + len(tp) + 4
            ip6 = _IP6.pack((6 << 28) | (tos << 20), ulen, 17, 64, src.ip6, dst.ip6)
            udp = _UDP.pack(udp_sport, ROCE_V2_PORT, ulen, 0) + tp
            icrc = icrc_roce2(ip6 + udp)
            icrc ^= 0xFFFFFFFF if bad_icrc else 0
            udp += _U32LE.pack(icrc)
            # IPv6 forbids a zero UDP checksum (RFC 8200 §8.1); the ICRC does not cover it
            csum = _udp6_checksum(src.ip6, dst.ip6, udp)
            return self._ethernet(src, dst, ETHERTYPE_IPV6, vlan) + ip6 + udp[:6] + struct.pack(">H", csum) + udp[8:]
        else:  # roce1
            body = GRH.pack((6 << 28) | (tos << 20), len(tp) + 4, NEXT_HDR_IBA, 64, src.gid, dst.gid) + tp
            icrc = icrc_roce1(body)
            ethertype = ETHERTYPE_ROCE_V1
        icrc ^= 0xFFFFFFFF if bad_icrc else 0
        return self._ethernet(src, dst, ethertype, vlan) + body + _U32LE.pack(icrc)

    def _ethernet(self, src, dst, ethertype: int, vlan=SRC_VLAN) -> bytes:
        vlan = src.vlan if vlan is SRC_VLAN else vlan
        key = (src.mac, dst.mac, vlan, ethertype)
        eth = self._eth.get(key)
        if eth is None:
            eth = dst.mac + src.mac
            if vlan is not None:
                eth += struct.pack(">HH", ETHERTYPE_VLAN, (src.pcp << 13) | vlan)
            eth += struct.pack(">H", ethertype)
            self._eth[key] = eth
        return eth

    def record(self, ts: float, frame: bytes) -> bytes:
        """What goes into the pcap record: the frame itself, or an ERF type-21 record around it."""
        return erf_record(ts, frame) if self.name == "ib-erf" else frame
