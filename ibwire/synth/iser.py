"""iSER, written from the RFCs (no decoder code on this path): byte builders for the iSER header (RFC 7145
§9.2: flags, write STag and base offset, read STag and base offset; Hello and HelloReply §9.3-9.4) and the
iSCSI PDUs it carries (RFC 7143 §11: the 48-byte basic header segment of each PDU, its data segment padded
to 4 bytes), with SCSI CDBs (SBC-3 READ/WRITE 10 and 16), which tests frame as RC SENDs; and the sessions
of a scenario ([[iser]]): an initiator logging in to a target over one RC connection (optionally set up by
RDMA-CM for port 3260, RFC 7145 §5.1), then SCSI READs whose data the target RDMA WRITEs to the read STag
and WRITEs whose data it RDMA READs from the write STag (§7.3), each answered by a SCSI Response, every
request packet acknowledged (IBA §9.7.5)."""

import struct
from typing import List, Tuple

from dissectors.numbers import ISCSI_PORT
from dissectors.nvmetable import SID_ULP_TCP
from ibwire.synth import mads
from ibwire.synth.headers import AETH, RETH
from ibwire.synth.nfs import M24, READ_REQUEST, READ_RESPONSE, WRITE, _Conn

CONTROL, HELLO, HELLO_REPLY = 0x10, 0x20, 0x30  # iSER opcodes in the flags' high nibble (RFC 7145 §9.2)
WSV, RSV, REJ = 0x08, 0x04, 0x01
NOP_OUT, SCSI_CMD, TMF, LOGIN, TEXT, DATA_OUT, LOGOUT = 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06
NOP_IN, SCSI_RSP, TMF_RSP, LOGIN_RSP, TEXT_RSP, DATA_IN, LOGOUT_RSP = 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26
IMMEDIATE, FINAL = 0x40, 0x80
READ_10, WRITE_10, READ_16, WRITE_16, TEST_UNIT_READY = 0x28, 0x2A, 0x88, 0x8A, 0x00


def header(write=(0, 0), read=(0, 0), flags: int = None) -> bytes:
    """The iSER header of an iSCSI control-type PDU: `write` and `read` are (STag, base offset); a non-zero
    STag sets its valid bit (WSV, RSV)."""
    if flags is None:
        flags = CONTROL | (WSV if write[0] else 0) | (RSV if read[0] else 0)
    return struct.pack(">B3xIQIQ", flags, write[0], write[1], read[0], read[1])


def hello(ird: int, version: int = 0xAA, reply: bool = False, reject: bool = False) -> bytes:
    """Hello (IRD) or HelloReply (ORD, REJ) with MaxVer and MinVer 10 (RFC 7145 §9.3, §9.4)."""
    flags = (HELLO_REPLY | (REJ if reject else 0)) if reply else HELLO
    return struct.pack(">BBH", flags, version, ird) + bytes(24)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) & 3)


def bhs(opcode: int, flags: int, b2: int, b3: int, data: bytes, lun_or: bytes, itt: int, rest: bytes) -> bytes:
    """A PDU (RFC 7143 §11.2.1): opcode (with the I bit), flags, two opcode bytes, TotalAHSLength 0,
    DataSegmentLength, the 8 bytes at 8 (LUN or opcode specific), ITT, bytes 20-47, the padded data."""
    assert len(lun_or) == 8 and len(rest) == 28
    head = struct.pack(">BBBBI", opcode, flags, b2, b3, len(data))  # TotalAHSLength 0, DataSegmentLength
    return head + lun_or + struct.pack(">I", itt) + rest + padded(data)


def lun(n: int) -> bytes:
    """A single-level LUN (SAM-5 §4.7.3, peripheral device addressing)."""
    return struct.pack(">HHI", n & 0x3FFF, 0, 0)


