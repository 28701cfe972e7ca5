"""Large pcap files are cut at record boundaries and decoded by several processes: the statistics are
exactly those of one sequential pass, and damage near a cut neither crashes nor goes unreported."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ibwire.analyze.stats import compute_file
from ibwire.files import iter_frames, split
from ibwire.files.walk import CaptureWalk
from ibwire.files.writers import PcapngWriter

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
    data[mid : mid + 4096] = b"\xff" * 4096  # garbage where the second process starts
    p = tmp_path / "damaged.pcap"
    p.write_bytes(bytes(data))
    par, seq = compute_file(str(p), workers=2), compute_file(str(p), workers=1)
    for res in (par, seq):
        assert res["problems"] or res["counters"].get("malformed") or res["counters"].get("icrc_bad")
        assert 0 < res["summary"]["packets"] <= 100_000


@pytest.fixture(scope="module")
def big_ng(big, tmp_path_factory):
    """The same packets as pcapng, as Wireshark's editcap writes it (one section, interface up front)."""
    p = tmp_path_factory.mktemp("parng") / "100k.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(big), str(p)], check=True, capture_output=True)
    return p


def test_pcapng_cuts_are_packet_blocks(big_ng):
    w = CaptureWalk(str(big_ng))
    blocks = set(np.concatenate([p.data - 28 + w.base for p in w.batches()]).tolist())
    cuts = split.spans(str(big_ng), 3)
    assert cuts and cuts[-1][1] == big_ng.stat().st_size
    assert all(a in blocks for a, _ in cuts)


def test_pcapng_parallel_equals_sequential(big_ng, big):
    par = compute_file(str(big_ng), workers=2)
    assert par == compute_file(str(big_ng), workers=1)
    assert par["counters"] == compute_file(str(big), workers=1)["counters"]


def test_pcapng_section_after_packets_is_read_in_one_piece(big, tmp_path):
    """A small section, then a big one (as `cat a.pcapng b.pcapng` makes) bringing other interfaces and a
    nanosecond clock: the span that starts inside the second section cannot know them, so the file is
    read in one piece instead, every packet counted with its own interface's link type and clock."""
    first = tmp_path / "first.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", "-r", str(big), str(first), "1-10000"], check=True, capture_output=True)
    second = tmp_path / "second.pcapng"
    w = PcapngWriter(str(second))
    w.add_interface(247, "ib0")  # the packets below use interface 1, not 0
    eth = w.add_interface(1, "eth1")
    for f in iter_frames(str(big)):
        w.write(f.data, f.time + 3600, eth, flush=False)
    w.close()
    p = tmp_path / "two-sections.pcapng"
    p.write_bytes(first.read_bytes() + second.read_bytes())
    cuts = split.spans(str(p), 2)
    assert cuts and cuts[1][0] > first.stat().st_size  # the second process starts in section two
    par = compute_file(str(p), workers=2)
    assert par == compute_file(str(p), workers=1)
    assert par["summary"]["packets"] == 110_000 and not par["problems"]
    assert par["counters"]["icrc_good"] == 110_000
    assert 3600 < par["summary"]["duration_s"] < 3602
