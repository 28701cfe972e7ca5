"""What `ibwire health` reads of a capture: per RoCE packet the record fields its analysis uses, per PAUSE
and PFC frame its MAC control columns (opcode, class-enable vector, quanta), and the rare LLDP (0x88cc)
frames as bytes (dissectors.dcbfacts parses them).

The compiled decoder fills one reused batch of records; their RoCE rows' fields are picked (compiled) into
one array sized from the share of the file read so far: no per-batch allocation, no final concatenation.
"""

from typing import List, NamedTuple

import numpy as np

from dissectors.numbers import ETHERTYPE_LLDP, ETHERTYPE_MAC_CONTROL, LINKTYPE_ETHERNET
from ibwire.decode import _native
from ibwire.decode import records as R
from ibwire.decode.batch import decode_batch
from ibwire.files.walk import CaptureWalk

FIELDS = (
    "frame",
    "time_ns",
    "len",
    "link",
    "flags",
    "vlan",
    "pcp",
    "dscp",
    "ecn",
    "fecn",
    "slid",
    "dlid",
    "src",
    "dst",
    "udp_src",
    "opcode",
    "destqp",
    "psn",
    "mad_class",
)
QUANTA = tuple(f"macc_pause_c{p}" for p in range(8))
PAUSE_FIELDS = ("frame", "time_ns", "eth_src", "macc_opcode", "macc_pause_time", "macc_enbv") + QUANTA


def _layout(fields):
    """(packed dtype of `fields`, their byte offsets and sizes in a RECORD) for _native.pick."""
    dt = np.dtype([(f, R.RECORD.fields[f][0]) for f in fields])  # packed: the fields one after another
    offsets = np.array([R.RECORD.fields[f][1] for f in fields], np.int64)
    return dt, offsets, np.array([R.RECORD.fields[f][0].itemsize for f in fields], np.int64)


KEEP, _OFFSETS, _SIZES = _layout(FIELDS)
PAUSE, _PAUSE_OFFSETS, _PAUSE_SIZES = _layout(PAUSE_FIELDS)
BATCH = 16384  # packets per decoded batch


class Capture(NamedTuple):
    rows: np.ndarray  # KEEP rows of the RoCE packets
    pauses: np.ndarray  # PAUSE rows of the MAC control frames (PAUSE, PFC, other opcodes)
    pause_iface: np.ndarray  # pcapng interface id of each of them (0 in a pcap file)
    lldp: List[tuple]  # (frame, seconds since the first packet, interface id, bytes) of the LLDP frames
    t0: int  # the first packet's time, ns
    problems: list


class _Rows:
    """A growing array of KEEP rows; room is taken for the whole file at the density of RoCE rows seen so far."""

    def __init__(self):
        self.a, self.n = np.empty(0, KEEP), 0

    def add(self, rec: np.ndarray, sel: np.ndarray, walk: CaptureWalk) -> None:
        m = len(sel)
        if self.n + m > len(self.a):  # untouched room costs no memory
            want = int((self.n + m) * walk.size / max(walk.bytes_done, 1) * 1.02) + BATCH
            try:
                grown = np.empty(max(want, (self.n + m) * 5 // 4), KEEP)
            except MemoryError:  # a file whose start is denser than the rest: more than may be reserved
                grown = np.empty((self.n + m) * 2, KEEP)
            grown[: self.n] = self.a[: self.n]
            self.a = grown
        # compiled, each record read once: numpy's copies of 19 fields walk the batch 19 times
        _native.pick(rec, R.RECORD.itemsize, None if m == len(rec) else sel, _OFFSETS, _SIZES, self.a[self.n :])
        self.n += m


def _iface(pos, rows: np.ndarray) -> np.ndarray:
    return np.zeros(len(rows), np.int64) if pos.iface is None else np.asarray(pos.iface)[rows]


def read(path: str, icrc: bool = False) -> Capture:
    """The RoCE rows, MAC control rows and LLDP frames of a capture (Ethernet frames only carry the latter)."""
    walk = CaptureWalk(path, BATCH)
    store = np.empty(BATCH, R.RECORD)
    rows, pauses, ifaces, lldp, t0 = _Rows(), [], [], [], None
    for pos in walk.batches():
        rec = decode_batch(walk.buf, pos, icrc, out=store)
        if not len(rec):
            continue
        t0 = int(rec["time_ns"][0]) if t0 is None else t0
        et, eth = rec["etype"], rec["linktype"] == LINKTYPE_ETHERNET
        ctl = np.flatnonzero((et == ETHERTYPE_MAC_CONTROL) & eth)
        if len(ctl):  # the MAC control columns of these rows, picked as the RoCE rows are
            pauses.append(np.empty(len(ctl), PAUSE))
            _native.pick(rec, R.RECORD.itemsize, ctl, _PAUSE_OFFSETS, _PAUSE_SIZES, pauses[-1])
            ifaces.append(_iface(pos, ctl))
        for i in np.flatnonzero((et == ETHERTYPE_LLDP) & eth).tolist():
            at = int(pos.data[i])
            data = bytes(walk.buf[at : at + int(pos.caplen[i])])
            lldp.append((int(rec["frame"][i]), (int(rec["time_ns"][i]) - t0) / 1e9, int(_iface(pos, [i])[0]), data))
        rows.add(rec, np.flatnonzero(rec["flags"] & R.F_BTH), walk)
    return Capture(
        rows.a[: rows.n],
        np.concatenate(pauses) if pauses else np.empty(0, PAUSE),
        np.concatenate(ifaces) if ifaces else np.zeros(0, np.int64),
        lldp,
        t0 or 0,
        walk.problems,
    )
