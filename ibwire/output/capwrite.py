"""`decode -w`: the selected frames into a new pcap or pcapng file, link types and nanosecond times kept.

The file appears only when complete (written beside its final name, renamed at the end); an interrupted
or failed run leaves nothing, and the capture being read is never the one written.  Layouts: pcap(5) with
nanosecond timestamps; pcapng (draft-ietf-opsawg-pcapng) with one interface per link type, if_tsresol 9.
"""
import os
import struct
import tempfile

from ..errors import UserError


class SelectedFrames:
    def __init__(self, path: str, src: str, stream):
        if src != "-" and os.path.exists(path) and os.path.samefile(path, src):
            raise UserError(f"-w {path} would overwrite the capture being read")
        fmt = getattr(getattr(stream, "walk", None), "format", None) or getattr(stream, "format", "pcap")
        self.pcapng = path.endswith(".pcapng") or (fmt == "pcapng" and not path.endswith(".pcap"))
        folder = os.path.dirname(os.path.abspath(path))
        try:
            fd, self.tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".part")
        except OSError as e:
            raise UserError(f"cannot write {path}: {e.strerror}") from None
        self.f = os.fdopen(fd, "wb", buffering=1 << 20)
        self.path, self.stream = path, stream
        self.ifaces = {}
        self.linktype = None
        if self.pcapng:
            self._block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))

    def _block(self, btype: int, body: bytes):
        body += b"\0" * (-len(body) % 4)
        self.f.write(struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12))

    def write(self, batch, i: int):
        lt = int(batch.pos.linktype[i])
        data = batch.data(i)
        ns = int(batch.rec["time_ns"][i])
        wirelen = int(batch.pos.wirelen[i])
        if self.pcapng:
            if lt not in self.ifaces:
                self.ifaces[lt] = len(self.ifaces)
                self._block(1, struct.pack("<HHI", lt, 0, 0) + struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0))
            self._block(6, struct.pack("<IIIII", self.ifaces[lt], ns >> 32 & 0xFFFFFFFF, ns & 0xFFFFFFFF, len(data),
                                       wirelen) + data)
            return
        if self.linktype is None:
            self.linktype = lt
            self.f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, lt))
        elif lt != self.linktype:
            raise UserError(f"the selected frames have several link types ({self.linktype}, {lt}); "
                            f"write them to a .pcapng file")
        sec, frac = divmod(ns, 1_000_000_000)
        self.f.write(struct.pack("<IIII", sec & 0xFFFFFFFF, frac, len(data), wirelen) + data)

    def commit(self):
        if not self.pcapng and self.linktype is None:
            lts = sorted(getattr(getattr(self.stream, "walk", None), "linktypes", None) or {1})
            self.f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, lts[0]))
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.path)

    def abandon(self):
        self.f.close()
        try:
            os.unlink(self.tmp)
        except OSError:
            pass
