"""What `ibwire health` reads of a capture: per RoCE packet the record fields its analysis uses, per PAUSE
and PFC frame its MAC control columns (opcode, class-enable vector, quanta), and the rare LLDP (0x88cc)
frames as bytes (dissectors.dcbfacts parses them).

One compiled pass per batch (`_native.health_rows`, native/health.c) decodes each packet as the decoder does,
into one record kept in the CPU's cache, and copies out of a RoCE packet only what health reads: its numbers
(times, sizes, classes, opcodes: a column each, in one block sized from the share of the file read so far, so
that each of the analysis' passes over all packets reads its field alone) and its QP key; any other packet
keeps its whole record, for the MAC control columns and LLDP frames.  The packets of a batch are grouped by
their ends and destination QP as they are read, so that the 40-byte key is kept once per QP group, not per
packet.
"""

from typing import List, NamedTuple

import numpy as np

from dissectors.numbers import (
    ETHERTYPE_LLDP,
    ETHERTYPE_MAC_CONTROL,
    ETHERTYPE_ROCE_V1,
    LINKTYPE_ERF,
    LINKTYPE_ETHERNET,
    MAD_HEADER_LEN,
    ROCE_V2_PORT,
)
from ibwire.decode import _native
from ibwire.decode import records as R
from ibwire.decode.batch import EXT_LEN, EXT_OFF, FIELD_OFF, KNOWN, MAD_QP_MAX, VCRC_TABLE, as_tshark_counts
from ibwire.files.walk import CaptureWalk

_COLUMNS, _KEY, _PRESETS = _native.health_layout()  # (name, bytes) of the compiled pass' outputs
FIELDS = ("frame", "link", "slid", "dlid", "src", "dst", "destqp")  # a packet's ends, QP and frame (Rows)
QP_KEY = tuple(f for f, _ in _KEY)  # a QP group: one direction of a QP (src, dst, slid, dlid, destqp)
# what the analysis reads of every packet: a column each (the link kind in both)
NUM_FIELDS = tuple(f for f, _ in _COLUMNS if f != "frame")
QUANTA = tuple(f"macc_pause_c{p}" for p in range(8))
PAUSE_FIELDS = ("frame", "time_ns", "eth_src", "macc_opcode", "macc_pause_time", "macc_enbv") + QUANTA
if any(R.RECORD.fields[f][0].itemsize != n for f, n in _COLUMNS + _KEY + _PRESETS):
    raise ImportError("ibwire.decode._native's health layout disagrees with ibwire.decode.records; rebuild it")


def _layout(fields):
    """(packed dtype of `fields`, their byte offsets and sizes in a RECORD) for _native.pick."""
    dt = np.dtype([(f, R.RECORD.fields[f][0]) for f in fields])  # packed: the fields one after another
    offsets = np.array([R.RECORD.fields[f][1] for f in fields], np.int64)
    return dt, offsets, np.array([R.RECORD.fields[f][0].itemsize for f in fields], np.int64)


QPK, _, _QP_SIZES = _layout(QP_KEY)  # a QP group's key
_QP_AT = np.array([QPK.fields[f][1] for f in QP_KEY], np.int64)  # (in a QPK row)
PAUSE, _PAUSE_OFFSETS, _PAUSE_SIZES = _layout(PAUSE_FIELDS)
_PRESET_OFF = np.array([R.RECORD.fields[f][1] for f, _ in _PRESETS], np.int64)
_COLUMN_TYPES = [(f, R.RECORD.fields[f][0]) for f, _ in _COLUMNS]
_ROW_BYTES = sum(n for _, n in _COLUMNS)
BATCH = 16384  # packets per decoded batch


