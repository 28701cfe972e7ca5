"""The work of `ibwire health` apart from typer (cli/health.py declares the command and its options for
typer): the options' checks, the analysis, its tables or JSON, and a quick reading of a plain command line
that lets `ibwire health` start without loading typer (cli/__init__.py)."""

import gc
import os
import sys
from pathlib import Path
from typing import List, Optional

from ibwire.cli.args import TOP, capture_source, port_speed

QOS_RANGES = {"dscp": 63, "cnp_dscp": 63, "pfc_priority": 7, "cnp_priority": 7}


def parse_qos(text: Optional[str]) -> dict:
    """`dscp=26,cnp_dscp=48,pfc_priority=3`, or a TOML file holding those keys (at the top or under [qos])."""
    from ibwire.errors import UserError

    if not text:
        return {}
    if text.endswith(".toml") or Path(text).is_file():
        from ibwire.files.inputfile import parse_toml, read_text

        data = parse_toml(
            read_text(Path(text), "QoS file", "a TOML file with dscp, cnp_dscp, pfc_priority or cnp_priority"),
            Path(text),
        )
        items = data.get("qos", data)
    else:
        items = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep:
                raise UserError(f"--qos takes key=value pairs such as dscp=26,cnp_dscp=48,pfc_priority=3, not {part!r}")
            items[key.strip()] = value.strip()
    out = {}
    for key, value in items.items():
        if key not in QOS_RANGES:
            raise UserError(f"--qos: unknown key {key!r}; the keys are {', '.join(QOS_RANGES)}")
        try:
            n = int(value, 0) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            n = -1
        if not 0 <= n <= QOS_RANGES[key] or isinstance(value, bool):
            raise UserError(f"--qos: {key} must be a number from 0 to {QOS_RANGES[key]}, not {value!r}")
        out[key] = n
    return out


def run(
    file: Optional[str] = None,
    read: Optional[str] = None,
    fmt: str = "table",
    speed: str = "100G",
    storm_ms: float = 300.0,
    paths: int = 8,
    window_us: float = 20.0,
    qos: Optional[str] = None,
    top: int = TOP,
    report: Optional[str] = None,
) -> int:
    """`ibwire health` with its options' values: prints the tables or the JSON (and writes the page); the exit
    status, 1 when a finding is an error."""
    gc.disable()  # the imports and the analysis make no reference cycles: collections would walk in vain
    try:
        return _run(capture_source(file, read), fmt, speed, storm_ms, paths, window_us, qos, top, report)
    finally:
        gc.enable()


def _run(file: str, fmt, speed, storm_ms, paths, window_us, qos, top, report) -> int:
    # numpy (loaded here first) asks for 2 MB pages for arrays of 4 MB and more; where free memory is in pieces,
    # as right after tshark freed its gigabytes, each such page fault first compacts memory: the bench's run
    # took 0.68-0.80 s of CPU with them, 0.49-0.51 s without (NUMPY_MADVISE_HUGEPAGE, numpy's own switch)
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    _keep_freed_memory()
    from ibwire.analyze.health import Settings, analyse
    from ibwire.errors import UserError
    from ibwire.report.jsontext import dumps_indented
    from ibwire.report.tables import render

    if fmt not in ("table", "json"):
        raise UserError(f"--format must be table or json, not {fmt!r}")
    if storm_ms <= 0 or paths < 1 or window_us <= 0:
        raise UserError("--storm-ms and --rate-window-us must be positive and --paths at least 1")
    bins = 0
    if report:  # the page's module only when a page is asked for
        from ibwire.report.pictures.health_report import BINS as bins
    res = analyse(file, Settings(port_speed(speed), storm_ms, paths, window_us, qos=parse_qos(qos)), bins=bins)
    if report:
        from ibwire.report.pictures.health_report import report as write_report

        write_report(res, report, file)
        del res["series"]
    if fmt == "json":
        sys.stdout.write(dumps_indented(res) + "\n")  # (render's JSON, written twice as fast)
    else:
        render(_sections(res), "table", limit=top)
    return 1 if any(f["severity"] == "error" for f in res["findings"]) else 0


# `health`'s options as typer reads them (cli/health.py): the option -> (run()'s parameter, its type)
OPTIONS = {
    "-r": ("read", str),
    "--read-file": ("read", str),
    "--format": ("fmt", str),
    "-T": ("fmt", str),
    "-f": ("fmt", str),
    "--port-speed": ("speed", str),
    "--storm-ms": ("storm_ms", float),
    "--paths": ("paths", int),
    "--rate-window-us": ("window_us", float),
    "--qos": ("qos", str),
    "--top": ("top", int),
    "--report": ("report", str),
}


