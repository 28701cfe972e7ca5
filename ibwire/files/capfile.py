"""pcap and pcapng reading: either byte order, µs or ns timestamps, per-interface link types.

dpkt's readers drop the original length and the interface of each pcapng packet, both of which the
decoder needs (truncation, mixed link types), so the block walk is done here; layouts follow the
pcap(5) and pcapng (draft-ietf-opsawg-pcapng) specifications.
"""

import os
import struct
from typing import Iterator, NamedTuple, Optional, Tuple

from ibwire.errors import UserError
from ibwire.files.formats import MAX_BLOCK, MAX_PACKET, PCAP_MAGICS, PCAPNG_SHB
from ibwire.files.resync import past_refused


class Frame(NamedTuple):
    number: int  # 1-based frame number, as tshark counts
    time: float  # seconds since the epoch
    caplen: int
    wirelen: int
    linktype: int
    data: bytes
    iface: Optional[int] = None  # pcapng interface id (None: a pcap file, which has no interfaces)


_PCAPNG_MIN_BODY = {1: 8, 6: 20, 3: 4}  # fixed fields of an interface, enhanced and simple packet block


def file_format(path: str, head: bytes) -> str:
    """'pcap' or 'pcapng', from the first four bytes of the file at `path`; anything else: one sentence."""
    if head in PCAP_MAGICS:
        return "pcap"
    if head == PCAPNG_SHB:
        return "pcapng"
    raise UserError(f"{path} is not a pcap or pcapng file (it starts with {head.hex() or 'nothing'})")


