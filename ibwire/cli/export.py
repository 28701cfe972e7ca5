"""`ibwire export FILE -o out.parquet`: per-packet records (and `--flows` the conversations) as Parquet."""
from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from .app import app


@app.command()
def export(
    file: str = typer.Argument(..., help="pcap or pcapng capture"),
    out: str = typer.Option(..., "-o", "--output", help="Parquet file for the per-packet records"),
    flows: Optional[str] = typer.Option(None, "--flows", help="also write the conversation table to this .parquet"),
    icrc: bool = typer.Option(True, "--icrc/--no-icrc", help="verify ICRC/VCRC (icrc_status column)"),
):
    """Write one row per packet (Wireshark-style column names such as bth_p_key) for DuckDB, pandas,
    Polars or Spark; --flows adds the `ibwire flows` table as a second file."""
    from ..analysis.export import write_flows, write_records
    from ..analysis.flows import analyse
    from ..analysis.report import progress
    from ..fast import scan
    from ..outfile import output_file, refuse_aliasing
    for name in (out, flows):
        if name is not None and not name.endswith(".parquet"):
            raise UserError(f"output names must end in .parquet ({name})")
    refuse_aliasing([out, flows], [file])
    for name in (out, flows):
        if name is not None:
            Path(name).parent.mkdir(parents=True, exist_ok=True)
    s = scan(file, icrc=icrc)
    with progress(s.size, "export") as cb, output_file(out, inputs=[file]) as f:
        n = write_records(s, f, cb, s)
    msg = f"wrote {n} packets to {out}"
    if flows:
        res = analyse(file, icrc=icrc)
        with output_file(flows, inputs=[file]) as f:
            write_flows(res["conversations"], f)
        msg += f" and {len(res['conversations'])} conversations to {flows}"
    for p in s.problems:
        typer.echo(f"warning: {p}", err=True)
    typer.echo(msg, err=True)
