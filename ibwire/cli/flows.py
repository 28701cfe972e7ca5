"""`ibwire flows FILE`: one row per RC/UC/UD/XRC conversation, with RC transport analysis."""

from typing import List, Optional

import typer

from ibwire.cli.app import TOP, app, capture_source, read_file_option
from ibwire.errors import UserError


def _table_row(r: dict) -> dict:
    """A terminal-width summary of one conversation; json/csv carry every field."""
    issues = [
        f"{k.replace('_', ' ')} {r[k]}"
        for k in ("drops", "not_captured", "retransmissions", "out_of_order", "bad_icrc", "rnr_naks", "length_mismatch")
        if r.get(k)
    ]
    issues += [f"NAK {k} {v}" for k, v in (r.get("naks") or {}).items()]
    for side in ("a", "b"):
        g = (r.get("retries_" + side) or {}).get("gave_up")
        if g:
            why = "RNR-NAKed" if g["cause"] == "rnr" else "unanswered"
            issues.append(f"{r[side]} gave up after {g['retries']} {why} retries")
    if r.get("not_analysed"):
        issues.insert(0, "not analysed: " + r["not_analysed"].split(",")[0])
    cnp = r.get("cnp_received_a", 0) + r.get("cnp_received_b", 0)
    if cnp:
        issues.append(f"CNPs {cnp}")
    lat = r.get("ack_latency_us") or r.get("read_latency_us")
    return {
        "#": r["conversation"],
        "transport": r["transport"],
        "a (QPN)": f"{r['a']} ({r['qpn_a'] or '?'})",
        "b (QPN)": f"{r['b']} ({r['qpn_b'] or '?'})",
        "P_Key": r["p_key"],
        "packets": r["packets_a_to_b"] + r["packets_b_to_a"],
        "payload": r["payload_bytes"],
        "goodput Mb/s": round(r["goodput_bps"] / 1e6, 3) if r.get("goodput_bps") else None,
        "messages": ", ".join(f"{k} {v}" for k, v in r["messages"].items()),
        "ACK p50/p99 µs": f"{lat['p50']:g}/{lat['p99']:g}" if lat else "",
        "issues": "; ".join(issues),
    }


def _failures(rows) -> None:
    """After the table: one paragraph per requester that resent anything (analyze.retries)."""
    from rich.text import Text

    from ibwire.analyze.retries import paragraph
    from ibwire.report.tables import console

    texts = [t for r in rows for t in paragraph(r)]
    if not texts:
        return
    out = console()
    out.print("\nretransmissions and retry failures", highlight=False, markup=False)
    for t in texts:
        out.print(Text(t))


def _qp(text: str, option: str = "--qp") -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise UserError(f"{option} takes a QP number such as 0x12 or 18, not {text!r}") from None


