"""Finding where records start again after an arbitrary byte offset of a pcap or pcapng file: after a
damaged record length, and where fast.split cuts a file into spans.

A record start is trusted when a chain of records from it stays plausible for CHAIN records or to the end
of the file.  pcap(5): lengths within the snap length, captured <= original, sub-second field in range,
seconds close to the file's first packet.  pcapng (draft-ietf-opsawg-pcapng): a packet block whose every
block's trailing length repeats its leading one.
"""
import os
import struct
from typing import Optional

from .formats import MAX_BLOCK, MAX_PACKET, PCAP_MAGICS, PCAPNG_SHB

CHAIN = 64
SEARCH = 1 << 20


def _plausible_chain(data: bytes, p: int, endian: str, snap: int, frac_max: int, sec0: int, end: int) -> bool:
    hdr = struct.Struct(endian + "IIII")
    for _ in range(CHAIN):
        if p == end:
            return True
        if p + 16 > len(data):
            return True        # ran past the read window after several good records
        sec, frac, incl, orig = hdr.unpack_from(data, p)
        if incl > snap or incl > orig or orig > max(snap, MAX_PACKET) or frac >= frac_max or \
                abs(sec - sec0) > 366 * 86400:
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
        data = f.read(max(0, min(SEARCH + CHAIN * (snap + 16), size - offset)))   # never more than the file
    for p in range(0, 1 if exact else min(SEARCH, len(data))):
        if _plausible_chain(data, p, endian, snap, frac_max, sec0, size - offset):
            return offset + p
    return None


PCAPNG_BLOCKS = (1, 2, 3, 4, 5, 6, 0x0A0D0D0A)   # interface, packet (old), simple, names, statistics, enhanced


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
        offset -= offset % 4                  # every block length is a multiple of 4
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
