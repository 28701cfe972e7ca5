"""Flows of `ibwire health`: one direction of a QP (source, destination, destination QP) carrying data, and
the partner QP its ACKs and responses come back to.

Every row's QP group comes from one compiled group-by of all RoCE rows (`qp_groups`); flows, the ends
that answer them and the QoS table are derived from it, each group's rows taken out by one stable sort.
"""

from collections import Counter, defaultdict
from typing import List, Tuple

import numpy as np

from ..fast import records as R
from .hashing import group_rows

QP_KEY = ("src", "dst", "slid", "dlid", "destqp")
ANSWER_WITHIN_US = 10_000  # an ACK or response answers a request with its PSN sent at most this long before


def row_end(rows, i: int, side: str) -> bytes:
    """The source or destination of packet i: its address, or its LID (b"LID" + 2 bytes) on native IB."""
    if rows["link"][i] == R.IB:
        return b"LID" + int(rows["slid" if side == "src" else "dlid"][i]).to_bytes(2, "big")
    return bytes(rows[side][i])


def qp_groups(rows) -> Tuple[np.ndarray, np.ndarray]:
    """Each row's group of equal source, destination (addresses and LIDs) and destination QP, and each
    group's first row."""
    _, first, inv = group_rows(rows, QP_KEY)
    return inv, first


def groups_in_order(idx: np.ndarray, group: np.ndarray, groups: int) -> List[np.ndarray]:
    """The rows `idx` split by their `group` (numbers below `groups`), each part in row order, the parts in
    order of their first row: what group_rows over `idx` gives, from one stable sort."""
    if not len(idx):
        return []
    small = np.uint8 if groups <= 1 << 8 else np.uint16 if groups <= 1 << 16 else np.int64  # radix sorted
    order = np.argsort(group.astype(small), kind="stable")
    counts = np.bincount(group, minlength=groups)
    parts = np.split(idx[order], np.cumsum(counts)[:-1])
    present = [parts[g] for g in np.flatnonzero(counts).tolist()]
    return [present[j] for j in np.argsort([p[0] for p in present], kind="stable").tolist()]


def find_flows(rows, data: np.ndarray, back: np.ndarray, rel_us, qp: Tuple[np.ndarray, np.ndarray]) -> List[dict]:
    """One entry per flow (a QP's direction carrying data: the rows `data`): its rows, partner QP and how
    it was paired (by the rows `back`, data and ACKs, coming the other way).  `qp`: qp_groups(rows)."""
    if not len(data):
        return []
    gid, gfirst = qp
    _, efirst, ends_of = group_rows(rows, QP_KEY[:4], gfirst)  # each QP group's pair of ends
    rev = {
        (row_end(rows, r[0], "src"), row_end(rows, r[0], "dst")): r
        for r in groups_in_order(back, ends_of[gid[back]], len(efirst))
    }
    flows, by_ends = [], defaultdict(list)
    for r in groups_in_order(data, gid[data], len(gfirst)):
        i = r[0]
        src, dst = row_end(rows, i, "src"), row_end(rows, i, "dst")
        flows.append(
            {
                "src": src,
                "dst": dst,
                "qp": int(rows["destqp"][i]),
                "partner": None,
                "paired_by": "none",
                "rows": r,
                "link": int(rows["link"][i]),
            }
        )
        by_ends[(src, dst)].append(flows[-1])
    key = None
    for (src, dst), fs in by_ends.items():
        back_rows = rev.get((dst, src), np.zeros(0, np.int64))
        cands = np.unique(rows["destqp"][back_rows])
        if len(fs) == 1 and len(cands) == 1:
            fs[0]["partner"], fs[0]["paired_by"] = int(cands[0]), "addresses"
        elif fs and len(cands):
            if key is None:  # PSN << 39 | µs since the first packet
                key = rows["psn"].astype(np.int64) << 39 | np.clip(rel_us, 0, (1 << 39) - 1)
            _pair_by_psn(rows, key, fs, back_rows, cands)
    return flows


def _pair_by_psn(rows, key, fs, back, cands, sample: int = 5000) -> None:
    """Partner QPs of the flows `fs` (one pair of ends): each packet coming back to QP q (sampled) votes
    for the flow that sent its PSN most recently before it (within ANSWER_WITHIN_US); pairs are taken by
    votes, most first.  QPs may share PSN ranges, not times.  Keys are PSN << 39 | µs since the first packet."""
    votes = Counter()
    sent = [np.sort(key[f["rows"]]) for f in fs]
    back_qp = rows["destqp"][back]
    for q in cands.tolist():
        b = back[back_qp == q][:sample]
        kb, psn, t = key[b], rows["psn"][b], key[b] & ((1 << 39) - 1)
        gaps = np.full((len(fs), len(b)), np.inf)
        for n, ks in enumerate(sent):
            k = np.searchsorted(ks, kb, side="right") - 1
            ok = k >= 0
            hit = np.zeros(len(b), bool)
            hit[ok] = (ks[k[ok]] >> 39) == psn[ok]
            gap = t - (ks[np.maximum(k, 0)] & ((1 << 39) - 1))
            hit &= gap <= ANSWER_WITHIN_US
            gaps[n, hit] = gap[hit]
        answered = np.isfinite(gaps).any(axis=0)
        for n, c in zip(*np.unique(np.argmin(gaps, axis=0)[answered], return_counts=True)):
            votes[(q, int(n))] += int(c)
    used_q, used_f = set(), set()
    for (q, n), _ in votes.most_common():
        if q not in used_q and n not in used_f:
            used_q.add(q)
            used_f.add(n)
            fs[n]["partner"], fs[n]["paired_by"] = q, "psn"
