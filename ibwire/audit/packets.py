"""The audit's packet stream: each frame with the Wireshark-named fields the audit reads.

Data packets get their few fields (`bth.opcode`, `bth.p_key`, LRH LIDs and GRH GIDs, or MAC/IP/VLAN)
from the fast path's records (ibwire.fast), with no scapy object.  The detail decoder (decode_frame)
takes what the records cannot vouch for: management datagrams (UD to or from QP0/QP1, IBA §13.4),
frames without a BTH, damaged ones, RoCEv2 found by the port heuristic, link types and VLAN/GRH shapes
the scapy bindings may read otherwise, RoCEv1/RoCEv2-over-IPv6 SENDs that could carry IPoIB (whose
inner IP the decoder would report), and the rest of a file once its records and frames stop lining up.
"""
from __future__ import annotations

from typing import Iterator, Tuple

import numpy as np

from dissectors.ib import GRH_NXTHDR_BTH
from dissectors.opcodes import OPCODES

from ..fast import records as R
from ..fast import scan
from ..readers import Frame

_UD = np.zeros(256, bool)
_SEND_START = np.zeros(256, bool)          # SEND First/Only: may carry IPoIB (RFC 4391)
for _code, _op in OPCODES.items():
    _UD[_code] = _op.transport == "UD"
    _SEND_START[_code] = _op.op == "send" and _op.seg in ("only", "first")

_DOUBT = R.F_MALFORMED | R.F_TRUNCATED | R.F_MAD | R.F_HEURISTIC
_DATA_LINKS = (R.ROCE1, R.ROCE2V4, R.ROCE2V6, R.IB, R.IBGRH)
_ETH, _ERF, _IB = 1, 197, 247            # link types whose records the fast path and scapy read alike
_ERF_IB = 21                              # ERF record type InfiniBand, no extension headers: LRH at 16
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
    from ..decode import decode_frame
    frames = iter(cap)
    known = {}                            # address fields -> their dict (a capture has few conversations)
    try:
        batches = iter(scan(path, icrc=False))
    except Exception:
        batches = iter(())
    while True:
        try:
            rec = next(batches)
        except StopIteration:
            break
        except Exception:                 # the reader decides what is readable; decode the rest
            break
        trusted = _trusted(rec).tolist()
        cols = [rec[k].tolist() for k in ("frame", "caplen", "link", "opcode", "p_key", "slid", "dlid",
                                          "src", "dst", "eth_src", "eth_dst", "vlan")]
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
