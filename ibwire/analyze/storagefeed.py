"""How the storage view feeds its trackers from the compiled records: RDMA-CM REQ and REP MADs (IBA §12.6)
to all of them; each batch's RC SEND and RDMA READ/WRITE rows to NVMe-oF's follower (numpy's Matcher, or
nvmebulk.follow packet by packet), and to RPC-RDMA, SMB Direct and iSER only the rows that can change what
they find, each as a light frame (_Lite) with the fields they read: no scapy, no full decode."""

import numpy as np

from dissectors import smbdirecttable as sd
from dissectors.iscsitable import is_iser_service
from dissectors.nvmetable import is_nvme_service
from ibwire.analyze.rpcmatch import RpcMatcher
from ibwire.decode import records as R
from ibwire.decode.iser import IserTracker
from ibwire.decode.iser import storage_rows as iser_rows
from ibwire.decode.nvme import NvmeTracker, Queue, storage_rows
from ibwire.decode.nvmebulk import SEND_FIRST, SEND_LAST, SEND_MIDDLE, address_texts, columns, follow, payload_ends
from ibwire.decode.nvmematch import KIND, Irregular, Matcher, byte_rows, distinct_rows
from ibwire.decode.records import addr_text
from ibwire.decode.rpcrdma import RC_SEND, RpcRdmaTracker, Trackers
from ibwire.decode.rpcrdma import storage_rows as rpcrdma_rows
from ibwire.decode.smbdirect import SmbDirectTracker
from ibwire.decode.smbdirect import storage_rows as smbdirect_rows

SEND_OPS, ONLY_OPS = np.isin(np.arange(256), RC_SEND), np.isin(np.arange(256), (0x04, 0x17))  # by opcode
CM_REQ, CM_REP = 0x0010, 0x0013  # the RDMA-CM MADs the trackers read (IBA §12.6); the others change nothing
MAD_HEADER = 24
CM_SERVICE_ID = 8  # REQ: ServiceID at message byte 8 (IBA §12.6.5)
CM_IP_PRIVATE = 140 + 36  # REQ: private data at message byte 140; its IP CM header is 36 bytes (A11.4)


class _Frame:
    __slots__ = ("number", "time")

    def __init__(self, number, time):
        self.number, self.time = number, time


class _Lite:
    """What NvmeTracker reads of a decoded frame, built from a record and its payload bytes."""

    __slots__ = ("frame", "flat", "notes", "errors", "layers", "packet")

    def __init__(self, number, time, flat):
        self.frame, self.flat = _Frame(number, time), flat
        self.notes, self.errors, self.layers, self.packet = [], [], {}, None


def _opcodes():
    """(name, transport, has RETH) of every BTH opcode, for the tracker's flat fields."""
    from dissectors.opcodes import lookup

    return [(op.name, op.transport, "reth" in op.headers) for op in map(lookup, range(256))]


class _Rows:
    """One batch's columns as Python lists, read once (indexing a structured array row by row is slow)."""

    COLS = (
        "opcode",
        "destqp",
        "psn",
        "paylen",
        "flags",
        "frame",
        "time",
        "reth_r_key",
        "caplen",
        "padcnt",
        "link",
        "mad_class",
        "mad_attrid",
        "cm_comm_id",
        "cm_remote_comm_id",
        "cm_qpn",
    )

    def __init__(self, batch, rows):
        rec = batch.rec[rows]
        for col in self.COLS:
            setattr(self, col, rec[col].tolist())
        self.src = [bytes(v) for v in rec["src"]]
        self.dst = [bytes(v) for v in rec["dst"]]
        self.data = np.asarray(batch.pos.data)[rows].tolist()
        self.buf = batch.buf


def _payload(r: _Rows, k: int) -> bytes:
    """Row k's payload: it ends before the pad, the ICRC and (native IB) the VCRC; empty when cut short."""
    if r.flags[k] & R.F_TRUNCATED or r.paylen[k] <= 0:
        return b""
    end = r.data[k] + r.caplen[k] - 4 - r.padcnt[k] - (2 if r.link[k] in (R.IB, R.IBGRH) else 0)
    return r.buf[end - r.paylen[k] : end].tobytes()


