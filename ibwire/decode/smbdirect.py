"""SMB Direct across frames: which RC SENDs carry it (Wireshark 4.4's heuristic on every RC SEND,
packet-smb-direct.c, the one way tshark 4.4 finds it; queue pairs an RDMA-CM REQ connects for port 445 or
5445, MS-SMBD §2.1, are named too), SEND First/Middle/Last reassembled per QP, fragmented messages
(RemainingDataLength, MS-SMBD §3.1.5.2) reassembled per receiving QP, each SMB2 response matched to its
request by message id (MS-SMB2 §3.2.5.1), and the RDMA WRITEs and READs that use a READ or WRITE
request's buffer descriptors (MS-SMBD §3.1.4.3, §3.1.4.4) counted.

Feed every Decoded in capture order; SMB Direct frames get the smb_direct/smb2 layers and fields.  In bulk
mode (ibwire.analyze.storage) only requests are followed: no layer is built, scapy is never loaded."""

from functools import reduce
from operator import truediv
from typing import Dict, List

import numpy as np

from dissectors import smb2table as s2
from dissectors import smbdirecttable as sd
from ibwire.decode.rcdata import rc_data
from ibwire.decode.rpcrdma import MAX_SEND, RpcRdmaTracker, _addr, flat_op, send_heads

SUBTREES = [k for k, kind in sd.FIELDS.items() if kind == "protocol"]  # the message kinds, filterable
CLAIMED = ("nvme", "rpcordma", "iser")  # a SEND these decoded is not SMB Direct
PENDING = 0x00000103  # STATUS_PENDING: an interim response, the final one follows (MS-SMB2 §3.3.4.2)


class Request:
    """An SMB2 request: its frame, command, buffer descriptors, response and the bytes moved."""

    __slots__ = ("frame", "time", "mid", "command", "tokens", "reply", "reply_time", "status", "bytes", "data")
    __slots__ += ("client", "server")

    def __init__(self, frame, time, info, client, server):
        self.frame, self.time, self.mid, self.command = frame, time, info["mid"], info["command"]
        self.tokens = {t for _, t, _ in info["descriptors"]}
        self.client, self.server = client, server
        self.reply, self.reply_time, self.status, self.data = None, None, None, []
        self.bytes = info.get("inline", 0)


