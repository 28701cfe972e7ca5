"""NFS over RDMA across frames: which RC SENDs carry RPC-RDMA (Wireshark 4.4's heuristic on every RC
SEND, packet-rpcrdma.c, and ibwire's as strict one for version 2, dissectors.rpcrdmav2; queue pairs
connected by an RDMA-CM REQ for port 20049, RFC 8267 §6; or every queue pair with `decode -d rpcordma`),
SEND First/Middle/Last reassembled per QP, a version 2 RPC message continued over RDMA2_F_MORE messages
joined, each reply matched to its call by XID (RFC 5531 §9), and the RDMA READs and WRITEs that move a
call's chunks (RFC 8166 §3.4) counted.

Feed every Decoded in capture order; frames of NFS over RDMA get the rpcordma/rpc/nfs layers and fields.
In bulk mode (ibwire.analyze.storage) only calls are followed: no layer is built, scapy is never loaded."""

from typing import Dict, List

import numpy as np

from dissectors.rpcrdmatable import NFS_PROGRAM, RDMA_NOMSG, is_nfs_service, nfs, rpc
from dissectors.rpcrdmav2 import F_MORE, header, info_text, looks_like, note
from ibwire.decode import records as R
from ibwire.decode.rcdata import rc_data

MAX_SEND = 1 << 20  # a reassembled SEND larger than this is dropped (inline messages are a few KiB)
JOURNAL = 1 << 16  # frames whose additions are kept for a second feed
# RC SEND First, Middle, Last, Only and Last/Only with Invalidate: those packet-rpcrdma.c reads (not the
# ones with immediate data)
RC_SEND = (0x00, 0x01, 0x02, 0x04, 0x16, 0x17)


class Call:
    """An RPC call seen in an RPC-RDMA message: its frame, procedure, chunks, reply and the bytes moved."""

    __slots__ = ("frame", "time", "xid", "prog", "vers", "proc", "handles", "reply", "reply_time", "bytes")
    __slots__ += ("data", "status", "client", "deferred", "read_total", "main", "server", "reply_chunk")
    __slots__ += ("shown", "shown_time")

    def __init__(self, frame, time, xid, call, handles, client):
        self.frame, self.time, self.xid, self.client = frame, time, xid, client
        self.shown, self.shown_time = frame, time  # the frame showing the RPC message (a read list's: where
        # its chunk completes it), which a reply's rpc.repframe and rpc.time refer to as tshark's do
        self.prog, self.vers, self.proc = call
        self.handles, self.reply, self.reply_time, self.status = handles, None, None, None
        self.bytes, self.data = 0, []
        self.deferred, self.read_total = None, 0  # a call with a read list: shown where its data arrived
        self.main, self.server = None, None  # a COMPOUND's main operation; the address called
        self.reply_chunk = (set(), bytearray())  # its reply chunk's handles, and what RDMA WRITEs put there


def _addr(flat, side):
    return flat.get(f"ip.{side}") or flat.get(f"ipv6.{side}") or flat.get(f"grh.{'sgid' if side == 'src' else 'dgid'}")


