"""What a capture armed, written to /run/ibwire/ BEFORE each change, so any stop can undo it.

Each entry holds the exact undo: a command (tc filter del, tc qdisc del, ip link del) or a child
process to stop with SIGINT (ibdump detaches its firmware sniffer only on a clean stop).  Normal exit,
Ctrl-C and SIGTERM replay the journal; `ibwire capture --cleanup` replays journals of dead captures.
A per-port lock (fcntl.flock) keeps two captures off one sniffer.
"""
import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Optional

from ..errors import UserError

RUN_ENV = "IBWIRE_RUN_DIR"


def run_dir(path=None) -> Path:
    d = Path(path or os.environ.get(RUN_ENV) or "/run/ibwire")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {d} ({e.strerror}); run as root or set {RUN_ENV} to a writable directory")
    return d


def _netns_name() -> Optional[str]:
    """Name of the named network namespace this process is in (`ip netns identify`), None for the root one."""
    try:
        r = subprocess.run(["ip", "netns", "identify", str(os.getpid())], capture_output=True, text=True, timeout=5)
        return r.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _proc_start(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class Journal:
    """One JSON file per capture: {"pid", "netns", "target", "entries": [...]}."""

    def __init__(self, target: str, directory=None):
        self.dir = run_dir(directory)
        self.path = self.dir / f"capture-{os.getpid()}.json"
        self.doc = {"pid": os.getpid(), "start": _proc_start(os.getpid()), "netns": _netns_name(),
                    "target": target, "entries": []}
        self._write()

    def _write(self):
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def record(self, what: str, undo: Optional[List[str]] = None, **extra) -> dict:
        """Journal a change before making it; returns the entry (update it, then call `save`)."""
        entry = {"what": what, "undo": undo, **extra}
        self.doc["entries"].append(entry)
        self._write()
        return entry

    def save(self):
        self._write()

    def disarm(self) -> List[str]:
        problems = undo_entries(self.doc)
        try:
            self.path.unlink()
        except OSError:
            pass
        return problems


def undo_entries(doc: dict) -> List[str]:
    """Undo every entry, newest first; returns what could not be undone (gone already is fine)."""
    problems = []
    prefix = []
    if doc.get("netns") and doc["netns"] != _netns_name():
        prefix = ["ip", "netns", "exec", doc["netns"]]
    for e in reversed(doc.get("entries", [])):
        if e.get("pid"):
            stop_process(e["pid"], e.get("start"))
        if e.get("undo"):
            try:
                r = subprocess.run(prefix + e["undo"], capture_output=True, text=True, timeout=15)
            except (OSError, subprocess.TimeoutExpired) as ex:
                problems.append(f"{' '.join(e['undo'])}: {ex}")
                continue
            err = r.stderr.strip()
            if r.returncode and not any(s in err for s in ("Cannot find", "No such", "Invalid handle", "not found",
                                                             "does not exist", "Cannot delete qdisc")):
                problems.append(f"{' '.join(e['undo'])}: {err}")
    return problems


def stop_process(pid: int, start: Optional[str], grace: float = 10.0):
    """SIGINT (the tool's clean stop), then SIGTERM; never SIGKILL first."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 3.0)):
        if _proc_start(pid) is None or (start and _proc_start(pid) != start):
            return
        try:
            os.kill(pid, sig)
        except OSError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if _proc_start(pid) is None or _zombie(pid):
                return
            time.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def cleanup(directory=None) -> List[str]:
    """Undo what captures that are no longer running left armed; returns one line per journal."""
    d = run_dir(directory)
    report = []
    for path in sorted(d.glob("capture-*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            report.append(f"{path}: unreadable journal, removed")
            path.unlink(missing_ok=True)
            continue
        pid = doc.get("pid")
        if pid and _proc_start(pid) == doc.get("start") and not _zombie(pid):
            report.append(f"capture {pid} ({doc.get('target')}) is still running; stop it with `kill -INT {pid}`")
            continue
        problems = undo_entries(doc)
        path.unlink(missing_ok=True)
        n = len(doc.get("entries", []))
        report.append(f"undid {n} change{'s' * (n != 1)} left by capture {pid} ({doc.get('target')})"
                      + (": " + "; ".join(problems) if problems else ""))
    return report


class PortLock:
    """Exclusive flock on /run/ibwire/<key>.lock for the duration of a capture."""

    def __init__(self, key: str, directory=None):
        self.path = run_dir(directory) / (key.replace("/", "_") + ".lock")
        self.f = open(self.path, "a+")
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.f.seek(0)
            other = self.f.read().strip() or "another process"
            self.f.close()
            raise UserError(f"{key} is already being captured by pid {other}; stop that capture first")
        self.f.seek(0)
        self.f.truncate()
        self.f.write(str(os.getpid()))
        self.f.flush()

    def release(self):
        try:
            fcntl.flock(self.f, fcntl.LOCK_UN)
            self.f.close()
        except (OSError, ValueError):
            pass
