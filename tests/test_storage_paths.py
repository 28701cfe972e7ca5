"""The storage view's fast path and its packet-by-packet path agree: the numpy matcher
(ibwire/decode/nvmematch.py) and the follower (nvmebulk.follow, NvmeTracker's steps) give the same command
rows on the public discovery capture and on damaged copies of it (bytes changed, packets dropped, doubled,
reordered, two copies interleaved); RPC-RDMA and SMB Direct fed only the SEND First/Middle/Last packets
storagefeed.Held says they must see find the same calls and requests as when fed every one, on damaged
mixes of the NVMe-oF, NFS, SMB Direct and iSER samples.  What the fast path cannot follow it hands over
(Irregular), never answers differently."""

import json
import random
import struct
from pathlib import Path

from ibwire.analyze import storage, storagefeed
from ibwire.analyze.iserstorage import scsi_rows
from ibwire.analyze.smbstorage import request_rows
from ibwire.decode.nvmematch import Irregular
from ibwire.decode.stream import Stream
from ibwire.report.jsonrows import dumps

DISCOVER = "m3_nvme_nvme-discover.pcap"
SAMPLES = ("nfs-rdma.pcap", "smb-direct.pcap", "iser-rdma.pcap")
CAPTURES = Path(__file__).resolve().parent.parent / "captures"


def _rows(path, fast: bool):
    both, matcher = storagefeed.track(Stream(str(path), icrc=False), fast=fast)
    return storage.Rows(storage.matched_columns(matcher)) if matcher is not None else storage.command_rows(both.nvme)


def _frames(path):
    data, off, out = path.read_bytes(), 24, []
    while off + 16 <= len(data):
        ts, us, caplen, wirelen = struct.unpack_from("<IIII", data, off)
        out.append((ts, us, data[off + 16 : off + 16 + caplen], wirelen))
        off += 16 + caplen
    return data[:24], out


def _damaged(frames, rnd):
    out = []
    for copy in range(rnd.randint(1, 3)):
        for ts, us, body, wirelen in frames:
            body, x = bytearray(body), rnd.random()
            if x < 0.04 and len(body) > 60:
                for _ in range(rnd.randint(1, 3)):
                    body[rnd.randrange(54, len(body))] = rnd.randrange(256)
            elif x < 0.06:
                continue
            elif x < 0.08:
                out.append((ts + 20 * copy, us, body, wirelen))
            out.append((ts + 20 * copy, us, body, wirelen))
    if rnd.random() < 0.5:  # another copy's packets between these
        other, merged = [f for f in frames if rnd.random() > 0.03], []
        while out or other:
            merged.append((out if out and (not other or rnd.random() < 0.5) else other).pop(0))
        out = merged
    if rnd.random() < 0.3:
        i = rnd.randrange(len(out) - 5)
        part = out[i : i + 5]
        rnd.shuffle(part)
        out[i : i + 5] = part
    return out


def test_the_discovery_capture_is_matched_with_numpy(public_dir):
    both, matcher = storagefeed.track(Stream(str(public_dir / DISCOVER), icrc=False))
    assert matcher is not None
    rows = storage.Rows(storage.matched_columns(matcher))
    assert len(rows) == 11 and rows == _rows(public_dir / DISCOVER, False)


def test_damaged_copies_give_the_same_rows_either_way(public_dir, tmp_path):
    head, frames = _frames(public_dir / DISCOVER)
    took = {"numpy": 0, "packet by packet": 0}
    for seed in range(120):
        path = tmp_path / "damaged.pcap"
        with open(path, "wb") as f:
            f.write(head)
            for ts, us, body, wirelen in _damaged(frames, random.Random(seed)):
                f.write(struct.pack("<IIII", ts, us, len(body), wirelen) + bytes(body))
        slow = _rows(path, False)
        try:
            fast = _rows(path, True)
        except Irregular:
            took["packet by packet"] += 1
            continue
        took["numpy"] += 1
        assert fast == slow, f"seed {seed}"
    assert took["numpy"] > 30 and took["packet by packet"] > 10, took


def _tables(path, fast: bool, declared):
    both, matcher = storagefeed.track(Stream(str(path), icrc=False), *declared, fast=fast)
    nvme = storage.Rows(storage.matched_columns(matcher)) if matcher is not None else storage.command_rows(both.nvme)
    return nvme, storage.rpc_rows(both), request_rows(both.smbdirect), scsi_rows(both.iser)


