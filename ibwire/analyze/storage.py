"""The storage view: every NVMe-oF command of a capture with its submission, data transfer and completion
frames, latency and bytes, and per opcode and per queue: IOPS, throughput, latency percentiles and errors
by status.

Bulk path: the compiled records pick the frames that matter (RDMA-CM MADs; RC SEND, RDMA READ and WRITE)
and give each one's payload offset; the capsules are read from those bytes (struct, dissectors.nvmetable)
and followed by the same tracker `ibwire decode` uses (ibwire.decode.nvme, in bulk mode: no scapy)."""

from collections import defaultdict
from operator import itemgetter
from typing import Dict, List

import numpy as np

from dissectors import smbdirecttable as sd
from dissectors.nvmetable import ADMIN, ADMIN_NAMES, FABRICS, FABRICS_OPC, IO, IO_NAMES, STATUS_GENERIC
from ibwire.analyze.requests import transfer_columns
from ibwire.decode import records as R
from ibwire.decode.iser import IserTracker
from ibwire.decode.iser import storage_rows as iser_rows
from ibwire.decode.nvme import NvmeTracker, storage_rows
from ibwire.decode.nvmebulk import follow, payload_ends
from ibwire.decode.nvmematch import Irregular, Matcher
from ibwire.decode.records import addr_text
from ibwire.decode.rpcrdma import RC_SEND, RpcRdmaTracker, Trackers
from ibwire.decode.rpcrdma import storage_rows as rpcrdma_rows
from ibwire.decode.smbdirect import SmbDirectTracker
from ibwire.decode.smbdirect import storage_rows as smbdirect_rows

CM_REQ, CM_REP = 0x0010, 0x0013  # the RDMA-CM MADs the trackers read (IBA §12.6); the others change nothing
MAD_HEADER = 24
CM_SERVICE_ID = 8  # REQ: ServiceID at message byte 8 (IBA §12.6.5)
CM_IP_PRIVATE = 140 + 36  # REQ: private data at message byte 140; its IP CM header is 36 bytes (A11.4)


class _Frame:
    __slots__ = ("number", "time")

    def __init__(self, number, time):
        self.number, self.time = number, time


class _Lite:
    """What NvmeTracker reads of a decoded frame, built from a record and its payload bytes."""

    __slots__ = ("frame", "flat", "notes", "errors", "layers", "packet")

    def __init__(self, number, time, flat):
        self.frame, self.flat = _Frame(number, time), flat
        self.notes, self.errors, self.layers, self.packet = [], [], {}, None


def _opcodes():
    """(name, transport, has RETH) of every BTH opcode, for the tracker's flat fields."""
    from dissectors.opcodes import lookup

    return [(op.name, op.transport, "reth" in op.headers) for op in map(lookup, range(256))]


class _Rows:
    """One batch's columns as Python lists, read once (indexing a structured array row by row is slow)."""

    COLS = (
        "opcode",
        "destqp",
        "psn",
        "paylen",
        "flags",
        "frame",
        "time",
        "reth_r_key",
        "caplen",
        "padcnt",
        "link",
        "mad_class",
        "mad_attrid",
        "cm_comm_id",
        "cm_remote_comm_id",
        "cm_qpn",
    )

    def __init__(self, batch, rows):
        rec = batch.rec[rows]
        for col in self.COLS:
            setattr(self, col, rec[col].tolist())
        self.src = [bytes(v) for v in rec["src"]]
        self.dst = [bytes(v) for v in rec["dst"]]
        self.data = np.asarray(batch.pos.data)[rows].tolist()
        self.buf = batch.buf


def _payload(r: _Rows, k: int) -> bytes:
    """Row k's payload: it ends before the pad, the ICRC and (native IB) the VCRC; empty when cut short."""
    if r.flags[k] & R.F_TRUNCATED or r.paylen[k] <= 0:
        return b""
    end = r.data[k] + r.caplen[k] - 4 - r.padcnt[k] - (2 if r.link[k] in (R.IB, R.IBGRH) else 0)
    return r.buf[end - r.paylen[k] : end].tobytes()


