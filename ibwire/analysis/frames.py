"""What the RC sequencer concluded about single frames (ibwire/fast/native/flows.c's event log), in the
style of Wireshark's `tcp.analysis.*`: which frame is a retransmission, resends a PSN lost on the wire,
arrived out of order, follows a PSN gap (and how many of the skipped PSNs the capture missed), opens a
retransmission episode (and why), or is the last resend of a requester that gave up."""
from collections import defaultdict
from typing import Dict, List

import numpy as np

from ..fast import _native

EVENT = np.dtype([("frame", "u4"), ("conv", "i4"), ("kind", "u1"), ("side", "u1"), ("pad", "u2"), ("value", "u4")])
KINDS = [k.lower() for k in _native.FLOW_EVENTS]
if EVENT.itemsize != _native.FLOW_EVENT_SIZE:
    raise ImportError("ibwire.fast._native's flow events differ from ibwire.analysis.frames'; rebuild it")
LISTED = 8                  # frames listed per kind and conversation (all are counted)
FIELDS = {                  # display-filter field -> what it means (docs/fields; decode -V)
    "bth.analysis.retransmission": "this request resends a PSN already sent",
    "bth.analysis.lost": "this request resends a PSN the wire lost (resent after a NAK or by go-back-N)",
    "bth.analysis.out_of_order": "this request's PSN was skipped and arrived late, not resent",
    "bth.analysis.psn_gap": "PSNs skipped just before this request",
    "bth.analysis.not_captured": "of those, PSNs never resent: delivered, but the capture missed them",
    "bth.analysis.retry_cause": "this request opens a retransmission episode: timeout, nak or rnr",
    "bth.analysis.gave_up": "the last resend of a requester that then fell silent, unanswered",
}


def decode(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, EVENT)


def per_frame(ev: np.ndarray) -> Dict[int, dict]:
    """frame number -> its bth.analysis.* fields."""
    out: Dict[int, dict] = defaultdict(dict)
    for frame, kind, value in zip(ev["frame"].tolist(), ev["kind"].tolist(), ev["value"].tolist()):
        k, f = KINDS[kind], out[frame]
        if k == "retransmission":
            f["bth.analysis.retransmission"] = True
        elif k == "lost":
            f["bth.analysis.lost"] = True
        elif k == "out_of_order":
            f["bth.analysis.out_of_order"] = True
        elif k == "resent_late":          # taken for late, then go-back-N showed it was resent
            f.pop("bth.analysis.out_of_order", None)
            f["bth.analysis.retransmission"] = f["bth.analysis.lost"] = True
        elif k == "psn_gap":
            f["bth.analysis.psn_gap"] = value
        elif k == "not_captured":
            f["bth.analysis.not_captured"] = f.get("bth.analysis.not_captured", 0) + 1
        elif k.startswith("retry_"):
            f["bth.analysis.retry_cause"] = k[len("retry_"):]
        elif k == "gave_up":
            f["bth.analysis.gave_up"] = True
    return dict(out)


def per_conversation(ev: np.ndarray, fields: Dict[int, dict]) -> Dict[int, Dict[str, List[int]]]:
    """conversation index -> kind -> the first LISTED frames of that kind (by the frames' final fields)."""
    kinds = {"retransmission": "bth.analysis.retransmission", "lost": "bth.analysis.lost",
             "out_of_order": "bth.analysis.out_of_order", "not_captured": "bth.analysis.not_captured",
             "retry_timeout": None, "retry_nak": None, "retry_rnr": None, "gave_up": "bth.analysis.gave_up"}
    out: Dict[int, Dict[str, List[int]]] = defaultdict(lambda: defaultdict(list))
    seen = set()
    for frame, conv in sorted(set(zip(ev["frame"].tolist(), ev["conv"].tolist()))):
        f = fields.get(frame, {})
        for kind, key in kinds.items():
            hit = f.get("bth.analysis.retry_cause") == kind[6:] if key is None else f.get(key)
            lst = out[conv][kind]
            if hit and len(lst) < LISTED and (conv, kind, frame) not in seen:
                seen.add((conv, kind, frame))
                lst.append(frame)
    return {c: {k: v for k, v in d.items() if v} for c, d in out.items()}


def wireshark(frames: Dict[str, List[int]]) -> Dict[str, str]:
    """A display filter per kind selecting the listed frames (Wireshark and `ibwire decode -Y` alike)."""
    return {k: "frame.number in {" + ", ".join(map(str, v)) + "}" for k, v in frames.items()}