class Rows:
    """The RoCE packets: per packet its frame, QP group and link kind (the NUMS column), per QP group its key
    (`groups`, found while reading: the group-by of every packet's 40-byte key is done batch by batch in the
    CPU's cache, and the key is not kept for every packet) and first row.  `rows[name]` is a column (the QP
    key's fields put together for every row: for tests), `rows[selection]` the selected rows,
    `rows.end_of(i, field)` one row's field of the QP key."""

    def __init__(self, frame: np.ndarray, qp: np.ndarray, link: np.ndarray, groups: np.ndarray, first: np.ndarray):
        self.frame, self.qp, self.link, self.groups, self.first = frame, qp, link, groups, first

    def __len__(self) -> int:
        return len(self.frame)

    def __getitem__(self, what):
        if isinstance(what, str):
            if what in ("frame", "qp", "link"):
                return getattr(self, what)
            return self.groups[what][self.qp]
        return Rows(self.frame[what], self.qp[what], self.link[what], self.groups, self.first)

    def end_of(self, i: int, field: str):
        return self.groups[field][self.qp[i]]


class Capture(NamedTuple):
    rows: Rows  # the RoCE packets
    nums: dict  # their NUM_FIELDS, a column each
    pauses: np.ndarray  # PAUSE rows of the MAC control frames (PAUSE, PFC, other opcodes)
    pause_iface: np.ndarray  # pcapng interface id of each of them (0 in a pcap file)
    lldp: List[tuple]  # (frame, seconds since the first packet, interface id, bytes) of the LLDP frames
    t0: int  # the first packet's time, ns
    problems: list


