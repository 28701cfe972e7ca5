"""NFS over RDMA frames crafted byte by byte from the RFCs (ibwire.synth.rpcrdma builds the messages,
ibwire.synth.links frames them as RoCEv2 RC packets): an NFSv3 and an NFSv4 client talking to a server
with every RPC-RDMA message type, chunk lists of each kind, a SEND split in First/Last, RDMA WRITE and READ
moving chunk data, and damaged messages.  The tests hand the capture to tshark 4.4 and to ibwire."""

import struct
from pathlib import Path

from storage_oracle import write_rc_capture

from dissectors.numbers import NFS_RDMA_PORT
from ibwire.synth import mads
from ibwire.synth import rpcrdma as m
from ibwire.synth.scenario import Port

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
CLIENT = Port("client", 1, 1, mac=bytes.fromhex("020000000001"), ip4=bytes([10, 0, 0, 1]))
SERVER = Port("server", 2, 2, mac=bytes.fromhex("020000000002"), ip4=bytes([10, 0, 0, 2]))
QP = {"client": 0x000011, "server": 0x000022}
FH3 = bytes(range(0x40, 0x60))  # a 32-byte NFSv3 file handle
FH4 = bytes(range(0x80, 0x9C))  # a 28-byte NFSv4 file handle
CRED = m.auth_unix(0x5F5E100, b"client", 1000, 1000, (1000, 27))
SEND_FIRST, SEND_LAST, SEND_ONLY, WRITE_ONLY, READ_REQUEST, READ_RESPONSE_ONLY = 0x00, 0x02, 0x04, 0x0A, 0x0C, 0x10
UD_SEND_ONLY, WRITE_FIRST, WRITE_LAST = 0x64, 0x06, 0x08
# The -T json layers the NFS-over-RDMA tests compare, and what tshark 4.4 shows 0 for in a reply (its call
# not found on RoCE, test_rpcrdma_tshark's module doc)
PROTOCOLS = ("rpcordma.fragments", "rpcordma", "rpc", "nfs")
REPLY_CALL = ("rpc.program", "rpc.programversion", "rpc.procedure")
SERVICE_ID = 0x0000000001060000 | NFS_RDMA_PORT  # RDMA-CM port space TCP (IBA annex A11.3.4)


def setup():
    """The RDMA-CM REQ and REP that connect the client's QP to the server's for NFS over RDMA."""
    req = mads.cm_req(0x51, SERVICE_ID, CLIENT.guid, QP["client"], 100, 0xFFFF, 1, 2, bytes(16), bytes(16))
    return [("client", UD_SEND_ONLY, req), ("server", UD_SEND_ONLY, mads.cm_rep(0x52, 0x51, 2, QP["server"], 500))]


