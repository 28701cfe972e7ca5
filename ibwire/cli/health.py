"""`ibwire health FILE`: lossless-Ethernet health of a RoCE capture (PFC pauses and storms, ECN-CE and the
CNP answer, ECMP source-port entropy, DSCP/PCP per flow).  docs/health.md describes fields and findings."""

import gc
import os
from pathlib import Path
from typing import Optional

import typer

from ibwire.cli.app import TOP, app, capture_source, port_speed, port_speed_option, read_file_option

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


@app.command()
def health(
    file: Optional[str] = typer.Argument(None, help="pcap or pcapng capture of RoCE traffic, PFC and LLDP frames"),
    read: Optional[str] = read_file_option(),
    fmt: str = typer.Option("table", "--format", "-T", "-f", help="table or json"),
    speed: str = port_speed_option(),
    storm_ms: float = typer.Option(
        300.0,
        "--storm-ms",
        help="a priority paused continuously for longer than this "
        "is a pause storm (switch PFC watchdogs use 200-400 ms)",
    ),
    paths: int = typer.Option(8, "--paths", help="ECMP paths the source-port spread is judged over"),
    window_us: float = typer.Option(
        20.0, "--rate-window-us", help="the sender's rate is measured over this window before and after each CNP"
    ),
    qos: Optional[str] = typer.Option(
        None, "--qos", help="expected classes, e.g. dscp=26,cnp_dscp=48,pfc_priority=3 (or a TOML file with those keys)"
    ),
    top: int = typer.Option(TOP, "--top", help="rows per table on a terminal (0 = all; json holds every row)"),
    report: Optional[str] = typer.Option(
        None,
        "--report",
        help="also write an HTML page: pause time per priority over time, CE/CNP/rate per flow, ECMP spread",
    ),
):
    """PFC pauses per port and priority (episodes, storms), ECN-CE marks and the CNPs answering them with the
    sender's rate around each CNP, ECMP entropy of RoCEv2 source ports, DSCP/PCP per flow and message kind,
    and findings with a display filter for their frames.  Exit status 1 when a finding is an error."""
    # numpy (loaded here first) asks for 2 MB pages for arrays of 4 MB and more; where free memory is in pieces,
    # as right after tshark freed its gigabytes, each such page fault first compacts memory: the bench's run
    # took 0.68-0.80 s of CPU with them, 0.49-0.51 s without (NUMPY_MADVISE_HUGEPAGE, numpy's own switch)
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    _keep_freed_memory()
    from ibwire.analyze.health import Settings, analyse
    from ibwire.errors import UserError
    from ibwire.report.tables import render

    file = capture_source(file, read)
    if fmt not in ("table", "json"):
        raise UserError(f"--format must be table or json, not {fmt!r}")
    if storm_ms <= 0 or paths < 1 or window_us <= 0:
        raise UserError("--storm-ms and --rate-window-us must be positive and --paths at least 1")
    bins = 0
    if report:  # the page's module only when a page is asked for
        from ibwire.report.pictures.health_report import BINS as bins
    gc.disable()  # the analysis makes no reference cycles: collections would only walk its young objects
    try:
        res = analyse(file, Settings(port_speed(speed), storm_ms, paths, window_us, qos=parse_qos(qos)), bins=bins)
    finally:
        gc.enable()
    if report:
        from ibwire.report.pictures.health_report import report as write_report

        write_report(res, report, file)
        del res["series"]
    if fmt == "json":
        render({}, "json", whole=res)
    else:
        render(_sections(res), "table", limit=top)
    if any(f["severity"] == "error" for f in res["findings"]):
        raise typer.Exit(1)


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
