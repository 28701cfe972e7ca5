"""How a capture that ends on its own (full disk, vanished interface or simulator, dead engine) ends: its file is
cut back to the last complete record, and CaptureStopped carries the one sentence (exit status 1).

pcap: 24-byte file header, then 16-byte record headers with the captured length at +8 (either byte order).
pcapng: blocks with their total length at +4, repeated at the end (pcapng draft §3.1).
"""

import os
import struct
from typing import Tuple

from ibwire.errors import UserError


class CaptureStopped(UserError):
    """The capture ended on its own after everything was disarmed: exit status 1."""

    exit_code = 1


PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}


def complete_prefix(path: str) -> Tuple[int, int]:
    """(records, bytes) of the longest prefix of whole records (packets, or pcapng blocks)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(24)
        if head[:4] in PCAP_MAGICS and len(head) == 24:
            end, n, fmt = 24, 0, PCAP_MAGICS[head[:4]] + "I"
            while True:
                f.seek(end + 8)
                h = f.read(4)
                if len(h) < 4:
                    return n, end
                nxt = end + 16 + struct.unpack(fmt, h)[0]
                if nxt > size:
                    return n, end
                end, n = nxt, n + 1
        if head[:4] == b"\x0a\x0d\x0d\x0a" and len(head) >= 12:
            fmt = "<I" if head[8:12] == b"\x4d\x3c\x2b\x1a" else ">I"
            end, n = 0, 0
            while True:
                f.seek(end)
                h = f.read(8)
                if len(h) < 8:
                    return n, end
                btype, blen = struct.unpack(fmt[0] + "II", h)
                if blen < 12 or blen % 4 or end + blen > size:
                    return n, end
                f.seek(end + blen - 4)
                if struct.unpack(fmt, f.read(4))[0] != blen:
                    return n, end
                end += blen
                n += btype in (3, 6)
    return 0, 0


def truncate_to_complete(path: str) -> Tuple[int, int]:
    """Cut the file after its last complete record; returns (records kept, bytes cut)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return 0, 0
    n, end = complete_prefix(path)
    if end and end < size:
        os.truncate(path, end)
    return n, size - end if end else 0
