"""Several `ibwire` runs in one Python process, for tests about what a run prints rather than how the command
starts: the CLI's own main() with each run's arguments, its standard output a file of its own, so ibwire's
start (imports, about 0.3 s of CPU a run) is paid once instead of once a run."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = r"""
import json, os, sys
from ibwire.cli import main

for out, args in json.loads(sys.argv[1]):
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    saved = os.dup(1)
    os.dup2(fd, 1)
    os.close(fd)
    sys.argv = ["ibwire", *args]
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    sys.stdout.flush()
    os.dup2(saved, 1)
    os.close(saved)
    with open(out + ".status", "w") as f:
        f.write(str(code))
"""


def ibwire_runs(runs) -> list:
    """The standard output (text) of each run (a list of `ibwire` arguments), one after the other in one
    process; a run that does not exit 0 fails the test, naming its arguments."""
    with tempfile.TemporaryDirectory() as folder:
        jobs = [(str(Path(folder) / str(i)), [str(a) for a in args]) for i, args in enumerate(runs)]
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, json.dumps(jobs)], capture_output=True, text=True, cwd=ROOT, timeout=1200
        )
        assert done.returncode == 0, done.stderr[-2000:]
        out = []
        for path, args in jobs:
            status = Path(path + ".status").read_text()
            assert status == "0", (args, status, done.stderr[-2000:])
            out.append(Path(path).read_text())
        return out
