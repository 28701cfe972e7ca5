"""`ibwire stats --storage --report`: one HTML page of a capture's storage commands.

Per protocol (NVMe-oF, NFS over RDMA, iSER, SMB Direct): the table per opcode or procedure (IOPS, bytes/s,
latency percentiles, errors), a latency histogram per opcode, and latency over time: each command a mark at
its submission (errors as crosses), or, past MAX_MARKS commands, each interval's median, 99th percentile and
maximum.  Every number comes from `analyze.storage.analyse`, the rows `--format json` prints.
"""

from typing import Dict, List, Sequence

import numpy as np

from ibwire.report.pictures.page import page, write_html
from ibwire.report.pictures.svg import PALETTE, Plot, esc, si

MAX_MARKS = 5000  # commands drawn one by one; beyond, per-interval percentiles
BINS = 100
KINDS = 8  # opcodes given a histogram of their own; the rest share one
# (title, command rows, per-kind rows, kind key, good status)
SECTIONS = (
    ("NVMe-oF commands", "commands", "by_opcode", "opcode", "Successful Completion"),
    ("NFS over RDMA calls", "rpc_calls", "rpc_by_procedure", "procedure", "success"),
    ("iSER commands", "iser_commands", "iser_by_opcode", "opcode", "Good"),
    ("SMB Direct requests", "smb_requests", "smb_by_command", "command", "STATUS_SUCCESS"),
)
SUMMARY = ("commands", "completed", "errors", "iops", "bytes_per_s")
SUMMARY += ("latency_p50_us", "latency_p90_us", "latency_p99_us", "latency_max_us")


def _column(rows: Sequence[dict], key: str) -> list:
    """One column of the command rows (storage.Rows hold columns already)."""
    cols = getattr(rows, "columns", None)
    return list(cols[key]) if cols is not None and key in cols else [r.get(key) for r in rows]


def _table(per_kind: List[dict], kind: str) -> str:
    head = "".join(f"<th>{esc(k)}</th>" for k in (kind,) + SUMMARY)
    body = "".join(
        f"<tr><td>{esc(r[kind])}</td>"
        + "".join(f"<td class='n'>{'' if r.get(k) is None else esc(r[k])}</td>" for k in SUMMARY)
        + "</tr>"
        for r in per_kind
    )
    return f"<table class='storage {esc(kind)}'><tr>{head}</tr>{body}</table>"


def _histogram(name: str, kind: str, values: np.ndarray, colour: str) -> str:
    """Latency of one opcode (or of the rest) in 30 bars up to its 99.5th percentile (beyond: in the last)."""
    hi = float(np.percentile(values, 99.5)) if len(values) > 20 else float(values.max())
    edges = np.linspace(0, (hi if hi > 0 else 1.0) * 1.02, 31)
    counts, _ = np.histogram(np.clip(values, 0, edges[-1]), edges)
    p = Plot("histogram storage", (0, float(edges[-1])), (0, float(counts.max()) * 1.1 or 1), height=180)
    p.attrs.update({"kind": name, "samples": len(values)})
    p.axes(f"{kind} {name}: latency ({len(values):,} completed)", "µs", "commands", lambda v: f"{v:g}", si)
    tips = [f"{a:.2f}–{b:.2f} µs: {c}" for a, b, c in zip(edges[:-1], edges[1:], counts.tolist())]
    p.bars(list(edges), counts.tolist(), colour, tips)
    return p.svg()


def _over_time(title: str, kinds: List[str], t: np.ndarray, lat: np.ndarray, ok: np.ndarray, of: np.ndarray) -> str:
    """Latency against submission time: a mark per command (errors crossed), or per-interval percentiles."""
    t_end = max(float(t.max()), 1e-6)
    p = Plot("latency-time", (0, t_end), (0, float(lat.max()) * 1.1 or 1), height=240, top=40)
    p.attrs.update({"commands": len(t), "errors": int((~ok).sum())})
    p.axes(f"{title}: latency by submission time", "time since the first submission", "µs", si, si)
    keys = []
    if len(t) <= MAX_MARKS:
        for k, name in enumerate(kinds):
            colour = PALETTE[k % len(PALETTE)]
            sel = np.flatnonzero((of == k) & ok)
            p.marks("command", [(t[i], lat[i], f"{name}: {lat[i]:.3f} µs") for i in sel.tolist()], "dot", colour)
            keys.append((name, colour))
        bad = np.flatnonzero(~ok)
        p.marks(
            "error", [(t[i], lat[i], f"{kinds[of[i]]}: error, {lat[i]:.3f} µs") for i in bad.tolist()], "x", "#d62728"
        )
    else:
        width = t_end / BINS
        b = np.minimum((t / width).astype(np.int64), BINS - 1)
        x = (np.arange(BINS) + 0.5) * width
        for q, colour, name in (
            (50, PALETTE[0], "median"),
            (99, PALETTE[1], "99th percentile"),
            (100, "#d62728", "maximum"),
        ):
            y = [float(np.percentile(lat[b == i], q)) if (b == i).any() else np.nan for i in range(BINS)]
            has = ~np.isnan(y)
            p.polyline(x[has], np.asarray(y)[has], colour, name)
            keys.append((name, colour))
        p.attrs["interval"] = width
    p.legend(keys + ([("error", "#d62728")] if len(t) <= MAX_MARKS and (~ok).any() else []))
    return p.svg()


def _section(res: dict, title: str, rows_key: str, per_key: str, kind: str, good: str) -> List[str]:
    rows = res[rows_key]
    out = [f"<h2>{esc(title)}</h2>", _table(res[per_key], kind)]
    lat = np.array([np.nan if v is None else v for v in _column(rows, "latency_us")], float)
    done = ~np.isnan(lat)
    if not done.any():
        return out + ["<p class='note'>No command completed: no latency to draw.</p>"]
    names = [str(v) for v in _column(rows, kind)]
    ranked = [r[kind] for r in sorted(res[per_key], key=lambda r: -r["commands"])]
    kinds = ranked[:KINDS] + (["other"] if len(ranked) > KINDS else [])
    at: Dict[str, int] = {k: i for i, k in enumerate(kinds)}
    of = np.array([at.get(n, len(kinds) - 1) for n in names], np.int64)
    for k, name in enumerate(kinds):
        v = lat[done & (of == k)]
        if len(v):
            out.append(_histogram(name, kind, v, PALETTE[k % len(PALETTE)]))
    t = np.array(_column(rows, "time"), float)
    ok = np.array([s == good for s in _column(rows, "status")], bool)
    out.append(_over_time(title, kinds, t[done] - t.min(), lat[done], ok[done], of[done]))
    if (~done).any():
        out.append(f"<p class='note'>{int((~done).sum()):,} commands did not complete in the capture.</p>")
    return out


def report(res: dict, path: str, source: str) -> None:
    """Write the page for the storage view `res` (analyze.storage.analyse) of the capture `source` to `path`."""
    body = [f"<p class='note'>{esc(source)}</p>"]
    for title, rows_key, per_key, kind, good in SECTIONS:
        if len(res[rows_key]):
            body += _section(res, title, rows_key, per_key, kind, good)
    if len(body) == 1:
        body.append("<p>No storage command found.</p>")
    if res["problems"]:
        body.append("<h2>Problems</h2><ul>" + "".join(f"<li>{esc(p)}</li>" for p in res["problems"]) + "</ul>")
    write_html(path, page("ibwire storage", "".join(body), "storage"), inputs=[source])
