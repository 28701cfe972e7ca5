"""Cut a large pcap or pcapng file into byte spans that start on record boundaries, so several processes
can decode it at once (stats and flows: a span's frame numbers are known only once the spans before it
are counted).

Each cut moves to the next record start files.resync trusts.  A pcapng span reads its section header and
interfaces from the start of the file (files.walk.SpanContextLost when a later block would change them).
"""

import os
import struct
from typing import List, Optional, Tuple

from ibwire.errors import UserError
from ibwire.files.formats import PCAP_MAGICS, PCAPNG_SHB
from ibwire.files.resync import boundary, pcapng_boundary

MIN_SPLIT = 64 << 20  # files smaller than this are not worth splitting
MIN_SPAN = 8 << 20  # nor spans smaller than this


def processes(requested: int, units: int) -> int:
    """How many processes to run: `requested` (0: one per CPU), never more than the CPUs this process may
    use nor than `units` of work to share (spans, conversations)."""
    if requested < 0:
        raise UserError(f"-j {requested}: give a number of processes, or 0 for one per CPU")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(requested or cpus, cpus, units))


def _first_packet_block(path: str) -> Optional[int]:
    """Offset of the first packet block of a pcapng file (after its section header and interfaces)."""
    with open(path, "rb") as f:
        data = f.read(1 << 20)
    endian = "<" if data[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
    u32 = struct.Struct(endian + "I").unpack_from
    p = 0
    while p + 12 <= len(data):
        btype, blen = u32(data, p)[0], u32(data, p + 4)[0]
        if btype in (3, 6):
            return p
        if blen < 12 or blen % 4:
            return None
        p += blen
    return None


def spans(path: str, parts: int) -> Optional[List[Tuple[int, int]]]:
    """`parts` (start, end) byte spans covering every record of a big pcap or pcapng file, or None."""
    size = os.path.getsize(path)
    if parts < 2 or size < MIN_SPLIT:
        return None
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic in PCAP_MAGICS:
        cuts, find = [24], boundary
    elif magic == PCAPNG_SHB:
        first = _first_packet_block(path)
        if first is None:
            return None
        cuts, find = [first], pcapng_boundary
    else:
        return None
    for k in range(1, parts):
        b = find(path, size * k // parts)
        if b is None or b <= cuts[-1]:
            return None
        cuts.append(b)
    cuts.append(size)
    return list(zip(cuts[:-1], cuts[1:]))
