"""Link type → first scapy layer, and the RoCEv2 heuristic for UDP ports other than 4791."""

from scapy.layers.inet import UDP
from scapy.layers.l2 import CookedLinux, Ether
from scapy.packet import Raw

from dissectors import BTH, ERF, LRH, IPoIBLink, looks_like_roce2
from dissectors.numbers import (
    LINKTYPE_ERF,
    LINKTYPE_ETHERNET,
    LINKTYPE_INFINIBAND,
    LINKTYPE_IPOIB,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
)

try:
    from scapy.layers.l2 import CookedLinuxV2
except ImportError:  # scapy < 2.5
    CookedLinuxV2 = None

LINKTYPES = {
    LINKTYPE_ETHERNET: ("Ethernet", Ether),
    LINKTYPE_LINUX_SLL: ("Linux cooked (SLL)", CookedLinux),
    LINKTYPE_ERF: ("ERF", ERF),
    LINKTYPE_IPOIB: ("IPoIB", IPoIBLink),
    LINKTYPE_INFINIBAND: ("InfiniBand", LRH),
    LINKTYPE_LINUX_SLL2: ("Linux cooked v2 (SLL2)", CookedLinuxV2),
}


def first_layer(linktype: int):
    entry = LINKTYPES.get(linktype)
    return entry[1] if entry and entry[1] is not None else None


def apply_roce2_heuristic(pkt):
    """Re-dissect an undecoded UDP payload as RoCEv2 when it carries a BTH whose ICRC checks."""
    udp = pkt.getlayer(UDP)
    if udp is None or not isinstance(udp.payload, Raw):
        return False
    ip = udp.underlayer
    payload = bytes(udp.payload)
    if (
        ip is None
        or ip.original is None
        or not looks_like_roce2(payload, ip.original[: len(ip.original) - len(udp.original) + 8 + len(payload)])
    ):
        return False
    udp.remove_payload()
    bth = BTH(payload, _internal=1, _underlayer=udp)
    udp.add_payload(bth)
    bth.dissection_done(pkt)
    return True
