"""Rendering analysis results: rich tables on a terminal, JSON or CSV for scripts, a progress bar on TTYs."""
import csv
import io
import json
import sys
from contextlib import contextmanager
from typing import Dict, List

from ..errors import UserError

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
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TextColumn("{task.fields[pps]} pkt/s"), TimeRemainingColumn(), transient=True,
                  console=__import__("rich.console", fromlist=["Console"]).Console(stderr=True)) as bar:
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


def _cell(v, key=""):
    """A value as a person reads it: rates and durations with units, big numbers grouped."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if key.endswith("bits_per_s"):
            return _si(float(v), "b/s")
        if key.endswith("packets_per_s") or key == "pps":
            return f"{v:,.0f}"
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
            w.writerow({"table": name, **{k: (json.dumps(v) if isinstance(v, (dict, list)) else v)
                                          for k, v in r.items()}})


def write_tables(sections: Dict[str, List[dict]], title_of=None, limit: int = 0):
    from rich.console import Console
    from rich.table import Table
    # On a terminal rich fits the window; piped into a file or pager, wide rows stay on one line.
    console = Console() if sys.stdout.isatty() else Console(width=220)
    for name, rows in sections.items():
        if not rows:
            continue
        shown = rows[:limit] if limit else rows
        if len(shown) == 1 and len(shown[0]) > 4:      # one record reads better as key / value lines
            t = Table(title=(title_of or {}).get(name, name.replace("_", " ")), title_justify="left",
                      show_header=False)
            t.add_column("")
            t.add_column("", justify="right", overflow="fold")
            for k, v in shown[0].items():
                t.add_row(k.replace("_", " "), _cell(v, k))
            console.print(t)
            continue
        t = Table(title=(title_of or {}).get(name, name.replace("_", " ")), title_justify="left")
        cols = list(dict.fromkeys(k for r in shown for k in r))
        for c in cols:
            t.add_column(c.replace("_", " "), overflow="fold",
                         justify="right" if isinstance(shown[0].get(c), (int, float)) else "left")
        for r in shown:
            t.add_row(*[_cell(r.get(c), c) for c in cols])
        console.print(t)
        if limit and len(rows) > limit:
            console.print(f"[dim]… {len(rows) - limit} more rows (use --format json or csv for all)[/dim]")


def render(sections: Dict[str, List[dict]], fmt: str, whole=None, limit: int = 0):
    if fmt == "json":
        write_json(whole if whole is not None else sections)
    elif fmt == "csv":
        buf = io.StringIO()
        write_csv(sections, buf)
        sys.stdout.write(buf.getvalue())
    else:
        write_tables(sections, limit=limit)
