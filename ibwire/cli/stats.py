"""`ibwire stats FILE`: what a capture holds, by transport/opcode, P_Key, endpoint, QP and MAD."""

import sys
from typing import List, Optional

import typer

from ibwire.cli.app import TOP, app, capture_source, read_file_option
from ibwire.errors import UserError


@app.command()
def stats(
    file: Optional[str] = typer.Argument(None, help="pcap or pcapng capture (any link type ibwire decodes)"),
    read: Optional[str] = read_file_option(),
    fmt: str = typer.Option("table", "--format", "-T", "-f", help="table, json or csv"),
    icrc: bool = typer.Option(True, "--icrc/--no-icrc", help="verify ICRC/VCRC of every packet (costs speed)"),
    top: int = typer.Option(TOP, "--top", help="rows per table on a terminal (0 = all; json and csv hold every row)"),
    jobs: int = typer.Option(0, "--jobs", "-j", help="processes for large pcap files (0 = one per CPU)"),
    interval: Optional[float] = typer.Option(
        None,
        "--interval",
        help="instead: packets, bytes, bits/s, NAKs, "
        "RNR NAKs, CNPs and ECN-CE per interval of this many seconds from "
        "the first packet (like tshark -z io,stat)",
    ),
    display_filter: Optional[str] = typer.Option(
        None, "-Y", "--display-filter", help="only packets matching this display filter"
    ),
    storage: bool = typer.Option(
        False,
        "--storage",
        help="instead: every storage command (NVMe-oF, NFS over RDMA, iSER, SMB Direct: submission, data "
        "and completion frames, latency, bytes) and per opcode and queue IOPS, "
        "throughput, latency percentiles and errors by status",
    ),
    report: Optional[str] = typer.Option(
        None, "--report", help="with --storage: also write one HTML page (latency histograms and over time)"
    ),
    decode_as: List[str] = typer.Option(
        [],
        "-d",
        "--decode-as",
        help="with --storage: nvme-rdma treats every RC queue pair as NVMe-oF (captures without the RDMA-CM "
        "setup); iser every RC SEND as iSER; rpcordma every RC SEND with version 1 as RPC-RDMA",
    ),
):
    """Counts, bytes and rates by transport+opcode, P_Key, endpoint, QP and MAD; ECN/CNP/FECN/BECN, CRC
    failures, damaged packets and loss hints."""
    from ibwire.analyze import stats as st
    from ibwire.decode.scan import scan
    from ibwire.report.tables import check_format, progress, render

    file = capture_source(file, read)
    check_format(fmt)
    if storage:
        _storage(file, fmt, top, decode_as, report)
        return
    if decode_as or report:
        raise UserError(f"{'-d' if decode_as else '--report'} applies to --storage (see ibwire stats --help)")
    if interval is not None:
        from ibwire.analyze.series import interval_table

        res = interval_table(file, interval, icrc)
        render({"intervals": res["intervals"], "problems": [{"problem": p} for p in res["problems"]]}, fmt, whole=res)
        return
    size = scan(file).size
    with progress(size, "stats") as cb:
        if display_filter:
            from ibwire.decode.record_filter import FilteredScan, names_analysis

            s = scan(file, icrc)
            if names_analysis(display_filter):
                from ibwire.analyze.packets import CaptureAnalysis

                s.fill = CaptureAnalysis(file, icrc).fill
            res = st.compute(FilteredScan(s, display_filter), cb)
        else:
            res = st.compute_file(file, icrc, cb, jobs)
    res["rc_sequence"] = _rc_sequence(file, icrc, display_filter, jobs) if _has_sequenced(res) else []
    render(_sections(res, fmt), fmt, whole=res, limit=top)


