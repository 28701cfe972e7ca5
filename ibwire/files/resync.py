"""Finding where records start again after an arbitrary byte offset of a pcap or pcapng file: after a
damaged record length, and where files.split cuts a file into spans.

A record start is trusted when a chain of records from it stays plausible for CHAIN records or to the end
of the file.  pcap(5): lengths within the snap length, captured <= original, sub-second field in range,
seconds close to the file's first packet.  pcapng (draft-ietf-opsawg-pcapng): a packet block whose every
block's trailing length repeats its leading one.
"""

import os
import struct
from typing import Optional

from ibwire.files.formats import MAX_BLOCK, MAX_PACKET, PCAP_MAGICS, PCAPNG_SHB

CHAIN = 64
SEARCH = 1 << 20


def _plausible_chain(data: bytes, p: int, endian: str, snap: int, frac_max: int, sec0: int, end: int) -> bool:
    hdr = struct.Struct(endian + "IIII")
    for _ in range(CHAIN):
        if p == end:
            return True
        if p + 16 > len(data):
            return True  # ran past the read window after several good records
        sec, frac, incl, orig = hdr.unpack_from(data, p)
        if (
            incl > snap
            or incl > orig
            or orig > max(snap, MAX_PACKET)
            or frac >= frac_max
            or abs(sec - sec0) > 366 * 86400
        ):
            return False
        p += 16 + incl
    return True


def boundary(path: str, offset: int, exact: bool = False) -> Optional[int]:
    """The first record start at or after `offset` in a pcap file, or None when none can be trusted; with
    `exact`, `offset` itself or None."""
    with open(path, "rb") as f:
        head = f.read(40)
        size = os.fstat(f.fileno()).st_size
        if head[:4] not in PCAP_MAGICS or len(head) < 40:
            return None
        endian, scale, rec_len = PCAP_MAGICS[head[:4]]
        if rec_len != 16:
            return None
        snap = min(struct.unpack_from(endian + "I", head, 16)[0] or MAX_PACKET, MAX_PACKET)
        sec0 = struct.unpack_from(endian + "I", head, 24)[0]
        frac_max = 1_000_000 if scale == 1e-6 else 1_000_000_000
        f.seek(offset)
        data = f.read(max(0, min(SEARCH + CHAIN * (snap + 16), size - offset)))  # never more than the file
    limit = 1 if exact else min(SEARCH, len(data))
    whole = max(0, min(limit, len(data) - 15))  # offsets with a whole record header in `data`
    for p in _plausible_heads(data, whole, endian, snap, frac_max, sec0):
        if _plausible_chain(data, p, endian, snap, frac_max, sec0, size - offset):
            return offset + p
    return offset + whole if whole < limit else None  # past the window: _plausible_chain's first answer


def _plausible_heads(data: bytes, count: int, endian: str, snap: int, frac_max: int, sec0: int) -> list:
    """The offsets below `count`, in order, whose 16 bytes pass _plausible_chain's test of one record
    header, all tested at once (numpy, one view of the 32-bit words per offset modulo 4): the chain is
    then followed only from those, not from each of the 2^20 offsets searched."""
    import numpy as np  # only here: convert and the pipe reader need none

    found = []
    for r in range(min(4, count)):
        k = (count - r + 3) // 4  # offsets r, r + 4, ... below count
        words = np.frombuffer(data, endian + "u4", count=k + 3, offset=r).astype(np.int64)
        sec, frac, incl, orig = (words[j : j + k] for j in range(4))
        ok = (
            (incl <= snap)
            & (incl <= orig)
            & (orig <= max(snap, MAX_PACKET))
            & (frac < frac_max)
            & (np.abs(sec - sec0) <= 366 * 86400)
        )
        found += (r + 4 * np.flatnonzero(ok)).tolist()
    return sorted(found)


PCAPNG_BLOCKS = (1, 2, 3, 4, 5, 6, 0x0A0D0D0A)  # interface, packet (old), simple, names, statistics, enhanced


def _pcapng_chain(data: bytes, p: int, endian: str, end: int) -> bool:
    u32 = struct.Struct(endian + "I").unpack_from
    for _ in range(CHAIN):
        if p == end or p + 8 > len(data):
            return True
        btype, blen = u32(data, p)[0], u32(data, p + 4)[0]
        if btype not in PCAPNG_BLOCKS or blen < 12 or blen % 4 or blen > MAX_BLOCK:
            return False
        if p + blen > len(data):
            return True
        if u32(data, p + blen - 4)[0] != blen:
            return False
        p += blen
    return True


def pcapng_boundary(path: str, offset: int) -> Optional[int]:
    """The first Enhanced or Simple Packet Block at or after `offset` in a pcapng file whose section
    started in the file's byte order, or None when none can be trusted."""
    with open(path, "rb") as f:
        head = f.read(12)
        size = os.fstat(f.fileno()).st_size
        if head[:4] != PCAPNG_SHB or len(head) < 12:
            return None
        endian = "<" if head[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
        offset -= offset % 4  # every block length is a multiple of 4
        f.seek(offset)
        data = f.read(max(0, min(SEARCH + 4 * (1 << 20), size - offset)))
    u32 = struct.Struct(endian + "I").unpack_from
    for p in range(0, min(SEARCH, len(data) - 8), 4):
        if u32(data, p)[0] in (3, 6) and _pcapng_chain(data, p, endian, size - offset):
            return offset + p
    return None


def past_refused(path: str, bad: int, incl: int, size: int) -> Optional[int]:
    """Where a pcap file is read on after the record at `bad` whose captured length `incl` is refused:
    just past it when that length still frames the file (the file ends there or a plausible record starts
    there: an over-long record, skipped whole), else the next plausible record start, or None."""
    end = bad + 16 + incl
    if end <= size and boundary(path, end, exact=True) == end:
        return end
    return boundary(path, bad + 1)
