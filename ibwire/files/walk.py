"""Walk a pcap/pcapng file in large reused chunks and hand out batches of record positions.

The file is read with readinto() into one buffer that is reused (no page faults per packet, resident
memory independent of file size).  Record and block lengths are followed by compiled code; record headers
are then read for the whole batch at once with numpy.  Layouts: pcap(5) and pcapng
(draft-ietf-opsawg-pcapng): Section Header, Interface Description, Enhanced and Simple Packet Blocks.
"""

import os
import struct
import sys
from typing import Iterator, List, NamedTuple

import numpy as np

from ibwire.decode import _native
from ibwire.errors import UserError
from ibwire.files.capfile import file_format
from ibwire.files.formats import MAX_PACKET, PCAP_MAGICS, PCAPNG_SHB, if_tsresol
from ibwire.files.resync import past_refused

CHUNK = 1 << 22  # bytes read at a time (4 MB measured faster than 8 MB; the walk and the decoder prefetch)
KEEP_RETIRED = 4  # chunk buffers kept for reuse (a read-ahead queue and its consumer hold a few)
OK, NEED, IMPOSSIBLE, META = 0, 1, 2, 3  # _native.walk_pcap / walk_pcapng status


def walk_pcap(buf, off: int, max_n: int, big: bool):
    """Offsets of whole records (header and data inside `buf`) from `off` and their headers' four words
    (seconds, fraction, captured and original length; int64 [n, 4]): (offsets, headers, n, next offset,
    status); status NEED means the next record does not fit in `buf`, IMPOSSIBLE a damaged length.
    Following lengths is inherently sequential, so it runs compiled."""
    offs, hdrs = np.empty(max_n, np.int64), np.empty((max_n, 4), np.int64)
    n, off, status = _native.walk_pcap(buf, off, big, offs, hdrs)
    return offs[:n], hdrs[:n], n, off, status


def unreferenced(buf, holders: int) -> bool:
    """Whether only `holders` references refer to the array `buf`: no batch, view (each numpy view refers
    to the array that owns the memory) or Arrow buffer made from it is alive, so a producer running ahead
    may fill it again rather than take fresh memory (which costs page faults)."""
    return sys.getrefcount(buf) <= holders + 2  # + this call's parameter and getrefcount's argument


class SpanContextLost(Exception):
    """A pcapng span met a block that changes how later packets are read (a new section or interface):
    the file must be read from its start in one piece."""


class Positions(NamedTuple):
    """Where a batch's packets are in `CaptureWalk.buf`, their lengths, times, link types, frame numbers."""

    data: np.ndarray  # int64 offset of the first packet byte in the current buffer
    caplen: np.ndarray  # int64 captured bytes actually present
    wirelen: np.ndarray  # int64 original length
    time: np.ndarray  # float64 seconds
    linktype: np.ndarray  # int64
    frame: np.ndarray  # int64, 1-based
    ns: np.ndarray = None  # int64 nanoseconds since the epoch (exact where the file's resolution allows)
    iface: np.ndarray = None  # int64 pcapng interface id of each packet (None: a pcap file, one interface)


