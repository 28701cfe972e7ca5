"""NVMe-oF over RDMA matched with numpy (the storage view's fast path): a batch's capsules, completions and
RDMA READ/WRITE packets on queues RDMA-CM connected are gathered as columns, and at the end of the capture
every completion is matched to its command, every transfer to the command whose SGL it serves, at once.

The result is what NvmeTracker (and nvmebulk.follow) finds packet by packet: a CQE completes the last
command with its command id on its queue, once (NVMe Base §4.6.1); an RDMA READ request or the first
RDMA WRITE packet belongs to the last command on its queue whose keyed SGL data block descriptor (NVMe
Base §4.4, type 4) has its R_Key, a READ response to the request with its PSN, the packets after a first
one follow it by PSN (NVMe over Fabrics §3.6.2, RDMA transport binding).  What this path does not do
raises Irregular and the packet-by-packet path is taken instead: `-d nvme-rdma`, a SEND in First/Middle/
Last packets on a queue, a payload outside its buffer, packets of a transfer out of PSN order."""

import numpy as np

from dissectors.nvmetable import CQE_LEN, SQE_LEN
from ibwire.decode.nvmebulk import (
    KINDS,
    READ_MORE,
    READ_REQUEST,
    READ_START,
    SEND_ONLY,
    WRITE_MORE,
    WRITE_START,
    columns,
    payload_ends,
)

KIND = np.array(KINDS, np.uint8)
SQE_AT, CQE_AT = np.arange(SQE_LEN), np.arange(12, CQE_LEN)  # a CQE's command id and status (§4.6.1)


class Irregular(Exception):
    """The capture needs the packet-by-packet path."""


class Matcher:
    """Columns of every capsule, completion and transfer packet on a known queue, in capture order."""

    def __init__(self, tracker, addr):
        self.tracker, self.addr = tracker, addr  # an active NvmeTracker (bulk), address text of S16 bytes
        self.queues, self.index = [], {}  # Queue objects, by id() -> their number
        self.parts = {"cmd": [], "cqe": [], "data": []}
        self.seen = 0  # data rows before this batch (their order across batches)

    def add(self, batch, rows) -> np.ndarray:
        """Gather a batch's RC SEND and RDMA READ/WRITE rows (after its RDMA-CM rows were fed); the rows
        whose SEND NvmeTracker claims (smbdirect.CLAIMED)."""
        rec = columns(batch, rows, "opcode destqp psn frame time reth_r_key paylen dst")
        kind = KIND[rec["opcode"]]
        queue, to_host, named = self._ends(rec)
        on = queue >= 0
        if (on & (kind < SEND_ONLY) & (kind > 0)).any():
            raise Irregular("a SEND in First/Middle/Last packets")
        start, end = payload_ends(batch, rows)
        size, order = end - start, self.seen + np.arange(len(rows))
        self.seen += len(rows)
        send = on & (kind == SEND_ONLY)
        cmd, cqe = send & ~to_host & (size >= SQE_LEN), send & to_host & (size == CQE_LEN)
        if ((start < 0) | (end > len(batch.buf)))[cmd | cqe].any():
            raise Irregular("a payload outside its buffer")
        buf = np.asarray(batch.buf)
        pick = {k: v[cmd] for k, v in (("order", order), ("queue", queue), ("frame", rec["frame"]))}
        pick.update(time=rec["time"][cmd], inline=size[cmd] - SQE_LEN, sqe=buf[start[cmd, None] + SQE_AT])
        self.parts["cmd"].append(pick)
        b = buf[start[cqe, None] + CQE_AT].astype(np.int64)
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
        names = ("order", order), ("queue", queue), ("kind", kind), ("psn", rec["psn"]), ("frame", rec["frame"])
        pick = {k: v[data] for k, v in names}
        pick.update(rkey=rec["reth_r_key"][data], length=np.maximum(rec["paylen"][data], 0))
        self.parts["data"].append(pick)
        return on & named

    def _ends(self, rec):
        """Per row: the number of its destination's queue (-1: none), whether it goes to the host, whether
        the queue's qid is known; looked up once per destination address and QP."""
        keys = np.empty(len(rec["dst"]), [("dst", "S16"), ("qp", "u4")])
        keys["dst"], keys["qp"] = rec["dst"].view("S16"), rec["destqp"]
        unique, inverse = _unique(keys)
        queue, to_host, named = np.full(len(unique), -1), np.zeros(len(unique), bool), np.zeros(len(unique), bool)
        for i, (dst, qp) in enumerate(unique.tolist()):
            found = self.tracker.ends.get((self.addr(dst), qp))
            if found is not None:
                queue[i] = self.index.setdefault(id(found[0]), len(self.queues))
                if queue[i] == len(self.queues):
                    self.queues.append(found[0])
                to_host[i], named[i] = found[1], found[0].qid is not None
        return queue[inverse], to_host[inverse], named[inverse]

    def commands(self) -> dict:
        """Every command's columns, in capture order: queue number, capsule, frame, time, completion
        (frame, time, status; frame 0: none), data frames (count, first, last), bytes."""
        cmd, cqe, data = (_joined(self.parts[k]) for k in ("cmd", "cqe", "data"))
        sqe = cmd["sqe"]
        cid = sqe[:, 2].astype(np.int64) | sqe[:, 3].astype(np.int64) << 8
        n = len(cid)
        out = {k: cmd[k] for k in ("queue", "frame", "time", "sqe")}
        # completions: the last command with the command id on the queue, the first CQE for it
        to = _last_before((cmd["queue"], cid), cmd["order"], (cqe["queue"], cqe["cid"]), cqe["order"])
        done, first = np.unique(to[to >= 0], return_index=True)
        which = np.flatnonzero(to >= 0)[first]
        out["done"], out["done_time"], out["status"] = np.zeros(n, np.int64), np.zeros(n), np.full(n, -1)
        out["done"][done], out["done_time"][done] = cqe["frame"][which], cqe["time"][which]
        out["status"][done] = cqe["status"][which]
        owner = _owners(cmd, sqe, data)
        moved = owner >= 0
        out["data_frames"] = np.bincount(owner[moved], minlength=n)
        weights = np.where(data["kind"] == READ_REQUEST, 0, data["length"])[moved]
        out["bytes"] = cmd["inline"] + np.bincount(owner[moved], weights, n).astype(np.int64)
        out["first_data"], out["last_data"] = np.zeros(n, np.int64), np.zeros(n, np.int64)
        got, at = np.unique(owner[moved], return_index=True)
        out["first_data"][got] = data["frame"][moved][at]
        got, at = np.unique(owner[moved][::-1], return_index=True)
        out["last_data"][got] = data["frame"][moved][::-1][at]
        return out