@app.command()
def flows(
    file: Optional[str] = typer.Argument(None, help="pcap or pcapng capture"),
    read: Optional[str] = read_file_option(),
    fmt: str = typer.Option("table", "--format", "-T", "-f", help="table, json or csv"),
    display_filter: Optional[str] = typer.Option(
        None, "-Y", "--display-filter", help="only packets matching, e.g. 'bth.p_key == 0x8001'"
    ),
    qp: Optional[str] = typer.Option(None, "--qp", help="only conversations using this QP number"),
    top: Optional[int] = typer.Option(
        None,
        "--top",
        show_default=False,
        help="only the N conversations with the most bytes, in every format and the "
        f"report (without it: {TOP} rows of the table on a terminal; 0 = all)",
    ),
    icrc: bool = typer.Option(True, "--icrc/--no-icrc", help="verify ICRCs (a bad one counts as a drop)"),
    jobs: int = typer.Option(
        0,
        "--jobs",
        "-j",
        help="threads decoding parts of the file (0 = one per CPU "
        "for captures of 64 MiB and more); the result is the same",
    ),
    report: Optional[str] = typer.Option(
        None,
        "--report",
        help="also write an HTML page of pictures: PSN graphs, "
        "throughput over time, latency histograms, a ladder diagram",
    ),
    interval: Optional[float] = typer.Option(
        None, "--interval", help="seconds per interval in the report's time charts (default: about 100 intervals)"
    ),
    ladder: Optional[str] = typer.Option(
        None,
        "--ladder",
        help="QP number of the conversation the report's ladder "
        "diagram draws (default: the busiest RC one set up by CM)",
    ),
    storage: bool = typer.Option(
        False, "--storage", help="instead: the storage view of ibwire stats --storage (its -d and --report too)"
    ),
    decode_as: List[str] = typer.Option([], "-d", "--decode-as", help="with --storage: as ibwire stats -d"),
):
    """Conversations: both endpoints and QPNs, P_Key, messages by operation, bytes, goodput, one- vs
    two-sided; for RC: PSN gaps told apart as drops (lost on the wire) or not captured (missed by the capture),
    retransmissions, out-of-order, NAKs by kind, RNR timers, ACK coalescing,
    outstanding depth, READ latency, request-to-ACK latency, messages checked against DMA length, CNPs."""
    from ibwire.analyze.flows import analyse
    from ibwire.decode.record_filter import compile_batch_filter, names_analysis
    from ibwire.decode.scan import scan
    from ibwire.report.tables import check_format, progress

    file = capture_source(file, read)
    check_format(fmt)
    if storage or decode_as:
        return _storage_view(file, fmt, top, decode_as, report, storage)
    fill = None
    if display_filter and names_analysis(display_filter):
        from ibwire.analyze.packets import CaptureAnalysis

        fill, jobs = CaptureAnalysis(file, icrc).fill, 1  # filled by frame number: one reader numbers them
    mask = compile_batch_filter(display_filter, fill) if display_filter else None
    size = scan(file).size
    events: list = []  # the sequencer's verdicts by frame, which the report's PSN graphs mark
    with progress(size, "flows") as cb:
        res = analyse(file, icrc, mask, cb, jobs, events=events if report else None)
    rows = _chosen(res["conversations"], qp, top)
    if report:
        _write_report(file, report, {**res, "conversations": rows}, events, interval, top, ladder, icrc, mask)
    _print(res, rows, fmt, top)


def _storage_view(file: str, fmt: str, top: Optional[int], decode_as: List[str], report, storage: bool) -> None:
    """--storage: every storage command per connection and opcode, as `ibwire stats --storage` shows it."""
    from ibwire.cli.stats import _storage

    if not storage:
        raise UserError("-d applies to --storage (see ibwire flows --help)")
    _storage(file, fmt, TOP if top is None else top, decode_as, report)


def _chosen(rows: list, qp: Optional[str], top: Optional[int]) -> list:
    """The conversations --qp and --top keep."""
    if qp is not None:
        q = f"0x{_qp(qp):06x}"
        rows = [r for r in rows if q in (r["qpn_a"], r["qpn_b"])]
    return rows[:top] if top else rows


def _write_report(file, path, res, events, interval, top, ladder, icrc, mask) -> None:
    """--report: the HTML page of `res` (its conversations those chosen), the sequencer's `events` marked."""
    from ibwire.analyze.frames import incomplete, marked
    from ibwire.report.pictures.flows_report import write_report

    table, lost = events
    problems = res["problems"] + ([incomplete("marks in the PSN graphs")] if lost else [])
    ladder_qp = _qp(ladder, "--ladder") if ladder is not None else None
    write_report(
        file, path, {**res, "problems": problems, "marks": marked(table)}, interval, top or 8, ladder_qp, icrc, mask
    )


def _print(res: dict, rows: list, fmt: str, top: Optional[int]) -> None:
    """The chosen conversations to standard output: a table with the retry paragraphs and the capture's
    completeness after it, or json/csv with every field."""
    from ibwire.report.tables import render

    if fmt == "table":
        rows_t = [_table_row(r) for r in rows]
        render(
            {"conversations": rows_t, "problems": [{"problem": p} for p in res["problems"]]},
            fmt,
            limit=TOP if top is None else top,
        )
        _failures(rows)
        if res.get("capture"):
            from ibwire.report.tables import console

            console().print("\n" + res["capture"]["text"], highlight=False, markup=False)
    else:
        whole = {"conversations": rows, "problems": res["problems"]}
        if res.get("capture"):
            whole["capture"] = {k: v for k, v in res["capture"].items() if k != "text"}
        render({"conversations": rows}, fmt, whole=whole)
