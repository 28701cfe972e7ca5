"""NFS over RDMA without scapy: the RPC-RDMA version 1 header (RFC 8166 §4.2: XID, version, credits,
message type, read list, write list, reply chunk; RDMA_MSGP and RDMA_DONE of RFC 5666 §3), the ONC RPC
message it carries (RFC 5531 §9) and the NFS call arguments (RFC 1813 §3.3 for v3, RFC 7530 §16.2 for
v4's COMPOUND) read into trees shaped as tshark 4.4 shows them, under Wireshark's field names
(packet-rpcrdma.c, packet-rpc.c, packet-nfs.c).

A tree is a list of (key, value) leaves and (label, list) subtrees.  A message cut short is decoded as far
as its bytes go: the tree then ends with ("_truncated", True)."""

import struct
import zlib

from dissectors import nfs3
from dissectors.numbers import NFS_RDMA_PORT
from dissectors.nvmetable import SID_ULP_TCP, SID_ULP_TCP_MASK

RDMA_MSG, RDMA_NOMSG, RDMA_MSGP, RDMA_DONE, RDMA_ERROR = range(5)
MSG_TYPES = ("RDMA_MSG", "RDMA_NOMSG", "RDMA_MSGP", "RDMA_DONE", "RDMA_ERROR")
ERR_VERS = 1
NFS_PROGRAM = 100003
AUTH_UNIX = 1
NFS3_PROCS = (
    "NULL GETATTR SETATTR LOOKUP ACCESS READLINK READ WRITE CREATE MKDIR SYMLINK MKNOD REMOVE RMDIR RENAME "
    "LINK READDIR READDIRPLUS FSSTAT FSINFO PATHCONF COMMIT"
).split()
# The label tshark gives the first argument's file handle, per NFSv3 procedure (packet-nfs.c)
FH3_LABEL = {1: "object", 2: "object", 4: "object", 5: "symlink", 6: "file", 7: "file", 15: "file", 21: "file"}
FH3_LABEL.update({p: "dir" for p in (16, 17)})
FH3_LABEL.update({p: "fsroot" for p in (18, 19)})
FH3_LABEL[20] = "object"
NFS4_OPS = {3: "ACCESS", 9: "GETATTR", 10: "GETFH", 15: "LOOKUP", 18: "OPEN", 22: "PUTFH", 24: "PUTROOTFH"}
NFS4_OPS.update({25: "READ", 26: "READDIR", 38: "WRITE", 53: "SEQUENCE", 4: "CLOSE", 5: "COMMIT"})
PUTFH = 22
ACCESS = ("read", "lookup", "modify", "extend", "delete", "execute")  # ACCESS3_* bits (RFC 1813 §3.3.4)
SETUP_OPS = (PUTFH, 10, 24, 53)  # PUTFH, GETFH, PUTROOTFH, SEQUENCE: not what a COMPOUND is for

