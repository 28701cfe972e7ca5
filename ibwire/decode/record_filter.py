"""Display filters (ibwire.decode.filter's language and semantics) evaluated on whole record batches with numpy.

A record answers a field only where it is sure to agree with the full decode: frame fields always; the
Ethernet addresses of every Ethernet frame; everything else on sound data frames (RoCEv1/v2 or native
IB, not malformed, truncated or found by the port heuristic).  `BatchFilter(rec)` returns the mask and the
rows it is sure of; the others go to the detail decoder (`select`).  A filter naming a field the records
do not hold raises NotBatchable.
"""

import ipaddress
from typing import Callable, Optional

import numpy as np

from dissectors.numbers import ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCE_V1, LINKTYPE_ERF
from dissectors.opcodes import HEADER_LEN, OPCODES
from ibwire.decode import records as R
from ibwire.decode.fieldtypes import BYTES, EITHER, FLOAT, IPV4, IPV6, MAC, STRING, UINT
from ibwire.decode.filter import (
    ALL_EQ,
    ALL_NE,
    ANY_EQ,
    ANY_NE,
    CONTAINS,
    IN,
    MATCHES,
    ORDERED,
    BitAnd,
    Field,
    Filter,
    Length,
    Logic,
    Range,
    Slice,
    compare,
    compile_filter,
    take_slice,
)
from ibwire.errors import UserError


class NotBatchable(Exception):
    """The filter names a field (or uses an operator on it) that the records cannot answer."""


ERF = LINKTYPE_ERF
DATA = (R.ROCE1, R.ROCE2V4, R.ROCE2V6, R.IB, R.IBGRH)
_CARRIED = {h: np.array([c in OPCODES and h in OPCODES[c].headers for c in range(256)]) for h in HEADER_LEN}
_ETHERTYPE = np.zeros(len(R.LINK_KINDS), np.int64)
_ETHERTYPE[[R.ROCE1, R.ROCE2V4, R.ROCE2V6]] = (ETHERTYPE_ROCE_V1, ETHERTYPE_IPV4, ETHERTYPE_IPV6)


class Ctx:
    """Per-batch masks every column shares (computed once per batch)."""

    def __init__(self, rec: np.ndarray, t0: float, prev: float, frames=None):
        self.rec, self.n, self.frames = rec, len(rec), frames
        link, flags = rec["link"], rec["flags"]
        self.data = np.isin(link, DATA)
        self.sound = self.data & ((flags & (R.F_MALFORMED | R.F_TRUNCATED | R.F_HEURISTIC)) == 0)
        self.eth = rec["linktype"] == 1
        self.bth = (flags & R.F_BTH) > 0
        self.mad = (flags & R.F_MAD) > 0
        native = np.isin(link, (R.IB, R.IBGRH))
        # IB frames with a payload other than a MAD may carry IPoIB: IP-level fields need the full decode
        self.encap_sure = self.sound & ~(native & (rec["paylen"] > 0) & ~self.mad)
        self.all = np.ones(self.n, bool)
        self.t0, self.prev = t0, prev


def _words(col: np.ndarray) -> np.ndarray:
    """Fixed-size byte columns as rows of big-endian uint64 words (6-byte MACs zero-padded to 8)."""
    b = np.ascontiguousarray(col).view(np.uint8).reshape(len(col), -1)
    if b.shape[1] % 8:
        b = np.concatenate([b, np.zeros((len(b), 8 - b.shape[1] % 8), np.uint8)], axis=1)
    return b.view(">u8").astype(np.uint64)


def _lit_words(value, size: int):
    """(words, mask words) of an address literal or network, laid out as _words lays out a column."""
    if isinstance(value, bytes):
        raw, bits = value, len(value) * 8
    else:
        net = value if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)) else None
        addr = net.network_address if net else value
        raw = addr.packed
        bits = net.prefixlen if net else len(raw) * 8
        if addr.version == 4 and size == 16:
            raw, bits = b"\0" * 10 + b"\xff\xff" + raw, bits + 96
    raw = raw + b"\0" * (-len(raw) % 8)
    maskbytes = (((1 << bits) - 1) << (len(raw) * 8 - bits)).to_bytes(len(raw), "big")
    return (np.frombuffer(raw, ">u8").astype(np.uint64), np.frombuffer(maskbytes, ">u8").astype(np.uint64))


