"""The RC analysis fields of every packet (decode.records.ANALYSIS, Wireshark's tcp.analysis.* for IB/RoCE):
one pass of the sequencer over the whole capture (an ACK is answered by what came before it, a resend is
known by what came after the original), then filled into record batches or column blocks by frame number
with numpy, for decode, export and every display filter.  docs/rc-analysis.md lists the fields.
"""

import numpy as np

from dissectors.opcodes import RNR_TIMER_MS, lookup
from ibwire.analyze.flows import analyse
from ibwire.analyze.frames import SEQUENCED, TABLE, incomplete
from ibwire.decode import records as R

_ACKS = np.array([lookup(c).op in ("ack", "atomic_ack") for c in range(256)])
_RNR_NS = np.array([round(ms * 1e6) for ms in RNR_TIMER_MS], np.int64)


class CaptureAnalysis:
    """The RC analysis of a whole capture (one pass of the sequencer), ready to fill records' `an_*`
    columns: `fill(rec)` takes a record batch or a block of columns (decode.columns)."""

    def __init__(self, path: str, icrc: bool = True, upto=None):
        """`upto`: analyse only the first frames, that many (what `decode -c N` reads, as tshark -c reads)."""
        events: list = []
        self.conversations = analyse(path, icrc, events=events, upto=upto)["conversations"]  # flows' rows
        self.table = events[0] if events else np.zeros(0, TABLE)
        self.problems = [incomplete("bth.analysis fields")] if events and events[1] else []

    def fill(self, rec) -> None:
        frames = rec["frame"]
        if len(self.table) and len(frames):
            i = np.minimum(np.searchsorted(self.table["frame"], frames), len(self.table) - 1)
            hit = np.flatnonzero(self.table["frame"][i] == frames)
            src = self.table[i[hit]]
            for c in SEQUENCED:
                rec[c][hit] = src[c]
        ack = ((rec["flags"] & R.F_BTH) > 0) & _ACKS[rec["opcode"]]
        kind = (rec["aeth_syndrome"] >> 5) & 3
        rec["an_nak"][:] = ack & (kind == 3)
        rnr = ack & (kind == 1)
        rec["an_rnr_wait"][:] = np.where(rnr, _RNR_NS[rec["aeth_syndrome"] & 0x1F], 0)
