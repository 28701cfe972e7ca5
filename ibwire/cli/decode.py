"""`ibwire decode`: tshark's manners at the compiled decoder's speed — one line per packet, `-V` header
trees, `-x` hex dumps, `-T fields|json|jsonl|ek|csv`, `-Y` display filters, `-w` for the selected frames,
`-` (or `-r -`) to read a pipe."""

import contextlib
import sys
from typing import List, Optional

import numpy as np
import typer

from ibwire.cli import closed_all
from ibwire.cli.app import app, capture_source, port_speed, port_speed_option, read_file_option
from ibwire.errors import UserError

_SEPARATORS = {"/t": "\t", "/s": " "}
_QUOTES = {"d": '"', "s": "'", "n": ""}
DOCUMENT_BATCH = 2048  # frames a batch of -V, -T json, jsonl or -T ek output


def _field_options(opts: List[str]):
    """tshark's -E: header=y|n, separator=/t|/s|<char>, quote=d|s|n."""
    header, sep, quote = None, None, None
    for o in opts:
        key, _, value = o.partition("=")
        if key == "header" and value in ("y", "n"):
            header = value == "y"
        elif key == "separator" and value:
            sep = _SEPARATORS.get(value, value)
        elif key == "quote" and value in _QUOTES:
            quote = _QUOTES[value]
        else:
            raise UserError(f"-E takes header=y|n, separator=/t|/s|<character> or quote=d|s|n, not {o!r}")
    return header, sep, quote


def check_decode_as(values: List[str], name: str = "nvme-rdma") -> bool:
    """-d: whether `name` (nvme-rdma: NVMe-oF, rpcordma: RPC-RDMA, smb_direct: SMB Direct) is declared on
    every RC queue pair."""
    if name == "iser":  # iSER (ibwire.decode.iser), spelled as tshark's -d infiniband,iser
        return any(d.rpartition(",")[2] == "iser" for d in values)
    values = [d for d in values if d.rpartition(",")[2] != "iser"]
    for d in values:
        if d.rpartition(",")[2] not in ("nvme-rdma", "rpcordma", "smb_direct"):
            raise UserError(
                f"-d takes nvme-rdma (NVMe-oF on every RC queue pair), rpcordma (RPC-RDMA), smb_direct or iser, not {d!r}"
            )
    return any(d.rpartition(",")[2] == name for d in values)


def _trackers(decode_as: List[str]):
    """The storage protocols' trackers the printer reads, each told whether -d names its protocol."""
    from ibwire.decode.iser import IserTracker
    from ibwire.decode.nvme import NvmeTracker
    from ibwire.decode.rpcrdma import RpcRdmaTracker, Trackers
    from ibwire.decode.smbdirect import SmbDirectTracker

    trackers = Trackers(
        NvmeTracker(decode_as=check_decode_as(decode_as)),
        RpcRdmaTracker(check_decode_as(decode_as, "rpcordma")),
        SmbDirectTracker(check_decode_as(decode_as, "smb_direct")),
    )
    trackers.iser = IserTracker(check_decode_as(decode_as, "iser"))
    return trackers


def _names_analysis(src: str, keys, display_filter: Optional[str]) -> bool:
    """Do the -e fields or the -Y filter name bth.analysis fields?  Those need the whole capture first, so an
    error on standard input."""
    named = any(k == "bth.analysis" or k.startswith("bth.analysis.") for k in keys)
    if display_filter is not None and not named:
        from ibwire.decode.record_filter import names_analysis

        named = names_analysis(display_filter)
    if named and src == "-":
        raise UserError(
            "bth.analysis fields need the whole capture first (a frame is a retransmission by what "
            "came before it); save standard input to a file and decode that"
        )
    return named


