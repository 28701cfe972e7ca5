"""`-V` header trees and `-x` hex dumps of fully decoded frames."""
import json


def tree(decoded) -> str:
    """The Frame section, then every decoded layer with its fields (nested records indented)."""
    f = decoded.frame
    lines = [f"Frame {f.number}: {f.wirelen} bytes on wire, {f.caplen} bytes captured, link type {f.linktype}",
             f"    Epoch time: {f.time:.9f} seconds"]
    for layer, fields in decoded.layers.items():
        lines.append(f"  {layer}")
        for name, value in fields.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                for i, record in enumerate(value):
                    lines.append(f"    {layer}.{name}[{i}]")
                    for sub, subfields in record.items():
                        shown = ", ".join(f"{k}={v}" for k, v in subfields.items()) if isinstance(subfields, dict) else subfields
                        lines.append(f"      {sub}: {shown}")
                continue
            if isinstance(value, int) and not isinstance(value, bool) and value > 9:
                shown = f"{value} (0x{value:x})"
            else:
                shown = json.dumps(value) if isinstance(value, str) else str(value)
            if isinstance(value, str) and len(shown) > 100:
                shown = shown[:97] + '..."'
            lines.append(f"    {layer}.{name} = {shown}")
    for err in decoded.errors:
        lines.append(f"  [error] {err}")
    return "\n".join(lines) + "\n"


def hex_dump(data: bytes) -> str:
    """tshark -x: offset, 16 bytes in hex, their printable ASCII; a blank line after."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:04x}  {' '.join(f'{b:02x}' for b in chunk):<47}   {text}")
    return "\n".join(lines) + "\n"
