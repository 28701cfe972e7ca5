"""Which frames of a batch print from a learned program (ibwire.report.packets.templates), learned in this
run or kept from an earlier one (ibwire.report.packets.learned_store).

A frame qualifies when the compiled decoder says it is an IB/RoCE transport packet (a MAD too, but an RMPP
DATA segment) that is not IPoIB, without damage, heuristics or RC analysis fields, and no storage tracker wants it; a SEND's first
SEND_KEPT payload bytes belong to its shape, so an upper layer's heuristic sees the same bytes in every frame
of a shape.  Its *layout* (link type, encapsulation, opcode, flags,
lengths, CRC verdicts, VLAN/DSCP/ECN) picks the header length and the bits that name a shape; the
frame's header bytes under that mask pick the shape; each shape's program is learned once.
"""

from typing import Callable, Optional

import numpy as np

from dissectors.opcodes import OPCODES
from ibwire.analyze.hashing import group_rows
from ibwire.decode import records as R
from ibwire.decode.record_filter import DATA
from ibwire.report.packets.learned_store import Store

SHAPES_PER_LAYOUT = 64  # beyond this many shapes of one layout, its new shapes are decoded in full
EARN_BACK = 16  # frames of a layout, or of a shape, seen before it is learned
KNOWN = np.array([c in OPCODES for c in range(256)])
SEND = np.array([c in OPCODES and OPCODES[c].op == "send" for c in range(256)])
KEY_CHUNK = 120  # bytes of a shape's head grouped at a time (with 8 of the previous chunks' group: GROUP_MAX_KEY)
SEND_KEPT = 64  # payload bytes of a SEND that name its shape: any upper layer's heuristic reads no further
LAYOUT = (
    "linktype",
    "link",
    "opcode",
    "flags",
    "caplen",
    "len",
    "icrc",
    "vcrc",
    "pcp",
    "dscp",
    "ecn",
    "an_retry_cause",
    "mad_class",
    "mad_method",
    "mad_attrid",
)
UNPLAIN = R.F_IPOIB | R.F_MALFORMED | R.F_HEURISTIC
MAD_STEADY = (("BTH", "destqp"), ("DETH", "q_key"), ("DETH", "srcqp"))  # QP 0/1 and QP1's Q_Key make a MAD
DIRECTED = 0x81  # the directed-route SMP class: only its class-specific bits (hop pointer and count) vary
LID_ROUTED_STEADY = MAD_STEADY + (("MAD", "classspecific"),)


