"""NFS over RDMA conversations of a scenario ([[nfs]]): an NFSv3 or v4 client calling a server over one RC
connection (optionally set up by RDMA-CM for port 20049, RFC 8267 §6), with the RPC-RDMA messages of
ibwire.synth.rpcrdma in SENDs (RFC 8166 §3.5; `version = 2`: draft-ietf-nfsv4-rpcrdma-version-two-02's
RDMA2_MSG, after an RDMA2_CONNPROP from each side when RDMA-CM set the connection up), a READ's data RDMA
WRITten into the call's write chunk, a WRITE's data RDMA READ from its read chunk (§3.4), and every
request packet acknowledged (IBA §9.7.5)."""

import struct
from typing import List, Tuple

from dissectors.numbers import NFS_RDMA_PORT
from dissectors.nvmetable import SID_ULP_TCP
from ibwire.synth import mads
from ibwire.synth import rpcrdma as m
from ibwire.synth.headers import AETH, RETH, transport

M24 = 0xFFFFFF
THINK = 5e-6  # the server's time between a call and its reply or data transfer
ACK, READ_REQUEST = 0x11, 0x0C
SEND, WRITE, READ_RESPONSE = (0x00, 0x01, 0x02, 0x04), (0x06, 0x07, 0x08, 0x0A), (0x0D, 0x0E, 0x0F, 0x10)
OPS = ("getattr", "read", "write", "compound")
FH = bytes(range(0x40, 0x60))  # the file handle every call names
CRED = m.auth_unix(0x5F5E100, b"client", 1000, 1000, (1000,))
FATTR3 = m.u32(1, 0o644, 1, 1000, 1000) + struct.pack(">QQ", 4096, 4096) + bytes(48)


class _Conn:
    """One [[nfs]] connection: its two ends, their PSNs and the frames made so far."""

    def __init__(self, ctx, spec: dict):
        self.ctx, self.spec = ctx, spec
        ports = ctx.s.ports
        self.end = {"c": (ports[spec["client"]], spec["client_qpn"]), "s": (ports[spec["server"]], spec["server_qpn"])}
        self.psn = {"c": spec["client_qpn"] * 7 & M24, "s": spec["server_qpn"] * 11 & M24}
        self.out: List[Tuple[float, bytes]] = []

    def packet(self, t: float, side: str, opcode: int, ext: bytes = b"", payload: bytes = b"", psn=None) -> int:
        """A packet from `side` to its peer's QP; a request takes the next PSN of its side (a READ request
        as many as its responses), a response or ACK the PSN it answers."""
        (src, _), (dst, dqpn) = self.end[side], self.end["s" if side == "c" else "c"]
        if psn is None:
            psn = self.psn[side]
            self.psn[side] = (psn + 1) & M24
        tp = transport(opcode, 0xFFFF, dqpn, psn, ext, payload, ackreq=opcode in SEND + WRITE + (READ_REQUEST,))
        self.out.append((t, self.ctx.link.frame(src, dst, tp)))
        return psn

    def ack(self, t: float, side: str, psn: int) -> None:
        self.packet(t, side, ACK, AETH.pack(0x1F << 24), psn=psn)

    def message(self, t: float, side: str, table, data: bytes, reth=None) -> float:
        """A message of `table` (First, Middle, Last, Only opcodes) split at the path MTU, each packet 1 µs
        after the last, the last acknowledged by the peer one latency later; returns the last's time."""
        mtu, peer = self.spec["mtu"], "s" if side == "c" else "c"
        parts = [data[i : i + mtu] for i in range(0, len(data), mtu)] or [b""]
        for i, part in enumerate(parts):
            only, first, last = len(parts) == 1, i == 0, i == len(parts) - 1
            opcode = table[3] if only else table[0] if first else table[2] if last else table[1]
            ext = RETH.pack(*reth) if reth and first else b""
            psn = self.packet(t + i * 1e-6, side, opcode, ext, part)
        self.ack(t + (len(parts) - 1) * 1e-6 + self.ctx.s.latency, peer, psn)
        return t + (len(parts) - 1) * 1e-6


