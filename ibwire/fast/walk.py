"""Walk a pcap/pcapng file through mmap and hand out batches of record positions, no per-packet objects.

The only per-packet Python work is following record lengths (each record's position depends on the one
before); headers are then read for the whole batch at once with numpy.  Layouts: pcap(5) and pcapng
(draft-ietf-opsawg-pcapng): Section Header, Interface Description, Enhanced and Simple Packet Blocks.
"""
import mmap
import os
import struct
from typing import Iterator, List, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import UserError
from .kernels import IMPOSSIBLE, OK, walk_pcap

PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}
PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"


class Positions(NamedTuple):
    """Where a batch's packets are: data offset in the file, lengths, times, link type, frame numbers."""
    data: np.ndarray      # int64 offset of the first packet byte
    caplen: np.ndarray    # int64 captured bytes actually present
    wirelen: np.ndarray   # int64 original length
    time: np.ndarray      # float64 seconds
    linktype: np.ndarray  # int64
    frame: np.ndarray     # int64, 1-based


def _u32(win: np.ndarray, col: int, endian: str) -> np.ndarray:
    return win[:, col:col + 4].copy().view(endian + "u4")[:, 0].astype(np.int64)


class CaptureWalk:
    """An mmap-ed capture; iterate `batches()`; `problems` lists damage, `linktypes` what was seen."""

    def __init__(self, path: str, batch: int = 16384):
        self.path, self.batch = path, batch
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except OSError as e:
            raise UserError(f"cannot read {path}: {e.strerror or e}") from None
        head = bytes(self.mm[:4])
        if head in PCAP_MAGICS:
            self.format = "pcap"
        elif head == PCAPNG_SHB:
            self.format = "pcapng"
        else:
            raise UserError(f"{path} is not a pcap or pcapng file (it starts with {head.hex() or 'nothing'})")
        self.size = size
        self.buf = np.frombuffer(self.mm, dtype=np.uint8)
        self.problems: List[str] = []
        self.linktypes = set()
        self.bytes_done = 0
        self._released = 0

    def _release(self, upto: int) -> None:
        """Drop already-decoded pages from this process's memory so RSS stays flat on big files."""
        page = mmap.PAGESIZE
        upto -= upto % page
        if upto > self._released and hasattr(self.mm, "madvise"):
            self.mm.madvise(mmap.MADV_DONTNEED, self._released, upto - self._released)
            self._released = upto

    def batches(self) -> Iterator[Positions]:
        return self._pcap() if self.format == "pcap" else self._pcapng()

    def _pcap(self) -> Iterator[Positions]:
        mm, size = self.mm, self.size
        if size < 24:
            self.problems.append("file header truncated")
            return
        endian, scale = PCAP_MAGICS[bytes(mm[:4])]
        linktype = struct.unpack_from(endian + "I", mm, 20)[0] & 0x0FFFFFFF
        self.linktypes.add(linktype)
        off, frame0 = 24, 1
        while True:
            offs, n, off, status = walk_pcap(self.buf, off, self.batch, endian == ">")
            if status == IMPOSSIBLE:
                self.problems.append(f"frame {frame0 + n}: record length is impossible; "
                                     "the rest of the file is unreadable")
            if n:
                hdr = sliding_window_view(self.buf, 16)[offs]
                sec, frac, incl, orig = (_u32(hdr, c, endian) for c in (0, 4, 8, 12))
                data = offs + 16
                avail = np.clip(size - data, 0, incl)
                if avail[-1] < incl[-1]:
                    self.problems.append(f"frame {frame0 + n - 1}: record cut short at end of file")
                self.bytes_done = min(off, size)
                yield Positions(data, avail, np.maximum(orig, avail), sec + frac * scale,
                                np.full(n, linktype, np.int64), np.arange(frame0, frame0 + n))
                self._release(int(data[-1]))
                frame0 += n
            if status != OK or not n:
                break
        if off < size and not self.problems:
            self.problems.append("trailing bytes after the last record")

    def _pcapng(self) -> Iterator[Positions]:
        mm, size = self.mm, self.size
        off, frame0, endian = 0, 1, "<"
        ifaces: List[tuple] = []     # (linktype, seconds per tick)
        bl = struct.Struct("<II").unpack_from
        while off + 12 <= size:
            offs, spb = [], []
            app = offs.append
            n = self.batch
            while n and off + 12 <= size:
                btype, blen = bl(mm, off)
                if endian == ">":
                    btype, blen = struct.unpack_from(">II", mm, off)
                if btype == 0x0A0D0D0A:
                    if offs:              # byte order and interfaces may change: finish this batch first
                        break
                    endian = "<" if bytes(mm[off + 8:off + 12]) == b"\x4d\x3c\x2b\x1a" else ">"
                    bl = struct.Struct(endian + "II").unpack_from
                    blen = bl(mm, off)[1]
                    ifaces = []
                if blen < 12 or blen % 4 or off + blen > size:
                    self.problems.append("block cut short at end of file" if off + blen > size
                                         else f"damaged block length {blen}; the rest of the file is unreadable")
                    off = size
                    break
                if btype == 6:
                    app(off)
                    n -= 1
                elif btype == 3:
                    spb.append(len(offs))
                    app(off)
                    n -= 1
                elif btype == 1:
                    lt = struct.unpack_from(endian + "H", mm, off + 8)[0]
                    ifaces.append((lt, _ts_scale(bytes(mm[off + 16:off + blen - 4]), endian)))
                    self.linktypes.add(lt)
                off += blen
            if not offs:
                if off + 12 > size or n:
                    break
                continue
            o = np.asarray(offs, dtype=np.int64)
            hdr = sliding_window_view(self.buf, 28)[np.minimum(o, size - 28)]
            iface, hi, lo, incl, orig = (_u32(hdr, c, endian) for c in (8, 12, 16, 20, 24))
            blen = _u32(hdr, 4, endian)
            data = o + 28
            if spb:
                s = np.asarray(spb)
                orig[s] = _u32(hdr, 8, endian)[s]
                incl[s] = np.minimum(orig[s], blen[s] - 16)
                data[s] = o[s] + 12
                iface[s], hi[s], lo[s] = 0, 0, 0
            incl = np.clip(incl, 0, np.maximum(o + blen - 4 - data, 0))
            lts = np.array([i[0] for i in ifaces] + [-1], dtype=np.int64)
            scales = np.array([i[1] for i in ifaces] + [0.0])
            bad = iface >= len(ifaces)
            if bad.any():
                self.problems.append(f"{int(bad.sum())} packets name an interface that was never described")
                iface = np.where(bad, len(ifaces), iface)
            t = ((hi << 32) | lo).astype(np.float64) * scales[iface]
            self.bytes_done = off
            self._release(int(data[-1]))
            yield Positions(data, incl, np.maximum(orig, incl), t, lts[iface],
                            np.arange(frame0, frame0 + len(offs)))
            frame0 += len(offs)


def _ts_scale(opts: bytes, endian: str) -> float:
    """if_tsresol option (code 9) of an Interface Description Block; default microseconds."""
    o = 0
    while o + 4 <= len(opts):
        code, ln = struct.unpack_from(endian + "HH", opts, o)
        if code == 0:
            break
        if code == 9 and ln >= 1:
            r = opts[o + 4]
            return 2.0 ** -(r & 0x7F) if r & 0x80 else 10.0 ** -r
        o += 4 + ((ln + 3) & ~3)
    return 1e-6