def messages():
    """(sender, opcode, payload, RETH (va, rkey, length) or None) in capture order."""
    c, s = "client", "server"
    fattr3 = m.u32(1, 0o644, 1, 1000, 1000) + struct.pack(">QQ", 4096, 4096) + m.u32(0, 0) + bytes(40)
    out = [
        (c, SEND_ONLY, m.header(0x1001, 32, m.RDMA_MSG) + m.call(0x1001, m.NFS_PROGRAM, 3, 1, CRED, m.opaque(FH3))),
        (s, SEND_ONLY, m.header(0x1001, 32, m.RDMA_MSG) + m.reply(0x1001, 0, m.u32(0) + fattr3)),
    ]
    read = m.header(0x1002, 32, m.RDMA_MSG, writes=[[(0xABC, 8192, 0x7F0000001000)]])
    out.append((c, SEND_ONLY, read + m.call(0x1002, m.NFS_PROGRAM, 3, 6, CRED, m.nfs3_read(FH3, 0, 1024))))
    out.append((s, WRITE_ONLY, bytes(range(256)) * 4, (0x7F0000001000, 0xABC, 1024)))
    done = m.header(0x1002, 31, m.RDMA_MSG, writes=[[(0xABC, 1024, 0x7F0000001000)]])
    out.append((s, SEND_ONLY, done + m.reply(0x1002, 0, m.u32(0, 0, 1024, 1, 1024))))
    compound = m.nfs4_compound(b"", 0, [(22, m.opaque(FH4)), (9, m.u32(2, 0x10011A, 0x00B0A23A))])
    out.append((c, SEND_ONLY, m.header(0x1003, 32, m.RDMA_MSG) + m.call(0x1003, m.NFS_PROGRAM, 4, 1, CRED, compound)))
    result = m.u32(0) + m.opaque(b"") + m.u32(2, 22, 0, 9, 0, 2, 0x10, 0) + m.opaque(m.u32(1))
    out.append((s, SEND_ONLY, m.header(0x1003, 32, m.RDMA_MSG) + m.reply(0x1003, 0, result)))
    access = m.header(0x1004, 32, m.RDMA_MSG, reply=[(0xDEF, 4096, 0x7F0000002000)])
    out.append((c, SEND_ONLY, access + m.call(0x1004, m.NFS_PROGRAM, 3, 4, CRED, m.opaque(FH3) + m.u32(0x1F))))
    body = m.reply(0x1004, 0, m.u32(0, 0, 0x1F))
    out.append((s, WRITE_ONLY, body, (0x7F0000002000, 0xDEF, len(body))))
    out.append((s, SEND_ONLY, m.header(0x1004, 32, m.RDMA_NOMSG, reply=[(0xDEF, len(body), 0x7F0000002000)])))
    msgp = m.u32(0x1005, 1, 32, m.RDMA_MSGP, 4096, 1024) + m.header(0, 0, 0)[16:]
    out.append((c, SEND_ONLY, msgp + m.call(0x1005, m.NFS_PROGRAM, 3, 0)))
    out.append((c, SEND_ONLY, m.u32(0x1006, 1, 32, m.RDMA_DONE)))
    out.append((s, SEND_ONLY, m.error(0x1007, 32, m.ERR_VERS, 1, 1)))
    out.append((s, SEND_ONLY, m.error(0x1008, 32, m.ERR_CHUNK)))
    lookup = m.call(0x1009, m.NFS_PROGRAM, 3, 3, CRED, m.opaque(FH3) + m.opaque(b"a-long-file-name" * 4))
    whole = m.header(0x1009, 32, m.RDMA_MSG) + lookup
    out += [(c, SEND_FIRST, whole[:64]), (c, SEND_LAST, whole[64:])]
    write = m.header(0x100A, 32, m.RDMA_MSG, reads=[(96, 0x123, 512, 0x7F0000003000)])
    out.append((c, SEND_ONLY, write + m.call(0x100A, m.NFS_PROGRAM, 3, 7, CRED, m.nfs3_write(FH3, 0, 512, 2, 512))))
    out.append((s, READ_REQUEST, b"", (0x7F0000003000, 0x123, 512)))
    out.append((c, READ_RESPONSE_ONLY, bytes(512)))
    out.append((c, SEND_ONLY, m.header(0x100B, 32, m.RDMA_MSG) + m.call(0x100B, m.NFS_PROGRAM, 3, 1, CRED)[:30]))
    out.append((s, SEND_ONLY, m.header(0x100B, 32, m.RDMA_MSG) + m.denied(0x100B, 1, 5)))
    return out + [(c, SEND_ONLY, m.header(0x100C, 32, m.RDMA_MSG) + m.call(0x100C, m.NFS_PROGRAM, 4, 1, CRED, v41()))]


def v41() -> bytes:
    """An NFSv4.1 COMPOUND as Linux sends it (RFC 8881): SEQUENCE, PUTFH, READ, GETATTR."""
    sequence = m.u32(53) + bytes(range(16)) + m.u32(7, 0, 63, 0)
    read = m.u32(25, 1) + bytes(range(12)) + struct.pack(">QI", 0, 4096)
    ops = sequence + m.u32(22) + m.opaque(FH4) + read + m.u32(9, 1, 0x18)
    return m.opaque(b"") + m.u32(1, 4) + ops