def cdb(opcode: int, lba: int = 0, blocks: int = 0) -> bytes:
    """A 16-byte CDB field: READ/WRITE(10) or (16) (SBC-3 §5.15, §5.16, §5.40, §5.41), zero padded."""
    if opcode in (READ_10, WRITE_10):
        out = struct.pack(">BBIBHB", opcode, 0, lba, 0, blocks, 0)
    elif opcode in (READ_16, WRITE_16):
        out = struct.pack(">BBQIBB", opcode, 0, lba, blocks, 0, 0)
    else:
        out = bytes([opcode]) + bytes(5)
    return out + bytes(16 - len(out))


def scsi_command(itt, lun_n, cdb16, length, cmdsn, expstatsn, read=False, write=False, final=True, data=b""):
    """SCSI Command (§11.3): F, R, W, task attribute Simple; expected data transfer length; CmdSN;
    ExpStatSN; the CDB; immediate data."""
    flags = (FINAL if final else 0) | (0x40 if read else 0) | (0x20 if write else 0) | 1
    return bhs(SCSI_CMD, flags, 0, 0, data, lun(lun_n), itt, struct.pack(">III", length, cmdsn, expstatsn) + cdb16)


def scsi_response(itt, status, statsn, expcmdsn, maxcmdsn, residual=0, response=0, sense=b"", under=False):
    """SCSI Response (§11.4): response, status, StatSN, ExpCmdSN, MaxCmdSN, ExpDataSN 0, residual count
    (U bit when `under`); sense data with its length."""
    flags = FINAL | (0x02 if under else 0)
    data = struct.pack(">H", len(sense)) + sense if sense else b""
    rest = struct.pack(">IIIIIII", 0, statsn, expcmdsn, maxcmdsn, 0, 0, residual)
    return bhs(SCSI_RSP, flags, response, status, data, bytes(8), itt, rest)


def data_out(itt, lun_n, ttt, expstatsn, datasn, offset, data, final=True):
    """SCSI Data-Out (§11.7): F, LUN, ITT, TTT, ExpStatSN, DataSN, buffer offset."""
    rest = struct.pack(">IIIIIII", ttt, 0, expstatsn, 0, datasn, offset, 0)
    return bhs(DATA_OUT, FINAL if final else 0, 0, 0, data, lun(lun_n), itt, rest)


def data_in(itt, lun_n, statsn, expcmdsn, maxcmdsn, datasn, offset, data, status=None):
    """SCSI Data-In (§11.7): F, and S with the status when `status` is given; DataSN, buffer offset."""
    flags = FINAL | (0x01 if status is not None else 0)
    rest = struct.pack(">IIIIIII", 0xFFFFFFFF, statsn, expcmdsn, maxcmdsn, datasn, offset, 0)
    return bhs(DATA_IN, flags, 0, status or 0, data, lun(lun_n), itt, rest)


def nop_out(itt, cmdsn, expstatsn, ping=b"", ttt=0xFFFFFFFF):
    """NOP-Out (§11.18), immediate."""
    rest = struct.pack(">III", ttt, cmdsn, expstatsn) + bytes(16)
    return bhs(NOP_OUT | IMMEDIATE, FINAL, 0, 0, ping, bytes(8), itt, rest)


def nop_in(itt, statsn, expcmdsn, maxcmdsn, ping=b"", ttt=0xFFFFFFFF):
    """NOP-In (§11.19)."""
    rest = struct.pack(">IIII", ttt, statsn, expcmdsn, maxcmdsn) + bytes(12)
    return bhs(NOP_IN, FINAL, 0, 0, ping, bytes(8), itt, rest)


def task_management(itt, lun_n, function, ref_itt, cmdsn, expstatsn, refcmdsn):
    """Task Management Function Request (§11.5), immediate: function, referenced task tag, RefCmdSN."""
    rest = struct.pack(">IIIII", ref_itt, cmdsn, expstatsn, refcmdsn, 0) + bytes(8)
    return bhs(TMF | IMMEDIATE, FINAL | function, 0, 0, b"", lun(lun_n), itt, rest)