def _lite(r: _Rows, k: int, ops, addr) -> _Lite:
    name, transport, reth = ops[r.opcode[k]]
    flat = {
        "bth.opcode": r.opcode[k],
        "bth.opname": name,
        "bth.transport": transport,
        "bth.destqp": r.destqp[k],
        "bth.psn": r.psn[k],
        "ip.src": addr(r.src[k]),
        "ip.dst": addr(r.dst[k]),
        "payload.length": max(r.paylen[k], 0),
    }
    if reth:
        flat["reth.r_key"] = r.reth_r_key[k]
    if r.flags[k] & R.F_MAD and r.mad_class[k] == 0x07:
        flat.update(_cm_fields(r, k) or {})
    else:
        flat["_payload"] = _payload(r, k) if name.startswith("SEND") or r.flags[k] & R.F_MAD else b""
    return _Lite(r.frame[k], r.time[k], flat)


def _cm_fields(r: _Rows, k: int):
    """The fields the trackers read of row k, an RDMA-CM MAD, when it is a REQ (with its IP CM private
    data) or a REP; else None."""
    if r.mad_attrid[k] == CM_REP:
        return {
            "cm.rep": r.cm_comm_id[k],
            "cm.rep.remotecommid": r.cm_remote_comm_id[k],
            "cm.rep.localqpn": r.cm_qpn[k],
        }
    msg = _payload(r, k)[MAD_HEADER:] if r.mad_attrid[k] == CM_REQ else b""
    if len(msg) < CM_IP_PRIVATE + 4:
        return None
    return {
        "cm.req": r.cm_comm_id[k],
        "cm.req.localqpn": r.cm_qpn[k],
        "cm.req.serviceid": int.from_bytes(msg[CM_SERVICE_ID : CM_SERVICE_ID + 8], "big"),
        "cm.req.ip_cm.private": msg[CM_IP_PRIVATE : CM_IP_PRIVATE + 56].hex(),
    }


def _cm_lite(r: _Rows, k: int, ops, addr) -> _Lite:
    """Row k of the RDMA-CM rows as the trackers' _cm read it: a REQ or REP with only its source address and
    its cm fields (what routes it to _cm, all _cm reads), any other as _lite makes it."""
    fields = _cm_fields(r, k) if r.flags[k] & R.F_MAD and r.mad_class[k] == 0x07 else None
    return _Lite(r.frame[k], r.time[k], {"ip.src": addr(r.src[k]), **fields}) if fields else _lite(r, k, ops, addr)


def track(stream, decode_as: bool = False, rpc_decode_as: bool = False, iser_decode_as: bool = False, fast=True):
    """Follow every NVMe-oF command and RPC-over-RDMA call of `stream` (ibwire.decode.stream.Stream
    batches): the trackers, and the Matcher that holds the NVMe-oF commands (None: the tracker's list
    does).  `fast`: match NVMe-oF with numpy, and leave out SEND First/Middle/Last packets RPC-RDMA and SMB
    Direct cannot take, where it can (raises Irregular where it cannot)."""
    tracker = NvmeTracker(decode_as=decode_as, bulk=True)
    both = Trackers(tracker, RpcRdmaTracker(decode_as=rpc_decode_as, bulk=True), SmbDirectTracker(bulk=True))
    both.iser = IserTracker(decode_as=iser_decode_as, bulk=True)
    both.rpc = None  # the RpcMatcher following NFS over RDMA once RDMA-CM connected it (fast), else the tracker
    ops, names, short = _opcodes(), {}, {}
    rc = np.array([transport == "RC" for _, transport, _ in ops])  # what a tracker may read besides CM

    def addr(v: bytes) -> str:
        text = names.get(v)
        if text is None:
            text = names[v] = addr_text(v)
        return text

    def addr16(v: bytes) -> str:  # an S16 view's bytes: trailing zero bytes dropped
        text = short.get(v)
        if text is None:
            text = short[v] = addr_text(v.ljust(16, b"\0"))
        return text

    matcher, numbers, held = None, np.arange(0), {"rpc": Held(), "smb": Held()} if fast else None
    for batch in stream:
        if not len(batch.rec):
            continue
        numbers = numbers if len(numbers) >= len(batch.rec) else np.arange(len(batch.rec))
        every = numbers[: len(batch.rec)]
        cm, data = storage_rows(batch.rec, slice(None), tracker)  # every row, read a column at a time
        cm = cm[np.isin(batch.rec["mad_attrid"][cm], (CM_REQ, CM_REP)) | rc[batch.rec["opcode"][cm]]]
        if len(cm):
            _connect_all(both, batch, cm, (ops, addr, addr16))
        rows = _data_rows(batch, every, both, data)
        if rows is None:
            continue
        if fast and both.rpc is None and _connected(both.rpcrdma, held["rpc"]):
            both.rpc = RpcMatcher(both.rpcrdma, addr16)
        if both.rpc is not None:
            both.rpc.add(batch, rows)
        claimed = np.zeros(len(rows), bool)
        if tracker.active and fast:
            matcher = matcher or Matcher(tracker, addr16)
            claimed = matcher.add(batch, rows)
        elif tracker.active:
            claimed = follow(tracker, batch, rows, addr16)
        _others(both, batch, rows, claimed, ops, addr, held)
    return both, matcher


