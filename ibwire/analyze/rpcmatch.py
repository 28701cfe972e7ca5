"""NFS over RDMA matched with numpy (the storage view's fast path for RPC-RDMA): once RDMA-CM connected
queue pairs for port 20049 (RFC 8267 §6), each batch's RPC-RDMA messages on them are read a column at a
time (RFC 8166 §4.2: the version 1 header and its chunk lists; RFC 5531 §9: the RPC call's program,
version and procedure or the reply's status), RDMA READ/WRITE packets gathered, and at the end of the
capture every reply is matched to its call and every chunk packet to its call at once.

The result is what RpcRdmaTracker (bulk) finds message by message: a reply answers the last call with its
XID from the address it goes to, once; an RDMA READ request or a first RDMA WRITE packet belongs to the
call that last registered its R_Key as a chunk handle (unless a reply released it since), a READ response
to the request with its PSN, the packets after a first one to what the first one moved on their queue
pair.  What this path does not hold raises Irregular and the message-by-message path is taken instead: a
SEND in First/Middle/Last packets, a message not version 1 RDMA_MSG on a connected queue pair, a header or
RPC message cut short or with an AUTH_UNIX verifier, one whose RPC XID is not its header's, a SEND the
heuristic takes elsewhere."""

from functools import lru_cache

import numpy as np

from dissectors.rpcrdmatable import AUTH_UNIX, NFS_PROGRAM, nfs
from dissectors.rpcrdmav2 import looks_like
from ibwire.analyze.rpcstorage import procedure_name, status_text
from ibwire.decode.nvmebulk import READ_MORE, READ_REQUEST, READ_START, WRITE_MORE, WRITE_START, columns, payload_ends
from ibwire.decode.nvmematch import KIND, Irregular, _joined, _last_before, data_span, distinct_rows, rounded
from ibwire.decode.rpcrdma import RC_SEND

NO_REPLY = -(1 << 40)  # a call's status where no reply was matched (an accept state is 32 bits)
SEND_ONLY = (0x04, 0x17)  # SEND Only, SEND Only with Invalidate: a message in one packet
SENDS, ONLY = np.isin(np.arange(256), RC_SEND), np.isin(np.arange(256), SEND_ONLY)  # by opcode


class _Words:
    """Big-endian 32-bit words of each message at per-message offsets; a word outside a message raises
    Irregular (the full path flags the message cut short)."""

    def __init__(self, buf, start, size):
        buf = np.asarray(buf)
        self.start, self.size = start, size
        self.words = np.ndarray((max(len(buf) - 3, 0),), ">u4", buf, strides=(1,))  # one at every byte

    def __call__(self, off, which=None) -> np.ndarray:
        which = np.arange(len(self.start)) if which is None else which
        if (off + 4 > self.size[which]).any():
            raise Irregular("an RPC-RDMA message cut short")
        return self.words[self.start[which] + off].astype(np.int64)


def _chunk_lists(word, n: int):
    """(offset of the RPC message, [(message, handle)] in the tracker's order: read list, write list, reply
    chunk) of `n` RDMA_MSG messages (RFC 8166 §4.2.1)."""
    off, handles = np.full(n, 16, np.int64), []
    live = np.arange(n)
    while len(live):  # read list: present word, position, handle, length, offset (8 bytes)
        more = word(off[live], live) != 0
        handles.append((live[more], word(off[live[more]] + 8, live[more])))
        if (off[live[more]] + 24 > word.size[live[more]]).any():
            raise Irregular("a read segment cut short")
        off[live] += np.where(more, 24, 4)
        live = live[more]
    for chunks in (True, False):  # write list (chunks), reply chunk (one, optional)
        live = np.arange(n)
        while len(live):
            more = word(off[live], live) != 0
            off[live[~more]] += 4
            live = live[more]
            if not len(live):
                break
            count = word(off[live] + 4, live)
            if (off[live] + 8 + 16 * count > word.size[live]).any():
                raise Irregular("a chunk cut short")
            for i in range(int(count.max(initial=0))):
                has = live[count > i]
                handles.append((has, word(off[has] + 8 + 16 * i, has)))
            off[live] += 8 + 16 * count
            if not chunks:
                break
    return off, handles


