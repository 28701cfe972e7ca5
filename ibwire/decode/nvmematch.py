"""NVMe-oF over RDMA matched with numpy (the storage view's fast path): a batch's capsules, completions and
RDMA READ/WRITE packets on NVMe-oF queues are gathered as columns, and at the end of the capture every
completion is matched to its command, every transfer to the command whose SGL it serves, at once.

The result is what NvmeTracker (and nvmebulk.follow) finds packet by packet: the queues are those RDMA-CM
connected or, with `-d nvme-rdma`, each destination QP's from its first SEND (a 16-byte SEND Only goes
to the host, any other SEND to the target; queues shared per host and target address pair, qid unknown:
an admin-only opcode is read as an admin command), an RDMA READ/WRITE to a QP no SEND went to joining
its address pair's queue; a SEND in First/Middle/Last packets is the concatenation of the First and Middle
payloads sent to its QP since its last Last, and the Last's; a CQE completes the last command with its
command id on its queue, once (NVMe Base §4.6.1); an RDMA READ request or the first RDMA WRITE packet
belongs to the last command on its queue whose keyed SGL data block descriptor (NVMe Base §4.4, type 4)
has its R_Key, a READ response to the request with its PSN, the packets after a first one follow it by
PSN (NVMe over Fabrics §3.6.2, RDMA transport binding).  What this path does not do raises Irregular and
the packet-by-packet path is taken instead: a payload outside its buffer, a reassembled SEND over
nvme.MAX_SEND or whose capsule header is not in its first packet, packets of a transfer out of PSN order."""

import numpy as np

from dissectors.nvmetable import CQE_LEN, SQE_LEN
from ibwire.decode.nvme import ADMIN_ONLY, MAX_SEND, Queue
from ibwire.decode.nvmebulk import (
    KINDS,
    READ_MORE,
    READ_REQUEST,
    READ_START,
    SEND_LAST,
    SEND_ONLY,
    WRITE_MORE,
    WRITE_START,
    columns,
    payload_ends,
)

KIND = np.array(KINDS, np.uint8)
MIX = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5, 0x85EBCA77C2B2AE63], np.uint64
)


class Irregular(Exception):
    """The capture needs the packet-by-packet path."""