class Column:
    """One occurrence of a field in a batch: present mask, values, and the rows whose answer is sure."""

    def __init__(self, present, values, sure, kind=UINT, names=None):
        self.present, self.values, self.sure, self.kind, self.names = present, values, sure, kind, names


def _u(rec, name):
    return rec[name].astype(np.int64)


def _columns(key: str, c: Ctx):
    """The occurrences of `key` in the batch (a list of Column), or raise NotBatchable."""
    if key in EITHER:
        return [col for k in EITHER[key] for col in _columns(k, c)]
    proto = key.split(".")[0]
    if proto in _BY_PROTO:
        return [_BY_PROTO[proto](key, c)]
    rec, sound = c.rec, c.sound
    if proto in ("icrc", "vcrc") and key.endswith(".status"):
        return [Column(c.all, _u(rec, proto), c.all | sound, STRING, R.CRC_STATUS)]
    if key == "link.kind":
        return [Column(c.all, _u(rec, "link"), c.all, STRING, R.LINK_KINDS)]
    if key == "bth.analysis" or key in R.ANALYSIS_FIELDS:
        return [_analysis(key, c)]
    if proto == "bth" or proto in _CARRIED:
        return [_header(key, proto, c.bth if proto == "bth" else c.bth & _CARRIED[proto][rec["opcode"]], c)]
    if key == "payload.len":
        return [Column(c.bth, _u(rec, "paylen"), sound)]
    raise NotBatchable(key)


def _header(key: str, proto: str, has: np.ndarray, c: Ctx) -> Column:
    """Header `proto` (present or not) or one of its record fields (records.KEY_FIELDS), in the rows `has`."""
    if key == proto:
        return Column(has, None, c.sound)
    col = R.KEY_FIELDS.get(key)
    if col is None:
        raise NotBatchable(key)
    return Column(has, _u(c.rec, col), c.sound)


def _frame(key: str, c: Ctx) -> Column:
    rec = c.rec
    if key == "frame":
        return Column(c.all, None, c.all)
    if key == "frame.time_relative":
        return Column(c.all, rec["time"] - c.t0, c.all, FLOAT)
    if key == "frame.time_delta":
        t = rec["time"]
        return Column(c.all, np.diff(t, prepend=c.prev if c.prev is not None else t[:1]), c.all, FLOAT)
    col = {
        "frame.number": "frame",
        "frame.len": "len",
        "frame.cap_len": "caplen",
        "frame.time_epoch": "time",
        "frame.linktype": "linktype",
    }.get(key)
    if col is None:
        raise NotBatchable(key)
    return Column(c.all, rec[col] if col == "time" else _u(rec, col), c.all, FLOAT if col == "time" else UINT)


def _eth(key: str, c: Ctx) -> Column:
    rec, sound = c.rec, c.sound
    full = c.eth & (rec["caplen"] >= 14)
    if key in ("eth", "eth.src", "eth.dst"):
        v = None if key == "eth" else _words(rec["eth_" + key[4:]])
        return Column(c.eth, v, full | (~c.eth & sound), MAC)
    if key == "eth.type":
        return Column(c.eth, _ETHERTYPE[rec["link"]], sound & (rec["vlan"] < 0) | ~c.eth & sound)
    raise NotBatchable(key)


def _vlan(key: str, c: Ctx) -> Column:
    rec = c.rec
    has = rec["vlan"] >= 0
    if key == "vlan":
        return Column(has, None, c.sound)
    if key == "vlan.id":
        return Column(has, rec["vlan"].astype(np.int64), c.sound)
    if key == "vlan.priority":
        return Column(has, _u(rec, "pcp"), c.sound)
    raise NotBatchable(key)


