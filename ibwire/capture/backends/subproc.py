"""Backends that run a capture tool writing pcap to stdout (ibdump, tcpdump on an RDMA device).

The child is journaled before it starts and stopped with SIGINT so it detaches its sniffer itself.
"""

import os
import select
import signal
import struct
import subprocess
import threading
from typing import List, Optional

from ibwire.capture.journal import stop_process
from ibwire.capture.marks import owner_env, proc_start
from ibwire.errors import UserError


class PcapStream:
    """Incremental reader of a classic pcap byte stream (header then 16-byte record headers)."""

    def __init__(self):
        self.buf = b""
        self.linktype: Optional[int] = None
        self.endian = "<"
        self.nanos = False

    def feed(self, data: bytes):
        self.buf += data
        out = []
        if self.linktype is None:
            if len(self.buf) < 24:
                return out
            magic = self.buf[:4]
            self.endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
            self.nanos = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
            self.linktype = struct.unpack_from(self.endian + "I", self.buf, 20)[0] & 0x0FFFFFFF
            self.buf = self.buf[24:]
        while len(self.buf) >= 16:
            sec, frac, incl, orig = struct.unpack_from(self.endian + "IIII", self.buf)
            if len(self.buf) < 16 + incl:
                break
            out.append((sec + frac / (1e9 if self.nanos else 1e6), self.buf[16 : 16 + incl], orig))
            self.buf = self.buf[16 + incl :]
        return out


class SubprocessCapture:
    name = "subprocess"
    tool = ""

    def __init__(self):
        self.proc: Optional[subprocess.Popen] = None
        self.stream = PcapStream()
        self.stderr = b""
        self.notes: List[str] = []

    def command(self) -> List[str]:
        raise NotImplementedError

    def explain(self, stderr: str, rc: int) -> str:
        raise NotImplementedError

    def tool_drops(self, stderr: str) -> int:
        return 0

    def arm(self, journal):
        cmd = self.command()
        entry = journal.record(f"{self.tool} process", None, cmd=cmd)
        try:
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=owner_env()
            )  # Ctrl-C reaches ibwire, which stops the child
        except FileNotFoundError:
            raise UserError(
                f"{cmd[0]} is not installed; see `ibwire devices` for the backends that can run here"
            ) from None
        entry["pid"], entry["start"] = self.proc.pid, proc_start(self.proc.pid)
        journal.save()
        self._err_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._err_thread.start()
        # wait for the pcap header (or an early failure) so errors surface before "capturing"
        first = self._read(10.0, want_header=True)
        self.linktype = self.stream.linktype
        if self.linktype is None:
            self._fail()
        self._pending = first
        self.notes.append("running " + " ".join(cmd))

    def _drain_stderr(self):
        for chunk in iter(lambda: self.proc.stderr.read1(4096), b""):
            self.stderr += chunk

    def _read(self, timeout: float, want_header=False):
        fd = self.proc.stdout.fileno()
        out = []
        while True:
            r, _, _ = select.select([fd], [], [], timeout)
            if not r:
                return out
            data = os.read(fd, 1 << 16)
            if not data:
                self.eof = True
                return out
            out += self.stream.feed(data)
            if not want_header or self.stream.linktype is not None:
                return out

    def _fail(self):
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            stop_process(self.proc.pid, None)
            rc = self.proc.wait()
        self._err_thread.join(2)
        raise UserError(self.explain(self.stderr.decode(errors="replace"), rc))

    def frames(self):
        self.eof = False
        for f in self._pending:
            yield f
        while not self.eof:
            got = self._read(0.2)
            if not got:
                yield None
            for f in got:
                yield f
        rc = self.proc.wait()
        if rc not in (0, -signal.SIGINT, 130) and self.stream.linktype is not None and not self.stopped:
            self._err_thread.join(2)
            raise UserError(self.explain(self.stderr.decode(errors="replace"), rc))

    stopped = False

    def stop(self):
        """SIGINT the tool; frames() then drains what it flushes and ends."""
        if self.proc and self.proc.poll() is None:
            self.stopped = True
            os.kill(self.proc.pid, signal.SIGINT)

    def finish(self):
        """After stop(): read the rest of the stream so nothing captured is lost."""
        out = []
        if self.proc is None:
            return out
        self.eof = False
        while not self.eof:
            got = self._read(10.0)
            if not got and self.proc.poll() is not None and not self.eof:
                break
            out += got
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            stop_process(self.proc.pid, None)
        self._err_thread.join(2)
        return out

    def backend_drops(self) -> int:
        return self.tool_drops(self.stderr.decode(errors="replace"))

    def close(self):
        if self.proc and self.proc.poll() is None:
            stop_process(self.proc.pid, None)