# Field types for filters and how many hex digits tshark prints (-1: bytes), Wireshark 4.4's fields
FIELDS = {
    **{f"rpcordma.{n}": "uint" for n in "xid version flow_control msg_type reads_count writes_count".split()},
    **{f"rpcordma.{n}": "uint" for n in "reply_count rdma_handle rdma_length rdma_offset position".split()},
    **{f"rpcordma.{n}": "uint" for n in "segment_count rdma_align rdma_thresh errcode vers_low vers_high".split()},
    **{f"rpc.{n}": "uint" for n in "xid msgtyp version program programversion procedure replystat".split()},
    **{f"rpc.{n}": "uint" for n in "state_accept state_reject state_auth version.min version.max".split()},
    **{f"rpc.{n}": "uint" for n in "programversion.min programversion.max opaque_length".split()},
    **{f"rpc.auth.{n}": "uint" for n in "flavor length stamp uid gid".split()},
    "rpc.auth.machinename": "string",
    "rpc.fill_bytes": "bytes",
    "rpc.reqframe": "uint",
    "rpc.repframe": "uint",
    "rpc.time": "float",
    **{f"nfs.{n}": "uint" for n in "procedure_v3 procedure_v4 fh.length fh.hash offset3 count3".split()},
    **{f"nfs.{n}": "uint" for n in "write.stable access_check minorversion ops.count opcode main_opcode".split()},
    **{f"nfs.{n}": "uint" for n in "attr_mask attr_count attr status3 nfsstat4".split()},
    **{f"nfs.{n}": "uint" for n in "seqid slotid high_slotid cachethis4 offset4 count4".split()},
    **{f"nfs.stateid.{n}": "uint" for n in "hash seqid other_hash".split()},
    **{f"nfs.{n}": "bytes" for n in "session_id4 stateid stateid.other".split()},
    **{f"nfs.access_{n}": "uint" for n in ("read", "lookup", "modify", "extend", "delete", "execute")},
    "nfs.fhandle": "bytes",
    "nfs.name": "string",
    "nfs.tag": "string",
    **{p: "protocol" for p in ("rpcordma", "rpc", "nfs")},
    **{f"rpcordma.{n}": "uint" for n in ("reassembled.length", "fragment", "fragment.count")},
    "rpcordma.reassembled.data": "bytes",
    "rpcordma.chunk_call": "uint",  # ibwire's own: the call whose chunk an RDMA READ or WRITE moves
}
DISPLAY = {
    **{k: 8 for k in ("rpcordma.xid", "rpcordma.rdma_handle", "rpc.xid", "rpc.auth.stamp", "nfs.fh.hash")},
    **{k: 8 for k in ("nfs.access_check", "nfs.attr_mask", "nfs.seqid", "nfs.stateid.other_hash")},
    **{k: -1 for k in ("nfs.session_id4", "nfs.stateid", "nfs.stateid.other")},
    "nfs.stateid.hash": 4,
    "rpcordma.rdma_offset": 16,
    "nfs.fhandle": -1,
    "rpc.fill_bytes": -1,
    "rpcordma.reassembled.data": -1,
}


class Short(Exception):
    """The message ends before a field it announces."""


class XDR:
    """Big-endian 32-bit words and opaques (RFC 4506) read from `data` at `off`."""

    def __init__(self, data: bytes, off: int = 0):
        self.data, self.off = data, off

    def take(self, n: int) -> bytes:
        if self.off + n > len(self.data):
            raise Short()
        self.off += n
        return self.data[self.off - n : self.off]

    def u32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack(">Q", self.take(8))[0]

    def opaque(self, limit: int = 1 << 16):
        """(length, bytes, fill bytes) of a variable-length opaque."""
        n = self.u32()
        if n > limit:
            raise Short()
        return n, self.take(n), self.take(-n & 3)


def is_nfs_service(service_id: int) -> bool:
    """An RDMA-CM service ID for TCP port 20049, NFS over RDMA (RFC 8267 §6)."""
    return service_id & SID_ULP_TCP_MASK == SID_ULP_TCP and service_id & 0xFFFF == NFS_RDMA_PORT


def _lists_end(data: bytes, off: int):
    """Where the read list, write list and reply chunk starting at `off` end; None when they do not fit."""
    x = XDR(data, off)
    try:
        while x.u32():
            x.take(20)
        while x.u32():
            x.take(16 * x.u32())
        if x.u32():
            x.take(16 * x.u32())
    except Short:
        return None
    return x.off


def looks_like(payload: bytes) -> bool:
    """Wireshark's heuristic (packet-rpcrdma.c): version 1, a known message type, and for RDMA_MSG and
    RDMA_MSGP chunk lists that fit, followed by the same XID in the RPC message."""
    if len(payload) < 16:
        return False
    xid, vers, _, kind = struct.unpack(">IIII", payload[:16])
    if vers != 1 or kind > RDMA_ERROR:
        return False
    if kind not in (RDMA_MSG, RDMA_MSGP):
        return True
    end = _lists_end(payload, 16 if kind == RDMA_MSG else 24)
    return end is not None and end + 4 <= len(payload) and payload[end : end + 4] == payload[:4]


def _segment(x: XDR) -> list:
    return [("rpcordma.rdma_handle", x.u32()), ("rpcordma.rdma_length", x.u32()), ("rpcordma.rdma_offset", x.u64())]


def _chunk(x: XDR, segments: list) -> tuple:
    """A write chunk (also the reply chunk): its counted segments, each (handle, length, offset) noted."""
    count = x.u32()
    items = [("rpcordma.segment_count", count)]
    label = f"Write chunk ({count} segment{'' if count == 1 else 's'})"
    for i in range(count):
        seg = _segment(x)
        segments.append(tuple(v for _, v in seg))
        items.append((f"RDMA segment {i}", seg))
    return label, items


