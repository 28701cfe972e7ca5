"""A field's value as tshark 4.0 prints it (`-T fields`, `-T json`, `-T ek`), by the display table of
ibwire.decode.fieldtypes (TSHARK_DISPLAY): hexadecimal fields as "0x…" padded to their type's width, booleans 0/1,
bytes as hex (`aa:bb` in JSON, `aabb` in field columns), IPv6 addresses and GIDs as inet_ntop writes
them (an IPv4-mapped GID as ::ffff:172.17.242.47, as Wireshark shows it), times with nanoseconds.
"""

import ipaddress
import socket

from ibwire.decode.docfields import TYPES, field_text
from ibwire.decode.fieldtypes import IPV6, TSHARK_DISPLAY, WIDE, WIDTH, field_type, layer_fields


def ipv6_text(value) -> str:
    """An IPv6 address or GID (text, 16 bytes or int) as tshark prints it."""
    try:
        packed = ipaddress.IPv6Address(value if not isinstance(value, (bytes, bytearray)) else bytes(value)).packed
    except ValueError:
        return str(value)
    return socket.inet_ntop(socket.AF_INET6, packed)


def bytes_text(value, sep: str = ":", width: int = 0) -> str:
    """Bytes (or their hex, or an int `width` bytes wide) as tshark's hex, pairs joined by `sep`."""
    if isinstance(value, int):
        raw = value.to_bytes(max(width, (value.bit_length() + 7) // 8, 1), "big")
    elif isinstance(value, str):
        try:
            raw = bytes.fromhex(value.replace(":", ""))
        except ValueError:
            return value
    else:
        raw = bytes(value)
    return raw.hex(sep) if sep and raw else raw.hex()


# Fields tshark names like the header holding them: each shows twice (the header, then its one field).
SELF_NAMED = ("immdt", "ieth")


def seconds(ns: int) -> str:
    """A signed duration or time in ns as tshark prints seconds: `-0.000000005`, `12.000000001`."""
    return f"{'-' if ns < 0 else ''}{abs(ns) // 10**9}.{abs(ns) % 10**9:09d}"


def value_text(key: str, value, sep: str = ":", width: int = 0) -> str:
    """Field `key` (Wireshark's name without `infiniband.`) holding `value`, as tshark writes it."""
    digits = TSHARK_DISPLAY.get(key, 0)
    if digits == -1:
        if isinstance(value, str) and field_type(key) == IPV6:
            value = ipaddress.IPv6Address(value).packed
        return bytes_text(value, sep, width or (layer_fields() and WIDTH.get(key, 0)))
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        if digits > 1:
            return f"0x{value & ((1 << (4 * max(digits, 16))) - 1):0{digits}x}"
        return str(value)
    if isinstance(value, float):
        return f"{value:.9f}"
    if isinstance(value, (bytes, bytearray)):
        return bytes_text(value, sep)
    if field_type(key) == IPV6:
        return ipv6_text(value)
    if isinstance(value, str) and digits == 0 and field_type(key) == "bytes":
        return bytes_text(value, sep)
    return str(value)


def json_safe(obj, key: str = ""):
    """A decoded frame's JSON: 64-bit fields (and any value beyond 32 bits) as "0x…" strings, bytes as hex,
    GIDs and IPv6 addresses as inet_ntop writes them (an IPv4-mapped GID as ::ffff:a.b.c.d)."""
    if isinstance(obj, dict):
        return {k: json_safe(v, f"{key}.{k}" if key else k) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v, key) for v in obj]
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).hex()
    if isinstance(obj, str) and key.count(".") >= 2:  # a GID or IPv6 address as the records print it
        if field_type(key.partition(".")[2]) == IPV6:
            return ipv6_text(obj)
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, float)):
        return obj
    if isinstance(obj, int):
        layer_fields()
        wide = (
            key.partition(".")[2] in WIDE or ".".join(key.split(".")[-2:]) in WIDE or not -(1 << 31) <= obj < (1 << 32)
        )
        return f"0x{obj & 0xFFFFFFFFFFFFFFFF:016x}" if wide else obj
    return str(obj)


def doc_name(key: str):
    """The Wireshark field named `key` (with or without `infiniband.`), or the protocol layer `key` of tshark's
    document (`eth`, `nfs`, `data`); None when Wireshark has none."""
    from ibwire.report.packets.ws_labels import FIELDS

    if key in TYPES:
        return key
    found = next((name for name in (key, "infiniband." + key) if name in FIELDS), None)
    if found is None and (key == "data" or "." not in key and field_type(key) == "protocol"):
        return key
    return found


def doc_first(key: str) -> bool:
    """A protocol or header tshark's -T fields prints as its title or bytes, where ibwire's own fields hold
    only its presence."""
    from ibwire.report.packets.ws_labels import FIELDS

    name = doc_name(key)
    return name is not None and (name not in FIELDS or field_type(key) == "protocol" and FIELDS[name][1] == "FT_BYTES")


def doc_text(name: str, found: dict) -> str:
    """Field `name`'s values in a frame's tshark-shaped document (`found`: name -> values), as `-T fields`
    prints them: bytes without separators, booleans 0/1, repeated values joined by commas; a protocol as
    print.c writes it: its title or name (ibwire.report.packets.tree.layer_label), Data as its bytes."""
    from ibwire.report.packets.ws_labels import FIELDS

    if name == "data":
        return doc_text("data.data", found)
    if name in TYPES:
        return ",".join(field_text(name, v) for v in found.get(name, ()))
    if name not in FIELDS:
        return ",".join(found.get(name, ()))
    kind = FIELDS[name][1]
    if kind in ("FT_PROTOCOL", "FT_NONE"):
        return ""
    out = []
    for v in found.get(name, ()):
        if isinstance(v, bool):
            v = "1" if v else "0"
        out.append(str(v).replace(":", "") if kind in ("FT_BYTES", "FT_UINT_BYTES") else str(v))
    return ",".join(out)
