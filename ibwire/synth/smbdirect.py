"""Byte builders for SMB Direct messages, written from the specifications (no decoder code on this path):
the SMB Direct negotiate request and response and the data transfer message (MS-SMBD §2.2.1-§2.2.3, every
field little-endian), the SMB2 header (MS-SMB2 §2.2.1) and the READ and WRITE requests and responses
(§2.2.19-§2.2.22) with their SMB Direct buffer descriptors (MS-SMBD §2.2.3.1).  Tests and synth scenarios
frame them as RC SENDs."""

import struct

VERSION = 0x0100  # MS-SMBD §2.2.1: the one protocol version
RESPONSE_REQUESTED = 0x0001  # data transfer Flags (§2.2.3)
DATA_OFFSET = 24  # where a data transfer message's payload starts (header and its padding)
PROTOCOL_ID = b"\xfeSMB"
READ, WRITE = 8, 9  # SMB2 commands (MS-SMB2 §2.2.1)
SERVER_TO_REDIR, ASYNC_COMMAND = 0x1, 0x2  # SMB2 header Flags (MS-SMB2 §2.2.1.2)
CHANNEL_NONE, CHANNEL_RDMA_V1 = 0, 1  # MS-SMB2 §2.2.19 Channel
HEADER_LEN = 64


def negotiate_request(credits: int = 255, send: int = 1364, receive: int = 8192, fragmented: int = 1 << 20) -> bytes:
    """SMBDirect Negotiate Request (MS-SMBD §2.2.1): versions, reserved, credits, sizes (20 bytes)."""
    return struct.pack("<HHHHIII", VERSION, VERSION, 0, credits, send, receive, fragmented)


def negotiate_response(
    requested: int = 255,
    granted: int = 255,
    status: int = 0,
    rw: int = 1 << 20,
    send: int = 1364,
    receive: int = 8192,
    fragmented: int = 1 << 20,
) -> bytes:
    """SMBDirect Negotiate Response (§2.2.2): versions, negotiated version, credits, status, sizes (32 bytes)."""
    head = struct.pack("<HHHHHH", VERSION, VERSION, VERSION, 0, requested, granted)
    return head + struct.pack("<IIIII", status, rw, send, receive, fragmented)


def data_message(data: bytes = b"", requested: int = 255, granted: int = 1, flags: int = 0, remaining: int = 0):
    """SMBDirect Data Transfer Message (§2.2.3): credits, flags, remaining length, offset, length, padding,
    data; a message without data (a credit grant) ends after DataLength (20 bytes)."""
    head = struct.pack("<HHHHI", requested, granted, flags, 0, remaining)
    if not data:
        return head + struct.pack("<II", 0, 0)
    return head + struct.pack("<III", DATA_OFFSET, len(data), 0) + data


def fragments(data: bytes, size: int, **kw) -> list:
    """`data` split into data transfer messages of at most `size` bytes each, RemainingDataLength counting
    what the later ones carry (§3.1.5.2)."""
    parts = [data[i : i + size] for i in range(0, len(data), size)]
    return [data_message(p, remaining=len(data) - size * i - len(p), **kw) for i, p in enumerate(parts)]


def smb2_header(
    command: int,
    message_id: int,
    session_id: int = 0,
    tree_id: int = 0,
    status: int = 0,
    flags: int = 0,
    credits: int = 1,
    charge: int = 1,
    next_command: int = 0,
    async_id=None,
    signature: bytes = bytes(16),
) -> bytes:
    """SMB2 Packet Header (MS-SMB2 §2.2.1): the sync form (process id 0xFEFF, tree id) or the async one."""
    flags |= ASYNC_COMMAND if async_id is not None else 0
    head = PROTOCOL_ID + struct.pack("<HHIHHIIQ", HEADER_LEN, charge, status, command, credits, flags, next_command,
                                     message_id)  # fmt: skip
    middle = struct.pack("<Q", async_id) if async_id is not None else struct.pack("<II", 0xFEFF, tree_id)
    return head + middle + struct.pack("<Q", session_id) + signature


def descriptor(offset: int, token: int, length: int) -> bytes:
    """SMB Direct buffer descriptor V1 (MS-SMBD §2.2.3.1): offset, token (the RDMA R_Key), length."""
    return struct.pack("<QII", offset, token, length)


def read_request(fid: bytes, length: int, offset: int, channel=(), minimum: int = 0, flags: int = 0) -> bytes:
    """SMB2 READ Request (MS-SMB2 §2.2.19) with `channel` buffer descriptors ((offset, token, length)) for an
    RDMA channel, after the fixed part at HEADER_LEN + 48."""
    info = b"".join(descriptor(*d) for d in channel)
    kind = CHANNEL_RDMA_V1 if info else CHANNEL_NONE
    at = HEADER_LEN + 48 if info else 0
    fixed = struct.pack("<HBBIQ16sIIIHH", 49, 0, flags, length, offset, fid, minimum, kind, 0, at, len(info))
    return fixed + (info or b"\0")


def read_response(data: bytes = b"", remaining: int = 0) -> bytes:
    """SMB2 READ Response (§2.2.20): data offset, length, remaining (what went over the RDMA channel)."""
    at = HEADER_LEN + 16 if data else 0
    return struct.pack("<HBBIII", 17, at, 0, len(data), remaining, 0) + (data or b"\0")


def write_request(fid: bytes, offset: int, data: bytes = b"", channel=(), remaining: int = 0) -> bytes:
    """SMB2 WRITE Request (§2.2.21): inline `data`, or none and the buffer descriptors of the RDMA channel
    the server READs `remaining` bytes through."""
    info = b"".join(descriptor(*d) for d in channel)
    kind = CHANNEL_RDMA_V1 if info else CHANNEL_NONE
    at = HEADER_LEN + 48
    head = struct.pack("<HHIQ16sIIHHI", 49, at if data else 0, len(data), offset, fid, kind, remaining,
                       at if info else 0, len(info), 0)  # fmt: skip
    return head + (info or data or b"\0")


def write_response(count: int) -> bytes:
    """SMB2 WRITE Response (§2.2.22): the bytes written."""
    return struct.pack("<HHIIHH", 17, 0, count, 0, 0, 0)


def error_response() -> bytes:
    """SMB2 ERROR Response (§2.2.2) without error data."""
    return struct.pack("<HBBI", 9, 0, 0, 0) + b"\0"
