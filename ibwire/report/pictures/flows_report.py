"""`ibwire flows --report`: one HTML page of pictures of a capture's conversations.

Throughput and packets over time in total and per conversation; per RC/UC/XRC conversation a PSN-over-time
graph per requester (tcptrace style: requests as ticks, the ACKed PSN as a step line, READ responses as
dots, drops, retransmissions, NAKs, bad ICRCs and RNR waits marked); ACK and READ latency histograms; a
ladder diagram of one conversation.  The numbers in the tables are `flows.analyse`'s; the marks are its
sequencer's verdicts on each frame, drawn by `series.channel`.
"""

import os
from typing import List, Optional

import numpy as np

from dissectors.opcodes import AETH_ACK, AETH_NAK, AETH_RNR_NAK
from ibwire.analyze import retries
from ibwire.analyze import series as S
from ibwire.errors import UserError
from ibwire.report.pictures.ladder import choose, ladder
from ibwire.report.pictures.page import page, write_html
from ibwire.report.pictures.svg import PALETTE, Plot, esc, si
from ibwire.report.tables import label as worded
from ibwire.words import plural

SEQUENCED = ("RC", "UC", "XRC")
MAX_TICKS = 3000  # request ticks drawn per PSN graph (every k-th beyond that; marks always drawn)


def _rel(v: float) -> str:
    return si(v, "s")


def _colour(k: int, n: int) -> str:
    """The total (first of several lines) light and wide underneath, conversations in the palette."""
    return "#bbbbbb" if k == 0 and n > 1 else PALETTE[(k - (n > 1)) % len(PALETTE)]


def _time_charts(name: str, bins: List[S.TimeBins], labels: List[str], t_end: float, kind: str, attrs: dict) -> str:
    """Throughput (bits/s) and packets per interval, one line per TimeBins."""
    out = []
    width = bins[0].width
    for key, ylabel, title in (("bits_per_s", "bits/s", "throughput"), ("packets", "packets per interval", "packets")):
        series = []
        for tb in bins:
            rows = tb.rows()
            xs = [r["start_s"] for r in rows]
            ys = [r[key] for r in rows]
            series.append((xs, ys))
        ymax = max((max(ys) for _, ys in series if ys), default=1)
        p = Plot(
            f"{kind} {title}",
            (0, max(t_end, width)),
            (0, ymax * 1.05 or 1),
            height=230,
            top=40 if len(labels) > 1 else 24,
            attrs={**attrs, "interval": width, "sum": sum(series[0][1])},
        )
        p.axes(f"{name}: {title} per {si(width, 's')}", "time since capture start", ylabel, _rel, si)
        for k, ((xs, ys), label) in enumerate(zip(series, labels)):
            # each interval drawn as a flat step over its width
            sx, sy = [], []
            for x, y in zip(xs, ys):
                sx += [x, x + width]
                sy += [y, y]
            p.polyline(sx, sy, _colour(k, len(labels)), label, width=3.5 if k == 0 and len(labels) > 1 else 1.5)
        if len(labels) > 1:
            p.legend([(label, _colour(k, len(labels))) for k, label in enumerate(labels)])
        out.append(p.svg())
    return "".join(out)


def _psn_chart(conv: dict, side: int, ch: dict, t0: float) -> str:
    """The PSN graph of one requester of a conversation, PSNs counted from its first request."""
    u0 = int(ch["psn"][ch["is_req"]].min())
    t = ch["time"] - t0
    y = ch["psn"] - u0
    p = _psn_plot(conv, side, ch, t, y, u0)
    p.bands("rnr-wait", [(a - t0, b - t0, f"RNR wait {si(b - a, 's')}") for a, b in ch["rnr_waits"]], "#9467bd")
    _psn_progress(p, ch, t, y, u0)
    _psn_trouble(p, ch, t, y, u0, t0)
    p.legend(
        [
            ("request", "#1f77b4"),
            ("ACKed", "#2ca02c"),
            ("lost", "#d62728"),
            ("not captured", "#999999"),
            ("retransmit", "#ff7f0e"),
            ("NAK", "#e377c2"),
            ("RNR NAK/wait", "#9467bd"),
        ]
    )
    return p.svg()


def _psn_plot(conv: dict, side: int, ch: dict, t: np.ndarray, y: np.ndarray, u0: int) -> Plot:
    """The empty PSN graph with its axes: the capture's time span, PSNs from 0 up."""
    sender, receiver = (conv["a"], conv["b"]) if side == 0 else (conv["b"], conv["a"])
    c = ch["counts"]
    ymax = float(y.max()) if len(y) else 1.0
    lo, hi = float(t.min()), float(t.max())
    pad = (hi - lo) * 0.03 or 1e-6
    p = Plot(
        "psn",
        (max(lo - pad, 0.0), hi + pad),
        (min(0.0, float(y.min())), ymax + 1),
        height=310,
        top=40,
        attrs={"conversation": conv["conversation"], "sender": sender, **c},
    )
    p.axes(
        f"PSN over time: {sender} → {receiver} (first PSN 0x{u0 % S.PSN_MOD:06x})",
        "time since capture start",
        "PSN − first PSN",
        _rel,
        lambda v: f"{v:g}",
    )
    return p


