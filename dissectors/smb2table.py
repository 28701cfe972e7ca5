"""SMB2 without scapy, as far as SMB Direct needs it: the packet header (MS-SMB2 §2.2.1, sync and async
forms), READ and WRITE requests and responses (§2.2.19-§2.2.22) with the SMB Direct buffer descriptors of
their RDMA channel (MS-SMBD §2.2.3.1), and the ERROR response (§2.2.2), read into trees shaped as tshark 4.4
shows them under Wireshark's names (`smb2.*`, packet-smb2.c).  Other commands' bodies are not read.

Trees are dissectors.rpcrdmatable's: (key, value) leaves and (label, list) subtrees; a message cut short
ends with ("_truncated", True)."""

import struct

from dissectors.smbdirecttable import NT_STATUS

PROTOCOL_ID = 0xFE534D42  # 0xFE 'S' 'M' 'B', read big-endian as tshark shows it
HEADER_LEN = 64
READ, WRITE = 8, 9
ERROR_SIZE = 9  # the StructureSize of an ERROR response
CHANNEL_RDMA = (1, 2)  # SMB2_CHANNEL_RDMA_V1 and _V1_INVALIDATE (MS-SMB2 §2.2.19)
DESCRIPTOR = 16  # SMB_DIRECT_BUFFER_DESCRIPTOR_V1: offset, token, length
MAX_CHAIN = 64  # messages of one compound read at most
COMMANDS = (
    "Negotiate Protocol",
    "Session Setup",
    "Session Logoff",
    "Tree Connect",
    "Tree Disconnect",
    "Create",
    "Close",
    "Flush",
    "Read",
    "Write",
    "Lock",
    "Ioctl",
    "Cancel",
    "KeepAlive",
    "Find",
    "Notify",
    "GetInfo",
    "SetInfo",
    "Break",
)
# The header's Flags bits (§2.2.1.2) with tshark's names; priority_mask is a 3-bit value
FLAG_BITS = (("response", 0x1), ("async", 0x2), ("chained", 0x4), ("signature", 0x8))
FLAG_BITS += (("priority_mask", 0x70), ("dfs", 0x10000000), ("replay", 0x20000000))
ASYNC = 0x2

_HEX = {"protocol_id": 8, "nt_status": 8, "flags": 8, "chain_offset": 8, "header_reserved": 8, "tid": 8}
_HEX.update({"aid": 16, "sesid": 16, "buffer_code": 4, "read_padding": 2, "read_flags": 2, "channel": 8})
_HEX.update({"olb.offset": 8, "data_offset": 4, "write.flags": 8, "buffer_descriptor.token": 8})
_HEX.update({"error.reserved": 2})
_BYTES = "reserved signature read.blob write_data channel_info_blob error.data".split()
_UINTS = "header_len credit.charge channel_sequence cmd credits.requested credits.granted msg_id".split()
_UINTS += "buffer_code.length read_length file_offset min_count remaining_bytes olb.length read_remaining".split()
_UINTS += "write_length write.count write.remaining channel_info_offset channel_info_length".split()
_UINTS += "buffer_descriptor.offset buffer_descriptor.length error.context_count error.byte_count".split()
_UINTS += "response_to response_in".split()
_BOOLS = [f"flags.{n}" for n, _ in FLAG_BITS] + ["buffer_code.dynamic", "read_flags.unbuffered"]
_BOOLS += ["read_flags.compressed", "write.flags.write_through", "write.flags.unbuffered"]
FIELDS = {
    "smb2": "protocol",
    **{f"smb2.{n}": "uint" for n in list(_HEX) + _UINTS + _BOOLS},
    **{f"smb2.{n}": "bytes" for n in _BYTES},
    "smb2.fid": "string",
    "smb2.time": "float",
}
DISPLAY = {**{f"smb2.{n}": d for n, d in _HEX.items()}, **{f"smb2.{n}": -1 for n in _BYTES}}


class _Body:
    """Little-endian fields of an SMB2 message read at `off`, each appended to `items` as read."""

    def __init__(self, data: bytes, off: int, items: list):
        self.data, self.off, self.items = data, off, items

    def take(self, key, size: int) -> int:
        if self.off + size > len(self.data):
            raise IndexError(key)
        value = int.from_bytes(self.data[self.off : self.off + size], "little")
        self.off += size
        if key:
            self.items.append((f"smb2.{key}", value))
        return value

    def raw(self, key, size: int) -> bytes:
        if self.off + size > len(self.data):
            raise IndexError(key)
        self.off += size
        value = self.data[self.off - size : self.off]
        self.items.append((f"smb2.{key}", value))
        return value

    def bits(self, key: str, value: int, table) -> None:
        tree = []
        for name, mask in table:
            v = (value & mask) >> (mask & -mask).bit_length() - 1
            tree.append((f"smb2.{key}.{name}", bool(v) if mask & (mask - 1) == 0 else v))
        self.items.append((f"smb2.{key}_tree", tree))