def _ip(key: str, c: Ctx) -> Column:
    """IPv4, IPv6 and UDP (RoCEv2's); ARP and ICMP are never in the records."""
    rec, sure, proto = c.rec, c.encap_sure, key.split(".")[0]
    v4, v6 = rec["link"] == R.ROCE2V4, rec["link"] == R.ROCE2V6
    has = {"ip": v4, "ipv6": v6, "udp": v4 | v6}.get(proto, np.zeros(c.n, bool))
    if key == proto:
        return Column(has, None, sure)
    ftype = IPV4 if proto == "ip" else IPV6
    if key in ("ip.src", "ip.dst", "ipv6.src", "ipv6.dst"):
        return Column(has, _words(rec[key.split(".")[1]]), sure, ftype)
    simple = {"ip.proto": 17, "ipv6.nxt": 17, "ip.version": 4}
    if key in simple:
        return Column(has, np.full(c.n, simple[key], np.int64), sure)
    if key in ("ip.dsfield.ecn", "ipv6.tclass.ecn"):
        return Column(has, _u(rec, "ecn"), sure)
    if key in ("ip.dsfield.dscp", "ipv6.tclass.dscp"):
        return Column(has, _u(rec, "dscp"), sure)
    if key in ("udp.srcport", "udp.dstport"):
        return Column(has, _u(rec, "udp_src" if key == "udp.srcport" else "udp_dst"), sure)
    raise NotBatchable(key)


def _grh(key: str, c: Ctx) -> Column:
    has = np.isin(c.rec["link"], (R.ROCE1, R.IBGRH))
    if key == "grh":
        return Column(has, None, c.sound)
    if key in ("grh.sgid", "grh.dgid"):
        return Column(has, _words(c.rec["src" if key == "grh.sgid" else "dst"]), c.sound, IPV6)
    raise NotBatchable(key)


def _lrh(key: str, c: Ctx) -> Column:
    return _header(key, "lrh", np.isin(c.rec["link"], (R.IB, R.IBGRH)), c)


def _mad(key: str, c: Ctx) -> Column:
    """MAD and CM (MAD class 7) headers."""
    proto = key.split(".")[0]
    return _header(key, proto, c.mad & (c.rec["mad_class"] == 7) if proto == "cm" else c.mad, c)


_BY_PROTO: dict = {
    "frame": _frame,
    "eth": _eth,
    "vlan": _vlan,
    **dict.fromkeys(("ip", "ipv6", "udp", "arp", "icmp"), _ip),
    "infiniband": lambda key, c: Column(c.data, None, c.sound),
    "grh": _grh,
    "lrh": _lrh,
    "mad": _mad,
    "cm": _mad,
}


def _analysis(key: str, c: Ctx) -> Column:
    """An RC analysis field (records.ANALYSIS): sure on every row, since the whole-capture pass made it."""
    rec = c.rec
    if key == "bth.analysis":
        return Column(np.logical_or.reduce([R.analysis_present(rec, col) for col in R.ANALYSIS]), None, c.all)
    col = R.ANALYSIS_FIELDS[key]
    kind = R.ANALYSIS[col][1]
    if kind == "span":
        return Column(R.analysis_present(rec, col), rec[col] / 1e9, c.all, FLOAT)
    if kind == "cause":
        return Column(R.analysis_present(rec, col), _u(rec, col), c.all, STRING, R.RETRY_CAUSES)
    return Column(R.analysis_present(rec, col), _u(rec, col), c.all)


