import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
PUBLIC = ROOT.parent / "shared" / "captures" / "public"

import litter  # noqa: E402  (tests/litter.py)

# Everything a test run writes outside tmp_path goes below one scratch folder, removed at the end: Python's
# bytecode (here and in every subprocess), hypothesis' example database, and the run's own home: HOME, the
# XDG folders and TMPDIR point there, so what a tool keeps in the home folder (pip's cache, Chromium's
# profile and crash reports, dconf, scapy's caches, `ibwire capture extcap --install`) lands there too.
# The user's pip settings (an index mirror, say) are read from where they are; they are only read.
SCRATCH = tempfile.mkdtemp(prefix="ibwire-tests-")
REAL_HOME = os.path.expanduser("~")
START = time.time()          # a file outside the scratch folder changed since was changed by the run
for conf in (os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(REAL_HOME, ".config"), "pip", "pip.conf"),
             os.path.join(REAL_HOME, ".pip", "pip.conf")):
    if os.path.isfile(conf):
        os.environ.setdefault("PIP_CONFIG_FILE", conf)
HOME = os.path.join(SCRATCH, "home")
os.environ.update(HOME=HOME, XDG_CONFIG_HOME=os.path.join(HOME, ".config"),
                  XDG_CACHE_HOME=os.path.join(HOME, ".cache"), XDG_DATA_HOME=os.path.join(HOME, ".local", "share"),
                  XDG_STATE_HOME=os.path.join(HOME, ".local", "state"), TMPDIR=os.path.join(SCRATCH, "tmp"))
for d in (HOME, os.environ["TMPDIR"]):
    os.makedirs(d)
os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = os.path.join(SCRATCH, "pycache")
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = os.path.join(SCRATCH, "hypothesis")
BEFORE = pytest.StashKey[dict]()     # the repository as the run found it
OUTSIDE = pytest.StashKey[dict]()    # the names in the home folder and litter.OUTSIDE as the run found them


def outside(since=None):
    return litter.outside([REAL_HOME, *litter.OUTSIDE], since,
                          leave=[ROOT, SCRATCH, tempfile.gettempdir(), *litter.SYSTEM])


def pytest_sessionstart(session):
    session.config.stash[BEFORE] = litter.snapshot(ROOT)
    session.config.stash[OUTSIDE] = outside()


def pytest_sessionfinish(session, exitstatus):
    """Tests write only into temporary folders: anything the run created, changed or removed in the
    repository (ignored files included), in the home folder or in the places of litter.OUTSIDE fails the
    run and is listed."""
    shutil.rmtree(SCRATCH, ignore_errors=True)
    before = session.config.stash.get(BEFORE, None)
    if before is None:
        return
    found = [f"{c} (in the repository)" for c in litter.changes(before, litter.snapshot(ROOT))]
    found += litter.changes(session.config.stash[OUTSIDE], outside(START))
    if found:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "the test run wrote outside temporary folders (tests must write only into tmp_path):\n  " + \
            "\n  ".join(found[:40]) + (f"\n  ... and {len(found) - 40} more" if len(found) > 40 else "")
        if tr:
            tr.write("\n")
            tr.write_line(text, red=True, bold=True)
        else:
            print(text, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def public_dir():
    assert PUBLIC.is_dir(), f"the public captures are expected at {PUBLIC} (../shared beside the repo)"
    return PUBLIC


@pytest.fixture(scope="session")
def tshark():
    path = shutil.which("tshark")
    assert path, "tshark is required (apt-get install tshark; ./dev test installs it)"
    return path


def run_ibwire(*args, check=False, input=None, timeout=300):
    """Run the installed CLI as a user would; returns the CompletedProcess."""
    exe = shutil.which("ibwire", path=str(Path(sys.executable).parent)) or "ibwire"
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, check=check,
                          input=input, timeout=timeout)
