"""`ibwire synth`: write the capture a scenario file describes."""

from pathlib import Path
from typing import Optional

import typer

from ibwire.cli.app import app


@app.command()
def synth(
    scenario: Path = typer.Argument(..., help="Scenario file (TOML); see captures/README.md for the format."),
    write: Path = typer.Option(..., "-w", "--write", help="Output pcap file."),
    link: Optional[str] = typer.Option(
        None,
        "--link",
        help="roce2, roce2-v6, roce1, ib-erf (native IB in ERF records) or ib "
        "(link type 247); default: the scenario's own.",
    ),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for payload bytes (default: the scenario's)."),
):
    """Generate protocol-faithful IB/RoCE traffic from a scenario file."""
    from ibwire.synth import generate

    n = generate(scenario, write, link=link, seed=seed)
    typer.echo(f"wrote {n} frames to {write}", err=True)