class Shapes:
    """Learned programs of one output format, by layout and shape, over a whole capture."""

    def __init__(self, fmt: str, decode: Callable):
        self.fmt = fmt
        self.decode = decode  # (Frame, row with RC analysis columns or None) -> Decoded
        self.layouts = {}  # layout bytes -> (head, keep) or None
        self.programs = {}  # (layout bytes, masked head bytes) -> program or None
        self.count = {}  # layout bytes -> shapes learned
        self.seen = {}  # layout or shape not learned yet -> its frames seen
        self.store = Store(fmt)  # programs kept from earlier runs (ibwire.report.packets.learned_store)

    @staticmethod
    def eligible(rec: np.ndarray, rows: np.ndarray) -> np.ndarray:
        flags = rec["flags"][rows]
        ok = np.isin(rec["link"][rows], DATA) & ((flags & R.F_BTH) > 0) & ((flags & UNPLAIN) == 0)
        return ok & KNOWN[rec["opcode"][rows]] & (rec["caplen"][rows] <= rec["len"][rows])

    def assign(self, batch, rows: np.ndarray, progs: list) -> np.ndarray:
        """For each of `rows`, the index into `progs` (extended here) of its program, or -1.  Rows are
        grouped by layout, then by shape, each in one compiled pass (ibwire.analyze.hashing); only the
        groups are looked at one by one."""
        rec, out = batch.rec, np.full(len(rows), -1, np.int64)
        _, first, columns = group_rows(rec, LAYOUT, rows)  # eligibility is the LAYOUT columns'
        pick = np.flatnonzero(self.eligible(rec, rows[first])[columns])
        if not len(pick):
            return out
        sub = rows[pick]
        analysis = np.zeros(len(rec), np.uint16)  # which RC analysis fields each frame carries
        for bit, col in enumerate(R.ANALYSIS):
            analysis |= R.analysis_present(rec, col).astype(np.uint16) << np.uint16(bit)
        key = np.zeros(len(sub), [("columns", "i8"), ("vlan", "?"), ("analysis", "u2")])
        key["columns"], key["vlan"], key["analysis"] = columns[pick], rec["vlan"][sub] >= 0, analysis[sub]
        _, first, layout_of = group_rows(key, key.dtype.names)
        lay = np.zeros(len(first), [(c, rec.dtype[c]) for c in LAYOUT] + [("vlan", "?"), ("analysis", "u2")])
        for c in LAYOUT:
            lay[c] = rec[c][sub[first]]
        lay["vlan"], lay["analysis"] = key["vlan"][first], key["analysis"][first]
        layouts, seen = [x.tobytes() for x in lay], np.bincount(layout_of).tolist()
        known = [self._layout(batch, layout, int(sub[f]), n) for layout, f, n in zip(layouts, first.tolist(), seen)]
        on = np.flatnonzero(np.array([k is not None for k in known])[layout_of])
        if len(on):
            self._shapes(batch, layouts, known, sub[on], layout_of[on], pick[on], out, progs)
        return out

    def _layout(self, batch, layout: bytes, first: int, seen: int) -> Optional[tuple]:
        """(head, keep) of a layout: kept from an earlier run that learned the shape of its `first` frame, else
        learned from that frame once EARN_BACK of its frames were seen (`seen` more now); None while it is
        not, or when it could not be."""
        if layout not in self.layouts:
            for head, keep, programs in self.store.variants(layout):
                masked = self._masked(batch, [first], head, keep)[0].tobytes()
                if masked in programs:
                    self.layouts[layout], self.count[layout] = (head, keep), 0
                    return self.layouts[layout]
            self.seen[layout] = self.seen.get(layout, 0) + seen
            if self.seen[layout] < EARN_BACK:
                return None
            shape = self._learn(batch, first)
            self.layouts[layout] = (shape.head, shape.keep) if shape else None
            if shape:
                masked = self._masked(batch, [first], shape.head, shape.keep)[0].tobytes()
                self.programs[(layout, masked)] = shape
                self.store.add(layout, shape, masked)
                self.count[layout] = 1
        return self.layouts[layout]

    def _shapes(self, batch, layouts: list, known: list, rows, layout_of, where, out, progs) -> None:
        """Learning costs 11 or 12 full decodes (templates.learn): a shape is learned once EARN_BACK of its own
        frames were seen (a capture of frames all unlike, a fuzz corpus, is decoded in full), or at once when an
        earlier run kept its program.  The rows' head
        bytes under their layout's mask (zero past its head) and the layout's number name the shape."""
        width = max(k[0] for k in known if k is not None)
        keeps = np.zeros((len(known), width), np.uint8)
        for j, k in enumerate(known):
            if k is not None:
                keeps[j, : k[0]] = k[1]
        masked = self._masked(batch, rows, width, keeps[layout_of])
        number = layout_of.astype("<i8").view(np.uint8).reshape(len(rows), 8)
        first, shape_of = _groups(np.concatenate([number, masked], axis=1))
        program = np.full(len(first), -1, np.int64)
        for g, (lead, members) in enumerate(zip(first.tolist(), np.bincount(shape_of).tolist())):
            j = int(layout_of[lead])
            layout, (head, keep) = layouts[j], known[j]
            key = (layout, masked[lead, :head].tobytes())
            shape = self.programs.get(key, 0)
            if shape == 0 and (kept := self.store.find(layout, head, keep, key[1])):
                shape = self.programs[key] = kept
            if shape == 0:
                self.seen[key] = self.seen.get(key, 0) + members
                if self.seen[key] < EARN_BACK:
                    continue
                shape = None
                if self.count[layout] < SHAPES_PER_LAYOUT:
                    self.count[layout] += 1
                    shape = self._learn(batch, int(rows[lead]))
                    if shape is not None and (shape.head != head or not np.array_equal(shape.keep, keep)):
                        shape = None
                    if shape is not None:
                        self.store.add(layout, shape, key[1])
                self.programs[key] = shape
            if shape is not None:
                progs.append(shape.program)
                program[g] = len(progs) - 1
        out[where] = program[shape_of]

    @staticmethod
    def _masked(batch, rows, width: int, keep: np.ndarray) -> np.ndarray:
        """The first `width` bytes of each row's frame under `keep` (one mask, or one per row); bytes past
        the buffer's end (masked off: a layout's frames all hold its head) read as its last."""
        start = batch.pos.data[rows].astype(np.int64)
        if not len(start) or int(start.max()) + width > len(batch.buf):
            return batch.buf[np.minimum(start[:, None] + np.arange(width), len(batch.buf) - 1)] & keep
        return np.lib.stride_tricks.sliding_window_view(batch.buf, width)[start] & keep

    def _learn(self, batch, i: int):
        from ibwire.report.packets.learn_formats import FORMATS
        from ibwire.report.packets.templates import learn

        kept = SEND_KEPT if SEND[int(batch.rec["opcode"][i])] else 0
        steady = ()
        if batch.rec["flags"][i] & R.F_MAD:
            steady = MAD_STEADY if batch.rec["mad_class"][i] == DIRECTED else LID_ROUTED_STEADY
        try:
            return learn(batch.frame(i), batch.rec[i], self.decode, FORMATS[self.fmt], kept, steady)
        except Exception:  # a frame the learner cannot take apart is printed from its full decode
            return None


def _groups(keys: np.ndarray) -> tuple:
    """(first row of each group, each row's group) of the equal rows of `keys` ((n, width) uint8), numbered
    by first appearance: an exact compiled group-by (ibwire.analyze.hashing) over KEY_CHUNK bytes at a time,
    each chunk's groups keyed on with the next chunk."""
    n, width = keys.shape
    first, inverse = np.zeros(min(n, 1), np.int64), np.zeros(n, np.int64)
    for at in range(0, width, KEY_CHUNK):
        part = np.ascontiguousarray(keys[:, at : at + KEY_CHUNK])
        chunk = np.zeros(n, [("group", "i8"), ("bytes", f"V{part.shape[1]}")])
        chunk["group"], chunk["bytes"] = inverse, part.view(chunk.dtype["bytes"]).ravel()
        _, first, inverse = group_rows(chunk, chunk.dtype.names)
    return first, inverse
