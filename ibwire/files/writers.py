"""pcap and pcapng writing, flushed per packet so an interrupted capture stays valid to its last frame.

A path is opened by `outfile.open_direct` (no link followed, no FIFO or device, no other user's file in /tmp)."""

import struct
import time as _time
from typing import Optional

from ibwire.files.outfile import open_direct

ERF_TYPE_INFINIBAND = 21
ERF_TYPE_INFINIBAND_LINK = 25


def erf_record(ts: float, payload: bytes, erf_type: int = ERF_TYPE_INFINIBAND, flags: int = 4) -> bytes:
    """One ERF record (16-byte header, ERF type 21/25) as ibdump writes it; timestamp is 32.32 fixed point."""
    sec = int(ts)
    frac = int((ts - sec) * (1 << 32)) & 0xFFFFFFFF
    rlen = 16 + len(payload)
    return struct.pack("<II", frac, sec) + struct.pack(">BBHHH", erf_type, flags, rlen, 0, len(payload)) + payload


class _Writer:
    f = None

    def close(self):
        self.f.flush()
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class PcapWriter(_Writer):
    """Classic pcap; `nanos` selects nanosecond timestamps."""

    def __init__(self, path_or_file, linktype: int, snaplen: int = 262144, nanos: bool = False):
        self.f = open_direct(path_or_file) if isinstance(path_or_file, str) else path_or_file
        self.nanos = nanos
        magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
        self.f.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))
        self.f.flush()
        self.count = 0
        self.bytes = 0

    def write(self, data: bytes, ts: Optional[float] = None, wirelen: Optional[int] = None, flush: bool = True):
        ts = _time.time() if ts is None else ts
        sec = int(ts)
        frac = int(round((ts - sec) * (1e9 if self.nanos else 1e6)))
        if frac >= (10**9 if self.nanos else 10**6):
            sec, frac = sec + 1, 0
        self.f.write(struct.pack("<IIII", sec, frac, len(data), wirelen or len(data)) + data)
        if flush:
            self.f.flush()
        self.count += 1
        self.bytes += len(data)


class PcapngWriter(_Writer):
    """pcapng with one Interface Description Block per interface (each with its own link type and name)."""

    def __init__(self, path_or_file):
        self.f = open_direct(path_or_file) if isinstance(path_or_file, str) else path_or_file
        self._block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
        self.n_if = 0
        self.count = 0
        self.bytes = 0

    def _block(self, btype: int, body: bytes):
        body += b"\0" * (-len(body) % 4)
        blen = len(body) + 12
        self.f.write(struct.pack("<II", btype, blen) + body + struct.pack("<I", blen))

    @staticmethod
    def _opt(code: int, val: bytes) -> bytes:
        return struct.pack("<HH", code, len(val)) + val + b"\0" * (-len(val) % 4)

    def add_interface(self, linktype: int, name: str = "", description: str = "", snaplen: int = 262144) -> int:
        opts = b""
        if name:
            opts += self._opt(2, name.encode())
        if description:
            opts += self._opt(3, description.encode())
        opts += self._opt(9, bytes([9])) + self._opt(0, b"")
        self._block(1, struct.pack("<HHI", linktype, 0, snaplen) + opts)
        self.f.flush()
        self.n_if += 1
        return self.n_if - 1

    def statistics(self, iface: int, delivered: int, dropped: int, ts: Optional[float] = None) -> None:
        """An Interface Statistics Block: packets the capture delivered (isb_usrdeliv) and dropped for lack of
        room (isb_osdrop), counted from its start, as dumpcap writes them when it stops."""
        t = int(round((_time.time() if ts is None else ts) * 1e9))
        self._block(
            5,
            struct.pack("<III", iface, t >> 32, t & 0xFFFFFFFF)
            + self._opt(7, struct.pack("<Q", dropped))
            + self._opt(8, struct.pack("<Q", delivered))
            + self._opt(0, b""),
        )
        self.f.flush()

    def write(
        self,
        data: bytes,
        ts: Optional[float] = None,
        iface: int = 0,
        wirelen: Optional[int] = None,
        flush: bool = True,
        comments: tuple = (),
    ):
        """One Enhanced Packet Block; each of `comments` becomes an opt_comment (Wireshark's frame.comment)."""
        ts = _time.time() if ts is None else ts
        t = int(round(ts * 1e9))
        opts = b"".join(self._opt(1, c.encode()) for c in comments)
        if opts:
            opts = b"\0" * (-len(data) % 4) + opts + self._opt(0, b"")
        self._block(
            6, struct.pack("<IIIII", iface, t >> 32, t & 0xFFFFFFFF, len(data), wirelen or len(data)) + data + opts
        )
        if flush:
            self.f.flush()
        self.count += 1
        self.bytes += len(data)