def _compare(col: Column, op: str, want, ftype: str) -> np.ndarray:
    """Per row: does this occurrence satisfy `op want` (presence not included)?"""
    v = col.values
    if col.kind == BYTES:  # frame slices, one per row
        return np.array([compare(op, BYTES, [x], want) for x in v], bool)
    if col.kind == STRING:
        names = col.names
        if op in (ANY_EQ, ALL_EQ, IN):
            wants = want if op == IN else (want,)
            table = np.array([n in wants for n in names])
        elif op in (ALL_NE, ANY_NE):
            table = np.array([n != want for n in names])
        elif op == CONTAINS:
            table = np.array([want.decode() in n if isinstance(want, bytes) else want in n for n in names])
        elif op == MATCHES:
            table = np.array([want.search(n) is not None for n in names])
        else:
            table = np.array([ORDERED[op](n, want) for n in names])
        return table[v]
    if col.kind in (IPV4, IPV6, MAC):
        if op in (CONTAINS, MATCHES):
            raise NotBatchable(op)
        if op == IN:
            return np.logical_or.reduce([_compare(col, ANY_EQ, w, ftype) for w in want])
        size = 16 if col.kind in (IPV4, IPV6) else 6
        words, mask = _lit_words(want, size)
        eq = ((v & mask) == (words & mask)).all(axis=1)
        if op in (ANY_EQ, ALL_EQ):
            return eq
        if op in (ALL_NE, ANY_NE):
            return ~eq
        gt = np.zeros(len(v), bool)
        same = np.ones(len(v), bool)
        for i in range(v.shape[1]):
            gt |= same & (v[:, i] > words[i])
            same &= v[:, i] == words[i]
        return {">": gt, ">=": gt | same, "<": ~gt & ~same, "<=": ~gt}[op]
    if op in (CONTAINS, MATCHES):
        raise NotBatchable(op)
    if op == IN:
        out = np.zeros(len(v), bool)
        for w in want:
            out |= (v >= w.lo) & (v <= w.hi) if isinstance(w, Range) else _eq(v, w, col.kind)
        return out
    if op in (ANY_EQ, ALL_EQ):
        return _eq(v, want, col.kind)
    if op in (ALL_NE, ANY_NE):
        return ~_eq(v, want, col.kind)
    return ORDERED[op](v, want)


def _transformed(key: str, xform: tuple, c: Ctx) -> list:
    """The columns of `key` masked by `&` literals (`bth.opcode & 0xe0`); `len(frame)` is the captured
    length.  Slices and other len() need the frame's bytes: the full decode answers them."""
    not_erf = c.rec["linktype"] != ERF  # an ERF record's header is not frame (wiretap)
    if key == "frame" and isinstance(xform[0], Length):
        cols, xform = [Column(c.all, _u(c.rec, "caplen"), not_erf)], xform[1:]
    elif key == "frame" and isinstance(xform[0], Slice) and c.frames is not None:
        cut = [take_slice(c.frames(i), xform[0].ranges) if not_erf[i] else b"" for i in range(c.n)]
        cols, xform = [Column(c.all, np.array(cut + [None], object)[:-1], not_erf, BYTES)], xform[1:]
    else:
        cols = _columns(key, c)
    for x in xform:
        if not isinstance(x, BitAnd):
            raise NotBatchable(f"a slice or len() of {key}")
        if not isinstance(x.mask, int) or any(col.kind != UINT for col in cols):
            raise NotBatchable(f"'&' on {key} with this mask")
        cols = [Column(col.present, col.values & x.mask, col.sure, col.kind) for col in cols]
    return cols


def _eq(v, want, kind):
    return np.abs(v - want) < 1e-9 if kind == FLOAT else v == want


