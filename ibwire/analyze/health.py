"""Lossless-Ethernet health of a RoCE capture: PFC pauses, ECN/CNP reaction (DCQCN), ECMP entropy, DSCP/PCP.

The compiled records give every RoCE packet's addresses, QP, opcode, ECN, DSCP, PCP and UDP source port,
and every PAUSE and PFC frame's opcode, class-enable vector and quanta; only the rare LLDP (0x88cc) frames
are read as bytes (dissectors.dcbfacts).

* Pauses (IEEE 802.1Qbb, 802.3x): per direction (the capture's interface, the sending port's MAC → the
  port at the other end of the link, which the pause stops) and priority, a frame with quanta q > 0 is
  an XOFF that pauses the priority for q × 512 bit times at the port speed, q = 0 an XON that ends the
  pause.  An episode is a stretch of continuous pause (XOFFs refreshing it before it expires); one longer
  than the storm threshold is a pause storm, as switch PFC watchdogs judge it.
* The priority of a RoCE packet is its VLAN PCP, or on untagged frames DSCP >> 3 (the default DSCP to
  priority map of trust-DSCP ports).  Priorities PFC protects come from LLDP DCBX PFC Configuration TLVs or
  `--qos pfc_priority=`.
* Congestion: a flow is one direction of a QP (source, destination, destination QP).  Its partner QP is
  the destination QP of what comes back (ACKs, responses); a CNP (opcode 0x81) to the partner QP answers
  the flow's ECN-CE marks.  Around each CNP the sender's rate is measured over a window before and after.
* ECMP: each RoCEv2 flow's UDP source ports, and the path each would take among N paths by a modulo of the
  source port and by a CRC-32 of the 5-tuple.
"""

import math
import zlib
from collections import Counter, defaultdict
from typing import Dict, List, Optional

import numpy as np

from dissectors.dcbfacts import ALL_PRIORITIES, parse_dcbx, pause_seconds
from dissectors.numbers import MACC_OPCODE_PAUSE, MACC_OPCODE_PFC, ROCE_V2_PORT
from dissectors.opcodes import OPCODES
from ibwire.analyze.hashing import group_rows
from ibwire.analyze.healthflows import find_flows, qp_groups, row_end, row_ends, rows_per_group
from ibwire.analyze.healthrows import QUANTA, Capture, read
from ibwire.decode import records as R

KINDS = ("data", "ACK", "CNP", "MAD", "CM")
DATA, ACK, CNP, MAD, CM = range(len(KINDS))
CNP_OPCODE = 0x81
_KIND_OF_OPCODE = np.array(
    [
        CNP if c == CNP_OPCODE else ACK if c in OPCODES and OPCODES[c].op in ("ack", "atomic_ack") else DATA
        for c in range(256)
    ],
    np.int8,
)
MIN_JUDGED = 8  # packets the sender sent in the window before a CNP for its reaction to be judged


class Settings:
    """Thresholds and expectations (`ibwire health` options)."""

    def __init__(
        self,
        port_speed: float = 100e9,
        storm_ms: float = 300.0,
        paths: int = 8,
        window_us: float = 20.0,
        cut: float = 0.1,
        qos: Optional[Dict[str, int]] = None,
    ):
        self.port_speed, self.storm_s, self.paths = port_speed, storm_ms / 1e3, paths
        self.window, self.cut, self.qos = window_us / 1e6, cut, dict(qos or {})


def kinds(nums) -> np.ndarray:
    """Message kind of each RoCE packet (KINDS): a CNP by its opcode, else MAD (CM for class 7) when a MAD
    was decoded, else ACK or data by the opcode."""
    k = _KIND_OF_OPCODE[nums["opcode"]]
    mad = np.flatnonzero(nums["flags"] & R.F_MAD)  # few: one pass for the kinds of all the others
    mad = mad[k[mad] != CNP]
    k[mad] = np.where(nums["mad_class"][mad] == 7, CM, MAD)
    return k


def carries(kind: np.ndarray) -> np.ndarray:
    """Data or ACK (the kinds numbered 0 and 1): the packets a flow and its answers are made of."""
    return kind <= ACK


def marked(nums) -> np.ndarray:
    """Congestion marks: IP ECN-CE (RFC 3168) on RoCE, the BTH FECN bit on native InfiniBand (IBA §A10)."""
    native = nums["link"] - np.uint8(R.IB) <= R.IBGRH - R.IB  # IB or IBGRH: consecutive codes (wrapping below)
    if not native.any():
        return nums["ecn"] == 3
    return np.where(native, nums["fecn"] == 1, nums["ecn"] == 3)


