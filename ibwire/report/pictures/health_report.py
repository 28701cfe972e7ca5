"""`ibwire health --report`: one HTML page of a capture's lossless-Ethernet health.

Pause time per priority over time (the fraction of each interval a priority was paused, from the pause
episodes), per flow the ECN-CE marks, CNPs and the sender's rate over time, the flows per ECMP path, and
the findings.  Every number comes from `analyze.health.analyse` (its `series` for the per-packet marks).
"""

from typing import List

import numpy as np

from ibwire.report.pictures.page import page, write_html
from ibwire.report.pictures.svg import PALETTE, Plot, esc, si

BINS = 200


def _rel(v: float) -> str:
    return si(v, "s")


def _pause_chart(res: dict, t_end: float) -> str:
    """Per direction (port, or port → the port it pauses when known) and priority, the paused fraction of each
    of BINS intervals; episodes as tooltipped bands."""
    ports = res["pause"]
    if not ports:
        return "<p class='note'>No PAUSE or PFC frames.</p>"
    width = max(t_end, 1e-6) / BINS
    edges = np.arange(BINS + 1) * width
    p = Plot("pause", (0, BINS * width), (0, 1.05), height=260, top=40, attrs={"interval": width})
    p.axes(
        f"paused fraction per {si(width, 's')}, per port and priority",
        "time since capture start",
        "fraction paused",
        _rel,
        lambda v: f"{v:.0%}",
    )
    keys = []
    for k, e in enumerate(ports):
        frac = np.zeros(BINS)
        for ep in e["episodes"]:
            a, b = ep["start_s"], ep["start_s"] + ep["duration_s"]
            frac += np.clip(np.minimum(edges[1:], b) - np.maximum(edges[:-1], a), 0, None) / width
        name = f"{e['direction']} P{e['priority']}"
        colour = PALETTE[k % len(PALETTE)]
        p.polyline(np.repeat(edges, 2)[1:-1], np.repeat(np.minimum(frac, 1), 2), colour, name)
        p.bands(
            f"episode p{e['priority']}",
            [
                (
                    ep["start_s"],
                    ep["start_s"] + ep["duration_s"],
                    f"{name}: paused {si(ep['duration_s'], 's')} from frame {ep['first_frame']} to {ep['last_frame']}",
                )
                for ep in e["episodes"]
            ],
            colour,
        )
        keys.append((name, colour))
    p.legend(keys)
    return p.svg()


def _flow_chart(c: dict, s: dict) -> str:
    """One flow over its own span: its rate per interval (line), CE marks and CNPs (marks)."""
    rate = np.asarray(s["rate_bps"], float)
    ymax = max(float(rate.max()) if len(rate) else 0, 1.0)
    edges = np.linspace(s["start_s"], s["end_s"], len(rate) + 1)
    p = Plot(
        "congestion",
        (s["start_s"], s["end_s"]),
        (0, ymax * 1.15),
        height=220,
        top=40,
        attrs={"flow": c["flow"], "ce": len(s["ce_s"]), "cnps": len(s["cnp_s"]), "interval": edges[1] - edges[0]},
    )
    p.axes(
        f"{c['flow']}: sender rate per {si(edges[1] - edges[0], 's')}, ECN-CE marks and CNPs",
        "time since capture start",
        "bits/s",
        _rel,
        si,
    )
    p.polyline(np.repeat(edges, 2)[1:-1], np.repeat(rate, 2), PALETTE[0], "rate")
    p.marks("ce", [(t, ymax * 1.05, f"ECN-CE at {si(t, 's')}") for t in s["ce_s"]], "tick", "#d62728")
    p.marks("cnp", [(t, ymax * 1.1, f"CNP at {si(t, 's')}") for t in s["cnp_s"]], "tri", "#2ca02c")
    p.legend([("rate", PALETTE[0]), ("ECN-CE", "#d62728"), ("CNP", "#2ca02c")])
    return p.svg()


def _spread_chart(res: dict) -> str:
    spread = res["ecmp"]["flows_per_path"]
    n = len(spread["crc"])
    if not res["ecmp"]["flows"]:
        return "<p class='note'>No RoCEv2 flows.</p>"
    out = []
    for h in ("crc", "modulo"):
        counts = spread[h]
        p = Plot(f"spread {h}", (0, n), (0, max(max(counts), 1) * 1.1), height=200, attrs={"hash": h})
        p.axes(
            f"RoCEv2 flows per ECMP path ({'CRC-32 of the 5-tuple' if h == 'crc' else 'source port modulo'} {n})",
            "path",
            "flows",
            lambda v: f"{v:g}",
            lambda v: f"{v:g}",
        )
        p.bars(list(range(n + 1)), counts, PALETTE[2], [f"path {i}: {c} flows" for i, c in enumerate(counts)])
        out.append(p.svg())
    return "".join(out)


def _findings(res: dict) -> str:
    if not res["findings"]:
        return "<p>No finding.</p>"
    rows = "".join(
        f"<tr class='finding {esc(f['severity'])}'><td>{esc(f['severity'])}</td><td>{esc(f['text'])}</td>"
        f"<td class='n'>{f['frame_count']}</td><td><code>{esc(f['filter'])}</code></td></tr>"
        for f in res["findings"]
    )
    return f"<table><tr><th>severity</th><th>finding</th><th>frames</th><th>display filter</th></tr>{rows}</table>"


def report(res: dict, path: str, source: str) -> None:
    """Write the page for the result `res` of analyse(..., series=True) to `path`."""
    t_end = res["series"]["t_end"]
    body: List[str] = [
        f"<p class='note'>{esc(source)}: {res['roce_packets']:,} RoCE packets; pause times at "
        f"{si(res['port_speed_bps'], 'b/s')}; storm threshold {res['storm_ms']:g} ms.</p>",
        "<h2>Findings</h2>",
        _findings(res),
        "<h2>Pauses</h2>",
        _pause_chart(res, t_end),
        "<h2>Congestion per flow</h2>",
    ]
    flows = res["series"]["flows"]
    body += [_flow_chart(c, s) for c, s in zip(res["congestion"], flows)] or [
        "<p class='note'>No ECN-CE marks or CNPs.</p>"
    ]
    body += ["<h2>ECMP source-port spread</h2>", _spread_chart(res)]
    write_html(path, page("ibwire health", "".join(body), "health"), inputs=[source])
