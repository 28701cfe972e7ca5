"""NVMe over Fabrics on RDMA queues of a scenario ([[nvme]]), written from the NVMe-oF 1.1 and NVMe Base 2.0
specifications: a host's I/O queue connected to a target by RDMA-CM for port 4420 (REQ, REP, RTU; the REQ's IP
CM header and NVMe-oF private data naming the queue, §7.3.3), the Fabrics Connect of that queue (its data
RDMA READ by the target from the keyed SGL, §3.3), then Read commands whose data the target RDMA WRITEs to the
host's buffer and Write commands whose data it RDMA READs from it, each a 64-byte command capsule in a SEND
answered by a 16-byte completion in a SEND, every request packet acknowledged (IBA §9.7.5).  The byte
layouts are those of dissectors.nvmetable."""

import struct
from typing import List, Tuple

from dissectors.numbers import NVME_PORT
from dissectors.nvmetable import CQE_LEN, FABRICS_OPC, IO, SID_ULP_TCP, SQE_LEN
from ibwire.synth import mads
from ibwire.synth.nfs import SEND, WRITE, _Conn, rdma_read

OPS = ("read", "write")
OPCODE = {name.lower(): opc for opc, (name, _) in IO.items()}  # Read 0x02, Write 0x01
THINK = 5e-6  # the target's time between a capsule and its data transfer or completion
SQSIZE = 31  # the queue's entries, 0-based (the Connect's SQSIZE, the REQ's HSQSIZE)
CONNECT, CONNECT_DATA = 0x01, 1024  # fctype; the Connect data's length (§3.3.2.1.1)
KEYED = 0x40  # SGL descriptor type 4 (keyed data block), subtype 0 (address)
REQ_PRIVATE, REP_PRIVATE = 24 + 140, 24 + 36  # where a REQ's and a REP's private data lie in their MAD
CNTLID = 1  # the controller the target allocates


def sqe(opc: int, cid: int, sgl: Tuple[int, int, int], tail: bytes, nsid: int = 0, fctype: int = 0) -> bytes:
    """A command capsule's SQE: opcode, PSDT keyed SGL, command id, NSID (a fabrics command's fctype in its
    place), the keyed SGL data block descriptor (address, length, R_Key) at 24, dwords 10-15 `tail`."""
    addr, length, key = sgl
    head = struct.pack("<BBHI8x8xQ", opc, KEYED, cid, fctype if opc == FABRICS_OPC else nsid, addr)
    out = head + length.to_bytes(3, "little") + struct.pack("<IB", key, KEYED) + tail
    assert len(out) == SQE_LEN
    return out


def cqe(cid: int, sqhd: int, sqid: int, dword0: int = 0) -> bytes:
    """A completion: dword 0, SQ head pointer, SQ id, command id, status Successful (phase 0)."""
    out = struct.pack("<IIHHHH", dword0, 0, sqhd, sqid, cid, 0)
    assert len(out) == CQE_LEN
    return out


def _connect_data() -> bytes:
    """Host identifier, controller id (of an I/O queue: the one the admin queue's Connect allocated),
    subsystem and host NQNs (§3.3.2.1.1)."""
    nqn = lambda s: s.encode().ljust(256, b"\0")  # noqa: E731
    hostid = bytes(range(16))
    head = hostid + struct.pack("<H", CNTLID) + bytes(238)
    body = nqn("nqn.2026-12.org.example:subsystem") + nqn("nqn.2026-12.org.example:host")
    return head + body + bytes(CONNECT_DATA - 768)


def _address(port, link: str) -> Tuple[int, bytes]:
    """(LID, GID) of a port in a REQ's primary path: on RoCE the permissive LID and the GID of its IP address
    (IPv4-mapped on roce2), which Wireshark takes to find the queue's conversation."""
    if link == "roce2":
        return 0xFFFF, bytes(10) + b"\xff\xff" + port.ip4
    if link == "roce2-v6":
        return 0xFFFF, port.ip6
    return port.lid, port.gid