class Capture:
    """An opened capture file; iterate it for Frames.  `problems` collects damage found at the end.

    The file is read record by record as the iteration goes, so memory does not grow with its size."""

    def __init__(self, path: str):
        self.path = path
        try:
            with open(path, "rb") as f:
                head = f.read(4)
        except OSError as e:
            raise UserError(f"cannot read {path}: {e.strerror or e}") from None
        self.format = file_format(path, head)
        self.problems = []
        self.skipped = 0  # records or blocks found damaged and not delivered as frames
        self.lost_bytes = 0  # bytes of the file no frame came from (damage skipped, unreadable rest)
        self.cut_short = []  # (frame number, bytes missing) of a record the file ends inside
        self.interfaces = []  # pcapng: list of [linktype, ts_scale, name, snap length or 0]
        self.linktype: Optional[int] = None

    def __iter__(self) -> Iterator[Frame]:
        return self.frames()

    def frames(self, wanted: Optional[Iterator[int]] = None) -> Iterator[Frame]:
        """The frames in order; with `wanted` (increasing frame numbers), only those and the first frame,
        the others skipped unread (their numbering, and the problems found, stay as in a full pass)."""
        return self._pcap(wanted) if self.format == "pcap" else self._pcapng(wanted)

    def _open(self):
        try:
            return open(self.path, "rb", buffering=1 << 20)
        except OSError as e:
            raise UserError(f"cannot read {self.path}: {e.strerror or e}") from None

    def _pcap(self, wanted=None) -> Iterator[Frame]:
        nxt = next(wanted, None) if wanted is not None else None
        with self._open() as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(24)
            if len(head) < 24:
                self.problems.append("file header truncated")
                return
            endian, scale, rec_len = PCAP_MAGICS[head[:4]]
            self.linktype = struct.unpack_from(endian + "I", head, 20)[0] & 0x0FFFFFFF
            hdr = struct.Struct(endian + "IIII")
            n = 0
            while True:
                rh = f.read(rec_len)
                if len(rh) < rec_len:
                    if rh:
                        self.skipped += 1
                        self.lost_bytes += len(rh)
                        self.problems.append(f"frame {n + 1}: record header cut short at end of file")
                    return
                sec, frac, incl, orig = hdr.unpack_from(rh, 0)
                n += 1
                if incl > MAX_PACKET:  # damage: on from the next record the bulk reader trusts too
                    bad = f.tell() - rec_len
                    resume = past_refused(self.path, bad, incl, size) if rec_len == 16 else None
                    self.skipped += 1
                    if resume is None:
                        self.lost_bytes += size - bad
                        self.problems.append(
                            f"frame {n}: record length {incl} is impossible (over {MAX_PACKET}); the "
                            "rest of the file is unreadable"
                        )
                        return
                    self.lost_bytes += resume - bad
                    if resume == bad + 16 + incl:
                        self.problems.append(
                            f"frame {n}: record of {incl} bytes is over the {MAX_PACKET}-byte limit; skipped"
                        )
                    else:
                        self.problems.append(
                            f"frame {n}: record length {incl} is impossible; skipped {resume - bad} "
                            "damaged bytes to the next plausible record (frame numbers after it are "
                            "estimates)"
                        )
                        n -= 1
                    f.seek(resume)
                    continue
                if wanted is not None and n > 1:
                    while nxt is not None and nxt < n:
                        nxt = next(wanted, None)
                    if nxt != n:
                        if f.tell() + incl > size:
                            self.problems.append(f"frame {n}: record cut short at end of file")
                            return
                        f.seek(incl, 1)
                        continue
                data = f.read(min(incl, size - f.tell()))  # a length is never trusted past the file
                if len(data) < incl:
                    self.problems.append(f"frame {n}: record cut short at end of file")
                    self.cut_short.append((n, incl - len(data)))
                yield Frame(n, sec + frac * scale, len(data), max(orig, len(data)), self.linktype, data)

    def _pcapng(self, wanted=None) -> Iterator[Frame]:
        """The block walk: sections set the byte order, interface blocks describe interfaces, packet blocks give
        frames; other blocks are passed over unread.  A damaged block length ends the walk."""
        nxt = next(wanted, None) if wanted is not None else None
        with self._open() as f:
            size = os.fstat(f.fileno()).st_size
            off, n, endian = 0, 0, "<"
            while off + 12 <= size:
                head = f.read(12)
                btype, blen, endian = self._block_head(head, endian)
                if blen < 12 or blen > MAX_BLOCK or off + blen > size:
                    self._unreadable_rest(blen, size - off)
                    return
                off += blen
                if wanted is not None and btype in (6, 3) and n >= 1:  # a packet after the first
                    while nxt is not None and nxt < n + 1:
                        nxt = next(wanted, None)
                    if nxt != n + 1:
                        n += 1
                        self._pass_packet(f, head, endian, btype, blen, n)
                        continue
                if btype not in (1, 6, 3):  # nothing read from other blocks
                    f.seek(blen - 12, 1)
                    continue
                body = (head + f.read(blen - 12))[8 : blen - 4]
                if btype == 1:
                    self._interface(body, endian, blen)
                    continue
                n += 1
                frame = self._packet(btype, body, endian, n, blen)
                if frame is not None:
                    yield frame

    def _block_head(self, head: bytes, endian: str) -> Tuple[int, int, str]:
        """Type, length and byte order of the block whose first 12 bytes are `head`; a Section Header Block
        sets the byte order and starts a section with no interfaces described."""
        btype = struct.unpack_from(endian + "I", head, 0)[0]
        if head[:4] == PCAPNG_SHB:
            endian = "<" if head[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
            self.interfaces = []
            btype = 0x0A0D0D0A
        return btype, struct.unpack_from(endian + "I", head, 4)[0], endian

    def _unreadable_rest(self, blen: int, rest: int) -> None:
        """Records a block length that is damaged or runs past the end of the file: the `rest` bytes are lost."""
        self.problems.append(
            "block cut short at end of file"
            if 12 <= blen <= MAX_BLOCK
            else f"damaged block length {blen}; the rest of the file is unreadable"
        )
        self.skipped += 1
        self.lost_bytes += rest

    def _pass_packet(self, f, head: bytes, endian: str, btype: int, blen: int, n: int) -> None:
        """Skips frame `n` unread, still reporting an interface it names that was never described."""
        f.seek(blen - 12, 1)
        iface = struct.unpack_from(endian + "I", head, 8)[0] if btype == 6 else 0
        if iface >= len(self.interfaces):
            self.problems.append(f"frame {n}: packet names interface {iface}, which was never described")

    def _interface(self, body: bytes, endian: str, blen: int) -> None:
        """Describes the next interface from an Interface Description Block body; one too short is None."""
        if len(body) < _PCAPNG_MIN_BODY[1]:
            self.problems.append(f"interface block of {blen} bytes is too short; packets naming it are skipped")
            self.interfaces.append(None)
            return
        lt, _, snap = struct.unpack_from(endian + "HHI", body, 0)
        self.interfaces.append([lt, 1e-6, "", snap])
        self._idb_options(body[8:], endian, self.interfaces[-1])
        if self.linktype is None:
            self.linktype = lt

    def _packet(self, btype: int, body: bytes, endian: str, n: int, blen: int) -> Optional[Frame]:
        """Frame `n` from an Enhanced (6) or Simple (3) Packet Block body, or None (counted as skipped) when the
        block is too short, claims too much or names an interface not described."""
        if len(body) < _PCAPNG_MIN_BODY[btype]:
            self.skipped += 1
            self.problems.append(f"frame {n}: packet block of {blen} bytes is too short to hold a packet; skipped")
            return None
        if btype == 6:
            iface, hi, lo, incl, orig = struct.unpack_from(endian + "IIIII", body, 0)
            claimed, at = incl, 20
            ts_raw = (hi << 32) | lo
        else:
            iface, ts_raw = 0, 0
            orig = struct.unpack_from(endian + "I", body, 0)[0]
            first = self.interfaces[0] if self.interfaces else None
            snap = first[3] if first is not None and first[3] else orig  # padding is no data
            claimed, at = min(orig, snap, len(body) - 4), 4
        if claimed > MAX_PACKET:
            self.skipped += 1
            self.problems.append(f"frame {n}: packet of {claimed} bytes is over the {MAX_PACKET}-byte limit; skipped")
            return None
        data = body[at : at + claimed]
        if iface >= len(self.interfaces) or self.interfaces[iface] is None:
            self.skipped += 1
            self.problems.append(f"frame {n}: packet names interface {iface}, which was never described")
            return None
        lt, scale = self.interfaces[iface][:2]
        return Frame(n, ts_raw * scale, len(data), max(orig, len(data)), lt, bytes(data), iface)

    @staticmethod
    def _idb_options(opts: bytes, endian: str, iface: list) -> None:
        o = 0
        while o + 4 <= len(opts):
            code, ln = struct.unpack_from(endian + "HH", opts, o)
            val = opts[o + 4 : o + 4 + ln]
            if code == 0:
                break
            if code == 2:
                iface[2] = val.decode("utf-8", "replace")
            elif code == 9 and val:
                r = val[0]
                iface[1] = 2.0 ** -(r & 0x7F) if r & 0x80 else 10.0**-r
            o += 4 + ((ln + 3) & ~3)


def open_capture(path: str) -> Capture:
    return Capture(path)


def iter_frames(path: str) -> Iterator[Frame]:
    return iter(Capture(path))
