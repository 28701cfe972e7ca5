"""The bits of the Ethernet, IPv4, IPv6 and ERF header words tshark 4.0 filters on and ibwire's tshark document
prints (`eth.dst.ig`, `ip.flags.df`, `ip.frag_offset`, `ipv6.version`, `erf.flags.vlen` …), worked out for `-Y`
from the full decode's field map: each as tshark's value (the bits shifted down), 0 or 1 for a single bit.
"""


def _octet0(mac) -> int:
    return int(str(mac)[:2], 16)


def _eth(end: str, shift: int):
    return lambda flat: [(_octet0(m) >> shift) & 1 for m in _all(flat.get(f"eth.{end}"))]


def _header(proto: str, at: int, shift: int, mask: int):
    """The bits of the 16-bit word at byte `at` of each `proto` header (ibwire.decode.extents gives its bytes)."""

    def values(flat):
        raw = flat.get("_ws.bytes") if proto in flat else None
        heads = raw.of(proto) if raw is not None else ()
        return [(int.from_bytes(h[at : at + 2], "big") >> shift) & mask for h in heads if len(h) >= at + 2]

    return values


def _ip(shift: int, mask: int):
    return _header("ip", 6, shift + 8, mask)  # the flags and fragment offset word


def _erf(key: str, shift: int, mask: int):
    return lambda flat: [(int(v) >> shift) & mask for v in _all(flat.get(key))]


def _all(v) -> list:
    return [] if v is None else v if isinstance(v, list) else [v]


DERIVED = {
    "eth.dst.ig": _eth("dst", 0),
    "eth.dst.lg": _eth("dst", 1),
    "eth.src.ig": _eth("src", 0),
    "eth.src.lg": _eth("src", 1),
    "eth.ig": lambda flat: DERIVED["eth.dst.ig"](flat) + DERIVED["eth.src.ig"](flat),  # either end, as eth.addr
    "eth.lg": lambda flat: DERIVED["eth.dst.lg"](flat) + DERIVED["eth.src.lg"](flat),
    "ip.flags": _ip(5, 7),
    "ip.flags.rb": _ip(7, 1),
    "ip.flags.df": _ip(6, 1),
    "ip.flags.mf": _ip(5, 1),
    "ip.frag_offset": _header("ip", 6, 0, 0x1FFF),  # in units of 8 bytes, as tshark 4.0 holds it
    "ipv6.version": _header("ipv6", 0, 12, 0xF),
    "erf.flags.cap": _erf("erf.flags", 0, 3),
    "erf.flags.vlen": _erf("erf.flags", 2, 1),
    "erf.flags.trunc": _erf("erf.flags", 3, 1),
    "erf.flags.rxe": _erf("erf.flags", 4, 1),
    "erf.flags.dse": _erf("erf.flags", 5, 1),
    "erf.flags.res": _erf("erf.flags", 6, 3),
    "erf.types": lambda flat: [
        t | e << 7 for t, e in zip(_all(flat.get("erf.type")), _all(flat.get("erf.ext_header")))
    ],
    "erf.types.type": _erf("erf.type", 0, 0x7F),
    "erf.types.ext_header": _erf("erf.ext_header", 0, 1),
}
# tshark's FT_UINT8 words and parts (FT_UINT16 ip.frag_offset): a literal too big is refused (eth's booleans
# take 0 and 1)
WIDTHS = {k: 8 for k in DERIVED if k.startswith(("ip.", "ipv6.", "erf."))}
WIDTHS["ip.frag_offset"] = 16


def derived(flat: dict, key: str) -> list:
    """Every value of flag bit `key` in a decoded frame's field map ([] when its word is absent)."""
    try:
        return DERIVED[key](flat)
    except (ValueError, TypeError, IndexError):  # a damaged word: the bit is absent, as the word is
        return []