def task_management_response(itt, response, statsn, expcmdsn, maxcmdsn):
    """Task Management Function Response (§11.6)."""
    rest = struct.pack(">IIII", 0, statsn, expcmdsn, maxcmdsn) + bytes(12)
    return bhs(TMF_RSP, FINAL, response, 0, b"", bytes(8), itt, rest)


def keys(*pairs) -> bytes:
    """Text keys (§6.1): key=value, each NUL-terminated."""
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in pairs)


def login(itt, isid: bytes, tsih, cid, cmdsn, expstatsn, csg, nsg, text, transit=True):
    """Login Request (§11.12), immediate: T, CSG, NSG, versions 0, ISID, TSIH, CID, the text keys."""
    flags = (FINAL if transit else 0) | csg << 2 | nsg
    rest = struct.pack(">HHII", cid, 0, cmdsn, expstatsn) + bytes(16)
    return bhs(LOGIN | IMMEDIATE, flags, 0, 0, text, isid + struct.pack(">H", tsih), itt, rest)


def login_response(itt, isid: bytes, tsih, statsn, expcmdsn, maxcmdsn, csg, nsg, text, status=0):
    """Login Response (§11.13): status class and detail (`status` 0xCCDD)."""
    flags = FINAL | csg << 2 | nsg
    rest = struct.pack(">IIIIH", 0, statsn, expcmdsn, maxcmdsn, status) + bytes(10)
    return bhs(LOGIN_RSP, flags, 0, 0, text, isid + struct.pack(">H", tsih), itt, rest)


def text(itt, cmdsn, expstatsn, body, ttt=0xFFFFFFFF):
    """Text Request (§11.10), F set."""
    rest = struct.pack(">III", ttt, cmdsn, expstatsn) + bytes(16)
    return bhs(TEXT | IMMEDIATE, FINAL, 0, 0, body, bytes(8), itt, rest)


def text_response(itt, statsn, expcmdsn, maxcmdsn, body, ttt=0xFFFFFFFF):
    """Text Response (§11.11), F set."""
    rest = struct.pack(">IIII", ttt, statsn, expcmdsn, maxcmdsn) + bytes(12)
    return bhs(TEXT_RSP, FINAL, 0, 0, body, bytes(8), itt, rest)


def logout(itt, reason, cid, cmdsn, expstatsn):
    """Logout Request (§11.14), immediate: reason code, CID."""
    rest = struct.pack(">HHII", cid, 0, cmdsn, expstatsn) + bytes(16)
    return bhs(LOGOUT | IMMEDIATE, FINAL | reason, 0, 0, b"", bytes(8), itt, rest)


def logout_response(itt, response, statsn, expcmdsn, maxcmdsn, wait=2, retain=20):
    """Logout Response (§11.15): response, Time2Wait, Time2Retain."""
    rest = struct.pack(">IIIIIHH", 0, statsn, expcmdsn, maxcmdsn, 0, wait, retain) + bytes(4)
    return bhs(LOGOUT_RSP, FINAL, response, 0, b"", bytes(8), itt, rest)


OPS = ("read", "write")
SEND_OPS = (0x00, 0x01, 0x02, 0x04)  # RC SEND First, Middle, Last, Only
THINK = 5e-6  # the target's time between a command and its data transfer or response


def _login_keys(spec: dict) -> bytes:
    return keys(
        ("InitiatorName", "iqn.2026-12.org.example:initiator"),
        ("TargetName", "iqn.2026-12.org.example:target"),
        ("SessionType", "Normal"),
        ("RDMAExtensions", "Yes"),
        ("MaxRecvDataSegmentLength", spec["mtu"]),
    )


