"""Find the MADs in a capture without building a packet object per frame.

Native InfiniBand only (link type 247, or ERF records of type 21/25 in link type 197): subnet management
lives on QP0 of native IB links, which RoCE does not have.  Which packets carry a MAD is
dissectors.decisions' rule, the one both decoders follow; ERF records are read by
ibwire.files.formats.erf_header.
"""

import struct
from typing import Iterator, NamedTuple

from dissectors.decisions import carries_mad, may_carry_mad
from dissectors.numbers import LINKTYPE_ERF, LINKTYPE_INFINIBAND, MAD_HEADER_LEN
from dissectors.opcodes import HEADER_LEN, OPCODES, headers_len
from ibwire.files import iter_frames
from ibwire.files.formats import erf_header
from ibwire.files.writers import ERF_TYPE_INFINIBAND, ERF_TYPE_INFINIBAND_LINK

MAD_LEN = 256


def _srcqp(ib: bytes, bth: int, op: int):
    """DETH.SrcQP of the packet whose BTH is at `bth` (IBA §9.3.3: Q_Key, then the 24-bit source QP)."""
    hdrs = OPCODES[op].headers
    if "deth" not in hdrs:
        return None
    at = bth + 12 + sum(HEADER_LEN[h] for h in hdrs[: hdrs.index("deth")])
    return struct.unpack_from(">I", ib, at + 4)[0] & 0xFFFFFF


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
    head = erf_header(data) if linktype == LINKTYPE_ERF else None
    if head is None or head[0] not in (ERF_TYPE_INFINIBAND, ERF_TYPE_INFINIBAND_LINK):
        return None
    return data[head[1] :]


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
        op = ib[bth]
        at = bth + 12 + headers_len(op)
        if not may_carry_mad(op) or len(ib) < at + MAD_HEADER_LEN:
            continue
        dqp, sqp = struct.unpack_from(">I", ib, bth + 4)[0] & 0xFFFFFF, _srcqp(ib, bth, op)
        if not carries_mad(op, dqp, sqp):
            continue
        dlid, slid = struct.unpack_from(">H2xH", ib, 2)
        mad = ib[at : at + MAD_LEN]
        yield MadFrame(fr.number, fr.time, slid, dlid, dqp, sqp, mad)
