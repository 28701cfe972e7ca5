"""What a capture armed, written to /run/ibwire/ BEFORE each change, so any stop can undo it.

Each entry holds the exact undo: a command (tc filter del, tc qdisc del, ip link del), possibly only when a
device has no filter left (a clsact qdisc shared by concurrent captures), or a child process to stop with
SIGINT (ibdump detaches its firmware sniffer only on a clean stop).  Normal exit, Ctrl-C and SIGTERM replay
the journal; `ibwire capture --cleanup` (ibwire.capture.cleanup) replays journals of dead captures, then undoes
whatever still carries the mark of a dead capture (ibwire.capture.marks), so a lost or damaged journal never
leaves state armed.  Journals and locks are written and read as ibwire.capture.runfiles says (no link followed,
no FIFO waited on, no temporary file left), and read back as ibwire.capture.journal_format checks them.
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

from ibwire.capture import journal_format, marks, runfiles
from ibwire.errors import UserError

RUN_ENV = "IBWIRE_RUN_DIR"


def run_dir(path=None) -> Path:
    d = Path(path or os.environ.get(RUN_ENV) or "/run/ibwire")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(
            f"cannot create {d} ({e.strerror}); run as root or set {RUN_ENV} to a writable directory"
        ) from None
    return d


def _netns_name() -> Optional[str]:
    """Name of the named network namespace this process is in (`ip netns identify`), None for the root one."""
    try:
        r = subprocess.run(["ip", "netns", "identify", str(os.getpid())], capture_output=True, text=True, timeout=5)
        return r.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


_proc_start = marks.proc_start  # the RDMA lab records its QEMU processes' start times with it


def _lock_file(directory: Path, name: str):
    try:
        return runfiles.open_lock(directory, name)
    except runfiles.Unreadable as e:
        raise UserError(f"the lock file {directory / name} {e}; remove it") from None
    except OSError as e:
        raise UserError(
            f"cannot open {directory} ({e.strerror}); run as root or set {RUN_ENV} to a writable directory"
        ) from None


class StateLock:
    """Exclusive flock on <run dir>/state.lock while tc state is armed or undone (blocking)."""

    def __init__(self, directory=None):
        self.dir = run_dir(directory)

    def __enter__(self):
        self.f = _lock_file(self.dir, "state.lock")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


class Journal:
    """One JSON file per capture: {"pid", "netns", "target", "entries": [...]}."""

    def __init__(self, target: str, directory=None):
        self.dir = run_dir(directory)
        pid, start = marks.me()
        self.name = f"capture-{pid}-{start}.json"
        self.path = self.dir / self.name
        self.doc = {"pid": pid, "start": start, "netns": _netns_name(), "target": target, "entries": []}
        self.disarmed = False
        self._write()

    def _write(self):
        try:
            runfiles.replace(self.dir, self.name, json.dumps(self.doc, indent=1).encode(), "." + self.path.stem)
        except OSError as e:
            raise UserError(
                f"cannot write the capture journal {self.path} ({e.strerror or e}); nothing more is armed"
            ) from None

    def record(self, what: str, undo: Optional[List[str]] = None, **extra) -> dict:
        """Journal a change before making it; returns the entry (update it, then call `save`)."""
        entry = {"what": what, "undo": undo, **extra}
        self.doc["entries"].append(entry)
        self._write()
        return entry

    def save(self):
        self._write()

    def disarm(self) -> List[str]:
        """Undo every entry and remove the journal (once: later calls find nothing to do)."""
        if self.disarmed:
            return []
        with StateLock(self.dir):
            problems = undo_entries(self.doc)
        self.disarmed = True
        if not problems:
            self.path.unlink(missing_ok=True)
        return problems


def undo_entries(doc: dict) -> List[str]:
    """Undo every entry, newest first; returns what could not be undone (gone already is fine).  A rule on a
    device whose clsact is ibwire's goes with that qdisc in one step when every rule there is this capture's, so
    a kill in the middle never leaves an empty qdisc that no mark names."""
    problems = []
    prefix = []
    if doc.get("netns") and doc["netns"] != _netns_name():
        prefix = ["ip", "netns", "exec", doc["netns"]]
    ns = doc["netns"] if prefix else None
    ours = {e["if_no_filters"] for e in doc.get("entries", []) if e.get("if_no_filters")}
    for e in reversed(doc.get("entries", [])):
        if e.get("pid") and marks.engine_owner(e["pid"]) == (doc["pid"], str(doc.get("start"))):
            stop_process(e["pid"], e.get("start"))  # only the capture's own engines, whatever the journal says
        if e.get("if_no_filters") and marks.filters(ns, e["if_no_filters"]):
            continue  # another capture still mirrors through this qdisc; the last one out removes it
        undo = e.get("undo")
        if undo and undo[:3] == ["tc", "filter", "del"] and undo[4] in ours and _all_rules_its_own(doc, ns, undo[4]):
            undo = ["tc", "qdisc", "del", "dev", undo[4], "clsact"]
        if undo:
            try:
                r = subprocess.run(prefix + undo, capture_output=True, text=True, timeout=15)
            except (OSError, subprocess.TimeoutExpired) as ex:
                problems.append(f"{' '.join(undo)}: {ex}")
                continue
            err = r.stderr.strip()
            if r.returncode and not gone(err):
                problems.append(f"{' '.join(undo)}: {err}")
    return problems


def gone(err: str) -> bool:
    """An undo failed only because what it undoes is gone already (with its device, namespace or qdisc)."""
    return any(
        s in err
        for s in (
            "Cannot find",
            "No such",
            "Invalid handle",
            "not found",
            "does not exist",
            "Cannot delete qdisc",
            "Parent Qdisc doesn't exist",
        )
    )


def _all_rules_its_own(doc: dict, netns: Optional[str], dev: str) -> bool:
    """Every rule on dev carries this capture's mark (its cookie)."""
    mine = {a.undo[-1] for a in marks.marked_filters(netns, dev) if a.owner == (doc["pid"], str(doc.get("start")))}
    return bool(mine) and mine == {str(f.get("pref")) for f in marks.filters(netns, dev)}


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