class SmbDirectTracker(RpcRdmaTracker):
    """decode_as: `-d infiniband,smb_direct` was given (tshark 4.4 then decodes what its heuristic does, and
    so does ibwire).  Feeding, journalling and RDMA-CM are RpcRdmaTracker's."""

    FED, PROTOCOL = "_smbdirect.fed", "SMB Direct"
    service = staticmethod(sd.is_smb_service)

    def __init__(self, decode_as: bool = False, bulk: bool = False):
        super().__init__(decode_as, bulk)
        self.seen = False  # the heuristic decides either way
        self.frags: Dict[tuple, tuple] = {}  # (address, QPN) -> (bytes, frames) of a fragmented message
        self.requests: List[Request] = []
        self.pending: Dict[tuple, Request] = {}  # (client, server, message id) -> request awaiting its response
        self.tokens: Dict[int, Request] = {}  # buffer descriptor token (R_Key) -> request
        self.reads: Dict[int, Request] = {}  # PSN of an RDMA READ request using a token -> request
        self.moving: Dict[tuple, Request] = {}  # (address, QPN) receiving a request's data -> request

    @staticmethod
    def replay(d, record) -> None:
        _apply(d, *record)

    def _send(self, d, entry) -> None:
        flat, op = d.flat, flat_op(d.flat)
        if any(k.startswith(CLAIMED) for k in flat):
            return  # another protocol's queue pair holds it (tshark tries heuristics after conversations)
        key = (_addr(flat, "dst"), flat["bth.destqp"])
        payload = flat["_payload"] if "_payload" in flat else bytes.fromhex(flat.get("payload.data", ""))
        if op == "First":
            self.sends[key] = (bytearray(), [])
        if op != "Only" and key in self.sends and len(self.sends[key][0]) + len(payload) <= MAX_SEND:
            self.sends[key][0].extend(payload)
            self.sends[key][1].append(d.frame.number)
        if op == "First" and sd.kind(payload) == sd.DATA:  # its header, as tshark shows it there
            self.seen = True  # the Middle and Last packets must be fed too
            tree, info = sd.message(payload, sd.DATA)
            self._record(d, entry, ([("SMBDirect", payload[:24], tree)], payload[24:], [sd.INFO[sd.DATA]], {}))
        if op in ("First", "Middle"):
            return
        whole = bytes(self.sends.pop(key)[0]) if op == "Last" and key in self.sends else payload
        which = sd.kind(whole)
        if which is None:
            return
        self.seen = True
        self._record(d, entry, self._message(d, key, whole, which))

    def _message(self, d, key, data: bytes, which: int):
        """(layers, bytes after them, notes, extra fields) of one SMB Direct message; fragments are
        gathered per receiving QP until the last, then the SMB2 message they make is decoded."""
        tree, info = sd.message(data, which)
        layers, cut = [("SMBDirect", data[:24], tree)], _cut(tree[0][1])
        payload = info["data"]
        if which != sd.DATA or payload is None:
            return layers, b"", [sd.info_text(which, info)], _malformed(cut)
        if info["remaining"] or key in self.frags:
            held, frames = self.frags.setdefault(key, (bytearray(), []))
            if len(held) + len(payload) <= MAX_SEND:
                held.extend(payload)
                frames.append(d.frame.number)
            if info["remaining"]:
                return layers, b"", [sd.info_text(which, info)], _malformed(cut)
            del self.frags[key]
            payload = bytes(held)
            if len(frames) > 1:
                items = [("smb_direct.fragment", n) for n in frames] + [("smb_direct.fragment.count", len(frames))]
                items += [("smb_direct.reassembled.length", len(payload))]
                layers.append(("Fragments", b"", items + [("smb_direct.reassembled.data", payload)]))
        if payload[:4] != b"\xfeSMB":
            return layers, payload, [sd.info_text(which, info)], _malformed(cut)
        texts, carried = [], b""
        for part in s2.chain(payload):  # a compound: each message in turn, as tshark shows them
            stree, sinfo, carried = s2.message(part)
            if sinfo:
                self._follow(d, sinfo, stree, carried)
            layers.append(("SMB2", part[: len(part) - len(carried)], stree))
            texts.append(s2.info_text(sinfo, stree))
            cut = cut or _cut(stree)
        return layers, carried, [";".join(texts)], _malformed(cut)

    def _follow(self, d, info, tree, carried: bytes) -> None:
        """Requests noted (their descriptors' tokens), responses matched by message id: the fields
        Wireshark links them with."""
        src, dst = _addr(d.flat, "src"), _addr(d.flat, "dst")
        if not info["response"]:
            info["inline"] = len(carried)
            req = Request(d.frame.number, d.frame.time, info, src, dst)
            self.requests.append(req)
            self.pending[(src, dst, info["mid"])] = req
            self.tokens.update(dict.fromkeys(req.tokens, req))
            return
        req = self.pending.get((dst, src, info["mid"]))
        if req is None:
            return
        tree[0][1].append(("smb2.response_to", req.frame))
        tree[0][1].append(("smb2.time", round(d.frame.time - req.time, 6)))
        if info["status"] == PENDING:
            return
        req.reply, req.reply_time, req.status = d.frame.number, d.frame.time, info["status"]
        req.bytes += len(carried)
        del self.pending[(dst, src, info["mid"])]
        for t in req.tokens:
            self.tokens.pop(t, None)

    def _data(self, d, entry) -> None:
        """RDMA WRITE and READ packets using a request's buffer descriptor: the first names its token
        (RETH R_Key), the others follow on their queue pair."""
        flat, op = d.flat, d.flat.get("bth.opname", "")
        key = (_addr(flat, "dst"), flat["bth.destqp"])
        if op == "RDMA READ Request":
            req = self.tokens.get(flat.get("reth.r_key"))
            if req is not None:
                self.reads[flat["bth.psn"]] = req
            return
        if op.startswith("RDMA WRITE") and ("First" in op or "Only" in op):
            self.moving[key] = self.tokens.get(flat.get("reth.r_key"))
        elif op.startswith("RDMA READ Response") and ("First" in op or "Only" in op):
            self.moving[key] = self.reads.pop(flat["bth.psn"], None)
        req = self.moving.get(key) if op.startswith("RDMA") else None
        if req is None:
            return
        req.bytes += flat.get("payload.length", 0)
        req.data.append(d.frame.number)
        notes = [f"[SMB Direct data of the request in frame {req.frame}]"]
        self._record(d, entry, ([], b"", notes, {"smb2.data_request": req.frame}))


