import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
PUBLIC = ROOT.parent / "shared" / "captures" / "public"

import litter  # noqa: E402  (tests/litter.py)

# Caches that would otherwise land in the repository go to one scratch folder for the run: Python's
# bytecode (here and in every subprocess) and hypothesis' example database.
SCRATCH = tempfile.mkdtemp(prefix="ibwire-tests-")
os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = os.path.join(SCRATCH, "pycache")
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = os.path.join(SCRATCH, "hypothesis")
BEFORE = pytest.StashKey[dict]()     # the repository as the run found it


def pytest_sessionstart(session):
    session.config.stash[BEFORE] = litter.snapshot(ROOT)


def pytest_sessionfinish(session, exitstatus):
    """Tests write only into temporary folders: anything the run created, changed or removed in the
    repository (ignored files included) fails the run and is listed."""
    shutil.rmtree(SCRATCH, ignore_errors=True)
    before = session.config.stash.get(BEFORE, None)
    if before is None:
        return
    found = litter.changes(before, litter.snapshot(ROOT))
    if found:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "the test run wrote into the repository (tests must write only into tmp_path):\n  " + \
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