def _auth_end(word, off, which) -> np.ndarray:
    """Where an opaque_auth (RFC 5531 §8.2) starting at `off` ends, as the tracker reads it: an AUTH_UNIX
    body field by field (which must end where its length says), another flavor skipped by its length."""
    flavor, length = word(off, which), word(off + 4, which)
    end = off + 8 + length + (-length & 3)
    unix = np.flatnonzero((flavor == AUTH_UNIX) & (length > 0))
    if len(unix):
        at, w = off[unix], which[unix]
        name = word(at + 12, w)
        if (name > 255).any():
            raise Irregular("an AUTH_UNIX machine name too long")
        gids = word(at + 16 + name + (-name & 3) + 8, w)
        if (at + 16 + name + (-name & 3) + 12 + 4 * np.minimum(gids, 16) != end[unix]).any():
            raise Irregular("an AUTH_UNIX body not its length")
    if (end > word.size[which]).any():
        raise Irregular("an RPC credential cut short")
    return end


class RpcMatcher:
    """Columns of every RPC-RDMA call and reply on connected queue pairs and of every RDMA READ/WRITE
    packet, in capture order."""

    def __init__(self, tracker, addr):
        self.tracker, self.addr = tracker, addr  # a bulk RpcRdmaTracker (its ends), address text of S16 bytes
        self.names, self.parts, self.handles, self.seen = {}, {"msg": [], "data": []}, [], 0

    def _ids(self, raw) -> np.ndarray:
        """A number per address (16 bytes), the same for the same text."""
        first, inverse = distinct_rows(raw)
        ids = [self.names.setdefault(self.addr(v), len(self.names)) for v in raw[first].view("S16").tolist()]
        return np.array(ids, np.int64)[inverse]

    def add(self, batch, rows) -> None:
        """Gather a batch's RC rows (after its RDMA-CM rows were fed)."""
        rec = columns(batch, rows, "opcode destqp psn frame time reth_r_key paylen dst src")
        opcode, order = rec["opcode"], self.seen + np.arange(len(rows))
        self.seen += len(rows)
        send, only = SENDS[opcode], ONLY[opcode]
        if (send & ~only).any():
            raise Irregular("a SEND in First/Middle/Last packets while NFS over RDMA is followed")
        dst, src = self._ids(rec["dst"]), self._ids(rec["src"])
        ends = {(self.names[a], qp) for a, qp in self.tracker.ends if a in self.names}
        pair = dst << 24 | rec["destqp"].astype(np.int64)  # a QPN is 24 bits
        pairs, inverse = np.unique(pair, return_inverse=True)
        declared = np.array([(p >> 24, p & 0xFFFFFF) in ends for p in pairs.tolist()], bool)[inverse.ravel()]
        start, end = payload_ends(batch, rows)
        size = end - start
        if ((start < 0) | (end > len(batch.buf)))[only].any():
            raise Irregular("a payload outside its buffer")
        other = np.flatnonzero(only & ~declared & (size >= 16))
        buf = np.asarray(batch.buf)
        for k in other[np.isin(buf[start[other, None] + np.arange(4, 8)] @ (1 << np.arange(24, -8, -8)), (1, 2))]:
            if looks_like(buf[start[k] : end[k]].tobytes()):
                raise Irregular("an RPC-RDMA message on a queue pair RDMA-CM did not connect")
        msg = np.flatnonzero(only & declared & (size >= 16))
        self._messages(batch, rec, msg, order, dst, src, start, size)
        kind = KIND[opcode]
        data = np.flatnonzero((kind >= READ_REQUEST) & ~send)
        self.parts["data"].append(
            {
                "order": order[data],
                "kind": kind[data],
                "dst": dst[data],
                "qp": rec["destqp"][data].astype(np.int64),
                "psn": rec["psn"][data].astype(np.int64),
                "rkey": rec["reth_r_key"][data].astype(np.int64),
                "length": np.maximum(rec["paylen"][data], 0).astype(np.int64),
                "frame": rec["frame"][data],
            }
        )

    def _messages(self, batch, rec, msg, order, dst, src, start, size) -> None:
        word = _Words(batch.buf, start[msg], size[msg])
        n = len(msg)
        xid = word(np.zeros(n, np.int64))
        if ((word(np.full(n, 4)) != 1) | (word(np.full(n, 12)) != 0)).any():
            raise Irregular("an RPC-RDMA message not version 1 RDMA_MSG")
        body, handles = _chunk_lists(word, n)
        every = np.arange(n)
        if (word(body, every) != xid).any():
            raise Irregular("an RPC message whose XID is not its RPC-RDMA header's")
        msgtyp = word(body + 4, every)
        call, reply = np.flatnonzero(msgtyp == 0), np.flatnonzero(msgtyp == 1)
        proc = np.stack([word(body[call] + k, call) for k in (12, 16, 20)], axis=1) if len(call) else np.zeros((0, 3))
        args = _auth_end(word, _auth_end(word, body[call] + 24, call), call) if len(call) else body[call]
        status = np.zeros(len(reply), np.int64)
        if len(reply):
            stat = word(body[reply] + 8, reply)
            ok = np.flatnonzero(stat == 0)
            at, which = body[reply[ok]] + 12, reply[ok]
            if ((word(at, which) == AUTH_UNIX) & (word(at + 4, which) > 0)).any():
                raise Irregular("an RPC reply with an AUTH_UNIX verifier")
            status[:] = -1
            status[ok] = word(_auth_end(word, at, which), which)
        main = [None] * len(call)
        reads = np.zeros(n, bool)
        reads[handles[0][0] if handles else []] = True
        v4 = (proc[:, 0] == NFS_PROGRAM) & (proc[:, 1] == 4) & (proc[:, 2] == 1)
        for j in np.flatnonzero(v4 & ~reads[call]).tolist():
            k = msg[call[j]]
            main[j] = _main(batch.buf[start[k] + args[j] : start[k] + size[k]].tobytes())
        base = sum(len(p["order"]) for p in self.parts["msg"])
        self.parts["msg"].append(
            {
                "order": order[msg],
                "call": msgtyp == 0,
                "reply": msgtyp == 1,
                "xid": xid,
                "src": src[msg],
                "dst": dst[msg],
                "frame": rec["frame"][msg],
                "time": rec["time"][msg],
                "prog": _spread(n, call, proc[:, 0]),
                "vers": _spread(n, call, proc[:, 1]),
                "proc": _spread(n, call, proc[:, 2]),
                "status": _spread(n, reply, status),
                "main": _spread(n, call, main, object),
            }
        )
        for which, handle in handles:
            self.handles.append({"msg": base + which, "handle": handle})

    def columns(self) -> dict:
        """The call table (rpcstorage.call_rows's columns), a list per column."""
        msg, data = _joined(self.parts["msg"]), _joined(self.parts["data"])
        if not msg:
            return {name: [] for name in COLUMNS}
        calls, replies = np.flatnonzero(msg["call"]), np.flatnonzero(msg["reply"])
        n, index = len(calls), np.full(len(msg["order"]), -1)
        index[calls] = np.arange(n)
        # a reply answers the last call with its XID from where it goes, once (the tracker's pending calls)
        src, dst = msg["src"].astype(np.int64), msg["dst"].astype(np.int64)  # address numbers (< 2**31)
        to = _last_before(
            (src[calls] << 32 | dst[calls], msg["xid"][calls]),
            msg["order"][calls],
            (dst[replies] << 32 | src[replies], msg["xid"][replies]),
            msg["order"][replies],
        )
        reply = np.full(n, len(msg["order"]))
        np.minimum.at(reply, to[to >= 0], replies[to >= 0])  # replies grow in capture order
        reply[reply == len(msg["order"])] = -1
        owner = _owners(msg, data, index, reply, _joined(self.handles))
        return _table(msg, data, calls, reply, owner, {v: k for k, v in self.names.items()})