def _lists(x: XDR, items: list, info: dict) -> None:
    """Read list, write list, reply chunk (RFC 8166 §4.2.1), each counted as tshark counts them."""
    reads, tree = [], []
    while x.u32():
        position = x.u32()
        seg = _segment(x)
        reads.append((position,) + tuple(v for _, v in seg))
        tree.append((f"Read chunk: (position {position})", [("rpcordma.position", position)] + seg))
    info["reads"] = reads
    items.append(("rpcordma.reads_count", len(reads)))
    if tree:
        items.append(("rpcordma.reads_count_tree", tree))
    writes, tree = [], []
    while x.u32():
        writes.append([])
        tree.append(_chunk(x, writes[-1]))
    info["writes"] = writes
    items.append(("rpcordma.writes_count", len(writes)))
    if tree:
        items.append(("rpcordma.writes_count_tree", tree))
    reply = []
    if x.u32():
        items += [("rpcordma.reply_count", 1), ("rpcordma.reply_count_tree", [_chunk(x, reply)])]
    else:
        items.append(("rpcordma.reply_count", 0))
    info["reply"] = reply


def header(payload: bytes):
    """(tree, info, offset of the RPC message or None) of an RPC-RDMA message; info holds xid, type, credits
    and the chunk lists as tuples: reads (position, handle, length, offset), writes and reply
    [(handle, length, offset)]."""
    x, items, info = XDR(payload), [], {"reads": [], "writes": [], "reply": []}
    try:
        info["xid"], vers, info["credits"], kind = (x.u32() for _ in range(4))
        info["type"] = kind
        items += [("rpcordma.xid", info["xid"]), ("rpcordma.version", vers)]
        items += [("rpcordma.flow_control", info["credits"]), ("rpcordma.msg_type", kind)]
        if kind == RDMA_MSGP:
            items += [("rpcordma.rdma_align", x.u32()), ("rpcordma.rdma_thresh", x.u32())]
        if kind in (RDMA_MSG, RDMA_NOMSG, RDMA_MSGP):
            _lists(x, items, info)
        elif kind == RDMA_ERROR:
            code = x.u32()
            items.append(("rpcordma.errcode", code))
            if code == ERR_VERS:
                items += [("rpcordma.vers_low", x.u32()), ("rpcordma.vers_high", x.u32())]
    except Short:
        return items + [("_truncated", True)], info, None
    return items, info, x.off if info["type"] in (RDMA_MSG, RDMA_MSGP) else None


def _auth(x: XDR, items: list) -> None:
    """opaque_auth (RFC 5531 §8.2) into `items`: flavor, length, and an AUTH_UNIX body (§A) field by field
    (what a cut message holds stays in `items`)."""
    items.append(("rpc.auth.flavor", x.u32()))
    length = x.u32()
    items.append(("rpc.auth.length", length))
    if items[0][1] != AUTH_UNIX or not length:
        x.take(length + (-length & 3))
        return
    items.append(("rpc.auth.stamp", x.u32()))
    n, name, fill = x.opaque(255)
    text = name.decode("ascii", "replace")
    sub = [("rpc.opaque_length", n), ("rpc.auth.machinename", text)] + ([("rpc.fill_bytes", fill)] if fill else [])
    items.append((f"Machine Name: {text}", sub))
    items += [("rpc.auth.uid", x.u32()), ("rpc.auth.gid", x.u32())]
    gids = [x.u32() for _ in range(min(x.u32(), 16))]
    items.append((f"Auxiliary GIDs ({len(gids)}) [{', '.join(map(str, gids))}]", [("rpc.auth.gid", g) for g in gids]))


def _auths(x: XDR, items: list, *labels: str) -> None:
    for label in labels:
        items.append((label, []))
        _auth(x, items[-1][1])


