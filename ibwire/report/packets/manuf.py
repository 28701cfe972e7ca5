"""Vendor names of MAC address prefixes (OUIs), as tshark -n writes them in `eth.src.oui_resolved`, from
Wireshark's manuf file on this machine: the file IBWIRE_MANUF names, else Wireshark 4.0's
(/usr/share/wireshark/manuf; Wireshark 4.2 and later compile it in: `tshark -G manuf > FILE` writes it for
IBWIRE_MANUF).  ibwire ships no copy; without a file the names are absent.  The file is read when a document
first needs a name, and each OUI is looked up in its text once (a capture holds few; parsing the whole
file would cost more than the rest of a learned capture's start).
"""

import functools
import os
from pathlib import Path
from typing import Optional

ENV = "IBWIRE_MANUF"
NAME_BYTES = 63  # Wireshark keeps a name in 64 bytes (MAXNAMELEN), its end cut
SYSTEM = ("/usr/share/wireshark/manuf", "/usr/local/share/wireshark/manuf")


def path() -> Optional[str]:
    """The manuf file names are read from (None: none)."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return chosen if os.path.isfile(chosen) else None
    return next((p for p in SYSTEM if os.path.isfile(p)), None)


@functools.lru_cache(maxsize=None)
def _text() -> tuple:
    """The file's bytes after a newline, and the same with prefixes written one way (upper case, colons)."""
    raw, source = b"\n", path()
    try:
        raw += Path(source).read_bytes() if source else b""
    except OSError:
        pass
    return raw, raw.upper().replace(b"-", b":")


@functools.lru_cache(maxsize=None)
def vendor(oui: int) -> Optional[str]:
    """The vendor the manuf file names for a 24-bit OUI: the first line of that prefix with a name, its long
    name, else its short one (addr_resolv.c); None when unknown or without a file."""
    raw, norm = _text()
    key = b"\n" + ":".join(f"{b:02X}" for b in oui.to_bytes(3, "big")).encode()
    at = norm.find(key)
    while at >= 0:
        end = norm.find(b"\n", at + 1)
        line = raw[at + 1 : end if end >= 0 else len(raw)]
        parts = [p.strip() for p in line.split(b"#", 1)[0].split(b"\t")]
        parts = [p for p in parts if p]
        if len(parts) >= 2 and len(parts[0]) == 8:
            name = parts[2] if len(parts) > 2 else parts[1]
            return name[:NAME_BYTES].decode(errors="ignore")
        at = norm.find(key, at + 1)
    return None