def _setup(conn: _Conn, t: float) -> None:
    """RDMA-CM REQ (service ID of port 4420, the IP CM header, the NVMe-oF private data: RECFMT 0, QID,
    HRQSIZE, HSQSIZE), REP (RECFMT 0, CRQSIZE) and RTU connecting the host's QP to the target's."""
    ctx, (host, hqpn), (target, tqpn) = conn.ctx, conn.end["c"], conn.end["s"]
    a, b, lat = next(ctx.comm), next(ctx.comm), ctx.s.latency
    sid = SID_ULP_TCP | NVME_PORT
    path = [_address(port, ctx.link.name) for port in (host, target)]
    req = mads.cm_req(a, sid, host.guid, hqpn, conn.psn["c"], 0xFFFF, path[0][0], path[1][0], path[0][1], path[1][1])
    ip_cm = struct.pack(">BBH12x4s12x4s", 0x00, 0x40, 0xC000 | hqpn & 0x3FFF, host.ip4, target.ip4)
    nvme = struct.pack("<HHHH", 0, conn.spec["qid"], SQSIZE + 1, SQSIZE) + bytes(24)
    private = ip_cm + nvme
    req = req[:REQ_PRIVATE] + private + req[REQ_PRIVATE + len(private) :]
    conn.out.append((t, ctx.mad(host, target, req, 1)))
    rep = mads.cm_rep(b, a, target.guid, tqpn, conn.psn["s"])
    private = struct.pack("<HH", 0, SQSIZE + 1)
    rep = rep[:REP_PRIVATE] + private + rep[REP_PRIVATE + len(private) :]
    conn.out.append((t + 2 * lat, ctx.mad(target, host, rep, 1)))
    conn.out.append((t + 4 * lat, ctx.mad(host, target, mads.cm_rtu(a, b), 1)))


def _connect(conn: _Conn, t: float) -> float:
    """The queue's Fabrics Connect (its data read from the host) and its completion; returns the time after."""
    spec, lat = conn.spec, conn.ctx.s.latency
    va, key, cid = 0x7E0000000000, 0x1000, spec["cid"] & 0xFFFF
    tail = struct.pack("<HHHBxI12x", 0, spec["qid"], SQSIZE, 0, 0)  # RECFMT, QID, SQSIZE, CATTR, KATO
    t = conn.message(t, "c", SEND, sqe(FABRICS_OPC, cid, (va, CONNECT_DATA, key), tail, fctype=CONNECT))
    t = rdma_read(conn, t + lat + THINK, _connect_data(), va, key)
    return conn.message(t, "s", SEND, cqe(cid, 1, spec["qid"], CNTLID)) + lat + THINK


def _command(conn: _Conn, t: float, k: int) -> None:
    """Command k (a Read or Write of `size` bytes from LBA k * its blocks) and everything it causes, up to
    the ACK of its completion."""
    spec, lat = conn.spec, conn.ctx.s.latency
    size, cid, read = spec["size"], (spec["cid"] + 1 + k) & 0xFFFF, spec["op"] == "read"
    key, va, blocks = 0x2000 + (k & 0xFFFF), 0x7F0000000000 + k * 0x100000, -(-size // 512)
    tail = struct.pack("<QI12x", k * blocks, blocks - 1)  # SLBA, NLB (0-based)
    t = conn.message(t, "c", SEND, sqe(OPCODE[spec["op"]], cid, (va, size, key), tail, nsid=1))
    t += lat + THINK
    data = conn.ctx.payload(k, 0, size)
    if read:
        t = conn.message(t, "s", WRITE, data, (va, key, size)) + 1e-6
    else:
        t = rdma_read(conn, t, data, va, key)
    conn.message(t, "s", SEND, cqe(cid, (k + 2) % (SQSIZE + 1), spec["qid"]))


def nvme_frames(ctx, t0: float) -> List[Tuple[float, bytes]]:
    """(time, frame) of every [[nvme]] queue's setup, Connect and commands."""
    out = []
    for spec in ctx.s.nvme:
        ends = {"client": spec["host"], "server": spec["target"]}
        conn = _Conn(ctx, {**spec, **ends, "client_qpn": spec["host_qpn"], "server_qpn": spec["target_qpn"]})
        t = t0 + spec["at"]
        if spec["cm"]:
            _setup(conn, t)
            t += 5 * ctx.s.latency
        t = _connect(conn, t)
        for k in range(spec["count"]):
            _command(conn, t + k * spec["interval"], k)
        out += conn.out
    return out
