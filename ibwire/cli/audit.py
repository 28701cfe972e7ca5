"""`ibwire audit`: prove tenant isolation from captures, partitions.conf and the programmed P_Key tables."""

from pathlib import Path
from typing import List, Optional

import typer

from ibwire.cli.app import app, capture_sources, read_file_option
from ibwire.errors import UserError


@app.command()
def audit(
    captures: List[Path] = typer.Argument(
        None, help="capture files of one incident (pcap/pcapng); optional with --state for a state-only audit"
    ),
    read: Optional[List[Path]] = read_file_option(several=True),
    policy: Path = typer.Option(..., "--policy", help="opensm partitions.conf"),
    tenants: Optional[Path] = typer.Option(None, "--tenants", help="tenants.toml: tenant -> endpoints"),
    state: Optional[str] = typer.Option(
        None, "--state", help="hardware state: fabric JSON file, 'live', 'sysfs[:ROOT]' or 'capture'"
    ),
    allow_both_pkeys: bool = typer.Option(False, "--allow-both-pkeys", help="opensm runs with --allow_both_pkeys"),
    as_opensm: bool = typer.Option(
        False,
        "--as-opensm",
        help="accept partitions.conf words opensm does not know "
        "(it ignores them) and audit what it programs from the file as written; "
        "without it such a word, most likely a typo, is an error",
    ),
    fail_on: str = typer.Option(
        "breach", "--fail-on", help="exit 1 at this severity or worse: info, warning, attempt, breach"
    ),
    fmt: str = typer.Option("text", "--format", "-T", help="text, json or md"),
    report: Optional[Path] = typer.Option(None, "--report", help="write a self-contained HTML report"),
    evidence: Optional[Path] = typer.Option(
        None,
        "--evidence",
        help="write every evidence frame to this pcapng, "
        "each commented with its finding number, rule and severity "
        "(Wireshark: frame.comment)",
    ),
    display_filter: Optional[str] = typer.Option(
        None, "-Y", "--display-filter", help="audit only the frames matching this display filter (the report says so)"
    ),
) -> None:
    """Audit P_Key tenant isolation; exit 0 pass, 1 finding at or above --fail-on, 2 unusable input (no
    verdict), 4 pass on incomplete evidence (damaged or unreadable frames, or -Y chose the frames)."""
    from ibwire.audit.findings import SEVERITIES
    from ibwire.audit.inputs import audit_captures, load_state
    from ibwire.audit.policy import load_policy
    from ibwire.audit.tenants import load_tenants

    if fail_on not in SEVERITIES:
        raise UserError(f"--fail-on {fail_on}: choose one of {', '.join(SEVERITIES)}")
    if fmt not in ("text", "json", "md"):
        raise UserError(f"--format {fmt}: choose text, json or md")
    paths = capture_sources(captures, read)
    _check_outputs(report, evidence, paths + [policy, tenants, state])
    _check_inputs(paths, state, display_filter)
    pol = load_policy(str(policy), allow_both_pkeys, as_opensm)
    ten = load_tenants(str(tenants)) if tenants else None
    st = load_state(state)
    res = audit_captures(paths, pol, ten, st, display_filter)
    _print(res, fmt, fail_on)
    if report or evidence:
        _write_evidence(res, fail_on, paths, report, evidence)
    _exit(res, fmt, fail_on)


def _check_outputs(report: Optional[Path], evidence: Optional[Path], inputs: list) -> None:
    """--report and --evidence name files (standard output holds the audit's own report), none of them an input."""
    if "-" in (str(report), str(evidence)):
        raise UserError("the audit's own report goes to standard output; give --report and --evidence a file name")
    if report or evidence:
        from ibwire.files.outfile import refuse_aliasing

        refuse_aliasing([report, evidence], inputs)


def _check_inputs(paths: List[str], state: Optional[str], display_filter: Optional[str]) -> None:
    """Every capture exists, there is something to audit, and the display filter compiles."""
    for p in paths:
        if not Path(p).is_file():
            raise UserError(f"capture {p} does not exist")
    if not paths and not state:
        raise UserError(
            "give at least one capture (as an argument or with -r), or --state to audit the programmed P_Key "
            "tables alone"
        )
    if display_filter:
        from ibwire.decode.filter import compile_filter

        compile_filter(display_filter)  # an unknown field: exit 2 before any file is read


def _print(res, fmt: str, fail_on: str) -> None:
    """The findings and verdict to standard output as --format asks."""
    from ibwire.report import audit_report as rep

    if fmt == "json":
        print(rep.to_json(res, fail_on))
    elif fmt == "md":
        print(rep.to_markdown(res, fail_on), end="")
    else:
        rep.print_terminal(res, fail_on)


def _write_evidence(res, fail_on: str, paths: List[str], report: Optional[Path], evidence: Optional[Path]) -> None:
    """--evidence: the findings' frames to a commented pcapng; --report: the HTML page with them decoded."""
    from ibwire.audit.evidence import collect, write_pcapng
    from ibwire.report import audit_report as rep

    found = collect(paths, {n for f in res.findings for n in f.frames}, decode=bool(report))
    if evidence:
        write_pcapng(evidence, res.findings, found, paths)
    if report:
        from ibwire.files.outfile import output_file

        with output_file(report, "w", inputs=paths) as f:
            f.write(rep.to_html(res, fail_on, {n: ev.decoded for n, ev in found.items()}, paths))


def _exit(res, fmt: str, fail_on: str) -> None:
    """Exit 2 without a verdict, 4 on a pass with incomplete evidence, 1 on a finding at or above --fail-on."""
    from ibwire.report.escape import printable

    status = res.exit_status(fail_on)
    if status == 2:
        raise UserError(f"no verdict: {res.evidence.unusable()}")
    if status == 4 and fmt != "text":  # the terminal verdict line says it already
        typer.echo(f"ibwire: {printable(res.verdict(fail_on))}", err=True)
    if status:
        raise SystemExit(status)