def distinct(x: np.ndarray) -> List[int]:
    """The distinct values of small non-negative integers (DSCP, priority, port), ascending: a mark per
    value, not a sort."""
    if not len(x):
        return []
    seen = np.zeros(int(x.max()) + 1, bool)  # (an eighth of bincount's memory to clear and scan)
    seen[x] = True
    return np.flatnonzero(seen).tolist()


def priority(nums, tagged: np.ndarray) -> np.ndarray:
    """The 802.1p priority each packet travels in: its PCP when `tagged` (a VLAN tag), else DSCP >> 3."""
    if tagged.all():
        return nums["pcp"].copy()
    if not tagged.any():
        return nums["dscp"] >> 3
    return np.where(tagged, nums["pcp"], nums["dscp"] >> 3)


def analyse(path: str, settings: Settings, bins: int = 0) -> dict:
    """The health of a capture; with `bins`, also `series` for pictures: per congestion flow its CE and CNP
    times and its rate in `bins` intervals of the flow's span."""
    cap = read(path)
    rows, nums, t0 = cap.rows, cap.nums, cap.t0
    kind = kinds(nums)
    tagged = nums["vlan"] >= 0
    prio = priority(nums, tagged)
    ns = nums["time_ns"] - t0
    rel = ns / 1e9
    ns //= 1000  # µs now (in place: each 8-byte temporary is fresh memory, page faults)
    pause, dcbx = _pauses(cap, settings)
    qp = qp_groups(rows)
    data, back = kind == DATA, carries(kind)
    flows = find_flows(rows, nums["psn"], data, back, ns, qp)
    ce = np.flatnonzero(marked(nums) & data)  # a flow's marks: the marked data rows of its QP group
    ce_of = rows_per_group(qp[0][ce], len(qp[1]))
    for f in flows:
        f["ce"] = ce[ce_of[f["group"]]]
    first, counts = classes(nums, kind, qp[0], tagged, prio)
    out = {
        "capture": str(path),
        "port_speed_bps": settings.port_speed,
        "storm_ms": settings.storm_s * 1e3,
        "rate_window_us": settings.window * 1e6,
        "paths": settings.paths,
        "qos_expected": settings.qos,
        "roce_packets": int(len(rows)),
        "pause": pause,
        "dcbx": dcbx,
        "congestion": _congestion(
            rows, nums, kind, prio, rel, flows, data_classes(nums, kind, prio, qp[0], first), settings
        ),
        "ecmp": _ecmp(nums, flows, settings),
        "qos": _qos_table(rows, nums, kind, prio, first, counts),
        "problems": list(cap.problems),
    }
    out["findings"] = _findings(out, rows, nums, kind, prio, back, flows, settings)
    if bins:
        out["series"] = _series(out, rows, nums, kind, rel, flows, cap, bins, settings.window)
    for c in out["congestion"]:
        del c["_n"]
    for e in out["pause"]:
        for ep in e["episodes"]:
            del ep["_frames"]
    for e in out["ecmp"]["flows"]:
        del e["_ends"]
    return out


# ---- pauses ---------------------------------------------------------------------------------------------------


