"""Marks on everything a capture arms, so `ibwire capture --cleanup` finds it even without a journal.

- tc mirror filters carry an action cookie (tc-actions(8) `cookie`, at most 16 bytes): "ibw\\x01", the
  capture's pid (4 bytes), its start time in clock ticks (/proc/PID/stat field 22, 6 bytes) and a flag byte
  (bit 0: the clsact qdisc on that device is ibwire's, to be removed when its last filter goes).
- monitor interfaces carry the alias "ibwire capture PID START" (IFLA_IFALIAS).
- capture engines (dumpcap, ibdump, tcpdump) run with IBWIRE_CAPTURE_OWNER=PID:START in their environment.
A mark whose owner process is gone (or whose pid was reused: other start time) is stale and undone.
"""

import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

MAGIC = b"ibw\x01"
OWNER_ENV = "IBWIRE_CAPTURE_OWNER"
ALIAS = "ibwire capture"
QDISC_IS_OURS = 1
PREF_BASE = 0xC1B0  # mirror rules take the first free pref from here up (tc filter ... pref N)
MONITOR = "ibwmon"  # monitor veth pairs: ibwmon<N>a (mirrored to, carries the alias) and ibwmon<N>b


def proc_start(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def alive(pid: int, start: Optional[str]) -> bool:
    s = proc_start(pid)
    return s is not None and (not start or s == str(start)) and not zombie(pid)


def me() -> Tuple[int, str]:
    return os.getpid(), proc_start(os.getpid()) or "0"


def cookie(flags: int = 0) -> str:
    pid, start = me()
    return (MAGIC + pid.to_bytes(4, "big") + (int(start) & (2**48 - 1)).to_bytes(6, "big") + bytes([flags])).hex()


def parse_cookie(text: Optional[str]) -> Optional[Tuple[int, str, int]]:
    """(pid, start, flags) of an ibwire cookie, None for anything else."""
    try:
        b = bytes.fromhex(text or "")
    except ValueError:
        return None
    if len(b) != 15 or not b.startswith(MAGIC):
        return None
    return int.from_bytes(b[4:8], "big"), str(int.from_bytes(b[8:14], "big")), b[14]


def alias() -> str:
    pid, start = me()
    return f"{ALIAS} {pid} {start}"


def parse_alias(text: Optional[str]) -> Optional[Tuple[int, str]]:
    parts = (text or "").split()
    if len(parts) == 4 and " ".join(parts[:2]) == ALIAS and parts[2].isdigit() and parts[3].isdigit():
        return int(parts[2]), parts[3]
    return None


def owner_env() -> dict:
    pid, start = me()
    return dict(os.environ, **{OWNER_ENV: f"{pid}:{start}"})


def engine_owner(pid: int) -> Optional[Tuple[int, str]]:
    """(pid, start) of the capture whose mark a process carries in its environment, None for other processes."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(OWNER_ENV.encode() + b"="):
            opid, _, ostart = kv.split(b"=", 1)[1].decode(errors="replace").partition(":")
            if opid.isdigit():
                return int(opid), ostart
    return None


@dataclass
class Armed:
    """One marked piece of capture state."""

    kind: str  # "process", "filter", "monitor"
    owner: Tuple[int, str]
    netns: Optional[str]
    what: str
    undo: List[str] = field(default_factory=list)
    dev: Optional[str] = None
    flags: int = 0


def _ip(netns: Optional[str]) -> List[str]:
    return ["ip", "-n", netns] if netns else ["ip"]


def _tc(netns: Optional[str]) -> List[str]:
    return ["tc", "-n", netns] if netns else ["tc"]


def _json(cmd: List[str]):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []


def namespaces() -> List[Optional[str]]:
    """None (this namespace) and every named network namespace."""
    try:
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=15)
        names = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.TimeoutExpired):
        names = []
    return [None] + names


def filters(netns: Optional[str], dev: str) -> list:
    """Every filter entry on a device's ingress and egress hooks (tc -j)."""
    return [
        f
        for hook in ("ingress", "egress")
        for f in _json(_tc(netns) + ["-j", "filter", "show", "dev", dev, hook])
        if f.get("options")
    ]


def marked_filters(netns: Optional[str], dev: str) -> List[Armed]:
    out = []
    for f in _json(_tc(netns) + ["-j", "filter", "show", "dev", dev, "ingress"]):
        for a in (f.get("options") or {}).get("actions", []):
            c = parse_cookie(a.get("cookie"))
            if c:
                out.append(
                    Armed(
                        "filter",
                        (c[0], c[1]),
                        netns,
                        f"mirror filter on {dev} pref {f['pref']}",
                        _tc(netns) + ["filter", "del", "dev", dev, "ingress", "pref", str(f["pref"])],
                        dev,
                        c[2],
                    )
                )
    return out


def scan() -> List[Armed]:
    """Every marked piece of capture state on this host, in every network namespace."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        o = engine_owner(int(pid))
        if o and int(pid) != o[0]:
            found.append(Armed("process", o, None, f"capture engine pid {pid}", [pid]))
    for ns in namespaces():
        for q in _json(_tc(ns) + ["-j", "qdisc", "show"]):
            if q.get("kind") == "clsact":
                found += marked_filters(ns, q["dev"])
        for link in _json(_ip(ns) + ["-j", "link", "show"]):
            o = parse_alias(link.get("ifalias"))
            if o:
                found.append(
                    Armed(
                        "monitor",
                        o,
                        ns,
                        f"monitor interface {link['ifname']}",
                        _ip(ns) + ["link", "del", "dev", link["ifname"]],
                        link["ifname"],
                    )
                )
    return found