def rdma_read(conn: _Conn, t: float, data: bytes, va: int, key: int) -> float:
    """The server's (target's) RDMA READ of `data` at (va, key) from the client's buffer, and the client's
    responses; returns the time after them."""
    mtu, lat = conn.spec["mtu"], conn.ctx.s.latency
    n = -(-len(data) // mtu)
    psn = conn.packet(t, "s", READ_REQUEST, RETH.pack(va, key, len(data)))
    conn.psn["s"] = (psn + n) & M24
    for i in range(n):
        opcode = READ_RESPONSE[3] if n == 1 else READ_RESPONSE[0 if i == 0 else 2 if i == n - 1 else 1]
        ext = AETH.pack(0x1F << 24) if opcode != READ_RESPONSE[1] else b""
        conn.packet(t + lat + i * 1e-6, "c", opcode, ext, data[i * mtu : (i + 1) * mtu], psn=(psn + i) & M24)
    return t + 2 * lat + n * 1e-6 + THINK


def _setup(conn: _Conn, t: float) -> None:
    """RDMA-CM REQ (service ID of port 20049) and REP connecting the client's QP to the server's."""
    ctx, (client, cqpn), (server, sqpn) = conn.ctx, conn.end["c"], conn.end["s"]
    a, b = next(ctx.comm), next(ctx.comm)
    sid, psn = SID_ULP_TCP | NFS_RDMA_PORT, conn.psn["c"]
    req = mads.cm_req(a, sid, client.guid, cqpn, psn, 0xFFFF, client.lid, server.lid, client.gid, server.gid)
    conn.out.append((t, ctx.mad(client, server, req, 1)))
    rep = mads.cm_rep(b, a, server.guid, sqpn, conn.psn["s"])
    conn.out.append((t + 2 * ctx.s.latency, ctx.mad(server, client, rep, 1)))


def _call(conn: _Conn, t: float, k: int) -> None:
    """Call k of the connection and everything it causes, up to the ACK of its reply."""
    op, size, lat, xid = conn.spec["op"], conn.spec["size"], conn.ctx.s.latency, conn.spec["xid"] + k
    handle, va = 0x1000 + (k & 0xFFFF), 0x7F0000000000 + k * 0x100000
    data = conn.ctx.payload(k, 0, size)
    vers, proc, args, writes, reads = 3, 1, m.opaque(FH), [], []
    if op == "read":
        proc, args, writes = 6, m.nfs3_read(FH, k * size, size), [[(handle, size, va)]]
    elif op == "write":
        proc, args = 7, m.nfs3_write(FH, k * size, size, 2, size)
        reads = [(len(m.call(xid, m.NFS_PROGRAM, 3, 7, CRED, args)), handle, size, va)]
    elif op == "compound":
        vers, args = 4, m.nfs4_compound(b"", 0, [(22, m.opaque(FH)), (9, m.u32(2, 0x10011A, 0x00B0A23A))])
    body = m.call(xid, m.NFS_PROGRAM, vers, proc, CRED, args)
    t = conn.message(t, "c", SEND, _header(conn, xid, m.CALL, reads=reads, writes=writes, invalidate=handle) + body)
    t += lat + THINK
    if op == "read":
        t = conn.message(t, "s", WRITE, data, (va, handle, size)) + 1e-6
    elif op == "write":
        n = -(-size // conn.spec["mtu"])
        psn = conn.packet(t, "s", READ_REQUEST, RETH.pack(va, handle, size))
        conn.psn["s"] = (psn + n) & M24
        for i in range(n):
            part = data[i * conn.spec["mtu"] : (i + 1) * conn.spec["mtu"]]
            opcode = READ_RESPONSE[3] if n == 1 else READ_RESPONSE[0 if i == 0 else 2 if i == n - 1 else 1]
            ext = AETH.pack(0x1F << 24) if opcode != READ_RESPONSE[1] else b""
            conn.packet(t + lat + i * 1e-6, "c", opcode, ext, part, psn=(psn + i) & M24)
        t += 2 * lat + n * 1e-6 + THINK
    results = {
        "getattr": m.u32(0) + FATTR3,
        "read": m.u32(0, 0, size, 0, size),
        "write": m.u32(0, 0, 0, size, 2) + bytes(8),
        "compound": m.u32(0) + m.opaque(b"") + m.u32(2, 22, 0, 9, 0, 2, 0x10, 0) + m.opaque(m.u32(1)),
    }[op]
    writes = [[(handle, size, va)]] if op == "read" else []
    conn.message(t, "s", SEND, _header(conn, xid, m.REPLY, writes=writes) + m.reply(xid, 0, results))


def _header(conn: _Conn, xid: int, direction: int, invalidate: int = 0, **lists) -> bytes:
    """The RPC-RDMA header of a message carrying an RPC message inline: version 1's RDMA_MSG (RFC 8166
    §4.2), or version 2's RDMA2_MSG (draft-ietf-nfsv4-rpcrdma-version-two-02 §6.3.1) with RESPONSE set on
    a reply and, on a call with chunks, the handle the server may invalidate."""
    if conn.spec["version"] == 1:
        return m.header(xid, 32, m.RDMA_MSG, **lists)
    handle = invalidate if any(lists.values()) else 0
    return m.header2(xid, 32, m.RDMA2_MSG, m.F_RESPONSE if direction == m.REPLY else 0, handle, **lists)


def _connprop(conn: _Conn, t: float) -> float:
    """Version 2's first messages (§6.3.4): each side's RDMA2_CONNPROP with its Send and Receive buffer
    sizes (the path MTU), then the client's calls may follow; returns when both were acknowledged."""
    props = [(1, m.u32(conn.spec["mtu"])), (2, m.u32(conn.spec["mtu"])), (5, m.u32(0))]
    conn.message(t, "c", SEND, m.connprop(32, props))
    conn.message(t + conn.ctx.s.latency, "s", SEND, m.connprop(32, props))
    return t + 3 * conn.ctx.s.latency


def nfs_frames(ctx, t0: float) -> List[Tuple[float, bytes]]:
    """(time, frame) of every [[nfs]] connection's setup and calls."""
    out = []
    for spec in ctx.s.nfs:
        conn = _Conn(ctx, spec)
        t = t0 + spec["at"]
        if spec["cm"]:
            _setup(conn, t)
            t += 3 * ctx.s.latency
            if spec["version"] == 2:
                t = _connprop(conn, t)
        for k in range(spec["count"]):
            _call(conn, t + k * spec["interval"], k)
        out += conn.out
    return out
