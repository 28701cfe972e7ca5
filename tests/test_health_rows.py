"""The rows `ibwire health` reads: the compiled field picker equals numpy's per-field copies, refuses what
lies outside its records; the reader (the compiled health_rows pass) keeps every RoCE packet of a capture
with the fields the full records give (RoCEv2 over IPv4 and IPv6 with VLANs, native InfiniBand, MADs, CM,
IPoIB), and every PAUSE/PFC frame's MAC control columns; health_rows refuses buffers that do not fit."""

import random
import struct
from pathlib import Path

import numpy as np
import pytest

from dissectors.numbers import (
    ETHERTYPE_LLDP,
    ETHERTYPE_MAC_CONTROL,
    ETHERTYPE_ROCE_V1,
    LINKTYPE_ETHERNET,
    MAD_HEADER_LEN,
    ROCE_V2_PORT,
)
from ibwire.analyze.healthrows import FIELDS, NUM_FIELDS, PAUSE_FIELDS, read
from ibwire.decode import _native
from ibwire.decode import records as R
from ibwire.decode.batch import EXT_LEN, EXT_OFF, FIELD_OFF, KNOWN, VCRC_TABLE
from ibwire.decode.scan import scan
from ibwire.files.writers import PcapWriter

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
    _same_as_records(str(ROOT / "captures" / name))


def _same_as_records(path: str) -> None:
    """read(path) keeps the RoCE packets, MAC control frames and LLDP frames of the full records."""
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


def _packets(path: Path) -> list:
    data, at, out = path.read_bytes(), 24, []
    while at + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, at + 8)[0]
        out.append(data[at + 16 : at + 16 + caplen])
        at += 16 + caplen
    return out


def _mutant(raw: bytearray, rng: random.Random) -> bytearray:
    """A RoCEv2 packet (Ethernet, a VLAN tag or none, IPv4 or IPv6) with one to three header fields changed:
    ethertype, an added tag, IP version, header length, fragment field, protocol or next header, UDP port
    or length, opcode, pad count, classes, VLAN priority."""
    l3 = 18 if raw[12:14] == b"\x81\x00" else 14
    v4 = raw[l3 - 2 : l3] == b"\x08\x00"
    u = l3 + (20 if v4 else 40)
    b = u + 8
    raw += bytes(max(0, b + 2 - len(raw)))  # (room for the BTH's first bytes)
    u16 = [0, 1, 24, 28, 32, 36, 40, 44, 0x0800, 0x86DD, 0x8100, 0x88A8, 0x9100, 0x8915, 0x8808, ROCE_V2_PORT]
    if rng.random() < 0.5:  # an RC opcode (the IPv6 seeds are UD SENDs)
        raw[b] = rng.choice((4, 6, 7, 8, 10, 12, 13, 16, 17, 129))
    for _ in range(rng.randint(1, 3)):
        what = rng.randrange(11)
        if what == 0:  # an ethertype: the outer one or after the tag
            raw[rng.choice((12, l3 - 2)) :][:2] = rng.choice(u16).to_bytes(2, "big")
        elif what == 1:  # one more tag
            raw[12:12] = rng.choice((0x8100, 0x88A8, 0x9100)).to_bytes(2, "big") + bytes([rng.randrange(256), 7])
            return raw
        elif what == 2:  # IP version and header length
            raw[l3] = rng.choice((4, 5, 6)) << 4 | rng.choice((4, 5, 6, 15))
        elif what == 3 and v4:  # fragment field
            raw[l3 + 6 : l3 + 8] = rng.choice((0x4000, 0x2000, 1, 0x8000, 0x3FFF)).to_bytes(2, "big")
        elif what == 4:  # protocol / next header
            raw[l3 + (9 if v4 else 6)] = rng.choice((17, 6, 0))
        elif what in (5, 6):  # a UDP port
            raw[u + 2 * (what - 5) : u + 2 * (what - 4)] = rng.choice(u16 + [ROCE_V2_PORT] * 4).to_bytes(2, "big")
        elif what == 7:  # UDP length
            n = rng.choice((rng.randrange(20, 49), rng.randrange(80), rng.randrange(65536)))
            raw[u + 4 : u + 6] = n.to_bytes(2, "big")
        elif what == 8:  # any opcode (SEND First and Only, UD SEND, CNP, undefined ones)
            raw[b] = rng.randrange(256)
        elif what == 9:  # pad count and transport version
            raw[b + 1] = rng.randrange(256)
        else:  # classes and VLAN priority
            raw[rng.choice((l3, l3 + 1, 14))] = rng.randrange(256)
    return raw


def test_read_equals_the_records_on_damaged_roce_packets(tmp_path):
    """The pass reads the common RoCEv2 packet itself (health.c, roce2_direct), the rest through the decoder:
    on 8,000 mutants of RoCEv2 packets over IPv4 and IPv6, tagged and not (_mutant), a third of them cut
    short, it keeps the packets the full records count as RoCE, with their fields."""
    rng = random.Random(7)
    tagged = [p for name in ("pfc-storm.pcap", "roce-v6-vlan.pcap") for p in _packets(ROOT / "captures" / name)]
    seeds = [p for p in tagged + [p[:12] + p[16:] for p in tagged] if p[12:14] != b"\x88\x08"]  # (not PFC)
    path = tmp_path / "mutants.pcap"
    with PcapWriter(str(path), LINKTYPE_ETHERNET) as w:
        for k in range(8000):
            raw = _mutant(bytearray(rng.choice(seeds)), rng) if rng.random() < 0.9 else bytearray(rng.choice(seeds))
            cut = len(raw) if rng.random() < 0.67 else rng.randrange(len(raw) + 1)
            w.write(bytes(raw[:cut]), 1.7e9 + k * 0.0137, len(raw), flush=False)  # (no zero bytes after it)
    _same_as_records(str(path))


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
