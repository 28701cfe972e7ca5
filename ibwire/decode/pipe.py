"""A capture read from a pipe (`ibwire decode -`), record by record as it arrives, in the batches the
compiled decoder takes.  A batch is handed on when it is full, whenever reading on would wait for the
writer, and at the end: lines appear as soon as their packets have arrived.

Layouts: pcap(5) (either byte order, µs or ns) and pcapng (draft-ietf-opsawg-pcapng: Section Header,
Interface Description with if_tsresol, Enhanced and Simple Packet Blocks; other blocks skipped).
"""

import os
import select
import struct
from typing import Iterator, List

import numpy as np

from ibwire.decode.stream import Batch
from ibwire.errors import UserError
from ibwire.files.capfile import PCAP_MAGICS, PCAPNG_SHB
from ibwire.files.formats import MAX_BLOCK, MAX_PACKET, if_tsresol

BATCH = 4096
FLUSH = object()  # what the record generators yield before they would wait for input


class PipeStream:
    def __init__(self, f, icrc: bool = True):
        self.fd, self.icrc = f.fileno(), icrc
        self.buf, self.pos, self.eof = bytearray(), 0, False
        self.problems: List[str] = []
        self.decimals = 6
        self.head = self._take_now(4)
        if self.head in PCAP_MAGICS:
            self.format = "pcap"
            self.decimals = 9 if PCAP_MAGICS[self.head][1] == 1e-9 else 6
        elif self.head == PCAPNG_SHB:
            self.format = "pcapng"
        else:
            raise UserError(
                f"standard input is not a pcap or pcapng capture (it starts with {self.head.hex() or 'nothing'})"
            )

    def _more(self) -> bool:
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            self.eof = True
            return False
        del self.buf[: self.pos]
        self.pos = 0
        self.buf += chunk
        return True

    def _take_now(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n and self._more():
            pass
        return self._cut(n)

    def _cut(self, n: int) -> bytes:
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += len(out)
        return out

    def _need(self, n: int):
        """Generator: FLUSH before every wait for the writer; returns the next n bytes (fewer at the end)."""
        while len(self.buf) - self.pos < n and not self.eof:
            if not select.select([self.fd], [], [], 0)[0]:
                yield FLUSH
            self._more()
        return self._cut(n)

    def __iter__(self) -> Iterator[Batch]:
        from ibwire.decode.batch import decode_batch
        from ibwire.files.walk import Positions

        buf, cols = bytearray(), [[] for _ in range(5)]  # data offset, caplen, wirelen, ns, linktype
        frame = 1
        records = self._pcap() if self.format == "pcap" else self._pcapng()
        for item in records:
            if item is not FLUSH and item is not None:
                data, wirelen, ns, lt = item
                for c, v in zip(cols, (len(buf), len(data), max(wirelen, len(data)), ns, lt)):
                    c.append(v)
                buf += data
            if cols[0] and (item is FLUSH or item is None or len(cols[0]) >= BATCH):
                n = len(cols[0])
                arr = [np.array(c, np.int64) for c in cols]
                pos = Positions(arr[0], arr[1], arr[2], arr[3] / 1e9, arr[4], np.arange(frame, frame + n), arr[3])
                npbuf = np.frombuffer(bytes(buf), np.uint8)
                yield Batch(decode_batch(npbuf, pos, self.icrc), pos, npbuf)
                frame += n
                buf, cols = bytearray(), [[] for _ in range(5)]

    def _pcap(self):
        rest = yield from self._need(20)
        if len(rest) < 20:
            self.problems.append("file header truncated")
            return
        endian, scale, rec_len = PCAP_MAGICS[self.head]
        lt = struct.unpack_from(endian + "I", rest, 16)[0] & 0x0FFFFFFF
        hdr = struct.Struct(endian + "IIII")
        unit = 1 if scale == 1e-9 else 1000
        while True:
            rh = yield from self._need(rec_len)
            if len(rh) < rec_len:
                if rh:
                    self.problems.append("record header cut short at end of input")
                break
            sec, frac, incl, orig = hdr.unpack_from(rh)
            if incl > MAX_PACKET:
                self.problems.append(
                    f"record length {incl} is impossible (over {MAX_PACKET}); the rest of the input is unreadable"
                )
                break
            data = yield from self._need(incl)
            if len(data) < incl:
                self.problems.append("record cut short at end of input")
            yield data, orig, sec * 1_000_000_000 + frac * unit, lt
        yield None

    def _pcapng(self):
        endian, ifaces = "<", []
        head = self.head
        while True:
            head = head + (yield from self._need(12 - len(head)))
            if len(head) < 12:
                if head:
                    self.problems.append("block cut short at end of input")
                break
            if head[:4] == PCAPNG_SHB:
                endian = "<" if head[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
                ifaces = []
            btype, blen = struct.unpack_from(endian + "II", head)
            if blen < 12 or blen % 4 or blen > MAX_BLOCK:
                self.problems.append(f"damaged block length {blen}; the rest of the input is unreadable")
                break
            body = head[8:] + (yield from self._need(blen - 12))
            if len(body) < blen - 8:
                self.problems.append("block cut short at end of input")
                break
            body = body[: blen - 12]
            head = b""
            if btype == 1:
                lt, _, snap = struct.unpack_from(endian + "HHI", (body + bytes(8))[:8])  # a cut block: zeros
                ifaces.append((lt, if_tsresol(body[8:], endian), snap))
                if len(ifaces) == 1:
                    self.decimals = 9 if ifaces[0][1][0] < ifaces[0][1][1] * 1000 else 6
            elif btype == 6 and len(body) >= 20:
                iface, hi, lo, incl, orig = struct.unpack_from(endian + "IIIII", body)
                if iface >= len(ifaces):
                    self.problems.append(f"a packet names interface {iface}, which was never described")
                    continue
                if incl > MAX_PACKET:
                    self.problems.append(f"a packet of {incl} bytes is over the {MAX_PACKET}-byte limit; skipped")
                    continue
                lt, ticks, _ = ifaces[iface]
                yield body[20 : 20 + incl], orig, ((hi << 32) | lo) * ticks[0] // ticks[1], lt
            elif btype == 3 and len(body) >= 4 and ifaces:
                orig = struct.unpack_from(endian + "I", body)[0]
                snap = ifaces[0][2] or orig  # the block's padding is no packet data
                got = min(orig, snap, len(body) - 4)
                if got > MAX_PACKET:
                    self.problems.append(f"a packet of {got} bytes is over the {MAX_PACKET}-byte limit; skipped")
                    continue
                yield body[4 : 4 + got], orig, 0, ifaces[0][0]
        yield None
