"""Reading values out of `decode_frame(...).flat` (Wireshark-style keys such as `lrh.slid`, `mad.method`)."""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import Optional


def as_int(v) -> Optional[int]:
    """An integer field (int, or text in any base Python reads); None when absent, a flag or unreadable."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    try:
        return int(str(v), 0)
    except ValueError:
        return None


def gid_text(v) -> Optional[str]:
    """A GID (text or 16 bytes) in IPv6 notation."""
    if not v:
        return None
    return _gid_text(v) if isinstance(v, (str, bytes)) else _gid_text.__wrapped__(v)


def ip_text(v) -> Optional[str]:
    """An IP address as text; an IPv4-mapped IPv6 address (RoCE v2 GID) as its IPv4 address."""
    if not v:
        return None
    return _ip_text(v) if isinstance(v, (str, bytes, int)) else _ip_text.__wrapped__(v)


# Both are asked for both ends of every packet, and a capture holds few addresses.
@lru_cache(maxsize=1 << 16)
def _gid_text(v) -> str:
    try:
        return str(ipaddress.IPv6Address(v if isinstance(v, str) else bytes(v)))
    except ValueError:
        return str(v)


@lru_cache(maxsize=1 << 16)
def _ip_text(v) -> Optional[str]:
    try:
        a = ipaddress.ip_address(v)
        if a.version == 6 and a.ipv4_mapped:
            return str(a.ipv4_mapped)
        return str(a)
    except ValueError:
        return None


def first_of(flat: dict, *suffixes):
    """Value of the first key that equals or ends with one of the suffixes (MAD layers nest names)."""
    for s in suffixes:
        if s in flat:
            return flat[s]
    for k, v in flat.items():
        for s in suffixes:
            if k.endswith("." + s.split(".")[-1]) and k.split(".")[0] == s.split(".")[0]:
                return v
    return None
