"""SMB Direct without scapy: the negotiate request and response and the data transfer message (MS-SMBD
§2.2.1-§2.2.3, little-endian) read into trees shaped as tshark 4.4 shows them under Wireshark's names
(`smb_direct.*`, packet-smb-direct.c), and Wireshark's heuristic telling the three apart in an RC SEND.

A tree is a list of (key, value) leaves and (label, list) subtrees (as dissectors.rpcrdmatable's); a
message cut short is decoded as far as its bytes go and the tree then ends with ("_truncated", True)."""

import struct

from dissectors.numbers import SMB_DIRECT_PORT, SMB_DIRECT_PORT_IWARP
from dissectors.nvmetable import SID_ULP_TCP, SID_ULP_TCP_MASK

NEG_REQ, NEG_REP, DATA = 1, 2, 3  # the message kinds (MS-SMBD §2.2)
VERSION = 0x0100  # §2.2.1: SMB Direct 1.0
NEG_REP_LEN, DATA_HEAD = 32, 20  # a data message's header without its padding: 20 bytes
MAX_CREDITS = 255  # what Wireshark's heuristic accepts in a data message's credit fields
INFO = {NEG_REQ: "NegotiateRequest", NEG_REP: "NegotiateResponse", DATA: "DataMessage"}
# NTSTATUS values (MS-ERREF §2.3) by the names tshark gives them
NT_STATUS = {
    0x00000000: "STATUS_SUCCESS",
    0x00000103: "STATUS_PENDING",
    0x80000005: "STATUS_BUFFER_OVERFLOW",
    0xC0000011: "STATUS_END_OF_FILE",
    0xC0000016: "STATUS_MORE_PROCESSING_REQUIRED",
    0xC0000022: "STATUS_ACCESS_DENIED",
    0xC000000D: "STATUS_INVALID_PARAMETER",
    0xC0000034: "STATUS_OBJECT_NAME_NOT_FOUND",
    0xC00000BB: "STATUS_NOT_SUPPORTED",
    0xC000009A: "STATUS_INSUFFICIENT_RESOURCES",
    0xC0000128: "STATUS_FILE_CLOSED",
}

# Field types for filters and how many hex digits tshark prints (-1: bytes), Wireshark 4.4's fields
FIELDS = {
    **{f"smb_direct.{n}": "uint" for n in "version.min version.max version.negotiated status flags".split()},
    **{f"smb_direct.{n}": "uint" for n in "credits.requested credits.granted max_read_write_size".split()},
    **{f"smb_direct.{n}": "uint" for n in "preferred_send_size max_receive_size max_fragmented_size".split()},
    **{f"smb_direct.{n}": "uint" for n in "remaining_length data_offset data_length".split()},
    **{f"smb_direct.{n}": "uint" for n in "fragment fragment.count reassembled.length reassembled_in".split()},
    **{f"smb_direct.{n}": "protocol" for n in "negotiate_request negotiate_response data_message".split()},
    "smb_direct.flags.response_requested": "uint",
    "smb_direct.reassembled.data": "bytes",
    "smb_direct": "protocol",
}
DISPLAY = {
    **{f"smb_direct.version.{n}": 4 for n in ("min", "max", "negotiated")},
    "smb_direct.status": 8,
    "smb_direct.flags": 4,
    "smb_direct.reassembled.data": -1,
}


def is_smb_service(service_id: int) -> bool:
    """An RDMA-CM service ID for TCP port 445 or 5445, SMB Direct (MS-SMBD §2.1)."""
    port = service_id & 0xFFFF
    return service_id & SID_ULP_TCP_MASK == SID_ULP_TCP and port in (SMB_DIRECT_PORT, SMB_DIRECT_PORT_IWARP)


def _u16(data: bytes, at: int) -> int:
    return struct.unpack_from("<H", data, at)[0]


def _u32(data: bytes, at: int) -> int:
    return struct.unpack_from("<I", data, at)[0]


