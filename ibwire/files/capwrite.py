"""`decode -w`: the selected frames into a new pcap or pcapng file, link types and nanosecond times kept.

The file object comes from ibwire.files.outfile (whole or absent, never the input).  Layouts: pcap(5) with
nanosecond timestamps; pcapng (draft-ietf-opsawg-pcapng) with one interface per link type, if_tsresol 9.
pcapng is written for a .pcapng name or a pcapng input (unless the name ends in .pcap).
"""

import struct

from ibwire.errors import UserError


class SelectedFrames:
    def __init__(self, f, path: str, stream):
        fmt = getattr(getattr(stream, "walk", None), "format", None) or getattr(stream, "format", "pcap")
        self.pcapng = path.endswith(".pcapng") or (fmt == "pcapng" and not path.endswith(".pcap"))
        self.f, self.stream = f, stream
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
            if lt > 0xFFFF:  # a pcap header's reserved link-type bits set: pcapng has 16 bits for it
                raise UserError(
                    f"frame {int(batch.rec['frame'][i])} has link type {lt:#x}, wider than the 16 bits "
                    "of a pcapng interface block (reserved bits of the file's link type are set); "
                    "write it to a .pcap file"
                )
            if lt not in self.ifaces:
                self.ifaces[lt] = len(self.ifaces)
                self._block(
                    1, struct.pack("<HHI", lt, 0, 0) + struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)
                )
            self._block(
                6,
                struct.pack("<IIIII", self.ifaces[lt], ns >> 32 & 0xFFFFFFFF, ns & 0xFFFFFFFF, len(data), wirelen)
                + data,
            )
            return
        if self.linktype is None:
            self._header(lt)
        elif lt != self.linktype:
            raise UserError(
                f"the selected frames have several link types ({self.linktype}, {lt}); write them to a .pcapng file"
            )
        sec, frac = divmod(ns, 1_000_000_000)
        self.f.write(struct.pack("<IIII", sec & 0xFFFFFFFF, frac, len(data), wirelen) + data)

    def _header(self, lt: int):
        self.linktype = lt
        self.f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, lt))

    def finish(self):
        """A pcap of no frames still says its link type."""
        if not self.pcapng and self.linktype is None:
            lts = sorted(getattr(getattr(self.stream, "walk", None), "linktypes", None) or {1})
            self._header(lts[0])
