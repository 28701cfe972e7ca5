"""Peak memory stays flat as captures grow: `stats` and `flows` on 50k and 200k packets of the same
traffic use about the same resident memory (the per-conversation state does not grow)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from gen_roce import generate  # noqa: E402

# VmHWM is the peak of this process's own memory map.  getrusage's ru_maxrss would not do: Linux carries
# it across exec from the forking parent, here the test runner, which can be larger than the command.
MEASURE = """
import sys
from ibwire.cli import main
sys.argv = ["ibwire", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print("MAXRSS", int(hwm.split()[1]) // 1024, file=sys.stderr)
"""


def peak_mb(*args):
    r = subprocess.run([sys.executable, "-c", MEASURE, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return int(r.stderr.strip().splitlines()[-1].split()[1])


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    d = tmp_path_factory.mktemp("mem")
    small, big = d / "50k.pcap", d / "200k.pcap"
    generate(str(small), 50_000)
    generate(str(big), 200_000)
    return small, big


@pytest.mark.parametrize("command", ["stats", "flows"])
def test_peak_memory_is_flat(captures, command):
    small, big = captures
    a = peak_mb(command, small, "--format", "json")
    b = peak_mb(command, big, "--format", "json")
    assert b < 200, f"{command} peaked at {b} MB on 200k packets"
    assert b - a < 20, f"{command}: {a} MB at 50k packets but {b} MB at 200k"