def _owners(cmd, sqe, data) -> np.ndarray:
    """Per data packet: the number of the command it moves data for, or -1."""
    owner = np.full(len(data["kind"]), -1)
    keyed = np.flatnonzero(sqe[:, 39] >> 4 == 4)
    rkey = sqe[keyed, 35:39].astype(np.int64) @ (1 << np.arange(0, 32, 8))
    look = np.flatnonzero(np.isin(data["kind"], (READ_REQUEST, WRITE_START)))
    to = _last_before(
        (cmd["queue"][keyed], rkey), cmd["order"][keyed], (data["queue"][look], data["rkey"][look]), data["order"][look]
    )
    owner[look[to >= 0]] = keyed[to[to >= 0]]
    # a READ response belongs to the request with its PSN, once (a request with a command is noted)
    request = (data["kind"] == READ_REQUEST) & (owner >= 0)
    events = np.flatnonzero(request | (data["kind"] == READ_START))
    starts = np.flatnonzero(data["kind"] == READ_START)
    to = _last_before(
        (data["queue"][events], data["psn"][events]),
        data["order"][events],
        (data["queue"][starts], data["psn"][starts]),
        data["order"][starts],
    )
    prev = np.where(to >= 0, events[np.maximum(to, 0)], -1)
    hit = (prev >= 0) & request[np.maximum(prev, 0)]
    owner[starts[hit]] = owner[prev[hit]]
    # the packets after a first one follow it by PSN (a request with a command does not restart the queue's)
    setters = np.flatnonzero(np.isin(data["kind"], (READ_REQUEST, WRITE_START, READ_START)) & ~request)
    more = np.flatnonzero(np.isin(data["kind"], (WRITE_MORE, READ_MORE)))
    to = _last_before((data["queue"][setters],), data["order"][setters], (data["queue"][more],), data["order"][more])
    setter = np.where(to >= 0, setters[np.maximum(to, 0)], -1)
    live = (setter >= 0) & (owner[np.maximum(setter, 0)] >= 0)
    more, setter = more[live], setter[live]
    by = np.lexsort((data["order"][more], setter))  # each transfer's packets in turn
    rank = np.empty(len(more), np.int64)
    rank[by] = np.arange(len(by)) - np.searchsorted(setter[by], setter[by]) + 1
    if ((data["psn"][setter].astype(np.int64) + rank) & 0xFFFFFF != data["psn"][more]).any():
        raise Irregular("packets of a transfer out of PSN order")
    owner[more] = owner[setter]
    return owner


def _unique(keys: np.ndarray):
    """np.unique(keys, return_inverse=True) of (address, QP) records, sorted by a 64-bit hash of each
    instead of field by field (a batch holds few distinct ones); checked against the records."""
    raw = np.zeros((len(keys), 24), np.uint8)
    raw[:, : keys.itemsize] = keys.view(np.uint8).reshape(len(keys), keys.itemsize)
    mixed = (
        raw.view(np.uint64) * np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9], np.uint64)
    ).sum(axis=1)
    _, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
    unique = keys[first]
    if (unique[inverse] != keys).any():  # two keys of one hash
        return np.unique(keys, return_inverse=True)
    return unique, inverse.ravel()


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