def rpc(data: bytes, call=None):
    """(tree, info, offset of the procedure's arguments or results or None) of an RPC message (RFC 5531
    §9).  `call`: (program, version, procedure) of the call a reply answers, as tshark shows it (zeros when
    the call was not seen)."""
    x, items, info = XDR(data), [], {}
    try:
        info["xid"], info["msgtyp"] = x.u32(), x.u32()
        items += [("rpc.xid", info["xid"]), ("rpc.msgtyp", info["msgtyp"])]
        if info["msgtyp"] == 0:
            version, *info["call"] = (x.u32() for _ in range(4))
            items.append(("rpc.version", version))
            items += list(zip(("rpc.program", "rpc.programversion", "rpc.procedure"), info["call"]))
            _auths(x, items, "Credentials", "Verifier")
            return items, info, x.off
        if info["msgtyp"] != 1:
            return items, info, None
        items += list(zip(("rpc.program", "rpc.programversion", "rpc.procedure"), call or (0, 0, 0)))
        info["replystat"] = stat = x.u32()
        items.append(("rpc.replystat", stat))
        if stat == 0:
            _auths(x, items, "Verifier")
            info["accept"] = accept = x.u32()
            items.append(("rpc.state_accept", accept))
            if accept == 2:
                items += [("rpc.programversion.min", x.u32()), ("rpc.programversion.max", x.u32())]
            return items, info, x.off if accept == 0 else None
        reject = x.u32()
        items.append(("rpc.state_reject", reject))
        items += [("rpc.version.min", x.u32()), ("rpc.version.max", x.u32())] if reject == 0 else []
        items += [("rpc.state_auth", x.u32())] if reject == 1 else []
    except Short:
        return items + [("_truncated", True)], info, None
    return items, info, None


def _name(x: XDR) -> tuple:
    n, name, fill = x.opaque(1024)
    text = name.decode("utf-8", "replace")
    return f"Name: {text}", [("rpc.opaque_length", n), ("nfs.name", text)] + (
        [("rpc.fill_bytes", fill)] if fill else []
    )


def _nfs3_call(x: XDR, proc: int, items: list, chunk) -> None:
    """NFSv3 arguments (RFC 1813 §3.3) into `items`: the file handle every procedure but NULL starts with,
    the arguments of LOOKUP, ACCESS, READ, WRITE and COMMIT after it, then dissectors.nfs3's (a WRITE's
    data, CREATE's createhow3)."""
    if proc in (3, 8, 9, 10, 11, 12, 13, 14):  # diropargs3: directory handle and a name
        items.append(("what" if proc == 3 else "where" if proc < 12 else "object", [("dir", nfs3.fh3(x)), _name(x)]))
        nfs3.call_tail(x, proc, items, chunk)
        return
    if proc not in FH3_LABEL:
        return
    items.append((FH3_LABEL[proc], nfs3.fh3(x)))
    if proc == 4:
        check = x.u32()
        bits = [(f"nfs.access_{name}", 1) for i, name in enumerate(ACCESS) if check >> i & 1]
        items += [("nfs.access_check", check), ("nfs.access_check_tree", bits)]
    elif proc in (6, 7, 21):
        items += [("nfs.offset3", x.u64()), ("nfs.count3", x.u32())]
        if proc == 7:
            items.append(("nfs.write.stable", x.u32()))
    nfs3.call_tail(x, proc, items, chunk)


def _bitmap(x: XDR) -> list:
    """bitmap4 (RFC 7530 §3.3.7): each mask word with the attribute numbers its set bits name."""
    items = []
    for word in range(min(x.u32(), 8)):
        mask = x.u32()
        attrs = [("nfs.attr", 32 * word + bit) for bit in range(32) if mask >> bit & 1]
        items += [("nfs.attr_mask", mask), ("nfs.attr_mask_tree", [("nfs.attr_count", len(attrs))] + attrs)]
    return items


def _stateid(x: XDR) -> list:
    """stateid4 (RFC 7530 §9.1.4) with the hashes tshark adds: CRC-16 (X.25) of it, CRC-32 of `other`."""
    seqid, other = x.u32(), x.take(12)
    whole = struct.pack(">I", seqid) + other
    crc = 0xFFFF
    for b in whole:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x8408 if crc & 1 else crc >> 1
    tree = [("nfs.stateid.hash", crc ^ 0xFFFF), ("nfs.stateid.seqid", seqid), ("nfs.stateid.other", other)]
    return [("nfs.stateid", whole), ("nfs.stateid_tree", tree + [("nfs.stateid.other_hash", zlib.crc32(other))])]


def _sequence(x: XDR) -> list:
    """SEQUENCE4args (RFC 8881 §18.46): session, sequence id, slot, highest slot, cache this."""
    items = [("nfs.session_id4", x.take(16)), ("nfs.seqid", x.u32()), ("nfs.slotid", x.u32())]
    return items + [("nfs.high_slotid", x.u32()), ("nfs.cachethis4", x.u32())]