def _psn_progress(p: Plot, ch: dict, t: np.ndarray, y: np.ndarray, u0: int) -> None:
    """Requests as ticks (every k-th beyond MAX_TICKS), the ACKed PSN as a step line, READ responses as dots."""
    req = ch["is_req"] & ~ch["bad"]
    ri = np.nonzero(req & ~ch["retrans"])[0]
    if len(ri) > MAX_TICKS:
        ri = ri[:: -(-len(ri) // MAX_TICKS)]
    p.marks("request", ((t[i], y[i], f"PSN {y[i] + u0:#x}") for i in ri.tolist()), "tick", "#1f77b4")
    acks = ((ch["syn"] == AETH_ACK) | S.IS_READ_LAST[ch["opcode"]]) & ~ch["is_req"]
    ai = np.nonzero(acks)[0]
    if len(ai):
        p.polyline(t[ai], np.maximum.accumulate(y[ai]), "#2ca02c", "ACKed PSN", step=True)
    rr = np.nonzero(S.IS_READ_RESP[ch["opcode"]] & ~ch["is_req"])[0]
    if len(rr):
        p.marks(
            "read-response",
            ((t[i], y[i], f"READ response PSN {y[i] + u0:#x}") for i in rr[:: max(1, len(rr) // MAX_TICKS)].tolist()),
            "dot",
            "#17becf",
        )


def _psn_trouble(p: Plot, ch: dict, t: np.ndarray, y: np.ndarray, u0: int, t0: float) -> None:
    """Marks for drops, PSNs not captured, retransmissions, late packets, bad ICRCs, NAKs and RNR NAKs."""
    p.marks(
        "drop",
        ((a - t0, b - u0, f"PSN {b % S.PSN_MOD:#x} lost: resent later") for a, b in ch["drop_points"]),
        "x",
        "#d62728",
    )
    p.marks(
        "not-captured",
        (
            (a - t0, b - u0, f"PSN {b % S.PSN_MOD:#x} not captured: never resent, the peer went on")
            for a, b in ch["gap_points"]
        ),
        "x",
        "#999999",
    )
    p.marks(
        "retransmission",
        (
            (t[i], y[i], f"retransmission of PSN {(y[i] + u0) % S.PSN_MOD:#x}")
            for i in np.nonzero(ch["retrans"])[0].tolist()
        ),
        "ring",
        "#ff7f0e",
    )
    p.marks(
        "out-of-order",
        ((t[i], y[i], "late (out of order)") for i in np.nonzero(ch["late"])[0].tolist()),
        "ring",
        "#bcbd22",
    )
    p.marks(
        "bad-icrc", ((t[i], y[i], "bad ICRC: discarded") for i in np.nonzero(ch["bad"])[0].tolist()), "x", "#8c564b"
    )
    p.marks("nak", ((t[i], y[i], "NAK") for i in np.nonzero(ch["syn"] == AETH_NAK)[0].tolist()), "tri", "#e377c2")
    p.marks(
        "rnr-nak",
        ((t[i], y[i], "RNR NAK") for i in np.nonzero(ch["syn"] == AETH_RNR_NAK)[0].tolist()),
        "tri",
        "#9467bd",
    )


def _histogram(title: str, kind: str, samples_s: np.ndarray, conv_no, analysis: Optional[dict]) -> str:
    us = np.asarray(samples_s) * 1e6
    hi = float(np.percentile(us, 99.5)) if len(us) > 20 else float(us.max())
    hi = hi if hi > 0 else 1.0
    edges = np.linspace(0, hi * 1.02, 31)
    counts, _ = np.histogram(np.clip(us, 0, edges[-1]), edges)
    p = Plot(
        f"histogram {kind}",
        (0, float(edges[-1])),
        (0, float(counts.max()) * 1.1 or 1),
        height=200,
        attrs={
            "conversation": conv_no,
            "samples": len(us),
            "analysis-samples": (analysis or {}).get("n", ""),
            "p50": (analysis or {}).get("p50", ""),
        },
    )
    p.axes(
        f"{title} ({len(us)} samples; beyond the last bar counted in it)",
        "µs",
        "count",
        lambda v: f"{v:g}",
        lambda v: f"{v:g}",
    )
    p.bars(
        list(edges),
        counts.tolist(),
        "#1f77b4",
        [f"{a:.2f}–{b:.2f} µs: {c}" for a, b, c in zip(edges[:-1], edges[1:], counts.tolist())],
    )
    return p.svg()


def _table(rows: List[dict]) -> str:
    keys = (
        "conversation",
        "transport",
        "a",
        "qpn_a",
        "b",
        "qpn_b",
        "p_key",
        "packets",
        "payload_bytes",
        "drops",
        "retransmissions",
        "out_of_order",
        "naks",
        "rnr_naks",
        "bad_icrc",
        "ack p50/p99 µs",
    )
    out = ["<table id='conversations'><tr>" + "".join(f"<th>{esc(worded(k))}</th>" for k in keys) + "</tr>"]
    for r in rows:
        lat = r.get("ack_latency_us")
        vals = {
            **r,
            "packets": r["packets_a_to_b"] + r["packets_b_to_a"],
            "naks": sum((r.get("naks") or {}).values()) if r.get("naks") is not None else "",
            "ack p50/p99 µs": f"{lat['p50']:g} / {lat['p99']:g}" if lat else "",
        }
        out.append(
            f"<tr data-conversation='{r['conversation']}'>"
            + "".join(
                f"<td class='{'n' if isinstance(vals.get(k), (int, float)) else ''}' data-key='{k}'>"
                f"{esc('' if vals.get(k) is None else vals.get(k))}</td>"
                for k in keys
            )
            + "</tr>"
        )
    out.append("</table>")
    return "".join(out)


def _overview(path: str, rows: List[dict], shown: List[tuple], c: S.Collected, width: float, t_end: float) -> List[str]:
    """The page's head: what the capture holds, the table of every conversation and all traffic over time
    (in total and per conversation `shown`, pairs of row and position)."""
    body = [
        f"<p>{esc(path)}: {plural(sum(r['packets'] for r in c.total.rows()), 'packet')}, "
        f"{plural(len(rows), 'conversation')}, "
        f"{si(t_end, 's')}; intervals of {si(width, 's')}. Pictures of the {len(shown)} busiest RC/UC/XRC "
        "conversations; the tables hold the analysis's numbers.</p>",
        "<h2>Conversations</h2>",
        _table(rows),
        "<h2 id='total'>All traffic over time</h2>",
    ]
    if c.total.beyond:
        body.append(
            f"<p class='note'>{plural(c.total.beyond, 'packet')} lie more than {c.total.MAX:,} intervals "
            "after the first one and are not in the time charts (choose a longer --interval, or the capture "
            "has a wrong timestamp).</p>"
        )
    per = [(r, c.per_conv[i]) for r, i in shown if i in c.per_conv]
    body.append(
        _time_charts(
            "all packets",
            [c.total] + [tb for _, tb in per],
            ["all"] + [f"#{r['conversation']}" for r, _ in per],
            t_end,
            "time",
            {"scope": "total"},
        )
    )
    return body


def _section_head(r: dict) -> List[str]:
    """A conversation section's heading and its notes: the analysis's loss and error counts, its retries."""
    body = [
        f"<section class='qp' id='conv-{r['conversation']}' data-conversation='{r['conversation']}' "
        f"data-transport='{r['transport']}'>"
        f"<h2>#{r['conversation']} {esc(r['transport'])}: {esc(r['a'])} QPN {esc(r['qpn_a'])} ↔ "
        f"{esc(r['b'])} QPN {esc(r['qpn_b'])}</h2>"
    ]
    facts = [
        f"{k.replace('_', ' ')} {r[k]}"
        for k in ("drops", "not_captured", "retransmissions", "out_of_order", "rnr_naks", "bad_icrc")
        if r.get(k)
    ]
    facts += [f"NAK {k} {v}" for k, v in (r.get("naks") or {}).items()]
    if r.get("not_analysed"):
        facts.insert(0, "not analysed: " + r["not_analysed"])
    body.append(f"<p class='note'>{esc('; '.join(facts) or 'no loss or error seen')}</p>")
    body += [f"<p class='note retries'>{esc(t)}</p>" for t in retries.paragraph(r)]
    return body


def _conversation(r: dict, i: int, c: S.Collected, t0: float, t_end: float, latency: tuple) -> List[str]:
    """The section of conversation `r` (position `i`): a PSN graph per requester, its traffic over time and
    its ACK and READ latency histograms (`latency`: the sequencer's samples, those its row summarises)."""
    body = _section_head(r)
    pk = c.packets.get(i)
    if pk is None:
        body.append("<p>No packet of this conversation passed the filter.</p></section>")
        return body
    if i in c.thinned:
        whole, seen, since = c.thinned[i]
        body.append(
            f"<p class='note thinned' data-kept='{whole}' data-seen='{seen}'>The graphs draw the first "
            f"{whole:,} of this conversation's {seen:,} packets whole (until {_rel(since - t0)}); after "
            "that they keep only what is marked (drops, retransmissions, NAKs, RNR NAKs and their "
            "waits, bad ICRCs) and the requests around it, so later ACKs and latencies are not drawn. "
            "The table above counts every packet.</p>"
        )
    for side in (0, 1):
        ch = S.channel(pk, side)
        if ch is not None:
            body.append(_psn_chart(r, side, ch, t0))
    if i in c.per_conv:
        body.append(
            _time_charts(
                f"#{r['conversation']}",
                [c.per_conv[i]],
                [f"#{r['conversation']}"],
                t_end,
                "time",
                {"scope": "conversation", "conversation": r["conversation"]},
            )
        )
    for title, kind, v, key in (
        ("ACK latency", "ack-latency", latency[0], "ack_latency_us"),
        ("READ latency", "read-latency", latency[1], "read_latency_us"),
    ):
        if len(v):
            body.append(_histogram(f"#{r['conversation']} {title}", kind, v, r["conversation"], r.get(key)))
    body.append("</section>")
    return body


def _ladder_section(
    rows: List[dict], pick: Optional[int], ladder_qp: Optional[int], c: S.Collected, t0: float
) -> List[str]:
    """The ladder diagram of conversation `pick` (chosen by `ladder.choose`), or why there is none."""
    body = ["<h2 id='ladder'>Ladder diagram</h2>"]
    if pick is None:
        body.append(
            f"<p>No conversation uses QPN 0x{ladder_qp:06x}: no ladder drawn.</p>"
            if ladder_qp is not None
            else "<p>No conversation to draw.</p>"
        )
        return body
    r = rows[pick]
    body.append(
        f"<p>Conversation #{r['conversation']} ({esc(r['transport'])}): its CM messages and its packets "
        f"in capture order (choose another with <code>--ladder QPN</code>).</p>"
    )
    body.append(ladder(r, c.packets.get(pick), c.cm, t0))
    return body


def render(
    path: str,
    result: dict,
    interval: Optional[float] = None,
    top: int = 8,
    ladder_qp: Optional[int] = None,
    icrc: bool = True,
    mask=None,
) -> str:
    """The report page for the capture at `path`, whose `flows.analyse` result is `result` (with `marks`: the
    frames its sequencer marked, frames.marked)."""
    rows = result["conversations"]
    starts = [r["first_time"] for r in rows if r["first_time"] is not None]
    ends = [r["first_time"] + r["duration_s"] for r in rows if r["first_time"] is not None]
    duration = (max(ends) - min(starts)) if starts else 0.0
    width = interval or S.interval_for(duration)
    sequenced = [r for r in rows if r["transport"] in SEQUENCED]
    shown = sequenced[:top] if top else sequenced
    idx = {r["conversation"]: i for i, r in enumerate(rows)}
    shown_at = [(r, idx[r["conversation"]]) for r in shown]
    pick = choose(rows, ladder_qp)
    drawn = {i for _, i in shown_at} | ({pick} if pick is not None else set())
    c = S.collect(path, rows, drawn, width, result["marks"], icrc, mask)
    t0 = c.total.t0 or 0.0
    t_end = max(duration + (min(starts) - t0 if starts else 0), len(c.total.rows()) * width)
    body = _overview(path, rows, shown_at, c, width, t_end)
    for r, i in shown_at:
        body += _conversation(r, i, c, t0, t_end, result["latency_samples"][r["conversation"]])
    body += _ladder_section(rows, pick, ladder_qp, c, t0)
    if result.get("capture"):  # the capture's own drops, tied to the PSNs not captured
        body.append(f"<h2>The capture's own drops</h2><p>{esc(result['capture']['text'])}</p>")
    if result.get("problems"):
        body.append(
            "<h2>Problems reading the capture</h2><ul>"
            + "".join(f"<li>{esc(p)}</li>" for p in result["problems"])
            + "</ul>"
        )
    return page(f"ibwire flows: {os.path.basename(path)}", "".join(body), "flows")


def write_report(
    path: str,
    out: str,
    result: dict,
    interval: Optional[float],
    top: int,
    ladder_qp: Optional[int],
    icrc: bool = True,
    mask=None,
) -> None:
    """`ibwire flows --report OUT`: render and write the page atomically (never over the capture)."""
    if interval is not None and not interval > 0:
        raise UserError(f"--interval takes a positive number of seconds, not {interval}")
    write_html(out, render(path, result, interval, top, ladder_qp, icrc, mask), inputs=(path,))
