"""A capture journal read as strictly as every other input, because cleanup replays it as root.

    {"pid": 4242, "start": "912345", "netns": "lab-pf" | null, "target": "lab VF 2 ...",
     "entries": [{"what": "...", "undo": [argv] | null, "pid": N, "start": "...", "cmd": [argv],
                  "if_no_filters": "dev"}, ...]}

Only the undo commands ibwire itself writes are replayed (`tc filter del dev D ingress pref N` with N in
ibwire's range of prefs, `tc qdisc del dev D clsact`, `ip link del dev ibwmonNa`, with interface names as the
kernel allows them: dev_valid_name() in net/core/dev.c); anything else, a wrong type or an unknown key is reported as
`FILE: message` and its entry is not replayed.  Processes are stopped by the caller only when they carry the
capture's mark (ibwire.capture.marks), whatever the journal says.
"""

import json
import re
from typing import List, Optional, Tuple

from ibwire.capture import runfiles
from ibwire.capture.marks import MONITOR, PREF_BASE

NAME = re.compile(r"capture-(\d{1,7})-(\d{1,20})\.json")
TMP = re.compile(r"\.?capture-(\d{1,7})-(\d{1,20})(\.[0-9a-f]+)?\.tmp")
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT
IFNAME = re.compile(r"[^\s/:\x00]{1,15}")
NETNS = re.compile(r"[^\s/\x00-\x1f\x7f-][^\s/\x00-\x1f\x7f]{0,254}")
MONITOR_A = re.compile(MONITOR + r"\d{1,8}a")


def _is_name(v, pattern) -> bool:
    return isinstance(v, str) and bool(pattern.fullmatch(v)) and v not in (".", "..")


def _ifname(v) -> bool:
    return _is_name(v, IFNAME)


def _pref(v) -> bool:
    return isinstance(v, str) and v.isdigit() and PREF_BASE <= int(v) <= 0xFFFF


UNDO_FORMS = (
    ("tc", "filter", "del", "dev", _ifname, "ingress", "pref", _pref),
    ("tc", "qdisc", "del", "dev", _ifname, "clsact"),
    ("ip", "link", "del", "dev", MONITOR_A.fullmatch),
)
TOP_KEYS = {"pid", "start", "netns", "target", "entries"}
ENTRY_KEYS = {"what", "undo", "pid", "start", "cmd", "if_no_filters"}
SHOWN = 3  # problems named in a report sentence; the rest are counted


def printable(text, limit: int = 120) -> str:
    """Journal text fit for a terminal: control characters escaped, cut at `limit`."""
    s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return s if len(s) <= limit else s[:limit] + "…"


def owner_of(name: str) -> Tuple[Optional[int], Optional[str]]:
    """(pid, start) from a journal's or temporary file's name, (None, None) for other names."""
    m = NAME.fullmatch(name) or TMP.fullmatch(name)
    return (int(m.group(1)), m.group(2)) if m else (None, None)


def _argv(v) -> bool:
    return isinstance(v, list) and all(isinstance(a, str) for a in v)


def undo_known(argv) -> bool:
    """The undo is one of the commands ibwire writes."""

    def fits(form):
        return len(argv) == len(form) and all(a == f if isinstance(f, str) else f(a) for a, f in zip(argv, form))

    return _argv(argv) and any(fits(form) for form in UNDO_FORMS)


def _pid(v) -> bool:
    return type(v) is int and 0 < v < PID_MAX


def _start(v) -> bool:
    return v is None or (isinstance(v, str) and v.isdigit() and len(v) <= 20)


def _entry(i: int, e, problems: List[str]) -> Optional[dict]:
    """The entry if it can be replayed safely, else None; what is wrong goes to problems."""
    at = f"entry {i + 1}"
    if not isinstance(e, dict):
        problems.append(f"{at} is not an object")
        return None
    bad = []
    for k in sorted(set(e) - ENTRY_KEYS):
        problems.append(f"{at} has an unknown key {printable(k, 40)!r}")
    if not isinstance(e.get("what"), str):
        bad.append("'what' is not text")
    if "undo" in e and e["undo"] is not None and not undo_known(e["undo"]):
        bad.append("its undo is not a command ibwire writes" if _argv(e["undo"]) else "'undo' is not a command")
    if "pid" in e and e["pid"] is not None and not _pid(e["pid"]):
        bad.append("'pid' is not a process id")
    if not _start(e.get("start")):
        bad.append("'start' is not a start time")
    if "cmd" in e and not _argv(e["cmd"]):
        bad.append("'cmd' is not a command")
    if "if_no_filters" in e and not _ifname(e["if_no_filters"]):
        bad.append("'if_no_filters' is not an interface name")
    if bad:
        problems.append(f"{at} not replayed: {', '.join(bad)}")
        return None
    return e


def check(doc) -> Tuple[Optional[dict], List[str]]:
    """(the journal with only the entries safe to replay, problems); None when its owner cannot be told."""
    if not isinstance(doc, dict):
        return None, [f"a JSON {type(doc).__name__}, not a journal object"]
    problems = [f"unknown key {printable(k, 40)!r}" for k in sorted(set(doc) - TOP_KEYS)]
    if not _pid(doc.get("pid")):
        return None, problems + ["'pid' is not a process id"]
    if not _start(doc.get("start")):
        return None, problems + ["'start' is not a start time"]
    out = {"pid": doc["pid"], "start": doc.get("start"), "netns": None, "target": "?", "entries": []}
    if doc.get("netns") is not None and not _is_name(doc["netns"], NETNS):
        return None, problems + ["'netns' is not a network namespace name"]
    out["netns"] = doc.get("netns")
    if isinstance(doc.get("target"), str):
        out["target"] = doc["target"]
    else:
        problems.append("'target' is not text")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        problems.append("'entries' is not a list")
        entries = []
    out["entries"] = [e for e in (_entry(i, e, problems) for i, e in enumerate(entries)) if e is not None]
    return out, problems


def load(dfd: int, name: str) -> Tuple[Optional[dict], List[str]]:
    """Read and check one journal: (journal or None, problems)."""
    try:
        data = runfiles.read(dfd, name)
    except runfiles.Unreadable as e:
        return None, [str(e)]
    try:
        doc = json.loads(data)
    except RecursionError:
        return None, ["is nested too deeply to be a journal"]
    except ValueError as e:  # truncated or not JSON, not UTF-8, numbers too long
        return None, [f"is not JSON ({printable(e, 80)})"]
    doc, problems = check(doc)
    if doc and owner_of(name) != (doc["pid"], doc["start"]):
        return None, problems + [f"holds capture {doc['pid']} ({doc['start']}) but its name is another's"]
    return doc, problems


def sentence(path, problems: List[str]) -> str:
    """One line naming a journal and what is wrong with it: `FILE: a; b; c and 2 more problems`."""
    more = len(problems) - SHOWN
    return (
        f"{path}: "
        + "; ".join(problems[:SHOWN])
        + (f"; and {more} more problem{'s' * (more != 1)}" if more > 0 else "")
    )