class _Rows:
    """The RoCE packets' columns, in one block with room for the whole file at the density of packets seen so
    far, and their QP groups: each batch's QP keys are grouped (compiled) in a reused array and their groups
    numbered across the file in order of first appearance."""

    def __init__(self):
        self.capacity, self.n = 0, 0
        self.block, self.qp = np.empty(0, np.uint8), np.empty(0, np.uint32)
        self.keys = np.empty(BATCH, QPK)  # a batch's QP keys: in the CPU's cache
        self.ids: dict = {}  # QP key (a tuple) -> its group's number
        self.groups: List[np.ndarray] = []  # each group's key, in order of their numbers
        self.first: List[int] = []  # each group's first row

    def room(self, m: int, walk: CaptureWalk) -> None:
        """Room for m more rows (untouched room costs no memory)."""
        if self.n + m <= self.capacity:
            return
        want = max(int((self.n + m) * walk.size / max(walk.bytes_done, 1) * 1.02) + BATCH, (self.n + m) * 5 // 4)
        try:
            block, qp = np.empty(want * _ROW_BYTES, np.uint8), np.empty(want, np.uint32)
        except MemoryError:  # a file whose start is denser than the rest: more than may be reserved
            want = (self.n + m) * 2
            block, qp = np.empty(want * _ROW_BYTES, np.uint8), np.empty(want, np.uint32)
        old = self.columns()
        self.block, self.capacity = block, want
        for f, col in self.columns().items():
            col[:] = old[f]
        qp[: self.n] = self.qp[: self.n]
        self.qp = qp

    def columns(self) -> dict:
        """Column name -> its first n rows (views of the block)."""
        out, at = {}, 0
        for f, dt in _COLUMN_TYPES:
            out[f] = self.block[at * self.capacity : at * self.capacity + self.n * dt.itemsize].view(dt)
            at += dt.itemsize
        return out

    def add(self, kept: int) -> None:
        """The batch's kept rows (their keys in self.keys) numbered by QP group."""
        if kept:
            self.qp[self.n : self.n + kept] = self._numbered(self.keys[:kept])
        self.n += kept

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

    def table(self) -> Rows:
        groups = np.concatenate(self.groups) if self.groups else np.empty(0, QPK)
        cols = self.columns()
        return Rows(cols["frame"], self.qp[: self.n], cols["link"], groups, np.array(self.first, np.int64))


def _iface(pos, rows: np.ndarray) -> np.ndarray:
    return np.zeros(len(rows), np.int64) if pos.iface is None else np.asarray(pos.iface)[rows]


def _times_and_lengths(buf, pos):
    """Each packet's time (ns) and length as the records count them: ERF records without their header and
    with their own time (decode.batch.as_tshark_counts)."""
    ns, length = pos.ns, pos.wirelen
    if (pos.linktype == LINKTYPE_ERF).any():
        ns = np.zeros(len(length), np.int64) if ns is None else ns.copy()
        length = length.copy()
        as_tshark_counts(buf, pos, {"caplen": pos.caplen.copy(), "len": length, "time_ns": ns, "time": pos.time.copy()})
    return ns, length


def _decoded(buf, pos, icrc: bool, rows: _Rows, rest: np.ndarray, rest_rows: np.ndarray):
    """The batch at `pos` through the compiled pass: its RoCE packets' columns into `rows` (their QP keys into
    rows.keys), the others' records into `rest`; (RoCE packets, other packets, times in ns or None)."""
    i64 = np.int64
    ns, length = _times_and_lengths(buf, pos)
    kept, others = _native.health_rows(
        buf=buf,
        data=np.ascontiguousarray(pos.data, i64),
        caplen=np.ascontiguousarray(pos.caplen, i64),
        wirelen=np.ascontiguousarray(pos.wirelen, i64),
        linktype=np.ascontiguousarray(pos.linktype, i64),
        frame=np.ascontiguousarray(pos.frame, i64),
        time_ns=None if ns is None else np.ascontiguousarray(ns, i64),
        len=np.ascontiguousarray(length, i64),
        ext_off=EXT_OFF,
        ext_len=EXT_LEN,
        known=KNOWN,
        vtable=VCRC_TABLE,
        field_off=FIELD_OFF,
        preset_off=_PRESET_OFF,
        record_size=R.RECORD.itemsize,
        cols=rows.block,
        capacity=rows.capacity,
        at=rows.n,
        keys=rows.keys,
        rest=rest,
        rest_rows=rest_rows,
        roce2_port=ROCE_V2_PORT,
        roce1_ethertype=ETHERTYPE_ROCE_V1,
        mad_qp_max=MAD_QP_MAX,
        mad_header_len=MAD_HEADER_LEN,
        icrc=icrc,
    )
    return kept, others, ns


def read(path: str, icrc: bool = False) -> Capture:
    """The RoCE rows, MAC control rows and LLDP frames of a capture (Ethernet frames only carry the latter)."""
    walk = CaptureWalk(path, BATCH)
    rest, rest_rows = np.empty(BATCH, R.RECORD), np.empty(BATCH, np.int64)
    rows, pauses, ifaces, lldp, t0 = _Rows(), [], [], [], None
    for pos in walk.batches():
        if not len(pos.data):
            continue
        rows.room(len(pos.data), walk)
        kept, others, ns = _decoded(walk.buf, pos, icrc, rows, rest, rest_rows)
        t0 = (0 if ns is None else int(ns[0])) if t0 is None else t0
        rows.add(kept)
        if not others:
            continue
        rec, at = rest[:others], rest_rows[:others]
        et = rec["etype"]
        few = np.flatnonzero((et == ETHERTYPE_MAC_CONTROL) | (et == ETHERTYPE_LLDP))  # one pass for both
        eth = rec["linktype"][few] == LINKTYPE_ETHERNET
        ctl = few[(et[few] == ETHERTYPE_MAC_CONTROL) & eth]
        if len(ctl):  # the MAC control columns of these rows
            pauses.append(np.empty(len(ctl), PAUSE))
            _native.pick(rec, R.RECORD.itemsize, ctl, _PAUSE_OFFSETS, _PAUSE_SIZES, pauses[-1])
            ifaces.append(_iface(pos, at[ctl]))
        for i in few[(et[few] == ETHERTYPE_LLDP) & eth].tolist():
            j = int(at[i])  # (its place in the batch)
            data = bytes(walk.buf[int(pos.data[j]) : int(pos.data[j]) + int(pos.caplen[j])])
            lldp.append((int(rec["frame"][i]), (int(rec["time_ns"][i]) - t0) / 1e9, int(_iface(pos, [j])[0]), data))
    table = rows.table()
    return Capture(
        table,
        {f: col for f, col in rows.columns().items() if f != "frame"},
        np.concatenate(pauses) if pauses else np.empty(0, PAUSE),
        np.concatenate(ifaces) if ifaces else np.zeros(0, np.int64),
        lldp,
        t0 or 0,
        walk.problems,
    )
