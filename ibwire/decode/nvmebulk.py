"""NVMe-oF over RDMA in bulk (the storage view): NvmeTracker's following of one batch's RC SEND and RDMA
READ/WRITE packets, run on the record columns instead of a decoded frame per packet.  The same state and
the same steps as NvmeTracker._transport, _data and _completion: capsules are SENDs (NVMe over Fabrics
§3.3: a 64-byte SQE, then in-capsule data; a 16-byte CQE), a completion belongs to the last command with
its command id on its queue (NVMe Base §4.6.1), the first RDMA READ request or WRITE packet to the
command whose keyed SGL data block descriptor (NVMe Base §4.4, type 4) has its R_Key, the packets after
it by PSN."""

import numpy as np

from dissectors.nvmetable import CQE_LEN, SQE_LEN
from ibwire.decode import records as R
from ibwire.decode.nvme import ADMIN_ONLY, MAX_SEND, Command, Queue

SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY, READ_REQUEST, WRITE_START, READ_START, WRITE_MORE, READ_MORE = range(
    1, 10
)


def _kinds() -> list:
    """What each RC opcode is to the tracker, told apart by name as NvmeTracker tells them."""
    from dissectors.opcodes import lookup

    kinds = [0] * 256
    for code in range(256):
        op = lookup(code)
        name = op.name
        if op.transport != "RC":
            continue
        if name.startswith("SEND"):
            first, middle, last = ("First" in name, "Middle" in name, "Last" in name)
            kinds[code] = SEND_FIRST if first else SEND_MIDDLE if middle else SEND_LAST if last else SEND_ONLY
        elif name == "RDMA READ Request":
            kinds[code] = READ_REQUEST
        elif name.startswith(("RDMA WRITE", "RDMA READ Response")):
            start = "First" in name or "Only" in name
            write = name.startswith("RDMA WRITE")
            kinds[code] = (WRITE_START if start else WRITE_MORE) if write else READ_START if start else READ_MORE
    return kinds


KINDS = _kinds()


def columns(batch, rows, names: str) -> dict:
    """The named record columns of `rows` (indexing the record array itself would copy whole records)."""
    return {name: batch.rec[name][rows] for name in names.split()}


_LAST = {"batch": None, "rows": None, "ends": None}  # the last rows asked for: each follower of a batch asks again


def payload_ends(batch, rows):
    """(start, end) offsets in batch.buf of each row's payload (before the pad, ICRC and a native IB VCRC),
    start == end where the packet was cut short or has none.  Read-only arrays: the same rows of the same
    batch (the storage view's NVMe-oF, RPC-RDMA and SMB Direct followers) get them once."""
    if _LAST["rows"] is rows and _LAST["batch"] is batch:
        return _LAST["ends"]
    rec = columns(batch, rows, "caplen padcnt link flags paylen")
    end = np.asarray(batch.pos.data)[rows].astype(np.int64) + rec["caplen"] - 4 - rec["padcnt"]
    end -= ((rec["link"] == R.IB) | (rec["link"] == R.IBGRH)) * 2
    size = np.where((rec["flags"] & R.F_TRUNCATED) == 0, np.maximum(rec["paylen"], 0), 0)
    ends = end - size, end
    for v in ends:
        v.setflags(write=False)
    _LAST.update(batch=batch, rows=rows, ends=ends)
    return ends