class Matcher:
    """Columns of every capsule, completion and transfer packet on a known queue, in capture order."""

    def __init__(self, tracker, addr):
        self.tracker, self.addr = tracker, addr  # an active NvmeTracker (bulk), address text of S16 bytes
        self.queues, self.index = [], {}  # Queue objects, by id() -> their number
        self.parts = {"cmd": [], "cqe": [], "data": []}
        self.seen = 0  # data rows before this batch (their order across batches)
        self.keys = {}  # (destination address text, QP) -> its number: what SENDs are reassembled per
        self.held = {}  # key number -> (bytes held of a SEND First … Middle, its first packet's first bytes)
        self.ends = {}  # declared: key number -> (queue number, to the host, order of the SEND that made it)
        self.pairs = {}  # declared: (host, target) address texts -> (queue number, order of the SEND that made it)

    def add(self, batch, rows) -> np.ndarray:
        """Gather a batch's RC SEND and RDMA READ/WRITE rows (after its RDMA-CM rows were fed); the rows
        whose SEND NvmeTracker claims (smbdirect.CLAIMED)."""
        declared = self.tracker.decode_as
        rec = columns(batch, rows, "opcode destqp frame time dst")
        kind = KIND[rec["opcode"]]
        start, end = payload_ends(batch, rows)
        size, order = end - start, self.seen + np.arange(len(rows))
        self.seen += len(rows)
        if declared:
            key, queue, to_host, named = self._declared(batch, rows, rec, kind, size, order)
        else:
            key, queue, to_host, named = self._ends(rec)
        on = queue >= 0
        sends = np.flatnonzero(on & (kind > 0) & (kind <= SEND_ONLY))
        if ((start < 0) | (end > len(batch.buf)))[sends].any():
            raise Irregular("a payload outside its buffer")
        length, head, carried = self._messages(batch, kind, key, size, start, sends)
        cmd, cqe = ~to_host & (length >= SQE_LEN), to_host & (length == CQE_LEN)
        have = size[np.maximum(head, 0)]  # the bytes of each message's first packet
        for k, first in carried.items():
            have[k] = len(first)
        if (have < np.where(cmd, SQE_LEN, CQE_LEN))[cmd | cqe].any():
            raise Irregular("a capsule header beyond the first packet of its SEND")
        at = np.where(head >= 0, start[np.maximum(head, 0)], 0)
        buf = np.asarray(batch.buf)
        pick = {k: v[cmd] for k, v in (("order", order), ("queue", queue), ("frame", rec["frame"]))}
        pick.update(time=rec["time"][cmd], inline=length[cmd] - SQE_LEN, sqe=_gather(buf, at, carried, cmd, 0, SQE_LEN))
        self.parts["cmd"].append(pick)
        b = _gather(buf, at, carried, cqe, 12, CQE_LEN).astype(np.int64)  # a CQE's command id and status (§4.6.1)
        self.parts["cqe"].append(
            {
                "order": order[cqe],
                "queue": queue[cqe],
                "cid": b[:, 0] | b[:, 1] << 8,
                "status": (b[:, 2] | b[:, 3] << 8) >> 1,
                "frame": rec["frame"][cqe],
                "time": rec["time"][cqe],
            }
        )
        data = on & (kind > SEND_ONLY)
        pick = {k: v[data] for k, v in (("order", order), ("queue", queue), ("kind", kind), ("frame", rec["frame"]))}
        pick.update(columns(batch, rows[data], "psn reth_r_key paylen"))
        pick["rkey"], pick["length"] = pick.pop("reth_r_key"), np.maximum(pick.pop("paylen"), 0)
        self.parts["data"].append(pick)
        return on & (named | (kind == SEND_LAST))

    def _queue(self, queue) -> int:
        """The number of a Queue object, noted on first sight."""
        number = self.index.setdefault(id(queue), len(self.queues))
        if number == len(self.queues):
            self.queues.append(queue)
        return number

    def _distinct(self, rec, fields: str):
        """The distinct (`fields` addresses …, destination QP) of the rows, each as (key number, QP,
        address texts); per row, the index of its own."""
        names = fields.split()
        first, inverse = distinct_rows(*(rec[n] for n in names), rec["destqp"])
        found = []
        for *addresses, qp in zip(*(rec[n][first].view("S16").tolist() for n in names), rec["destqp"][first].tolist()):
            texts = [self.addr(a) for a in addresses]
            found.append((self.keys.setdefault((texts[0], qp), len(self.keys)), qp, texts))
        return found, inverse

    def _ends(self, rec):
        """Per row, on queues RDMA-CM connected: its key number, its destination's queue number (-1: none),
        whether it goes to the host, whether the queue's qid is known."""
        found, inverse = self._distinct(rec, "dst")
        n = len(found)
        key, queue, to_host, named = np.zeros(n, np.int64), np.full(n, -1), np.zeros(n, bool), np.zeros(n, bool)
        for i, (number, qp, (dst,)) in enumerate(found):
            key[i], end = number, self.tracker.ends.get((dst, qp))
            if end is not None:
                queue[i], to_host[i], named[i] = self._queue(end[0]), end[1], end[0].qid is not None
        return key[inverse], queue[inverse], to_host[inverse], named[inverse]

    def _declared(self, batch, rows, rec, kind, size, order):
        """_ends with `-d nvme-rdma` (NvmeTracker._end): a QP RDMA-CM did not connect is made an end of its
        address pair's queue by its first SEND, towards the host when that SEND is a 16-byte SEND Only."""
        found, inverse = self._distinct(rec, "dst")
        never = (-1, False, np.iinfo(np.int64).max)
        ends = []  # per distinct key: (queue number, to the host, made at, qid known)
        for _, qp, (dst,) in found:
            end = self.tracker.ends.get((dst, qp))  # RDMA-CM's, made before any of the batch's rows
            ends.append((self._queue(end[0]), end[1], -1, end[0].qid is not None) if end else None)
        fresh = [u for u, (end, (n, _, _)) in enumerate(zip(ends, found)) if end is None and n not in self.ends]
        if fresh:
            sends = np.flatnonzero((kind > 0) & (kind <= SEND_ONLY) & np.isin(inverse, fresh))
            new, first = np.unique(inverse[sends], return_index=True)
            sources = self._texts(batch.rec["src"][rows[sends[first]]])
            for f, u, src in sorted(zip(sends[first].tolist(), new.tolist(), sources)):
                guess = bool(kind[f] == SEND_ONLY and size[f] == CQE_LEN)
                pair = (found[u][2][0], src) if guess else (src, found[u][2][0])
                if pair not in self.pairs:
                    self.pairs[pair] = (self._queue(Queue(None, " → ".join(pair))), int(order[f]))
                self.ends[found[u][0]] = (self.pairs[pair][0], guess, int(order[f]))
        ends = [end or (*self.ends.get(n, never), False) for end, (n, _, _) in zip(ends, found)]
        k_queue, k_host, k_made, named = (np.array(v)[inverse] for v in zip(*ends))
        made = k_made <= order  # the row's QP had a SEND (the row's own, for a SEND) before
        queue, to_host = np.where(made, k_queue, -1), k_host & made
        lone = np.flatnonzero(~made & (kind > SEND_ONLY))
        if len(lone):
            self._join(batch, rows[lone], rec["dst"][lone], kind[lone], order[lone], queue, to_host, lone)
        return np.array([n for n, _, _ in found])[inverse], queue, to_host, named & made

    def _join(self, batch, rows, dst, kind, order, queue, to_host, lone) -> None:
        """RDMA READ/WRITE rows (`lone` in queue and to_host) to QPs no SEND went to before: each joins the
        queue of its address pair once a SEND made one, (destination, source) towards the host, (source,
        destination) for a READ response."""
        host = (kind != READ_START) & (kind != READ_MORE)
        first, inverse = distinct_rows(dst, batch.rec["src"][rows], host.astype(np.uint32))
        joined = []
        for d, s, h in zip(self._texts(dst[first]), self._texts(batch.rec["src"][rows[first]]), host[first].tolist()):
            joined.append(self.pairs.get((d, s) if h else (s, d), (-1, np.iinfo(np.int64).max)))
        number, made = (np.array(v)[inverse] for v in zip(*joined))
        ok = made < order
        queue[lone[ok]], to_host[lone[ok]] = number[ok], host[ok]

    def _texts(self, addresses) -> list:
        return [self.addr(a) for a in addresses.view("S16").tolist()]

    def _messages(self, batch, kind, key, size, start, sends):
        """Per row: the length of the SEND message it ends (-1: none), the row of the message's first packet
        (-1: in an earlier batch, its first bytes in `carried`, by row).  A SEND Only is a message; a Last ends
        the one of the First and Middle packets sent to its key since its last Last (nvmebulk.follow)."""
        length, head, carried = np.full(len(kind), -1), np.full(len(kind), -1), {}
        only = sends[kind[sends] == SEND_ONLY]
        length[only], head[only] = size[only], only
        parts = sends[kind[sends] != SEND_ONLY]
        if not len(parts):
            return length, head, carried
        r = parts[np.argsort(key[parts], kind="stable")]  # each key's packets in capture order
        k, last = key[r], kind[r] == SEND_LAST
        begins = np.ones(len(r), bool)
        begins[1:] = (k[1:] != k[:-1]) | last[:-1]
        begin = np.flatnonzero(begins)
        finish = np.append(begin[1:], len(r)) - 1
        held, done, heads = np.add.reduceat(np.where(last, 0, size[r]), begin), last[finish], r[begin]
        carry = {}  # message number -> the first bytes of what an earlier batch left held for its key
        for m in np.flatnonzero(np.append(True, k[begin][1:] != k[begin][:-1])).tolist():
            was = self.held.pop(int(k[begin[m]]), None)
            if was is not None:
                held[m] += was[0]
                carry[m] = was[1]
        if (held > MAX_SEND).any():
            raise Irregular("a SEND First … Last longer than the tracker holds")
        for m in np.flatnonzero(~done).tolist():  # under way at the end of the batch
            at = start[heads[m]]
            first = carry.get(m, bytes(batch.buf[at : at + min(size[heads[m]], SQE_LEN)]))
            self.held[int(k[begin[m]])] = (int(held[m]), first)
        ends = r[finish[done]]
        length[ends], head[ends] = held[done] + size[ends], heads[done]
        for m, first in carry.items():
            if done[m]:
                head[r[finish[m]]] = -1
                carried[int(r[finish[m]])] = first
        return length, head, carried

    def commands(self) -> dict:
        """Every command's columns, in capture order: queue number, qid, capsule, frame, time, completion
        (frame, time, status; frame 0: none), data frames (count, first, last), bytes."""
        cmd, cqe, data = (_joined(self.parts[k]) for k in ("cmd", "cqe", "data"))
        sqe = cmd["sqe"]
        cid = sqe[:, 2].astype(np.int64) | sqe[:, 3].astype(np.int64) << 8
        n = len(cid)
        out = {k: cmd[k] for k in ("queue", "frame", "time", "sqe")}
        qids = np.array([-1 if q.qid is None else q.qid for q in self.queues] or [0])[cmd["queue"]]
        out["qid"] = np.where(qids >= 0, qids, np.where(np.isin(sqe[:, 0], ADMIN_ONLY), 0, 1))  # unknown: guessed
        # completions: the last command with the command id on the queue, the first CQE for it
        to = _last_before((cmd["queue"] << 16 | cid,), cmd["order"], (cqe["queue"] << 16 | cqe["cid"],), cqe["order"])
        which = np.full(n, len(to))
        np.minimum.at(which, to[to >= 0], np.flatnonzero(to >= 0))
        done = np.flatnonzero(which < len(to))
        which = which[done]
        out["done"], out["done_time"], out["status"] = np.zeros(n, np.int64), np.zeros(n), np.full(n, -1)
        out["done"][done], out["done_time"][done] = cqe["frame"][which], cqe["time"][which]
        out["status"][done] = cqe["status"][which]
        owner = _owners(cmd, sqe, data)
        moved = owner >= 0
        out["data_frames"] = np.bincount(owner[moved], minlength=n)
        weights = np.where(data["kind"] == READ_REQUEST, 0, data["length"])[moved]
        out["bytes"] = cmd["inline"] + np.bincount(owner[moved], weights, n).astype(np.int64)
        first, last = data_span(owner, data["frame"], n)
        out["first_data"], out["last_data"] = np.where(out["data_frames"] > 0, first, 0), last
        return out


