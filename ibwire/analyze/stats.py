"""Capture statistics from record batches: grouped counts with numpy, merged into small dictionaries.

Tables: transport+opcode, P_Key (base and membership, IBA §10.9.1), endpoints (LID, GID/IP, MAC),
queue pairs, MAD class/method/attribute; counters for ECN, CNPs, FECN/BECN, CRC failures, damage.
"""

import multiprocessing
import os
from collections import defaultdict
from typing import Dict, List

import numpy as np

from dissectors.madnames import CLASSES
from dissectors.opcodes import AETH_NAK, AETH_RNR_NAK, aeth_kind, lookup
from ibwire.analyze.hashing import group_rows
from ibwire.decode import records as R
from ibwire.decode.scan import scan
from ibwire.files.split import MIN_SPAN, processes, spans
from ibwire.files.walk import SpanContextLost
from ibwire.words import plural

MAD_CLASSES = {c: name for c, (_, name) in CLASSES.items()}  # the names -V shows (dissectors/madnames.py)


class Stats:
    """Feed batches with `add`; `result()` gives tables (lists of dicts) and counters."""

    def __init__(self):
        self.tables: Dict[str, Dict[tuple, List[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
        self.counters: Dict[str, int] = defaultdict(int)
        self.t_first = self.t_last = None
        self.t_prev = None
        self.t_head = None  # time of the first packet added (to join spans in order)
        self.names: Dict[str, dict] = {}
        self.arrays: Dict[str, np.ndarray] = {}

    def _acc(self, table: str, groups, weights, key_of):
        """Add counts per group (from group_rows); key_of(row index) builds the readable key on first sight."""
        hashes, first, inv = groups
        c = np.bincount(inv, minlength=len(first))
        b = np.bincount(inv, weights=weights, minlength=len(first))
        tab = self.tables[table]
        names = self.names.setdefault(table, {})
        for h, i, n, nb in zip(hashes.tolist(), first.tolist(), c.tolist(), b.tolist()):
            if h not in names:
                names[h] = key_of(i)
            e = tab[names[h]]
            e[0] += n
            e[1] += nb

    def _bincount(self, table: str, keys, weights, size: int):
        c = np.bincount(keys, minlength=size)
        b = np.bincount(keys, weights=weights, minlength=size)
        acc = self.arrays.setdefault(table, np.zeros((2, size)))
        acc[0] += c
        acc[1] += b

    def add(self, rec: np.ndarray) -> None:
        if not len(rec):
            return
        cnt = self.counters
        n = len(rec)
        ln = rec["len"].astype(np.float64)
        t = rec["time"]
        cnt["packets"] += n
        cnt["bytes"] += int(ln.sum())
        tmin, tmax = float(t.min()), float(t.max())
        self.t_first = tmin if self.t_first is None else min(self.t_first, tmin)
        self.t_last = tmax if self.t_last is None else max(self.t_last, tmax)
        if self.t_head is None:
            self.t_head = float(t[0])
        back = int((np.diff(t) < 0).sum()) + (1 if self.t_prev is not None and t[0] < self.t_prev else 0)
        cnt["time_went_backwards"] += back
        self.t_prev = float(t[-1])
        fl = rec["flags"]
        bth = (fl & R.F_BTH) > 0
        cnt["malformed"] += int(((fl & R.F_MALFORMED) > 0).sum())
        cnt["truncated"] += int(((fl & R.F_TRUNCATED) > 0).sum())
        cnt["roce_on_other_udp_port"] += int(((fl & R.F_HEURISTIC) > 0).sum())
        for name, col in (("icrc", rec["icrc"]), ("vcrc", rec["vcrc"])):
            c = np.bincount(col, minlength=len(R.CRC_STATUS))
            for i, s in enumerate(R.CRC_STATUS):
                if c[i] and (i != R.ABSENT):
                    cnt[f"{name}_{s}"] += int(c[i])
        cnt["ib_link_packets"] += int((rec["link"] == R.IBLINK).sum())
        # link kind / opcode (non-BTH packets grouped by link kind, opcode 256 + kind)
        key = np.where(bth, rec["opcode"].astype(np.int64), 256 + rec["link"].astype(np.int64))
        self._bincount("opcode", key, ln, 512)
        every = bool(bth.all())
        if every or bth.any():
            bth_rows = None if every else np.nonzero(bth)[0]

            def col(k):
                return rec[k] if every else rec[k][bth_rows]

            bl = ln if every else ln[bth]
            op = col("opcode")
            ecn = rec["ecn"]
            cnt["ecn_ce"] += int((ecn == 3).sum())
            cnt["ecn_capable"] += int(((ecn == 1) | (ecn == 2)).sum())
            cnt["cnp"] += int((op == 0x81).sum())
            cnt["fecn"] += int(np.count_nonzero(col("fecn")))
            cnt["becn"] += int(np.count_nonzero(col("becn")))
            syn = aeth_kind(col("aeth_syndrome")[_HAS_AETH[op]])
            cnt["nak"] += int((syn == AETH_NAK).sum())
            cnt["rnr_nak"] += int((syn == AETH_RNR_NAK).sum())
            self._bincount("p_key", col("p_key"), bl, 65536)
            dst, dlid, qp, emac = col("dst"), col("dlid"), col("destqp"), col("eth_dst")
            self._acc(
                "qp",
                group_rows(rec, ("dst", "dlid", "eth_dst", "destqp"), bth_rows),
                bl,
                lambda i: (bytes(dst[i]), int(dlid[i]), bytes(emac[i]), int(qp[i])),
            )
            madm = (col("flags") & R.F_MAD) > 0
            if madm.any():
                mad = rec[np.nonzero(bth)[0][madm]]
                cls, meth, attr = mad["mad_class"], mad["mad_method"], mad["mad_attrid"]
                self._acc(
                    "mad",
                    group_rows(mad, ("mad_class", "mad_method", "mad_attrid")),
                    mad["len"].astype(np.float64),
                    lambda i: (int(cls[i]), int(meth[i]), int(attr[i])),
                )
        # endpoints: transmit side and receive side
        for side, a, lid, mac in (("tx", "src", "slid", "eth_src"), ("rx", "dst", "dlid", "eth_dst")):
            ac, lc, mc = rec[a], rec[lid], rec[mac]
            self._acc(
                "endpoint_" + side,
                group_rows(rec, (a, lid, mac)),
                ln,
                lambda i, ac=ac, lc=lc, mc=mc: (bytes(ac[i]), int(lc[i]), bytes(mc[i])),
            )

    def state(self) -> dict:
        """Everything accumulated, as plain picklable data (to send from a worker process)."""
        return {
            "tables": {k: dict(v) for k, v in self.tables.items()},
            "counters": dict(self.counters),
            "arrays": self.arrays,
            "t": (self.t_first, self.t_last, self.t_head, self.t_prev),
        }

    def merge(self, other: dict) -> None:
        """Add another span's state; spans must be merged in file order."""
        for table, rows in other["tables"].items():
            tab = self.tables[table]
            for k, (n, b) in rows.items():
                tab[k][0] += n
                tab[k][1] += b
        for k, v in other["counters"].items():
            self.counters[k] += v
        for k, a in other["arrays"].items():
            if k in self.arrays:
                self.arrays[k] += a
            else:
                self.arrays[k] = a
        first, last, head, prev = other["t"]
        if first is None:
            return
        if self.t_prev is not None and head < self.t_prev:
            self.counters["time_went_backwards"] += 1
        self.t_first = first if self.t_first is None else min(self.t_first, first)
        self.t_last = last if self.t_last is None else max(self.t_last, last)
        self.t_prev = prev

    def result(self) -> dict:
        """The stats document: summary, counters, the tables by opcode, P_Key, endpoint, QP and MAD, loss hints."""
        cnt = dict(self.counters)
        dur = (self.t_last - self.t_first) if self.t_first is not None else 0.0
        return {
            "summary": {
                "packets": cnt.get("packets", 0),
                "bytes": cnt.get("bytes", 0),
                "duration_s": dur,
                "first_time": self.t_first,
                "last_time": self.t_last,
                "packets_per_s": cnt.get("packets", 0) / dur if dur > 0 else None,
                "bits_per_s": cnt.get("bytes", 0) * 8 / dur if dur > 0 else None,
            },
            "counters": {k: v for k, v in sorted(cnt.items()) if k not in ("packets", "bytes")},
            "by_opcode": self._by_opcode(dur),
            "by_p_key": self._by_p_key(dur),
            "by_endpoint": self._by_endpoint(),
            "by_qp": [
                {"destination": _endpoint(a, lid, mac), "destqp": f"0x{qp:06x}", **_rate(e, dur)}
                for (a, lid, mac, qp), e in sorted(self.tables["qp"].items(), key=lambda kv: -kv[1][1])
            ],
            "by_mad": self._by_mad(dur),
            "loss_hints": _loss_hints(cnt),
        }

    def _by_opcode(self, dur: float) -> List[dict]:
        """Transport+opcode rows, busiest first; packets without a BTH count per link kind."""
        rows = []
        for k in np.argsort(-self.arrays["opcode"][0], kind="stable").tolist() if "opcode" in self.arrays else []:
            e = self.arrays["opcode"][:, k]
            if not e[0]:
                continue
            if k >= 256:
                rows.append(
                    {
                        "transport": R.LINK_KINDS[k - 256] if k - 256 != R.OTHER else "non-IB",
                        "opcode": None,
                        "operation": "(no BTH)",
                        **_rate(e, dur),
                    }
                )
            else:
                o = lookup(k)
                rows.append({"transport": o.transport, "opcode": k, "operation": o.name, **_rate(e, dur)})
        return rows

    def _by_p_key(self, dur: float) -> List[dict]:
        """P_Key rows in key order, with the base and the membership bit apart."""
        return [
            {
                "p_key": f"0x{k:04x}",
                "base": f"0x{k & 0x7FFF:04x}",
                "membership": "full" if k & 0x8000 else "limited",
                **_rate(e, dur),
            }
            for k in (np.nonzero(self.arrays["p_key"][0])[0].tolist() if "p_key" in self.arrays else [])
            for e in [self.arrays["p_key"][:, k]]
        ]

    def _by_endpoint(self) -> List[dict]:
        """Endpoint rows with what each sent and received, most bytes first."""
        eps = {}
        for side in ("tx", "rx"):
            for (addr, lid, mac), e in self.tables["endpoint_" + side].items():
                key = (addr, lid, mac)
                row = eps.setdefault(
                    key,
                    {
                        "endpoint": _endpoint(addr, lid, mac),
                        "tx_packets": 0,
                        "tx_bytes": 0,
                        "rx_packets": 0,
                        "rx_bytes": 0,
                    },
                )
                row[side + "_packets"] += int(e[0])
                row[side + "_bytes"] += int(e[1])
        return sorted(eps.values(), key=lambda r: -(r["tx_bytes"] + r["rx_bytes"]))

    def _by_mad(self, dur: float) -> List[dict]:
        """MAD rows by class, method and attribute."""
        mads = sorted(self.tables["mad"].items())
        if mads:  # names from the MAD table, loaded only when the capture has MADs
            from dissectors.madnames import summary as mad_summary
        return [
            {
                "class": MAD_CLASSES.get(c, f"0x{c:02x}"),
                "method": f"0x{m:02x}",
                "attribute": f"0x{a:04x}",
                "mad": mad_summary(c, m, a),
                **_rate(e, dur),
            }
            for (c, m, a), e in mads
        ]


def _rate(e, dur: float) -> dict:
    """Packets and bytes of one table entry, and its bit rate over the capture's duration."""
    return {"packets": int(e[0]), "bytes": int(e[1]), "bits_per_s": e[1] * 8 / dur if dur > 0 else None}


def _loss_hints(cnt: dict) -> List[str]:
    """Counters that hint at loss or a damaged capture, in words."""
    hints = []
    if cnt.get("nak"):
        hints.append(f"{cnt['nak']} NAKs (see `ibwire flows` for PSN sequence errors per QP)")
    if cnt.get("rnr_nak"):
        hints.append(f"{cnt['rnr_nak']} RNR NAKs: receivers ran out of posted receives")
    if cnt.get("truncated"):
        hints.append(f"{plural(cnt['truncated'], 'packet')} cut short by the capture snap length")
    if cnt.get("time_went_backwards"):
        hints.append(f"timestamps go backwards {cnt['time_went_backwards']} times: capture reordered or merged")
    if cnt.get("icrc_bad") or cnt.get("vcrc_bad"):
        hints.append("CRC failures: corrupted packets or a capture that rewrote headers")
    return hints


_HAS_AETH = np.array(["aeth" in lookup(c).headers for c in range(256)])


def _endpoint(addr: bytes, lid: int, mac: bytes) -> str:
    parts = []
    if lid:
        parts.append(f"LID {lid}")
    if addr.strip(b"\0"):
        parts.append(R.addr_text(addr))
    if mac and mac.strip(b"\0"):
        parts.append(R.mac_text(mac))
    return " ".join(parts) or "-"


def _span_state(path: str, icrc: bool, span, progress=None):
    s = scan(path, icrc=icrc, span=span)
    st = Stats()
    for batch in s:
        st.add(batch)
        if progress:
            progress(len(batch), s.bytes_done)
    return st.state(), list(s.problems)


def compute_file(path: str, icrc: bool = True, progress=None, workers: int = 0) -> dict:
    """Statistics of a capture file; big pcap/pcapng files are cut into spans decoded by `workers` processes
    (default: one per CPU), since record decoding is independent from packet to packet."""
    workers = processes(workers, os.path.getsize(path) // MIN_SPAN)
    cut = spans(path, workers) if workers > 1 else None
    if not cut:
        return compute(scan(path, icrc), progress)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(len(cut) - 1) as pool:
        pending = [pool.apply_async(_span_state, (path, icrc, sp)) for sp in cut[1:]]
        share = len(cut)
        scaled = (lambda n, done: progress(n * share, done * share)) if progress else None
        try:
            parts = [_span_state(path, icrc, cut[0], scaled)] + [p.get() for p in pending]
        except SpanContextLost:  # a pcapng section or interface appears mid-file: read it in one piece
            for p in pending:  # leave the pool with idle workers: terminating busy ones hung its join once
                p.wait()
            parts = None
    if parts is None:
        return compute(scan(path, icrc), progress)
    st = Stats()
    problems = []
    for state, probs in parts:
        st.merge(state)
        problems += probs
    res = st.result()
    res["problems"] = problems
    return res


def compute(scan, progress=None) -> dict:
    st = Stats()
    for batch in scan:
        st.add(batch)
        if progress:
            progress(len(batch), scan.bytes_done)
    res = st.result()
    res["problems"] = list(scan.problems)
    return res
