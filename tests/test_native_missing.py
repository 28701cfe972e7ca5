"""Without its compiled part (a source checkout never built, a wheel for another Python), every bulk
command says in one sentence how to rebuild, instead of a traceback."""

import subprocess
import sys
from pathlib import Path

CAPS = Path(__file__).resolve().parents[1] / "captures"

RUN_WITHOUT_NATIVE = """
import sys
sys.modules["ibwire.decode._native"] = None       # stands in for a missing extension module
from ibwire.cli import main
sys.argv = ["ibwire", *sys.argv[1:]]
main()
"""


def test_missing_compiled_part_simulated_gives_one_sentence():
    for args in (
        ["stats", CAPS / "atomics.pcap"],
        ["flows", CAPS / "atomics.pcap"],
        ["export", CAPS / "atomics.pcap", "-o", "/dev/null"],
    ):
        r = subprocess.run(
            [sys.executable, "-c", RUN_WITHOUT_NATIVE, *map(str, args)], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 2, r.stderr
        assert "Traceback" not in r.stderr and "pip install -e ." in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