def data_span(owner: np.ndarray, frames: np.ndarray, n: int):
    """(first, last): the first and last frame numbers of the data packets each of `n` commands owns (`owner`:
    each packet's command, -1 for none); int64's maximum and 0 for a command that owns none."""
    moved = owner >= 0
    first, last = np.full(n, np.iinfo(np.int64).max), np.zeros(n, np.int64)
    np.minimum.at(first, owner[moved], frames[moved].astype(np.int64))  # frame numbers grow in capture order
    np.maximum.at(last, owner[moved], frames[moved].astype(np.int64))
    return first, last


def _owners(cmd, sqe, data) -> np.ndarray:
    """Per data packet: the number of the command it moves data for, or -1."""
    owner = np.full(len(data["kind"]), -1)
    keyed = np.flatnonzero(sqe[:, 39] >> 4 == 4)
    rkey = sqe[keyed, 35:39].astype(np.int64) @ (1 << np.arange(0, 32, 8))
    look = np.flatnonzero(np.isin(data["kind"], (READ_REQUEST, WRITE_START)))
    to = _last_before(
        (cmd["queue"][keyed] << 32 | rkey,),
        cmd["order"][keyed],
        (data["queue"][look] << 32 | data["rkey"][look],),
        data["order"][look],
    )
    owner[look[to >= 0]] = keyed[to[to >= 0]]
    # a READ response belongs to the request with its PSN, once (a request with a command is noted)
    request = (data["kind"] == READ_REQUEST) & (owner >= 0)
    events = np.flatnonzero(request | (data["kind"] == READ_START))
    starts = np.flatnonzero(data["kind"] == READ_START)
    psn = data["queue"] << 32 | data["psn"]
    to = _last_before((psn[events],), data["order"][events], (psn[starts],), data["order"][starts])
    prev = np.where(to >= 0, events[np.maximum(to, 0)], -1)
    hit = (prev >= 0) & request[np.maximum(prev, 0)]
    owner[starts[hit]] = owner[prev[hit]]
    # the packets after a first one follow it by PSN (a request with a command does not restart the queue's)
    setters = np.isin(data["kind"], (READ_REQUEST, WRITE_START, READ_START)) & ~request
    more = (data["kind"] == WRITE_MORE) | (data["kind"] == READ_MORE)
    by = np.argsort(data["queue"], kind="stable")  # each queue's packets in capture order
    queue, at = data["queue"][by], np.arange(len(by))
    last = np.maximum.accumulate(np.where(setters[by], at, -1))  # the queue's last first packet so far
    follows = more[by] & (last >= np.searchsorted(queue, queue))
    setter, counted = by[last[follows]], np.cumsum(more[by])
    rank = counted[follows] - counted[last[follows]]  # its place after the first packet
    live = owner[setter] >= 0
    more, setter, rank = by[follows][live], setter[live], rank[live]
    if ((data["psn"][setter].astype(np.int64) + rank) & 0xFFFFFF != data["psn"][more]).any():
        raise Irregular("packets of a transfer out of PSN order")
    owner[more] = owner[setter]
    return owner


