"""RMPP across frames: collect the DATA segments of each SA transfer (IBA §13.6) as `decode` meets them
and, at the last one, attach the reassembled table's records to that frame."""
import struct
from typing import Dict, List

from dissectors.mad import MAD, reassemble

from .fields import mad_layer_entries, nest_and_flatten

RMPP_DATA = 1
FLAG_LAST = 0x4
SA_CLASS = 0x03


class RmppTracker:
    """Feed every Decoded in order; completed transfers are added to the frame carrying the last segment."""

    def __init__(self):
        self.pending: Dict[tuple, List[bytes]] = {}

    def feed(self, decoded) -> None:
        pkt = decoded.packet
        if pkt is None or MAD not in pkt or decoded.flat.get("mad.mgmtclass") != SA_CLASS:
            return
        if decoded.flat.get("rmpp.rmpptype") != RMPP_DATA:
            return
        raw = bytes(pkt[MAD].original or b"")[:256]
        if len(raw) < 56:
            return
        tid = struct.unpack_from(">Q", raw, 8)[0]
        key = (tid, decoded.flat.get("lrh.slid"), decoded.flat.get("ip.src"), decoded.flat.get("grh.sgid"))
        segs = self.pending.setdefault(key, [])
        segs.append(raw)
        if not raw[26] & FLAG_LAST:
            return
        del self.pending[key]
        transfer = reassemble(segs, tid)
        if transfer is None:
            return
        records = []
        for rec in transfer.records:
            nested, _ = nest_and_flatten(mad_layer_entries(rec)) if hasattr(rec, "fields_desc") else ({}, {})
            records.append(nested or {"raw": bytes(rec).hex()})
        decoded.layers["rmpp.reassembled"] = {"segments": len(segs), "complete": transfer.complete,
                                              "missing": transfer.missing, "record_size": transfer.record_size,
                                              "records": records}
        decoded.flat["rmpp.reassembled.segments"] = len(segs)
        decoded.flat["rmpp.reassembled.records"] = len(records)
        decoded.flat["rmpp.reassembled.complete"] = transfer.complete
        note = f"[RMPP: {len(records)} records from {len(segs)} segments" + \
            ("" if transfer.complete else f", segments {transfer.missing} missing") + "]"
        decoded.notes.append(note)