@app.command()
def decode(
    file: Optional[str] = typer.Argument(None, help="pcap or pcapng capture; - reads it from standard input"),
    read: Optional[str] = read_file_option(),
    display_filter: Optional[str] = typer.Option(
        None, "-Y", "--display-filter", "--filter", help="Wireshark display filter, e.g. 'bth.p_key == 0x8001'"
    ),
    count: Optional[int] = typer.Option(None, "-c", "--count", help="stop after N selected packets"),
    fmt: str = typer.Option("text", "-T", "--format", help="text, fields, json, jsonl, ek or csv"),
    fields: List[str] = typer.Option(
        [], "-e", "--field", help="a column of -T fields/csv, or the only fields of -T json/ek (repeatable)"
    ),
    only_layers: Optional[str] = typer.Option(
        None, "-j", help="-T json/ek: only these protocols' own fields (space-separated, e.g. 'infiniband udp')"
    ),
    all_layers: Optional[str] = typer.Option(
        None, "-J", help="-T json/ek: only these protocols, with everything they contain"
    ),
    field_opts: List[str] = typer.Option([], "-E", help="header=y|n, separator=/t|/s|C, quote=d|s|n"),
    time_mode: str = typer.Option(
        "r", "-t", help="time column: r relative, d delta, dd delta displayed, a/ad local time/date, u/ud UTC, e epoch"
    ),
    verbose: bool = typer.Option(False, "-V", "--verbose", help="the header tree of each packet"),
    hexdump: bool = typer.Option(False, "-x", "--hex", help="a hex and ASCII dump of each packet"),
    write: Optional[str] = typer.Option(
        None, "-w", "--write", help="write the selected frames to this pcap/pcapng file (nothing printed unless -P)"
    ),
    print_too: bool = typer.Option(
        False, "-P", "--print", help="summary lines too: while writing with -w, and before -V trees and -x dumps"
    ),
    icrc: bool = typer.Option(True, "--icrc/--no-icrc", help="verify ICRC and VCRC"),
    speed: str = port_speed_option(),
    decode_as: List[str] = typer.Option(
        [],
        "-d",
        "--decode-as",
        help="nvme-rdma: every RC queue pair carries NVMe-oF (captures without the RDMA-CM setup); "
        "iser: every RC SEND is iSER; rpcordma: every RC SEND is RPC-RDMA; smb_direct: accepted as tshark 4.4 takes it (SMB Direct is found by "
        "its heuristic either way)",
    ),
):
    """Decode every IB/RoCE header of each packet (ICRC/VCRC checked), like tshark."""
    from ibwire.report.packets.printer import Printer

    _set_port_speed(port_speed(speed))
    src = capture_source(file, read, "name a capture file, as an argument or with -r (- reads one from standard input)")
    fmt, keys, (header, sep, quote) = _output_options(fmt, time_mode, fields, field_opts, count, write, print_too)
    nvme = _trackers(decode_as)
    flt = _display_filter(display_filter)
    named = _names_analysis(src, keys, display_filter)
    stream = _open(src, icrc, verbose or fmt in ("json", "jsonl", "ek"))
    warnings = []
    if src != "-" and (named or verbose or fmt in ("json", "jsonl", "ek")):
        # -c N alone reads N frames, and tshark -c N analyses those alone: so does the RC pass
        learner = "tree" if verbose else fmt if fmt in ("json", "jsonl", "ek") else None  # (whose programs are learned)
        rc = _analysed(src, icrc, count if display_filter is None else None, learner)
        stream.fill, warnings = rc.fill, rc.problems
    if (only_layers or all_layers) and fmt not in ("json", "ek"):
        raise UserError("-j and -J select the protocols of -T json or -T ek")
    layers = (all_layers or only_layers or "").split()
    printer = Printer(fmt, time_mode, fields, bool(header), sep or "\t", quote or "", keys, layers, bool(all_layers))
    printer.decimals = stream.decimals
    printer.nvme = nvme
    out = sys.stdout.buffer
    show = write is None or print_too
    with contextlib.ExitStack() as files:
        writer = None
        if write:
            from ibwire.files.capwrite import SelectedFrames
            from ibwire.files.outfile import output_file

            f = files.enter_context(output_file(write, "wb", inputs=[None if src == "-" else src]))
            writer = SelectedFrames(f, write, stream)
        _run(stream, flt, printer, out, show, writer, count, verbose, hexdump, print_too)
        if writer:
            writer.finish()
    for problem in list(stream.problems) + warnings:
        print(f"ibwire: warning: {src}: {problem}", file=sys.stderr)
    closed_all()  # (the capture, -w's file and the read-ahead thread are done with)


def _display_filter(text: Optional[str]):
    """-Y's filter compiled (None without -Y: summary lines start without the filter modules)."""
    if not text:
        return None
    from ibwire.decode.filter import compile_filter

    return compile_filter(text)


def _field_keys(fields: List[str]) -> List[str]:
    """-e's fields by their canonical names, each checked."""
    if not fields:
        return []  # (summary lines start without the field tables: 7 ms)
    from ibwire.decode.fieldtypes import field_type
    from ibwire.decode.filter import closest, field_name
    from ibwire.report.packets.values import doc_name

    keys = [field_name(f) for f in fields]
    for f, k in zip(fields, keys):
        if field_type(k) is None and not doc_name(k):  # (a field of tshark's document: from the full decode)
            raise UserError(f"-e {f}: no such field; did you mean '{closest(k)}'?")
    return keys


def _set_port_speed(speed: float) -> None:
    """The port speed that pause frames' `*pause_s` fields assume.  At the default speed the layers (scapy's
    import: 90 ms of a text run's start) load only when a frame is decoded in full."""
    from dissectors.dcbfacts import DEFAULT_PORT_SPEED

    if speed != DEFAULT_PORT_SPEED or "dissectors.dcb" in sys.modules:
        from dissectors.dcb import set_port_speed

        set_port_speed(speed)


