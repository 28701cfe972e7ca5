"""The audit's packet stream: data packets in compiled groups, every other frame with its Wireshark-named fields.

`bulk_parts` reads a capture through the compiled records (ibwire.decode.stream): the data packets it
can vouch for are grouped per batch by their address fields and P_Key in one compiled hash-table pass
(analyze.hashing.group_rows) and handed over as one DataGroup each (packets, bytes, first evidence
frames), with no per-packet Python.  `audit_fields` is the careful per-frame reader, kept for files the
walk finds damaged (it follows the reader's resynchronisation).  In both, data packets get their few
fields (`bth.opcode`, `bth.p_key`, LRH LIDs and GRH GIDs, or MAC/IP/VLAN) from the records; the detail
decoder (decode_frame)
takes what the records cannot vouch for: management datagrams (UD to or from QP0/QP1, IBA §13.4),
frames without a BTH, damaged ones, RoCEv2 found by the port heuristic, link types and VLAN/GRH shapes
the scapy bindings may read otherwise, RoCEv1/RoCEv2-over-IPv6 SENDs that could carry IPoIB (whose
inner IP the decoder would report), and the rest of a file once its records and frames stop lining up.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Tuple

import numpy as np

from dissectors.numbers import (
    ETHERTYPE_QINQ,
    ETHERTYPE_QINQ_OLD,
    ETHERTYPE_VLAN,
    LINKTYPE_ERF,
    LINKTYPE_ETHERNET,
    LINKTYPE_INFINIBAND,
)
from dissectors.opcodes import GRH_NXTHDR_BTH, OPCODES
from ibwire.analyze.hashing import group_rows
from ibwire.audit.findings import EVIDENCE_FRAMES
from ibwire.decode import records as R
from ibwire.decode.scan import scan
from ibwire.files import Frame

_UD = np.zeros(256, bool)
_SEND_START = np.zeros(256, bool)  # SEND First/Only: may carry IPoIB (RFC 4391)
for _code, _op in OPCODES.items():
    _UD[_code] = _op.transport == "UD"
    _SEND_START[_code] = _op.op == "send" and _op.seg in ("only", "first")

_DOUBT = R.F_MALFORMED | R.F_TRUNCATED | R.F_MAD | R.F_HEURISTIC
_DATA_LINKS = (R.ROCE1, R.ROCE2V4, R.ROCE2V6, R.IB, R.IBGRH)
_ETH, _ERF, _IB = (
    LINKTYPE_ETHERNET,
    LINKTYPE_ERF,
    LINKTYPE_INFINIBAND,
)  # link types whose records the fast path and scapy read alike
_ERF_IB = 21  # ERF record type InfiniBand, no extension headers: LRH at 16
_TAGS = (b"\x81\x00", b"\x88\xa8", b"\x91\x00")


def _trusted(rec: np.ndarray) -> np.ndarray:
    """Rows whose audit fields the record gives exactly as decode_frame would (pending a byte check)."""
    fl, link, op = rec["flags"], rec["link"], rec["opcode"]
    ok = ((fl & R.F_BTH) > 0) & ((fl & _DOUBT) == 0) & np.isin(link, _DATA_LINKS)
    ok &= rec["destqp"] > 1
    ok &= ~(_UD[op] & (rec["deth_srcqp"] <= 1))
    ok &= ~(np.isin(link, (R.ROCE1, R.ROCE2V6)) & _SEND_START[op] & (rec["paylen"] >= 12))
    return ok


def _shape_ok(frame: Frame, link: int, vlan: int) -> bool:
    """Ethernet with no or one 802.1Q tag, IB or plain ERF InfiniBand; the GRH (if any) announces a BTH."""
    data = frame.data
    if frame.linktype in (_IB, _ERF):
        lrh = 0 if frame.linktype == _IB else 16
        if lrh and (len(data) < 16 or data[8] != _ERF_IB):
            return False
        return link != R.IBGRH or (len(data) > lrh + 14 and data[lrh + 14] == GRH_NXTHDR_BTH)
    if frame.linktype != _ETH:
        return False
    at, etype = 14, data[12:14]
    if etype == b"\x81\x00":
        at, etype = 18, data[16:18]
    if etype in _TAGS or (vlan >= 0) != (at == 18):
        return False
    return link != R.ROCE1 or (len(data) > at + 6 and data[at + 6] == GRH_NXTHDR_BTH)


def _ends(link, slid, dlid, src, dst, esrc, edst, vlan) -> dict:
    """The address fields of a data packet, as decode_frame names them."""
    if link in (R.IB, R.IBGRH):
        ends = {"lrh.slid": slid, "lrh.dlid": dlid}
        if link == R.IBGRH:
            ends["grh.sgid"], ends["grh.dgid"] = src, dst
        return ends
    ends = {"eth.src": R.mac_text(esrc), "eth.dst": R.mac_text(edst), "ip.src": src, "ip.dst": dst}
    if vlan >= 0:
        ends["vlan.id"] = vlan
    return ends


def audit_fields(cap, path: str) -> Iterator[Tuple[Frame, dict]]:
    """(frame, fields) for every frame of an open capture, in order."""
    from ibwire.decode import decode_frame

    frames = iter(cap)
    known = {}  # address fields -> their dict (a capture has few conversations)
    try:
        batches = iter(scan(path, icrc=False))
    except Exception:
        batches = iter(())
    while True:
        try:
            rec = next(batches)
        except StopIteration:
            break
        except Exception:  # the reader decides what is readable; decode the rest
            break
        trusted = _trusted(rec).tolist()
        cols = [
            rec[k].tolist()
            for k in (
                "frame",
                "caplen",
                "link",
                "opcode",
                "p_key",
                "slid",
                "dlid",
                "src",
                "dst",
                "eth_src",
                "eth_dst",
                "vlan",
            )
        ]
        for row, ok in zip(zip(*cols), trusted):
            frame = next(frames, None)
            if frame is None:
                return
            number, caplen, link = row[:3]
            if frame.number != number or frame.caplen != caplen:
                yield frame, decode_frame(frame).flat
                yield from ((f, decode_frame(f).flat) for f in frames)
                return
            if ok and _shape_ok(frame, link, row[-1]):
                where = (link,) + row[5:]
                ends = known.get(where)
                if ends is None:
                    ends = known[where] = {**_ends(*where), "_addr": where}
                yield frame, {"bth.opcode": row[3], "bth.p_key": row[4], **ends}
            else:
                yield frame, decode_frame(frame).flat
    yield from ((f, decode_frame(f).flat) for f in frames)


_ADDR_FIELDS = ("link", "slid", "dlid", "src", "dst", "eth_src", "eth_dst", "vlan")


class DataGroup(NamedTuple):
    """Data packets of one batch with equal address fields and P_Key, as `Audit.feed_group` takes them."""

    first: int  # frame number of the first one
    frames: list  # the first EVIDENCE_FRAMES frame numbers
    packets: int
    bytes: int
    truncated: int  # of them captured shorter than on the wire
    flat: dict  # bth.opcode/bth.p_key of the first, the address fields, `_addr`


def _byte(data: np.ndarray, caplen: np.ndarray, buf: np.ndarray, at) -> np.ndarray:
    """Byte `at` (a number or one per frame) of the frames starting at `data` in `buf`; -1 past caplen."""
    inside = caplen > at
    return np.where(inside, buf[np.where(inside, data + at, 0)].astype(np.int32), -1)


def _shapes_ok(batch, rows: np.ndarray) -> np.ndarray:
    """`_shape_ok` for the frames in `rows` at once, read from the batch's bytes."""
    pos, rec, buf = batch.pos, batch.rec, batch.buf
    whole = len(rows) == len(rec)
    pick = (lambda a: a) if whole else (lambda a: a[rows])
    lt, link, vlan = pick(pos.linktype), pick(rec["link"]), pick(rec["vlan"])
    data, caplen = pick(pos.data), pick(pos.caplen)

    def byte(at):
        return _byte(data, caplen, buf, at)

    etype = byte(12) << 8 | byte(13)
    tagged = etype == ETHERTYPE_VLAN
    inner = np.where(tagged, byte(16) << 8 | byte(17), etype)
    eth_ok = ~np.isin(inner, (ETHERTYPE_VLAN, ETHERTYPE_QINQ, ETHERTYPE_QINQ_OLD)) & ((vlan >= 0) == tagged)
    eth_ok &= (link != R.ROCE1) | (byte(np.where(tagged, 24, 20)) == GRH_NXTHDR_BTH)
    eth = lt == _ETH
    if eth.all():
        return eth_ok
    grh_ok = link != R.IBGRH
    ok = (lt == _IB) & (grh_ok | (byte(14) == GRH_NXTHDR_BTH))
    ok |= (lt == _ERF) & (byte(8) == _ERF_IB) & (grh_ok | (byte(30) == GRH_NXTHDR_BTH))
    return ok | (eth & eth_ok)


