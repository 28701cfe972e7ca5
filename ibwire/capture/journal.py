"""What a capture armed, written to /run/ibwire/ BEFORE each change, so any stop can undo it.

Each entry holds the exact undo: a command (tc filter del, tc qdisc del, ip link del), possibly only when a
device has no filter left (a clsact qdisc shared by concurrent captures), or a child process to stop with
SIGINT (ibdump detaches its firmware sniffer only on a clean stop).  Normal exit, Ctrl-C and SIGTERM replay
the journal; `ibwire capture --cleanup` replays journals of dead captures, then undoes whatever still carries
the mark of a dead capture (ibwire.capture.marks), so a lost or damaged journal never leaves state armed.
A per-port lock (fcntl.flock) keeps two captures off one sniffer; a state lock serialises arming and undoing.
"""
import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterable, List, Optional, Tuple

from ..errors import UserError
from . import marks

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


_proc_start = marks.proc_start      # the RDMA lab records its QEMU processes' start times with it


class StateLock:
    """Exclusive flock on <run dir>/state.lock while tc state is armed or undone (blocking)."""

    def __init__(self, directory=None):
        self.path = run_dir(directory) / "state.lock"

    def __enter__(self):
        self.f = open(self.path, "a+")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def _name_owner(path: Path) -> Tuple[Optional[int], Optional[str]]:
    """(pid, start) from capture-PID-START.json."""
    parts = path.stem.split("-")
    pid = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    return pid, parts[2] if len(parts) > 2 and parts[2].isdigit() else None


class Journal:
    """One JSON file per capture: {"pid", "netns", "target", "entries": [...]}."""

    def __init__(self, target: str, directory=None):
        self.dir = run_dir(directory)
        pid, start = marks.me()
        self.path = self.dir / f"capture-{pid}-{start}.json"
        self.doc = {"pid": pid, "start": start, "netns": _netns_name(), "target": target, "entries": []}
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
        with StateLock(self.dir):
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
        if e.get("if_no_filters") and marks.filters(doc["netns"] if prefix else None, e["if_no_filters"]):
            continue      # another capture still mirrors through this qdisc; the last one out removes it
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
        if not marks.alive(pid, start):
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
            if marks.proc_start(pid) is None or marks.zombie(pid):
                return
            time.sleep(0.05)


def cleanup(directory=None) -> List[str]:
    """Undo what captures that are no longer running left armed: their journals first, then whatever still
    carries the mark of a dead capture.  Returns one line per capture."""
    with StateLock(directory):
        return _cleanup(run_dir(directory))


def _cleanup(d: Path) -> List[str]:
    report, damaged = [], []
    for path in sorted(d.glob("capture-*.json")):
        try:
            doc = json.loads(path.read_text())
            pid, start = doc["pid"], doc.get("start")
        except (OSError, ValueError, KeyError, TypeError):
            damaged.append(path)
            continue
        if marks.alive(pid, start):
            report.append(f"capture {pid} ({doc.get('target')}) is still running; stop it with `kill -INT {pid}`")
            continue
        problems = undo_entries(doc)
        n = len(doc.get("entries", []))
        if problems:
            report.append(f"capture {pid} ({doc.get('target')}): could not undo {'; '.join(problems)}; journal "
                          f"{path} kept")
            continue
        path.unlink(missing_ok=True)
        report.append(f"undid {n} change{'s' * (n != 1)} left by capture {pid} ({doc.get('target')})")
    stale = [a for a in marks.scan() if not marks.alive(*a.owner)]
    problems = undo_marked(stale)
    left = [a for a in marks.scan() if not marks.alive(*a.owner)]
    for pid in sorted({a.owner[0] for a in stale}):
        mine = [a for a in stale if a.owner[0] == pid]
        report.append(f"undid {len(mine)} change{'s' * (len(mine) != 1)} left by capture {pid}, found by their "
                      f"marks: " + ", ".join(a.what for a in mine))
    report += [f"could not undo: {p}" for p in problems]
    for path in damaged:
        pid, start = _name_owner(path)
        if pid and marks.alive(pid, start):
            report.append(f"capture {pid} is still running (its journal {path} is damaged); stop it with "
                          f"`kill -INT {pid}`")
        elif left:
            report.append(f"damaged journal {path} kept: {len(left)} marked change(s) could not be undone "
                          f"({', '.join(a.what for a in left)})")
        else:
            path.unlink(missing_ok=True)
            report.append(f"damaged journal {path} removed: nothing its capture{f' {pid}' if pid else ''} "
                          f"armed is left (searched by marks in every network namespace)")
    return report


def undo_marked(items: List["marks.Armed"]) -> List[str]:
    """Stop marked engines, delete marked filters (and their qdisc once ibwire's and empty), then monitors."""
    problems = []
    for a in items:
        if a.kind == "process":
            stop_process(int(a.undo[0]), None)
    for kind in ("filter", "monitor"):
        for a in items:
            if a.kind != kind:
                continue
            r = subprocess.run(a.undo, capture_output=True, text=True, timeout=15)
            if r.returncode and not any(s in r.stderr for s in ("Cannot find", "No such", "not found")):
                problems.append(f"{a.what}: {r.stderr.strip()}")
            if kind == "filter" and a.flags & marks.QDISC_IS_OURS and not marks.filters(a.netns, a.dev):
                subprocess.run(marks._tc(a.netns) + ["qdisc", "del", "dev", a.dev, "clsact"], capture_output=True,
                               timeout=15)
    return problems


def running(netns: Iterable[str], directory=None) -> List[Tuple[int, Optional[str], str]]:
    """(pid, start, description) of live captures whose journal or marks place them in these namespaces; a
    live capture with a damaged journal counts too (it may be one of them)."""
    names = set(netns)
    out = {}
    for path in sorted(run_dir(directory).glob("capture-*.json")):
        try:
            doc = json.loads(path.read_text())
            pid, start, inside, what = doc["pid"], doc.get("start"), doc.get("netns") in names, doc.get("target")
        except (OSError, ValueError, KeyError, TypeError):
            (pid, start), inside, what = _name_owner(path), True, "damaged journal"
        if pid and inside and marks.alive(pid, start):
            out[pid] = (pid, start, f"capture {pid} ({what})")
    for a in marks.scan():
        if a.netns in names and a.owner[0] not in out and marks.alive(*a.owner):
            out[a.owner[0]] = (a.owner[0], a.owner[1], f"capture {a.owner[0]} ({a.what})")
    return list(out.values())


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
