"""RPC-over-RDMA version 2 without scapy, as draft-ietf-nfsv4-rpcrdma-version-two-02 puts it on the wire:
the header prefix (§6.1: XID, version 2, credits, header type, then the flags word RESPONSE, MORE,
TPMORE), RDMA2_MSG and RDMA2_NOMSG with their chunk lists (§6.3.1: the Remote Invalidation handle, then
read list, write list and reply chunk laid out as version 1's), RDMA2_ERROR (§6.3.3), RDMA2_CONNPROP's
transport properties (§5.2, §6.3.4) and RDMA2_GRANT (§6.3.5).  Drafts -03 and later renumbered the header
types (RDMA2_CALL_INLINE …): ibwire flags those as unknown.

tshark 4.4 decodes none of this (packet-rpcrdma.c turns down every version word but 1, with -d too), so the
items only version 2 has are ibwire's own names, in Wireshark's `rpcordma.*` style (FIELDS); the items it
shares with version 1 keep version 1's names.  `header` and `looks_like` take either version."""

import struct

from dissectors import rpcrdmatable as v1
from dissectors.rpcrdmatable import XDR, Short

RDMA2_MSG, RDMA2_NOMSG, RDMA2_ERROR, RDMA2_CONNPROP, RDMA2_GRANT = 0, 1, 4, 5, 6
MSG_TYPES = {0: "RDMA2_MSG", 1: "RDMA2_NOMSG", 4: "RDMA2_ERROR", 5: "RDMA2_CONNPROP", 6: "RDMA2_GRANT"}
F_RESPONSE, F_MORE, F_TPMORE = 1, 2, 4
FLAGS = (("response", F_RESPONSE), ("more", F_MORE), ("tpmore", F_TPMORE))
# rdma_err (§6.3.3) and the words each code carries
ERRORS = {
    1: ("RDMA2_ERR_VERS", ("vers_low", "vers_high")),
    2: ("RDMA2_ERR_BAD_XDR", ()),
    3: ("RDMA2_ERR_BAD_PROPVAL", ()),
    4: ("RDMA2_ERR_INVAL_HTYPE", ()),
    5: ("RDMA2_ERR_INVAL_CONT", ()),
    6: ("RDMA2_ERR_READ_CHUNKS", ("max_chunks",)),
    7: ("RDMA2_ERR_WRITE_CHUNKS", ("max_chunks",)),
    8: ("RDMA2_ERR_SEGMENTS", ("max_segments",)),
    9: ("RDMA2_ERR_WRITE_RESOURCE", ("chunk_index", "length_needed")),
    10: ("RDMA2_ERR_REPLY_RESOURCE", ("length_needed",)),
    100: ("RDMA2_ERR_SYSTEM", ()),
}
# Transport properties (§5.2): those whose value is one uint32; HOSTAUTH (6) and unknown ones are opaque
PROPERTIES = {1: "SBSIZ", 2: "RBSIZ", 3: "RSSIZ", 4: "RCSIZ", 5: "BRS", 6: "HOSTAUTH"}
UINT_PROPERTIES = (1, 2, 3, 4, 5)

FIELDS = {
    **{f"rpcordma.{n}": "uint" for n in "flags inv_handle prop_count prop_id prop_length prop_value".split()},
    **{f"rpcordma.{n}": "uint" for n in "max_chunks max_segments chunk_index length_needed".split()},
    **{f"rpcordma.flags.{n}": "uint" for n, _ in FLAGS},  # booleans, as smb_direct.flags.* are
    "rpcordma.prop_data": "bytes",
}
DISPLAY = {"rpcordma.flags": 8, "rpcordma.inv_handle": 8, "rpcordma.prop_data": -1}


def _flags(value: int) -> list:
    bits = [(f"rpcordma.flags.{name}", bool(value & bit)) for name, bit in FLAGS]
    return [("rpcordma.flags", value), ("rpcordma.flags_tree", bits)]


def _props(x: XDR, items: list) -> None:
    """rpcrdma2_propset (§5.2): each property's id, length and value (a uint32, or opaque bytes)."""
    count = x.u32()
    items.append(("rpcordma.prop_count", count))
    for _ in range(min(count, 64)):
        which = x.u32()
        n, data, _ = x.opaque()
        sub = [("rpcordma.prop_id", which), ("rpcordma.prop_length", n)]
        if which in UINT_PROPERTIES and n == 4:
            sub.append(("rpcordma.prop_value", struct.unpack(">I", data)[0]))
        elif n:
            sub.append(("rpcordma.prop_data", data))
        items.append((f"Property: {PROPERTIES.get(which, f'unknown ({which})')}", sub))


def _error(x: XDR, items: list) -> None:
    code = x.u32()
    items.append(("rpcordma.errcode", code))
    items += [(f"rpcordma.{word}", x.u32()) for word in ERRORS.get(code, ("", ()))[1]]