def _lite(r: _Rows, k: int, ops, addr) -> _Lite:
    name, transport, reth = ops[r.opcode[k]]
    flat = {
        "bth.opcode": r.opcode[k],
        "bth.opname": name,
        "bth.transport": transport,
        "bth.destqp": r.destqp[k],
        "bth.psn": r.psn[k],
        "ip.src": addr(r.src[k]),
        "ip.dst": addr(r.dst[k]),
        "payload.length": max(r.paylen[k], 0),
    }
    if reth:
        flat["reth.r_key"] = r.reth_r_key[k]
    payload = _payload(r, k) if name.startswith("SEND") or r.flags[k] & R.F_MAD else b""
    if r.flags[k] & R.F_MAD and r.mad_class[k] == 0x07:
        msg = payload[MAD_HEADER:]
        if r.mad_attrid[k] == CM_REQ and len(msg) >= CM_IP_PRIVATE + 4:
            flat.update(
                {
                    "cm.req": r.cm_comm_id[k],
                    "cm.req.localqpn": r.cm_qpn[k],
                    "cm.req.serviceid": int.from_bytes(msg[CM_SERVICE_ID : CM_SERVICE_ID + 8], "big"),
                    "cm.req.ip_cm.private": msg[CM_IP_PRIVATE : CM_IP_PRIVATE + 56].hex(),
                }
            )
        elif r.mad_attrid[k] == CM_REP:
            flat.update(
                {
                    "cm.rep": r.cm_comm_id[k],
                    "cm.rep.remotecommid": r.cm_remote_comm_id[k],
                    "cm.rep.localqpn": r.cm_qpn[k],
                }
            )
    else:
        flat["_payload"] = payload
    return _Lite(r.frame[k], r.time[k], flat)


def track(stream, decode_as: bool = False, rpc_decode_as: bool = False, iser_decode_as: bool = False, fast=True):
    """Follow every NVMe-oF command and RPC-over-RDMA call of `stream` (ibwire.decode.stream.Stream
    batches): the trackers, and the Matcher that holds the NVMe-oF commands (None: the tracker's list
    does).  `fast`: match NVMe-oF with numpy where it can (raises Irregular where it cannot)."""
    tracker = NvmeTracker(decode_as=decode_as, bulk=True)
    both = Trackers(tracker, RpcRdmaTracker(decode_as=rpc_decode_as, bulk=True), SmbDirectTracker(bulk=True))
    both.iser = IserTracker(decode_as=iser_decode_as, bulk=True)
    ops, names, short = _opcodes(), {}, {}
    rc = np.array([transport == "RC" for _, transport, _ in ops])  # what a tracker may read besides CM

    def addr(v: bytes) -> str:
        text = names.get(v)
        if text is None:
            text = names[v] = addr_text(v)
        return text

    def addr16(v: bytes) -> str:  # an S16 view's bytes: trailing zero bytes dropped
        text = short.get(v)
        if text is None:
            text = short[v] = addr_text(v.ljust(16, b"\0"))
        return text

    matcher, numbers = None, np.arange(0)
    for batch in stream:
        if not len(batch.rec):
            continue
        numbers = numbers if len(numbers) >= len(batch.rec) else np.arange(len(batch.rec))
        every = numbers[: len(batch.rec)]
        cm, data = storage_rows(batch.rec, slice(None), tracker)  # every row, read a column at a time
        cm = cm[np.isin(batch.rec["mad_attrid"][cm], (CM_REQ, CM_REP)) | rc[batch.rec["opcode"][cm]]]
        r = _Rows(batch, cm)
        for k in range(len(cm)):
            both.feed(_lite(r, k, ops, addr))
        rows = _data_rows(batch, every, both, data)
        if rows is None:
            continue
        claimed = np.zeros(len(rows), bool)
        if tracker.active and fast and not decode_as:
            matcher = matcher or Matcher(tracker, addr16)
            claimed = matcher.add(batch, rows)
        elif tracker.active:
            claimed = follow(tracker, batch, rows, addr16)
        _others(both, batch, rows, claimed, ops, addr)
    return both, matcher


def _data_rows(batch, every, both: Trackers, nvme_rows):
    """The RC SEND and RDMA READ/WRITE rows of a batch, once the RDMA-CM rows were fed, if any tracker asks
    for them (each asks for all of them or none), else None."""
    for rows in (nvme_rows(), *(rows() for rows in iser_rows(batch, every, both))):
        if len(rows):
            return rows
    for rows in rpcrdma_rows(batch, every, both) + smbdirect_rows(batch, every, both):
        if len(rows):
            return rows
    return None


def _quiet(t) -> bool:
    """Whether RPC-RDMA or SMB Direct (`t`) follows nothing yet: then only a SEND its heuristic could take,
    or a SEND First/Middle/Last (reassembled per QP), can change what it finds; an RDMA READ or WRITE finds
    no chunk or buffer to belong to."""
    if isinstance(t, SmbDirectTracker):
        return not (t.ends or t.requests or t.pending or t.tokens or t.reads or t.frags)
    return not (t.decode_as or t.ends or t.calls or t.reads or t.continued)


