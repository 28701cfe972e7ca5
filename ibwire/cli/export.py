"""`ibwire export FILE -o out.parquet`: per-packet records (and `--flows` the conversations) as Parquet;
`ibwire export DIR_OR_FILES -o DATASET --partition-by host,date`: a hive-partitioned dataset of many captures."""

from pathlib import Path
from typing import List, Optional

import typer

from ibwire.cli.app import NO_CAPTURE, app, capture_sources, read_file_option
from ibwire.errors import UserError

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap")


def _captures(args: List[str]) -> List[tuple]:
    """(capture path, host) for each capture named or found in a named folder: a capture in a subfolder
    belongs to the host that subfolder is named after (DIR/<host>/…), any other to its file name's stem."""
    out = []
    for a in args:
        p = Path(a)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in CAPTURE_SUFFIXES)
            if not found:
                raise UserError(f"{a} holds no .pcap or .pcapng file")
            for f in found:
                rel = f.relative_to(p)
                out.append((str(f), rel.parts[0] if len(rel.parts) > 1 else f.stem))
        elif p.is_file():
            out.append((str(p), p.stem))
        else:
            raise UserError(f"{a} does not exist; give capture files or folders of them")
    return out


@app.command()
def export(
    files: Optional[List[str]] = typer.Argument(
        None, help="pcap or pcapng capture (with --partition-by: captures and folders of them, one subfolder per host)"
    ),
    out: str = typer.Option(
        ...,
        "-o",
        "--output",
        help="Parquet file for the per-packet records (with --partition-by: the dataset's folder)",
    ),
    flows: Optional[str] = typer.Option(None, "--flows", help="also write the conversation table to this .parquet"),
    storage: Optional[str] = typer.Option(
        None,
        "--storage",
        help="also write the storage commands (`ibwire stats --storage`): NVMe-oF to this .parquet, NFS, iSER and "
        "SMB Direct beside it (X-nfs.parquet, X-iser.parquet, X-smb.parquet)",
    ),
    decode_as: List[str] = typer.Option(
        [], "-d", "--decode-as", help="with --storage: nvme-rdma treats every RC queue pair as NVMe-oF"
    ),
    partition_by: Optional[str] = typer.Option(
        None,
        "--partition-by",
        help="host, date or host,date: write a "
        "hive-partitioned dataset (DATASET/packets/host=…/date=…/ and "
        "DATASET/flows/…) for DuckDB, Spark, pandas",
    ),
    icrc: bool = typer.Option(True, "--icrc/--no-icrc", help="verify ICRC/VCRC (icrc_status column)"),
    display_filter: Optional[str] = typer.Option(
        None, "-Y", "--display-filter", help="only packets matching this display filter"
    ),
    read: Optional[List[str]] = read_file_option(several=True),
):
    """Write one row per packet (Wireshark-style column names such as bth_p_key) for DuckDB, pandas,
    Polars or Spark; --flows adds the `ibwire flows` table as a second file."""
    from ibwire.decode.scan import scan
    from ibwire.files.outfile import output_file
    from ibwire.report.parquet import write_flows, write_records
    from ibwire.report.tables import progress

    files = capture_sources(files, read)
    if not files:
        raise UserError(NO_CAPTURE)
    if partition_by is not None:
        _export_dataset(files, out, partition_by, bool(flows or storage), icrc)
        return
    if len(files) != 1 or Path(files[0]).is_dir():
        raise UserError("give one capture file, or --partition-by host,date to export several into a dataset")
    file = files[0]
    _check_outputs([out, flows, storage], file)
    from ibwire.cli.decode import check_decode_as

    declared = check_decode_as(decode_as)
    for name in (out, flows, storage):
        if name is not None:
            Path(name).parent.mkdir(parents=True, exist_ok=True)
    from ibwire.analyze.packets import CaptureAnalysis

    s = scan(file, icrc=icrc)
    rc = CaptureAnalysis(file, icrc)  # the bth_analysis_* columns
    s.fill = rc.fill
    if display_filter:
        from ibwire.decode.record_filter import FilteredScan

        s = FilteredScan(s, display_filter)
    with progress(s.size, "export") as cb, output_file(out, inputs=[file]) as f:
        n = write_records(s, f, cb)
    msg = f"wrote {n} packets to {out}"
    if flows:
        with output_file(flows, inputs=[file]) as f:
            write_flows(rc.conversations, f)
        msg += f" and {len(rc.conversations)} conversations to {flows}"
    if storage:
        msg += _write_storage(file, declared, storage)
    for p in s.problems:
        typer.echo(f"warning: {p}", err=True)
    typer.echo(msg, err=True)


def _check_outputs(names: List[Optional[str]], file: str) -> None:
    """Each output given is a .parquet file and none of them is the capture read."""
    from ibwire.files.outfile import refuse_aliasing

    for name in names:
        if name is not None and not name.endswith(".parquet"):
            raise UserError(f"output names must end in .parquet ({name})")
    refuse_aliasing(names, [file])


STORAGE_FILES = (("rpc_calls", "nfs", "NFS calls"), ("iser_commands", "iser", "iSER commands"))
STORAGE_FILES += (("smb_requests", "smb", "SMB Direct requests"),)


def _write_storage(file: str, declared, path: str) -> str:
    """--storage: the NVMe-oF command table (`ibwire stats --storage`) to `path`, and each other protocol's
    rows present to a file beside it (X-nfs.parquet, X-iser.parquet, X-smb.parquet); what was written."""
    import pyarrow.parquet as pq

    from ibwire.analyze.storage import analyse, section_table, write_commands
    from ibwire.files.outfile import output_file, refuse_aliasing

    res = analyse(file, declared)
    others = [(f"{path[: -len('.parquet')]}-{tag}.parquet", key, what) for key, tag, what in STORAGE_FILES]
    others = [(name, key, what) for name, key, what in others if len(res[key])]
    refuse_aliasing([path] + [name for name, _, _ in others], [file])
    with output_file(path, inputs=[file]) as f:
        write_commands(res["commands"], f)
    msg = f" and {len(res['commands'])} NVMe-oF commands to {path}"
    for name, key, what in others:
        with output_file(name, inputs=[file]) as f:
            pq.write_table(section_table(res[key]), f)
        msg += f", {len(res[key])} {what} to {name}"
    return msg


def _export_dataset(files: List[str], out: str, partition_by: str, single_files: bool, icrc: bool) -> None:
    """--partition-by: each capture of `files` (and of their folders, one per host) into the dataset `out`;
    `single_files`: --flows or --storage was given too, which name one file each."""
    from ibwire.decode.scan import scan
    from ibwire.report.parquet import partition_keys, write_capture_partitions
    from ibwire.report.tables import progress

    keys = partition_keys(partition_by)
    if single_files:
        raise UserError(
            "--flows and --storage name one file; with --partition-by the conversations go to DATASET/flows"
        )
    if Path(out).suffix == ".parquet" or Path(out).is_file():
        raise UserError(f"with --partition-by, -o names the dataset's folder, not a file ({out})")
    caps = _captures(files)
    total = conv = 0
    for path, host in caps:
        s = scan(path)
        with progress(s.size, f"export {Path(path).name}") as cb:
            n, c, problems = write_capture_partitions(path, host, out, keys, icrc, cb)
        total, conv = total + n, conv + c
        for p in problems:
            typer.echo(f"warning: {path}: {p}", err=True)
    typer.echo(
        f"wrote {total} packets and {conv} conversations of {len(caps)} captures to {out} "
        f"(partitioned by {','.join(keys)})",
        err=True,
    )
