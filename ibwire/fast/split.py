"""Cut a large pcap file into byte spans that start on record boundaries, so several processes can
decode it at once (statistics only: frame numbers are not known inside a span).

A boundary is found by resynchronising: the first offset after the cut from which a chain of record
headers stays plausible (lengths within the snap length, captured ≤ original, sub-second field in
range, seconds close to the file's first packet) for CHAIN records or to the end of the file.
"""
import os
import struct
from typing import List, Optional, Tuple

from .walk import PCAP_MAGICS

CHAIN = 64
SEARCH = 1 << 20
MIN_SPLIT = 64 << 20     # files smaller than this are not worth splitting


def _plausible_chain(data: bytes, p: int, endian: str, snap: int, frac_max: int, sec0: int, end: int) -> bool:
    hdr = struct.Struct(endian + "IIII")
    for _ in range(CHAIN):
        if p == end:
            return True
        if p + 16 > len(data):
            return True        # ran past the read window after several good records
        sec, frac, incl, orig = hdr.unpack_from(data, p)
        if incl > snap or incl > orig or orig > max(snap, 262144) or frac >= frac_max or abs(sec - sec0) > 366 * 86400:
            return False
        p += 16 + incl
    return True


def boundary(path: str, offset: int) -> Optional[int]:
    """The first record start at or after `offset` in a pcap file, or None when none can be trusted."""
    with open(path, "rb") as f:
        head = f.read(40)
        size = os.fstat(f.fileno()).st_size
        if head[:4] not in PCAP_MAGICS or len(head) < 40:
            return None
        endian, scale, rec_len = PCAP_MAGICS[head[:4]]
        if rec_len != 16:
            return None
        snap = struct.unpack_from(endian + "I", head, 16)[0] or 262144
        sec0 = struct.unpack_from(endian + "I", head, 24)[0]
        frac_max = 1_000_000 if scale == 1e-6 else 1_000_000_000
        f.seek(offset)
        data = f.read(SEARCH + CHAIN * (snap + 16))
    for p in range(0, min(SEARCH, len(data))):
        if _plausible_chain(data, p, endian, snap, frac_max, sec0, size - offset):
            return offset + p
    return None


def spans(path: str, parts: int) -> Optional[List[Tuple[int, int]]]:
    """`parts` (start, end) byte spans covering every record of a big pcap file, or None."""
    size = os.path.getsize(path)
    if parts < 2 or size < MIN_SPLIT:
        return None
    with open(path, "rb") as f:
        if f.read(4) not in PCAP_MAGICS:
            return None
    cuts = [24]
    for k in range(1, parts):
        b = boundary(path, size * k // parts)
        if b is None or b <= cuts[-1]:
            return None
        cuts.append(b)
    cuts.append(size)
    return list(zip(cuts[:-1], cuts[1:]))
