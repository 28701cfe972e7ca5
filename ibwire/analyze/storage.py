"""The storage view: every NVMe-oF command of a capture with its submission, data transfer and completion
frames, latency and bytes, and per opcode and per queue: IOPS, throughput, latency percentiles and errors
by status.

Bulk path (ibwire.analyze.storagefeed): the compiled records pick the frames that matter (RDMA-CM MADs; RC
SEND, RDMA READ and WRITE) and give each one's payload offset; NVMe-oF capsules are read from those bytes
and matched with numpy (ibwire.decode.nvmematch) or followed packet by packet with NvmeTracker's steps
(ibwire.decode.nvmebulk), the other protocols by the trackers `ibwire decode` uses, in bulk mode: no
scapy."""

from collections import Counter
from collections.abc import Sequence
from itertools import repeat
from operator import is_not, itemgetter, ne
from typing import List

import numpy as np

from dissectors.nvmetable import ADMIN, ADMIN_NAMES, FABRICS, FABRICS_OPC, IO, IO_NAMES, STATUS_GENERIC
from ibwire.analyze.storagefeed import track
from ibwire.decode.nvme import NvmeTracker
from ibwire.decode.nvmematch import Irregular, Matcher, rounded


def opcode_name(sqe: bytes, qid) -> str:
    opc = sqe[0]
    if opc == FABRICS_OPC:
        return FABRICS.get(sqe[4], (f"Fabrics 0x{sqe[4]:02x}",))[0]
    table, names = (ADMIN, ADMIN_NAMES) if qid == 0 else (IO, IO_NAMES)
    return table[opc][0] if opc in table else names.get(opc, f"opcode 0x{opc:02x}")


def status_text(status) -> str:
    """Status code type and code (NVMe Base §4.6.1.2) as text."""
    if status is None:
        return "no completion"
    sc, sct = status & 0xFF, (status >> 8) & 0x7
    if sct == 0 and sc in STATUS_GENERIC:
        return STATUS_GENERIC[sc]
    return f"SCT {sct} SC 0x{sc:02x}"


def command_rows(tracker: NvmeTracker) -> "Rows":
    """One row per command the tracker followed, in submission order (as Rows of tracked_columns)."""
    return Rows(tracked_columns(tracker.commands))


def tracked_columns(commands: list) -> dict:
    """The command rows of NvmeTracker's Commands as a list per column (matched_columns' columns, the same
    values): a row's SQE fields read a column at a time, each opcode and status named once."""
    sqe = np.frombuffer(b"".join(c.sqe for c in commands), np.uint8).reshape(-1, 64)
    qid = [c.qid for c in commands]
    opc = sqe[:, 0]
    fabrics = opc == FABRICS_OPC
    io = np.fromiter((q not in (0, None) for q in qid), bool, len(qid)) & ~fabrics
    rw = io & np.isin(opc, list(IO))
    admin = np.fromiter((q == 0 for q in qid), bool, len(qid))
    pair = opc.astype(np.int64) << 9 | sqe[:, 4].astype(np.int64) << 1 | admin
    done = np.fromiter((bool(c.cqe) for c in commands), bool, len(qid))
    us = (np.array([c.cqe_time if c.cqe else 0.0 for c in commands], float) - [c.time for c in commands]) * 1e6
    latency = np.full(len(qid), None, object)
    latency[done] = rounded(us[done])
    data = [c.data for c in commands]
    values = (
        [c.queue.name if c.queue is not None else "?" for c in commands],
        qid,
        _named(pair, lambda k: opcode_name(bytes([k >> 9, 0, 0, 0, k >> 1 & 0xFF]), 0 if k & 1 else 1)),
        (sqe[:, 2].astype(np.int64) | sqe[:, 3].astype(np.int64) << 8).tolist(),
        _column(np.ascontiguousarray(sqe[:, 4:8]).view("<u4").ravel(), ~fabrics),
        _column(np.ascontiguousarray(sqe[:, 40:48]).view("<u8").ravel(), rw),
        _column(np.ascontiguousarray(sqe[:, 48:50]).view("<u2").ravel().astype(np.int64) + 1, rw),
        [c.frame for c in commands],
        list(map(len, data)),
        [d[0] if d else None for d in data],
        [d[-1] if d else None for d in data],
        [c.cqe for c in commands],
        latency.tolist(),
        [c.bytes for c in commands],
        _named(np.array([-1 if c.status is None else c.status for c in commands], np.int64), _status),
        [c.time for c in commands],
    )
    return dict(zip((name for name, _ in COLUMNS), values))


def _status(s: int) -> str:
    return status_text(s if s >= 0 else None)


def _column(values, shown):
    """`values` as a list, None where not `shown`."""
    out = values.astype(object)
    out[~shown] = None
    return out.tolist()


def _named(keys, name):
    """The text of each distinct key, then of each row."""
    unique, inverse = np.unique(keys, return_inverse=True)
    return np.array([name(k) for k in unique.tolist()] or [""], object)[inverse.ravel()].tolist()


