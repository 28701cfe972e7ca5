"""The bits of the Ethernet, IPv4 and ERF flag words tshark 4.0 filters on and ibwire's tshark document prints
(`eth.dst.ig`, `ip.flags.df`, `erf.flags.vlen` …), worked out for `-Y` from the full decode's field map:
each as tshark's value (the bits shifted down), 0 or 1 for a single bit.
"""


def _octet0(mac) -> int:
    return int(str(mac)[:2], 16)


def _eth(end: str, shift: int):
    return lambda flat: [(_octet0(m) >> shift) & 1 for m in _all(flat.get(f"eth.{end}"))]


def _ip(shift: int, mask: int):
    def values(flat):
        raw = flat.get("_ws.bytes") if "ip" in flat else None
        return [(h[6] >> shift) & mask for h in (raw.of("ip") if raw is not None else ()) if len(h) > 6]

    return values


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
# tshark's FT_UINT8 words and parts: a literal above 255 is refused (its booleans, eth's, take 0 and 1)
WIDTHS = {k: 8 for k in DERIVED if k.startswith(("ip.", "erf."))}


def derived(flat: dict, key: str) -> list:
    """Every value of flag bit `key` in a decoded frame's field map ([] when its word is absent)."""
    try:
        return DERIVED[key](flat)
    except (ValueError, TypeError, IndexError):  # a damaged word: the bit is absent, as the word is
        return []
