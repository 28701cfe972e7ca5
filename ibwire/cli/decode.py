"""`ibwire decode`: one line per packet like tshark, `-V` for the header tree, jsonl or csv for scripts."""
import csv
import itertools
import json
import sys
from typing import Iterator, List, Optional

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


# Fields whose values the bulk records give exactly as the layers do on a sound data packet (proved by
# tests/test_fast_vs_decode.py); a filter on these alone can be pre-evaluated on records.
_BULK_PROTOS = {"bth", "lrh", "reth", "aeth", "deth", "atomiceth", "atomicacketh", "immdt", "ieth", "xrceth"}
_BULK_KEYS = {"frame.number", "frame.len", "frame.cap_len", "icrc.status", "vcrc.status"}


def _candidates(file: str, keep) -> Optional[Iterator[int]]:
    """Frame numbers worth decoding, in order, when the filter can be pre-evaluated on the bulk records:
    every frame it could match is among them, as are all doubtful frames (damaged, truncated, MADs,
    heuristic RoCE, non-IB links) and, once the file shows damage, every later frame.  None otherwise."""
    import numpy as np
    from ..fast import records as R
    from ..fast import scan
    from ..fast.filter import compile_batch_filter
    if not all(k.split(".")[0] in _BULK_PROTOS or k in _BULK_KEYS for k in keep.fields):
        return None
    try:
        mask = compile_batch_filter(keep.text)
    except UserError:
        return None
    doubt = R.F_MALFORMED | R.F_TRUNCATED | R.F_HEURISTIC | R.F_MAD
    data_links = (R.ROCE1, R.ROCE2V4, R.ROCE2V6, R.IB, R.IBGRH)
    s = scan(file, icrc=bool({"icrc.status", "vcrc.status"} & keep.fields))

    def numbers():
        last = 0
        for rec in s:
            if s.problems:
                break
            pick = mask(rec) | ((rec["flags"] & doubt) > 0) | ~np.isin(rec["link"], data_links)
            yield from rec["frame"][pick].tolist()
            if len(rec):
                last = int(rec["frame"][-1])
        if s.problems:                 # frame numbers past damage are estimates: every later frame is wanted
            yield from itertools.count(last + 1)
    return numbers()


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
    wanted = _candidates(file, keep) if keep else None       # skip, unread, what cannot match
    frames = iter(cap)
    if wanted is not None:
        first_wanted = next(wanted, None)
        frames = cap.frames(itertools.chain([first_wanted], wanted) if first_wanted is not None else iter(()))
    columns = [field_name(f) for f in fields]
    writer = csv.writer(sys.stdout) if fmt == "csv" else None
    if writer:
        writer.writerow(fields)
    out = sys.stdout
    printed, first_time = 0, None
    rmpp = RmppTracker()
    for frame in frames:             # with `wanted`: the wanted frames, and the first one for its time
        if first_time is None:
            first_time = frame.time
        if wanted is not None and frame.number == 1 and first_wanted != 1:
            continue
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
