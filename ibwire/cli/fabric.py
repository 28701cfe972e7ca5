"""`ibwire fabric FILE`: the subnet rebuilt from the management traffic in a capture."""

import json
from pathlib import Path
from typing import Optional

import typer

from ibwire.cli.app import app, capture_source, read_file_option
from ibwire.errors import UserError

FORMATS = ("text", "json", "ibnetdiscover", "dot")


@app.command()
def fabric(
    file: Optional[Path] = typer.Argument(
        None, help="Capture with native InfiniBand MADs (pcap/pcapng, ERF or link type 247)."
    ),
    read: Optional[Path] = read_file_option(),
    format: str = typer.Option(
        "text",
        "--format",
        "-T",
        "-F",
        help="text, json (schema: ibwire.fabric), ibnetdiscover (its topology file) or dot (Graphviz).",
    ),
    report: Optional[Path] = typer.Option(
        None,
        "--report",
        help="also write an HTML page with the topology "
        "drawn: switches, CAs, links with width and speed, degraded links "
        "and the master SM marked",
    ),
):
    """Nodes, port LIDs and P_Key tables, the master SM, link rates and traps seen in a capture's SMPs."""
    from ibwire.analyze.fabric import fabric_view
    from ibwire.report.fabric_text import render

    file = Path(capture_source(file, read))
    if format not in FORMATS:
        raise UserError(f"unknown format '{format}'; use {', '.join(FORMATS[:-1])} or {FORMATS[-1]}.")
    if not file.is_file():
        raise UserError(f"{file} does not exist or is not a file; give the path of a capture.")
    view = fabric_view(str(file))
    if report is not None:
        from ibwire.report.pictures.fabric_report import write_report

        write_report(str(file), str(report), view)
    if format == "json":
        typer.echo(json.dumps(view, indent=2))
    elif format == "ibnetdiscover":
        from ibwire.report.fabric_formats import ibnetdiscover

        typer.echo(ibnetdiscover(view), nl=False)
    elif format == "dot":
        from ibwire.report.fabric_formats import dot

        typer.echo(dot(view), nl=False)
    else:
        typer.echo(render(view), nl=False)