class RpcRdmaTracker:
    """decode_as: every RC SEND is RPC-RDMA (Wireshark's `-d` without the heuristic's XID check; a version
    but 1 and 2 is flagged unknown)."""

    FED, PROTOCOL = "_rpcrdma.fed", "RPC-RDMA"  # the mark of a frame fed once; the name its errors give
    service = staticmethod(is_nfs_service)  # is an RDMA-CM service ID the protocol's

    def __init__(self, decode_as: bool = False, bulk: bool = False):
        self.decode_as, self.bulk = decode_as, bulk
        self.ends = set()  # (address, QPN) of queue pairs RDMA-CM connected for NFS over RDMA
        self.reqs: Dict[int, tuple] = {}
        self.sends: Dict[tuple, tuple] = {}  # (address, QPN) -> (bytes, frames) of a SEND under way
        self.calls: List[Call] = []
        self.pending: Dict[tuple, Call] = {}  # (client, server, xid) -> call awaiting its reply
        self.handles: Dict[int, Call] = {}  # chunk segment handle (R_Key) -> call
        self.reads: Dict[int, Call] = {}  # PSN of an RDMA READ request for a read chunk -> call
        self.moving: Dict[tuple, tuple] = {}  # (address, QPN) receiving chunk data -> (call, into its reply chunk)
        self.continued: Dict[tuple, bytearray] = {}  # (from, to, xid) -> RPC bytes of RDMA2_F_MORE messages
        self.seen = decode_as
        self.journal: Dict[int, list] = {}

    def feed(self, d) -> None:
        """Add the layers to `d`; a frame fed again gets what its first feed found."""
        if self.bulk:
            return self._feed(d, [])
        if d.flat.get(self.FED):
            return
        d.flat[self.FED] = True
        n = d.frame.number
        if n not in self.journal:
            entry = self.journal[n] = []
            if len(self.journal) > JOURNAL:
                del self.journal[next(iter(self.journal))]
            self._feed(d, entry)
            return
        for record in self.journal[n]:
            self.replay(d, record)

    def _feed(self, d, entry) -> None:
        flat = d.flat
        try:
            if "cm.req" in flat or "cm.rep" in flat:
                self._cm(flat)
            elif flat.get("bth.transport") == "RC" and flat.get("bth.opcode", 255) in RC_SEND:
                self._send(d, entry)
            elif flat.get("bth.transport") == "RC" and self.seen:
                self._data(d, entry)
        except Exception as e:  # never let a damaged message stop the decode
            d.errors.append(f"malformed: {self.PROTOCOL} ({type(e).__name__})")

    def _cm(self, flat) -> None:
        if "cm.req.serviceid" in flat and self.service(flat["cm.req.serviceid"]):
            host = flat.get("cm.req.ip_cm.sip4") or flat.get("cm.req.ip_cm.sip6") or _addr(flat, "src")
            self.reqs[flat["cm.req"]] = (host, flat["cm.req.localqpn"])
        elif flat.get("cm.rep.remotecommid") in self.reqs:
            self.ends.add(self.reqs.pop(flat["cm.rep.remotecommid"]))
            self.ends.add((_addr(flat, "src"), flat["cm.rep.localqpn"]))
            self.seen = True

    def _send(self, d, entry) -> None:
        flat, op = d.flat, flat_op(d.flat)
        key = (_addr(flat, "dst"), flat["bth.destqp"])
        payload = flat["_payload"] if "_payload" in flat else bytes.fromhex(flat.get("payload.data", ""))
        if op == "First" and payload[4:8] in (b"\0\0\0\1", b"\0\0\0\2"):
            self.seen = True  # the Middle and Last packets must be fed too
        if op == "First":
            self.sends[key] = (bytearray(), [])
        if op != "Only" and key in self.sends and len(self.sends[key][0]) + len(payload) <= MAX_SEND:
            self.sends[key][0].extend(payload)
            self.sends[key][1].append(d.frame.number)
        if op in ("First", "Middle"):
            return
        whole, frames = self.sends.pop(key) if op == "Last" and key in self.sends else (payload, [])
        whole = bytes(whole)
        declared = self.decode_as or key in self.ends
        continues = (_addr(flat, "src"), key[0], int.from_bytes(whole[:4], "big")) in self.continued
        if not (looks_like(whole) or (declared or continues) and len(whole) >= 16):
            return
        self.seen = True
        layers, rest, notes, cut = self._message(d, whole)
        if len(frames) > 1:  # as tshark shows a reassembled SEND (packet-rpcrdma.c's fragment items)
            tree = [("rpcordma.fragment", n) for n in frames] + [("rpcordma.fragment.count", len(frames))]
            tree += [("rpcordma.reassembled.length", len(whole)), ("rpcordma.reassembled.data", whole)]
            layers.insert(0, ("Fragments", b"", tree))
        if cut:
            notes.append("[Malformed Packet: RPC]")
        self._record(d, entry, (layers, rest, notes, {"_ws.malformed": True} if cut else {}))

    def _record(self, d, entry, record) -> None:
        if not self.bulk:
            entry.append(record)
            self.replay(d, record)

    @staticmethod
    def replay(d, record) -> None:
        """What a feed found of a frame, applied to it (again when it is fed again)."""
        _apply(d, *record)

    def _message(self, d, data: bytes):
        """([(layer class, bytes, tree)], bytes after them, notes) of one RPC-RDMA message; calls and
        replies are followed."""
        from_, to = _addr(d.flat, "src"), _addr(d.flat, "dst")
        tree, info, body = header(data)
        layers = [("RPCoRDMA", data[: body or len(data)], tree)]
        handles = [s[1] for s in info["reads"]] + [s[0] for c in info["writes"] for s in c]
        handles += [s[0] for s in info["reply"]]
        call = self.pending.get((to, from_, info.get("xid")))
        msg = data[body:] if body is not None else None
        notes = [note(tree)] if note(tree) else []
        if msg is not None and info.get("version") == 2:  # an RPC message over RDMA2_F_MORE messages (§6.2.2)
            key = (from_, to, info["xid"])
            if info["flags"] & F_MORE:
                part = self.continued.setdefault(key, bytearray())
                part.extend(msg[: MAX_SEND - len(part)])
                notes.append("[RPC message continued in the next RDMA2_F_MORE message]")
                return layers, msg, [info_text(info, None, False)] + notes, _cut(tree)
            if key in self.continued:
                msg = bytes(self.continued.pop(key)) + msg
                notes.append(f"[RPC message of {len(msg)} bytes joined from RDMA2_F_MORE messages]")
        if info.get("type") == RDMA_NOMSG and call is not None:  # the reply is in the reply chunk (§3.5.3)
            msg = bytes(call.reply_chunk[1]) or None
            if msg is None:
                self._replied(d, call, None)
        if msg is None:
            return layers, b"", [info_text(info, None, False)] + notes, _cut(tree)
        rtree, rinfo, args = rpc(msg, (call.prog, call.vers, call.proc) if call else None)
        layers.append(("ONCRPC", msg[: args or len(msg)], rtree))
        if rinfo.get("msgtyp") == 0 and "call" in rinfo:
            call = Call(d.frame.number, d.frame.time, rinfo["xid"], tuple(rinfo["call"]), handles, from_)
            call.server = to
            call.reply_chunk[0].update(s[0] for s in info["reply"])
            self.calls.append(call)
            self.pending[(from_, to, rinfo["xid"])] = call
            self.handles.update(dict.fromkeys(handles, call))
            if info["reads"]:  # as tshark: the RPC message is shown where its read chunk completes it
                call.read_total = sum(s[2] for s in info["reads"])
                call.deferred = layers[1:] + self._nfs(msg, args, call, True, call.read_total)[0]
                return layers[:1], msg, [info_text(info, None, False)], _cut(rtree)
        elif call is not None and rinfo.get("msgtyp") == 1:
            self._replied(d, call, rinfo)
            rtree += [("rpc.repframe", call.shown), ("rpc.time", round(d.frame.time - call.shown_time, 6))]
        else:
            return layers, b"", [info_text(info, None, False)], _cut(rtree)
        is_call = rinfo["msgtyp"] == 0
        chunk = None if is_call or not info["writes"] else sum(s[1] for s in info["writes"][0])
        more, ntree = self._nfs(msg, args, call, is_call, chunk)
        main = next((v for k, v in ntree if k == "nfs.main_opcode"), None)
        call.main = main if is_call else call.main
        notes = [info_text(info, (call.prog, call.vers, call.proc), is_call, main)] + notes
        return layers + more, b"", notes, _cut(rtree + ntree)

    @staticmethod
    def _nfs(msg: bytes, args, call, is_call: bool, chunk=None):
        """([the NFS layer] or [], its tree) of an RPC message of `call` whose arguments start at `args`
        (`chunk`: the bytes of a reply's write chunk or of a call's read list)."""
        if call.prog != NFS_PROGRAM or args is None or call.vers not in (3, 4):
            return [], []
        ntree = nfs(msg, args, (call.prog, call.vers, call.proc), is_call, chunk)
        return [("NFS", msg[args:], ntree)], ntree

    def _replied(self, d, call, rinfo) -> None:
        call.reply, call.reply_time = d.frame.number, d.frame.time
        call.status = 0 if rinfo is None else rinfo.get("accept", 0) if rinfo.get("replystat") == 0 else -1
        self.pending.pop((call.client, _addr(d.flat, "src"), call.xid), None)
        for h in call.handles:
            self.handles.pop(h, None)

    def _data(self, d, entry) -> None:
        """RDMA WRITE and READ packets moving a call's chunks: the first names the chunk's handle (RETH
        R_Key), the others follow on their queue pair."""
        flat, op = d.flat, d.flat.get("bth.opname", "")
        key = (_addr(flat, "dst"), flat["bth.destqp"])
        if op == "RDMA READ Request":
            call = self.handles.get(flat.get("reth.r_key"))
            if call is not None:
                self.reads[flat["bth.psn"]] = call
            return
        if op.startswith("RDMA WRITE") and ("First" in op or "Only" in op):
            call = self.handles.get(flat.get("reth.r_key"))
            self.moving[key] = (call, call is not None and flat.get("reth.r_key") in call.reply_chunk[0])
        elif op.startswith("RDMA READ Response") and ("First" in op or "Only" in op):
            self.moving[key] = (self.reads.pop(flat["bth.psn"], None), False)
        call, reply = self.moving.get(key, (None, False)) if op.startswith("RDMA") else (None, False)
        if call is None:
            return
        if reply and not self.bulk and len(call.reply_chunk[1]) < MAX_SEND:
            call.reply_chunk[1].extend(bytes.fromhex(flat.get("payload.data", "")))
        call.bytes += flat.get("payload.length", 0)
        call.data.append(d.frame.number)
        notes = [f"[RPC-RDMA chunk data of the call in frame {call.frame}]"]
        layers = []
        if call.deferred and call.bytes >= call.read_total and ("Last" in op or "Only" in op):
            layers, call.deferred = call.deferred, None
            call.shown, call.shown_time = d.frame.number, d.frame.time
            notes.append(f"[the RPC call of frame {call.frame}, its read chunk complete]")
        self._record(d, entry, (layers, b"", notes, {"rpcordma.chunk_call": call.frame}))


