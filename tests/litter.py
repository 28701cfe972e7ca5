"""What a test run wrote into the repository: a snapshot of every file and folder below the root (also the
ones .gitignore hides, so an ignored tree such as umad2sim's ./sys-PID still counts), compared after."""
import os
from pathlib import Path

SKIP = {".git", ".venv"}       # git's own store and the developer's virtualenv (pip writes there)


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
