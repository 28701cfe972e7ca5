"""What the RC sequencer concluded about single frames (ibwire/decode/native/flows.c's event log), in the
style of Wireshark's `tcp.analysis.*`: which frame is a retransmission (a duplicate, or the resend of a PSN
lost on the wire), arrived out of order, follows a PSN gap (and how many of the skipped PSNs the capture
missed), opens a retransmission episode (and why), is the last resend of a requester that gave up, which
request an ACK, NAK or READ response answers, and the time since.

`table(events)` turns the log into one row per frame (the records' `an_*` columns, decode.records.ANALYSIS;
ibwire.analyze.packets fills them into records); `marked(table)` keeps the frames a PSN graph marks
(ibwire.analyze.series draws them).
"""

from collections import defaultdict
from typing import Dict, List

import numpy as np

from ibwire.decode import _native
from ibwire.decode import records as R

EVENT = np.dtype([("frame", "u4"), ("conv", "i4"), ("kind", "u1"), ("side", "u1"), ("pad", "u2"), ("value", "u4")])
KINDS = [k.lower() for k in _native.FLOW_EVENTS]
if EVENT.itemsize != _native.FLOW_EVENT_SIZE:
    raise ImportError("ibwire.decode._native's flow events differ from ibwire.analyze.frames'; rebuild it")
LISTED = 8  # frames listed per kind and conversation (all are counted)
# Columns the sequencer's events fill; NAKs and RNR waits are read from each ACK's own AETH.
SEQUENCED = [c for c in R.ANALYSIS if c not in ("an_nak", "an_rnr_wait")]
TABLE = np.dtype([("frame", "u4")] + [(c, R.RECORD[c]) for c in SEQUENCED])
MARKED = ("an_retransmission", "an_lost", "an_out_of_order", "an_psn_gap")  # what a PSN graph marks
MARKS = np.dtype([("frame", "u4")] + [(c, R.RECORD[c]) for c in MARKED])


def decode(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, EVENT)


def table(ev: np.ndarray) -> np.ndarray:
    """One TABLE row per frame the events name, sorted by frame number."""
    frames = np.unique(ev["frame"])
    t = np.zeros(len(frames), TABLE)
    t["frame"] = frames
    row = np.searchsorted(frames, ev["frame"])
    kind, value = ev["kind"], ev["value"]

    def at(name):
        sel = kind == KINDS.index(name)
        return row[sel], value[sel]

    for name in ("retransmission", "lost", "out_of_order", "duplicate", "gave_up"):
        t["an_" + name][at(name)[0]] = 1
    late = at("resent_late")[0]  # taken for late, then go-back-N showed it was resent
    t["an_out_of_order"][late] = 0
    t["an_retransmission"][late] = t["an_lost"][late] = 1
    r, v = at("psn_gap")
    t["an_psn_gap"][r] = v
    np.add.at(t["an_not_captured"], at("not_captured")[0], 1)
    for code, cause in enumerate(R.RETRY_CAUSES[1:], 1):
        t["an_retry_cause"][at("retry_" + cause)[0]] = code
    t["an_timeout_retransmission"] = t["an_retry_cause"] == 1
    for name in ("acks_frame", "read_request_frame"):
        r, v = at(name[: -len("_frame")])
        t["an_" + name][r] = v
    r, v = at("ack_rtt")
    t["an_ack_rtt"][r] = np.round(v.view(np.float32).astype(np.float64) * 1e9).astype(np.int64)
    return t


def marked(tab: np.ndarray) -> np.ndarray:
    """The MARKS rows of the TABLE's frames that are a retransmission, lost, out of order or after a PSN gap."""
    hit = np.zeros(len(tab), bool)
    for c in MARKED:
        hit |= tab[c] != 0
    out = np.zeros(int(hit.sum()), MARKS)
    for c in MARKS.names:
        out[c] = tab[c][hit]
    return out


def at_frames(marks: np.ndarray, frames: np.ndarray) -> Dict[str, np.ndarray]:
    """MARKED's columns of each of `frames` (sorted MARKS rows `marks`; zero where they hold no such frame)."""
    out = {c: np.zeros(len(frames), MARKS[c]) for c in MARKED}
    if len(marks):
        i = np.minimum(np.searchsorted(marks["frame"], frames), len(marks) - 1)
        hit = np.flatnonzero(marks["frame"][i] == frames)
        for c in MARKED:
            out[c][hit] = marks[c][i[hit]]
    return out


def incomplete(what: str) -> str:
    """The problem told when the sequencer kept only its first events: later frames carry no `what`."""
    return f"the RC analysis kept only its first {_native.FLOW_EVENTS_MAX} events; later frames carry no {what}"


def per_conversation(ev: np.ndarray, tab: np.ndarray) -> Dict[int, Dict[str, List[int]]]:
    """conversation index -> kind -> the first LISTED frames of that kind (by the frames' TABLE rows)."""
    kinds = {
        "retransmission": ("an_retransmission", 1),
        "lost": ("an_lost", 1),
        "out_of_order": ("an_out_of_order", 1),
        "not_captured": ("an_not_captured", None),
        "retry_timeout": ("an_retry_cause", 1),
        "retry_nak": ("an_retry_cause", 2),
        "retry_rnr": ("an_retry_cause", 3),
        "gave_up": ("an_gave_up", 1),
    }
    out: Dict[int, Dict[str, List[int]]] = defaultdict(lambda: defaultdict(list))
    answers = [KINDS.index(k) for k in ("duplicate", "acks", "ack_rtt", "read_request", "psn_gap")]
    ev = ev[~np.isin(ev["kind"], answers)]  # those alone list no frame (every ACK answers one)
    for frame, conv in sorted(set(zip(ev["frame"].tolist(), ev["conv"].tolist()))):
        r = tab[np.searchsorted(tab["frame"], frame)]
        for kind, (col, want) in kinds.items():
            hit = r[col] != 0 if want is None else r[col] == want
            lst = out[conv][kind]
            if hit and len(lst) < LISTED and frame not in lst:
                lst.append(frame)
    return {c: {k: v for k, v in d.items() if v} for c, d in out.items()}


def wireshark(frames: Dict[str, List[int]]) -> Dict[str, str]:
    """A display filter per kind selecting the listed frames (Wireshark and `ibwire decode -Y` alike)."""
    return {k: "frame.number in {" + ", ".join(map(str, v)) + "}" for k, v in frames.items()}
