"""Byte builders for NFS over RDMA messages, written from the RFCs (no decoder code on this path): the
RPC-RDMA version 1 header with its chunk lists (RFC 8166 §4.2, §5.1: XDR, every item a big-endian 32-bit
word), ONC RPC calls and replies (RFC 5531 §9, AUTH_UNIX credentials §A), NFSv3 arguments (RFC 1813 §3.3)
and NFSv4 COMPOUND (RFC 7530 §16.2).  Tests and synth scenarios frame them as RC SENDs."""

import struct

RDMA_MSG, RDMA_NOMSG, RDMA_MSGP, RDMA_DONE, RDMA_ERROR = range(5)  # RFC 8166 §4.2.2 (MSGP, DONE: RFC 5666)
ERR_VERS, ERR_CHUNK = 1, 2
NFS_PROGRAM = 100003
CALL, REPLY = 0, 1
AUTH_NONE, AUTH_UNIX = 0, 1


def u32(*values: int) -> bytes:
    return struct.pack(f">{len(values)}I", *values)


def opaque(data: bytes) -> bytes:
    """XDR variable-length opaque: length, bytes, zero pad to 4 (RFC 4506 §4.10)."""
    return u32(len(data)) + data + bytes(-len(data) & 3)


def segment(handle: int, length: int, offset: int) -> bytes:
    """An RDMA segment (rdma_segment: handle, length, 64-bit offset), RFC 8166 §4.1.3."""
    return struct.pack(">IIQ", handle, length, offset)


def header(xid: int, credits: int, msg_type: int, reads=(), writes=(), reply=None, vers: int = 1) -> bytes:
    """rdma_msg with the chunk lists of RDMA_MSG / RDMA_NOMSG (RFC 8166 §4.2.1): `reads` is a list of
    (position, handle, length, offset), `writes` a list of chunks (each a list of (handle, length, offset)),
    `reply` one chunk or None."""
    out = u32(xid, vers, credits, msg_type)
    for position, *seg in reads:
        out += u32(1, position) + segment(*seg)
    out += u32(0)
    for chunk in writes:
        out += u32(1, len(chunk)) + b"".join(segment(*seg) for seg in chunk)
    out += u32(0)
    if reply is None:
        return out + u32(0)
    return out + u32(1, len(reply)) + b"".join(segment(*seg) for seg in reply)


def error(xid: int, credits: int, code: int, low: int = 1, high: int = 1) -> bytes:
    """RDMA_ERROR (RFC 8166 §4.2.3): ERR_VERS carries the versions the responder supports."""
    body = u32(code) + (u32(low, high) if code == ERR_VERS else b"")
    return u32(xid, 1, credits, RDMA_ERROR) + body


def auth_unix(stamp: int, machine: bytes, uid: int, gid: int, gids=()) -> bytes:
    """An AUTH_UNIX (AUTH_SYS) credential: flavor and opaque body (RFC 5531 §A)."""
    body = u32(stamp) + opaque(machine) + u32(uid, gid, len(gids), *gids)
    return u32(AUTH_UNIX) + opaque(body)


def call(xid: int, prog: int, vers: int, proc: int, cred: bytes = None, args: bytes = b"") -> bytes:
    """rpc_msg CALL (RFC 5531 §9): rpcvers 2, program, version, procedure, credential, null verifier."""
    cred = cred if cred is not None else u32(AUTH_NONE, 0)
    return u32(xid, CALL, 2, prog, vers, proc) + cred + u32(AUTH_NONE, 0) + args


def reply(xid: int, accept_stat: int = 0, results: bytes = b"") -> bytes:
    """rpc_msg REPLY, MSG_ACCEPTED with a null verifier (RFC 5531 §9)."""
    return u32(xid, REPLY, 0, AUTH_NONE, 0, accept_stat) + results


def denied(xid: int, reject_stat: int = 1, low: int = 2, high: int = 2) -> bytes:
    """rpc_msg REPLY, MSG_DENIED: RPC_MISMATCH with the versions, or AUTH_ERROR with its reason."""
    return u32(xid, REPLY, 1, reject_stat) + (u32(low, high) if reject_stat == 0 else u32(low))


def nfs3_read(fh: bytes, offset: int, count: int) -> bytes:
    """READ3args (RFC 1813 §3.3.6): file handle, offset, count."""
    return opaque(fh) + struct.pack(">QI", offset, count)


def nfs3_write(fh: bytes, offset: int, count: int, stable: int = 2, data_len: int = 0) -> bytes:
    """WRITE3args up to the data's length (RFC 1813 §3.3.7); the data itself travels in a read chunk."""
    return opaque(fh) + struct.pack(">QIII", offset, count, stable, data_len)


def nfs4_compound(tag: bytes, minor: int, ops) -> bytes:
    """COMPOUND4args (RFC 7530 §16.2): tag, minor version, then (opcode, arguments) pairs."""
    return opaque(tag) + u32(minor, len(ops)) + b"".join(u32(op) + args for op, args in ops)


# RPC-over-RDMA version 2 (draft-ietf-nfsv4-rpcrdma-version-two-02): header types (§6.3), flags (§6.2)
RDMA2_MSG, RDMA2_NOMSG, RDMA2_ERROR, RDMA2_CONNPROP, RDMA2_GRANT = 0, 1, 4, 5, 6
F_RESPONSE, F_MORE, F_TPMORE = 1, 2, 4


def header2(xid: int, credits: int, htype: int, flags: int = 0, inv_handle: int = 0, **lists) -> bytes:
    """rpcrdma2_hdr_prefix (§6.1: rpcrdma_common, then rdma_flags) and, for RDMA2_MSG and RDMA2_NOMSG,
    rpcrdma2_chunk_lists (§6.3.1): the Remote Invalidation handle, then the lists as `header` lays them
    out (keywords reads, writes, reply)."""
    prefix = u32(xid, 2, credits, htype, flags)
    if htype not in (RDMA2_MSG, RDMA2_NOMSG):
        return prefix
    return prefix + u32(inv_handle) + header(0, 0, 0, **lists)[16:]


def error2(xid: int, credits: int, code: int, *words: int) -> bytes:
    """RDMA2_ERROR (§6.3.3), RESPONSE set: rdma_err and the words its code carries."""
    return header2(xid, credits, RDMA2_ERROR, F_RESPONSE) + u32(code, *words)


def connprop(credits: int, props, flags: int = 0) -> bytes:
    """RDMA2_CONNPROP (§6.3.4): rpcrdma2_propset, each (property id, XDR-encoded value)."""
    body = u32(len(props)) + b"".join(u32(which) + opaque(value) for which, value in props)
    return header2(0, credits, RDMA2_CONNPROP, flags) + body