def _connected(t: RpcRdmaTracker, held) -> bool:
    """Whether RPC-RDMA follows only queue pairs RDMA-CM connected, nothing yet on them (RpcMatcher's
    start)."""
    quiet = not (t.calls or t.pending or t.reads or t.continued or t.sends or t.moving or t.handles)
    return bool(t.ends) and quiet and not t.decode_as and not held.dead()


def _connect_all(both: Trackers, batch, cm, names) -> None:
    """_connect each of the RDMA-CM rows `cm` of a batch, in capture order.  A REQ that only NVMe-oF or only
    RPC-RDMA wants (by its service ID), and a REP answering a REQ of only one of them, are done here on the record
    columns, as NvmeTracker._cm and RpcRdmaTracker._cm do them (the same state, no frame built: the bench's
    captures set up a connection every 65 and 27 packets); a REQ or REP no tracker wants is skipped, as _connect
    skips it; any other row goes through _cm_lite and _connect.  `names`: (_opcodes(), addr, addr16) of track."""
    ops, addr, addr16 = names
    rec = columns(batch, cm, "mad_attrid cm_comm_id cm_remote_comm_id cm_qpn src")
    src = address_texts(rec["src"], addr16)  # the source address's text, as addr gives it
    start, end = payload_ends(batch, cm)
    msg = start + MAD_HEADER  # a REQ's message: its service ID and IP CM private data (the queue id) where long enough
    ok = end - msg >= CM_IP_PRIVATE + 4
    at, buf = np.where(ok, msg, 0), np.asarray(batch.buf)
    service = np.ascontiguousarray(buf[at[:, None] + CM_SERVICE_ID + np.arange(8)]).view(">u8").ravel().tolist()
    qid = (buf[at + CM_IP_PRIVATE + 2].astype(np.int64) | buf[at + CM_IP_PRIVATE + 3].astype(np.int64) << 8).tolist()
    comm, remote, qpn = (rec[k].tolist() for k in ("cm_comm_id", "cm_remote_comm_id", "cm_qpn"))
    r, ok = None, ok.tolist()
    for k, attr in enumerate(rec["mad_attrid"].tolist()):
        if attr == CM_REP and _rep(both, remote[k], src[k] or None, qpn[k]):
            continue
        if attr == CM_REQ and ok[k] and _req(both, service[k], qid[k], comm[k], src[k] or None, qpn[k]):
            continue
        r = r or _Rows(batch, cm)
        _connect(both, _cm_lite(r, k, ops, addr))


def _req(both: Trackers, service: int, qid: int, comm: int, host, qpn: int) -> bool:
    """A REQ for `service` from `host`: noted by the one of NVMe-oF and RPC-RDMA that wants it (NVMe-oF with the
    queue id of its private data), or by none; False when another tracker wants it too (_connect then feeds it)."""
    nvme, rpc = is_nvme_service(service), both.rpcrdma.service(service)
    if both.smbdirect.service(service) or is_iser_service(service) or nvme and rpc:
        return False
    if nvme:
        both.nvme.reqs[comm] = (host, qpn, qid)
        both.nvme.active = True
    elif rpc:
        both.rpcrdma.reqs[comm] = (host, qpn)
    return True


