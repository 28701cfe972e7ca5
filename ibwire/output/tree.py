"""`-V` header trees and `-x` hex dumps of fully decoded frames.

The tree: a Frame section, then every layer with its fields under their Wireshark names; values with a
name in the protocol tables show it (`mad.mgmtclass: SubnMgt directed-route (0x81)`, `portinfo.portstate:
Active (4)`, `bth.opcode: RC SEND Only (4)`), and fields narrower than a byte show their bits the way
Wireshark does (`..00 .... = bth.padcnt: 0`).
"""
import time
from functools import lru_cache

from dissectors.opcodes import lookup

from .escape import printable


def _names():
    from dissectors.mad import table as T
    widths = {k: v.upper() for k, v in T.LINK_WIDTHS.items()}
    speeds = {**T.LINK_SPEEDS}
    return {
        "mad.mgmtclass": {k: v[1] for k, v in T.CLASSES.items()},
        "mad.method": T.METHODS,
        "portinfo.portstate": T.PORT_STATES,
        "portinfo.linkwidthactive": widths, "portinfo.linkwidthenabled": widths, "portinfo.linkwidthsupported": widths,
        "portinfo.linkspeedactive": speeds, "portinfo.linkspeedenabled": speeds, "portinfo.linkspeedsupported": speeds,
        "nodeinfo.nodetype": T.NODE_TYPES, "sminfo.smstate": T.SM_STATES, "rmpp.rmpptype": T.RMPP_TYPES,
    }


_NAMES = None


def _shown(key: str, value, flat: dict) -> str:
    global _NAMES
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str):
            return f'"{value}"' if len(value) <= 98 else f'"{value[:96]}..."'
        return str(value)
    if _NAMES is None:
        _NAMES = _names()
    name = None
    if key == "bth.opcode":
        name = lookup(value).full_name
    elif key == "mad.attributeid":
        from dissectors.mad.table import attribute
        name = attribute(flat.get("mad.mgmtclass", -1), value)[0]
    elif key == "aeth.syndrome":
        from .summary import aeth_text
        name = aeth_text(value) or "ACK"
    elif key in _NAMES:
        name = _NAMES[key].get(value)
    number = f"0x{value:x}" if value > 9 else str(value)
    if name:
        return f"{name} ({number})"
    return f"{value} (0x{value:x})" if value > 9 else str(value)


@lru_cache(maxsize=4096)
def _bits(value: int, at: int, size: int) -> str:
    """Wireshark's bit picture of a field `size` bits wide starting `at` bits into its byte(s)."""
    width = ((at + size + 7) // 8) * 8
    chars = ["."] * width
    for i in range(size):
        chars[at + i] = "1" if value >> (size - 1 - i) & 1 else "0"
    return " ".join("".join(chars[i:i + 4]) for i in range(0, width, 4))


@lru_cache(maxsize=None)
def _bit_offsets(cls) -> dict:
    """Field name -> (bit offset in its byte, width) for a layer class's fields narrower than a byte."""
    bit, out = 0, {}
    for f in getattr(cls, "fields_desc", ()):
        size = getattr(f, "size", None)
        if "BitField" in type(f).__name__ and isinstance(size, int):
            if size < 8:
                out[f.name] = (bit % 8, size)
            bit += size
        else:
            bit = 0
    return out


def _layer_lines(cls, key: str, fields: dict, flat: dict, out: list) -> None:
    """Fields of one layer in order, with bit pictures for fields narrower than a byte."""
    offsets = _bit_offsets(cls) if cls is not None else {}
    for name, value in fields.items():
        full = f"{key}.{name}"
        if isinstance(value, list) and value and isinstance(value[0], dict):
            for i, record in enumerate(value):
                out.append(f"    {full}[{i}]")
                for sub, subfields in record.items():
                    shown = ", ".join(f"{k}={v}" for k, v in subfields.items()) if isinstance(subfields, dict) else subfields
                    out.append(f"        {sub}: {shown}")
            continue
        shown = _shown(full, value, flat)
        at = offsets.get(name)
        if at and isinstance(value, int):
            out.append(f"    {_bits(value, *at)} = {full}: {shown}")
        else:
            out.append(f"    {full}: {shown}")


def tree(decoded) -> str:
    """The Frame section, then every decoded layer with its fields."""
    f = decoded.frame
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(f.time)) + f".{round((f.time % 1) * 1e6):06d} UTC"
    lines = [f"Frame {f.number}: {f.wirelen} bytes on wire ({f.wirelen * 8} bits), {f.caplen} bytes captured "
             f"({f.caplen * 8} bits), link type {f.linktype}",
             f"    Arrival time: {when}", f"    Epoch time: {f.time:.6f} seconds",
             f"    Frame number: {f.number}", f"    Frame length: {f.wirelen} bytes", f"    Capture length: {f.caplen} bytes"]
    if decoded.flat.get("frame.protocols"):
        lines.append(f"    [Protocols in frame: {decoded.flat['frame.protocols']}]")
    layers = {}
    pkt = decoded.packet
    while pkt is not None and type(pkt).__name__ != "NoPayload":
        name = getattr(type(pkt), "ws_name", "") or ""
        if name and name not in layers:
            layers[name] = type(pkt)
        pkt = pkt.payload
    flat = decoded.flat
    for key, fields in decoded.layers.items():
        if key == "bth.analysis":                  # like Wireshark's [SEQ/ACK analysis]
            lines.append("[RC analysis]")
            lines += [f"    {key}.{k}: {f'{v:.9f} seconds' if isinstance(v, float) else v}" for k, v in fields.items()]
            continue
        lines.append(key if key not in layers else f"{key} ({layers[key].__name__})")
        _layer_lines(layers.get(key), key, fields, flat, lines)
    for err in decoded.errors:
        lines.append(f"[error] {err}")
    return "\n".join(map(printable, lines)) + "\n"


def hex_dump(data: bytes) -> str:
    """tshark -x: offset, 16 bytes in hex, their printable ASCII; a blank line after."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:04x}  {' '.join(f'{b:02x}' for b in chunk):<47}   {text}")
    return "\n".join(lines) + "\n"
