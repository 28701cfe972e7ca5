"""Capture output of the frame backends: pcap or pcapng (by file suffix; pcap on standard output for `-w -`),
flushed per packet, with -C/-W rotation into files named as dumpcap names its ring, and the live status line of
every capture."""

import errno
import sys
import time
from typing import Optional

from ibwire.errors import UserError
from ibwire.files.nspcap import next_in_ring
from ibwire.files.writers import PcapngWriter, PcapWriter


class Sink:
    def __init__(
        self,
        path: str,
        linktype: int,
        description: str,
        iface_name: str,
        rotate_mb: Optional[float] = None,
        rotate_files: Optional[int] = None,
    ):
        self.path, self.linktype, self.description, self.iface_name = path, linktype, description, iface_name
        self.rotate_bytes = int(rotate_mb * 1_000_000) if rotate_mb else None
        self.rotate_files = rotate_files
        self.pcapng = path.endswith(".pcapng")
        self.number = 0
        self.files = []
        self.packets = 0
        self.bytes = 0
        self._open()

    def _open(self):
        name = self.path
        if self.rotate_bytes and self.path != "-":
            self.number += 1
            name = next_in_ring(self.path, self.number, self.files, self.rotate_files)
        try:
            if self.path == "-":
                self.w = PcapWriter(sys.stdout.buffer, self.linktype)
            elif self.pcapng:
                self.w = PcapngWriter(name)
                self.w.add_interface(self.linktype, self.iface_name, self.description)
            else:
                self.w = PcapWriter(name, self.linktype)
        except OSError as e:
            raise UserError(f"cannot write {name}: {e.strerror}") from None
        self.file_bytes = 0
        self.files.append(name)

    def write(self, data: bytes, ts: float, wirelen: Optional[int] = None):
        if (
            self.rotate_bytes
            and self.path != "-"
            and self.file_bytes
            and self.file_bytes + len(data) + 16 > self.rotate_bytes
        ):
            self.w.close()
            try:
                self._open()
            except UserError as e:  # a refused ring file (a planted link): the writer thread reports OSErrors
                raise OSError(errno.EPERM, str(e)) from None
        self.w.write(data, ts, wirelen=wirelen)
        self.packets += 1
        self.bytes += len(data)
        self.file_bytes += len(data) + 16

    def statistics(self, drops: int) -> None:
        """The backend's drops so far, in a pcapng's interface statistics between the packets (pcap has no place
        for them): where the count rose tells which gaps the capture itself made."""
        if self.pcapng:
            self.w.statistics(0, self.packets, drops)

    def close(self, drops: Optional[int] = None):
        """`drops`: packets the backend lost, recorded in a pcapng's interface statistics (isb_osdrop)."""
        if self.pcapng and drops is not None:
            self.w.statistics(0, self.packets, drops)
        self.w.close()


class StatusLine:
    """Packets, bytes, rate and drops on one line of stderr, refreshed twice a second on a terminal."""

    def __init__(self, enabled: Optional[bool] = None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.t0 = time.monotonic()
        self.last = 0.0

    def update(self, packets: int, nbytes: Optional[int], drops: int, force: bool = False):
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last < 0.5):
            return
        self.last = now
        if nbytes is None:  # the engine reports packets only
            rate = packets / max(now - self.t0, 1e-6)
            sys.stderr.write(f"\r{packets:,} packets  {rate:,.0f} packets/s ")
        else:
            rate = nbytes * 8 / max(now - self.t0, 1e-6)
            sys.stderr.write(f"\r{packets:,} packets  {nbytes:,} bytes  {rate / 1e6:.2f} Mbit/s  {drops:,} drops ")
        sys.stderr.flush()

    def finish(self):
        if self.enabled:
            sys.stderr.write("\n")
