"""The packet path of the netdev and tc-mirror backends: Wireshark's capture engine dumpcap (wireshark-common).

dumpcap reads the interface through libpcap's TPACKET_V3 ring with kernel timestamps (nanoseconds in pcapng),
applies the VF selection as an in-kernel BPF filter (`-f`), and writes the file itself, with `-c`,
`-a duration:`, `-b filesize:/files:` rotation and, in pcapng, interface statistics.  ibwire journals it,
starts it, follows its packet count, stops it with SIGINT and reads its closing statistics.  Options and
messages as dumpcap 4.0 prints them (`dumpcap -h`; "Packets received/dropped on interface ...").
"""
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import List, Optional

from ..errors import UserError
from .marks import owner_env, proc_start

# 128 MiB of ring holds a burst of 100,000 packets of up to ~1,200 bytes (TPACKET_V3 packs frames into blocks
# with a 48-byte header each; dumpcap's own default of 2 MiB holds about 1,500).
DEFAULT_BUFFER_MIB = 128
READY_TIMEOUT = 15.0
IN_FLIGHT = 0.5        # > dumpcap's 250 ms read timeout: the last ring block is retired and written


@dataclass
class Plan:
    iface: str
    out: str                                  # a path, or "-" for standard output
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
        cmd = ["dumpcap", "-i", self.iface, "-B", str(self.buffer_mib), "-w", self.out, "-n" if self.pcapng else "-P"]
        if self.bpf:
            cmd += ["-f", self.bpf]
        if self.snaplen:
            cmd += ["-s", str(self.snaplen)]
        if self.count:
            cmd += ["-c", str(self.count)]
        if self.duration:
            cmd += ["-a", f"duration:{self.duration:g}"]
        if self.rotate_mb:
            cmd += ["-b", f"filesize:{max(1, int(self.rotate_mb * 1000))}"]
            if self.rotate_files:
                cmd += ["-b", f"files:{self.rotate_files}"]
        if self.comment and self.pcapng:
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
        self._ready = threading.Event()

    def start(self, journal):
        cmd = self.plan.command()
        entry = journal.record("dumpcap process", None, cmd=cmd)
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         start_new_session=True, env=owner_env())   # Ctrl-C reaches ibwire only
        except FileNotFoundError:
            raise UserError("dumpcap, the capture engine, is not installed; install wireshark-common (it comes "
                            "with tshark)")
        entry["pid"], entry["start"] = self.proc.pid, proc_start(self.proc.pid)
        journal.save()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + READY_TIMEOUT
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._reader.join(2)
                if self._ready.is_set():
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
                    self.files.append(line[6:].strip())
                    self._ready.set()
                self.err += line + "\n"
        self.err += buf.decode(errors="replace")

    def running(self) -> bool:
        return self.proc.poll() is None

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
        m = re.search(r"Packets captured: (\d+)", self.err)
        if m:
            self.packets = int(m.group(1))
        return rc

    def drops(self) -> int:
        """Dropped by the kernel ring, by dumpcap and by the interface (dumpcap's closing statistics)."""
        m = re.search(r"Packets received/dropped on interface .*?: (\d+)/(\d+) \(pcap:\d+/dumpcap:\d+/flushed:\d+/"
                      r"ps_ifdrop:(\d+)\)", self.err)
        return int(m.group(2)) + int(m.group(3)) if m else 0

    def failure(self, starting: bool = False) -> Optional[str]:
        """One sentence saying why the engine stopped on its own, None for a normal end."""
        rc = self.proc.returncode
        text = self.err
        low = text.lower()
        iface, out = self.plan.iface, self.plan.out
        if "no space left" in low:
            return f"the file system holding {out} is full (no space left on device); the capture stopped"
        if "no longer attached" in low or "no longer running" in low or "no longer up" in low or \
                ("no such device" in low and not starting):
            return f"interface {iface} vanished during the capture; the capture stopped"
        if out == "-" and ("broken pipe" in low or rc == -signal.SIGPIPE):
            return None        # the reader of standard output went away: the usual end of a pipeline
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
    lines = [ln.strip().removeprefix("dumpcap: ") for ln in text.splitlines() if ln.strip()
             and not ln.startswith(("Capturing on", "File:", "Packets"))]
    for ln in lines:
        if word in ln.lower():
            return ln
    return lines[0] if lines else "no message"
