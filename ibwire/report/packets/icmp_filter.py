"""The fields of the datagram an ICMP or ICMPv6 error carries, for `-Y`: tshark's filter sees its IP, IPv6, UDP,
TCP and ICMP headers as further occurrences of their fields (`icmp && udp.dstport == 4791` matches a port
unreachable carrying RoCEv2; `ip.src == X` either header's source).  Read from the frame's tshark document
(ibwire.report.packets.icmp_carried), added to the outer header's values of the full decode's field map.
Not yet: the carried UDP header's `udp.stream` (tshark counts it with every UDP frame of the capture).
"""

from ibwire.decode.fieldtypes import FLOAT, INT, UINT
from ibwire.decode.filter import kind
from ibwire.decode.flagbits import DERIVED, derived

ERRORS = {"icmp.type": (3, 4, 5, 11, 12), "icmpv6.type": (1, 2, 3, 4)}
CARRIED = ("ip", "ipv6", "udp", "tcp", "icmp", "icmpv6")
OWN = ("ip", "ipv6", "udp", "icmpv6")  # (tcp.* and icmp.*: all of them from the document, tcp_icmp_fields)
UNCOUNTED = ("udp.stream",)


def carried_keys(fields) -> list:
    """The fields a filter names that a carried header may hold: its protocols, and their fields but tcp.* and
    icmp.* (which the document gives whole)."""
    return sorted(k for k in fields if k in CARRIED or (k.split(".")[0] in OWN and k not in UNCOUNTED))


def is_error(flat: dict) -> bool:
    """Is the frame an ICMP or ICMPv6 error (which carries a datagram)?"""
    return any(flat.get(key) in types for key, types in ERRORS.items())


def carried_values(flat: dict, layers: list, keys: list) -> dict:
    """The values of `keys` in a frame whose tshark document is `layers`: the outer headers' (from `flat`) and
    then the carried ones; a carried protocol as present.  Only the keys a carried header holds."""
    found: dict = {}
    for name, items in layers:
        if name in ("icmp", "icmpv6"):
            for proto, node in items:
                if proto in CARRIED and isinstance(node, list):
                    found.setdefault(proto, [True])
                    _leaves(node, found)
    out = {}
    for key in keys:
        if key not in found:
            continue
        if key in CARRIED:
            out[key] = True
            continue
        outer = flat.get(key)
        if outer is None:
            outer = derived(flat, key) if key in DERIVED else []
        inner = [v for v in (_typed(key, t) for t in found[key]) if v is not None]
        out[key] = (outer if isinstance(outer, list) else [outer]) + inner
    return out


def _typed(key: str, text):
    """A document value as the field map holds it: numbers as numbers (the filter reads text as hex)."""
    ftype = kind(key)
    try:
        if ftype in (UINT, INT):
            return int(text, 16) if isinstance(text, str) and text.startswith("0x") else int(text)
        return float(text) if ftype == FLOAT else str(text)
    except (TypeError, ValueError):
        return None


def _leaves(items: list, found: dict) -> None:
    for key, value in items:
        if isinstance(value, list):
            _leaves(value, found)
        else:
            found.setdefault(key, []).append(value)