class BulkReader:
    """One capture read through the compiled records: iterate for DataGroups and (Frame, flat) pairs, in
    frame order; `selected` counts the frames a display filter let through; `problems` the walk's damage
    (a damaged file is better read by `audit_fields`)."""

    def __init__(self, path: str, flt=None):
        from ibwire.decode.stream import Stream

        self.stream = Stream(path, icrc=False)
        self.flt = flt
        self.last = 0  # the file's last frame number
        from ibwire.decode.record_filter import names_analysis

        if flt is not None and names_analysis(flt.text):  # -Y on bth.analysis.*: the RC analysis first
            from ibwire.analyze.packets import CaptureAnalysis

            self.stream.fill = CaptureAnalysis(path).fill

    @property
    def problems(self):
        return self.stream.problems

    def _batches(self):
        if self.flt is None:
            for batch in self.stream:
                yield batch, None, {}
            return
        from ibwire.decode.stream import detail_flat, select

        known: dict = {}  # frame number -> full decode made for the filter (reused below)

        def detail(batch, i, t0, prev):
            flat = detail_flat(batch.frame(i), t0, prev)
            known[int(batch.rec["frame"][i])] = flat
            return flat

        for batch, mask in select(self.stream, self.flt, detail):
            yield batch, mask, known
            known.clear()

    def __iter__(self):
        for batch, mask, known in self._batches():
            rec = batch.rec
            if not len(rec):
                continue
            self.last = int(rec["frame"][-1])
            ok = _trusted(rec)
            if mask is not None:
                ok &= mask
            rows = np.flatnonzero(ok)
            ok[rows] = _shapes_ok(batch, rows)
            rows = np.flatnonzero(ok)
            rest = np.flatnonzero(~ok if mask is None else ~ok & mask)
            items = [(int(rec["frame"][i]), 1, int(i)) for i in rest.tolist()]
            groups = self._groups(rec, rows) if len(rows) else []
            items += [(g.first, 0, g) for g in groups]
            if rest.size:
                items.sort(key=lambda t: t[:2])
            for number, kind, x in items:
                if kind:
                    frame = batch.frame(x)
                    flat = known.get(number)
                    if flat is None:
                        from ibwire.decode import decode_frame

                        flat = decode_frame(frame).flat
                    yield frame, flat
                else:
                    yield x

    def _groups(self, rec: np.ndarray, rows: np.ndarray) -> list:
        _, first, inv = group_rows(rec, _ADDR_FIELDS + ("p_key",), None if len(rows) == len(rec) else rows)
        whole = len(rows) == len(rec)
        caplen, wire, frame = (rec[k] if whole else rec[k][rows] for k in ("caplen", "len", "frame"))
        n = len(first)
        packets = np.bincount(inv, minlength=n)
        nbytes = np.bincount(inv, weights=np.where(wire > 0, wire, caplen), minlength=n)
        trunc = np.bincount(inv, weights=caplen < wire, minlength=n)
        order = np.argsort(inv, kind="stable")
        start = np.concatenate(([0], np.cumsum(packets)[:-1]))
        keep = order[np.arange(len(inv)) - start[inv[order]] < EVIDENCE_FRAMES]
        per: list = [[] for _ in range(n)]
        for g, f in zip(inv[keep].tolist(), frame[keep].tolist()):
            per[g].append(f)
        heads = rec[rows[first]]
        cols = [heads[k].tolist() for k in _ADDR_FIELDS + ("opcode", "p_key")]
        out = []
        for g, row in enumerate(zip(*cols)):
            where = row[: len(_ADDR_FIELDS)]
            flat = {"bth.opcode": row[-2], "bth.p_key": row[-1], **_ends(*where), "_addr": where}
            out.append(DataGroup(per[g][0], per[g], int(packets[g]), int(nbytes[g]), int(trunc[g]), flat))
        return out