def _cut(tree) -> bool:
    return any(k == "_truncated" for k, _ in tree)


def _malformed(cut: bool) -> dict:
    return {"_ws.malformed": True} if cut else {}


def _apply(d, layers, rest: bytes, notes: list, extra: dict) -> None:
    """What the tracker found of a frame: layers (replacing its payload), fields, summary notes."""
    if layers:
        _attach(d, layers, rest)
    d.flat.update(extra)
    d.notes.extend(notes + (["[Malformed Packet: SMB Direct]"] if "_ws.malformed" in extra else []))
    if "_ws.malformed" in extra:
        d.errors.append("malformed: SMB Direct message cut short")


def _attach(d, layers, rest: bytes) -> None:
    """Put the layers (instead of the payload bytes) in d's packet, their fields in d's maps."""
    from scapy.packet import Raw

    from dissectors import smbdirect
    from ibwire.decode.fields import layer_fields, nest_and_flatten
    from ibwire.decode.frame import upper_protocols

    parts = [smbdirect.made(getattr(smbdirect, cls), data, tree) for cls, data, tree in layers]
    chain = reduce(truediv, parts + ([Raw(rest)] if rest else []))
    raw = d.packet.getlayer(Raw) if d.packet is not None else None
    under = raw.underlayer if raw is not None else None
    if under is not None:  # the layers take the payload's place, before what followed it (padding, ICRC)
        tail = raw.payload
        under.remove_payload()
        under.add_payload(chain / tail if tail else chain)
    entries = layer_fields(chain)
    nested, flat = nest_and_flatten(entries)
    names = [key for key, _, _ in entries if key in ("smb_direct", "smb2")]
    upper_protocols(d.flat, names + (["data"] if rest else []))
    crcs = {k: d.layers.pop(k) for k in list(d.layers) if k in ("pad", "icrc", "vcrc")}
    d.layers.update({k: v for k, v in nested.items() if k in ("smb_direct", "smb2")})
    d.layers.update(crcs)
    d.flat.update({k: v for k, v in flat.items() if k.split(".")[0] in ("smb_direct", "smb2")})
    d.flat.update(dict.fromkeys((k for _, _, tree in layers for k, _ in tree if k in SUBTREES), True))
    for key in ("payload", "payload.data", "payload.length"):
        d.flat.pop(key, None)
    d.layers.pop("payload", None)


def storage_rows(batch, rows, tracker) -> list:
    """Which of `rows` the SMB Direct tracker must see in full, in capture order: none until an RC SEND
    whose first words could pass Wireshark's heuristic (or RDMA-CM for port 445) was seen, then every RC
    SEND, RDMA READ and WRITE."""
    tracker = getattr(tracker, "smbdirect", None)
    if tracker is None:
        return []
    rc = rc_data(batch.rec, rows)
    if not tracker.seen and not may_be_smbdirect(send_heads(batch, rows, rc, sd.DATA_HEAD, 8)).any():
        return []
    return [np.flatnonzero(rc)]


def may_be_smbdirect(raw: np.ndarray) -> np.ndarray:
    """Which SEND heads (send_heads, 8 bytes each) could pass Wireshark's heuristic: a data message's credit
    and flag words or a negotiate message's versions."""
    w = np.ascontiguousarray(raw).view("<u2")  # four little-endian words
    data = (w[:, 0] <= sd.MAX_CREDITS) & (w[:, 1] <= sd.MAX_CREDITS) & (w[:, 2] <= 1) & (w[:, 3] == 0)
    version = (w[:, 0] == sd.VERSION) & (w[:, 1] == sd.VERSION)
    return data | version & ((w[:, 2] == 0) | (w[:, 2] == sd.VERSION))