def _candidates(batch, rows):
    """Per row: (a SEND RPC-RDMA's heuristic could take, one SMB Direct's could, an RC SEND): a SEND First,
    Middle or Last; a SEND Only whose version word is 1 or 2 (RFC 8166 §4.2), or whose first words are
    an SMB Direct negotiate or data message's (MS-SMBD §2.2)."""
    opcode = batch.rec["opcode"][rows]
    send, only = np.isin(opcode, RC_SEND), np.isin(opcode, (0x04, 0x17))
    start, end = payload_ends(batch, rows)
    size = end - start
    raw = np.asarray(batch.buf)[np.minimum(start[:, None] + np.arange(8), len(batch.buf) - 1)]
    version = (raw[:, 4:7] == 0).all(axis=1) & np.isin(raw[:, 7], (1, 2)) & (size >= 16)
    w = raw[:, 0::2].astype(np.uint32) | raw[:, 1::2].astype(np.uint32) << 8
    smb = (w[:, 0] <= sd.MAX_CREDITS) & (w[:, 1] <= sd.MAX_CREDITS) & (w[:, 2] <= 1) & (w[:, 3] == 0)
    smb |= (w[:, 0] == sd.VERSION) & (w[:, 1] == sd.VERSION) & np.isin(w[:, 2], (0, sd.VERSION))
    smb &= size >= sd.DATA_HEAD
    odd = start < 0  # not a slice of the buffer: no shortcut
    return send & (~only | version | odd), send & (~only | smb | odd), send


def _others(both: Trackers, batch, rows, claimed, ops, addr) -> None:
    """Feed RPC-RDMA, SMB Direct and iSER the rows that can change what they find, in capture order: while
    one follows nothing (_quiet), only its candidates; from then on every row.  SMB Direct leaves a SEND
    the NVMe-oF tracker claimed alone (smbdirect.CLAIMED)."""
    rpc, smb, iser = both.rpcrdma, both.smbdirect, both.iser
    cand_rpc, cand_smb, send = _candidates(batch, rows)
    unclaimed = ~(claimed & send)
    cand_smb &= unclaimed
    every = np.ones(len(rows), bool)
    done = 0
    while done < len(rows):
        quiet = (_quiet(rpc), _quiet(smb))
        want_rpc = cand_rpc if quiet[0] else every
        want_smb = cand_smb if quiet[1] else unclaimed
        want = np.flatnonzero(want_rpc | want_smb | iser.seen)
        want = want[want >= done]
        if not len(want):
            return
        r = _Rows(batch, rows[want])
        for j, k in enumerate(want.tolist()):
            d = _lite(r, j, ops, addr)
            if want_rpc[k]:
                rpc.feed(d)
            if want_smb[k]:
                smb.feed(d)
            if iser.seen:
                iser.feed(d)
            done = k + 1
            if quiet != (_quiet(rpc), _quiet(smb)):
                break


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


def command_rows(tracker: NvmeTracker) -> List[dict]:
    """One row per command, in submission order."""
    rows, names, texts = [], {}, {}
    for c in tracker.commands:
        sqe, qid = c.sqe, c.qid
        opc = sqe[0]
        io = qid not in (0, None) and opc != FABRICS_OPC
        rw = io and opc in IO
        name = names.get((opc, sqe[4], qid == 0))
        if name is None:
            name = names[(opc, sqe[4], qid == 0)] = opcode_name(sqe, qid)
        status = texts.get(c.status)
        if status is None:
            status = texts[c.status] = status_text(c.status)
        q = c.queue
        rows.append(
            {
                "queue": q.name if q is not None else "?",
                "qid": qid,
                "opcode": name,
                "cid": sqe[2] | sqe[3] << 8,
                "nsid": int.from_bytes(sqe[4:8], "little") if opc != FABRICS_OPC else None,
                "slba": int.from_bytes(sqe[40:48], "little") if rw else None,
                "blocks": (sqe[48] | sqe[49] << 8) + 1 if rw else None,
                **transfer_columns(c.frame, c.time, c.data, c.cqe, c.cqe_time, c.bytes),
                "status": status,
                "time": c.time,
            }
        )
    return rows


