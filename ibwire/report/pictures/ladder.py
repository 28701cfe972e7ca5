"""A ladder (sequence) diagram of one conversation: CM connection setup and teardown (IBA Vol 1 §12.6:
REQ, REP, RTU, DREQ, DREP, REJ, MRA) and the RC packets between the two endpoints, one arrow per packet."""

from typing import List, Optional

import numpy as np

from dissectors.mad.table import ATTRIBUTES
from dissectors.opcodes import AETH_NAK, AETH_RNR_NAK, NAK_CODES, aeth_kind, lookup
from ibwire.analyze.series import end_text
from ibwire.report.pictures.svg import esc

CM_NAMES = {a: short for a, (_, short) in ATTRIBUTES["cm"].items() if short}
HEAD, TAIL = 40, 8  # packets drawn from the start and the end of the exchange


def cm_of(cm: np.ndarray, conv: dict) -> np.ndarray:
    """The CM MADs that set up or tear down `conv`: the REQ or REP naming one of its QPNs, and every
    message carrying one of their communication IDs."""
    qpns = {int(q, 16) for q in (conv["qpn_a"], conv["qpn_b"]) if q}
    if not len(cm) or not qpns:
        return cm[:0]
    attr = cm["mad_attrid"]
    ids = set(cm["cm_comm_id"][np.isin(attr, (0x10, 0x13)) & np.isin(cm["cm_qpn"], list(qpns))].tolist())
    ids |= set(cm["cm_comm_id"][(attr == 0x13) & np.isin(cm["cm_remote_comm_id"], list(ids))].tolist())
    ids.discard(0)
    keep = np.isin(cm["cm_comm_id"], list(ids)) | np.isin(cm["cm_remote_comm_id"], list(ids))
    return cm[keep]


def _label(op: int, psn: int, syn: int) -> str:
    o = lookup(op)
    text = f"{o.name} PSN {psn}"
    if "aeth" in o.headers:
        kind = aeth_kind(syn)
        if kind == AETH_RNR_NAK:
            text += " RNR NAK"
        elif kind == AETH_NAK:
            text += f" NAK {NAK_CODES.get(syn & 0x1F, syn & 0x1F)}"
    return text


def ladder(conv: dict, pk: Optional[dict], cm: np.ndarray, t0: float) -> str:
    """SVG of the conversation: lifelines for a and b, arrows in capture order, time since capture start."""
    rows = []  # (time, from_a, label, cls, frame)
    mine = cm_of(cm, conv)
    for r in mine:
        src = end_text(bytes(r["src"]), int(r["slid"]))
        name = CM_NAMES.get(int(r["mad_attrid"]), f"CM 0x{int(r['mad_attrid']):04x}")
        rows.append(
            (
                float(r["time"]),
                src == conv["a"],
                f"CM {name} (comm ID 0x{int(r['cm_comm_id']):08x})",
                "cm",
                int(r["frame"]),
            )
        )
    skipped = 0
    if pk is not None and len(pk["time"]):
        n = len(pk["time"])
        pick = list(range(min(n, HEAD)))
        if n > HEAD + TAIL:
            skipped = n - HEAD - TAIL
            pick += list(range(n - TAIL, n))
        else:
            pick = list(range(n))
        for i in pick:
            op, syn = int(pk["opcode"][i]), int(pk["aeth_syndrome"][i])
            label = _label(op, int(pk["psn"][i]), syn)
            cls = "nak" if "NAK" in label else ("bad" if pk["bad_icrc"][i] else "rc")
            rows.append(
                (
                    float(pk["time"][i]),
                    int(pk["side"][i]) == 0,
                    label + (" (bad ICRC)" if cls == "bad" else ""),
                    cls,
                    int(pk["frame"][i]),
                )
            )
    rows.sort(key=lambda r: (r[0], r[4]))
    if skipped:  # the gap marker goes after the head packets
        last_head = sorted(int(f) for f in pk["frame"][:HEAD])[-1]
        cut = next((k for k, r in enumerate(rows) if r[4] > last_head and r[3] != "cm"), len(rows))
        rows.insert(cut, (None, None, f"… {skipped} packets not drawn …", "gap", 0))
    step, top, width = 22, 56, 760
    xa, xb = 230, 620
    height = top + step * len(rows) + 30
    out = [
        f"<svg class='chart ladder' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' data-conversation='{conv['conversation']}' data-cm='{len(mine)}' "
        f"data-packets='{len(rows) - (1 if skipped else 0) - len(mine)}' data-skipped='{skipped}'>",
        "<defs><marker id='arrow' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='7' markerHeight='7' "
        "orient='auto-start-reverse'><path d='M0,0L10,5L0,10z' fill='#444'/></marker></defs>",
        f"<text class='title' x='{xa}' y='18' text-anchor='middle'>a: {esc(conv['a'])} QPN {esc(conv['qpn_a'])}</text>",
        f"<text class='title' x='{xb}' y='18' text-anchor='middle'>b: {esc(conv['b'])} QPN {esc(conv['qpn_b'])}</text>",
        f"<line x1='{xa}' y1='28' x2='{xa}' y2='{height - 10}' stroke='#888' stroke-width='2'/>",
        f"<line x1='{xb}' y1='28' x2='{xb}' y2='{height - 10}' stroke='#888' stroke-width='2'/>",
        "<text class='tick' x='8' y='44'>time since capture start</text>",
    ]
    colours = {"cm": "#1f77b4", "rc": "#444", "nak": "#d62728", "bad": "#ff7f0e"}
    for k, (t, from_a, label, cls, frame) in enumerate(rows):
        y = top + k * step
        if cls == "gap":
            out.append(
                f"<text class='gap' x='{(xa + xb) / 2}' y='{y + 4}' text-anchor='middle' fill='#666'>{esc(label)}</text>"
            )
            continue
        x1, x2 = (xa, xb) if from_a else (xb, xa)
        c = colours[cls]
        out.append(
            f"<g class='msg {cls}' data-frame='{frame}'><text class='tick' x='8' y='{y + 8}'>"
            f"{(t - t0) * 1e6:,.1f} µs</text><line x1='{x1}' y1='{y}' x2='{x2}' y2='{y + 10}' stroke='{c}' "
            f"stroke-width='1.4' marker-end='url(#arrow)'/><text x='{(xa + xb) / 2}' y='{y + 2}' "
            f"text-anchor='middle' fill='{c}'>{esc(label)}</text><title>frame {frame}</title></g>"
        )
    out.append("</svg>")
    return "".join(out)


def choose(conversations: List[dict], qp: Optional[int]) -> Optional[int]:
    """Index of the conversation to draw: the one using QPN `qp`, else the busiest RC one the analysis paired
    by its CM exchange, else the busiest RC one, else the first."""
    if not conversations:
        return None
    if qp is not None:
        q = f"0x{qp:06x}"
        return next((i for i, r in enumerate(conversations) if q in (r["qpn_a"], r["qpn_b"])), None)
    rc = [i for i, r in enumerate(conversations) if r["transport"] in ("RC", "XRC")]
    with_cm = [i for i in rc if conversations[i].get("paired_by") == "cm"]
    return (with_cm or rc or [0])[0]
