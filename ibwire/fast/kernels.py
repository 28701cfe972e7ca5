"""The two byte-level primitives of the fast path: following pcap record lengths, copying byte windows.

Following lengths is inherently sequential (each record's position depends on the previous one), so it
runs compiled (`_native.walk_pcap`); everything after it works on whole batches with numpy.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import _native

OK, NEED, IMPOSSIBLE = 0, 1, 2


def walk_pcap(buf, off: int, max_n: int, big: bool):
    """Offsets of whole records (header and data inside `buf`) from `off`: (offsets, n, next offset,
    status); status NEED means the next record does not fit in `buf`, IMPOSSIBLE a damaged length."""
    offs = np.empty(max_n, np.int64)
    n, off, status = _native.walk_pcap(buf, off, big, offs)
    return offs[:n], n, off, status


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