def _session(conn, t: float, spec: dict) -> float:
    """Login (straight to full feature phase) and its response; returns the time after them."""
    isid, lat = bytes([0x40, 0, 0, 0, 0, spec["initiator_qpn"] & 0xFF]), conn.ctx.s.latency
    t = conn.message(t, "c", SEND_OPS, header() + login(0, isid, 0, 1, 1, 0, 1, 3, _login_keys(spec)))
    t += lat + THINK
    reply = login_response(0, isid, 1, 1, 1, 64, 1, 3, _login_keys(spec))
    return conn.message(t, "s", SEND_OPS, header() + reply) + lat + THINK


def _command(conn, t: float, spec: dict, k: int) -> None:
    """SCSI command k (READ(10) or WRITE(10) of `size` bytes) and everything it causes, up to the ACK of its
    response."""
    size, lat, itt = spec["size"], conn.ctx.s.latency, spec["itt"] + k
    stag, va, blocks = 0x2000 + (k & 0xFFFF), 0x7F0000000000 + k * 0x100000, -(-size // 512)
    data, read = conn.ctx.payload(k, 0, size), spec["op"] == "read"
    cdb16 = cdb(READ_10 if read else WRITE_10, k * blocks, blocks)
    cmd = scsi_command(itt, 0, cdb16, size, 1 + k, 1 + k, read=read, write=not read)
    head = header(read=(stag, va)) if read else header(write=(stag, va))
    t = conn.message(t, "c", SEND_OPS, head + cmd)
    t += lat + THINK
    if read:
        t = conn.message(t, "s", WRITE, data, (va, stag, size)) + 1e-6
    else:
        n = -(-size // spec["mtu"])
        psn = conn.packet(t, "s", READ_REQUEST, RETH.pack(va, stag, size))
        conn.psn["s"] = (psn + n) & M24
        for i in range(n):
            part = data[i * spec["mtu"] : (i + 1) * spec["mtu"]]
            opcode = READ_RESPONSE[3] if n == 1 else READ_RESPONSE[0 if i == 0 else 2 if i == n - 1 else 1]
            ext = AETH.pack(0x1F << 24) if opcode != READ_RESPONSE[1] else b""
            conn.packet(t + lat + i * 1e-6, "c", opcode, ext, part, psn=(psn + i) & M24)
        t += 2 * lat + n * 1e-6 + THINK
    conn.message(t, "s", SEND_OPS, header() + scsi_response(itt, 0, 2 + k, 2 + k, 65 + k))


def _setup(conn, t: float) -> None:
    """RDMA-CM REQ (service ID of port 3260) and REP connecting the initiator's QP to the target's."""
    ctx, (client, cqpn), (server, sqpn) = conn.ctx, conn.end["c"], conn.end["s"]
    a, b = next(ctx.comm), next(ctx.comm)
    sid = SID_ULP_TCP | ISCSI_PORT
    req = mads.cm_req(a, sid, client.guid, cqpn, conn.psn["c"], 0xFFFF, client.lid, server.lid, client.gid, server.gid)
    conn.out.append((t, ctx.mad(client, server, req, 1)))
    rep = mads.cm_rep(b, a, server.guid, sqpn, conn.psn["s"])
    conn.out.append((t + 2 * ctx.s.latency, ctx.mad(server, client, rep, 1)))


def iser_frames(ctx, t0: float) -> List[Tuple[float, bytes]]:
    """(time, frame) of every [[iser]] session's setup, login and commands."""
    out = []
    for spec in ctx.s.iser:
        ends = {"client": spec["initiator"], "server": spec["target"]}
        conn = _Conn(ctx, {**spec, **ends, "client_qpn": spec["initiator_qpn"], "server_qpn": spec["target_qpn"]})
        t = t0 + spec["at"]
        if spec["cm"]:
            _setup(conn, t)
            t += 3 * ctx.s.latency
        t = _session(conn, t, spec)
        for k in range(spec["count"]):
            _command(conn, t + k * spec["interval"], spec, k)
        out += conn.out
    return out
