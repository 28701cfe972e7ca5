"""The two loops numpy cannot vectorise: following pcap record lengths and copying byte windows.

Compiled with numba when it is installed (cached on disk after the first run); otherwise plain
Python/numpy versions with the same results run, just slower.
"""
import struct

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

try:
    from numba import njit  # noqa
    if __import__("os").environ.get("IBWIRE_NO_NUMBA"): raise ImportError
    HAVE_NUMBA = True
except ImportError:          # pragma: no cover - exercised by the fallback test through the py_ functions
    HAVE_NUMBA = False

MAX_RECORD = 0x4000000
OK, END, IMPOSSIBLE = 0, 1, 2


def py_walk_pcap(buf, off: int, max_n: int, big: bool):
    """Record-header offsets from `off`: (offsets int64[:n], n, next offset, status)."""
    mm = buf.data if isinstance(buf, np.ndarray) else buf
    incl_of = struct.Struct(">I" if big else "<I").unpack_from
    size = len(buf)
    offs = []
    status = OK
    while len(offs) < max_n:
        if off + 16 > size:
            status = END
            break
        incl = incl_of(mm, off + 8)[0]
        if incl > MAX_RECORD:
            status = IMPOSSIBLE
            break
        offs.append(off)
        off += 16 + incl
    return np.asarray(offs, dtype=np.int64), len(offs), off, status


def py_gather(buf, starts, lims, width: int):
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
    short = s + width > lims
    if short.any():
        rows = np.nonzero(short)[0]
        part = out[rows]
        part[(s[rows, None] + np.arange(width)) >= lims[rows, None]] = 0
        out[rows] = part
    neg = starts < 0
    if neg.any():
        out[neg] = 0
    return out


if HAVE_NUMBA:
    @njit(cache=True, nogil=True)
    def _walk_pcap_nb(buf, off, max_n, big):
        size = buf.shape[0]
        offs = np.empty(max_n, np.int64)
        n = 0
        status = OK
        while n < max_n:
            if off + 16 > size:
                status = END
                break
            p = off + 8
            if big:
                incl = (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) | buf[p + 3]
            else:
                incl = (np.int64(buf[p + 3]) << 24) | (np.int64(buf[p + 2]) << 16) | (np.int64(buf[p + 1]) << 8) | buf[p]
            if incl > MAX_RECORD:
                status = IMPOSSIBLE
                break
            offs[n] = off
            n += 1
            off += 16 + incl
        return offs[:n], n, off, status

    @njit(cache=True, nogil=True)
    def _gather_nb(buf, starts, lims, width):
        size = buf.shape[0]
        n = starts.shape[0]
        out = np.zeros((n, width), np.uint8)
        for i in range(n):
            s = starts[i]
            if s < 0:
                continue
            e = min(s + width, lims[i], size)
            for j in range(e - s):
                out[i, j] = buf[s + j]
        return out

    def walk_pcap(buf, off, max_n, big):
        return _walk_pcap_nb(buf, off, max_n, big)

    def gather(buf, starts, lims, width):
        return _gather_nb(buf, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(lims, np.int64), width)
else:
    walk_pcap, gather = py_walk_pcap, py_gather
