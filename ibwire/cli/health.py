"""`ibwire health FILE`: lossless-Ethernet health of a RoCE capture (PFC pauses and storms, ECN-CE and the
CNP answer, ECMP source-port entropy, DSCP/PCP per flow).  docs/health.md describes fields and findings.
The command's work is in cli/healthrun.py, which a plain command line reaches without typer."""

from typing import Optional

import typer

from ibwire.cli.app import TOP, app, port_speed_option, read_file_option
from ibwire.cli.healthrun import run


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
    if run(file, read, fmt, speed, storm_ms, paths, window_us, qos, top, report):
        raise typer.Exit(1)
