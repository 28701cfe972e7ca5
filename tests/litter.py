"""What a test run wrote where it should not.

In the repository: a snapshot of every file and folder below the root (also the ones .gitignore hides, so an
ignored tree such as umad2sim's ./sys-PID still counts), compared after the run.
Elsewhere (the real home folder, /etc, /usr/local, ...): the names there before and after, and the files
whose mtime is newer than the run's start.  The run's own HOME, XDG folders and TMPDIR are one scratch
folder (tests/conftest.py), so a tool that keeps caches or settings in the home folder writes into that."""
import os
from pathlib import Path

SKIP = {".git", ".venv"}       # git's own store and the developer's virtualenv (pip writes there)

# Places outside any temporary folder that a test, or a tool a test runs, could write into (besides the
# home folder): system settings, software installed by hand, caches, and the root folder's own entries.
OUTSIDE = ["/", "/etc", "/usr/local", "/opt", "/var/tmp", "/var/cache", "/srv"]
# ... except what the system's own timers rewrite at any time (apt's and man's caches on a Debian machine).
SYSTEM = ["/var/cache/apt", "/var/cache/man", "/var/cache/debconf", "/var/cache/ldconfig"]


def snapshot(root: Path) -> dict:
    """Relative path -> (size, mtime in ns) of each file, None for each folder."""
    seen = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP]
        rel = os.path.relpath(top, root)
        for d in dirs:
            seen[os.path.normpath(os.path.join(rel, d))] = None
        for f in files:
            p = os.path.join(top, f)
            try:
                st = os.lstat(p)
            except FileNotFoundError:          # removed while we looked
                continue
            seen[os.path.normpath(os.path.join(rel, f))] = (st.st_size, st.st_mtime_ns)
    return seen


def changes(before: dict, after: dict) -> list:
    """'created X', 'deleted X', 'modified X' lines, a created folder standing for what is inside it."""
    created = sorted(set(after) - set(before))
    out, parents = [], set()
    for p in created:
        if any(p.startswith(d + os.sep) for d in parents):
            continue
        if after[p] is None:
            parents.add(p)
        out.append(f"created {p}")
    out += [f"deleted {p}" for p in sorted(set(before) - set(after))]
    out += [f"modified {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return out


def outside(places, since=None, leave=()) -> dict:
    """Path -> None for each folder, 0 or 1 for anything else, of all that is below `places` ("/": its own
    entries only) and not below one of `leave`; 1 for a file changed at or after `since` (seconds, as
    time.time(), against its mtime: a copy may keep an old one, but then its name is new).  Without `since`,
    names only, quickly.  Two of them compared with changes(): what a run created, deleted or changed."""
    leave = tuple(os.path.realpath(p).rstrip("/") + "/" for p in leave)
    since_ns = None if since is None else int(since * 1e9)
    seen = {}

    def look(folder, deep):
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:                      # gone, unreadable, or not a folder
            return
        for e in entries:
            if (e.path + "/").startswith(leave):
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    seen[e.path] = None
                    if deep:
                        look(e.path, True)
                else:
                    seen[e.path] = int(since_ns is not None and e.stat(follow_symlinks=False).st_mtime_ns >= since_ns)
            except OSError:                  # removed while we looked
                continue

    for place in places:
        place = os.path.realpath(place)
        look(place, place != "/")
    return seen