def running(netns: Iterable[str], directory=None) -> List[Tuple[int, Optional[str], str]]:
    """(pid, start, description) of live captures whose journal or marks place them in these namespaces; a
    live capture with a damaged journal counts too (it may be one of them)."""
    names = set(netns)
    out = {}
    for name, doc, _ in journals(run_dir(directory)):
        if doc:
            pid, start, inside, what = doc["pid"], doc["start"], doc["netns"] in names, doc["target"]
        else:
            (pid, start), inside, what = journal_format.owner_of(name), True, "damaged journal"
        if pid and inside and marks.alive(pid, start):
            out[pid] = (pid, start, f"capture {pid} ({journal_format.printable(what)})")
    for a in marks.scan():
        if a.netns in names and a.owner[0] not in out and marks.alive(*a.owner):
            out[a.owner[0]] = (a.owner[0], a.owner[1], f"capture {a.owner[0]} ({a.what})")
    return list(out.values())


def journals(directory: Path) -> List[Tuple[str, Optional[dict], List[str]]]:
    """(name, checked journal or None, problems) of every capture-*.json in the run directory."""
    dfd = runfiles.open_dir(directory)
    try:
        return [
            (name, *journal_format.load(dfd, name))
            for name in sorted(os.listdir(dfd))
            if name.startswith("capture-") and name.endswith(".json")
        ]
    finally:
        os.close(dfd)


class PortLock:
    """Exclusive flock on /run/ibwire/<key>.lock for the duration of a capture."""

    def __init__(self, key: str, directory=None):
        self.f = _lock_file(run_dir(directory), key.replace("/", "_") + ".lock")
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.f.seek(0)
            other = self.f.read().strip() or "another process"
            self.f.close()
            raise UserError(f"{key} is already being captured by pid {other}; stop that capture first") from None
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