def guid_text(raw: bytes) -> str:
    """A GUID as tshark writes it: the first three parts little-endian."""
    a, b, c = struct.unpack_from("<IHH", raw)
    return f"{a:08x}-{b:04x}-{c:04x}-{raw[8:10].hex()}-{raw[10:16].hex()}"


def header(data: bytes):
    """(tree, info) of the SMB2 header at the start of `data`; info: command, response, status, message id
    (None when the header is cut)."""
    items, info = [], {}
    b = _Body(data, 0, items)
    try:
        items.append(("smb2.protocol_id", struct.unpack_from(">I", data)[0]))
        b.off = 4
        b.take("header_len", 2)
        b.take("credit.charge", 2)
        flags = struct.unpack_from("<I", data, 16)[0]
        response = bool(flags & 1)
        if response:
            info["status"] = b.take("nt_status", 4)
        else:
            b.take("channel_sequence", 2)
            b.raw("reserved", 2)
        info["command"] = b.take("cmd", 2)
        b.take("credits.granted" if response else "credits.requested", 2)
        b.take("flags", 4)
        b.bits("flags", flags, FLAG_BITS)
        b.take("chain_offset", 4)
        info["mid"] = b.take("msg_id", 8)
        if flags & ASYNC:
            b.take("aid", 8)
        else:
            b.take("header_reserved", 4)
            b.take("tid", 4)
        b.take("sesid", 8)
        b.raw("signature", 16)
    except (IndexError, struct.error):
        return [("SMB2 Header", items), ("_truncated", True)], None
    info["response"] = response
    return [("SMB2 Header", items)], info


def _buffer_code(b: _Body) -> int:
    code = b.take("buffer_code", 2)
    b.items.append(("smb2.buffer_code_tree", [("smb2.buffer_code.length", code >> 1)]))
    b.items[-1][1].append(("smb2.buffer_code.dynamic", bool(code & 1)))
    return code


def _channel(b: _Body, data: bytes, channel: int, at: int, length: int, descriptors: list) -> None:
    """The channel info blob (`length` bytes at `at`): an RDMA channel's buffer descriptors, each noted as
    (offset, token, length)."""
    if not length or at + length > len(data):
        b.items.append(("smb2.channel_info_blob", b""))
        return
    tree = []
    if channel in CHANNEL_RDMA:
        for k in range(at, at + length - DESCRIPTOR + 1, DESCRIPTOR):
            offset, token, size = struct.unpack_from("<QII", data, k)
            descriptors.append((offset, token, size))
            leaf = [("smb2.buffer_descriptor.offset", offset), ("smb2.buffer_descriptor.token", token)]
            tree.append(("RDMA V1", leaf + [("smb2.buffer_descriptor.length", size)]))
    b.items.append(("smb2.channel_info_blob", tree or data[at : at + length]))


def _read_request(b: _Body, data: bytes, info: dict) -> None:
    _buffer_code(b)
    b.take("read_padding", 1)
    flags = b.take("read_flags", 1)
    b.bits("read_flags", flags, (("unbuffered", 1), ("compressed", 2)))
    info["length"] = b.take("read_length", 4)
    b.take("file_offset", 8)
    info["fid"] = guid_text(data[b.off : b.off + 16]) if b.off + 16 <= len(data) else b.take(None, 16)
    b.off += 16
    b.items.append(("GUID handle", [("smb2.fid", info["fid"])]))
    b.take("min_count", 4)
    channel = b.take("channel", 4)
    b.take("remaining_bytes", 4)
    at, length = b.take("olb.offset", 2), b.take("olb.length", 2)
    _channel(b, data, channel, at, length, info["descriptors"])
    return b""


def _write_request(b: _Body, data: bytes, info: dict) -> bytes:
    """The WRITE request's fields; returns its inline data."""
    _buffer_code(b)
    data_at = b.take("data_offset", 2)
    info["length"] = length = b.take("write_length", 4)
    b.take("file_offset", 8)
    info["fid"] = guid_text(data[b.off : b.off + 16]) if b.off + 16 <= len(data) else b.take(None, 16)
    b.off += 16
    b.items.append(("GUID handle", [("smb2.fid", info["fid"])]))
    channel = b.take("channel", 4)
    info["remaining"] = b.take("remaining_bytes", 4)
    at, blob = b.take(None, 2), b.take(None, 2)
    flags = b.take("write.flags", 4)
    b.bits("write.flags", flags, (("write_through", 1), ("unbuffered", 2)))
    b.items += [("smb2.olb.offset", at), ("smb2.olb.length", blob)]
    _channel(b, data, channel, at, blob, info["descriptors"])
    if not length:
        b.items.append(("smb2.write_data", b""))
    return data[data_at : data_at + length] if length else b""