def _read4(x: XDR) -> list:
    """READ4args (RFC 7530 §16.23): stateid, offset, count."""
    return _stateid(x) + [("nfs.offset4", x.u64()), ("nfs.count4", x.u32())]


# The operations whose arguments are read (the others end the walk): PUTFH, GETATTR, READ, SEQUENCE, and
# GETFH and PUTROOTFH, which take none
OP_ARGS = {
    PUTFH: lambda x: [("FileHandle", nfs3.fh3(x))],
    9: _bitmap,
    25: _read4,
    53: _sequence,
    10: lambda x: [],
    24: lambda x: [],
}


def _nfs4_call(x: XDR) -> list:
    """COMPOUND4args (RFC 7530 §16.2): tag, minor version, the operations (OP_ARGS says which are read)."""
    n, tag, _ = x.opaque(1024)
    text = tag.decode("utf-8", "replace")
    items = [(f"Tag: {text or '<EMPTY>'}", [("rpc.opaque_length", n), ("nfs.tag", text)])]
    items.append(("nfs.minorversion", x.u32()))
    count = x.u32()
    items.append(("nfs.ops.count", count))
    ops, seen = [], []
    for _ in range(min(count, 128)):
        op = x.u32()
        seen.append(op)
        ops.append(("nfs.opcode", op))
        if op not in OP_ARGS:  # an operation whose arguments ibwire does not read ends the walk
            break
        args = OP_ARGS[op](x)
        if args:
            ops.append(("nfs.opcode_tree", args))
    main = next((op for op in seen if op not in SETUP_OPS), seen[-1] if seen else None)
    items.append(("nfs.ops.count_tree", ops))
    if main is not None:
        items.append(("nfs.main_opcode", main))
    return items


def nfs(data: bytes, off: int, call, is_call: bool, chunk=None) -> list:
    """The NFS tree of an RPC message whose arguments (a call) or results (a reply) start at `off`; `call`
    is (program, version, procedure); `chunk`: the bytes a reply's write list or a call's read list carries
    (a READ's or a WRITE's data)."""
    _, version, proc = call
    x = XDR(data, off)
    key = "nfs.procedure_v3" if version == 3 else "nfs.procedure_v4"
    items = [("rpc.programversion", version), (key, proc)]
    try:
        if not is_call and version == 3:
            nfs3.reply(x, proc, items, chunk)
        elif not is_call:
            items.append(("nfs.nfsstat4", x.u32()))
        elif version == 3:
            _nfs3_call(x, proc, items, chunk)
        elif version == 4 and proc == 1:
            items += _nfs4_call(x)
    except Short:
        items.append(("_truncated", True))
    return items


def info_text(info: dict, call, is_call: bool, main=None) -> str:
    """The Info column of an RPC-RDMA message as tshark words it: `RDMA_MSG XID 0x…`, then for NFS
    `V3 GETATTR Call` / `V4 Call GETATTR` (the COMPOUND's main operation `main`), for other programs `prog 100005 v3 proc 1 Call`."""
    text = f"{MSG_TYPES[info['type']] if info.get('type', 5) < 5 else 'Unknown'} XID 0x{info.get('xid', 0):x}"
    if call is None:
        return text
    prog, vers, proc = call
    kind = "Call" if is_call else "Reply"
    if prog == NFS_PROGRAM and vers == 3 and proc < len(NFS3_PROCS):
        return f"{text}  V3 {NFS3_PROCS[proc]} {kind}"
    if prog == NFS_PROGRAM and vers == 4:
        return f"{text}  V4 {kind}" + (f" {NFS4_OPS.get(main, main)}" if proc == 1 and main is not None else "")
    return f"{text}  prog {prog} v{vers} proc {proc} {kind}"


def leaves(items: list, out: dict = None) -> dict:
    """Every leaf of a tree by key (a key seen again: the list of its values, in order)."""
    out = {} if out is None else out
    for key, value in items:
        if isinstance(value, list):
            leaves(value, out)
        elif not key.startswith("_"):
            if key in out:
                have = out[key] if isinstance(out[key], list) else [out[key]]
                out[key] = have + [value]
            else:
                out[key] = value
    return out