def _rep(both: Trackers, remote: int, src, qpn: int) -> bool:
    """A REP from `src` answering REQ `remote`: the queue or connection made by the one of NVMe-oF and RPC-RDMA
    whose REQ it answers, or nothing; False when another tracker's REQ has its id too."""
    nvme, rpc = both.nvme, both.rpcrdma
    if remote in both.smbdirect.reqs or remote in both.iser.reqs or remote in nvme.reqs and remote in rpc.reqs:
        return False
    if remote in nvme.reqs:
        host, host_qpn, qid = nvme.reqs[remote]
        queue = Queue(qid, f"{host} QP 0x{host_qpn:06x} qid {qid}")
        nvme.ends[(host, host_qpn)] = (queue, True)
        nvme.ends[(src, qpn)] = (queue, False)
    elif remote in rpc.reqs:
        rpc.ends.add(rpc.reqs.pop(remote))
        rpc.ends.add((src, qpn))
        rpc.seen = True
    return True


def _connect(both: Trackers, d) -> None:
    """Feed an RDMA-CM frame to the trackers it concerns: a REQ to those whose service ID it names (IBA
    A11.2: TCP port 4420 NVMe-oF, 20049 NFS, 445/5445 SMB Direct, 3260 iSER), a REP to those that noted the
    REQ it answers; the others' _cm does nothing with it."""
    trackers = (both.nvme, both.rpcrdma, both.smbdirect, both.iser)
    if "cm.req" in d.flat:
        service = d.flat["cm.req.serviceid"]
        wants = (is_nvme_service(service), both.rpcrdma.service(service), both.smbdirect.service(service))
        wants += (is_iser_service(service),)
    elif "cm.rep" in d.flat:
        wants = tuple(d.flat["cm.rep.remotecommid"] in t.reqs for t in trackers)
    else:
        wants = (True,) * len(trackers)
    for t, want in zip(trackers, wants):
        if want:
            t.feed(d)


def _data_rows(batch, every, both: Trackers, nvme_rows):
    """The RC SEND and RDMA READ/WRITE rows of a batch, once the RDMA-CM rows were fed, if any tracker asks
    for them (each asks for all of them or none), else None."""
    for rows in (nvme_rows(), *(rows() for rows in iser_rows(batch, every, both))):
        if len(rows):
            return rows
    for ask in (rpcrdma_rows, smbdirect_rows):  # the second only when the first asks for none
        for rows in ask(batch, every, both):
            if len(rows):
                return rows
    return None


def _quiet(t) -> bool:
    """Whether RPC-RDMA or SMB Direct (`t`) follows nothing yet: then only a SEND its heuristic could take,
    or a SEND First/Middle/Last (reassembled per QP), can change what it finds; an RDMA READ or WRITE finds
    no chunk or buffer to belong to."""
    if isinstance(t, SmbDirectTracker):
        return not (t.ends or t.requests or t.pending or t.tokens or t.reads or t.frags)
    return not (t.decode_as or t.ends or t.calls or t.reads or t.continued)


