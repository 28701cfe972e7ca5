"""`stats --storage -d nvme-rdma` on the numpy path (ibwire/decode/nvmematch.py): each rule of declared
queues and of SENDs in First/Middle/Last packets stated on crafted RoCEv2 frames (a 64-byte SQE and a
16-byte CQE as NVMe Base 2.0 §4.2 and §4.6 lay them out), the command rows a user reads as the frames
declare them, and equal to what the packet-by-packet follower (nvmebulk.follow, NvmeTracker's steps) finds.
What the numpy path does not take it hands over (Irregular), and the view still answers."""

import struct

import pytest

from ibwire.analyze import storage, storagefeed
from ibwire.decode.nvmematch import Irregular
from ibwire.decode.stream import Stream
from ibwire.files.writers import PcapWriter
from ibwire.synth.headers import RETH, transport
from ibwire.synth.links import Link
from ibwire.synth.scenario import Port

HOST = Port("host", 1, 1, mac=bytes.fromhex("020000000031"), ip4=bytes([10, 0, 3, 1]))
TARGET = Port("target", 2, 2, mac=bytes.fromhex("020000000032"), ip4=bytes([10, 0, 3, 2]))
OTHER = Port("other", 3, 3, mac=bytes.fromhex("020000000033"), ip4=bytes([10, 0, 3, 3]))
QUEUE = "10.0.3.1 → 10.0.3.2"  # a declared queue's name: host → target
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY, ACK = 0x00, 0x01, 0x02, 0x04, 0x11
WRITE_ONLY, READ_REQUEST, READ_FIRST, READ_LAST = 0x0A, 0x0C, 0x0D, 0x0F
IDENTIFY, WRITE, READ = 0x06, 0x01, 0x02
BATCH = 16384  # records per batch of the compiled reader (ibwire.decode.stream.Stream)


def sqe(opc: int, cid: int, key: int = 0, length: int = 0, slba: int = 0, blocks: int = 1) -> bytes:
    """A command: a keyed SGL data block descriptor (type 4) for R_Key `key` when given, else none."""
    sgl = struct.pack("<Q", 0x10000) + length.to_bytes(3, "little") + struct.pack("<IB", key, 0x40 if key else 0)
    return struct.pack("<BBHI16x", opc, 0x40, cid, 1) + sgl + struct.pack("<QH14x", slba, blocks - 1)


def cqe(cid: int, status: int = 0) -> bytes:
    return struct.pack("<QHHHH", 0, 1, 0, cid, status << 1)


def write(path, packets) -> None:
    """(source Port, destination Port, destination QP, opcode, PSN, payload, RETH or None) as a RoCEv2
    pcap, a frame a millisecond."""
    link = Link("roce2")
    with open(path, "wb") as f:
        w = PcapWriter(f, link.linktype)
        for n, (src, dst, qp, opcode, psn, payload, reth) in enumerate(packets):
            ext = RETH.pack(*reth) if reth else bytes(4) if opcode in (READ_FIRST, READ_LAST) else b""
            w.write(link.frame(src, dst, transport(opcode, 0xFFFF, qp, psn, ext, payload)), ts=1_700_000_000 + n / 1000)


def both_ways(path, declared=True):
    """The command rows of the numpy path (None: it handed over) and of the packet-by-packet follower."""
    slow = storage.command_rows(storagefeed.track(Stream(str(path), icrc=False), declared, fast=False)[0].nvme)
    try:
        _, matcher = storagefeed.track(Stream(str(path), icrc=False), declared)
    except Irregular:
        return None, slow
    return storage.Rows(storage.matched_columns(matcher)), slow


