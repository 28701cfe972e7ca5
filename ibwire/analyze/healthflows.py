"""Flows of `ibwire health`: one direction of a QP (source, destination, destination QP) carrying data, and
the partner QP its ACKs and responses come back to.

Every row's QP group comes from one compiled group-by of all RoCE rows (`qp_groups`); flows, the QPs that
answer them and the QoS table are derived from it, the rows of every group taken out by one radix sort.
"""

from collections import Counter, defaultdict
from typing import List, Tuple

import numpy as np

from ibwire.analyze.hashing import group_rows
from ibwire.analyze.healthrows import QP_KEY
from ibwire.decode import records as R

ANSWER_WITHIN_US = 10_000  # an ACK or response answers a request with its PSN sent at most this long before


def row_end(rows, i: int, side: str) -> bytes:
    """The source or destination of packet i: its address, or its LID (b"LID" + 2 bytes) on native IB."""
    if rows["link"][i] == R.IB:
        return b"LID" + int(rows.end_of(i, "slid" if side == "src" else "dlid")).to_bytes(2, "big")
    return bytes(rows.end_of(i, side))


def row_ends(rows, side: str) -> List[bytes]:
    """row_end of every row of `rows` (few: the CNPs), read a column at a time."""
    native = (rows["link"] == R.IB).tolist()
    lids, addrs = rows["slid" if side == "src" else "dlid"].tolist(), rows[side].tolist()
    return [b"LID" + lid.to_bytes(2, "big") if ib else a for ib, lid, a in zip(native, lids, addrs)]


def qp_groups(rows) -> Tuple[np.ndarray, np.ndarray]:
    """Each row's group of equal source, destination (addresses and LIDs) and destination QP, and each
    group's first row (grouped while reading, healthrows.Rows)."""
    return rows["qp"].astype(np.int64), rows.first


def rows_per_group(group: np.ndarray, groups: int) -> List[np.ndarray]:
    """The rows of each group number below `groups`, in row order: one stable (radix) sort."""
    small = np.uint8 if groups <= 1 << 8 else np.uint16 if groups <= 1 << 16 else np.int64
    order = np.argsort(group.astype(small), kind="stable")
    return np.split(order, np.cumsum(np.bincount(group, minlength=groups))[:-1])


def _each_where(per: List[np.ndarray], gid: np.ndarray, where: np.ndarray) -> List[np.ndarray]:
    """Each group's rows (`per`) where `where` holds.  A QP group is one direction, so most hold it in every
    row (data) or none (ACKs): those are taken whole or empty, without looking up each row."""
    count = np.bincount(gid[where], minlength=len(per))
    return [r if c == len(r) else r[:0] if not c else r[where[r]] for r, c in zip(per, count.tolist())]


def _answering(rows, back_of: List[np.ndarray], ends_of: np.ndarray, gfirst: np.ndarray):
    """(the pair of ends of each group of ends that sends data or ACKs -> that group, the later of two with
    one pair of ends (LIDs apart) replacing the earlier; per group of ends, its destination QPs -> rows)."""
    first_back, qps = {}, defaultdict(dict)
    for g, b in enumerate(back_of):
        if len(b):
            e = int(ends_of[g])
            first_back[e] = min(first_back.get(e, len(rows)), int(b[0]))
            qps[e][int(rows.groups["destqp"][g])] = b
    rev = {}
    for e, i in sorted(first_back.items(), key=lambda kv: kv[1]):
        rev[(row_end(rows, i, "src"), row_end(rows, i, "dst"))] = e
    return rev, qps


def find_flows(
    rows, psn: np.ndarray, is_data: np.ndarray, is_back: np.ndarray, rel_us, qp: Tuple[np.ndarray, np.ndarray]
) -> List[dict]:
    """One entry per flow (a QP's direction carrying data: the rows `is_data`): its rows, QP group, partner QP and how
    it was paired (by the rows `is_back`, data and ACKs, coming the other way, and their PSNs `psn`).  `qp`:
    qp_groups(rows); `rel_us`: each row's µs since the first packet (a temporary, which the pairing clips)."""
    gid, gfirst = qp
    per = rows_per_group(gid, len(gfirst))
    data_of = _each_where(per, gid, is_data)
    _, _, ends_of = group_rows(rows.groups, QP_KEY[:4])  # each QP group's pair of ends
    rev, qps = _answering(rows, _each_where(per, gid, is_back), ends_of, gfirst)
    flows, by_ends = [], defaultdict(list)
    for g, r in sorted(((g, r) for g, r in enumerate(data_of) if len(r)), key=lambda gr: int(gr[1][0])):
        i = r[0]
        src, dst = row_end(rows, i, "src"), row_end(rows, i, "dst")
        flows.append(
            {
                "src": src,
                "dst": dst,
                "qp": int(rows.end_of(i, "destqp")),
                "partner": None,
                "paired_by": "none",
                "rows": r,
                "group": g,
                "link": int(rows["link"][i]),
            }
        )
        by_ends[(src, dst)].append(flows[-1])
    key = None
    for (src, dst), fs in by_ends.items():
        back_q = qps[rev[(dst, src)]] if (dst, src) in rev else {}
        if len(fs) == 1 and len(back_q) == 1:
            fs[0]["partner"], fs[0]["paired_by"] = next(iter(back_q)), "addresses"
        elif back_q:
            if key is None:  # PSN << 39 | µs since the first packet
                key = psn.astype(np.int64)  # (in place: each 8-byte temporary is fresh memory, page faults)
                key <<= 39
                key |= np.clip(rel_us, 0, (1 << 39) - 1, out=rel_us)  # (the caller's temporary, clipped in place)
            _pair_by_psn(key, fs, back_q)
    return flows


def _pair_by_psn(key, fs, back_q: dict, sample: int = 5000) -> None:
    """Partner QPs of the flows `fs` (one pair of ends): each packet coming back (`back_q`: QP -> rows) to
    QP q (sampled) votes for the flow that sent its PSN most recently before it (within ANSWER_WITHIN_US);
    pairs are taken by votes, most first.  QPs may share PSN ranges, not times.  Keys are PSN << 39 | µs
    since the first packet."""
    votes = Counter()
    # every flow's keys in one sorted array, the last flow's first: among equal keys (two flows sending a PSN
    # in the same µs) the last found is then the first flow's, as the least gap of the first flow wins
    keys = [key[f["rows"]] for f in reversed(fs)]
    owner = np.repeat(np.arange(len(fs) - 1, -1, -1, dtype=np.int32), [len(k) for k in keys])
    keys = np.concatenate(keys)
    order = np.argsort(keys, kind="stable")  # (runs nearly in order already: timsort is quick)
    sent, owner = keys[order], owner[order]
    low = (1 << 39) - 1
    for q in sorted(back_q):
        b = back_q[q][:sample]
        kb = key[b]  # (its PSN, 24 bits, is kb >> 39: the rows' own column is slower to pick from)
        k = np.searchsorted(sent, kb, side="right") - 1  # the latest sent at or before, of any flow
        at = np.maximum(k, 0)
        hit = (k >= 0) & ((sent[at] >> 39) == kb >> 39) & ((kb & low) - (sent[at] & low) <= ANSWER_WITHIN_US)
        counts = np.bincount(owner[at[hit]], minlength=len(fs))
        for n in np.flatnonzero(counts).tolist():
            votes[(q, n)] += int(counts[n])
    used_q, used_f = set(), set()
    for (q, n), _ in votes.most_common():
        if q not in used_q and n not in used_f:
            used_q.add(q)
            used_f.add(n)
            fs[n]["partner"], fs[n]["paired_by"] = q, "psn"