def follow(tracker, batch, rows, addr) -> np.ndarray:
    """Feed `rows` (the batch's RC SEND and RDMA READ/WRITE rows, in capture order) to `tracker` (an
    active NvmeTracker in bulk mode); per row, whether the tracker claims its SEND (its queue's qid is
    known, or it reassembled the SEND), which SMB Direct then leaves alone."""
    rec = columns(batch, rows, "opcode destqp psn frame time reth_r_key paylen dst src")
    opcode, qp, psn = rec["opcode"].tolist(), rec["destqp"].tolist(), rec["psn"].tolist()
    frame, time, rkey = rec["frame"].tolist(), rec["time"].tolist(), rec["reth_r_key"].tolist()
    length = np.maximum(rec["paylen"], 0).tolist()
    start, end = (v.tolist() for v in payload_ends(batch, rows))
    dst = address_texts(rec["dst"], addr)
    src = address_texts(rec["src"], addr) if tracker.decode_as else None
    buf, ends, decode_as, claimed = batch.buf, tracker.ends, tracker.decode_as, np.zeros(len(opcode), bool)
    for k, (code, key) in enumerate(zip(opcode, zip(dst, qp))):
        kind, found = KINDS[code], ends.get(key)
        if kind <= SEND_ONLY:
            payload = buf[start[k] : end[k]].tobytes() if found is not None or decode_as else b""
            if found is None and decode_as:
                guess = kind == SEND_ONLY and len(payload) == CQE_LEN
                pair = (dst[k], src[k]) if guess else (src[k], dst[k])
                found = ends[key] = (tracker.pairs.setdefault(pair, Queue(None, f"{pair[0]} → {pair[1]}")), guess)
        elif found is None and decode_as:  # RDMA READ/WRITE to a QP no SEND went to: target -> host
            to_host = kind not in (READ_START, READ_MORE)
            queue = tracker.pairs.get((dst[k], src[k]) if to_host else (src[k], dst[k]))
            found = (queue, to_host) if queue is not None else None
        if found is None:
            continue
        queue, to_host = found
        if queue.qid is not None:
            claimed[k] = True
        if kind > SEND_ONLY:
            _data(queue, kind, psn[k], frame[k], rkey[k], length[k])
        elif kind in (SEND_FIRST, SEND_MIDDLE):
            held = tracker.sends.setdefault(key, bytearray())
            if len(held) + len(payload) <= MAX_SEND:
                held += payload
        else:
            if kind == SEND_LAST:
                payload = bytes(tracker.sends.pop(key, b"")) + payload
                claimed[k] = True
            if not to_host:
                if len(payload) >= SQE_LEN:
                    _command(tracker, queue, payload, frame[k], time[k])
            elif len(payload) == CQE_LEN:  # a CQE: the pending command with its command id completes, once
                cmd = queue.pending.get(payload[12] | payload[13] << 8)
                if cmd is not None and not cmd.cqe:
                    cmd.cqe, cmd.cqe_time, cmd.status = frame[k], time[k], (payload[14] | payload[15] << 8) >> 1
    return claimed


def address_texts(addresses: np.ndarray, addr) -> list:
    """addr(v) of each row's address bytes (an S16 view), worked out once per distinct address."""
    distinct, inverse = np.unique(addresses.view("S16").ravel(), return_inverse=True)
    return np.array([addr(v) for v in distinct.tolist()] + [None], object)[inverse.ravel()].tolist()


def _command(tracker, queue, payload: bytes, frame: int, time: float) -> None:
    """A command capsule: pending under its command id, its keyed SGL's R_Key (Command.keyed) noted."""
    qid = queue.qid if queue.qid is not None else 0 if payload[0] in ADMIN_ONLY else 1
    cmd = queue.pending[payload[2] | payload[3] << 8] = Command(frame, time, payload[:SQE_LEN], qid)
    cmd.bytes, cmd.queue = len(payload) - SQE_LEN, queue  # in-capsule data
    if payload[39] >> 4 == 4:
        queue.keys[int.from_bytes(payload[35:39], "little")] = cmd
    tracker.commands.append(cmd)


def _data(queue, kind: int, psn: int, frame: int, rkey: int, length: int) -> None:
    """An RDMA READ request or response, or WRITE, moving a command's data (NvmeTracker._data)."""
    cmd = None
    if kind in (READ_REQUEST, WRITE_START):
        cmd = queue.keys.get(rkey)
        if cmd is not None and kind == READ_REQUEST:
            queue.reads[psn] = (cmd, frame)
            cmd.data.append(frame)
            return
        queue.moving = (cmd, psn) if cmd is not None else None
    elif kind == READ_START:
        cmd = queue.reads.pop(psn, (None, None))[0]
        queue.moving = (cmd, psn) if cmd is not None else None
    elif queue.moving is not None and (psn - queue.moving[1]) & 0xFFFFFF == 1:
        cmd = queue.moving[0]
        queue.moving = (cmd, psn)
    if cmd is not None:
        cmd.data.append(frame)
        cmd.bytes += length
