"""`ibwire capture --cleanup`: undo what captures that are no longer running left armed, whatever their journals hold.

The journals of dead captures are replayed, as far as ibwire.capture.journal_format accepts them; a journal that
cannot be read, or only in part (wrong types, truncated, nested, huge, a link, a FIFO, garbage), gets one line
`FILE: what is wrong`.  Then, always, every network namespace and process is searched for ibwire's marks
(ibwire.capture.marks) and whatever a dead capture marked is undone; temporary files of journal writes that a
killed capture left are removed.  Exit status 0 when nothing a dead capture armed is left, 1 (LeftArmed) when
something could not be undone, each named.
"""

import os
import subprocess
from pathlib import Path
from typing import Callable, List, Tuple

from ibwire.capture import marks, runfiles
from ibwire.capture.journal import StateLock, gone, journals, run_dir, stop_process, undo_entries
from ibwire.capture.journal_format import TMP, owner_of, printable, sentence
from ibwire.errors import UserError


class LeftArmed(UserError):
    """Something a dead capture armed could not be undone: exit status 1."""

    exit_code = 1


def cleanup(say: Callable[[str], None], directory=None) -> None:
    """Print one line per capture (and per damaged journal); raise LeftArmed if anything stays armed."""
    d = run_dir(directory)
    with StateLock(d):
        lines, failed = _cleanup(d)
    for line in lines or ["nothing to clean up"]:
        say(line)
    if failed:
        raise LeftArmed(
            f"{failed} change{'s' * (failed != 1)} left by dead captures could not be undone (listed "
            f"above); run `ibwire capture --cleanup` again as root once the cause is fixed"
        )


def _cleanup(d: Path) -> Tuple[List[str], int]:
    report, damaged, failed = [], [], 0
    for name, doc, problems in journals(d):
        path = d / name
        if problems:
            report.append(sentence(path, problems))
        if doc is None:
            damaged.append(name)
            continue
        pid, target = doc["pid"], printable(doc["target"])
        if marks.alive(pid, doc["start"]):
            report.append(f"capture {pid} ({target}) is still running; stop it with `kill -INT {pid}`")
            continue
        undone = undo_entries(doc)
        if undone:
            failed += len(undone)
            report.append(
                f"capture {pid} ({target}): could not undo {'; '.join(map(printable, undone))}; journal {path} kept"
            )
            continue
        path.unlink(missing_ok=True)
        n = len(doc["entries"])
        report.append(f"undid {n} change{'s' * (n != 1)} left by capture {pid} ({target})")
    report += _tmp_files(d)
    stale = [a for a in marks.scan() if not marks.alive(*a.owner)]
    problems = undo_marked(stale)
    tried = {(a.kind, a.netns, a.what) for a in stale}  # a capture that died meanwhile is the next run's
    left = [a for a in marks.scan() if (a.kind, a.netns, a.what) in tried and not marks.alive(*a.owner)]
    failed += len(left)
    for pid in sorted({a.owner[0] for a in stale}):
        mine = [a for a in stale if a.owner[0] == pid]
        report.append(
            f"undid {len(mine)} change{'s' * (len(mine) != 1)} left by capture {pid}, found by their "
            f"marks: " + ", ".join(a.what for a in mine)
        )
    report += [f"could not undo: {printable(p)}" for p in problems]
    report += _damaged(d, damaged, left)
    return report, failed


def _damaged(d: Path, names: List[str], left: List["marks.Armed"]) -> List[str]:
    """A damaged journal is removed once its capture is dead and the search by marks left nothing armed."""
    report = []
    dfd = runfiles.open_dir(d)
    try:
        for name in names:
            path = d / name
            pid, start = owner_of(name)
            if pid and marks.alive(pid, start):
                report.append(
                    f"capture {pid} is still running (its journal {path} is damaged); stop it with `kill -INT {pid}`"
                )
            elif left:
                report.append(
                    f"damaged journal {path} kept: {len(left)} marked change(s) could not be undone "
                    f"({', '.join(a.what for a in left)})"
                )
            elif (why := runfiles.remove(dfd, name)) is not None:
                report.append(
                    f"damaged journal {path} could not be removed ({why}); nothing its capture armed is "
                    f"left (searched by marks in every network namespace)"
                )
            else:
                report.append(
                    f"damaged journal {path} removed: nothing its capture{f' {pid}' if pid else ''} "
                    f"armed is left (searched by marks in every network namespace)"
                )
    finally:
        os.close(dfd)
    return report


def _tmp_files(d: Path) -> List[str]:
    """Remove the temporary files of journal writes whose writer is gone (killed between write and rename)."""
    dfd = runfiles.open_dir(d)
    try:
        gone = [
            n
            for n in sorted(os.listdir(dfd))
            if TMP.fullmatch(n) and not marks.alive(*owner_of(n)) and runfiles.remove(dfd, n) is None
        ]
    finally:
        os.close(dfd)
    return (
        [f"removed {len(gone)} unfinished journal write{'s' * (len(gone) != 1)} of dead captures ({', '.join(gone)})"]
        if gone
        else []
    )


def _run(cmd: List[str]) -> str:
    """Run an undo; '' when it worked or the thing is gone already, else what went wrong."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if r.returncode and not gone(r.stderr):
        return r.stderr.strip() or f"status {r.returncode}"
    return ""


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
            err = _run(a.undo)
            if err:
                problems.append(f"{a.what}: {err}")
            if kind == "filter" and a.flags & marks.QDISC_IS_OURS and not marks.filters(a.netns, a.dev):
                _run(marks._tc(a.netns) + ["qdisc", "del", "dev", a.dev, "clsact"])
    return problems
