"""The host side of the guests' mailboxes (protocol in ibwire.lab.rdma.agent): run a command, stream its output,
return its exit status; netem faults and rxe hw_counters built on it."""

import json
import os
import sys
import time
import uuid
from typing import List, Optional

from ibwire.errors import UserError
from ibwire.lab.rdma import lab as rlab

COUNTERS = "/sys/class/infiniband/rxe0/ports/1/hw_counters"


def guest(lab: dict, name: str) -> dict:
    for v in lab["vfs"]:
        if name in (v["name"], str(v["index"])):
            return v
    raise UserError(f"the lab has guests {', '.join(v['name'] for v in lab['vfs'])}; there is no {name}")


def _running(prefix: str, name: str) -> bool:
    doc = json.loads((rlab.work_dir(prefix) / "state.json").read_text())
    return any(q["guest"] == name and rlab._alive(q["pid"]) for q in doc["qemu"])


class _Stream:
    def __init__(self, path: str, sink):
        self.path, self.sink, self.pos = path, sink, 0

    def pump(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except OSError:
            return
        if data:
            self.pos += len(data)
            self.sink.write(data)
            self.sink.flush()


def run(prefix: str, name: str, argv: List[str], timeout: Optional[float] = None, stdout=None, stderr=None) -> int:
    """Run argv in guest `name`; its stdout/stderr go to the given binary streams as they come; returns its
    exit status (128+N when a signal ended it; 130 when Ctrl-C here stopped it)."""
    lab = rlab.load(prefix)
    v = guest(lab, name)
    box = rlab.work_dir(prefix) / "share" / v["name"]
    jid = uuid.uuid4().hex[:12]
    req = box / "req" / f"{jid}.json"
    tmp = box / "req" / f"{jid}.tmp"
    tmp.write_text(json.dumps({"argv": argv, "timeout": timeout}))
    os.replace(tmp, req)
    out = _Stream(str(box / "out" / f"{jid}.1"), stdout or sys.stdout.buffer)
    err = _Stream(str(box / "out" / f"{jid}.2"), stderr or sys.stderr.buffer)
    done = box / "done" / f"{jid}.json"
    interrupted = False
    last_check = time.monotonic()
    try:
        while True:
            try:
                while not done.exists():
                    out.pump()
                    err.pump()
                    time.sleep(0.02)
                    if time.monotonic() - last_check > 1:
                        last_check = time.monotonic()
                        if not _running(prefix, v["name"]):
                            raise UserError(f"guest {v['name']} is not running; `ibwire lab status` shows the lab")
                break
            except KeyboardInterrupt:
                if interrupted:
                    raise
                interrupted = True
                (box / "req" / f"{jid}.kill").touch()
        out.pump()
        err.pump()
        rc = json.loads(done.read_text())["rc"]
    finally:
        for p in (req, tmp, done, box / "out" / f"{jid}.1", box / "out" / f"{jid}.2"):
            try:
                os.unlink(p)
            except OSError:
                pass
    return 130 if interrupted else rc


def capture_output(prefix: str, name: str, argv: List[str], timeout: Optional[float] = 60) -> tuple:
    """(rc, stdout text, stderr text) of a command in a guest."""
    import io

    o, e = io.BytesIO(), io.BytesIO()
    rc = run(prefix, name, argv, timeout, o, e)
    return rc, o.getvalue().decode(errors="replace"), e.getvalue().decode(errors="replace")


def counters(prefix: str, name: str) -> dict:
    """rxe0's hw_counters of a guest: {counter: value}."""
    rc, out, err = capture_output(prefix, name, ["grep", "-r", ".", COUNTERS])
    if rc:
        raise UserError(f"cannot read {COUNTERS} in {name}: {err.strip() or out.strip()}")
    result = {}
    for line in out.splitlines():
        path, _, value = line.partition(":")
        result[os.path.basename(path)] = int(value)
    return dict(sorted(result.items()))


def faults(
    prefix: str,
    name: str,
    loss: Optional[str],
    delay: Optional[List[str]],
    duplicate: Optional[str],
    reorder: Optional[str],
    clear: bool,
) -> str:
    """tc netem on the guest NIC's egress (every frame the guest sends, all its VLANs); returns `tc -s qdisc`."""
    lab = rlab.load(prefix)
    v = guest(lab, name)
    nic = v["nic"]
    if reorder and not delay:
        raise UserError("--reorder needs --delay (netem reorders by sending some packets without the delay)")
    capture_output(prefix, name, ["tc", "qdisc", "del", "dev", nic, "root"])
    spec = []
    for key, val in (("delay", delay), ("loss", loss), ("duplicate", duplicate), ("reorder", reorder)):
        if val:
            spec += [key] + (val if isinstance(val, list) else [val])
    if spec and not clear:
        rc, out, err = capture_output(prefix, name, ["tc", "qdisc", "add", "dev", nic, "root", "netem"] + spec)
        if rc:
            raise UserError(f"tc netem refused `{' '.join(spec)}`: {err.strip() or out.strip()}")
    return capture_output(prefix, name, ["tc", "-s", "qdisc", "show", "dev", nic])[1]
