"""The packet path of the netdev and tc-mirror backends: Wireshark's capture engine dumpcap (wireshark-common).

dumpcap reads the interface through libpcap's TPACKET_V3 ring with kernel timestamps in nanoseconds, applies
the VF selection as an in-kernel BPF filter (`-f`) and stops by itself on `-c` and `-a duration:`.  A .pcapng
output dumpcap writes itself, with interface statistics: one file as its standard output, which ibwire opens
(`outfile.open_direct`: never through a planted link or FIFO), a `-b filesize:/files:` ring by name; a pcap output
(.pcap, `-w -`) it writes as pcapng into a pipe that `nspcap` rewrites as nanosecond pcap (dumpcap's own pcap
has microseconds).  ibwire journals it, starts it, follows its packet count, stops it with SIGINT and reads its
closing statistics.  Options and
messages as dumpcap 4.0 prints them (`dumpcap -h`; "Packets received/dropped on interface ...").
"""

import errno
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import List, Optional

from ibwire.capture.marks import owner_env, proc_start
from ibwire.errors import UserError
from ibwire.files.nspcap import NsPcapRewriter
from ibwire.files.outfile import open_direct

# 128 MiB of ring holds a burst of 100,000 packets of up to ~1,200 bytes (TPACKET_V3 packs frames into blocks
# with a 48-byte header each; dumpcap's own default of 2 MiB holds about 1,500).
DEFAULT_BUFFER_MIB = 128
READY_TIMEOUT = 15.0
IN_FLIGHT = 0.5  # > dumpcap's 250 ms read timeout: the last ring block is retired and written


@dataclass
class Plan:
    iface: str
    out: str  # a path, or "-" for standard output
    bpf: Optional[str] = None
    buffer_mib: int = DEFAULT_BUFFER_MIB
    snaplen: Optional[int] = None
    count: Optional[int] = None
    duration: Optional[float] = None
    rotate_mb: Optional[float] = None
    rotate_files: Optional[int] = None
    comment: Optional[str] = None

    @property
    def pcapng(self) -> bool:
        return self.out.endswith(".pcapng")

    def command(self) -> List[str]:
        """dumpcap's command line: a pcapng ring into its files, else into standard output (the file ibwire
        opened, or the pipe to the rewriter)."""
        ring = self.pcapng and self.rotate_mb
        cmd = ["dumpcap", "-i", self.iface, "-B", str(self.buffer_mib), "-w", self.out if ring else "-", "-n"]
        if self.bpf:
            cmd += ["-f", self.bpf]
        if self.snaplen:
            cmd += ["-s", str(self.snaplen)]
        if self.count:
            cmd += ["-c", str(self.count)]
        if self.duration:
            cmd += ["-a", f"duration:{self.duration:g}"]
        if self.rotate_mb and self.pcapng:
            cmd += ["-b", f"filesize:{max(1, int(self.rotate_mb * 1000))}", "-b", "printname:stderr"]
            if self.rotate_files:
                cmd += ["-b", f"files:{self.rotate_files}"]
        if self.comment and self.pcapng and not self.rotate_mb:  # dumpcap: a comment needs a single file
            cmd += ["--capture-comment", self.comment]
        return cmd


