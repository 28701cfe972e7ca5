"""The storage view of NFS over RDMA: one row per RPC call (RFC 5531) carried in RPC-RDMA messages
(RFC 8166), with its call frame, the RDMA READ/WRITE frames that moved its chunks, its reply frame, latency,
bytes moved and reply status, as followed by ibwire.decode.rpcrdma (bulk mode)."""

from typing import List

from dissectors.rpcrdmatable import NFS3_PROCS, NFS4_OPS, NFS_PROGRAM
from ibwire.analyze.requests import transfer_columns

# accept_stat (RFC 5531 §9): what a reply says of its call
ACCEPT = ("success", "program unavailable", "program mismatch", "procedure unavailable", "garbage args")
SUCCESS = ACCEPT[0]


def procedure_name(call) -> str:
    """`NFSv3 READ`, `NFSv4 COMPOUND GETATTR`, or `program 100005 v3 proc 1`."""
    if call.prog == NFS_PROGRAM and call.vers == 3 and call.proc < len(NFS3_PROCS):
        return f"NFSv3 {NFS3_PROCS[call.proc]}"
    if call.prog == NFS_PROGRAM and call.vers == 4:
        main = f" {NFS4_OPS.get(call.main, call.main)}" if call.proc == 1 and call.main is not None else ""
        return f"NFSv4 {'COMPOUND' if call.proc == 1 else 'NULL'}{main}"
    return f"program {call.prog} v{call.vers} proc {call.proc}"


def status_text(call) -> str:
    if call.reply is None:
        return "no reply"
    if call.status == -1:
        return "denied"
    return ACCEPT[call.status] if 0 <= call.status < len(ACCEPT) else f"accept state {call.status}"


def call_rows(tracker) -> List[dict]:
    """One row per call, in call order (the columns of the NVMe-oF command table where they apply)."""
    return [
        {
            "connection": f"{c.client} → {c.server}",
            "procedure": procedure_name(c),
            "xid": f"0x{c.xid:08x}",
            **transfer_columns(c.frame, c.time, c.data, c.reply, c.reply_time, c.bytes),
            "status": status_text(c),
            "time": c.time,
        }
        for c in tracker.calls
    ]