def _candidates(batch, rows) -> dict:
    """Per row: an RC SEND (`send`), a SEND Only (`only`); per protocol (rpc, smb), whether its heuristic
    could take the row's payload alone (`alone`: a version word of 1 or 2, RFC 8166 §4.2; the first words of
    an SMB Direct negotiate or data message, MS-SMBD §2.2) and whether a message starting with it could be
    taken (`head`: the same words, of any length); both read of SENDs only."""
    opcode = batch.rec["opcode"][rows]
    send = SEND_OPS[opcode]
    at = np.flatnonzero(send)
    start, end = (v[at] for v in payload_ends(batch, rows))
    size, buf = end - start, np.asarray(batch.buf)
    odd = (start < 0) | (size < 8)  # no words to read: no shortcut
    if ((start >= 0) & (start + 8 <= len(buf))).all():  # each row's first 8 bytes
        raw = byte_rows(buf, start, 8)
    else:  # (past the buffer: its last byte)
        raw = buf[np.minimum(start[:, None] + np.arange(8), len(buf) - 1)]
    version = (raw[:, 4:7] == 0).all(axis=1) & ((raw[:, 7] == 1) | (raw[:, 7] == 2))
    w = raw[:, 0::2].astype(np.uint32) | raw[:, 1::2].astype(np.uint32) << 8
    smb = (w[:, 0] <= sd.MAX_CREDITS) & (w[:, 1] <= sd.MAX_CREDITS) & (w[:, 2] <= 1) & (w[:, 3] == 0)
    smb |= (w[:, 0] == sd.VERSION) & (w[:, 1] == sd.VERSION) & ((w[:, 2] == 0) | (w[:, 2] == sd.VERSION))
    words = {
        "head": {"rpc": version | odd, "smb": smb | odd},
        "alone": {"rpc": version & (size >= 16) | (start < 0), "smb": smb & (size >= sd.DATA_HEAD) | (start < 0)},
    }
    for which in words.values():
        for name, values in which.items():
            which[name] = np.zeros(len(rows), bool)
            which[name][at] = values
    return {"send": send, "only": ONLY_OPS[opcode], "kind": KIND[opcode], **words}


class Held:
    """What a quiet RPC-RDMA or SMB Direct tracker's SEND First/Middle/Last reassembly (its `sends`, per
    destination QP) holds, followed without feeding it every packet: a message whose First cannot start one
    its heuristic takes is dead, and of it only the First (when the tracker holds another message for the
    QP) and the Last (when it holds this one) are fed; a live message is fed whole."""

    LIVE, DEAD = 1, 2

    def __init__(self):
        self.open, self.held = {}, set()  # QP -> the message under way (LIVE, DEAD); QPs holding a dead one

    def dead(self) -> bool:
        """Whether a dead message is under way (the tracker holds less of it than it would)."""
        return self.DEAD in self.open.values()

    def feed(self, kinds, keys, head, alone):
        """Per SEND First/Middle/Last row (`kinds` an array, `keys` the distinct (address, QP) keys and per row
        the index of its own): whether the tracker must see it, whether a dead message is under way after it."""
        distinct, code = keys
        if not len(kinds):
            return np.zeros(0, bool), np.zeros(0, bool)
        if not head[kinds == SEND_FIRST].any() and not any(
            self.open.get(k) == self.LIVE or k in self.held for k in distinct
        ):
            return self._dead(kinds, distinct, code, alone)
        feed, dead = np.zeros(len(kinds), bool), np.zeros(len(kinds), bool)
        under_way, held, dying = self.open, self.held, sum(v == self.DEAD for v in self.open.values())
        for i, (kind, key) in enumerate(zip(kinds.tolist(), map(distinct.__getitem__, code.tolist()))):
            state = under_way.get(key)
            if kind == SEND_FIRST:
                feed[i] = head[i] or state == self.LIVE or key in held
                if feed[i]:
                    (held.discard if head[i] else held.add)(key)
                dying += (not head[i]) - (state == self.DEAD)
                under_way[key] = self.LIVE if head[i] else self.DEAD
            elif kind == SEND_MIDDLE:
                feed[i] = state == self.LIVE
            else:
                feed[i] = alone[i] if state is None else state == self.LIVE or key in held
                held.discard(key)
                if state is not None:
                    dying -= state == self.DEAD
                    del under_way[key]
            dead[i] = dying > 0
        return feed, dead

    def _dead(self, kinds, distinct, code, alone):
        """feed where no message can be live (no First could start one, none is live or held for these keys):
        every First starts a dead one, only a Last with none under way may be fed (when its heuristic could take
        it alone).  The same, a column at a time."""
        first, last = kinds == SEND_FIRST, kinds == SEND_LAST
        by = np.argsort(code, kind="stable")  # each key's rows in capture order
        at = np.arange(len(by))
        seen = np.maximum.accumulate(np.where((first | last)[by], at, -1))  # its key's last First or Last so far
        before, group = np.append(-1, seen[:-1]), np.searchsorted(code[by], code[by])
        own = before >= group
        was = np.array([self.open.get(k) == self.DEAD for k in distinct])[code[by]]
        dead_before = np.empty(len(by), bool)
        dead_before[by] = np.where(own, first[by][np.maximum(before, 0)], was)
        dying = sum(v == self.DEAD for v in self.open.values())
        dead = dying + np.cumsum(first & ~dead_before, dtype=np.int64) - np.cumsum(last & dead_before) > 0
        ends = np.append(code[by][1:] != code[by][:-1], True) & (seen >= group)  # each key's last First or Last
        for k, is_first in zip(code[by][ends].tolist(), first[by][seen[ends]].tolist()):
            if is_first:
                self.open[distinct[k]] = self.DEAD
            else:
                self.open.pop(distinct[k], None)
        return last & ~dead_before & alone, dead