class Dumpcap:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.proc: Optional[subprocess.Popen] = None
        self.err = ""
        self.packets = 0
        self.files: List[str] = []
        self.we_stopped = False
        self.rewriter: Optional[NsPcapRewriter] = None
        self._ready = threading.Event()

    def start(self, journal):
        cmd = self.plan.command()
        pcapng = open_direct(self.plan.out) if self.plan.pcapng and not self.plan.rotate_mb else None
        entry = journal.record("dumpcap process", None, cmd=cmd)
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                stdout=pcapng or (None if self.plan.pcapng else subprocess.PIPE),
                start_new_session=True,
                env=owner_env(),
            )  # Ctrl-C reaches ibwire only
        except FileNotFoundError:
            raise UserError(
                "dumpcap, the capture engine, is not installed; install wireshark-common (it comes with tshark)"
            ) from None
        finally:
            if pcapng:
                pcapng.close()  # dumpcap holds it now
        entry["pid"], entry["start"] = self.proc.pid, proc_start(self.proc.pid)
        journal.save()
        if not self.plan.pcapng:
            self.rewriter = NsPcapRewriter(self.proc.stdout, self.plan.out, self.plan.rotate_mb, self.plan.rotate_files)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + READY_TIMEOUT
        while not (self._ready.wait(0.05) and (self.rewriter is None or self.rewriter.ready.wait(0.05))):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._reader.join(2)
                if self.rewriter:
                    self.rewriter.join(2)
                if self._ready.is_set() and (self.rewriter is None or self.rewriter.ready.is_set()):
                    break
                raise UserError(self.failure(starting=True) or "dumpcap did not start")

    def _read_stderr(self):
        buf = b""
        for chunk in iter(lambda: self.proc.stderr.read1(4096), b""):
            buf += chunk
            *done, buf = re.split(rb"[\r\n]", buf)
            for raw in done:
                line = raw.decode(errors="replace")
                m = re.match(r"Packets: (\d+)", line)
                if m:
                    self.packets = int(m.group(1))
                    continue
                if line.startswith("File: "):
                    self._ready.set()
                    continue
                if self.plan.rotate_mb and line.startswith(self._ring_prefix):  # -b printname:stderr
                    self.files.append(line)
                    continue
                self.err += line + "\n"
        self.err += buf.decode(errors="replace")

    @property
    def _ring_prefix(self) -> str:
        return os.path.splitext(self.plan.out)[0] + "_"

    def running(self) -> bool:
        return self.proc.poll() is None

    def write_failed(self) -> bool:
        """The rewriter could not write (full disk, reader of standard output gone): dumpcap must stop."""
        return bool(self.rewriter and self.rewriter.error)

    def outputs(self) -> List[str]:
        """The capture files that exist now, in order (a ring keeps only its last files)."""
        if self.plan.out == "-":
            return []
        names = self.rewriter.files if self.rewriter else (self.files or [self.plan.out])
        return [f for f in names if os.path.exists(f)]

    @property
    def written(self) -> int:
        """Packets in the output: the rewriter's count for pcap, dumpcap's own for pcapng."""
        return self.rewriter.packets if self.rewriter else self.packets

    def stop(self, in_flight: float = IN_FLIGHT):
        """Let what is already in the ring reach the file, then SIGINT: dumpcap writes its statistics."""
        if self.running():
            time.sleep(in_flight)
            self.we_stopped = True
            try:
                os.kill(self.proc.pid, signal.SIGINT)
            except OSError:
                pass

    def wait(self, timeout: float = 30.0) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGTERM)
            rc = self.proc.wait()
        self._reader.join(5)
        if self.rewriter:
            self.rewriter.join()
        m = re.search(r"Packets captured: (\d+)", self.err)
        if m:
            self.packets = int(m.group(1))
        return rc

    def drops(self) -> int:
        """Dropped by the kernel ring, by dumpcap and by the interface (dumpcap's closing statistics)."""
        m = re.search(
            r"Packets received/dropped on interface .*?: (\d+)/(\d+) \(pcap:\d+/dumpcap:\d+/flushed:\d+/"
            r"ps_ifdrop:(\d+)\)",
            self.err,
        )
        return int(m.group(2)) + int(m.group(3)) if m else 0

    def failure(self, starting: bool = False) -> Optional[str]:
        """One sentence saying why the engine stopped on its own, None for a normal end."""
        rc = self.proc.returncode
        text = self.err
        low = text.lower()
        iface, out = self.plan.iface, self.plan.out
        werr = self.rewriter.error if self.rewriter else None
        if werr is not None and not (out == "-" and isinstance(werr, BrokenPipeError)):
            if werr.errno in (errno.ENOSPC, errno.EDQUOT):
                return f"the file system holding {out} is full ({werr.strerror}); the capture stopped"
            return f"writing {out} failed ({werr.strerror or werr}); the capture stopped"
        if "no space left" in low:
            return f"the file system holding {out} is full (no space left on device); the capture stopped"
        if (
            "no longer attached" in low
            or "no longer running" in low
            or "no longer up" in low
            or ("no such device" in low and not starting)
        ):
            return f"interface {iface} vanished during the capture; the capture stopped"
        if out == "-" and (isinstance(werr, BrokenPipeError) or "broken pipe" in low or rc == -signal.SIGPIPE):
            return None  # the reader of standard output went away: the usual end of a pipeline
        if rc is not None and rc < 0 and not (self.we_stopped and rc == -signal.SIGINT):
            return f"the capture engine dumpcap died ({signal.Signals(-rc).name}); the capture stopped"
        if rc in (0, None) and not starting:
            return None
        if "invalid capture filter" in low or "syntax error" in low:
            return f"the capture filter {self.plan.bpf!r} is not valid: {_first(text, 'filter')}"
        if "no such device" in low or "there is no device named" in low:
            return f"there is no interface {iface} here; `ip link` lists the interfaces"
        if "permission" in low or "operation not permitted" in low:
            return f"capturing on {iface} needs CAP_NET_RAW; run ibwire capture as root"
        if "could not be opened" in low or "can't be created" in low or "cannot be created" in low:
            return f"cannot write {out}: {_first(text, 'file')}"
        return f"dumpcap stopped with status {rc}: {_first(text, '')}"


def _first(text: str, word: str) -> str:
    lines = [
        ln.strip().removeprefix("dumpcap: ")
        for ln in text.splitlines()
        if ln.strip() and not ln.startswith(("Capturing on", "File:", "Packets"))
    ]
    for ln in lines:
        if word in ln.lower():
            return ln
    return lines[0] if lines else "no message"
