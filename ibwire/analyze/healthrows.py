"""What `ibwire health` reads of a capture: per RoCE packet the record fields its analysis uses, per PAUSE
and PFC frame its MAC control columns (opcode, class-enable vector, quanta), and the rare LLDP (0x88cc)
frames as bytes (dissectors.dcbfacts parses them).

The compiled decoder fills one reused batch of records; their RoCE rows' fields are picked (compiled) into
arrays sized from the share of the file read so far: no per-batch allocation, no final concatenation.  The
fields are kept in two arrays of narrow rows: the packet's ends, QP and frame (the group-bys' keys), and
the numbers the analysis reads for every packet (times, sizes, classes, opcodes), which are then turned into
a column per field, so that each of its passes over all packets reads its field alone.
"""

from typing import List, NamedTuple

import numpy as np

from dissectors.numbers import ETHERTYPE_LLDP, ETHERTYPE_MAC_CONTROL, LINKTYPE_ETHERNET
from ibwire.decode import _native
from ibwire.decode import records as R
from ibwire.decode.batch import decode_batch
from ibwire.files.walk import CaptureWalk

FIELDS = ("frame", "link", "slid", "dlid", "src", "dst", "destqp")  # ends, QP, frame: KEEP rows
# what the analysis reads of every packet: NUMS rows (the link kind in both)
NUM_FIELDS = (
    "time_ns",
    "len",
    "psn",
    "vlan",
    "udp_src",
    "opcode",
    "flags",
    "pcp",
    "dscp",
    "ecn",
    "fecn",
    "link",
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
NUMS, _NUM_OFFSETS, _NUM_SIZES = _layout(NUM_FIELDS)
_NUM_AT = np.array([NUMS.fields[f][1] for f in NUM_FIELDS], np.int64)  # byte offsets in a NUMS row
PAUSE, _PAUSE_OFFSETS, _PAUSE_SIZES = _layout(PAUSE_FIELDS)
BATCH = 16384  # packets per decoded batch


class Capture(NamedTuple):
    rows: np.ndarray  # KEEP rows of the RoCE packets
    nums: dict  # their NUMS fields, a column each
    pauses: np.ndarray  # PAUSE rows of the MAC control frames (PAUSE, PFC, other opcodes)
    pause_iface: np.ndarray  # pcapng interface id of each of them (0 in a pcap file)
    lldp: List[tuple]  # (frame, seconds since the first packet, interface id, bytes) of the LLDP frames
    t0: int  # the first packet's time, ns
    problems: list


class _Rows:
    """Growing arrays of KEEP and NUMS rows; room is taken for the whole file at the density of RoCE rows
    seen so far."""

    LAYOUTS = ((KEEP, _OFFSETS, _SIZES), (NUMS, _NUM_OFFSETS, _NUM_SIZES))

    def __init__(self):
        self.a, self.n = [np.empty(0, dt) for dt, _, _ in self.LAYOUTS], 0

    def add(self, rec: np.ndarray, sel: np.ndarray, walk: CaptureWalk) -> None:
        m = len(sel)
        if self.n + m > len(self.a[0]):  # untouched room costs no memory
            want = int((self.n + m) * walk.size / max(walk.bytes_done, 1) * 1.02) + BATCH
            try:
                self.a = [self._grown(a, max(want, (self.n + m) * 5 // 4)) for a in self.a]
            except MemoryError:  # a file whose start is denser than the rest: more than may be reserved
                self.a = [self._grown(a, (self.n + m) * 2) for a in self.a]
        # compiled, each record read once per array: numpy's copies of the fields walk the batch once each
        for a, (_, offsets, sizes) in zip(self.a, self.LAYOUTS):
            _native.pick(rec, R.RECORD.itemsize, None if m == len(rec) else sel, offsets, sizes, a[self.n :])
        self.n += m

    def _grown(self, a: np.ndarray, size: int) -> np.ndarray:
        grown = np.empty(size, a.dtype)
        grown[: self.n] = a[: self.n]
        return grown


def _columns(nums: np.ndarray) -> dict:
    """NUMS field -> its column (one compiled pass): each of the analysis' passes over all packets then reads
    its field alone, not every row's 30 bytes (the analysis of the bench's million packets 84 -> 65 ms)."""
    block = np.empty(len(nums) * NUMS.itemsize, np.uint8)
    _native.columns(nums, NUMS.itemsize, _NUM_AT, _NUM_SIZES, block)
    n, at = len(nums), _NUM_AT.tolist()
    return {f: block[n * a : n * (a + NUMS[f].itemsize)].view(NUMS[f]) for f, a in zip(NUM_FIELDS, at)}


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
        rows.a[0][: rows.n],
        _columns(rows.a[1][: rows.n]),
        np.concatenate(pauses) if pauses else np.empty(0, PAUSE),
        np.concatenate(ifaces) if ifaces else np.zeros(0, np.int64),
        lldp,
        t0 or 0,
        walk.problems,
    )