def declared_queues():
    """Host QP 0x10 <-> target QP 0x20, and another host's QP 0x30 nothing made a queue of."""
    h, t = (HOST, TARGET, 0x20), (TARGET, HOST, 0x10)
    data = bytes(range(256)) * 8
    return [
        (TARGET, OTHER, 0x30, WRITE_ONLY, 1, data[:64], (0x10000, 0x51, 64)),  # no SEND made a queue: nothing
        (*h, SEND_ONLY, 100, sqe(IDENTIFY, 1, 0x51, 256), None),  # cid 1: admin-only, so qid 0
        (*t, WRITE_ONLY, 500, data[:256], (0x10000, 0x51, 256)),  # to a QP no SEND went to: the pair's queue
        (*t, SEND_ONLY, 501, cqe(1), None),  # the QP's first SEND, 16 bytes: towards the host; cid 1 done
        (*h, SEND_FIRST, 101, sqe(WRITE, 2, slba=8, blocks=2)[:40] + sqe(WRITE, 2, slba=8, blocks=2)[40:], None),
        (*h, SEND_MIDDLE, 102, data[:512], None),
        (*h, SEND_ONLY, 103, sqe(READ, 3, 0x53, 1024, slba=16, blocks=2), None),  # between First and Last
        (*h, SEND_LAST, 104, data[:512], None),  # cid 2: 64 + 1,024 bytes in the capsule
        (*t, READ_REQUEST, 502, b"", (0x10000, 0x53, 1024)),  # cid 3's data, read from the host
        (*h, READ_FIRST, 502, data[:512], None),
        (*h, READ_LAST, 503, data[:512], None),
        (*t, SEND_ONLY, 504, cqe(3), None),
        (*t, SEND_ONLY, 505, cqe(2, status=0x02), None),  # Invalid Field in Command
        (*t, SEND_ONLY, 506, cqe(2), None),  # a second completion for cid 2: nothing
        (*t, SEND_ONLY, 507, cqe(9), None),  # no command 9: nothing
        (*h, SEND_FIRST, 105, cqe(4), None),  # a 16-byte message to the target: no command, no completion
        (*h, SEND_LAST, 106, b"", None),
    ]


def test_declared_queues_are_matched_with_numpy_as_the_frames_say(tmp_path):
    path = tmp_path / "declared.pcap"
    write(path, declared_queues())
    fast, slow = both_ways(path)
    assert fast is not None and fast == slow
    keys = ("queue", "qid", "opcode", "cid", "submission", "data_frames", "first_data", "completion", "bytes", "status")
    assert [tuple(r[k] for k in keys) for r in fast] == [
        (QUEUE, 0, "Identify", 1, 2, 1, 3, 4, 256, "Successful Completion"),
        (QUEUE, 1, "Read", 3, 7, 3, 9, 12, 1024, "Successful Completion"),
        (QUEUE, 1, "Write", 2, 8, 0, None, 13, 1024, "Invalid Field in Command"),  # submitted at its Last
    ]
    assert [(r["slba"], r["blocks"]) for r in fast] == [(None, None), (16, 2), (8, 2)]
    assert storage.analyse(str(path), decode_as=True)["commands"] == slow


def test_a_send_first_to_last_across_batches_is_reassembled_with_numpy(tmp_path):
    """A capsule whose First and Middle lie in one batch of the compiled reader and its Last in the next (the
    target's queue pair acknowledged meanwhile): its SQE read from the First, its bytes from all three."""
    h, t = (HOST, TARGET, 0x20), (TARGET, HOST, 0x10)
    body = sqe(WRITE, 7, slba=1) + bytes(3008)
    head = [(*h, SEND_FIRST, 1, body[:1024], None), (*t, SEND_ONLY, 1, cqe(6), None)]
    head += [(*h, SEND_MIDDLE, 2, body[1024:2048], None), (*h, SEND_ONLY, 3, sqe(IDENTIFY, 8), None)]
    head += [(*t, ACK, 2, b"", None)] * (BATCH - len(head))
    path = tmp_path / "long.pcap"
    write(path, head + [(*h, SEND_LAST, 4, body[2048:], None), (*t, SEND_ONLY, 2, cqe(7), None)])
    assert [len(b.rec) for b in Stream(str(path), icrc=False)] == [BATCH, 2]
    fast, slow = both_ways(path)
    assert fast is not None and fast == slow
    assert [(r["opcode"], r["cid"], r["submission"], r["completion"], r["bytes"]) for r in fast] == [
        ("Identify", 8, 4, None, 0),
        ("Write", 7, BATCH + 1, BATCH + 2, 3008),
    ]


@pytest.mark.parametrize(
    "first", [sqe(WRITE, 1)[:40], b""], ids=["capsule header cut by the first packet", "empty first packet"]
)
def test_a_capsule_header_beyond_its_first_packet_is_handed_over(tmp_path, first):
    h, t = (HOST, TARGET, 0x20), (TARGET, HOST, 0x10)
    rest = sqe(WRITE, 1)[len(first) :] + bytes(64)
    path = tmp_path / "cut.pcap"
    write(path, [(*h, SEND_FIRST, 1, first, None), (*h, SEND_LAST, 2, rest, None), (*t, SEND_ONLY, 1, cqe(1), None)])
    fast, slow = both_ways(path)
    assert fast is None and [(r["cid"], r["bytes"], r["completion"]) for r in slow] == [(1, 64, 3)]
    assert storage.analyse(str(path), decode_as=True)["commands"] == slow
