"""tshark (or ibwire) run once per test run for each capture and arguments.  The output is kept in the run's
scratch folder (conftest points TMPDIR there; every pytest-xdist worker shares it and the run removes it at its
end), keyed by the program, the capture (its path and bytes) and the arguments.  Several tests ask the same
question of the same capture (`-n -V` of every capture, for instance): the first to ask runs the program,
under a lock, and the others read what it wrote."""

import fcntl
import hashlib
import os
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def version(tshark: str) -> str:
    """The first line of `tshark --version` (`TShark (Wireshark) 4.0.17 …`)."""
    return subprocess.run([tshark, "--version"], capture_output=True, text=True, check=True).stdout.split("\n")[0]


def once(which: str, capture, args, run) -> str:
    """`run()`'s text, program `which` (tshark's version, the tree tshark runs in, or "ibwire") on `capture` with
    `args`, or this test run's earlier one for the same program, capture path and bytes, and arguments.  Only a run that
    returns is kept."""
    key = hashlib.sha256()
    for part in (which, str(Path(capture).resolve()), *map(str, args)):
        key.update(part.encode() + b"\0")
    key.update(hashlib.sha256(Path(capture).read_bytes()).digest())
    folder = Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / "tshark-runs"  # conftest: the scratch folder
    folder.mkdir(exist_ok=True)
    out = folder / key.hexdigest()
    with open(f"{out}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            with open(out, newline="") as f:
                return f.read()
        text = run()
        part = out.with_suffix(".part")
        with open(part, "w", newline="") as f:
            f.write(text)
        os.replace(part, out)
        return text