def _owners(msg, data, index, reply, handles) -> np.ndarray:
    """Per data packet: the number of the call whose chunk it moves, or -1."""
    owner = np.full(len(data.get("order", ())), -1)
    if not len(owner):
        return owner
    kind, order = data["kind"], data["order"]
    # the handle table: a call registers its chunks' handles, its reply releases them
    handles = handles or {"msg": np.zeros(0, np.int64), "handle": np.zeros(0, np.int64)}
    held = handles["msg"][index[handles["msg"]] >= 0]
    handle = handles["handle"][index[handles["msg"]] >= 0]
    call = index[held]
    freed = reply[call] >= 0
    events = {
        "handle": np.concatenate((handle, handle[freed])),
        "order": np.concatenate((msg["order"][held], msg["order"][reply[call[freed]]])),
        "call": np.concatenate((call, np.full(freed.sum(), -1))),
    }
    look = np.flatnonzero(np.isin(kind, (READ_REQUEST, WRITE_START)))
    to = _last_before((events["handle"],), events["order"], (data["rkey"][look],), order[look])
    owner[look] = np.where(to >= 0, events["call"][np.maximum(to, 0)], -1)
    # a READ response takes the call of the last request with its PSN that found one, unless one took it
    request = (kind == READ_REQUEST) & (owner >= 0)
    ev, starts = np.flatnonzero(request | (kind == READ_START)), np.flatnonzero(kind == READ_START)
    to = _last_before((data["psn"][ev],), order[ev], (data["psn"][starts],), order[starts])
    prev = np.where(to >= 0, ev[np.maximum(to, 0)], -1)
    owner[starts] = np.where((prev >= 0) & request[np.maximum(prev, 0)], owner[np.maximum(prev, 0)], -1)
    # the packets after a first one move what it moved on their queue pair
    setters, more = (
        np.flatnonzero(np.isin(kind, (WRITE_START, READ_START))),
        np.flatnonzero(np.isin(kind, (WRITE_MORE, READ_MORE))),
    )
    to = _last_before(
        (data["dst"][setters], data["qp"][setters]), order[setters], (data["dst"][more], data["qp"][more]), order[more]
    )
    owner[more] = np.where(to >= 0, owner[setters[np.maximum(to, 0)]], -1)
    owner[kind == READ_REQUEST] = -1  # a request moves nothing itself
    return owner


