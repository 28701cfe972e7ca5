"""The identities that mark one VF's packets (MAC, VLAN, IPs, LIDs, GIDs) and a byte-level match on them.

Fields used: Ethernet/802.1Q header; IPv4/IPv6 addresses (RoCEv2 GIDs are the VF's IPs); RoCEv1 GRH
(ethertype 0x8915); native IB LRH DLID/SLID (IBA §7.7) and GRH SGID/DGID (IBA §8.3) when LNH = 3.
QP numbers are never used: every VF has its own QP number space.
"""

import ipaddress
import struct
from dataclasses import dataclass, field
from typing import List, Optional

from dissectors.numbers import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_QINQ,
    ETHERTYPE_ROCE_V1,
    ETHERTYPE_VLAN,
    LINKTYPE_ERF,
    LINKTYPE_ETHERNET,
    LINKTYPE_INFINIBAND,
)


@dataclass
class Identity:
    macs: List[str] = field(default_factory=list)
    vlans: List[int] = field(default_factory=list)
    ips: List[str] = field(default_factory=list)
    lids: List[int] = field(default_factory=list)
    gids: List[str] = field(default_factory=list)
    node_guid: Optional[str] = None
    port_guid: Optional[str] = None

    def empty(self) -> bool:
        return not (self.macs or self.ips or self.lids or self.gids)

    def describe(self) -> str:
        parts = (
            [f"MAC {m}" for m in self.macs]
            + [f"VLAN {v}" for v in self.vlans]
            + [f"IP {i}" for i in self.ips]
            + [f"LID {lid:#x}" for lid in self.lids]
            + [f"GID {g}" for g in self.gids]
        )
        if self.port_guid:
            parts.append(f"port GUID {self.port_guid}")
        return ", ".join(parts) or "no identity known"

    def matcher(self):
        """A function (linktype, bytes) -> bool keeping frames to or from this identity."""
        macs = {bytes.fromhex(m.replace(":", "")) for m in self.macs}
        ips = {ipaddress.ip_address(i).packed for i in self.ips}
        gids = {ipaddress.ip_address(g).packed for g in self.gids} | {
            ipaddress.IPv6Address("::ffff:" + i).packed for i in self.ips if ":" not in i
        }
        lids = set(self.lids)

        def eth(d: bytes) -> bool:
            if d[0:6] in macs or d[6:12] in macs:
                return True
            off, etype = 14, struct.unpack_from(">H", d, 12)[0] if len(d) >= 14 else 0
            while etype in (ETHERTYPE_VLAN, ETHERTYPE_QINQ) and len(d) >= off + 4:
                etype = struct.unpack_from(">H", d, off + 2)[0]
                off += 4
            if etype == ETHERTYPE_IPV4 and len(d) >= off + 20:
                return d[off + 12 : off + 16] in ips or d[off + 16 : off + 20] in ips
            if etype == ETHERTYPE_IPV6 and len(d) >= off + 40:
                return d[off + 8 : off + 24] in ips or d[off + 24 : off + 40] in ips
            if etype == ETHERTYPE_ROCE_V1 and len(d) >= off + 40:
                return d[off + 8 : off + 24] in gids or d[off + 24 : off + 40] in gids
            return False

        def ib(d: bytes) -> bool:
            if len(d) < 8:
                return False
            if struct.unpack_from(">H", d, 2)[0] in lids or struct.unpack_from(">H", d, 6)[0] in lids:
                return True
            return (d[1] & 3) == 3 and len(d) >= 48 and (d[16:32] in gids or d[32:48] in gids)

        def match(linktype: int, d: bytes) -> bool:
            if linktype == LINKTYPE_ETHERNET:
                return eth(d)
            if linktype == LINKTYPE_INFINIBAND:
                return ib(d)
            if linktype == LINKTYPE_ERF and len(d) >= 16:
                if d[8] & 0x7F in (21, 25):
                    return ib(d[16:])
                if d[8] & 0x7F == 2:
                    return eth(d[18:])
            return False

        return match

    def bpf(self) -> str:
        """pcap-filter(7) expression for Ethernet captures, compiled into the kernel by libpcap: the VF's MACs,
        its IPs, and its IPs behind one 802.1Q tag (`vlan` last: it shifts the offsets of what follows)."""
        hosts = [f"host {i}" for i in self.ips]
        terms = [f"ether host {m}" for m in self.macs] + hosts
        if hosts:
            terms.append(f"(vlan and ({' or '.join(hosts)}))")
        return " or ".join(terms)