def kind(payload: bytes):
    """Which message `payload` is by Wireshark's heuristic (packet-smb-direct.c): a 32-byte negotiate
    response with version 1.0 throughout; a 20-byte negotiate request (versions 1.0, reserved zero) or credit
    grant (credits up to 255, flags 0 or 1, no data); a data message whose data starts at 24 and is not
    empty, with zero padding.  None: not SMB Direct."""
    n = len(payload)
    if n < 20:
        return None
    words = [_u16(payload, i) for i in (0, 2, 4, 6)]
    if n == NEG_REP_LEN and words == [VERSION, VERSION, VERSION, 0]:
        return NEG_REP
    neg_req = words[:3] == [VERSION, VERSION, 0]
    data = words[0] <= MAX_CREDITS and words[1] <= MAX_CREDITS and words[2] <= 1 and words[3] == 0
    if n == DATA_HEAD:
        data = data and payload[8:20] == bytes(12)
        if neg_req and not data:
            return NEG_REQ
        return DATA if data else None
    if n <= 24 or _u32(payload, 12) != 24 or _u32(payload, 16) == 0 or _u32(payload, 20) != 0:
        return None
    return DATA if data else None


class _Reader:
    """Little-endian fields of `data`, each appended to `items` under its name as read."""

    def __init__(self, data: bytes, items: list):
        self.data, self.items, self.off = data, items, 0

    def take(self, key, size: int):
        if self.off + size > len(self.data):
            raise IndexError(key)
        value = int.from_bytes(self.data[self.off : self.off + size], "little")
        self.off += size
        if key:
            self.items.append((key, value))
        return value


def _negotiate(r: _Reader, response: bool) -> None:
    """Negotiate request (§2.2.1) or response (§2.2.2) fields."""
    r.take("smb_direct.version.min", 2)
    r.take("smb_direct.version.max", 2)
    r.take("smb_direct.version.negotiated" if response else None, 2)
    if response:
        r.take(None, 2)
    r.take("smb_direct.credits.requested", 2)
    if response:
        r.take("smb_direct.credits.granted", 2)
        r.take("smb_direct.status", 4)
        r.take("smb_direct.max_read_write_size", 4)
    for name in ("preferred_send_size", "max_receive_size", "max_fragmented_size"):
        r.take(f"smb_direct.{name}", 4)


def message(payload: bytes, which: int):
    """(tree, info) of an SMB Direct message of kind `which`; info holds the data transfer's remaining
    length and its data (None when the message does not hold what it announces), a negotiate response's
    status."""
    items, info = [], {"data": None, "remaining": 0}
    r = _Reader(payload, items)
    label = {NEG_REQ: "negotiate_request", NEG_REP: "negotiate_response", DATA: "data_message"}[which]
    try:
        if which == DATA:
            r.take("smb_direct.credits.requested", 2)
            r.take("smb_direct.credits.granted", 2)
            flags = r.take("smb_direct.flags", 2)
            items.append(("smb_direct.flags_tree", [("smb_direct.flags.response_requested", bool(flags & 1))]))
            r.take(None, 2)
            info["remaining"] = r.take("smb_direct.remaining_length", 4)
            offset = r.take("smb_direct.data_offset", 4)
            length = r.take("smb_direct.data_length", 4)
            if length and offset > r.off and offset + length <= len(payload):
                info["data"] = payload[offset : offset + length]
        else:
            _negotiate(r, which == NEG_REP)
            info["status"] = dict(items).get("smb_direct.status", 0)
    except IndexError:
        items.append(("_truncated", True))
    return [(f"smb_direct.{label}", items)], info


def info_text(which: int, info: dict) -> str:
    """The Info column tshark writes for an SMB Direct message it does not hand on."""
    status = info.get("status", 0)
    error = f", Error: {NT_STATUS.get(status, f'Unknown (0x{status:08X})')}" if which == NEG_REP and status else ""
    return INFO[which] + error
