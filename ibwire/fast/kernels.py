"""The two byte-level primitives of the fast path: following pcap record lengths, copying byte windows.

Following lengths is inherently sequential (each record's position depends on the previous one), so it is
the one per-packet Python loop, kept to a struct read and an append.  numba was tried for both: it saved
little and cost ~50 MB of resident memory, so plain Python/numpy it is.
"""
import struct

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

MAX_RECORD = 0x4000000
OK, NEED, IMPOSSIBLE = 0, 1, 2


def walk_pcap(buf, off: int, max_n: int, big: bool):
    """Offsets of whole records (header and data inside `buf`) from `off`: (offsets, n, next offset,
    status); status NEED means the next record does not fit in `buf`, IMPOSSIBLE a damaged length.

    The loop only follows lengths; validation happens afterwards on the whole batch with numpy."""
    incl_of = struct.Struct(">I" if big else "<I").unpack_from
    offs = []
    app = offs.append
    try:
        for _ in range(max_n):
            app(off)
            off += 16 + incl_of(buf, off + 8)[0]
    except struct.error:          # no complete record header at `off`
        offs.pop()
    o = np.asarray(offs, dtype=np.int64)
    if not len(o):
        return o, 0, off, NEED
    ends = np.empty_like(o)
    ends[:-1] = o[1:]
    ends[-1] = off
    status = OK if len(o) == max_n else NEED
    bad = np.nonzero((ends - o - 16 > MAX_RECORD) | (ends > len(buf)))[0]
    if len(bad):
        k = int(bad[0])
        status = IMPOSSIBLE if ends[k] - o[k] - 16 > MAX_RECORD else NEED
        off, o = int(o[k]), o[:k]
    return o, len(o), off, status


def gather(buf, starts, lims, width: int):
    """width bytes from each start, zero at and beyond each row's limit (and beyond the buffer)."""
    size = len(buf)
    s = np.clip(starts, 0, size)
    safe = s <= size - width
    if safe.all():
        out = sliding_window_view(buf, width)[s]
    else:
        out = np.zeros((len(s), width), np.uint8)
        if size >= width:
            out[safe] = sliding_window_view(buf, width)[s[safe]]
        base = max(size - 2 * width, 0)
        tail = np.zeros(size - base + width, np.uint8)
        tail[:size - base] = buf[base:]
        out[~safe] = sliding_window_view(tail, width)[s[~safe] - base]
    short = np.nonzero(s + width > lims)[0]
    if len(short):                      # zero what lies past each packet's captured end, by length group
        keep = np.clip(lims[short] - s[short], 0, width)
        for k in np.unique(keep).tolist():
            out[short[keep == k], k:] = 0
    neg = starts < 0
    if neg.any():
        out[neg] = 0
    return out
