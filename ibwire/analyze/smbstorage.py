"""The storage view of SMB Direct: one row per SMB2 request (MS-SMB2 §2.2) carried in SMB Direct data
messages (MS-SMBD §2.2.3), with its request frame, the RDMA READ/WRITE frames that used its buffer
descriptors' tokens, its final response frame, latency, bytes moved (over RDMA and inline) and status, as
followed by ibwire.decode.smbdirect (bulk mode)."""

from typing import List

from dissectors.smb2table import COMMANDS
from dissectors.smbdirecttable import NT_STATUS
from ibwire.analyze.requests import transfer_columns

SUCCESS = NT_STATUS[0]


def command_name(cmd: int) -> str:
    return COMMANDS[cmd] if cmd < len(COMMANDS) else f"command {cmd}"


def status_text(req) -> str:
    if req.reply is None:
        return "no response"
    return NT_STATUS.get(req.status, f"0x{req.status:08x}")


def request_rows(tracker) -> List[dict]:
    """One row per request, in request order (the columns of the NVMe-oF command table where they apply)."""
    return [
        {
            "connection": f"{r.client} → {r.server}",
            "command": command_name(r.command),
            "message_id": r.mid,
            **transfer_columns(r.frame, r.time, r.data, r.reply, r.reply_time, r.bytes),
            "status": status_text(r),
            "time": r.time,
        }
        for r in tracker.requests
    ]