def header2(payload: bytes):
    """(tree, info, offset of the RPC message or None) of a version 2 message, as rpcrdmatable.header
    gives them; info also holds the flags.  A header type the draft does not define ends the tree with
    ("_unknown", type)."""
    x, items, info = XDR(payload), [], {"reads": [], "writes": [], "reply": [], "version": 2}
    try:
        info["xid"], vers, info["credits"], kind, info["flags"] = (x.u32() for _ in range(5))
        info["type"] = kind
        items += [("rpcordma.xid", info["xid"]), ("rpcordma.version", vers)]
        items += [("rpcordma.flow_control", info["credits"]), ("rpcordma.msg_type", kind)] + _flags(info["flags"])
        if kind in (RDMA2_MSG, RDMA2_NOMSG):
            items.append(("rpcordma.inv_handle", x.u32()))
            v1._lists(x, items, info)
        elif kind == RDMA2_ERROR:
            _error(x, items)
        elif kind == RDMA2_CONNPROP:
            _props(x, items)
        elif kind != RDMA2_GRANT:
            return items + [("_unknown", kind)], info, None
    except Short:
        return items + [("_truncated", True)], info, None
    return items, info, x.off if kind == RDMA2_MSG else None


def unknown_version(payload: bytes):
    """The four words every version shares (§6.1's rpcrdma_common) of a message whose version ibwire does
    not know, its tree ending with ("_unknown", version)."""
    xid, vers, credits, kind = struct.unpack(">IIII", payload[:16])
    items = [("rpcordma.xid", xid), ("rpcordma.version", vers), ("rpcordma.flow_control", credits)]
    items += [("rpcordma.msg_type", kind), ("_unknown", vers)]
    return items, {"reads": [], "writes": [], "reply": [], "xid": xid, "type": kind, "version": vers}, None


def header(payload: bytes):
    """rpcrdmatable.header for version 1, header2 for version 2, unknown_version otherwise (16 bytes or
    more)."""
    vers = struct.unpack(">I", payload[4:8])[0] if len(payload) >= 8 else 1
    if vers == 1:
        return v1.header(payload)
    return header2(payload) if vers == 2 else unknown_version(payload)


def _fits(payload: bytes) -> bool:
    """Whether a version 2 message is what its header type says, to its last byte (an RDMA2_MSG: its chunk
    lists, then an RPC message of the header's XID whose direction is the RESPONSE flag's)."""
    xid, _, _, kind, flags = struct.unpack(">IIIII", payload[:20])
    if flags & ~(F_RESPONSE | F_MORE | F_TPMORE):
        return False
    if kind == RDMA2_GRANT:
        return len(payload) == 20
    x = XDR(payload, 20)
    try:
        if kind == RDMA2_MSG:
            end = v1._lists_end(payload, 24)
            return end is not None and payload[end : end + 8] == struct.pack(">II", xid, flags & F_RESPONSE)
        if kind == RDMA2_NOMSG:
            return v1._lists_end(payload, 24) == len(payload)
        if kind == RDMA2_ERROR:
            _error(x, [])
        elif kind == RDMA2_CONNPROP:
            _props(x, [])
        else:
            return False
    except Short:
        return False
    return x.off == len(payload)


def looks_like(payload: bytes) -> bool:
    """Wireshark's heuristic for version 1 (rpcrdmatable.looks_like); for version 2, ibwire's own, as strict:
    a header type of draft -02 and a message that is exactly what that type says (_fits)."""
    if len(payload) >= 20 and payload[4:8] == b"\0\0\0\2":
        return _fits(payload)
    return v1.looks_like(payload)


def info_text(info: dict, call, is_call: bool, main=None) -> str:
    """rpcrdmatable.info_text, with version 2's header type names (`RDMA2_MSG XID 0x…  V3 GETATTR Call`);
    a version ibwire does not know: `RPC-RDMA version 3 XID 0x…`."""
    text = v1.info_text(info, call, is_call, main)
    vers = info.get("version", 1)
    if vers == 1:
        return text
    kind = info.get("type")
    name = MSG_TYPES.get(kind, f"Unknown ({kind})") if vers == 2 else f"RPC-RDMA version {vers}"
    return name + text[text.index(" XID") :]


def note(tree) -> str:
    """What a tree says ibwire could not decode (the header type or version it ends on), or ''."""
    unknown = dict(tree).get("_unknown")
    if unknown is None:
        return ""
    version = dict(tree).get("rpcordma.version")
    if version == 2:
        return f"[RPC-RDMA version 2 header type {unknown} unknown (draft -02 defines 0, 1, 4, 5, 6): not decoded]"
    return f"[RPC-RDMA version {unknown} unknown: only the XID, version, credits and type words decoded]"
