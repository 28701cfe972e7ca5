import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
PUBLIC = ROOT.parent / "shared" / "captures" / "public"


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