def matched_rows(matcher: Matcher) -> List[dict]:
    """command_rows of the commands a Matcher holds, built a column at a time."""
    c = matcher.commands()
    sqe, queue = c["sqe"], c["queue"]
    qids = np.array([q.qid for q in matcher.queues] or [0])[queue]
    opc = sqe[:, 0]
    fabrics = opc == FABRICS_OPC
    rw = (qids != 0) & ~fabrics & np.isin(opc, list(IO))
    count, done = c["data_frames"], c["done"] > 0

    def column(values, shown):
        out = values.astype(object)
        out[~shown] = None
        return out.tolist()

    def named(keys, name):  # the text of each distinct key, then of each row
        unique, inverse = np.unique(keys, return_inverse=True)
        return np.array([name(k) for k in unique.tolist()] or [""], object)[inverse.ravel()].tolist()

    pair = opc.astype(np.int64) << 9 | sqe[:, 4].astype(np.int64) << 1 | (qids == 0)
    latency = [round(v, 3) for v in ((c["done_time"] - c["time"]) * 1e6)[done].tolist()]
    latencies = iter(latency)
    columns = zip(
        [matcher.queues[q].name for q in queue.tolist()],
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
        [next(latencies) if d else None for d in done.tolist()],
        c["bytes"].tolist(),
        named(c["status"], lambda s: status_text(s if s >= 0 else None)),
        c["time"].tolist(),
    )
    return [
        {
            "queue": q,
            "qid": qid,
            "opcode": name,
            "cid": cid,
            "nsid": nsid,
            "slba": slba,
            "blocks": blocks,
            "submission": frame,
            "data_frames": n,
            "first_data": first,
            "last_data": last,
            "completion": completion,
            "latency_us": lat,
            "bytes": nbytes,
            "status": status,
            "time": time,
        }
        for q, qid, name, cid, nsid, slba, blocks, frame, n, first, last, completion, lat, nbytes, status, time in columns
    ]


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
    return summaries(columns_of(rows, (column, *SUMMED)), column, ok)


def columns_of(rows: List[dict], names) -> dict:
    """The named values of every row, a list each."""
    values = zip(*map(itemgetter(*names), rows)) if rows else [[] for _ in names]
    return dict(zip(names, values))


def summaries(cols: dict, column: str, ok: str = STATUS_GENERIC[0]) -> List[dict]:
    """summary_rows of rows given as columns (columns_of: `column` and SUMMED)."""
    groups: Dict[tuple, List[int]] = defaultdict(list)
    for i, k in enumerate(cols[column]):
        groups[k].append(i)
    times = np.asarray(cols["time"], float)
    done = np.fromiter((d is not None for d in cols["completion"]), bool, len(times))
    latency = np.asarray([v if v is not None else 0.0 for v in cols["latency_us"]], float)
    nbytes = np.asarray(cols["bytes"], np.int64)
    bad = np.fromiter((s != ok for s in cols["status"]), bool, len(times))
    out = []
    for k, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        rs = np.asarray(rs)
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
    from ibwire.analyze.rpcstorage import SUCCESS, call_rows
    from ibwire.analyze.smbstorage import SUCCESS as SMB_SUCCESS
    from ibwire.analyze.smbstorage import request_rows
    from ibwire.decode.stream import Stream

    try:
        stream = Stream(path, icrc=False)
        both, matcher = track(stream, decode_as, rpc_decode_as, iser_decode_as=iser_decode_as)
        rows = matched_rows(matcher) if matcher is not None else command_rows(both.nvme)
    except Irregular:  # what numpy does not match, the packet-by-packet path does
        stream = Stream(path, icrc=False)
        both, _ = track(stream, decode_as, rpc_decode_as, iser_decode_as=iser_decode_as, fast=False)
        rows = command_rows(both.nvme)
    calls, cols = call_rows(both.rpcrdma), columns_of(rows, ("opcode", "queue", *SUMMED))
    errors = defaultdict(int)
    for r in rows:
        if r["status"] != STATUS_GENERIC[0]:
            errors[(r["opcode"], r["status"])] += 1
    return {
        "commands": rows,
        "by_opcode": summaries(cols, "opcode"),
        "by_queue": summaries(cols, "queue"),
        "errors": [{"opcode": o, "status": s, "commands": n} for (o, s), n in sorted(errors.items())],
        "rpc_calls": calls,
        "rpc_by_procedure": summary_rows(calls, "procedure", SUCCESS),
        "smb_requests": (smb := request_rows(both.smbdirect)),
        "smb_by_command": summary_rows(smb, "command", SMB_SUCCESS),
        "iser_commands": (iser := scsi_rows(both.iser)),
        "iser_by_opcode": summary_rows(iser, "opcode", GOOD),
        "problems": list(stream.problems),
    }


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


def write_commands(rows: List[dict], where) -> None:
    """The command table as Parquet (`where`: a path or a binary file object); absent values are nulls."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in COLUMNS])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), where)
