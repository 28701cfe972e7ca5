"""`ibwire fabric FILE`: the subnet rebuilt from the management traffic in a capture."""
import json
from pathlib import Path

import typer

from ..errors import UserError
from .app import app


@app.command()
def fabric(file: Path = typer.Argument(..., help="Capture with native InfiniBand MADs (pcap/pcapng, ERF or link type 247)."),
           format: str = typer.Option("text", "--format", "-F", help="text or json (schema: ibwire.fabric).")):
    """Nodes, port LIDs and P_Key tables, the master SM, link rates and traps seen in a capture's SMPs."""
    from ..fabric import fabric_view
    from ..fabric.text import render
    if format not in ("text", "json"):
        raise UserError(f"unknown format '{format}'; use text or json.")
    if not file.is_file():
        raise UserError(f"{file} does not exist or is not a file; give the path of a capture.")
    view = fabric_view(str(file))
    if format == "json":
        typer.echo(json.dumps(view, indent=2))
    else:
        typer.echo(render(view), nl=False)
