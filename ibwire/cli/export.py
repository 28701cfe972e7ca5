"""`ibwire export FILE -o out.parquet`: per-packet records (and `--flows` the conversations) as Parquet."""
from pathlib import Path

import typer

from ..analysis.export import write_flows, write_records
from ..analysis.flows import analyse
from ..analysis.report import progress
from ..errors import UserError
from ..fast import scan
from .app import app


@app.command()
def export(
    file: str = typer.Argument(..., help="pcap or pcapng capture"),
    out: str = typer.Option(..., "-o", "--output", help="Parquet file for the per-packet records"),
    flows: bool = typer.Option(False, "--flows", help="also write the conversation table to OUT.flows.parquet"),
    icrc: bool = typer.Option(True, "--icrc/--no-icrc", help="verify ICRC/VCRC (icrc_status column)"),
):
    """Write one row per packet (Wireshark-style column names such as bth_p_key) for DuckDB, pandas,
    Polars or Spark; --flows adds the `ibwire flows` table."""
    if not out.endswith(".parquet"):
        raise UserError("the output name must end in .parquet")
    s = scan(file, icrc=icrc)
    with progress(s.size, "export") as cb:
        n = write_records(s, out, cb, s)
    msg = f"wrote {n} packets to {out}"
    if flows:
        fpath = str(Path(out).with_suffix("")) + ".flows.parquet"
        res = analyse(file, icrc=icrc)
        write_flows(res["conversations"], fpath)
        msg += f" and {len(res['conversations'])} conversations to {fpath}"
    for p in s.problems:
        typer.echo(f"warning: {p}", err=True)
    typer.echo(msg, err=True)
