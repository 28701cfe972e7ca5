"""RMPP across frames: collect the DATA segments of each SA transfer (IBA §13.6) as `decode` meets them
and, at the last one, attach the reassembled table's records to that frame.

The segment number is 32 bits and comes from the wire, so what is kept is bounded: a transfer larger than
MAX_TRANSFER bytes (or a segment numbered past it; the bound is the layer's, dissectors.mad.rmpp) is
abandoned and said so, and at most MAX_PENDING bytes wait in unfinished transfers (the oldest is dropped
first)."""

import struct
from collections import OrderedDict
from typing import Dict

from dissectors.mad import MAD, reassemble
from dissectors.mad.rmpp import MAX_SEGMENTS, MAX_TRANSFER
from ibwire.decode.fields import mad_layer_entries, nest_and_flatten

RMPP_DATA = 1
FLAG_LAST = 0x4
SA_CLASS = 0x03
MAX_PENDING = 64 << 20  # bytes held in unfinished transfers at any time


class RmppTracker:
    """Feed every Decoded in order; completed transfers are added to the frame carrying the last segment."""

    def __init__(self):
        self.pending: "OrderedDict[tuple, Dict[int, bytes]]" = OrderedDict()  # key -> segment number -> MAD
        self.held = 0  # bytes in self.pending

    def feed(self, decoded) -> None:
        pkt = decoded.packet
        if pkt is None or MAD not in pkt or decoded.flat.get("mad.mgmtclass") != SA_CLASS:
            return
        if decoded.flat.get("rmpp.rmpptype") != RMPP_DATA:
            return
        raw = bytes(pkt[MAD].original or b"")[:256]
        if len(raw) < 56:
            return
        tid, segnum = struct.unpack_from(">Q", raw, 8)[0], struct.unpack_from(">I", raw, 28)[0]
        key = (tid, decoded.flat.get("lrh.slid"), decoded.flat.get("ip.src"), decoded.flat.get("grh.sgid"))
        if not 1 <= segnum <= MAX_SEGMENTS:
            self._drop(key)
            decoded.notes.append(
                f"[RMPP: segment {segnum} is beyond the {MAX_TRANSFER >> 20} MiB ibwire "
                "reassembles; transfer not reassembled]"
            )
            return
        segs = self.pending.setdefault(key, {})
        if segnum not in segs:
            segs[segnum] = raw
            self.held += len(raw)
        while self.held > MAX_PENDING and len(self.pending) > 1:
            self._drop(next(iter(self.pending)))
        if not raw[26] & FLAG_LAST:
            return
        self._drop(key)
        transfer = reassemble(segs.values(), tid)
        if transfer is None:
            return
        records = []
        for rec in transfer.records:
            nested, _ = nest_and_flatten(mad_layer_entries(rec)) if hasattr(rec, "fields_desc") else ({}, {})
            records.append(nested or {"raw": bytes(rec).hex()})
        decoded.layers["rmpp.reassembled"] = {
            "segments": len(segs),
            "complete": transfer.complete,
            "missing": transfer.missing,
            "record_size": transfer.record_size,
            "records": records,
        }
        decoded.flat["rmpp.reassembled.segments"] = len(segs)
        decoded.flat["rmpp.reassembled.records"] = len(records)
        decoded.flat["rmpp.reassembled.complete"] = transfer.complete
        note = (
            f"[RMPP: {len(records)} records from {len(segs)} segments"
            + ("" if transfer.complete else f", segments {_ranges(transfer.missing)} missing")
            + "]"
        )
        decoded.notes.append(note)

    def _drop(self, key) -> None:
        segs = self.pending.pop(key, None)
        if segs is not None:
            self.held -= sum(len(s) for s in segs.values())


def _ranges(numbers: list) -> str:
    """[2, 3, 4, 9] -> '2-4, 9' (a transfer can miss thousands of segments)."""
    out, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return "[" + ", ".join(out) + "]"