def undeclared():
    """Messages Wireshark's heuristic turns down (the RPC message's XID is not the header's, the version
    word is 2 or 3): RPC-RDMA only when declared with -d."""
    call = m.call(0x9999, m.NFS_PROGRAM, 3, 1, CRED, m.opaque(FH3))
    return [
        ("client", SEND_ONLY, m.header(0x2001, 8, m.RDMA_MSG) + call),
        ("client", SEND_ONLY, m.header(0x2002, 8, m.RDMA_MSG, vers=2) + call),
        ("client", SEND_ONLY, m.header(0x2003, 8, m.RDMA_MSG, vers=3) + call),
    ]


def write_capture(path, connect: bool = False, messages=messages) -> int:
    """The crafted conversation as a RoCEv2 pcap (after its RDMA-CM setup when `connect`); returns the
    number of frames."""
    ends = {"client": (CLIENT, QP["client"]), "server": (SERVER, QP["server"])}
    entries = (setup() if connect else []) + messages()
    return write_rc_capture(path, entries, ends, {"client": 100, "server": 500})


# Version 2 (draft-ietf-nfsv4-rpcrdma-version-two-02) items each message below declares, as tshark would
# write them were it to decode them: 8 hex digits for the flags word and the invalidation handle
V2_ONLY = ("rpcordma.flags", "rpcordma.inv_handle", "rpcordma.prop_count", "rpcordma.prop_id")
V2_ONLY += ("rpcordma.prop_value", "rpcordma.prop_data", "rpcordma.prop_length", "rpcordma.chunk_index")
V2_ONLY += ("rpcordma.length_needed", "rpcordma.max_segments")
V2_ONLY += tuple(f"rpcordma.flags.{n}" for n in ("response", "more", "tpmore"))


def _declared(flags: int, inv=None, **more) -> dict:
    out = {"rpcordma.flags": [f"0x{flags:08x}"]}
    out.update({f"rpcordma.flags.{n}": [str(flags >> i & 1)] for i, n in enumerate(("response", "more", "tpmore"))})
    if inv is not None:
        out["rpcordma.inv_handle"] = [f"0x{inv:08x}"]
    return out | {k: [str(v) for v in vs] for k, vs in more.items()}


def v2_pairs():
    """(version 2 message, its version 1 twin, the version 2 items it declares) in capture order.  A twin
    carries the same XID, credits, chunk lists and RPC message in version 1's header, which tshark 4.4
    decodes; a message version 1 has no counterpart of (RDMA2_CONNPROP, RDMA2_GRANT, an RDMA2_F_MORE
    part, an error code of version 2's own, a header type of draft -03) is its own twin: tshark leaves it."""
    c, s, R, MORE = "client", "server", m.F_RESPONSE, m.F_MORE
    props = [(1, m.u32(4096)), (2, m.u32(4096)), (5, m.u32(1)), (6, b"host-key")]
    prop_items = {"prop_count": [4], "prop_id": [1, 2, 5, 6], "prop_length": [4, 4, 4, 8]}
    prop_items |= {"prop_value": [4096, 4096, 1], "prop_data": [b"host-key".hex(":")]}
    out = [
        (
            (c, SEND_ONLY, m.connprop(32, props)),
            None,
            _declared(0, **{f"rpcordma.{k}": v for k, v in prop_items.items()}),
        )
    ]
    one = {
        "rpcordma.prop_count": [1],
        "rpcordma.prop_id": [1],
        "rpcordma.prop_length": [4],
        "rpcordma.prop_value": [4096],
    }
    out.append(((s, SEND_ONLY, m.connprop(32, props[:1], m.F_TPMORE)), None, _declared(4, **one)))
    v1 = messages()
    for i, (flags, inv) in V2_HEADS.items():
        who, op, v1msg, *rest = v1[i]
        if flags is None:  # RDMA WRITE / READ data: the same in both versions
            out.append((v1[i], v1[i], {}))
            continue
        xid, _, credits, kind = struct.unpack(">IIII", v1msg[:16])
        v2msg = m.u32(xid, 2, credits, kind, flags, inv) + v1msg[16:]
        out.append(((who, op, v2msg, *rest), v1[i], _declared(flags, inv)))
    v2whole = m.u32(0x1009, 2, 32, m.RDMA2_MSG, 0, 0) + v1[14][2][16:] + v1[15][2]
    out.append(((c, SEND_FIRST, v2whole[:72]), v1[14], {}))
    out.append(((c, SEND_LAST, v2whole[72:]), v1[15], _declared(0, 0)))
    lookup = m.call(0x2009, m.NFS_PROGRAM, 3, 3, CRED, m.opaque(FH3) + m.opaque(b"a-name-sent-in-two-parts" * 3))
    first = m.header2(0x2009, 32, m.RDMA2_MSG, MORE) + lookup[:40]
    out.append(((c, SEND_ONLY, first), None, _declared(MORE, 0)))
    whole = m.header(0x2009, 32, m.RDMA_MSG) + lookup
    out.append(
        ((c, SEND_ONLY, m.header2(0x2009, 32, m.RDMA2_MSG) + lookup[40:]), (c, SEND_ONLY, whole), _declared(0, 0))
    )
    out.append(
        (
            (s, SEND_ONLY, m.error2(0x2009, 32, 1, 1, 2)),
            (s, SEND_ONLY, m.error(0x2009, 32, m.ERR_VERS, 1, 2)),
            _declared(R),
        )
    )
    out.append(
        ((s, SEND_ONLY, m.error2(0x200A, 32, 9, 1, 8192)), None, _declared(R, chunk_index=[1], length_needed=[8192]))
    )
    out.append(((s, SEND_ONLY, m.error2(0x200B, 31, 8, 16)), None, _declared(R, max_segments=[16])))
    out.append(((s, SEND_ONLY, m.header2(0, 64, m.RDMA2_GRANT)), None, _declared(0)))
    out.append(((c, SEND_ONLY, m.header2(0x200C, 32, 10) + bytes(12)), None, {}))  # RPC-RDMA only given -d
    return [
        (
            v2,
            v2 if twin is None else twin,
            {f"rpcordma.{k}" if not k.startswith("rpcordma") else k: v for k, v in d.items()},
        )
        for v2, twin, d in out
    ]


