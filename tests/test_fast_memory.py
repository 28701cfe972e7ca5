"""Peak memory stays flat as captures grow: `stats`, `flows`, `export` and `audit` on 90k and 180k packets of
the same traffic (both over files.split.MIN_SPLIT, so both are read the same way, in parallel where a
command splits large files) use about the same resident memory (the per-conversation state does not grow, and the
detail reader the audit uses streams the file instead of loading it)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from gen_roce import generate  # noqa: E402

from ibwire.files.split import MIN_SPLIT  # noqa: E402

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
    small, big = d / "90k.pcap", d / "180k.pcap"
    generate(str(small), 90_000)
    generate(str(big), 180_000)
    assert small.stat().st_size > MIN_SPLIT
    return small, big


CAPS = ROOT / "captures"
EXTRA = {
    "stats": ("--format", "json"),
    "flows": ("--format", "json"),
    "export": ("-o", "{out}"),
    "audit": (
        "--policy",
        CAPS / "roce-multitenant-clean.partitions.conf",
        "--tenants",
        CAPS / "roce-multitenant-clean.tenants.toml",
        "--format",
        "json",
    ),
}


@pytest.mark.parametrize("command", list(EXTRA))
def test_peak_memory_is_flat(captures, command, tmp_path):
    small, big = captures
    args = [str(x).format(out=tmp_path / "out.parquet") for x in EXTRA[command]]
    a = peak_mb(command, small, *args)
    b = peak_mb(command, big, *args)
    assert b < 200, f"{command} peaked at {b} MB on 180k packets"
    assert b - a < 20, f"{command}: {a} MB at 90k packets but {b} MB at 180k"