def _cut(tree) -> bool:
    return any(k == "_truncated" for k, _ in tree)


def flat_op(flat) -> str:
    """First, Middle, Last or Only of a SEND."""
    name = flat.get("bth.opname", "")
    return next((w for w in ("First", "Middle", "Last") if w in name), "Only")


def _apply(d, layers, rest: bytes, notes: list, extra: dict) -> None:
    """What the tracker found of a frame: layers (replacing its payload), fields, summary notes."""
    if layers:
        _attach(d, layers, rest)
    d.flat.update(extra)
    d.notes.extend(notes)
    if "_ws.malformed" in extra:
        d.errors.append("malformed: RPC message cut short")


def splice(d, chain) -> None:
    """Put the layers `chain` where d's packet holds its payload bytes (a Raw layer)."""
    from scapy.packet import Raw

    raw = d.packet.getlayer(Raw) if d.packet is not None else None
    if raw is not None and raw.underlayer is not None:
        under, tail = raw.underlayer, raw.payload
        under.remove_payload()
        under.add_payload(chain if not tail else chain / tail)


def _attach(d, layers, rest: bytes) -> None:
    """Put the layers (instead of the payload bytes) in d's packet, their fields in d's maps."""
    from scapy.packet import Raw

    from dissectors import rpcrdma
    from ibwire.decode.fields import layer_fields, nest_and_flatten
    from ibwire.decode.frame import upper_protocols

    chain = None
    for cls, data, tree in layers:
        layer = rpcrdma.made(getattr(rpcrdma, cls), data, tree)
        chain = layer if chain is None else chain / layer
    if rest:
        chain = chain / Raw(rest)
    splice(d, chain)
    entries = layer_fields(chain)
    nested, flat = nest_and_flatten(entries)
    names = [key for key, _, _ in entries if key in ("rpcordma", "rpc", "nfs")]
    upper_protocols(d.flat, names + (["data"] if rest else []))
    crcs = {k: d.layers.pop(k) for k in list(d.layers) if k in ("pad", "icrc", "vcrc")}
    d.layers.update({k: v for k, v in nested.items() if k in ("rpcordma", "rpc", "nfs")})
    d.layers.update(crcs)
    d.flat.update({k: v for k, v in flat.items() if k.split(".")[0] in ("rpcordma", "rpc", "nfs")})
    for key in ("payload", "payload.data", "payload.length"):
        d.flat.pop(key, None)
    d.layers.pop("payload", None)