class BatchFilter:
    """A display filter over record batches: `(mask, sure) = bf(rec, t0, prev)`; rows not sure need the
    full decode.  Raises NotBatchable at construction when the records cannot answer it at all."""

    def __init__(self, flt: Filter, with_bytes: bool = False):
        self.filter = flt
        self.text = flt.text
        probe = np.zeros(1, R.RECORD)
        self(probe, frames=(lambda i: b"") if with_bytes else None)  # every field and operator must be answerable

    def __call__(self, rec: np.ndarray, t0: float = 0.0, prev: Optional[float] = None, frames=None):
        """`frames(i)`, where the caller has the batch's bytes, gives row i's frame for `frame[...]` slices."""
        c = Ctx(rec, t0, prev, frames)
        mask, sure = self._eval(self.filter.tree, c)
        return mask, sure

    def _eval(self, node, c: Ctx):
        if isinstance(node, Logic):
            parts = [self._eval(a, c) for a in node.args]
            sure = np.logical_and.reduce([s for _, s in parts])
            if node.kind == "not":
                return ~parts[0][0], sure
            red = np.logical_and if node.kind == "and" else np.logical_or
            return red.reduce([m for m, _ in parts]), sure
        cols = _transformed(node.field, node.xform, c) if node.xform else _columns(node.field, c)
        sure = np.logical_and.reduce([col.sure for col in cols])
        present = np.logical_or.reduce([col.present for col in cols])
        if node.op is None:
            if node.xform:  # `field & mask` alone: a bit left set; a slice: a byte taken
                return np.logical_or.reduce(
                    [
                        col.present
                        & (np.array([len(v) > 0 for v in col.values], bool) if col.kind == BYTES else col.values != 0)
                        for col in cols
                    ]
                ), sure
            return present, sure
        if isinstance(node.value, Field):
            raise NotBatchable("field comparison")
        hits = [col.present & _compare(col, node.op, node.value, node.type) for col in cols]
        if node.op == ALL_NE:  # every occurrence differs: no present occurrence equals
            eqs = [col.present & _compare(col, ANY_EQ, node.value, node.type) for col in cols]
            return present & ~np.logical_or.reduce(eqs), sure
        if node.op == ALL_EQ:
            bad = [col.present & ~_compare(col, ANY_EQ, node.value, node.type) for col in cols]
            return present & ~np.logical_or.reduce(bad), sure
        return np.logical_or.reduce(hits), sure


def batch_filter(flt: Filter, with_bytes: bool = False) -> Optional[BatchFilter]:
    """The batch form of a compiled filter, or None when only the full decode can evaluate it."""
    try:
        return BatchFilter(flt, with_bytes)
    except NotBatchable:
        return None


def names_analysis(text: str) -> bool:
    """Does the display filter name an RC analysis field (bth.analysis.*), which a whole-capture pass fills?"""
    return "bth.analysis" in text


def compile_batch_filter(text: str, fill: Callable = None) -> Callable[[np.ndarray], np.ndarray]:
    """For commands that read records only (stats, flows, export, audit): rec -> mask.  A filter the
    records cannot answer is a UserError naming the field.  `fill(rec)` completes the records first
    (the RC analysis columns)."""
    flt = compile_filter(text)
    try:
        bf = BatchFilter(flt)
    except NotBatchable as e:
        raise UserError(
            f"display filter: {e} needs the full decoder; this command filters on the fields the "
            f"compiled records hold (frame.*, eth/vlan/ip/ipv6/udp addresses and ports, lrh, grh, bth "
            f"and extended headers, the MAD common header); `ibwire decode -Y` takes every field"
        ) from None
    state = {"t0": None, "prev": None}

    def mask(rec: np.ndarray) -> np.ndarray:
        if fill is not None:
            fill(rec)
        if len(rec) and rec["frame"][0] == 1:  # a (new) pass over the file
            state["t0"], state["prev"] = float(rec["time"][0]), None
        m, _ = bf(rec, state["t0"] or 0.0, state["prev"])
        if len(rec):
            state["prev"] = float(rec["time"][-1])
        return m

    mask.text = text
    return mask


class FilteredScan:
    """A decode.scan.Scan whose batches hold only the records a display filter selects (same progress and problems)."""

    def __init__(self, scan, text: str):
        self.scan, self.mask = scan, compile_batch_filter(text)

    def __iter__(self):
        for rec in self.scan:
            yield rec[self.mask(rec)]

    def columns(self, rows: int, spare: list = None):
        """As Scan.columns: blocks of the selected records, at least `rows` in each but the last."""
        from ibwire.decode.columns import from_records
        from ibwire.decode.records import gathered

        return (from_records(rec) for rec in gathered(self, rows))

    def __getattr__(self, name):  # size, bytes_done, problems, walk ...
        return getattr(self.scan, name)