class CaptureWalk:
    """An open capture; iterate `batches()` (each valid until the next, or while referenced with `keep`);
    `problems` lists damage."""

    def __init__(self, path: str, batch: int = 16384, chunk: int = CHUNK, span=None, keep: bool = False):
        """`span` = (start, end) byte range of a pcap file whose records (starting at `start`, a record
        boundary) are wanted; frame numbers are then unknown and count from 0 (see files.split).  `keep`:
        each chunk is read into a buffer of its own, so a batch's `buf` stays valid for as long as it is
        referenced (a reader running ahead of its consumer); otherwise one buffer is reused."""
        self.path, self.batch, self.span, self.keep = path, batch, span, keep
        try:
            self.f = open(path, "rb")
            self.size = os.fstat(self.f.fileno()).st_size
        except OSError as e:
            raise UserError(f"cannot read {path}: {e.strerror or e}") from None
        head = self.f.read(4)
        self.f.seek(0)
        self.format = file_format(path, head)
        self._store = np.empty(min(chunk, max(self.size, 64)), np.uint8)
        self.buf = self._store[:0]  # valid bytes of the current chunk
        self._retired: List[np.ndarray] = []  # earlier chunk buffers (keep): reused once nothing refers to them
        self.base = 0  # file offset of buf[0]
        self.problems: List[str] = []
        self.drops: dict = {}  # pcapng interface statistics: (section, interface) -> packets dropped
        # every statistics block in file order: (packets read before it, (section, interface), dropped so far)
        self.drop_log: List[tuple] = []
        self.frames_read = 0
        self.sections = 0
        self.linktypes = set()
        self.bytes_done = 0

    def _refill(self, local: int) -> bool:
        """Make the chunk start at buf[local]; read more.  False when nothing more could be read."""
        rest = len(self.buf) - local
        if local == 0 and rest == len(self._store):  # one record larger than the chunk: grow
            bigger = np.empty(2 * len(self._store), np.uint8)
            bigger[:rest] = self._store[:rest]
            self._store = bigger
        elif self.keep:
            fresh = self._free_store(len(self._store))
            fresh[:rest] = self._store[local : local + rest]
            self._retired.append(self._store)
            self._store = fresh
        elif rest:
            self._store[:rest] = self._store[local : local + rest]
        self.base += local
        got = self.f.readinto(memoryview(self._store)[rest:])
        self.buf = self._store[: rest + got]
        return got > 0

    def _free_store(self, size: int) -> np.ndarray:
        """A chunk buffer no batch refers to any more (fresh memory costs page faults), else a new one."""
        for i, b in enumerate(self._retired):
            if len(b) == size and unreferenced(b, 2):  # the list and `b`
                del self._retired[i]
                return b
        del self._retired[:-KEEP_RETIRED]
        return np.empty(size, np.uint8)

    def _goto(self, offset: int) -> None:
        """Let the chunk start at file offset `offset`."""
        self.f.seek(offset)
        self.base, self.buf = offset, self._store[:0]
        self._refill(0)

    def batches(self) -> Iterator[Positions]:
        try:
            yield from (self._pcap() if self.format == "pcap" else self._pcapng())
        finally:
            self.f.close()

    def _pcap(self) -> Iterator[Positions]:
        self._refill(0)
        if len(self.buf) < 24:
            self.problems.append("file header truncated")
            return
        endian, scale, rec_len = PCAP_MAGICS[bytes(self.buf[:4])]
        if rec_len != 16:
            raise UserError(
                f"{self.path} is a modified (Kuznetsov) pcap, which only `ibwire decode` reads; "
                f"convert it with `editcap -F pcap`"
            )
        linktype = struct.unpack_from(endian + "I", self.buf, 20)[0] & 0x0FFFFFFF
        self.linktypes.add(linktype)
        local, frame0, stop = 24, 1, self.size
        if self.span:
            start, stop = self.span
            self._goto(start)
            frame0, local = 0, 0

        def where(k):
            return f"frame {k}" if frame0 else f"the record at byte {self.base + local}"

        while True:
            offs, hdrs, n, local, status = walk_pcap(self.buf, local, self.batch, endian == ">")
            eof = self.base + len(self.buf) >= self.size
            if n and self.base + offs[-1] >= stop:  # the rest belongs to the next span
                keep = self.base + offs < stop
                if keep.any():
                    yield self._pcap_batch(offs[keep], hdrs[keep], scale, linktype, frame0, local)
                return
            if n:
                yield self._pcap_batch(offs, hdrs, scale, linktype, frame0, local)
                frame0 += n if frame0 else 0
            if status == IMPOSSIBLE:
                bad = self.base + local
                incl = struct.unpack_from(endian + "I", self.buf, local + 8)[0]
                nxt = past_refused(self.path, bad, incl, self.size)
                if nxt is None or nxt >= stop:
                    self.problems.append(
                        f"{where(frame0)}: record length {incl} is impossible (over {MAX_PACKET}); "
                        "the rest of the file is unreadable"
                    )
                    return
                if nxt == bad + 16 + incl:
                    self.problems.append(
                        f"{where(frame0)}: record of {incl} bytes is over the {MAX_PACKET}-byte limit; skipped"
                    )
                    frame0 += 1 if frame0 else 0
                else:
                    self.problems.append(
                        f"{where(frame0)}: record length is impossible; skipped {nxt - bad} damaged "
                        "bytes to the next plausible record (frame numbers after it are estimates)"
                    )
                self._goto(nxt)
                local = 0
                continue
            if status == NEED:
                if self.base + local >= stop and self.span:
                    return
                if eof:
                    if local + 16 <= len(self.buf):  # last record cut short
                        self.problems.append(f"{where(frame0)}: record cut short at end of file")
                        hdr = np.array([struct.unpack_from(endian + "IIII", self.buf, local)], np.int64)
                        yield self._pcap_batch(np.array([local], np.int64), hdr, scale, linktype, frame0, len(self.buf))
                    elif local < len(self.buf):
                        self.problems.append("trailing bytes after the last record")
                    return
                self._refill(local)
                local = 0

    def _pcap_batch(self, offs, hdrs, scale, linktype, frame0, end) -> Positions:
        n = len(offs)
        sec, frac, incl, orig = hdrs.T
        data = offs + 16
        avail = np.clip(len(self.buf) - data, 0, incl)
        self.bytes_done = self.base + end
        frames = np.arange(frame0, frame0 + n) if frame0 else np.zeros(n, np.int64)
        return Positions(
            data,
            avail,
            np.maximum(orig, avail),
            sec + frac * scale,
            np.full(n, linktype, np.int64),
            frames,
            sec * 1_000_000_000 + frac * round(scale * 1e9),
        )

    def _pcapng(self) -> Iterator[Positions]:
        off, frame0, endian = 0, 1, "<"
        ifaces: List[tuple] = []  # (linktype, seconds per tick, snap length or 0)
        offs, types = np.empty(self.batch, np.int64), np.empty(self.batch, np.uint8)
        hdrs = np.empty((self.batch, 6), np.int64)
        stop = self.size
        self._refill(0)
        if self.span:  # the section header and interfaces first, then the span's blocks
            while True:
                n, off, status = _native.walk_pcapng(self.buf, off, endian == ">", offs[:1], types[:1], hdrs[:1])
                if status != META:
                    break
                off, endian, ifaces = self._pcapng_meta(off, endian, ifaces)
            start, stop = self.span
            frame0, off = 0, 0
            self._goto(start)
        while True:
            n, off, status = _native.walk_pcapng(self.buf, off, endian == ">", offs, types, hdrs)
            if n and self.span and self.base + offs[n - 1] >= stop:  # the rest belongs to the next span
                n = int(np.count_nonzero(self.base + offs[:n] < stop))
                status = OK if n else status
                if n:
                    yield self._epbs(offs[:n].copy(), hdrs[:n], np.nonzero(types[:n] == 3)[0], ifaces, frame0, off)
                return
            if n:
                yield self._epbs(offs[:n].copy(), hdrs[:n], np.nonzero(types[:n] == 3)[0], ifaces, frame0, off)
                frame0 += n if frame0 else 0
                self.frames_read += n
            if status == META:  # a Section Header, Interface Description or Statistics Block, whole in buf
                if self.span and struct.unpack_from(endian + "I", self.buf, off)[0] != 5:
                    raise SpanContextLost(f"{self.path}: a section or interface is described after packets")
                off, endian, ifaces = self._pcapng_meta(off, endian, ifaces)
            elif status == IMPOSSIBLE:
                blen = struct.unpack_from(endian + "I", self.buf, off + 4)[0]
                self.problems.append(f"damaged block length {blen}; the rest of the file is unreadable")
                return
            elif status == NEED:
                if self.base + off >= stop and self.span:
                    return
                if self.base + len(self.buf) >= self.size:
                    if off < len(self.buf):
                        self.problems.append("block cut short at end of file")
                    return
                self._refill(off)
                off = 0

    def _pcapng_meta(self, off: int, endian: str, ifaces: List[tuple]):
        """Read the Section Header or Interface Description Block at buf[off]: (next offset, byte order,
        interfaces)."""
        buf = self.buf
        if bytes(buf[off : off + 4]) == PCAPNG_SHB:
            endian = "<" if bytes(buf[off + 8 : off + 12]) == b"\x4d\x3c\x2b\x1a" else ">"
            ifaces = []
            self.sections += 1
            return off + struct.unpack_from(endian + "I", buf, off + 4)[0], endian, ifaces
        btype, blen = struct.unpack_from(endian + "II", buf, off)
        if btype == 5:
            self._statistics(bytes(buf[off + 8 : off + blen - 4]), endian)
            return off + blen, endian, ifaces
        lt, _, snap = struct.unpack_from(endian + "HHI", buf, off + 8)
        ifaces.append((lt, _ts_scale(bytes(buf[off + 16 : off + blen - 4]), endian), snap))
        self.linktypes.add(lt)
        return off + blen, endian, ifaces

    def _statistics(self, body: bytes, endian: str) -> None:
        """An Interface Statistics Block (draft-ietf-opsawg-pcapng §4.6): its isb_ifdrop (5) and isb_osdrop
        (7) summed; counts run from the capture's start, so a later block of the interface replaces it."""
        if len(body) < 12:
            return
        iface, pos, dropped = struct.unpack_from(endian + "I", body)[0], 12, None
        while pos + 4 <= len(body):
            code, n = struct.unpack_from(endian + "HH", body, pos)
            if code == 0:
                break
            if code in (5, 7) and n == 8 and pos + 12 <= len(body):
                dropped = (dropped or 0) + struct.unpack_from(endian + "Q", body, pos + 4)[0]
            pos += 4 + n + (-n % 4)
        if dropped is not None:
            self.drops[(self.sections, iface)] = dropped
            self.drop_log.append((self.frames_read, (self.sections, iface), dropped))

    def _epbs(self, o, hdrs, spb, ifaces, frame0, off) -> Positions:
        blen, iface, hi, lo, incl, orig = (hdrs[:, k].copy() for k in range(6))
        data = o + 28
        if len(spb):
            s = np.asarray(spb)
            orig[s] = iface[s]  # an SPB's word at byte 8 is its original length
            snap = ifaces[0][2] if ifaces and ifaces[0][2] else 1 << 62  # SPBs belong to interface 0
            incl[s] = np.minimum(np.minimum(orig[s], blen[s] - 16), snap)
            data[s] = o[s] + 12
            iface[s], hi[s], lo[s] = 0, 0, 0
        over = incl > MAX_PACKET
        incl = np.clip(incl, 0, np.maximum(o + blen - 4 - data, 0))
        lts = np.array([i[0] for i in ifaces] + [-1], dtype=np.int64)
        scales = np.array([i[1] for i in ifaces] + [0.0])
        bad = iface >= len(ifaces)
        if bad.any():
            self.problems.append(f"{int(bad.sum())} packets name an interface that was never described")
            iface = np.where(bad, len(ifaces), iface)
        self.bytes_done = self.base + off
        ticks = (hi << 32) | lo
        per_tick = np.array([i[1] * 1e9 for i in ifaces] + [0.0])[iface]
        whole = (per_tick >= 1) & (np.abs(per_tick - np.round(per_tick)) < 1e-6)  # 1 ns or coarser: exact
        ns = np.where(whole, ticks * np.round(per_tick).astype(np.int64), np.round(ticks * per_tick).astype(np.int64))
        pos = Positions(
            data,
            incl,
            np.maximum(orig, incl),
            ticks.astype(np.float64) * scales[iface],
            lts[iface],
            np.arange(frame0, frame0 + len(o)),
            ns,
            iface,
        )
        whole = blen >= 32  # 12 bytes of block + 20 of EPB fields
        if len(spb):
            whole[np.asarray(spb)] = blen[np.asarray(spb)] >= 16
        if not whole.all():
            self.problems.append(f"{int((~whole).sum())} packet blocks too short to hold a packet; skipped")
        if over.any():
            self.problems.append(f"{int(over.sum())} packets over the {MAX_PACKET}-byte limit; skipped")
            whole &= ~over
        if whole.all():
            return pos
        return Positions(*(np.asarray(col)[whole] for col in pos))


def _ts_scale(opts: bytes, endian: str) -> float:
    """Seconds per timestamp tick of an interface (its if_tsresol option)."""
    num, den = if_tsresol(opts, endian)
    return num / (den * 1e9)
