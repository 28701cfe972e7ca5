"""Run a simulated fabric: ibsim in remote mode plus opensm and infiniband-diags under libumad2sim.

Used by tests and to make sample captures.  Every process started here is tracked and killed by
`SimFabric.close()` (also on exceptions, as a context manager).
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

from ibwire.capture.ibsim_wire import IBSIM_MAX_CLIENTS
from ibwire.errors import UserError

UMAD2SIM_PATHS = (
    "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so",
    "/usr/lib/aarch64-linux-gnu/umad2sim/libumad2sim.so",
    "/usr/lib64/umad2sim/libumad2sim.so",
    "/usr/lib/umad2sim/libumad2sim.so",
)


def find_umad2sim() -> str:
    for p in UMAD2SIM_PATHS:
        if os.path.exists(p):
            return p
    raise UserError("libumad2sim.so not found; install the Debian package ibsim-utils (libumad2sim0).")


def _ports_free(first: int, n: int) -> bool:
    for p in range(first, first + n):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("0.0.0.0", p))
            except OSError:
                return False
    return True


def free_server_port(start: int = 17070) -> int:
    """A server port P such that P..P+10 (ibsim's control and client ports) are all free."""
    for p in range(start + (os.getpid() % 50) * 20, 60000, 20):
        if _ports_free(p, IBSIM_MAX_CLIENTS + 1):
            return p
    raise UserError("no free UDP port range for ibsim; free ports 17070-60000 or pass one with port=.")


class SimFabric:
    """ibsim on `topology`, listening on `port` (a free one by default)."""

    def __init__(self, topology: str, port: Optional[int] = None, workdir: Optional[str] = None):
        if shutil.which("ibsim") is None:
            raise UserError("ibsim is not installed; install the Debian package ibsim-utils.")
        self.topology = topology
        self.port = free_server_port() if port is None else port
        self.own_workdir = workdir is None  # logs, opensm's files and umad2sim's ./sys-PID trees go here
        self.workdir = workdir or tempfile.mkdtemp(prefix="ibwire-ibsim-")
        self.procs: List[subprocess.Popen] = []
        self.umad2sim = find_umad2sim()
        self.ibsim = self._spawn(["ibsim", "-r", "-n", "-s", "-l", str(self.port), topology], env=os.environ)
        self._wait_listening()

    def _spawn(self, argv, env) -> subprocess.Popen:
        log = open(os.path.join(self.workdir, os.path.basename(argv[0]) + ".out"), "ab")
        p = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
        )
        log.close()
        self.procs.append(p)
        return p

    def _wait_listening(self, timeout: float = 10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.ibsim.poll() is not None:
                raise RuntimeError(f"ibsim exited with status {self.ibsim.returncode}; see {self.workdir}/ibsim.out")
            if not _ports_free(self.port, 1):
                return
            time.sleep(0.05)
        raise RuntimeError("ibsim did not open its control port")

    def env(self, host: Optional[str] = None) -> dict:
        """Environment that makes a libibumad program talk to this ibsim (attached at node `host`)."""
        e = dict(
            os.environ,
            LD_PRELOAD=self.umad2sim,
            IBSIM_SERVER_NAME="127.0.0.1",
            IBSIM_SERVER_PORT=str(self.port),
            OSM_CACHE_DIR=self.workdir,
            OSM_TMP_DIR=self.workdir,
        )
        if host:
            e["SIM_HOST"] = host
        else:
            e.pop("SIM_HOST", None)
        return e

    def run(self, argv: List[str], host: Optional[str] = None, timeout: float = 20.0) -> str:
        """Run a diag tool (smpquery, saquery ...) under the simulator; its stdout, raises on failure."""
        r = subprocess.run(argv, env=self.env(host), capture_output=True, text=True, timeout=timeout, cwd=self.workdir)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
        return r.stdout

    def start_opensm(
        self, partitions: Optional[str] = None, host: Optional[str] = None, timeout: float = 20.0
    ) -> subprocess.Popen:
        """Start opensm (no periodic sweep) and wait until it logs SUBNET UP."""
        log = os.path.join(self.workdir, "opensm.log")
        argv = ["opensm", "-f", log, "-s", "0", "-d2"]  # -d2: flush the log per message
        if partitions:
            argv += ["-P", partitions]
        p = self._spawn(argv, env=self.env(host))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if p.poll() is not None:
                raise RuntimeError(f"opensm exited with status {p.returncode}; see {log}")
            try:
                with open(log, errors="replace") as f:
                    if "SUBNET UP" in f.read():
                        return p
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"opensm did not bring the subnet up within {timeout:.0f} s; see {log}")

    def close(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
