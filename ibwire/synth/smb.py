"""SMB Direct conversations of a scenario ([[smb]]): an SMB2 client reading or writing a file over one RC
connection (optionally set up by RDMA-CM for port 445, MS-SMBD §2.1), opened by the SMB Direct negotiate
exchange (§3.1.5.1), each request in a data transfer message (§2.2.3) carrying a buffer descriptor
(§2.2.3.1) whose token the server uses: a READ's data RDMA WRITten into the client's buffer, a WRITE's data
RDMA READ from it (MS-SMB2 §3.3.5.12, §3.3.5.13); every request packet acknowledged (IBA §9.7.5)."""

from typing import List, Tuple

from dissectors.numbers import SMB_DIRECT_PORT
from dissectors.nvmetable import SID_ULP_TCP
from ibwire.synth import mads
from ibwire.synth import smbdirect as m
from ibwire.synth.nfs import SEND, THINK, WRITE, _Conn, rdma_read

OPS = ("read", "write")
FID = bytes(range(0x10, 0x20))  # the file id every request names
SESSION, TREE = 0x0000100000000009, 5


def _setup(conn: _Conn, t: float) -> float:
    """RDMA-CM REQ (service ID of port 445) and REP, then the SMB Direct negotiate request and response;
    returns when the client may send requests."""
    ctx, (client, cqpn), (server, sqpn) = conn.ctx, conn.end["c"], conn.end["s"]
    lat = ctx.s.latency
    if conn.spec["cm"]:
        a, b = next(ctx.comm), next(ctx.comm)
        sid, psn = SID_ULP_TCP | SMB_DIRECT_PORT, conn.psn["c"]
        req = mads.cm_req(a, sid, client.guid, cqpn, psn, 0xFFFF, client.lid, server.lid, client.gid, server.gid)
        conn.out.append((t, ctx.mad(client, server, req, 1)))
        rep = mads.cm_rep(b, a, server.guid, sqpn, conn.psn["s"])
        conn.out.append((t + 2 * lat, ctx.mad(server, client, rep, 1)))
        t += 3 * lat
    t = conn.message(t, "c", SEND, m.negotiate_request()) + lat + THINK
    return conn.message(t, "s", SEND, m.negotiate_response()) + 2 * lat


def _smb(op: str, mid: int, body: bytes, reply: bool = False) -> bytes:
    command = m.READ if op == "read" else m.WRITE
    flags = m.SERVER_TO_REDIR if reply else 0
    return m.data_message(m.smb2_header(command, mid, SESSION, TREE, flags=flags) + body)


def _request(conn: _Conn, t: float, k: int) -> None:
    """Request k of the connection and everything it causes, up to the ACK of its response."""
    op, size, lat, mid = conn.spec["op"], conn.spec["size"], conn.ctx.s.latency, conn.spec["message_id"] + k
    token, va = 0x2000 + (k & 0xFFFF), 0x7F0000000000 + k * 0x100000
    data = conn.ctx.payload(k, 0, size)
    if op == "read":
        body = m.read_request(FID, size, k * size, [(va, token, size)])
    else:
        body = m.write_request(FID, k * size, channel=[(va, token, size)], remaining=size)
    t = conn.message(t, "c", SEND, _smb(op, mid, body)) + lat + THINK
    if op == "read":
        t = conn.message(t, "s", WRITE, data, (va, token, size)) + 1e-6
        response = m.read_response(remaining=size)
    else:
        t = rdma_read(conn, t, data, va, token)
        response = m.write_response(size)
    conn.message(t, "s", SEND, _smb(op, mid, response, reply=True))


def smb_frames(ctx, t0: float) -> List[Tuple[float, bytes]]:
    """(time, frame) of every [[smb]] connection's setup and requests."""
    out = []
    for spec in ctx.s.smb:
        conn = _Conn(ctx, spec)
        t = _setup(conn, t0 + spec["at"])
        for k in range(spec["count"]):
            _request(conn, t + k * spec["interval"], k)
        out += conn.out
    return out