def _keys(batch, rows, at):
    """The distinct (destination address, QP) of rows[at], and per row the index of its own (-1 elsewhere)."""
    dst, qp = batch.rec["dst"][rows[at]], batch.rec["destqp"][rows[at]]
    first, code = distinct_rows(dst, qp)
    per_row = np.full(len(rows), -1)
    per_row[at] = code
    return list(zip(dst[first].view("S16").tolist(), qp[first].tolist())), per_row


def _others(both: Trackers, batch, rows, claimed, ops, addr, held) -> None:
    """Feed RPC-RDMA, SMB Direct and iSER the rows that can change what they find, in capture order: while
    one follows nothing (_quiet), only the SENDs its heuristic could take and the SEND First/Middle/Last
    `held` (a Held each, or None: every one) says it must see; from then on every row.  SMB Direct leaves
    a SEND the NVMe-oF tracker claimed alone (smbdirect.CLAIMED).  Raises Irregular when a tracker stops
    being quiet while a dead message it was not fed whole is under way."""
    trackers, iser = {"rpc": both.rpcrdma, "smb": both.smbdirect}, both.iser
    c = _candidates(batch, rows)
    mask = {"rpc": np.full(len(rows), both.rpc is None), "smb": ~(claimed & c["send"])}
    want, dead, keys = {}, {}, None
    for name, t in trackers.items():
        fml = c["send"] & ~c["only"] & mask[name]
        want[name] = c["only"] & c["alone"][name] & mask[name]
        dead[name] = np.zeros(len(rows), bool)
        if held is None or not _quiet(t):
            want[name] |= fml
            continue
        at = np.flatnonzero(fml)
        keys = keys or _keys(batch, rows, np.flatnonzero(c["send"] & ~c["only"]))
        before = held[name].dead()
        feed, after = held[name].feed(c["kind"][at], (keys[0], keys[1][at]), c["head"][name][at], c["alone"][name][at])
        want[name][at[feed]] = True
        known = np.full(len(rows), -1)
        known[at] = np.arange(len(at))
        known = np.maximum.accumulate(known)
        dead[name] = np.where(known >= 0, after[np.maximum(known, 0)] if len(at) else before, before)
    done = 0
    while done < len(rows):
        quiet = {name: _quiet(t) for name, t in trackers.items()}
        for name in trackers:
            if not quiet[name] and held is not None and held[name].dead() and done == 0:
                raise Irregular("a tracker left quiet with a message it was not fed whole under way")
        use = {name: want[name] if quiet[name] else mask[name] for name in trackers}
        todo = np.flatnonzero(use["rpc"] | use["smb"] | iser.seen)
        todo = todo[todo >= done]
        if not len(todo):
            return
        r = _Rows(batch, rows[todo])
        for j, k in enumerate(todo.tolist()):
            d = _lite(r, j, ops, addr)
            if use["rpc"][k]:
                trackers["rpc"].feed(d)
            if use["smb"][k]:
                trackers["smb"].feed(d)
            if iser.seen:
                iser.feed(d)
            done = k + 1
            now = {name: _quiet(t) for name, t in trackers.items()}
            if now != quiet:
                if any(quiet[n] and not now[n] and dead[n][k] for n in trackers):
                    raise Irregular("a tracker left quiet with a message it was not fed whole under way")
                break
