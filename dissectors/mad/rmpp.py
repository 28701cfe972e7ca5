"""Reassembly of RMPP transfers (IBA Vol 1 §13.6): the DATA segments of one transaction, in any order
and with duplicates, become one class payload, split into records by the SA AttributeOffset.

Each segment repeats the 56-byte MAD+RMPP+SA header and carries 200 bytes of data. PayloadLength counts
the SA header once per segment (220 bytes a segment, as the Linux kernel's mad_rmpp.c sends it): the
first segment holds the total, the last one the bytes it carries, so the padding of the last segment
is 220 - PayloadLength(last).

The segment number is 32 bits from the wire, so reassembly is bounded: a transfer holds at most
MAX_TRANSFER bytes of data (MAX_SEGMENTS segments); a segment numbered outside 1..MAX_SEGMENTS is left
out and the transfer is incomplete.
"""

import struct
from typing import Iterable, List, NamedTuple, Optional

from dissectors.mad import table
from dissectors.mad.sa import SA_DATA, SA_HEADER

SEGMENT = SA_DATA + 20  # data + SA header, the unit of PayloadLength
MAX_TRANSFER = 16 << 20  # a whole SA table larger than this is not reassembled
MAX_SEGMENTS = MAX_TRANSFER // SA_DATA


class Transfer(NamedTuple):
    tid: int
    header: bytes  # MAD + RMPP + SA header of the first segment (56 bytes)
    payload: bytes  # SA data, segments joined, padding removed
    records: list  # decoded records (scapy packets, Raw when the attribute is unknown)
    record_size: int  # AttributeOffset * 8
    missing: List[int]  # segment numbers absent between 1 and the last one
    complete: bool  # first and last segments present, none missing, none out of bounds


def _segment(mad: bytes):
    if len(mad) < SA_HEADER:
        return None
    tid = struct.unpack_from(">Q", mad, 8)[0]
    rtype, flags = mad[25], mad[26] & 0x07
    segnum, paylen = struct.unpack_from(">II", mad, 28)
    if rtype == 0:  # not an RMPP transfer: a single self-contained MAD
        return tid, 1, 0x6, SEGMENT, mad
    if rtype != 1:  # ACK / STOP / ABORT carry no data
        return None
    return tid, segnum, flags, paylen, mad


def split_records(mgmtclass: int, attrid: int, data: bytes, record_size: int) -> list:
    """Decode each `record_size`-byte record of `data` with the layer the attribute table names."""
    from scapy.packet import Raw

    if record_size <= 0:
        return []
    layer = table.attribute(mgmtclass, attrid)[1] or Raw
    out = []
    for at in range(0, len(data) - record_size + 1, record_size):
        chunk = data[at : at + record_size]
        try:
            out.append(layer(chunk))
        except Exception:
            out.append(Raw(chunk))
    return out


def reassemble(mads: Iterable[bytes], tid: Optional[int] = None) -> Optional[Transfer]:
    """Join the DATA segments of one RMPP transfer (the first TID seen unless `tid` is given); at most
    MAX_SEGMENTS segments, so memory and time stay bounded whatever the segment numbers say."""
    segs = {}
    beyond = False
    for mad in mads:
        s = _segment(bytes(mad))
        if s is None:
            continue
        if tid is None:
            tid = s[0]
        if s[0] != tid:
            continue
        if not 1 <= s[1] <= MAX_SEGMENTS:
            beyond = True
            continue
        segs.setdefault(s[1], s)
    if not segs:
        return None
    nums = sorted(segs)
    first = segs.get(1)
    last = next((segs[n] for n in nums if segs[n][2] & 0x4), None)
    end = last[1] if last else nums[-1]
    missing = [n for n in range(1, end + 1) if n not in segs]
    data = b"".join(
        segs[n][4][SA_HEADER : SA_HEADER + SA_DATA].ljust(SA_DATA, b"\0") for n in range(1, end + 1) if n in segs
    )
    if last is not None and not missing:
        pad = SEGMENT - min(last[3], SEGMENT) if last[2] != 0x6 or len(nums) > 1 else 0
        data = data[: len(data) - pad] if pad else data
    head = (first or segs[nums[0]])[4][:SA_HEADER]
    mgmtclass, attrid = head[1], struct.unpack_from(">H", head, 16)[0]
    record_size = struct.unpack_from(">H", head, 44)[0] * 8
    return Transfer(
        tid,
        head,
        data,
        split_records(mgmtclass, attrid, data, record_size),
        record_size,
        missing,
        first is not None and last is not None and not missing and not beyond,
    )
