"""Pictures for the audit's HTML report: the subnet coloured by tenant (from the captures' SM traffic) and a
timeline of the findings, each drawn at the capture times of its evidence frames in a lane per severity."""

import os
from typing import Dict, Iterable, List

import numpy as np

from ibwire.decode.scan import scan
from ibwire.report.pictures.page import SVG_CSS
from ibwire.report.pictures.svg import PALETTE, Plot, esc, si
from ibwire.report.pictures.topology import topology_svg

LANES = ("info", "warning", "attempt", "breach")
SEVERITY_COLOURS = {"info": "#1f77b4", "warning": "#bcbd22", "attempt": "#ff7f0e", "breach": "#d62728"}


def frame_times(paths: Iterable[str], frames: set) -> Dict[int, int]:
    """Frame number -> capture time in ns, numbering on across files as the audit does; key 0 holds the
    first packet's time."""
    out: Dict[int, int] = {}
    if not frames:
        return out
    want = np.array(sorted(frames), np.int64)
    offset = 0
    for path in paths:
        last = 0
        for rec in scan(path, icrc=False):
            if not len(rec):
                continue
            fr = rec["frame"].astype(np.int64) + offset
            out.setdefault(0, int(rec["time_ns"][0]))
            hit = np.isin(fr, want)
            out.update(zip(fr[hit].tolist(), rec["time_ns"][hit].tolist()))
            last = int(rec["frame"][-1])
        offset += last
    return out


def tenant_topology(res, paths: List[str]) -> str:
    """The subnet of the first capture with NodeInfo, CAs filled with their tenant's colour."""
    from ibwire.analyze.fabric import fabric_view

    view = next((v for v in (fabric_view(p) for p in paths) if v["nodes"]), None)
    if view is None:
        return "<p class='note'>No subnet management traffic in the captures: no topology to draw.</p>"
    names = list(res.audit.tenants.names)
    fills = {t: PALETTE[i % len(PALETTE)] + "55" for i, t in enumerate(names)}
    colours = {}
    for p in view["ports"]:
        ep = res.audit.tenants.endpoint_of(p["guid"]) if p["guid"] is not None else None
        if ep is not None:
            colours[p["guid"]] = (ep.tenant, fills[ep.tenant], ep.label)
    legend = "".join(f"<span style='background:{c}'>{esc(t)}</span>" for t, c in fills.items())
    return f"<p class='legend'>{legend}<span>no tenant</span></p>" + topology_svg(view, colours)


def timeline(findings: List[dict], times: Dict[int, int]) -> str:
    """Findings with evidence frames as marks on a time axis (one lane per severity); the others listed."""
    timed = [f for f in findings if any(n in times for n in f["frames"])]
    untimed = [f for f in findings if f not in timed]
    parts = []
    if timed:
        t0 = times[0]
        span = max(times.values()) - t0
        lane = {s: i for i, s in enumerate(LANES)}
        p = Plot(
            "timeline",
            (0, max(span, 1) / 1e9 * 1.02),
            (-0.6, len(LANES) - 0.4),
            height=70 + 36 * len(LANES),
            left=80,
            attrs={"findings": len(timed), "marks": sum(sum(1 for n in f["frames"] if n in times) for f in timed)},
        )
        p.axes(
            "Findings over time (marks at each evidence frame)",
            "time since capture start",
            "",
            lambda v: si(v, "s"),
            lambda v: LANES[int(round(v))] if 0 <= round(v) < len(LANES) else "",
        )
        for k, f in enumerate(timed):
            y = lane[f["severity"]] + ((k % 5) - 2) * 0.09
            pts = [
                ((times[n] - t0) / 1e9, y, f"{f['severity']} {f['rule']} (frame {n}): {f['description']}")
                for n in f["frames"]
                if n in times
            ]
            if len(pts) > 1:
                p.polyline([a for a, _, _ in pts], [y] * len(pts), SEVERITY_COLOURS[f["severity"]], f["rule"])
            p.marks(
                f"finding {f['severity']}",
                pts,
                "dot" if f["severity"] == "info" else "tri",
                SEVERITY_COLOURS[f["severity"]],
            )
        parts.append(p.svg())
    if untimed:
        parts.append(
            "<p>Findings without evidence frames (from the policy and the programmed P_Key tables):</p><ul>"
            + "".join(
                f"<li><b>{esc(f['severity'])}</b> <code>{esc(f['rule'])}</code> {esc(f['description'])}</li>"
                for f in untimed
            )
            + "</ul>"
        )
    return "".join(parts) or "<p>No findings.</p>"


def audit_pictures(res, paths: Iterable[str]) -> str:
    """The two sections the audit report adds (empty when it audited no capture)."""
    paths = [str(p) for p in paths if os.path.isfile(str(p))]
    if not paths:
        return ""
    findings = [f.as_dict() for f in res.findings]
    times = frame_times(paths, {n for f in findings for n in f["frames"]})
    return (
        f"<style>{SVG_CSS}</style><h2>Topology by tenant</h2>"
        + tenant_topology(res, paths)
        + "<h2>Timeline of findings</h2>"
        + timeline(findings, times)
    )