def matched_columns(matcher: Matcher) -> dict:
    """The command rows (command_rows) of the commands a Matcher holds, as a list per column."""
    c = matcher.commands()
    sqe, queue = c["sqe"], c["queue"]
    qids = c["qid"]
    opc = sqe[:, 0]
    fabrics = opc == FABRICS_OPC
    rw = (qids != 0) & ~fabrics & np.isin(opc, list(IO))
    count, done = c["data_frames"], c["done"] > 0
    column, named = _column, _named
    pair = opc.astype(np.int64) << 9 | sqe[:, 4].astype(np.int64) << 1 | (qids == 0)
    latency = np.full(len(done), None, object)  # µs to the nanosecond, where a completion was matched
    latency[done] = rounded(((c["done_time"] - c["time"]) * 1e6)[done])
    values = (
        named(queue, lambda q: matcher.queues[q].name),
        qids.tolist(),
        named(pair, lambda k: opcode_name(bytes([k >> 9, 0, 0, 0, k >> 1 & 0xFF]), 0 if k & 1 else 1)),
        (sqe[:, 2].astype(np.int64) | sqe[:, 3].astype(np.int64) << 8).tolist(),
        column(np.ascontiguousarray(sqe[:, 4:8]).view("<u4").ravel(), ~fabrics),
        column(np.ascontiguousarray(sqe[:, 40:48]).view("<u8").ravel(), rw),
        column(np.ascontiguousarray(sqe[:, 48:50]).view("<u2").ravel().astype(np.int64) + 1, rw),
        c["frame"].tolist(),
        count.tolist(),
        column(c["first_data"], count > 0),
        column(c["last_data"], count > 0),
        column(c["done"], done),
        latency.tolist(),
        c["bytes"].tolist(),
        named(c["status"], _status),
        c["time"].tolist(),
    )
    return dict(zip((name for name, _ in COLUMNS), values))  # the Parquet table's columns, a row's keys


class Rows(Sequence):
    """The command rows held as columns (`columns`: key -> list, matched_columns), each row's dict made
    when it is read; ibwire.report.jsonrows and write_commands read the columns."""

    def __init__(self, columns: dict):
        self.columns = columns
        self._n = len(next(iter(columns.values())))

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._n))]
        return dict(zip(self.columns, (c[i] for c in self.columns.values())))

    def __iter__(self):
        return map(dict, map(zip, repeat(tuple(self.columns)), zip(*self.columns.values())))

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None


def rpc_rows(both) -> Sequence:
    """The RPC call rows (rpcstorage.call_rows) of storagefeed.track's trackers: from the RpcMatcher's
    columns where it followed NFS over RDMA, else from the tracker."""
    from ibwire.analyze.rpcstorage import call_rows

    return Rows(both.rpc.columns()) if both.rpc is not None else call_rows(both.rpcrdma)


def _percentiles(values) -> dict:
    if not values:
        return {"latency_p50_us": None, "latency_p90_us": None, "latency_p99_us": None, "latency_max_us": None}
    a = np.asarray(values, float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {
        "latency_p50_us": round(float(p50), 3),
        "latency_p90_us": round(float(p90), 3),
        "latency_p99_us": round(float(p99), 3),
        "latency_max_us": round(float(a.max()), 3),
    }


SUMMED = ("time", "latency_us", "completion", "bytes", "status")  # what a summary reads of a row


def summary_rows(rows: List[dict], column: str, ok: str = STATUS_GENERIC[0]) -> List[dict]:
    """Per value of `column`: commands, completed, errors, IOPS and bytes/s over the group's span (first
    submission to last completion), latency percentiles."""
    cols = getattr(rows, "columns", None)
    return summaries(cols if cols is not None else columns_of(rows, (column, *SUMMED)), column, ok)


def columns_of(rows: List[dict], names) -> dict:
    """The named values of every row, a list each."""
    values = zip(*map(itemgetter(*names), rows)) if rows else [[] for _ in names]
    return dict(zip(names, values))


def summed(cols: dict, ok: str = STATUS_GENERIC[0]) -> tuple:
    """What a summary reads of each row (SUMMED columns) as arrays: submission time, completed, latency (0
    where none), bytes, in error."""
    times = np.asarray(cols["time"], float)
    done = np.fromiter(map(is_not, cols["completion"], repeat(None)), bool, len(times))
    latency = np.nan_to_num(np.asarray(cols["latency_us"], float), nan=0.0)  # None: NaN, then 0
    bad = np.fromiter(map(ne, cols["status"], repeat(ok)), bool, len(times))
    return times, done, latency, np.asarray(cols["bytes"], np.int64), bad


def summaries(cols: dict, column: str, ok: str = STATUS_GENERIC[0], arrays=None) -> List[dict]:
    """summary_rows of rows given as columns (columns_of: `column` and SUMMED; `arrays`: their summed(), if
    made already)."""
    keys = cols[column]
    code = {k: i for i, k in enumerate(dict.fromkeys(keys))}  # each value's number, in order of appearance
    which = np.fromiter(map(code.__getitem__, keys), np.int64, len(keys))
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(len(code) + 1))
    groups = [(k, order[bounds[i] : bounds[i + 1]]) for k, i in code.items()]
    times, done, latency, nbytes, bad = arrays or summed(cols, ok)
    out = []
    for k, rs in sorted(groups, key=lambda kv: -len(kv[1])):
        fin = rs[done[rs]]
        start = float(times[rs].min())
        end = max(float((times[fin] + latency[fin] / 1e6).max()), start) if len(fin) else start
        span, total = end - start, int(nbytes[rs].sum())
        out.append(
            {
                column: k,
                "commands": len(rs),
                "completed": len(fin),
                "errors": int(bad[fin].sum()),
                "iops": round(len(fin) / span, 1) if span > 0 else None,
                "bytes": total,
                "bytes_per_s": round(total / span) if span > 0 else None,
                **_percentiles(latency[fin].tolist()),
            }
        )
    return out


