"""Large pcap files are cut at record boundaries and decoded by several processes: the statistics are
exactly those of one sequential pass, and damage near a cut neither crashes nor goes unreported."""
import sys
from pathlib import Path

import numpy as np
import pytest

from ibwire.analysis.stats import compute_file
from ibwire.fast import split
from ibwire.fast.walk import CaptureWalk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from gen_roce import generate  # noqa: E402


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    p = tmp_path_factory.mktemp("par") / "100k.pcap"
    generate(str(p), 100_000)
    assert p.stat().st_size > split.MIN_SPLIT
    return p


def test_cuts_are_record_boundaries(big):
    w = CaptureWalk(str(big))
    starts = set(np.concatenate([p.data - 16 + w.base for p in w.batches()]).tolist())
    cuts = split.spans(str(big), 3)
    assert cuts and cuts[0][0] == 24 and cuts[-1][1] == big.stat().st_size
    assert all(a in starts for a, _ in cuts)


def test_parallel_equals_sequential(big):
    assert compute_file(str(big), workers=2) == compute_file(str(big), workers=1)


def test_damage_near_a_cut_is_reported(big, tmp_path):
    data = bytearray(big.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 4096] = b"\xff" * 4096           # garbage where the second process starts
    p = tmp_path / "damaged.pcap"
    p.write_bytes(bytes(data))
    par, seq = compute_file(str(p), workers=2), compute_file(str(p), workers=1)
    for res in (par, seq):
        assert res["problems"] or res["counters"].get("malformed") or res["counters"].get("icrc_bad")
        assert 0 < res["summary"]["packets"] <= 100_000