# The version 2 flags and invalidation handle given the version 1 messages of these indexes: calls and
# replies, one with a write chunk, one with a reply chunk, one with a read list, an NFSv4.1 COMPOUND
# ((None, None): the RDMA data moving a chunk, the same in both versions)
V2_HEADS = {0: (0, 0), 1: (1, 0), 2: (0, 0xABC), 3: (None, None), 4: (1, 0), 5: (0, 0), 6: (1, 0), 7: (0, 0xDEF)}
V2_HEADS |= {8: (None, None), 9: (1, 0), 16: (0, 0x123), 17: (None, None), 18: (None, None), 21: (0, 0)}


def _fattr3(ftype: int, mode: int, size: int, fileid: int) -> bytes:
    """fattr3 (RFC 1813 §2.6): type, mode, nlink, uid, gid, size, used, rdev, fsid, fileid, three times."""
    times = m.u32(1_700_000_000, 123_456_789, 1_700_000_001, 5, 1_700_000_002, 999_999_999)
    return (
        m.u32(ftype, mode, 2, 1000, 27)
        + struct.pack(">QQII", size, size + 4096, 8, 9)
        + struct.pack(">QQ", 0x1234, fileid)
        + times
    )


def _wcc(size: int) -> bytes:
    """wcc_data (RFC 1813 §2.6): pre_op_attr (size, mtime, ctime), then post_op_attr."""
    return (
        m.u32(1)
        + struct.pack(">Q", size)
        + m.u32(1_700_000_000, 7, 1_700_000_000, 8)
        + m.u32(1)
        + _fattr3(1, 0o644, size + 512, 77)
    )