def _sections(res: dict, fmt: str) -> dict:
    """The tables `render` prints, titled; on a terminal the times read as UTC dates and only the counters
    that counted something, labelled."""
    from ibwire.report.tables import label

    summary = dict(res["summary"])
    if fmt == "table":
        from datetime import datetime, timezone

        for k in ("first_time", "last_time"):
            if summary[k] is not None:
                summary[k] = datetime.fromtimestamp(summary[k], timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    return {
        "summary": [summary],
        "counters": [res["counters"]]
        if fmt != "table"
        else [{"counter": label(k), "value": v} for k, v in res["counters"].items() if v],
        "by_opcode": res["by_opcode"],
        "by_p_key": res["by_p_key"],
        "by_endpoint": res["by_endpoint"],
        "by_qp": res["by_qp"],
        "by_mad": res["by_mad"],
        "rc_sequence": res["rc_sequence"],
        "loss_hints": [{"hint": h} for h in res["loss_hints"]],
        "problems": [{"problem": p} for p in res["problems"]],
    }


SEQUENCE = ("drops", "not_captured", "retransmissions", "out_of_order", "psn_gaps")


def _has_sequenced(res) -> bool:
    return any(r.get("transport") in ("RC", "UC", "XRC", "DC") for r in res["by_opcode"])


def _rc_sequence(file: str, icrc: bool, display_filter: Optional[str], jobs: int) -> list:
    """The sequenced transports' PSN accounting, summed over conversations as `flows` counts it: lost on
    the wire (resent or NAKed) apart from not captured (the peer went on without a resend), retransmitted,
    out of order."""
    from ibwire.analyze.flows import analyse
    from ibwire.decode.record_filter import compile_batch_filter

    mask = compile_batch_filter(display_filter) if display_filter else None
    rows = [r for r in analyse(file, icrc, mask, None, jobs)["conversations"] if "psn_gaps" in r]
    if not rows:
        return []
    out = {"conversations": len(rows)}
    out.update({k: sum(int(r[k]) for r in rows) for k in SEQUENCE})
    out["naks"] = sum(sum(r.get("naks", {}).values()) for r in rows)
    return [out]


class _Shown:
    """The command rows as a table reads them: the first `top` (all with 0), each without the columns the table
    leaves out (a row's dict made when it is read), and how many there are."""

    def __init__(self, rows, top: int):
        self.rows, self.top = rows, top

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self.rows)))]
        return {k: v for k, v in self.rows[i].items() if k not in ("time", "qid", "nsid") or self.top and i >= self.top}

    def __iter__(self):
        return (self[i] for i in range(len(self.rows)))


def _storage(file: str, fmt: str, top: int, decode_as: List[str], report: Optional[str] = None) -> None:
    from ibwire.analyze.storage import analyse
    from ibwire.cli.decode import check_decode_as
    from ibwire.report.tables import render

    if report:
        from ibwire.files.outfile import refuse_aliasing

        refuse_aliasing([report], [file])
    res = analyse(
        file, check_decode_as(decode_as), check_decode_as(decode_as, "rpcordma"), check_decode_as(decode_as, "iser")
    )
    if report:
        from ibwire.report.pictures.storage_report import report as write_report

        write_report(res, report, file)
    if fmt == "json":  # what render writes, the command table encoded a column at a time (no section is built)
        from ibwire.report.jsonrows import dump

        dump(res, sys.stdout.write)
        sys.stdout.write("\n")
        return
    commands = res["commands"]
    if fmt == "table":  # the rows a table shows, without the columns it leaves out; the others are only counted
        commands = _Shown(commands, top)
    sections = {
        "by_opcode": res["by_opcode"],
        "by_queue": res["by_queue"],
        "errors": res["errors"],
        "commands": commands,
        "rpc_by_procedure": res["rpc_by_procedure"],
        "rpc_calls": [{k: v for k, v in r.items() if k != "time" or fmt != "table"} for r in res["rpc_calls"]],
        "iser_by_opcode": res["iser_by_opcode"],
        "iser_commands": [{k: v for k, v in r.items() if k != "time" or fmt != "table"} for r in res["iser_commands"]],
        "smb_by_command": res["smb_by_command"],
        "smb_requests": [{k: v for k, v in r.items() if k != "time" or fmt != "table"} for r in res["smb_requests"]],
        "problems": [{"problem": p} for p in res["problems"]],
    }
    if not res["commands"] and not res["rpc_calls"] and not res["iser_commands"] and not res["smb_requests"]:
        sections["problems"].append(
            {
                "problem": "no NVMe-oF command found (no RDMA-CM setup for port 4420; "
                "-d nvme-rdma declares every RC queue pair NVMe-oF)"
            }
        )
    render(sections, fmt, whole=res, limit=top)