def _read_response(b: _Body, data: bytes, info: dict) -> bytes:
    _buffer_code(b)
    at, _ = b.take(None, 1), b.take(None, 1)
    length, remaining = b.take(None, 4), b.take(None, 4)
    info["length"] = length + remaining
    reserved = data[b.off - 9 : b.off - 8]
    b.items += [("smb2.read_remaining", remaining), ("smb2.reserved", data[b.off : b.off + 4])]
    b.off += 4
    b.items += [("smb2.olb.offset", at), ("smb2.reserved", reserved), ("smb2.olb.length", length)]
    if at + length > len(data):
        raise IndexError("read.blob")
    b.items.append(("smb2.read.blob", data[at : at + length]))
    return data[at : at + length]


def _write_response(b: _Body, data: bytes, info: dict) -> bytes:
    _buffer_code(b)
    b.raw("reserved", 2)
    info["length"] = b.take("write.count", 4)
    b.take("write.remaining", 4)
    b.take("channel_info_offset", 2)
    b.take("channel_info_length", 2)
    return b""


def _error(b: _Body, data: bytes, info: dict) -> bytes:
    """ERROR response (§2.2.2): context count, byte count and the error data (one byte when none)."""
    _buffer_code(b)
    b.take("error.context_count", 1)
    b.take("error.reserved", 1)
    count = b.take("error.byte_count", 4)
    b.raw("error.data", max(count, 1))
    return b""


BODIES = {(READ, False): _read_request, (WRITE, False): _write_request}
BODIES.update({(READ, True): _read_response, (WRITE, True): _write_response})


def chain(data: bytes) -> list:
    """The messages of a compound (MS-SMB2 §3.2.4.1.4): each header's NextCommand is where the next one
    starts, relative to it; the last runs to the end."""
    parts, off = [], 0
    while len(parts) < MAX_CHAIN:
        step = struct.unpack_from("<I", data, off + 20)[0] if off + 24 <= len(data) else 0
        if not step or off + step >= len(data):
            return parts + [data[off:]]
        parts.append(data[off : off + step])
        off += step
    return parts + [data[off:]]


def command_label(info: dict) -> str:
    cmd = info["command"]
    name = COMMANDS[cmd] if cmd < len(COMMANDS) else f"Unknown ({cmd})"
    return f"{name} {'Response' if info['response'] else 'Request'} (0x{cmd:02x})"


def message(data: bytes):
    """(tree, info, data the message carries) of an SMB2 message: the header and, for READ/WRITE and error
    responses, the body.  info: command, response, status, mid, and of a READ/WRITE request its buffer
    descriptors [(offset, token, length)], length and file id."""
    tree, info = header(data)
    if info is None:
        return tree, {}, b""
    info["descriptors"] = []
    b = _Body(data, HEADER_LEN, [])
    error = info["response"] and info["status"] and len(data) >= HEADER_LEN + 2
    error = error and struct.unpack_from("<H", data, HEADER_LEN)[0] == ERROR_SIZE
    body = _error if error else BODIES.get((info["command"], info["response"]))
    if body is None:
        return tree, info, b""
    try:
        carried = body(b, data, info)
    except (IndexError, struct.error):
        return tree + [(command_label(info), b.items), ("_truncated", True)], info, b""
    return tree + [(command_label(info), b.items)], info, carried


def info_text(info: dict, tree: list) -> str:
    """The Info column as tshark writes it: `Read Request Len:1024 Off:8192`, `Write Response, Error: …`."""
    if not info:
        return "SMB2"
    cmd = info["command"]
    text = f"{COMMANDS[cmd] if cmd < len(COMMANDS) else f'Unknown ({cmd})'} {'Response' if info['response'] else 'Request'}"
    if not info["response"] and cmd in (READ, WRITE):
        leaves = dict(kv for _, sub in tree[1:2] for kv in sub if not isinstance(kv[1], list))
        length = leaves.get("smb2.read_length", leaves.get("smb2.write_length", 0))
        text += f" Len:{length} Off:{leaves.get('smb2.file_offset', 0)}"
    status = info.get("status", 0)
    if info["response"] and status:
        text += f", Error: {NT_STATUS.get(status, f'Unknown (0x{status:08x})')}"
    return text