def send_heads(batch, rows: np.ndarray, rc: np.ndarray, least: int, n: int) -> np.ndarray:
    """The first `n` payload bytes of each whole RC SEND (of RC_SEND) among `rows` (`rc`: their RC data mask)
    carrying at least `least` bytes: what the heuristics read.  A payload starts paylen bytes before its end
    (ICRC, VCRC on IB, pad)."""
    rec = batch.rec
    send = rows[rc & np.isin(rec["opcode"][rows], RC_SEND)]
    send = send[(rec["paylen"][send] >= least) & ((rec["flags"][send] & R.F_TRUNCATED) == 0)]
    end = np.asarray(batch.pos.data)[send] + rec["caplen"][send] - 4 - rec["padcnt"][send]
    end -= np.where(np.isin(rec["link"][send], (R.IB, R.IBGRH)), 2, 0)
    return np.asarray(batch.buf)[(end - rec["paylen"][send]).astype(np.int64)[:, None] + np.arange(n)]


def storage_rows(batch, rows, tracker) -> list:
    """Which of `rows` the tracker must see in full, in capture order: none until an RC SEND whose version
    word is 1 or 2 (what the heuristics can accept) or NFS over RDMA was seen, then every RC SEND, RDMA
    READ and WRITE."""
    tracker = getattr(tracker, "rpcrdma", None)
    if tracker is None:
        return []
    rc = rc_data(batch.rec, rows)
    if not tracker.seen and not may_be_rpcrdma(send_heads(batch, rows, rc, 16, 8)).any():
        return []
    return [np.flatnonzero(rc)]


def may_be_rpcrdma(heads: np.ndarray) -> np.ndarray:
    """Which SEND heads (send_heads, 8 bytes each) hold version word 1 or 2 in bytes 4-7 (rdma_vers, RFC 8166
    §4.2; the same word in version 2, draft §6.1), what the heuristics can accept."""
    version = np.ascontiguousarray(heads).view(">u4")[:, 1]
    return (version == 1) | (version == 2)


class Trackers:
    """The NVMe-oF, NFS-over-RDMA and SMB Direct trackers fed as one (what `decode` hands its printer and
    filter)."""

    def __init__(self, nvme, rpcrdma, smbdirect=None, iser=None):
        self.nvme, self.rpcrdma, self.smbdirect = nvme, rpcrdma, smbdirect
        self.iser = iser  # ibwire.decode.iser.IserTracker

    @property
    def active(self) -> bool:
        return self.nvme.active

    def feed(self, d) -> None:
        self.nvme.feed(d)
        self.rpcrdma.feed(d)
        if self.smbdirect is not None:
            self.smbdirect.feed(d)
        if self.iser is not None:
            self.iser.feed(d)
