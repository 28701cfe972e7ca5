"""PFC and PAUSE facts as per-frame columns: the compiled records hold each MAC control frame's opcode, its
PAUSE quanta, its PFC class-enable vector and eight pause times, equal to the full decode; `ibwire export`
writes them as the Parquet columns macc_opcode, macc_pause_time, macc_cbfc_enbv and
macc_cbfc_pause_time_c0…c7, equal to tshark 4.0's `-T fields` frame by frame (null where tshark shows
nothing) on captures/pfc-storm.pcap and on the PAUSE/PFC/LLDP frames tests/test_dcb_tshark.py crafts."""

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import run_ibwire
from scapy.utils import wrpcap
from test_dcb_tshark import _frames
from test_fast_vs_decode import MACC_FIELDS, _mismatches

ROOT = Path(__file__).resolve().parents[1]
KEYS = list(MACC_FIELDS.values())


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    path = tmp_path_factory.mktemp("pfc") / "dcb.pcap"
    wrpcap(str(path), _frames())
    return path


def _tsharks(tshark, path) -> list:
    """Per frame, {key: value or None} as tshark -T fields prints it (hex fields as their numbers)."""
    args = [a for k in KEYS for a in ("-e", k)]
    out = subprocess.run([tshark, "-r", str(path), "-T", "fields", *args], capture_output=True, text=True, check=True)
    rows = []
    for line in out.stdout.splitlines():
        values = line.split("\t")
        rows.append({k: int(v, 0) if v else None for k, v in zip(KEYS, values)})
    return rows


def _ours(path, tmp_path) -> list:
    out = tmp_path / "frames.parquet"
    run_ibwire("export", path, "-o", out, check=True)
    table = pq.read_table(out, columns=[k.replace(".", "_") for k in KEYS])
    return [dict(zip(KEYS, row.values())) for row in table.to_pylist()]


@pytest.mark.parametrize("which", ["pfc-storm", "crafted"])
def test_parquet_columns_are_tsharks_fields(which, crafted, tshark, tmp_path):
    path = ROOT / "captures" / "pfc-storm.pcap" if which == "pfc-storm" else crafted
    theirs, ours = _tsharks(tshark, path), _ours(path, tmp_path)
    assert len(ours) == len(theirs)
    diffs = [(n, o, t) for n, (o, t) in enumerate(zip(ours, theirs), 1) if o != t]
    assert not diffs, f"{len(diffs)} frames differ, first (frame, ibwire, tshark): {diffs[:3]}"
    pfc = [t for t in theirs if t["macc.cbfc.enbv"] is not None]
    assert pfc and any(t["macc.cbfc.pause_time.c3"] for t in pfc)  # XOFFs with quanta, not only zeros
    if which == "crafted":  # 802.3x PAUSE and the PFC frames in VLAN tags are among them
        assert sum(t["macc.pause_time"] is not None for t in theirs) == 24 and len(pfc) == 24
    else:
        assert len(pfc) == 1107 and len(theirs) > len(pfc)  # and RoCE and LLDP frames, null in these columns


def test_records_equal_the_full_decode_on_crafted_frames(crafted):
    bad = _mismatches(crafted)
    assert not bad, f"{len(bad)} differences, first: {bad[:10]}"
