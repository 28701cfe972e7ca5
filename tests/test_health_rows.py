"""The rows `ibwire health` reads: the compiled field picker equals numpy's per-field copies, refuses what
lies outside its records; the reader (the compiled health_rows pass) keeps every RoCE packet of a capture
with the fields the full records give (RoCEv2 over IPv4 and IPv6 with VLANs, native InfiniBand, MADs, CM,
IPoIB), and every PAUSE/PFC frame's MAC control columns; health_rows refuses buffers that do not fit."""

from pathlib import Path

import numpy as np
import pytest

from dissectors.numbers import ETHERTYPE_LLDP, ETHERTYPE_MAC_CONTROL, ETHERTYPE_ROCE_V1, MAD_HEADER_LEN, ROCE_V2_PORT
from ibwire.analyze.healthrows import FIELDS, NUM_FIELDS, PAUSE_FIELDS, read
from ibwire.decode import _native
from ibwire.decode import records as R
from ibwire.decode.batch import EXT_LEN, EXT_OFF, FIELD_OFF, KNOWN, VCRC_TABLE
from ibwire.decode.scan import scan

ROOT = Path(__file__).resolve().parents[1]
OFFSETS = np.array([R.RECORD.fields[f][1] for f in FIELDS], np.int64)
SIZES = np.array([R.RECORD.fields[f][0].itemsize for f in FIELDS], np.int64)
KEEP = np.dtype([(f, R.RECORD.fields[f][0]) for f in FIELDS])  # the fields packed


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


@pytest.mark.parametrize(
    "name",
    ["pfc-storm.pcap", "congestion.pcap", "roce-v6-vlan.pcap", "congestion-ib.pcap", "sm-sweep.pcap", "ud-ipoib.pcap"]
    + ["rxe-rdma-cm.pcap", "multitenant-breach.pcap"],
)
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


def test_health_rows_refuses_what_does_not_fit():
    """The compiled pass checks its buffers as decode() does: a packet outside the bytes, a block without
    room for the batch, outputs shorter than it, a record layout reaching past the record."""
    buf, one = np.zeros(100, np.uint8), np.ones(1, np.int64)
    ok = dict(buf=buf, data=one * 10, caplen=one * 60, wirelen=one * 60, linktype=one, frame=one, time_ns=None)
    ok |= dict(len=one * 60, ext_off=EXT_OFF, ext_len=EXT_LEN, known=KNOWN, vtable=VCRC_TABLE, field_off=FIELD_OFF)
    ok |= dict(preset_off=np.zeros(4, np.int64), record_size=R.RECORD.itemsize, cols=np.zeros(34, np.uint8))
    ok |= dict(capacity=1, at=0, keys=np.zeros(40, np.uint8), rest=np.zeros(1, R.RECORD))
    ok |= dict(rest_rows=np.zeros(1, np.int64), roce2_port=ROCE_V2_PORT, roce1_ethertype=ETHERTYPE_ROCE_V1)
    ok |= dict(mad_qp_max=1, mad_header_len=MAD_HEADER_LEN, icrc=False)
    assert _native.health_rows(**ok) == (0, 1)  # an empty Ethernet frame: not RoCE, its record set aside
    for bad, match in [
        (dict(caplen=one * 91), "outside buf"),
        (dict(at=1), "no room"),
        (dict(cols=np.zeros(33, np.uint8)), "no room"),
        (dict(keys=np.zeros(39, np.uint8)), "shorter"),
        (dict(record_size=100), "outside the record"),
        (dict(preset_off=np.full(4, R.RECORD.itemsize, np.int64)), "outside the record"),
        (dict(frame=np.ones(2, np.int64)), "same length"),
    ]:
        with pytest.raises(ValueError, match=match):
            _native.health_rows(**(ok | bad))