def _table(msg, data, calls, reply, owner, text) -> dict:
    """The columns of call_rows from the matched calls."""
    n, moved = len(calls), owner >= 0
    count = np.bincount(owner[moved], minlength=n)
    nbytes = np.bincount(owner[moved], data["length"][moved] if moved.any() else None, n).astype(np.int64)
    first, last = data_span(owner, data["frame"], n)
    answered = reply >= 0
    r = np.maximum(reply, 0)
    time = msg["time"][calls]
    latency = np.full(len(calls), None, object)
    latency[answered] = rounded(((msg["time"][r] - time) * 1e6)[answered])
    pair = msg["src"][calls].astype(np.int64) << 32 | msg["dst"][calls].astype(np.int64)  # numbers of addresses
    distinct, inverse = np.unique(pair, return_inverse=True)
    ends = np.array([f"{text[p >> 32]} → {text[p & 0xFFFFFFFF]}" for p in distinct.tolist()] + [None], object)
    names, states = {}, {}

    def name(key):
        if key not in names:
            names[key] = procedure_name(_Call(*key, None, None))
        return names[key]

    def state(key):
        if key not in states:
            states[key] = status_text(_Call(0, 0, 0, None, *key))
        return states[key]

    keys = zip(
        msg["prog"][calls].tolist(),
        msg["vers"][calls].tolist(),
        msg["proc"][calls].tolist(),
        msg["main"][calls].tolist(),
    )
    return {
        "connection": ends[inverse.ravel()].tolist(),
        "procedure": [name(k) for k in keys],
        "xid": _texts(msg["xid"][calls], "0x{:08x}".format),
        "submission": msg["frame"][calls].tolist(),
        "data_frames": count.tolist(),
        "first_data": _shown(first, count > 0),
        "last_data": _shown(last, count > 0),
        "completion": _shown(msg["frame"][r], answered),
        "latency_us": latency.tolist(),
        "bytes": nbytes.tolist(),
        "status": _texts(
            np.where(answered, msg["status"][r], NO_REPLY), lambda s: state((None, None) if s == NO_REPLY else (1, s))
        ),
        "time": time.tolist(),
    }


def _texts(values: np.ndarray, text) -> list:
    """text(v) of each value, worked out once per distinct value."""
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.array([text(v) for v in distinct.tolist()] + [None], object)[inverse.ravel()].tolist()


def _shown(values: np.ndarray, shown: np.ndarray) -> list:
    """`values` as a list, None where not `shown`."""
    out = values.astype(object)
    out[~shown] = None
    return out.tolist()


COLUMNS = ("connection", "procedure", "xid", "submission", "data_frames", "first_data", "last_data", "completion")
COLUMNS += ("latency_us", "bytes", "status", "time")


class _Call:
    """What procedure_name and status_text read of a call."""

    def __init__(self, prog, vers, proc, main, reply, status):
        self.prog, self.vers, self.proc, self.main, self.reply, self.status = prog, vers, proc, main, reply, status


def _spread(n: int, at, values, dtype=np.int64) -> np.ndarray:
    """`values` at `at` of n entries (0 or None elsewhere)."""
    out = np.zeros(n, dtype) if dtype is not object else np.full(n, None, object)
    if dtype is object:
        for i, v in zip(np.asarray(at).tolist(), values):
            out[i] = v
    else:
        out[at] = values
    return out


@lru_cache(maxsize=4096)
def _main(args: bytes):
    """A COMPOUND call's main operation (of its arguments) as the NFS dissector names it (nfs.main_opcode),
    or None; the same arguments, as a client sends again and again, are read once."""
    try:
        tree = nfs(args, 0, (NFS_PROGRAM, 4, 1), True, None)
    except Exception:  # the tracker's feed leaves main unset where the dissector fails
        return None
    return next((v for k, v in tree if k == "nfs.main_opcode"), None)