def quick(args: List[str]) -> Optional[dict]:
    """run()'s arguments from a plain command line after `health` (one capture, options spelled apart from
    their values, each once, values of their type), read without typer: its import is 30 ms of the start-up.
    None for anything else (help, a mistake, another spelling): typer reads that and reports what it must."""
    got: dict = {}
    rest = list(args)
    while rest:
        a = rest.pop(0)
        if a in OPTIONS and rest and not rest[0].startswith("-"):
            name, kind = OPTIONS[a]
            try:
                value = kind(rest.pop(0))  # (what typer converts with: str, int() or float())
            except ValueError:
                return None
        elif not a.startswith("-"):
            name, value = "file", a
        else:
            return None
        if name in got:
            return None
        got[name] = value
    return got if "file" in got or "read" in got else None


def _keep_freed_memory() -> None:
    """Let glibc's malloc (mallopt(3)) serve the analysis' arrays from its heap and keep what they free (the
    CLI's start hands blocks of 1 MiB and more to mmap, each fresh one page-faulted in and given back when
    freed): the bench's million packets take 42,600 page faults instead of 65,300, and 0.36-0.40 s of CPU
    instead of 0.42-0.46 s (ten alternating runs each, load 1.4), for 4 MB more peak memory."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 512 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1024 << 20)  # M_TRIM_THRESHOLD
        libc.mallopt(-2, 64 << 20)  # M_TOP_PAD
    except (AttributeError, OSError):
        pass


def _sections(res: dict) -> dict:
    ms = 1e3
    pauses = [
        {
            "direction": e["direction"],
            "priority": e["priority"],
            "frames": e["frames"],
            "xoff": e["xoff"],
            "xon": e["xon"],
            "episodes": len(e["episodes"]),
            "paused_ms": round(e["paused_s"] * ms, 3),
            "longest_ms": round(e["longest_s"] * ms, 3),
        }
        for e in res["pause"]
    ]
    dcbx = [
        {
            "port": p,
            "pfc_enabled": ",".join(map(str, d.get("pfc_enabled", []))),
            "applications": " ".join(f"P{a[0]}:sel{a[1]}/{a[2]}" for a in d.get("apps", [])),
            "frame": d["frame"],
        }
        for p, d in res["dcbx"].items()
    ]
    cong = []
    for c in res["congestion"]:
        cuts = [r for r in c["reactions"] if r["cut"] is not None]
        cong.append(
            {
                "flow": c["flow"],
                "ce_marked": c["ce_marked"],
                "cnps": c["cnps"],
                "first_ce_to_cnp_us": None if c["first_ce_to_cnp_us"] is None else round(c["first_ce_to_cnp_us"], 1),
                "cnp_spacing_us": None if not c["cnp_spacing_us"] else round(c["cnp_spacing_us"]["median"], 1),
                "rate_cuts": f"{sum(1 for r in cuts if r['cut'])}/{len(cuts)}",
                "dscp_data/cnp": f"{','.join(map(str, c['data_dscp']))}/{','.join(map(str, c['cnp_dscp'])) or '-'}",
            }
        )
    ecmp = [
        {
            "flow": e["flow"],
            "udp_srcports": ",".join(map(str, e["udp_srcports"])),
            "crc_path": ",".join(map(str, e["crc_path"])),
            "modulo_path": ",".join(map(str, e["modulo_path"])),
        }
        for e in res["ecmp"]["flows"]
    ]
    spread = [
        {"hash": h, **{f"path {i}": n for i, n in enumerate(c)}}
        for h, c in res["ecmp"]["flows_per_path"].items()
        if res["ecmp"]["flows"]
    ]
    qos = [
        {
            "flow": f"{q['src']} → {q['dst']} QP 0x{q['qp']:06x}",
            "kind": q["kind"],
            "dscp": q["dscp"],
            "pcp": "-" if q["pcp"] is None else q["pcp"],
            "priority": q["priority"],
            "packets": q["packets"],
        }
        for q in res["qos"]
    ]
    findings = [
        {"severity": f["severity"], "finding": f["text"], "frames": f["frame_count"], "filter": f["filter"]}
        for f in res["findings"]
    ]
    return {
        "pauses": pauses,
        "dcbx": dcbx,
        "congestion": cong,
        "ecmp_flows": ecmp,
        "ecmp_spread": spread,
        "qos": qos,
        "findings": findings or [{"finding": "none"}],
        "problems": [{"problem": p} for p in res["problems"]],
    }