def distinct_rows(*columns):
    """(index of the first of each, per row the index of its own) of the distinct rows of `columns` (1-D,
    each of 4 bytes or a multiple of 8: QPs, V16 addresses): np.unique(return_index, return_inverse) of the
    rows sorted by a 64-bit hash of each (a batch holds few distinct ones), checked against them."""
    if not len(columns[0]):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    words = []
    for c in columns:
        words += [c.astype(np.uint64)] if c.itemsize == 4 else list(c.view(np.uint64).reshape(len(c), -1).T)
    mixed = sum(w * m for w, m in zip(words, MIX))
    _, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if any((w[first][inverse] != w).any() for w in words):  # two rows of one hash
        _, first, inverse = np.unique(np.column_stack(words), axis=0, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def _last_before(keys_a, order_a, keys_b, order_b) -> np.ndarray:
    """Per b: the index of the last a with b's keys before it in capture order, or -1."""
    n = len(order_a)
    keys = [np.concatenate((np.asarray(x, np.int64), np.asarray(y, np.int64))) for x, y in zip(keys_a, keys_b)]
    when = np.concatenate((np.asarray(order_a, np.int64) * 2 + 1, np.asarray(order_b, np.int64) * 2))
    sort = np.lexsort((when, *reversed(keys)))
    fresh = np.zeros(len(sort), bool)
    for k in keys:
        fresh[1:] |= k[sort][1:] != k[sort][:-1]
    fresh[:1] = True
    group = np.maximum.accumulate(np.where(fresh, np.arange(len(sort)), 0))
    last = np.maximum.accumulate(np.where(sort < n, np.arange(len(sort)), -1))
    found = np.where(last >= group, sort[np.maximum(last, 0)], -1)
    out = np.empty(len(order_b), np.int64)
    out[sort[sort >= n] - n] = found[sort >= n]
    return out


def _joined(parts: list) -> dict:
    """One batch's columns after another."""
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}