def nfs3_messages():
    """An NFSv3 client's calls and the server's replies with their bodies (RFC 1813 §3.3): NULL, GETATTR,
    LOOKUP, ACCESS, READ, WRITE, CREATE, FSINFO, PATHCONF, an error reply, and a cut reply body.  Sent on
    the same QP number at both ends, so that tshark 4.4 finds each reply's call and decodes its results."""
    c, s = "client", "server"
    dirfh, verf = FH3[:28], bytes(range(0xA0, 0xA8))
    calls = [
        (0, b"", b""),
        (1, m.opaque(FH3), m.u32(0) + _fattr3(2, 0o40755, 4096, 2)),
        (
            3,
            m.opaque(dirfh) + m.opaque(b"f"),
            m.u32(0) + m.opaque(FH3) + m.u32(1) + _fattr3(1, 0o100644, 0, 77) + m.u32(1) + _fattr3(2, 0o1777, 60, 2),
        ),
        (4, m.opaque(FH3) + m.u32(0x3F), m.u32(0, 1) + _fattr3(1, 0o104755, 10, 77) + m.u32(0x2D)),
        (
            6,
            m.nfs3_read(FH3, 65536, 1024),
            m.u32(0, 1) + _fattr3(1, 0o644, 66560, 77) + m.u32(1024, 1, 1024) + bytes(1024),
        ),
        (7, m.nfs3_write(FH3, 0, 12, 1, 12) + b"hello world!", m.u32(0) + _wcc(0) + m.u32(12, 2) + verf),
        (
            8,
            m.opaque(dirfh)
            + m.opaque(b"newfile")
            + m.u32(1, 1, 0o600, 1, 1000, 0, 1)
            + struct.pack(">Q", 0)
            + m.u32(2, 1_700_000_003, 4, 1),
            m.u32(0, 1) + m.opaque(FH3) + m.u32(1) + _fattr3(1, 0o600, 0, 78) + _wcc(60),
        ),
        (
            19,
            m.opaque(dirfh),
            m.u32(0, 1)
            + _fattr3(2, 0o755, 4096, 2)
            + m.u32(1048576, 65536, 4096, 1048576, 65536, 4096, 4096)
            + struct.pack(">Q", 2**63 - 1)
            + m.u32(0, 1, 0x1B),
        ),
        (20, m.opaque(dirfh), m.u32(0, 0) + m.u32(255, 255, 1, 1, 0, 1)),
        (3, m.opaque(dirfh) + m.opaque(b"nope"), m.u32(2, 1) + _fattr3(2, 0o755, 4096, 2)),
        (1, m.opaque(FH3), m.u32(0) + _fattr3(1, 0o644, 4096, 77)[:44]),
    ]
    out = []
    for i, (proc, args, body) in enumerate(calls):
        xid = 0x3001 + i
        out.append((c, SEND_ONLY, m.header(xid, 32, m.RDMA_MSG) + m.call(xid, m.NFS_PROGRAM, 3, proc, CRED, args)))
        out.append((s, SEND_ONLY, m.header(xid, 32, m.RDMA_MSG) + m.reply(xid, 0, body)))
    chunk = [[(0xABD, 4096, 0x7F0000004000)]]  # a READ whose data the server writes into the call's chunk
    out.append(
        (
            c,
            SEND_ONLY,
            m.header(0x3100, 32, m.RDMA_MSG, writes=chunk)
            + m.call(0x3100, m.NFS_PROGRAM, 3, 6, CRED, m.nfs3_read(FH3, 0, 4096)),
        )
    )
    out.append((s, WRITE_FIRST, bytes(2048), (0x7F0000004000, 0xABD, 4096)))
    out.append((s, WRITE_LAST, bytes(2048)))
    read = m.u32(0, 1) + _fattr3(1, 0o644, 4096, 77) + m.u32(4096, 1, 4096)  # the data's length stays inline
    return out + [(s, SEND_ONLY, m.header(0x3100, 31, m.RDMA_MSG, writes=chunk) + m.reply(0x3100, 0, read))]


def write_nfs3_capture(path) -> int:
    """nfs3_messages as a RoCEv2 pcap after an RDMA-CM REQ and REP naming both ends' IPv4-mapped GIDs, by
    which tshark 4.4 ties the two directions into one conversation and so finds each reply's call."""
    gid = lambda port: bytes(10) + b"\xff\xff" + port.ip4  # noqa: E731
    req = mads.cm_req(0x51, SERVICE_ID, CLIENT.guid, QP["client"], 100, 0xFFFF, 1, 2, gid(CLIENT), gid(SERVER))
    connect = [("client", UD_SEND_ONLY, req), setup()[1]]
    ends = {"client": (CLIENT, QP["client"]), "server": (SERVER, QP["server"])}
    return write_rc_capture(path, connect + nfs3_messages(), ends, {"client": 100, "server": 500})
