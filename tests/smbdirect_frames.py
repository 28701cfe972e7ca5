"""SMB Direct frames crafted byte by byte from MS-SMBD and MS-SMB2 (ibwire.synth.smbdirect builds the
messages, ibwire.synth.links frames them as RoCEv2 RC packets): a client negotiating SMB Direct with a
server, SMB2 READ and WRITE requests over the RDMA channel (their buffer descriptors, the RDMA WRITE and
READ that use them, the responses), inline and fragmented messages, an interim and an error response, a
SEND split in First/Last, and damaged messages.  The tests hand the capture to tshark 4.4 and to ibwire."""

import struct

from rpcrdma_frames import (  # the same two ends, queue pairs and framing as the NFS-over-RDMA frames
    CLIENT,
    QP,
    READ_REQUEST,
    READ_RESPONSE_ONLY,
    SEND_FIRST,
    SEND_LAST,
    SEND_ONLY,
    UD_SEND_ONLY,
    WRITE_ONLY,
)
from rpcrdma_frames import write_capture as write_frames

from dissectors.numbers import SMB_DIRECT_PORT
from dissectors.nvmetable import SID_ULP_TCP
from ibwire.synth import mads
from ibwire.synth import smbdirect as m

FID = bytes(range(0x10, 0x20))
SESSION, TREE = 0x0000100000000009, 5
ACCESS_DENIED, PENDING = 0xC0000022, 0x00000103


def setup():
    """The RDMA-CM REQ and REP that connect the client's QP to the server's for SMB Direct (port 445)."""
    sid = SID_ULP_TCP | SMB_DIRECT_PORT
    req = mads.cm_req(0x61, sid, CLIENT.guid, QP["client"], 100, 0xFFFF, 1, 2, bytes(16), bytes(16))
    return [("client", UD_SEND_ONLY, req), ("server", UD_SEND_ONLY, mads.cm_rep(0x62, 0x61, 2, QP["server"], 500))]


def smb(command: int, mid: int, body: bytes, reply: bool = False, **kw) -> bytes:
    flags = m.SERVER_TO_REDIR if reply else 0
    return m.smb2_header(command, mid, SESSION, TREE, flags=flags, **kw) + body


def messages():
    """(sender, opcode, payload, RETH (va, rkey, length) or None) in capture order."""
    c, s = "client", "server"
    out = [(c, SEND_ONLY, m.negotiate_request()), (s, SEND_ONLY, m.negotiate_response())]
    read = m.read_request(FID, 1024, 8192, [(0x7F0000001000, 0xABC, 1024)])
    out.append((c, SEND_ONLY, m.data_message(smb(m.READ, 7, read), flags=m.RESPONSE_REQUESTED)))
    out.append((s, WRITE_ONLY, bytes(range(256)) * 4, (0x7F0000001000, 0xABC, 1024)))
    out.append((s, SEND_ONLY, m.data_message(smb(m.READ, 7, m.read_response(remaining=1024), True), granted=2)))
    write = m.write_request(FID, 0, channel=[(0x7F0000003000, 0x123, 512)], remaining=512)
    out.append((c, SEND_ONLY, m.data_message(smb(m.WRITE, 8, write))))
    out.append((s, READ_REQUEST, b"", (0x7F0000003000, 0x123, 512)))
    out.append((c, READ_RESPONSE_ONLY, bytes(512)))
    out.append((s, SEND_ONLY, m.data_message(smb(m.WRITE, 8, m.write_response(512), True))))
    out.append((c, SEND_ONLY, m.data_message()))
    inline = smb(m.WRITE, 9, m.write_request(FID, 4096, bytes(range(200)) * 2))
    out += [(c, SEND_ONLY, part) for part in m.fragments(inline, 256)]
    interim = m.smb2_header(m.WRITE, 9, SESSION, flags=m.SERVER_TO_REDIR, status=PENDING, async_id=0x21)
    out.append((s, SEND_ONLY, m.data_message(interim + m.error_response())))
    denied = smb(m.WRITE, 9, m.error_response(), True, status=ACCESS_DENIED)
    out.append((s, SEND_ONLY, m.data_message(denied)))
    whole = m.data_message(smb(m.READ, 10, m.read_request(FID, 100, 0, minimum=1)))
    out += [(c, SEND_FIRST, whole[:64]), (c, SEND_LAST, whole[64:])]
    out.append((s, SEND_ONLY, m.data_message(smb(m.READ, 10, m.read_response(bytes(100)), True))))
    return out


def compound():
    """Two READs sent as one compound (MS-SMB2 §3.2.4.1.4: the second related, NextCommand 8-byte aligned) and
    their responses compounded alike."""
    first = m.read_request(FID, 4096, 0, [(0x7F0000001000, 0xABE, 4096)])
    pad = bytes(-len(first) % 8)
    head = m.smb2_header(m.READ, 11, SESSION, TREE, next_command=m.HEADER_LEN + len(first) + len(pad))
    second = m.smb2_header(m.READ, 12, SESSION, TREE, flags=4)  # SMB2_FLAGS_RELATED_OPERATIONS
    second += m.read_request(FID, 4096, 4096, [(0x7F0000002000, 0xABF, 4096)])
    answer = m.read_response(remaining=4096)
    gap = bytes(-len(answer) % 8)
    reply = m.smb2_header(m.READ, 11, SESSION, TREE, flags=1, next_command=m.HEADER_LEN + len(answer) + len(gap))
    chained = m.smb2_header(m.READ, 12, SESSION, TREE, flags=5) + answer
    return [
        ("client", SEND_ONLY, m.data_message(head + first + pad + second)),
        ("server", SEND_ONLY, m.data_message(reply + answer + gap + chained)),
    ]


def damaged():
    """Every SEND-only message cut at several lengths and with bytes flipped (SMB Direct and SMB2 both)."""
    out = []
    for who, opcode, payload, *_ in messages():
        if opcode == SEND_ONLY and len(payload) > 24:
            out += [(who, opcode, payload[:n]) for n in range(20, len(payload), 11)]
            out.append((who, opcode, bytes(b ^ 0xFF if i % 9 == 5 and i > 24 else b for i, b in enumerate(payload))))
    return out


def undeclared():
    """Messages Wireshark's heuristic turns down (a data offset of 32, credits above 255): SMB Direct to
    neither tool, with -d infiniband,smb_direct or without."""
    body = smb(m.READ, 7, m.read_request(FID, 1024, 8192, [(0x7F0000001000, 0xABC, 1024)]))
    offset32 = struct.pack("<HHHHIIII", 10, 1, 0, 0, 0, 32, len(body), 0) + bytes(8) + body
    return [("client", SEND_ONLY, offset32), ("client", SEND_ONLY, m.data_message(body, requested=300))]


def write_capture(path, connect: bool = False, messages=messages) -> int:
    """The crafted conversation as a RoCEv2 pcap (after its RDMA-CM setup for port 445 when `connect`);
    returns the number of frames."""
    return write_frames(path, messages=lambda: (setup() if connect else []) + messages())
