"""What `ibwire health` reads of a capture: per RoCE packet the record fields its analysis uses, per PAUSE
and PFC frame its MAC control columns (opcode, class-enable vector, quanta), and the rare LLDP (0x88cc)
frames as bytes (dissectors.dcbfacts parses them).

The compiled decoder fills one reused batch of records; their RoCE rows' fields are picked (compiled) into
arrays sized from the share of the file read so far: no per-batch allocation, no final concatenation.  The
fields are kept narrow: per packet its frame, link kind and QP group (the packets of a batch grouped by
their ends and destination QP as they are read, so that the 40-byte key is kept once per QP group, not per
packet), and the numbers the analysis reads for every packet (times, sizes, classes, opcodes), turned into a
column per field once read, so that each of its passes over all packets reads its field alone.
"""

from typing import List, NamedTuple

import numpy as np

from dissectors.numbers import ETHERTYPE_LLDP, ETHERTYPE_MAC_CONTROL, LINKTYPE_ETHERNET
from ibwire.decode import _native
from ibwire.decode import records as R
from ibwire.decode.batch import decode_batch
from ibwire.files.walk import CaptureWalk

FIELDS = ("frame", "link", "slid", "dlid", "src", "dst", "destqp")  # ends, QP, frame: KEEP rows
QP_KEY = ("src", "dst", "slid", "dlid", "destqp")  # a QP group: one direction of a QP
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


KEEP = _layout(FIELDS)[0]  # what Rows gives of a packet
QPK, _QP_OFFSETS, _QP_SIZES = _layout(QP_KEY)  # a QP group's key
_QP_AT = np.array([QPK.fields[f][1] for f in QP_KEY], np.int64)  # (in a QPK row)
# a packet: its frame and QP group (picked with the frame in the group's place, then numbered)
ROW = np.dtype([("frame", KEEP["frame"]), ("qp", np.uint32)])
_ROW_OFFSETS = np.array([R.RECORD.fields["frame"][1]] * 2, np.int64)
_ROW_SIZES = np.array([ROW[f].itemsize for f in ROW.names], np.int64)
NUMS, _NUM_OFFSETS, _NUM_SIZES = _layout(NUM_FIELDS)
_NUM_AT = np.array([NUMS.fields[f][1] for f in NUM_FIELDS], np.int64)  # byte offsets in a NUMS row
PAUSE, _PAUSE_OFFSETS, _PAUSE_SIZES = _layout(PAUSE_FIELDS)
BATCH = 16384  # packets per decoded batch


class Rows:
    """The RoCE packets as a table of KEEP fields: per packet its frame and QP group (ROW) and link kind (the
    NUMS column), per QP group its key (`groups`, found while reading: the group-by of every packet's 40-byte
    key is done batch by batch in the CPU's cache, and the key is not kept for every packet) and first row.
    `rows[name]` is a column (the QP key's fields put together for every row: for tests), `rows[selection]`
    the selected rows, `rows.end_of(i, field)` one row's field of the QP key."""

    def __init__(self, keep: np.ndarray, link: np.ndarray, groups: np.ndarray, first: np.ndarray):
        self.keep, self.link, self.groups, self.first = keep, link, groups, first

    def __len__(self) -> int:
        return len(self.keep)

    def __getitem__(self, what):
        if isinstance(what, str):
            if what == "link":
                return self.link
            return self.keep[what] if what in ROW.names else self.groups[what][self.keep["qp"]]
        return Rows(self.keep[what], self.link[what], self.groups, self.first)

    def end_of(self, i: int, field: str):
        return self.groups[field][self.keep["qp"][i]]


class Capture(NamedTuple):
    rows: Rows  # the RoCE packets
    nums: dict  # their NUMS fields, a column each
    pauses: np.ndarray  # PAUSE rows of the MAC control frames (PAUSE, PFC, other opcodes)
    pause_iface: np.ndarray  # pcapng interface id of each of them (0 in a pcap file)
    lldp: List[tuple]  # (frame, seconds since the first packet, interface id, bytes) of the LLDP frames
    t0: int  # the first packet's time, ns
    problems: list


