"""What `ibwire health` reads of a capture: per RoCE packet the record fields its analysis uses, and the rare
MAC control (0x8808) and LLDP (0x88cc) frames as bytes (dissectors.dcbfacts parses them).

The compiled decoder fills one reused batch of records; their RoCE rows' fields are picked (compiled) into
one array sized from the share of the file read so far: no per-batch allocation, no final concatenation.
"""

from typing import List, Tuple

import numpy as np

from dissectors.numbers import ETHERTYPE_LLDP, ETHERTYPE_MAC_CONTROL

from ..fast import _native
from ..fast import records as R
from ..fast.decode import decode_batch
from ..fast.walk import CaptureWalk

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
KEEP = np.dtype([(f, R.RECORD.fields[f][0]) for f in FIELDS])  # packed: the fields one after another
_OFFSETS = np.array([R.RECORD.fields[f][1] for f in FIELDS], np.int64)
_SIZES = np.array([R.RECORD.fields[f][0].itemsize for f in FIELDS], np.int64)
BATCH = 16384  # packets per decoded batch


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


def read(path: str, icrc: bool = False) -> Tuple[np.ndarray, List[tuple], int, list]:
    """(RoCE packet rows of KEEP, [(frame, seconds since the first packet, bytes)] of MAC control and LLDP
    frames, the first packet's time in ns, problems)."""
    walk = CaptureWalk(path, BATCH)
    store = np.empty(BATCH, R.RECORD)
    rows, control, t0 = _Rows(), [], None
    for pos in walk.batches():
        rec = decode_batch(walk.buf, pos, icrc, out=store)
        if not len(rec):
            continue
        t0 = int(rec["time_ns"][0]) if t0 is None else t0
        et = rec["etype"]
        ctl = np.flatnonzero(((et == ETHERTYPE_MAC_CONTROL) | (et == ETHERTYPE_LLDP)) & (rec["linktype"] == 1))
        for i in ctl.tolist():
            at = int(pos.data[i])
            data = bytes(walk.buf[at : at + int(pos.caplen[i])])
            control.append((int(rec["frame"][i]), (int(rec["time_ns"][i]) - t0) / 1e9, data))
        rows.add(rec, np.flatnonzero(rec["flags"] & R.F_BTH), walk)
    return rows.a[: rows.n], control, t0 or 0, walk.problems
