"""The rows `ibwire health` reads: the compiled field picker equals numpy's per-field copies, refuses what
lies outside its records, and the reader keeps every RoCE packet of a capture with the frame numbers the
full records give, and every PAUSE/PFC frame's MAC control columns."""

from pathlib import Path

import numpy as np
import pytest

from dissectors.numbers import ETHERTYPE_LLDP, ETHERTYPE_MAC_CONTROL
from ibwire.analyze.healthrows import FIELDS, KEEP, NUM_FIELDS, PAUSE_FIELDS, read
from ibwire.decode import _native
from ibwire.decode import records as R
from ibwire.decode.scan import scan

ROOT = Path(__file__).resolve().parents[1]
OFFSETS = np.array([R.RECORD.fields[f][1] for f in FIELDS], np.int64)
SIZES = np.array([R.RECORD.fields[f][0].itemsize for f in FIELDS], np.int64)


def _records(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    rec = np.zeros(n, R.RECORD)
    rec.view(np.uint8)[:] = rng.integers(0, 256, n * R.RECORD.itemsize, dtype=np.uint8)
    return rec


@pytest.mark.parametrize("every", [True, False])
def test_pick_equals_numpy_copies(every):
    rec = _records(1000)
    rows = None if every else np.flatnonzero(rec["flags"] & 1)
    want = np.empty(len(rec) if every else len(rows), KEEP)
    for f in FIELDS:
        want[f] = rec[f] if every else rec[f][rows]
    got = np.empty(len(want), KEEP)
    _native.pick(rec, R.RECORD.itemsize, rows, OFFSETS, SIZES, got)
    assert got.tobytes() == want.tobytes()


def test_pick_refuses_outside():
    rec = _records(10)
    out = np.empty(10, KEEP)
    with pytest.raises(ValueError, match="out of range"):
        _native.pick(rec, R.RECORD.itemsize, np.array([0, 10], np.int64), OFFSETS, SIZES, out)
    with pytest.raises(ValueError, match="shorter"):
        _native.pick(rec, R.RECORD.itemsize, None, OFFSETS, SIZES, out[:9])
    with pytest.raises(ValueError, match="outside the record"):
        _native.pick(rec, R.RECORD.itemsize, None, OFFSETS + R.RECORD.itemsize, SIZES, out)


@pytest.mark.parametrize("name", ["pfc-storm.pcap", "congestion.pcap", "roce-v6-vlan.pcap"])
def test_read_keeps_every_roce_packet(name):
    path = str(ROOT / "captures" / name)
    cap = read(path)
    rec = np.concatenate(list(scan(path, icrc=False)))
    roce = rec[(rec["flags"] & R.F_BTH) > 0]
    assert len(cap.rows) == len(roce) and cap.t0 == int(rec["time_ns"][0])
    for f in FIELDS:
        assert np.array_equal(cap.rows[f], roce[f]), f
    for f in NUM_FIELDS:
        assert np.array_equal(cap.nums[f], roce[f]), f
    macc = rec[rec["etype"] == ETHERTYPE_MAC_CONTROL]  # PAUSE and PFC: their columns, picked
    assert len(cap.pauses) == len(macc) and not cap.pause_iface.any()
    for f in PAUSE_FIELDS:
        assert np.array_equal(cap.pauses[f], macc[f]), f
    assert [c[0] for c in cap.lldp] == [int(x) for x in rec["frame"][rec["etype"] == ETHERTYPE_LLDP]]