class _Rows:
    """Growing arrays of ROW and NUMS rows; room is taken for the whole file at the density of RoCE rows seen
    so far.  Each batch's QP keys are picked into a reused array, grouped there (compiled) and their groups
    numbered across the file in order of first appearance."""

    def __init__(self):
        self.a, self.n = [np.empty(0, ROW), np.empty(0, NUMS)], 0
        self._keys = np.empty(BATCH, QPK)  # a batch's QP keys: in the CPU's cache
        self.ids: dict = {}  # QP key (a tuple) -> its group's number
        self.groups: List[np.ndarray] = []  # each group's key, in order of their numbers
        self.first: List[int] = []  # each group's first row

    def add(self, rec: np.ndarray, sel: np.ndarray, walk: CaptureWalk) -> None:
        m = len(sel)
        if self.n + m > len(self.a[0]):  # untouched room costs no memory
            want = int((self.n + m) * walk.size / max(walk.bytes_done, 1) * 1.02) + BATCH
            try:
                self.a = [self._grown(a, max(want, (self.n + m) * 5 // 4)) for a in self.a]
            except MemoryError:  # a file whose start is denser than the rest: more than may be reserved
                self.a = [self._grown(a, (self.n + m) * 2) for a in self.a]
        # compiled, each record read once per array: numpy's copies of the fields walk the batch once each
        rows = None if m == len(rec) else sel
        keys = self._keys[:m]
        _native.pick(rec, R.RECORD.itemsize, rows, _ROW_OFFSETS, _ROW_SIZES, self.a[0][self.n :])
        _native.pick(rec, R.RECORD.itemsize, rows, _QP_OFFSETS, _QP_SIZES, keys)
        _native.pick(rec, R.RECORD.itemsize, rows, _NUM_OFFSETS, _NUM_SIZES, self.a[1][self.n :])
        if m:
            self.a[0]["qp"][self.n : self.n + m] = self._numbered(keys)
        self.n += m

    def _numbered(self, keys: np.ndarray) -> np.ndarray:
        """The QP group number of each of a batch's QP keys, new groups numbered in order of appearance."""
        m = len(keys)
        inverse, first, hashes = np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.uint64)
        g = _native.group(keys, QPK.itemsize, None, _QP_AT, _QP_SIZES, inverse, first, hashes)
        heads = keys[first[:g]]
        ids, fresh = np.empty(g, np.uint32), []
        for k, key in enumerate(heads.tolist()):
            n = self.ids.get(key)
            if n is None:
                n = self.ids[key] = len(self.ids)
                fresh.append(k)
            ids[k] = n
        if fresh:
            self.groups.append(heads[fresh])
            self.first += (first[fresh] + self.n).tolist()
        return ids[inverse]

    def table(self, link: np.ndarray) -> Rows:
        groups = np.concatenate(self.groups) if self.groups else np.empty(0, QPK)
        return Rows(self.a[0][: self.n], link, groups, np.array(self.first, np.int64))

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
        et = rec["etype"]
        few = np.flatnonzero((et == ETHERTYPE_MAC_CONTROL) | (et == ETHERTYPE_LLDP))  # one pass for both
        eth = rec["linktype"][few] == LINKTYPE_ETHERNET
        ctl = few[(et[few] == ETHERTYPE_MAC_CONTROL) & eth]
        if len(ctl):  # the MAC control columns of these rows, picked as the RoCE rows are
            pauses.append(np.empty(len(ctl), PAUSE))
            _native.pick(rec, R.RECORD.itemsize, ctl, _PAUSE_OFFSETS, _PAUSE_SIZES, pauses[-1])
            ifaces.append(_iface(pos, ctl))
        for i in few[(et[few] == ETHERTYPE_LLDP) & eth].tolist():
            at = int(pos.data[i])
            data = bytes(walk.buf[at : at + int(pos.caplen[i])])
            lldp.append((int(rec["frame"][i]), (int(rec["time_ns"][i]) - t0) / 1e9, int(_iface(pos, [i])[0]), data))
        rows.add(rec, np.flatnonzero(rec["flags"] & R.F_BTH), walk)
    nums = _columns(rows.a[1][: rows.n])
    return Capture(
        rows.table(nums["link"]),
        nums,
        np.concatenate(pauses) if pauses else np.empty(0, PAUSE),
        np.concatenate(ifaces) if ifaces else np.zeros(0, np.int64),
        lldp,
        t0 or 0,
        walk.problems,
    )
