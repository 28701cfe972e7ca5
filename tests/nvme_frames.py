"""NVMe-oF over RDMA frames crafted byte by byte from the NVMe Base 2.0 and NVMe-oF RDMA transport 1.0
specifications (ibwire.synth.mads builds the RDMA-CM, ibwire.synth.links frames them as RoCEv2 RC packets): a
host's queue RDMA-CM connected for port 4420 (queue 0, the admin queue, or an I/O queue) and commands whose
data the target reads from the host with RDMA READ or writes to it with RDMA WRITE: on the admin queue Set
Features (Timestamp), Firmware Image Download, Security Send and Receive; on an I/O queue Write and Read.  The
tests hand the capture to tshark 4.4 and to ibwire."""

import struct

from storage_oracle import write_rc_capture

from ibwire.synth import mads
from ibwire.synth.scenario import Port

HOST = Port("host", 1, 1, mac=bytes.fromhex("020000000021"), ip4=bytes([10, 0, 2, 1]))
TARGET = Port("target", 2, 2, mac=bytes.fromhex("020000000022"), ip4=bytes([10, 0, 2, 2]))
QP = {"host": 0x000131, "target": 0x000232}
SEND_ONLY, WRITE_ONLY, READ_REQUEST, READ_RESPONSE_ONLY, UD_SEND_ONLY = 0x04, 0x0A, 0x0C, 0x10, 0x64
SERVICE_ID = 0x0000000001060000 | 4420  # RDMA-CM port space TCP, the NVMe-oF port (IBA annex A11.3.4)
PRIVATE_AT = 24 + 140  # a REQ's private data in the MAD


def setup(qid: int):
    """The REQ (its IP CM header, then the NVMe-oF private data naming queue `qid`) and the REP."""
    gids = [bytes(10) + b"\xff\xff" + port.ip4 for port in (HOST, TARGET)]  # RoCEv2: IPv4-mapped, LIDs 0xFFFF
    req = mads.cm_req(0x71, SERVICE_ID, HOST.guid, QP["host"], 100, 0xFFFF, 0xFFFF, 0xFFFF, *gids)
    ip_cm = bytes([0x00, 0x40]) + struct.pack(">H", 0xC000) + bytes(12) + HOST.ip4 + bytes(12) + TARGET.ip4
    nvme = struct.pack("<HHHH", 0, qid, 32, 31) + bytes(24)
    req = req[:PRIVATE_AT] + ip_cm + nvme + req[PRIVATE_AT + len(ip_cm) + len(nvme) :]
    rep = mads.cm_rep(0x72, 0x71, 2, QP["target"], 500)
    return [("host", UD_SEND_ONLY, req), ("target", UD_SEND_ONLY, rep)]


def sqe(opc: int, cid: int, key: int, length: int, cdw10: int = 0) -> bytes:
    """A command with a keyed SGL data block descriptor (R_Key `key`, `length` bytes at 0x10000)."""
    head = struct.pack("<BBHI8x8xQ", opc, 0x40, cid, 1 if opc in (0x01, 0x02) else 0, 0x10000)
    return head + length.to_bytes(3, "little") + struct.pack("<IBI", key, 0x40, cdw10) + bytes(20)


def cqe(cid: int, sqhd: int) -> bytes:
    return struct.pack("<QHHHH", 0, sqhd, 0, cid, 0)


def transfers(qid: int):
    """Each command, its data read from the host (RDMA READ) or written to it (RDMA WRITE), its completion."""
    out, sqhd = [], 0
    commands = [(0x09, 8, 0x0E, True), (0x11, 64, 0x0F, True), (0x81, 16, 0, True), (0x82, 16, 0, False)]
    for cid, (opc, length, cdw10, read) in enumerate(
        commands if qid == 0 else [(0x01, 512, 0, True), (0x02, 512, 0, False)], 1
    ):
        key, data = 0x1000 + cid, bytes(i & 0xFF for i in range(length))
        out.append(("host", SEND_ONLY, sqe(opc, cid, key, length, cdw10)))
        if read:
            out += [("target", READ_REQUEST, b"", (0x10000, key, length)), ("host", READ_RESPONSE_ONLY, data)]
        else:
            out.append(("target", WRITE_ONLY, data, (0x10000, key, length)))
        sqhd += 1
        out.append(("target", SEND_ONLY, cqe(cid, sqhd)))
    return out


def write_capture(path, qid: int) -> int:
    """The crafted conversation of queue `qid` as a RoCEv2 pcap; returns the number of frames."""
    ends = {"host": (HOST, QP["host"]), "target": (TARGET, QP["target"])}
    return write_rc_capture(path, setup(qid) + transfers(qid), ends, {"host": 100, "target": 500})