def analyse(path: str, decode_as: bool = False, rpc_decode_as: bool = False, iser_decode_as: bool = False) -> dict:
    """The storage view of a capture: commands, per opcode, per queue, errors by status; RPC calls over
    RDMA and per procedure."""
    from ibwire.analyze.iserstorage import GOOD, scsi_rows
    from ibwire.analyze.rpcstorage import SUCCESS
    from ibwire.analyze.smbstorage import SUCCESS as SMB_SUCCESS
    from ibwire.analyze.smbstorage import request_rows
    from ibwire.decode.stream import Stream

    _keep_freed_memory()
    try:
        stream = Stream(path, icrc=False)
        both, matcher = track(stream, decode_as, rpc_decode_as, iser_decode_as=iser_decode_as)
        cols = matched_columns(matcher) if matcher is not None else None
    except Irregular:  # what numpy does not match, the packet-by-packet path does
        stream = Stream(path, icrc=False)
        both, cols = track(stream, decode_as, rpc_decode_as, iser_decode_as=iser_decode_as, fast=False)[0], None
    rows = Rows(cols if cols is not None else tracked_columns(both.nvme.commands))
    cols = rows.columns
    calls, errors, arrays = rpc_rows(both), Counter(zip(cols["opcode"], cols["status"])), summed(cols)
    return {
        "commands": rows,
        "by_opcode": summaries(cols, "opcode", arrays=arrays),
        "by_queue": summaries(cols, "queue", arrays=arrays),
        "errors": [
            {"opcode": o, "status": s, "commands": n} for (o, s), n in sorted(errors.items()) if s != STATUS_GENERIC[0]
        ],
        "rpc_calls": calls,
        "rpc_by_procedure": summary_rows(calls, "procedure", SUCCESS),
        "smb_requests": (smb := request_rows(both.smbdirect)),
        "smb_by_command": summary_rows(smb, "command", SMB_SUCCESS),
        "iser_commands": (iser := scsi_rows(both.iser)),
        "iser_by_opcode": summary_rows(iser, "opcode", GOOD),
        "problems": list(stream.problems),
    }


def _keep_freed_memory() -> None:
    """Ask glibc's malloc (mallopt(3): M_TRIM_THRESHOLD, M_TOP_PAD) to keep freed heap memory and grow the
    heap 64 MiB at a time, so each batch's columns reuse the pages the last one freed instead of faulting
    fresh ones in: on a million NVMe-oF packets written as JSON 290,000 page faults become 105,000 and 0.6 s
    of system time 0.25-0.35 s, for 55 MB more peak RSS (80 MB for the table).  Elsewhere (no glibc) nothing
    changes."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-1, 512 << 20)  # M_TRIM_THRESHOLD
        libc.mallopt(-2, 64 << 20)  # M_TOP_PAD
    except (AttributeError, OSError):
        pass


COLUMNS = [
    ("queue", "string"),
    ("qid", "uint16"),
    ("opcode", "string"),
    ("cid", "uint16"),
    ("nsid", "uint32"),
    ("slba", "uint64"),
    ("blocks", "uint32"),
    ("submission", "uint64"),
    ("data_frames", "uint32"),
    ("first_data", "uint64"),
    ("last_data", "uint64"),
    ("completion", "uint64"),
    ("latency_us", "float64"),
    ("bytes", "uint64"),
    ("status", "string"),
    ("time", "float64"),
]


def commands_table(rows: List[dict]):
    """The NVMe-oF command table as a pyarrow Table of COLUMNS' types; absent values are nulls."""
    import pyarrow as pa

    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in COLUMNS])
    columns = getattr(rows, "columns", None)
    return pa.Table.from_pydict(columns, schema) if columns is not None else pa.Table.from_pylist(rows, schema=schema)


def section_table(rows: Sequence):
    """Rows of any other section of the view (RPC calls, iSER commands, per-opcode tables …) as a pyarrow
    Table, columns in the rows' order, types as pyarrow infers them."""
    import pyarrow as pa

    columns = getattr(rows, "columns", None)
    return pa.Table.from_pydict(columns) if columns is not None else pa.Table.from_pylist(list(rows))


def write_commands(rows: List[dict], where) -> None:
    """The command table as Parquet (`where`: a path or a binary file object)."""
    import pyarrow.parquet as pq

    pq.write_table(commands_table(rows), where)
