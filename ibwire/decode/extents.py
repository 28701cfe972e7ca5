"""The bytes each protocol and InfiniBand header of a decoded frame covers, as Wireshark's item of the
same name does, for display-filter slices and len() (`bth[0:2]`, `frame[12:2]`, `len(payload)`).

Checked against tshark 4.0's PDML (`pos`/`size` of each item) on every test capture: `eth` is its 14
bytes, `vlan` 4, `ip` its header, `ipv6` 40, `udp` 8; `infiniband` runs from the first IB header to the
end of the IB packet its carrier declares (UDP length, GRH PayLen, LRH PktLen and VCRC), ICRC included;
`mad` is the 256-byte MAD; `payload` the bytes between the last header and the pad bytes.
"""

from typing import Dict, List, Tuple

ENCAP = {"Ether": "eth", "Dot1Q": "vlan", "IP": "ip", "IPv6": "ipv6", "UDP": "udp"}
IB = {
    "LRH": "lrh",
    "GRH": "grh",
    "BTH": "bth",
    "RDETH": "rdeth",
    "DETH": "deth",
    "XRCETH": "xrceth",
    "RETH": "reth",
    "AtomicETH": "atomiceth",
    "AETH": "aeth",
    "AtomicAckETH": "atomicacketh",
    "ImmDt": "immdt",
    "IETH": "ieth",
    "FETH": "feth",
}
MAD_LEN = 256
# Every name a slice or len() may take: the frame, its protocols and the InfiniBand headers.
SLICEABLE = frozenset(("frame", "infiniband", "mad", "payload", *ENCAP.values(), *IB.values()))


class Extents:
    """`of(name)`: the bytes of every occurrence of protocol `name` in a frame (outermost first), worked
    out on first use from the scapy packet's layers."""

    def __init__(self, data: bytes, pkt):
        self.data, self.pkt = data, pkt
        self._spans = None

    def __eq__(self, other) -> bool:  # two decodes of the same frame bytes cover the same bytes
        return isinstance(other, Extents) and self.data == other.data

    __hash__ = None

    def of(self, name: str) -> List[bytes]:
        if name == "frame":  # wiretap reads an ERF record's header as pseudo-header, not frame
            erf = self.pkt if type(self.pkt).__name__ == "ERF" else None
            return [self.data[len(erf.raw_packet_cache or b"") :] if erf is not None else self.data]
        if self._spans is None:
            try:
                self._spans = spans(self.data, self.pkt)
            except (AttributeError, TypeError, ValueError):  # layers too damaged to place: no header found
                self._spans = {}
        return [self.data[a : a + n] for a, n in self._spans.get(name, ())]


def spans(data: bytes, pkt) -> Dict[str, List[Tuple[int, int]]]:
    """name -> [(offset, length)] of the encapsulation headers, the IB headers, the MAD, the payload and
    `infiniband` itself, following the layers' own byte counts (scapy's raw_packet_cache)."""
    out: Dict[str, List[Tuple[int, int]]] = {}
    off, ib_start, ib_end, layer = 0, None, len(data), pkt
    while layer is not None and type(layer).__name__ != "NoPayload":
        cls = type(layer).__name__
        raw = layer.raw_packet_cache
        if raw is None:
            break
        name = ENCAP.get(cls) or IB.get(cls)
        if name in IB.values() and ib_start is None:
            ib_start = off
            ib_end = min(ib_end, _ib_end(layer, off, cls, out))
        if cls == "UDP":
            ib_end = off + layer.len if layer.len and layer.len >= 8 else ib_end
        if name:
            out.setdefault(name, []).append((off, len(raw)))
        elif cls.startswith("MAD") or type(layer).__module__.startswith("dissectors.mad"):
            out["mad"] = [(off, min(MAD_LEN, len(data) - off))]
            break
        elif cls == "Raw":
            pad = int(getattr(pkt.getlayer("BTH"), "padcnt", 0) or 0) if pkt.haslayer("BTH") else 0
            n = max(len(raw) - pad, 0)
            if n:
                out["payload"] = [(off, n)]
            break
        elif cls in ("ICRC", "VCRC", "IBPad", "Padding"):
            break
        off += len(raw)
        layer = layer.payload
    if ib_start is not None:
        out["infiniband"] = [(ib_start, max(min(ib_end, len(data)) - ib_start, 0))]
    return out


def _ib_end(layer, off: int, cls: str, out) -> int:
    """Where the IB packet starting with `layer` at `off` ends, by its own length field (the UDP length
    is applied by the caller): LRH PktLen words plus the VCRC, or the RoCEv1 GRH's PayLen."""
    if cls == "LRH":
        return off + 4 * int(layer.pktlen) + 2
    if cls == "GRH" and "udp" not in out:
        return off + 40 + int(layer.paylen)
    return 1 << 30
