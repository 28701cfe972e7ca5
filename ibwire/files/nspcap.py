"""dumpcap's pcapng stream rewritten as nanosecond pcap, for `.pcap` outputs and `-w -`.

dumpcap 4.0 writes pcap only with microsecond timestamps (`-P`); its pcapng (`-n`) keeps the kernel's
nanoseconds (if_tsresol 9).  For a pcap output dumpcap writes pcapng into a pipe, and in this thread compiled code
(`_native.nspcap`) turns each run of Enhanced Packet Blocks (pcapng draft §4.3) into records of a nanosecond pcap
(magic 0xa1b23c4d, pcap(5)): the same bytes, captured and original lengths, the timestamp to the nanosecond; the
link type and snaplen come from the Interface Description Block (§4.2).  Statistics and other blocks have no place in pcap.  Only whole records
are written, flushed after each read, so the output is a valid capture at every moment.  -C/-W rotation is done
here, with dumpcap's names (`ring_name`).
"""

import errno
import os
import struct
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import List, Optional

from ibwire.decode import _native
from ibwire.errors import UserError
from ibwire.files.formats import if_tsresol
from ibwire.files.outfile import open_direct

NS_PCAP_MAGIC = 0xA1B23C4D
SHB, IDB, EPB = b"\x0a\x0d\x0d\x0a", 1, 6  # block types (SHB as bytes: the same in both orders)
F_SETPIPE_SZ = 1031
PIPE_BYTES = 1 << 20  # room for a burst while this thread waits for the CPU (dumpcap's ring holds more)
DEFAULT_SNAPLEN = 262144
RECORD = struct.Struct("<IIII")  # pcap record header: seconds, nanoseconds, captured and original length


def ring_name(path: str, number: int, when: Optional[float] = None) -> str:
    """The name of file `number` (from 1) of a rotated capture written as `path`, as dumpcap names its ring
    files: vf2.pcap -> vf2_00001_20261203121500.pcap (local time of the file's start)."""
    p = Path(path)
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(when))
    return str(p.with_name(f"{p.stem}_{number:05d}_{stamp}{p.suffix}"))


def next_in_ring(path: str, number: int, files: list, keep: Optional[int]) -> str:
    """ring_name() of file `number`; with `keep` files already in `files`, the oldest is deleted first."""
    if keep and len(files) >= keep:
        try:
            os.unlink(files.pop(0))
        except OSError:
            pass
    return ring_name(path, number)


def pcap_header(linktype: int, snaplen: int) -> bytes:
    return struct.pack("<IHHiIII", NS_PCAP_MAGIC, 2, 4, 0, 0, snaplen or DEFAULT_SNAPLEN, linktype)


class NsPcapRewriter:
    """Reads dumpcap's pcapng from `stream` in a thread and writes nanosecond pcap to `out` ("-": standard
    output), starting a new file every `rotate_mb` MB and keeping the last `rotate_files` files when given."""

    def __init__(self, stream, out: str, rotate_mb: Optional[float] = None, rotate_files: Optional[int] = None):
        self.stream, self.out = stream, out
        self.rotate_bytes = int(rotate_mb * 1_000_000) if rotate_mb and out != "-" else None
        self.rotate_files = rotate_files
        self.files: List[str] = []
        self.packets = 0
        self.error: Optional[OSError] = None  # writing failed (full disk ...); dumpcap must be stopped
        self.ready = threading.Event()  # the pcap header is written: the output is a valid capture
        self._f = None
        self._header = b""
        self._file_bytes = 0
        self._number = 0
        self._order = "<"
        self._head, self._epb = struct.Struct("<II"), struct.Struct("<IIIII")
        self._resol: List[tuple] = []
        self._num, self._den = array("q"), array("q")  # the same per interface, for the compiled path
        try:
            import fcntl

            fcntl.fcntl(stream.fileno(), F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        fd, buf = self.stream.fileno(), bytearray()
        while True:
            try:
                chunk = os.read(fd, PIPE_BYTES)
            except OSError:
                break
            if not chunk:
                break
            if self.error:  # keep draining, so dumpcap never blocks before it is stopped
                continue
            buf += chunk
            try:
                del buf[: self._convert(buf)]
            except OSError as e:
                self.error = e
        try:
            if self._f is not None and self._f is not sys.stdout.buffer:
                self._f.close()
        except OSError as e:
            self.error = self.error or e
        self.ready.set()

    def _convert(self, buf: bytearray) -> int:
        """Write the records of every complete block in buf; returns the bytes consumed."""
        off, size, pieces = 0, len(buf), []
        head, epb, resol = self._head, self._epb, self._resol
        while off + 12 <= size:
            if buf[off : off + 4] == SHB:  # its byte-order magic sets the order of what follows
                self._order = "<" if buf[off + 8 : off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
                head, epb = self._head, self._epb = (
                    struct.Struct(self._order + "II"),
                    struct.Struct(self._order + "IIIII"),
                )
            room = self.rotate_bytes - self._file_bytes if self.rotate_bytes else size
            records, after, n = _native.nspcap(buf, off, self._order == ">", self._num, self._den, max(room, 0))
            if n:  # a run of packets, converted by compiled code
                pieces.append(records)
                self._file_bytes += len(records)
                self.packets += n
                off = after
                continue
            btype, blen = head.unpack_from(buf, off)  # any other block, and a packet that starts a new file
            if blen < 12 or blen % 4:
                raise OSError(0, "dumpcap's output is not pcapng")
            if off + blen > size:
                break
            if btype == EPB:
                iface, hi, lo, caplen, origlen = epb.unpack_from(buf, off + 8)
                num, den = resol[iface] if iface < len(resol) else (1000, 1)
                sec, ns = divmod(((hi << 32) | lo) * num // den, 1_000_000_000)
                record = RECORD.pack(sec, ns, caplen, origlen) + buf[off + 28 : off + 28 + caplen]
                if (
                    self.rotate_bytes
                    and self._file_bytes + len(record) > self.rotate_bytes
                    and self._file_bytes > len(self._header)
                ):
                    self._write(pieces)
                    pieces = []
                    self._next_file()
                pieces.append(record)
                self._file_bytes += len(record)
                self.packets += 1
            elif btype == IDB:
                linktype, _, snaplen = struct.unpack_from(self._order + "HHI", buf, off + 8)
                num, den = if_tsresol(bytes(buf[off + 16 : off + blen - 4]), self._order)
                self._resol.append((num, den))
                fits = max(num, den) < 1 << 63  # else -1: the compiled path leaves it to this one
                self._num.append(num if fits else -1)
                self._den.append(den if fits else -1)
                if self._f is None:
                    self._header = pcap_header(linktype, snaplen)
                    self._next_file()
                    self.ready.set()
            off += blen
        self._write(pieces)
        return off

    def _write(self, pieces):
        if pieces:
            self._f.write(b"".join(pieces))
        if self._f is not None:
            self._f.flush()

    def _next_file(self):
        if self.out == "-":
            self._f = sys.stdout.buffer
        else:
            if self._f is not None:
                self._f.close()
            name = self.out
            if self.rotate_bytes:
                self._number += 1
                name = next_in_ring(self.out, self._number, self.files, self.rotate_files)
            try:
                self._f = open_direct(name)
            except UserError as e:  # a refused name: this thread reports OSErrors
                raise OSError(errno.EPERM, str(e)) from None
            self.files.append(name)
        self._f.write(self._header)
        self._f.flush()
        self._file_bytes = len(self._header)

    def join(self, timeout: float = 30.0):
        self.thread.join(timeout)
