"""`ibwire decode -Y` skips, without parsing them, the frames the bulk records show cannot match: the
frames it prints are exactly those a decode-everything-then-filter pass selects, on every public and
shipped capture, for filters over every kind of field the bulk path can pre-evaluate."""
import csv
import io
import itertools
from pathlib import Path

import pytest

from conftest import run_ibwire
from ibwire.cli.decode import _candidates
from ibwire.decode import decode_frame
from ibwire.filter import compile_filter
from ibwire.readers import iter_frames
from tshark_oracle import PUBLIC

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = sorted(PUBLIC.glob("*.pcap")) + sorted((ROOT / "captures").glob("*.pcap"))
FILTERS = [
    "bth.opcode in {4 17 100}", "!(bth.psn > 100)", "reth.dmalen > 0 && bth.a == 1", "aeth",
    "lrh.dlid == 3 || lrh.slid == 1", "icrc.status == bad", "frame.number >= 3 && bth.se == 1",
    "deth.q_key == 0x80010000", "bth.p_key == 0xffff && !atomiceth", "bth.destqp == 1 || bth.destqp == 0",
    "immdt || ieth", "xrceth.xrcsrq > 0", "not bth", "frame.len > 300 && bth.padcnt != 0",
]


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_matching_frame_is_kept(path):
    """The frames kept for parsing include every frame the filter matches on the fully decoded capture."""
    frames = list(iter_frames(str(path)))
    flats = [decode_frame(f).flat for f in frames]
    for text in FILTERS:
        keep = compile_filter(text)
        want = [f.number for f, flat in zip(frames, flats) if keep(flat)]
        kept = _candidates(str(path), keep)
        assert kept is not None, f"{text} should be pre-evaluated"
        kept = set(itertools.islice(kept, len(frames) + 1))
        assert set(want) <= kept, (text, sorted(set(want) - kept)[:5])


def test_skipping_is_real_and_output_unchanged(tmp_path):
    """On a capture of many conversations, a filter on one QP parses a small share of the frames, and
    the command prints exactly the matching frames."""
    path = ROOT / "captures" / "loss-retransmit.pcap"
    text = "bth.destqp == 0x000c02 && bth.opcode == 17"
    frames = list(iter_frames(str(path)))
    keep = compile_filter(text)
    want = [f.number for f in frames if keep(decode_frame(f).flat)]
    kept = list(itertools.islice(_candidates(str(path), keep), len(frames) + 1))
    assert want and len(kept) < len(frames) / 2
    r = run_ibwire("decode", path, "-Y", text, "-T", "csv", "-e", "frame.number")
    assert r.returncode == 0, r.stderr
    assert [int(row[0]) for row in list(csv.reader(io.StringIO(r.stdout)))[1:]] == want


def test_filters_the_records_cannot_evaluate_decode_everything():
    for text in ("ip.src == 10.0.0.1", "mad.method == 0x81", "bth.opname contains WRITE"):
        assert _candidates(str(ROOT / "captures" / "atomics.pcap"), compile_filter(text)) is None