def _gather(buf, at, carried, rows, lo: int, hi: int) -> np.ndarray:
    """Bytes lo to hi of the messages of `rows` (a mask) that start at `at` in buf or, for a row in `carried`,
    in its first bytes held from an earlier batch."""
    which = np.flatnonzero(rows)
    out, held = np.empty((len(which), hi - lo), np.uint8), np.isin(which, list(carried))
    out[~held] = byte_rows(buf, at[which[~held]] + lo, hi - lo)
    for i in np.flatnonzero(held).tolist():
        out[i] = np.frombuffer(carried[which[i]], np.uint8)[lo:hi]
    return out


def byte_rows(buf, at, width: int) -> np.ndarray:
    """buf[a : a + width] for each a of `at` (each inside buf), a row each (8 bytes: read as one word)."""
    if not len(at):
        return np.zeros((0, width), np.uint8)
    if width == 8:
        return np.ndarray((len(buf) - 7,), "<u8", buf, strides=(1,))[at].view(np.uint8).reshape(len(at), 8)
    return np.ndarray((len(buf) - width + 1, width), np.uint8, buf, strides=(1, 1))[at]


def rounded(values: np.ndarray) -> list:
    """round(v, 3) of each value, as Python rounds (the double nearest the decimal the exact value rounds to,
    half to even): rint(v * 1000) / 1000 is that double unless v * 1000 (rounded) lies within an ulp of a
    half, where the exact product may lie on the other side; those Python rounds."""
    scaled = values * 1000
    whole = np.rint(scaled)
    out = whole / 1000
    with np.errstate(invalid="ignore"):  # inf - inf: not near
        near = np.flatnonzero(np.abs(np.abs(scaled - whole) - 0.5) <= np.spacing(np.abs(scaled)))
    out[near] = [round(v, 3) for v in values[near].tolist()]
    return out.tolist()
