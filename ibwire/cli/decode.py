"""`ibwire decode`: one line per packet like tshark, `-V` for the header tree, jsonl or csv for scripts."""
import csv
import json
import sys
from typing import List, Optional

import typer

from ..errors import UserError
from ..filter import compile_filter, field_name
from ..readers import open_capture
from .app import app


def _tree(decoded) -> str:
    lines = []
    for layer, fields in decoded.layers.items():
        lines.append(f"  {layer}")
        for name, value in fields.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                for i, record in enumerate(value):
                    lines.append(f"    {layer}.{name}[{i}]")
                    for sub, subfields in record.items():
                        shown = ", ".join(f"{k}={v}" for k, v in subfields.items()) if isinstance(subfields, dict) else subfields
                        lines.append(f"      {sub}: {shown}")
                continue
            if isinstance(value, int) and not isinstance(value, bool) and value > 9:
                shown = f"{value} (0x{value:x})"
            else:
                shown = json.dumps(value) if isinstance(value, str) else str(value)
            if isinstance(value, str) and len(shown) > 100:
                shown = shown[:97] + '..."'
            lines.append(f"    {layer}.{name} = {shown}")
    for err in decoded.errors:
        lines.append(f"  [error] {err}")
    return "\n".join(lines)


@app.command()
def decode(
    file: str = typer.Argument(..., help="pcap or pcapng capture"),
    verbose: bool = typer.Option(False, "-V", "--verbose", help="print every header field"),
    count: Optional[int] = typer.Option(None, "-c", "--count", help="stop after N printed packets"),
    display_filter: Optional[str] = typer.Option(None, "-Y", "--filter", help="display filter, e.g. 'bth.p_key == 0x8001'"),
    fmt: str = typer.Option("text", "--format", "-T", help="text, jsonl or csv"),
    fields: List[str] = typer.Option([], "-e", "--field", help="csv column (repeatable), like tshark -e"),
):
    """Decode every IB/RoCE header of each packet, with ICRC/VCRC checks."""
    from ..decode import decode_frame          # scapy loads only for the commands that need it
    from ..decode.rmpp import RmppTracker
    if fmt not in ("text", "jsonl", "csv"):
        raise UserError(f"--format must be text, jsonl or csv, not {fmt!r}")
    if fmt == "csv" and not fields:
        raise UserError("--format csv needs at least one -e FIELD, e.g. -e bth.opcode -e bth.psn")
    if count is not None and count < 1:
        raise UserError("-c needs a positive number of packets")
    keep = compile_filter(display_filter) if display_filter else None
    cap = open_capture(file)
    columns = [field_name(f) for f in fields]
    writer = csv.writer(sys.stdout) if fmt == "csv" else None
    if writer:
        writer.writerow(fields)
    out = sys.stdout
    printed, first_time = 0, None
    rmpp = RmppTracker()
    for frame in cap:
        if first_time is None:
            first_time = frame.time
        d = decode_frame(frame)
        rmpp.feed(d)
        if keep and not keep(d.flat):
            continue
        printed += 1
        if fmt == "jsonl":
            out.write(json.dumps(d.to_json()) + "\n")
        elif fmt == "csv":
            writer.writerow(["" if d.flat.get(c) is None else d.flat.get(c) for c in columns])
        else:
            out.write(f"{frame.number:>6} {frame.time - first_time:12.6f}  {d.line}\n")
            if verbose:
                out.write(_tree(d) + "\n\n")
        if count is not None and printed >= count:
            break
    for problem in cap.problems:
        print(f"ibwire: warning: {file}: {problem}", file=sys.stderr)