def test_mixed_storage_traffic_gives_the_same_tables_either_way(public_dir, tmp_path):
    parts = [_frames(CAPTURES / n) for n in SAMPLES] + [_frames(public_dir / "m3_nvme_host-echo_dump.pcap")]
    took = {"fast": 0, "packet by packet": 0}
    for seed in range(60):
        rnd = random.Random(seed)
        chosen = rnd.sample(parts, rnd.randint(2, 3))
        queues, frames = [list(f) for _, f in chosen], []
        while any(queues):
            q, n = rnd.choice([q for q in queues if q]), rnd.randint(1, 6)
            frames += q[:n]
            del q[:n]
        path = tmp_path / "mixed.pcap"
        with open(path, "wb") as f:
            f.write(chosen[0][0])
            for ts, us, body, wirelen in frames:
                if rnd.random() < 0.05:
                    continue
                body = body[: rnd.randrange(40, len(body))] if rnd.random() < 0.03 and len(body) > 60 else body
                f.write(struct.pack("<IIII", ts, us, len(body), wirelen) + bytes(body))
        declared = (rnd.random() < 0.5, rnd.random() < 0.2, rnd.random() < 0.2)
        slow = _tables(path, False, declared)
        try:
            fast = _tables(path, True, declared)
        except Irregular:
            took["packet by packet"] += 1
            continue
        took["fast"] += 1
        assert fast == slow, f"seed {seed}"
    assert took["fast"] > 30, took


def test_every_storage_capture_gives_the_same_rows_and_json_either_way(public_dir):
    """On every shipped capture and the public NVMe-oF ones, with and without -d nvme-rdma: the fast paths
    (numpy NVMe-oF and RPC-RDMA matching, rows held as columns) give the rows and the JSON text the
    packet-by-packet path gives; NFS over RDMA takes the RPC matcher."""
    took = []
    for path in sorted(CAPTURES.glob("*.pcap*")) + sorted(public_dir.glob("m3_nvme_*.pcap")):
        for declared in ((False, False, False), (True, False, False)):
            slow = _tables(path, False, declared)
            fast = _tables(path, True, declared)
            assert fast == slow, path
            assert [dumps(t) for t in fast] == [json.dumps(list(t), indent=2, default=str) for t in slow], path
        both, _ = storagefeed.track(Stream(str(path), icrc=False))
        took += [path.name] if both.rpc is not None else []
    assert took == ["nfs-rdma.pcap"], took


def test_repeated_nfs_conversation_matched_with_numpy(tmp_path):
    """The NFS sample 40 times over (XIDs and chunk handles reused in every copy, each after an RDMA-CM
    setup): the RPC matcher gives the tracker's call rows."""
    head, frames = _frames(CAPTURES / "nfs-rdma.pcap")
    path = tmp_path / "nfs40.pcap"
    with open(path, "wb") as f:
        f.write(head)
        for k in range(40):
            for ts, us, body, wirelen in frames:
                f.write(struct.pack("<IIII", ts + 20 * k, us, len(body), wirelen) + bytes(body))
    both, _ = storagefeed.track(Stream(str(path), icrc=False))
    assert both.rpc is not None
    fast = storage.rpc_rows(both)
    slow = storage.rpc_rows(storagefeed.track(Stream(str(path), icrc=False), fast=False)[0])
    assert len(fast) == 40 * 13 and fast == slow


def test_damaged_nfs_copies_give_the_same_calls_either_way(tmp_path):
    """The NFS sample damaged as the discovery capture is above (bytes changed, packets dropped, doubled,
    reordered, copies interleaved): the RPC matcher gives the tracker's call rows, or hands over."""
    head, frames = _frames(CAPTURES / "nfs-rdma.pcap")
    took = {"numpy": 0, "tracker": 0}
    for seed in range(80):
        path = tmp_path / "damaged-nfs.pcap"
        with open(path, "wb") as f:
            f.write(head)
            for ts, us, body, wirelen in _damaged(frames, random.Random(seed)):
                f.write(struct.pack("<IIII", ts, us, len(body), wirelen) + bytes(body))
        slow = storage.rpc_rows(storagefeed.track(Stream(str(path), icrc=False), fast=False)[0])
        try:
            both, _ = storagefeed.track(Stream(str(path), icrc=False))
        except Irregular:
            took["tracker"] += 1
            continue
        took["numpy" if both.rpc is not None else "tracker"] += 1
        assert storage.rpc_rows(both) == slow, f"seed {seed}"
    assert took["numpy"] > 20, took
