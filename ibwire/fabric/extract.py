"""Find the MADs in a capture without building a packet object per frame.

Native InfiniBand only (link type 247, or ERF records of type 21/25 in link type 197): subnet management
lives on QP0 of native IB links, which RoCE does not have.  A frame is a MAD when its BTH opcode is
UD SEND Only and the destination QP is 0 or 1 (IBA Vol 1 §9.2, §13.5.1).  ERF layout: 16-byte header,
extension headers when type bit 7 is set (each 8 bytes, chained by bit 7 of their own type byte).
"""

import struct
from typing import Iterator, NamedTuple

from dissectors.numbers import LINKTYPE_ERF, LINKTYPE_INFINIBAND
from dissectors.opcodes import OPCODES

from ..readers import iter_frames
from ..writers import ERF_TYPE_INFINIBAND, ERF_TYPE_INFINIBAND_LINK

UD_SEND_ONLY = next(o.code for o in OPCODES.values() if o.transport == "UD" and o.name == "SEND Only")
MAD_LEN = 256


class MadFrame(NamedTuple):
    number: int
    time: float
    slid: int
    dlid: int
    dqp: int
    sqp: int
    mad: bytes


def native_ib(linktype: int, data: bytes):
    """The native IB packet (from the LRH) inside a frame, or None."""
    if linktype == LINKTYPE_INFINIBAND:
        return data
    if linktype != LINKTYPE_ERF or len(data) < 16:
        return None
    etype = data[8]
    if etype & 0x7F not in (ERF_TYPE_INFINIBAND, ERF_TYPE_INFINIBAND_LINK):
        return None
    off, more = 16, etype & 0x80
    while more and off + 8 <= len(data):
        more = data[off] & 0x80
        off += 8
    return data[off:]


def iter_mads(path: str) -> Iterator[MadFrame]:
    """Every management datagram of a capture with the addressing of the packet that carried it."""
    for fr in iter_frames(path):
        ib = native_ib(fr.linktype, fr.data)
        if ib is None or len(ib) < 8 + 12 + 8 + 24:
            continue
        lnh = ib[1] & 0x3
        if lnh == 2:
            bth = 8
        elif lnh == 3:
            bth = 48
        else:
            continue
        if len(ib) < bth + 20 + 24 or ib[bth] != UD_SEND_ONLY:
            continue
        dqp = struct.unpack_from(">I", ib, bth + 4)[0] & 0xFFFFFF
        if dqp > 1:
            continue
        sqp = struct.unpack_from(">I", ib, bth + 16)[0] & 0xFFFFFF
        dlid, slid = struct.unpack_from(">H2xH", ib, 2)
        mad = ib[bth + 20 : bth + 20 + MAD_LEN]
        yield MadFrame(fr.number, fr.time, slid, dlid, dqp, sqp, mad)
