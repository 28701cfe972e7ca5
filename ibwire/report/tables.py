"""Rendering analysis results: rich tables on a terminal, JSON or CSV for scripts, a progress bar on TTYs."""

import csv
import io
import json
import os
import sys
from contextlib import contextmanager
from typing import Dict, List

from ibwire.errors import UserError
from ibwire.report.escape import printable
from ibwire.words import plural

FORMATS = ("table", "json", "csv")


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return fmt


@contextmanager
def progress(size: int, label: str, enabled: bool = True):
    """A callback(packets, bytes_done) that drives a rich progress bar on a terminal; a no-op when piped."""
    if not (enabled and sys.stderr.isatty()):
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("{task.fields[pps]} pkt/s"),
        TimeRemainingColumn(),
        transient=True,
        console=__import__("rich.console", fromlist=["Console"]).Console(stderr=True),
    ) as bar:
        task = bar.add_task(label, total=max(size, 1), pps="-")
        state = {"n": 0}
        import time

        t0 = time.perf_counter()

        def update(n: int, done: int):
            state["n"] += n
            dt = time.perf_counter() - t0
            bar.update(task, completed=done, pps=f"{state['n'] / dt:,.0f}" if dt > 0 else "-")

        yield update


def _si(v: float, unit: str) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= factor:
            return f"{v / factor:.2f} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def _seconds(v: float) -> str:
    if v >= 1 or v == 0:
        return f"{v:,.3f} s"
    return f"{v * 1e3:.3f} ms" if v >= 1e-3 else f"{v * 1e6:.1f} µs"


def rate(v: float) -> str:
    """A rate to three significant figures, thousands grouped (65 packets in 187.7 s: 0.346)."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


_WORDS = {
    "icrc": "ICRC",
    "vcrc": "VCRC",
    "qp": "QP",
    "qpn": "QPN",
    "mad": "MAD",
    "ecn": "ECN",
    "ce": "CE",
    "cnp": "CNP",
    "cnps": "CNPs",
    "fecn": "FECN",
    "becn": "BECN",
    "nak": "NAK",
    "naks": "NAKs",
    "rnr": "RNR",
    "psn": "PSN",
    "roce": "RoCE",
    "udp": "UDP",
    "ud": "UD",
    "rc": "RC",
    "uc": "UC",
    "mads": "MADs",
    "smps": "SMPs",
    "gid": "GID",
    "lid": "LID",
    "ib": "IB",
}


def label(key: str) -> str:
    """A record key as a worded label: `p_key` P_Key, `icrc_good` ICRC good, `packets_per_s` packets/s."""
    key = key.replace("_per_s", "/s").removesuffix("_s").replace("p_key", "P_Key")
    return " ".join(_WORDS.get(w, w) for w in key.replace("P_Key", "P\0Key").split("_")).replace("\0", "_")


def console():
    """A rich Console for people: the terminal's width (COLUMNS honoured; rich wraps at word boundaries); piped
    with no COLUMNS, lines are never wrapped, as tshark's."""
    from rich.console import Console

    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return Console(width=int(cols))
    if sys.stdout.isatty():
        return Console()
    return Console(width=UNWRAPPED, soft_wrap=True)


UNWRAPPED = 100_000  # a piped line's width: no table or line is ever that wide, so none wraps
LONGEST_WORD = 24  # a longer word (a GID, a path) may still be folded to fit a terminal


def _cell(v, key=""):
    """A value as a person reads it: rates and durations with units, big numbers grouped."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if key.endswith("bits_per_s"):
            return _si(float(v), "b/s")
        if key.endswith("packets_per_s") or key == "pps":
            return rate(float(v))
        if key.endswith("duration_s") or key.endswith("_s") and isinstance(v, float):
            return _seconds(float(v))
    if isinstance(v, float):
        return f"{v:,.6g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_cell(x)}" for k, x in v.items()) if v else ""
    if v is None:
        return ""
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def write_json(obj, out=None):
    (out or sys.stdout).write(json.dumps(obj, indent=2, default=str) + "\n")


def write_csv(sections: Dict[str, List[dict]], out=None):
    """Long CSV: a `table` column names the section; other columns are the union of the rows' keys."""
    out = out or sys.stdout
    cols: List[str] = []
    for rows in sections.values():
        for r in rows:
            for k in r:
                if k not in cols:
                    cols.append(k)
    w = csv.DictWriter(out, ["table"] + cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for name, rows in sections.items():
        for r in rows:
            w.writerow(
                {"table": name, **{k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in r.items()}}
            )


def _columns_that_fit(cols: List[str], words: List[int], width: int) -> List[int]:
    """The indexes of the columns to show at `width`: all when their words fit, else the last ones but
    `issues` are left out, one at a time, down to the first three, so numbers and names stay whole."""
    keep = list(range(len(cols)))
    droppable = [i for i in reversed(keep[3:]) if cols[i] != "issues"]
    while sum(words[i] for i in keep) + 3 * len(keep) + 1 > width and droppable:
        keep.remove(droppable.pop(0))
    return keep


def write_tables(sections: Dict[str, List[dict]], title_of=None, limit: int = 0):
    """One rich table per section; a `summary` section (one record by nature) as label / value lines."""
    from rich.table import Table
    from rich.text import Text

    out = console()
    for name, rows in sections.items():
        if not rows:
            continue
        shown = rows[:limit] if limit else rows
        title = (title_of or {}).get(name, label(name))
        if name == "summary" and len(shown) == 1:
            t = Table(title=title, title_justify="left", show_header=False)
            t.add_column("")
            t.add_column("", justify="right", overflow="fold")
            for k, v in shown[0].items():
                t.add_row(label(k), Text(printable(_cell(v, k))))
            out.print(t)
            continue
        t = Table(title=title, title_justify="left")
        cols = list(dict.fromkeys(k for r in shown for k in r))
        cells = [[printable(_cell(r.get(c), c)) for c in cols] for r in shown]  # packet text shown, never sent
        # a column no narrower than its longest word, so lines wrap between words, where the terminal has room
        words = [
            min(
                LONGEST_WORD,
                max(len(w) for text in [label(c)] + [row[i] for row in cells] for w in text.split() or [""]),
            )
            for i, c in enumerate(cols)
        ]
        keep = _columns_that_fit(cols, words, out.width)
        hidden = [label(c) for i, c in enumerate(cols) if i not in keep]
        if sum(words[i] for i in keep) + 3 * len(keep) + 1 > out.width:
            words = [None] * len(cols)  # no room even so: words are folded rather than cut off
        for i in keep:
            t.add_column(
                label(cols[i]),
                overflow="fold",
                min_width=words[i],
                justify="right" if isinstance(shown[0].get(cols[i]), (int, float)) else "left",
            )
        for row in cells:
            t.add_row(*(Text(row[i]) for i in keep))  # literal: no rich markup read from packet text
        if hidden:
            out.print(t)
            out.print(
                Text(
                    f"… not shown at {out.width} columns: {', '.join(hidden)} (widen the terminal, "
                    f"or use --format json or csv)",
                    style="dim",
                )
            )
            continue
        out.print(t)
        if limit and len(rows) > limit:
            out.print(f"[dim]… {plural(len(rows) - limit, 'more row')} (use --format json or csv for all)[/dim]")


def render(sections: Dict[str, List[dict]], fmt: str, whole=None, limit: int = 0):
    if fmt == "json":
        write_json(whole if whole is not None else sections)
    elif fmt == "csv":
        buf = io.StringIO()
        write_csv(sections, buf)
        sys.stdout.write(buf.getvalue())
    else:
        write_tables(sections, limit=limit)