def _mac(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def _pause_events(cap: Capture) -> dict:
    """(interface, sender MAC, priority) -> [(seconds since the first packet, quanta, frame)] of every PAUSE
    (priority ALL_PRIORITIES) and PFC frame, in frame order, from the records' MAC control columns."""
    p = cap.pauses
    t = ((p["time_ns"] - cap.t0) / 1e9).tolist()
    op, enbv, frame = p["macc_opcode"].tolist(), p["macc_enbv"].tolist(), p["frame"].tolist()
    pause_time, iface = p["macc_pause_time"].tolist(), cap.pause_iface.tolist()
    quanta = np.stack([p[q] for q in QUANTA], axis=1).tolist() if len(p) else []
    macs: Dict[bytes, str] = {}
    events = defaultdict(list)
    for k in range(len(p)):
        raw = bytes(p["eth_src"][k])
        key = (iface[k], macs.get(raw) or macs.setdefault(raw, _mac(raw)))
        if op[k] == MACC_OPCODE_PAUSE:
            events[(*key, ALL_PRIORITIES)].append((t[k], pause_time[k], frame[k]))
        elif op[k] == MACC_OPCODE_PFC:
            for q in range(8):
                if enbv[k] >> q & 1:
                    events[(*key, q)].append((t[k], quanta[k][q], frame[k]))
    return events


def link_peers(talkers) -> dict:
    """(interface, MAC) -> the MAC at the other end of its link: the one other MAC that sends link-local
    control frames (PAUSE, PFC, LLDP) on that interface, as the two ends of a link do; None when there is
    none or more than one."""
    on = defaultdict(set)
    for i, mac in talkers:
        on[i].add(mac)
    return {(i, mac): min(on[i] - {mac}) if len(on[i] - {mac}) == 1 else None for i, mac in talkers}


def _episodes(ev, s: Settings) -> list:
    """Stretches of continuous pause of one direction and priority: an XOFF pauses for its quanta, a later
    XOFF before that runs out extends the stretch, an XON ends it."""
    episodes, cur = [], None
    for t, quanta, frame in ev:
        if quanta:
            if cur is None or t > cur["until"]:
                if cur is not None:
                    episodes.append(cur)
                cur = {"start": t, "until": t, "frames": []}
            cur["until"] = t + pause_seconds(quanta, s.port_speed)
            cur["frames"].append(frame)
        elif cur is not None:
            if t <= cur["until"]:
                cur["until"] = t
                cur["frames"].append(frame)
            episodes.append(cur)
            cur = None
    if cur is not None:
        episodes.append(cur)
    return episodes


def _pauses(cap: Capture, s: Settings):
    """Per direction (interface, sending port → the port it pauses) and priority: pause statistics with their
    episodes; and what LLDP DCBX announced, per port."""
    events = _pause_events(cap)
    dcbx, talkers = {}, {(i, port) for i, port, _ in events}
    for frame, _, iface, data in cap.lldp:
        talkers.add((iface, _mac(data[6:12])))
        d = parse_dcbx(data)
        if d:
            dcbx.setdefault(_mac(data[6:12]), {}).update(d, frame=frame)
    peers = link_peers(talkers)
    several = any(i for i, _ in talkers)  # a capture of more than one interface: each is a link of its own
    ports = []
    for (iface, port, p), ev in sorted(events.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        episodes = _episodes(ev, s)
        lengths = [e["until"] - e["start"] for e in episodes]
        peer = peers[(iface, port)]
        ports.append(
            {
                "port": port,
                "receiver": peer,
                "interface": iface if several else None,
                "direction": f"{port} → {peer or '?'}" + (f" on interface {iface}" if several else ""),
                "priority": "all" if p == ALL_PRIORITIES else p,
                "frames": len(ev),
                "xoff": sum(1 for e in ev if e[1]),
                "xon": sum(1 for e in ev if not e[1]),
                "episodes": [
                    {
                        "start_s": e["start"],
                        "duration_s": e["until"] - e["start"],
                        "first_frame": e["frames"][0],
                        "last_frame": e["frames"][-1],
                        "frames": len(e["frames"]),
                        "_frames": e["frames"],
                    }
                    for e in episodes
                ],
                "paused_s": float(sum(lengths)),
                "longest_s": float(max(lengths, default=0.0)),
            }
        )
    return ports, dcbx


# ---- flows, congestion ----------------------------------------------------------------------------------------


def _addr(b) -> str:
    """An end as text: an IP address or GID, or `LID n` on native InfiniBand without a GRH."""
    b = bytes(b)
    return f"LID {int.from_bytes(b[3:5], 'big')}" if b[:3] == b"LID" else R.addr_text(b)


def flow_name(f) -> str:
    return f"{_addr(f['src'])} → {_addr(f['dst'])} QP 0x{f['qp']:06x}"


def _cnp_rows(rows, kind, flows):
    """Flow index -> rows of the CNPs answering it."""
    cnps = np.flatnonzero(kind == CNP)
    sub = rows[cnps]
    by_target = defaultdict(list)
    for i, src, dst, qp in zip(cnps.tolist(), row_ends(sub, "src"), row_ends(sub, "dst"), sub["destqp"].tolist()):
        by_target[(src, dst, qp)].append(i)
        by_target[(src, dst, None)].append(i)
    per_pair = Counter((f["src"], f["dst"]) for f in flows)
    out = {}
    for n, f in enumerate(flows):
        got = by_target.get((f["dst"], f["src"], f["partner"])) if f["partner"] is not None else None
        if got is None and per_pair[(f["src"], f["dst"])] == 1:
            got = by_target.get((f["dst"], f["src"], None))  # the only flow between the two ends
        out[n] = np.array(got or [], np.int64)
    return out


def _rate(t, cum, a, b) -> float:
    """Bits per second of the flow's bytes sent in (a, b]."""
    lo, hi = np.searchsorted(t, [a, b], side="right")
    return float(cum[hi] - cum[lo]) * 8 / (b - a)


def _rates(t, cum, a, b) -> np.ndarray:
    """Bits per second of the flow's bytes sent in each window (a, b] where b > a, else 0 (as _rate, for
    arrays of windows)."""
    lo, hi = np.searchsorted(t, a, side="right"), np.searchsorted(t, b, side="right")
    return np.divide((cum[hi] - cum[lo]).astype(np.float64) * 8, b - a, out=np.zeros(len(a)), where=b > a)


def _reactions(t, cum, tcnp, s: Settings) -> List[dict]:
    """The sender's rate before and after each CNP at times `tcnp` of a flow whose packets were sent at `t`
    (`cum`: bytes sent before each), whether it cut its rate (when judged) and when it recovered."""
    # windows inside the flow's life: its start or end is no rate change
    a = np.maximum(tcnp - s.window, float(t[0]) - 1e-9)
    b = np.minimum(tcnp + s.window, float(t[-1]))
    before, after = _rates(t, cum, a, tcnp).tolist(), _rates(t, cum, tcnp, b).tolist()
    sent = (np.searchsorted(t, tcnp, side="right") - np.searchsorted(t, a, side="right")).tolist()
    judged = ((tcnp - a >= s.window / 2) & (b - tcnp >= s.window / 2)).tolist()
    out = []
    for k, tc in enumerate(tcnp.tolist()):
        cut = after[k] < before[k] * (1 - s.cut) if sent[k] >= MIN_JUDGED and judged[k] else None
        recovered = None
        if cut:
            for j in range(1, 200):
                w = tc + j * s.window
                if w + s.window > t[-1]:
                    break
                if _rate(t, cum, w, w + s.window) >= before[k] * (1 - s.cut):
                    recovered = j * s.window * 1e6
                    break
        out.append(
            {
                "time_s": tc,
                "rate_before_bps": before[k],
                "rate_after_bps": after[k],
                "packets_before": sent[k],
                "cut": cut,
                "recovered_after_us": recovered,
            }
        )
    return out


def _congestion(rows, nums, kind, prio, rel, flows, data_class: dict, s: Settings) -> List[dict]:
    """Per flow with CE marks or CNPs: marks, CNPs, their classes and the reactions to them.  `data_class`:
    data_classes."""
    cnp_of = _cnp_rows(rows, kind, flows)
    out, size = [], nums["len"]  # (a column: picking a flow's rows from it is quick)
    for n, f in enumerate(flows):
        m = f["rows"]
        ce = f["ce"]
        cnps = cnp_of[n]
        if not len(ce) and not len(cnps):
            continue
        t = rel[m]
        cum = np.concatenate(([0], np.cumsum(size[m], dtype=np.int64)))
        reactions = [
            {"cnp_frame": frame, **r}
            for frame, r in zip(rows["frame"][cnps].tolist(), _reactions(t, cum, rel[cnps], s) if len(cnps) else [])
        ]
        tcnp = rel[cnps] if len(cnps) else np.zeros(0)
        first_ce = float(rel[ce[0]]) if len(ce) else None
        answer = tcnp[tcnp >= first_ce] if first_ce is not None else tcnp[:0]
        gaps = np.diff(tcnp) * 1e6
        out.append(
            {
                "flow": flow_name(f),
                "src": _addr(f["src"]),
                "dst": _addr(f["dst"]),
                "qp": f["qp"],
                "partner_qp": f["partner"],
                "paired_by": f["paired_by"],
                "packets": int(len(m)),
                "ce_marked": int(len(ce)),
                "cnps": int(len(cnps)),
                "first_ce_frame": int(rows["frame"][ce[0]]) if len(ce) else None,
                "first_ce_to_cnp_us": float(answer[0] - first_ce) * 1e6 if len(answer) else None,
                "cnp_spacing_us": {"min": float(gaps.min()), "median": _median(gaps)} if len(gaps) else None,
                "cnp_dscp": distinct(nums["dscp"][cnps]),
                "data_dscp": data_class[f["group"]][0],
                "cnp_priority": distinct(prio[cnps]),
                "data_priority": data_class[f["group"]][1],
                "reactions": reactions,
                "_n": n,
            }
        )
    return out


def _median(x: np.ndarray) -> float:
    """np.median's value (the middle one, or the mean of the middle two), without the 12 ms of its first call."""
    s, k = np.sort(x), len(x) // 2
    return float(s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2)


def _series(out, rows, nums, kind, rel, flows, cap: Capture, bins: int, window: float, most: int = 5000) -> dict:
    control = [(int(cap.pauses["time_ns"].max()) - cap.t0) / 1e9] if len(cap.pauses) else []
    t_end = max([float(rel.max()) if len(rel) else 0.0] + control + [t for _, t, _, _ in cap.lldp])
    cnp_of = _cnp_rows(rows, kind, flows)
    per = []
    for c in out["congestion"]:
        m = flows[c["_n"]]["rows"]
        ce, cnp = flows[c["_n"]]["ce"], cnp_of[c["_n"]]
        t0 = float(min(rel[m].min(), rel[cnp].min() if len(cnp) else np.inf))
        t1 = float(max(rel[m].max(), rel[cnp].max() if len(cnp) else -np.inf))
        n = max(1, min(bins, math.ceil((t1 - t0) / window)))  # no finer than the rate window
        edges = np.linspace(t0, t0 + n * window if n < bins else max(t1, t0 + 1e-6), n + 1)
        rate = np.histogram(rel[m], edges, weights=nums["len"][m].astype(np.float64) * 8)[0] / (edges[1] - edges[0])
        per.append(
            {
                "flow": c["flow"],
                "ce_s": rel[ce][:most].tolist(),
                "cnp_s": rel[cnp][:most].tolist(),
                "start_s": t0,
                "end_s": float(edges[-1]),
                "rate_bps": rate.tolist(),
            }
        )
    return {"t_end": t_end, "bins": bins, "flows": per}


# ---- ECMP -----------------------------------------------------------------------------------------------------


def crc_path(src: bytes, dst: bytes, sport: int, paths: int) -> int:
    """The path a CRC-32 hash of the UDP 5-tuple picks (the kind of hash switches use for ECMP)."""
    key = src + dst + sport.to_bytes(2, "big") + ROCE_V2_PORT.to_bytes(2, "big") + b"\x11"
    return zlib.crc32(key) % paths


def _ecmp(nums, flows, s: Settings) -> dict:
    per, sport = [], nums["udp_src"]  # (a column, as _congestion's sizes)
    for f in flows:
        if f["link"] not in (R.ROCE2V4, R.ROCE2V6):
            continue
        ports = distinct(sport[f["rows"]])
        per.append(
            {
                "flow": flow_name(f),
                "src": _addr(f["src"]),
                "dst": _addr(f["dst"]),
                "qp": f["qp"],
                "udp_srcports": ports,
                "_ends": (f["src"], f["dst"]),
                "modulo_path": [p % s.paths for p in ports],
                "crc_path": [crc_path(bytes(f["src"]), bytes(f["dst"]), p, s.paths) for p in ports],
            }
        )
    spread = {
        h: np.bincount([x for e in per for x in e[f"{h}_path"]], minlength=s.paths).tolist() for h in ("modulo", "crc")
    }
    return {
        "flows": per,
        "distinct_srcports": len({p for e in per for p in e["udp_srcports"]}),
        "flows_per_path": spread,
    }


# ---- DSCP / PCP -----------------------------------------------------------------------------------------------


def classes(nums, kind, gid, tagged, prio):
    """The classes of traffic: rows of equal QP group (`gid`, qp_groups), kind, DSCP and PCP (or none:
    `tagged`, and `prio`, priority).  Each class's first row and its packets."""
    sub = kind.astype(np.int16) << 12  # kind (< 8) << 12 | DSCP (< 256) << 4 | PCP + 1, or 0 untagged (< 16)
    sub |= nums["dscp"].astype(np.int16) << 4
    if tagged.all():
        sub |= prio + np.uint8(1)  # (the PCPs, one column)
    elif tagged.any():
        sub |= (nums["pcp"] + np.uint8(1)) * tagged
    code = gid << 15  # one number per key: small numbers computed small, one pass over the 8-byte ones
    code |= sub
    _, first, inv = group_rows(code.view(np.dtype([("key", np.int64)])), ("key",))
    return first, np.bincount(inv, minlength=len(first))


def data_classes(nums, kind, prio, gid, first) -> Dict[int, tuple]:
    """QP group -> the DSCPs and the priorities of its data packets, ascending, read from the first rows of
    the classes (`first`, classes): a class has one DSCP and one priority."""
    seen = defaultdict(lambda: (set(), set()))
    for i in first[kind[first] == DATA].tolist():
        dscps, prios = seen[int(gid[i])]
        dscps.add(int(nums["dscp"][i]))
        prios.add(int(prio[i]))
    return {g: (sorted(d), sorted(p)) for g, (d, p) in seen.items()}


def _qos_table(rows, nums, kind, prio, first, counts) -> List[dict]:
    """Packets per (direction's ends and QP, kind, DSCP, PCP): one entry per class (classes)."""
    out = []
    for g, i in enumerate(first):
        out.append(
            {
                "src": _addr(row_end(rows, i, "src")),
                "dst": _addr(row_end(rows, i, "dst")),
                "qp": int(rows.end_of(i, "destqp")),
                "kind": KINDS[kind[i]],
                "dscp": int(nums["dscp"][i]),
                "pcp": int(nums["pcp"][i]) if nums["vlan"][i] >= 0 else None,
                "priority": int(prio[i]),
                "packets": int(counts[g]),
            }
        )
    return out


# ---- findings -------------------------------------------------------------------------------------------------

_MARK_FILTER = {
    R.ROCE2V6: "ipv6.tclass.ecn == 3",
    R.ROCE1: "grh.tclass & 3 == 3",
    R.IB: "bth.fecn == 1",
    R.IBGRH: "bth.fecn == 1",
}


def _ends_filter(link: int, src: str, dst: str) -> str:
    if src.startswith("LID "):
        return f"lrh.slid == {src[4:]} && lrh.dlid == {dst[4:]}"
    if link == R.ROCE2V4:
        return f"ip.src == {src} && ip.dst == {dst}"
    if link == R.ROCE2V6:
        return f"ipv6.src == {src} && ipv6.dst == {dst}"
    return f"grh.sgid == {src} && grh.dgid == {dst}"


def _finding(kind: str, severity: str, text: str, frames, flt: str, **more) -> dict:
    frames = [int(x) for x in frames]
    return {
        "kind": kind,
        "severity": severity,
        "text": text,
        "frames": frames[:50],
        "frame_count": len(frames),
        "filter": flt,
        **more,
    }


def _findings(out: dict, rows, nums, kind, prio, back, flows, s: Settings) -> List[dict]:
    """Every finding, in report order: pauses, unprotected RoCE, congestion per flow, ECMP and QoS classes.
    `back`: the data and ACK rows (carries)."""
    roce_prios = set(distinct(prio[back]))
    found = _pause_findings(out["pause"], rows, roce_prios, s)
    found += _unprotected_findings(out["dcbx"], rows, back, prio, roce_prios, s)
    found += _congestion_findings(out["congestion"], rows, flows, s)
    found += _ecmp_findings(out["ecmp"], s, rows, nums, back)
    found += _qos_findings(rows, nums, kind, prio, s)
    return found


def _pause_findings(pause: List[dict], rows, roce_prios: set, s: Settings) -> List[dict]:
    """Pause storms longer than the threshold, and pauses of a priority no RoCE traffic uses."""
    found = []
    for e in pause:
        cev = f" && macc.opcode == 0x{MACC_OPCODE_PAUSE:04x}"
        cev = cev if e["priority"] == "all" else f" && macc.cbfc.enbv.c{e['priority']} == 1"
        if e["interface"] is not None:
            cev += f" && frame.interface_id == {e['interface']}"
        towards = f" ({e['direction']})" if e["receiver"] or e["interface"] is not None else ""
        for ep in e["episodes"]:
            if ep["duration_s"] > s.storm_s:
                found.append(
                    _finding(
                        "pause_storm",
                        "error",
                        f"pause storm: port {e['port']} kept priority {e['priority']} paused for "
                        f"{ep['duration_s'] * 1e3:.0f} ms without a break (threshold {s.storm_s * 1e3:g} ms)" + towards,
                        ep["_frames"],
                        f"eth.src == {e['port']} && macc{cev} && frame.number >= {ep['first_frame']} && "
                        f"frame.number <= {ep['last_frame']}",
                        port=e["port"],
                        receiver=e["receiver"],
                        interface=e["interface"],
                        priority=e["priority"],
                        duration_s=ep["duration_s"],
                    )
                )
        if e["priority"] != "all" and e["xoff"] and e["priority"] not in roce_prios and len(rows):
            found.append(
                _finding(
                    "pause_without_roce",
                    "warning",
                    f"port {e['port']} pauses priority {e['priority']}, which carries no RoCE traffic "
                    f"(RoCE travels in priority {', '.join(map(str, sorted(roce_prios)))}){towards}",
                    [x for ep in e["episodes"] for x in ep["_frames"]],
                    f"eth.src == {e['port']} && macc{cev}",
                    port=e["port"],
                    receiver=e["receiver"],
                    interface=e["interface"],
                    priority=e["priority"],
                )
            )
    return found


def _unprotected_findings(dcbx: dict, rows, data, prio, roce_prios: set, s: Settings) -> List[dict]:
    """RoCE priorities outside those PFC protects (by DCBX or --qos), once either names any."""
    protected = set()
    for d in dcbx.values():
        protected |= set(d.get("pfc_enabled", []))
    if "pfc_priority" in s.qos:
        protected.add(s.qos["pfc_priority"])
    if not (protected or dcbx):
        return []
    found = []
    for p in sorted(roce_prios - protected):
        sel = np.flatnonzero(data & (prio == p))
        found.append(
            _finding(
                "roce_unprotected",
                "error",
                f"{len(sel)} RoCE packets travel in priority {p}, which PFC does not protect "
                f"(PFC on {', '.join(map(str, sorted(protected))) or 'no priority'})",
                rows["frame"][sel],
                f"bth.opcode != 0x81 && !mad && {_prio_filter(p)}",
                priority=p,
            )
        )
    return found


def _congestion_findings(congestion: List[dict], rows, flows, s: Settings) -> List[dict]:
    """Per flow: CE marks and how its CNPs were answered, then the class its CNPs travel in."""
    found = []
    by_n = {c["_n"]: c for c in congestion}
    for n, c in by_n.items():
        f = flows[n]
        cnp_qp = f" && bth.destqp == 0x{f['partner']:06x}" if f["partner"] is not None else ""
        cnp_filter = f"{_ends_filter(f['link'], c['dst'], c['src'])} && bth.opcode == 0x81{cnp_qp}"
        found += _cnp_answer_findings(c, f, rows, cnp_filter, s)
        found += _cnp_class_findings(c, cnp_filter, s)
    return found


def _cnp_answer_findings(c: dict, f: dict, rows, cnp_filter: str, s: Settings) -> List[dict]:
    """CE-marked packets no CNP answered, and CNPs after which the sender kept its rate."""
    found = []
    if c["ce_marked"] and not c["cnps"]:
        ce = f["ce"]
        ends = _ends_filter(f["link"], c["src"], c["dst"])
        found.append(
            _finding(
                "ce_unanswered",
                "error",
                f"{c['flow']}: {c['ce_marked']} packets marked ECN-CE, no CNP answered them",
                rows["frame"][ce],
                f"{ends} && bth.destqp == 0x{f['qp']:06x} && {_MARK_FILTER.get(f['link'], 'ip.dsfield.ecn == 3')}",
                flow=c["flow"],
            )
        )
    flat = [r["cnp_frame"] for r in c["reactions"] if r["cut"] is False]
    if flat:
        found.append(
            _finding(
                "cnp_no_rate_cut",
                "warning",  # an application-limited sender need not slow
                f"{c['flow']}: the sender kept its rate after {len(flat)} of the "
                f"{sum(r['cut'] is not None for r in c['reactions'])} CNPs judged "
                f"(less than a {s.cut:.0%} cut within {s.window * 1e6:g} µs)",
                flat,
                f"{cnp_filter} && frame.number in {{{', '.join(map(str, flat[:50]))}}}",
                flow=c["flow"],
            )
        )
    return found


def _cnp_class_findings(c: dict, cnp_filter: str, s: Settings) -> List[dict]:
    """CNPs in another DSCP than expected (or than the data's), else in another priority than the data."""
    found = []
    want = s.qos.get("cnp_dscp")
    bad_cnp = (
        [d for d in c["cnp_dscp"] if d != want]
        if want is not None
        else ([d for d in c["cnp_dscp"] if d not in c["data_dscp"]] if c["cnps"] else [])
    )
    if bad_cnp:
        what = f"the expected {want}" if want is not None else f"the data's {', '.join(map(str, c['data_dscp']))}"
        found.append(
            _finding(
                "cnp_class",
                "warning",
                f"{c['flow']}: CNPs carry DSCP {', '.join(map(str, bad_cnp))}, not {what}",
                [r["cnp_frame"] for r in c["reactions"]],
                cnp_filter,
                flow=c["flow"],
            )
        )
    off = [p for p in c["cnp_priority"] if p not in c["data_priority"]]
    if off and not bad_cnp and "cnp_priority" not in s.qos:  # (untagged: the DSCP finding says it)
        found.append(
            _finding(
                "cnp_class",
                "warning",
                f"{c['flow']}: CNPs travel in priority {', '.join(map(str, off))}, the data in "
                f"{', '.join(map(str, c['data_priority']))}",
                [r["cnp_frame"] for r in c["reactions"]],
                cnp_filter,
                flow=c["flow"],
            )
        )
    return found


def _prio_filter(p: int) -> str:
    lo, hi = p << 3, (p << 3) + 7
    return f"((vlan && vlan.priority == {p}) || (!vlan && ip.dsfield.dscp >= {lo} && ip.dsfield.dscp <= {hi}))"


def _frames_between(rows, nums, ends, sport: int):
    """Frames of the RoCE packets from one address to another with UDP source port `sport`."""
    src, dst = (np.frombuffer(e, "V16")[0] for e in ends)
    between = (rows.groups["src"] == src) & (rows.groups["dst"] == dst)  # per QP group
    return rows["frame"][between[rows["qp"]] & (nums["udp_src"] == sport)]


def _ecmp_findings(ecmp: dict, s: Settings, rows, nums, back) -> List[dict]:
    found = []
    by_ends = defaultdict(list)
    for e in ecmp["flows"]:
        by_ends[(e["src"], e["dst"])].append(e)
    for (src, dst), es in by_ends.items():
        ports = {p for e in es for p in e["udp_srcports"]}
        if len(es) >= 2 and len(ports) == 1:
            port = next(iter(ports))
            found.append(
                _finding(
                    "ecmp_one_srcport",
                    "warning",
                    f"{len(es)} QPs from {src} to {dst} all use UDP source port {port}: every one takes "
                    f"the same ECMP path",
                    _frames_between(rows, nums, es[0]["_ends"], port),
                    f"ip.src == {src} && ip.dst == {dst} && udp.srcport == {port}",
                    src=src,
                    dst=dst,
                )
            )
    n = len(ecmp["flows"])
    used = sum(1 for c in ecmp["flows_per_path"]["crc"] if c)
    if n >= 2 and used < min(n, s.paths) / 2:
        v2 = (rows["link"] == R.ROCE2V4) | (rows["link"] == R.ROCE2V6)
        found.append(
            _finding(
                "ecmp_low_entropy",
                "warning",
                f"{n} RoCEv2 flows with {ecmp['distinct_srcports']} distinct UDP source ports fall on "
                f"{used} of {s.paths} paths (CRC-32 hash of the 5-tuple)",
                rows["frame"][v2 & back],
                f"udp.dstport == {ROCE_V2_PORT} && !mad && bth.opcode != 0x81",
                paths_used=used,
            )
        )
    return found


def _qos_findings(rows, nums, kind, prio, s: Settings) -> List[dict]:
    found = []
    q = s.qos
    checks = []
    if "dscp" in q:
        checks.append(("data and ACK", carries(kind), "dscp", q["dscp"]))
    if "cnp_dscp" in q:
        checks.append(("CNP", kind == CNP, "dscp", q["cnp_dscp"]))
    if "pfc_priority" in q:
        checks.append(("data and ACK", carries(kind), "priority", q["pfc_priority"]))
    if "cnp_priority" in q:
        checks.append(("CNP", kind == CNP, "priority", q["cnp_priority"]))
    for what, sel, field, want in checks:
        have = nums["dscp"] if field == "dscp" else prio
        bad = np.flatnonzero(sel & (have != want))
        if len(bad):
            seen = Counter(have[bad].tolist())
            op = "bth.opcode == 0x81" if what == "CNP" else "bth.opcode != 0x81 && !mad"
            cond = f"ip.dsfield.dscp != {want}" if field == "dscp" else f"!{_prio_filter(want)}"
            found.append(
                _finding(
                    "qos_mismatch",
                    "error",
                    f"{len(bad)} {what} packets travel with {field.upper() if field == 'dscp' else field} "
                    f"{', '.join(map(str, sorted(seen)))}, not the expected {want}",
                    rows["frame"][bad],
                    f"bth && {op} && {cond}",
                    field=field,
                    expected=want,
                    message_kind=what,
                )
            )
    return found