def _analysed(src: str, icrc: bool, upto: Optional[int], documents: Optional[str]):
    """The capture's RC analysis (ibwire.analyze.packets.CaptureAnalysis), made on a thread of its own while
    this one imports what printing whole documents needs (the learned programs' modules; scapy only when a frame
    is decoded in full or a program learned), as the analysis's reads and compiled decode release the GIL; a
    daemon thread, so Ctrl-C waits for nothing."""
    import threading

    from ibwire.analyze.packets import CaptureAnalysis

    got: list = []

    def analyse():
        try:
            got.append(CaptureAnalysis(src, icrc, upto=upto))
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
            got.append(e)

    t = threading.Thread(target=analyse, name="ibwire-analysis", daemon=True)
    t.start()
    if documents:
        from ibwire.report.packets.learned_store import kept

        if not kept(documents):  # (programs to learn: their full decodes need scapy)
            import ibwire.decode.frame  # noqa: F401
        import ibwire.report.packets.shapes  # noqa: F401
    t.join()
    if isinstance(got[0], BaseException):
        raise got[0]
    return got[0]


def _output_options(fmt, time_mode, fields, field_opts, count, write, print_too):
    """The options that shape the output, checked: -T's format (lower case), -e's field names, and -E's
    (header, separator, quote) with -T csv's defaults."""
    from ibwire.report.packets.printer import FORMATS, TIME_MODES

    if write == "-" and print_too:
        raise UserError("-w - writes the capture to standard output; it cannot carry the -P lines too")
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise UserError(f"-T must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if time_mode not in TIME_MODES:
        raise UserError(f"-t must be one of {', '.join(TIME_MODES)}, not {time_mode!r}")
    if fmt in ("fields", "csv") and not fields:
        raise UserError(f"-T {fmt} needs at least one -e FIELD, e.g. -e frame.number -e bth.psn")
    if count is not None and count < 1:
        raise UserError("-c needs a positive number of packets")
    keys = _field_keys(fields)
    header, sep, quote = _field_options(field_opts)
    if fmt == "csv":
        header, sep, quote = header if header is not None else True, sep or ",", quote if quote is not None else ""
    return fmt, keys, (header, sep, quote)


def _run(stream, flt, printer, out, show, writer, count, verbose, hexdump, summary_too):
    from ibwire.decode.stream import select

    shown = 0
    t0, prev = None, None
    if verbose or hexdump:
        from ibwire.report.packets.dumps import Dumps
        from ibwire.report.packets.printer import Printer

        tree_printer, dumps = Printer("tree"), Dumps()
        tree_printer.nvme = printer.nvme  # -V decodes storage as the other outputs do
        tree_printer.tree_dumps = not hexdump  # -x dumps the frame's bytes instead of each Data item's
    behind = _Behind(out) if show and verbose and not (hexdump or summary_too) else None
    if show:
        out.write(printer.start())
    if flt:
        from ibwire.report.packets.tcp_icmp_fields import filter_documents  # (tcp.* and icmp.* fields: tshark's)

        batches = select(stream, flt, nvme=printer.nvme, documents=filter_documents(flt))
    else:
        batches = ((b, None) for b in stream)
    for batch, mask in batches:
        rec = batch.rec
        if not len(rec):
            continue
        if t0 is None:
            t0 = float(rec["time"][0])
        rows = np.flatnonzero(mask) if mask is not None else np.arange(len(rec))
        if count is not None:
            rows = rows[: count - shown]
        shown += len(rows)
        if writer:
            for i in rows.tolist():
                writer.write(batch, i)
        if show:
            times = rec["time"]

            def details(i, batch=batch, times=times, prev=prev, t0=t0):
                from ibwire.decode import decode_frame
                from ibwire.decode.stream import with_analysis

                d = with_analysis(decode_frame(batch.frame(i)), batch.rec[i])
                if printer.nvme is not None:
                    printer.nvme.feed(d)
                d.flat.update(detail_flat_times(d.frame.time, t0, float(times[i - 1]) if i else prev))
                return d

            if behind:
                behind.put(tree_printer.tree_text(batch, rows, details))
            elif verbose or hexdump:
                from ibwire.report.packets.tree import hex_dump

                trees = tree_printer.trees(batch, rows, details) if verbose else None
                for n, i in enumerate(rows.tolist()):
                    if summary_too:
                        out.write(printer.batch(batch, np.array([i]), details))
                    if verbose:  # tshark dumps each Data item's bytes, unless -x dumps the frame's
                        out.write(dumps(trees[n], not hexdump))
                    if hexdump:
                        out.write(hex_dump(batch.frame(i).data).encode() + b"\n")
            else:
                for part in printer.batch_parts(batch, rows, details):
                    out.write(part)
            if not behind:
                out.flush()
        prev = float(rec["time"][-1])
        if count is not None and shown >= count:
            break
    if behind:
        behind.close()
    if show:
        out.write(printer.end())
        out.flush()
    for used in (printer, tree_printer) if verbose or hexdump else (printer,):
        used.keep_learned()


class _Behind:
    """-V alone: each batch's trees written, their hex dumps made (ibwire.report.packets.tree.Dumps), on a thread
    of their own while the next batch is printed (both halves release the GIL): put() waits for the batch before
    to be written, so two batches' texts are held at most.  An error writing is raised in the caller at its next
    put() or at close()."""

    def __init__(self, out):
        import queue
        import threading

        from ibwire.report.packets.dumps import Dumps

        self.out, self.dumps, self.error = out, Dumps(), None
        self.queue = queue.Queue(maxsize=1)
        self.thread = threading.Thread(target=self._write, name="ibwire-write", daemon=True)
        self.thread.start()

    def _write(self) -> None:
        while (parts := self.queue.get()) is not None:
            if self.error is None:
                try:
                    for text in parts:
                        self.out.write(self.dumps(text))
                    self.out.flush()
                except BaseException as e:  # noqa: BLE001 - the caller's thread raises it
                    self.error = e
            del parts
            self.queue.task_done()

    def put(self, parts: list) -> None:
        """Write the texts `parts`, one after the other."""
        self.queue.join()
        if self.error is not None:
            raise self.error
        self.queue.put(parts)

    def close(self) -> None:
        self.queue.join()
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


def detail_flat_times(t: float, t0: float, prev: Optional[float]) -> dict:
    return {"frame.time_relative": t - t0, "frame.time_delta": t - (t if prev is None else prev)}


def _reuse_freed_memory(options) -> None:
    """Let glibc's malloc (mallopt(3)) keep freed memory for the next batch instead of faulting fresh pages in.

    Whole documents are large texts (a batch of -V trees of MADs is 14 MB, rendered into the bytes written):
    HEAP_KEPT keeps freed heap memory, grows the heap 64 MiB at a time and takes blocks below 32 MiB from it
    (setting the others turns glibc's sliding mmap threshold off, which left each batch's text to fresh mmap'd
    pages: -V of 100,000 MADs 0.24-0.35 s of system time, now 0.14-0.15 s; peak RSS of -V and -T json on
    1,000,000 RoCEv2 packets 183 and 199 MB before, 159 and 194 MB after).  -V of 100,000
    MADs: 0.35-0.43 s of system time 0.08-0.16 s; of 1,000,000 RoCEv2 packets 1.9-2.2 s 0.2-0.4 s, for 28 MB
    more peak RSS (177 MB).  Lines (LINES_HEAP): the chunks read, each batch's records and its text (1-4 MB)
    come from the heap rather than from mmap (the CLI's 1 MiB threshold) and stay there: summary lines of
    1,000,000 RoCEv2 packets took 196,000 page faults and 0.42-0.50 s of system time, now 11,000 and 0.1 s.
    Both keep one arena (M_ARENA_MAX): the decoding and rendering threads would each grow one of their own and
    keep it (-V of 1,000,000 RoCEv2 packets peaked at 239 MB with them, 183 MB with one, in the same time).
    Elsewhere (no glibc) nothing changes."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
        for option, size in options:
            mallopt(option, size)
    except (AttributeError, OSError):
        pass


ONE_ARENA = (-8, 1)  # M_ARENA_MAX (malloc.h)
# (mallopt option, bytes): M_MMAP_THRESHOLD (at most 32 MiB), M_TRIM_THRESHOLD, M_TOP_PAD
HEAP_KEPT = ((-3, 32 << 20), (-1, 512 << 20), (-2, 64 << 20), ONE_ARENA)
LINES_HEAP = ((-3, 32 << 20), (-1, 256 << 20), ONE_ARENA)  # M_MMAP_THRESHOLD (at most 32 MiB), M_TRIM_THRESHOLD


def _open(src: str, icrc: bool, documents: bool):
    """The capture's batches; a batch printed as whole documents (-V, -T json, jsonl, -T ek: up to 10 KB a
    MAD) holds DOCUMENT_BATCH frames, so the text of one batch stays near 20 MB."""
    from ibwire.decode.stream import Stream

    _reuse_freed_memory(HEAP_KEPT if documents else LINES_HEAP)
    if src == "-":
        from ibwire.decode.pipe import PipeStream

        return PipeStream(sys.stdin.buffer, icrc)
    return Stream(src, icrc, DOCUMENT_BATCH) if documents else Stream(src, icrc)
