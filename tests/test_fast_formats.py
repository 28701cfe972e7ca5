"""The fast reader gives the same records for the same packets in every container: pcap little/big
endian, µs/ns timestamps, pcapng with several interfaces of different link types, SLL/SLL2, raw IB (247),
and damaged files produce flagged results, never a crash."""

import random
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from ibwire.decode import records as R
from ibwire.decode.scan import read_all, scan
from ibwire.files import iter_frames
from ibwire.files.writers import PcapngWriter, PcapWriter

PUBLIC = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "public"
ROCE = PUBLIC / "m3_nvme_nvme-discover.pcap"
IB = PUBLIC / "srinivas_infiniband.pcap"
SAME = [f for f in R.RECORD.names if f not in ("time", "time_ns", "frame")]


def _same(a, b):
    assert len(a) == len(b)
    for f in SAME:
        assert (a[f] == b[f]).all(), f


def _big_endian_ns(src, dst):
    frames = list(iter_frames(str(src)))
    with open(dst, "wb") as f:
        f.write(struct.pack(">IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, frames[0].linktype))
        for fr in frames:
            sec = int(fr.time)
            f.write(struct.pack(">IIII", sec, int(round((fr.time - sec) * 1e9)), fr.caplen, fr.wirelen) + fr.data)


def test_big_endian_nanosecond_pcap(tmp_path):
    _big_endian_ns(ROCE, tmp_path / "be.pcap")
    a, b = read_all(str(ROCE)), read_all(str(tmp_path / "be.pcap"))
    _same(a, b)
    assert np.allclose(a["time"], b["time"], atol=1e-6)


def test_pcapng_mixed_link_types_and_sll(tmp_path):
    roce, ib = list(iter_frames(str(ROCE))), list(iter_frames(str(IB)))
    out = tmp_path / "mixed.pcapng"
    w = PcapngWriter(str(out))
    e, erf, sll, sll2, raw = (w.add_interface(lt) for lt in (1, 197, 113, 276, 247))
    for fr in roce:
        w.write(fr.data, fr.time, e)
        d = fr.data
        w.write(struct.pack(">HHH8s", 0, 1, 6, d[6:12] + b"\0\0") + d[12:14] + d[14:], fr.time, sll)
        w.write(d[12:14] + b"\0\0" + struct.pack(">IHBB8s", 3, 1, 0, 6, d[6:12] + b"\0\0") + d[14:], fr.time, sll2)
    for fr in ib:
        w.write(fr.data, fr.time, erf)
        w.write(fr.data[16:], fr.time, raw)  # ERF header stripped: LRH first (link type 247)
    w.close()
    rec = read_all(str(out))
    n = len(roce)
    eth, sl, sl2 = rec[0 : 3 * n : 3], rec[1 : 3 * n : 3], rec[2 : 3 * n : 3]
    ref = read_all(str(ROCE))
    for got in (eth, sl, sl2):
        for f in ("opcode", "psn", "destqp", "p_key", "paylen", "reth_dmalen", "icrc", "src", "dst", "link"):
            assert (got[f] == ref[f]).all(), f
    ib_ref = read_all(str(IB))
    erf_rec, raw_rec = rec[3 * n :: 2], rec[3 * n + 1 :: 2]
    for got in (erf_rec, raw_rec):
        for f in ("opcode", "psn", "slid", "dlid", "destqp", "icrc", "vcrc", "mad_attrid", "link"):
            assert (got[f] == ib_ref[f]).all(), f


def test_truncated_file_is_flagged(tmp_path):
    data = ROCE.read_bytes()
    p = tmp_path / "cut.pcap"
    p.write_bytes(data[: len(data) - 300])
    s = scan(str(p))
    rec = np.concatenate(list(s))
    assert len(rec) == 65
    assert any("cut short" in x for x in s.problems)
    assert rec[-1]["flags"] & R.F_TRUNCATED
    assert rec[-1]["icrc"] in (R.TRUNC, R.ABSENT)


def test_impossible_record_length_is_skipped_with_a_problem(tmp_path):
    """A damaged record length: reading resynchronises on the next plausible record and says so."""
    data = bytearray(ROCE.read_bytes())
    off = 24
    for _ in range(10):
        off += 16 + struct.unpack_from("<I", data, off + 8)[0]
    struct.pack_into("<I", data, off + 8, 0x7FFFFFFF)
    p = tmp_path / "bad.pcap"
    p.write_bytes(bytes(data))
    s = scan(str(p))
    rec = np.concatenate(list(s))
    assert len(rec) == 64 and any("impossible" in x and "skipped" in x for x in s.problems)
    good = read_all(str(ROCE))
    assert (rec["psn"][10:] == good["psn"][11:]).all()  # everything after the damaged record is back


def test_random_corruption_never_crashes(tmp_path):
    """Flip bytes inside packets (headers included): every packet still yields a record, damage is flagged."""
    rng = random.Random(5)
    for src in sorted(PUBLIC.glob("*.pcap")):
        frames = list(iter_frames(str(src)))
        p = tmp_path / src.name
        with PcapWriter(str(p), frames[0].linktype) as w:
            for fr in frames:
                d = bytearray(fr.data)
                for _ in range(3):
                    if d:
                        d[rng.randrange(len(d))] = rng.randrange(256)
                d = d[: rng.randrange(len(d) + 1)] if rng.random() < 0.2 else d
                w.write(bytes(d), fr.time, flush=False)
        rec = read_all(str(p))
        assert len(rec) == len(frames)
        good = read_all(str(src))
        damaged = (rec["icrc"] != good["icrc"]) | ((rec["flags"] & (R.F_MALFORMED | R.F_TRUNCATED)) > 0)
        changed = (rec["icrc"] == R.BAD) | ((rec["flags"] & (R.F_MALFORMED | R.F_TRUNCATED)) > 0)
        assert changed.sum() > 0 and damaged.sum() > 0


def test_reordered_capture_flags_time_and_keeps_counts(tmp_path):
    from ibwire.analyze.flows import analyse
    from ibwire.analyze.stats import compute

    frames = list(iter_frames(str(ROCE)))
    rng = random.Random(1)
    shuffled = frames[:]
    rng.shuffle(shuffled)
    p = tmp_path / "shuffled.pcap"
    with PcapWriter(str(p), 1) as w:
        for fr in shuffled:
            w.write(fr.data, fr.time, flush=False)
    st = compute(scan(str(p)))
    assert st["counters"]["time_went_backwards"] > 0 and any("backwards" in h for h in st["loss_hints"])
    assert st["summary"]["packets"] == len(frames)
    a = analyse(str(ROCE))["conversations"]
    b = analyse(str(p))["conversations"]
    key = lambda r: (r["qpn_a"], r["qpn_b"])  # noqa: E731
    for x, y in zip(sorted(a, key=key), sorted(b, key=key)):
        assert x["messages"] == y["messages"] and x["payload_bytes"] == y["payload_bytes"]
    rc = [r for r in b if r["transport"] == "RC"]
    assert sum(r["out_of_order"] + r["retransmissions"] + r["psn_gaps"] for r in rc) > 0


@pytest.mark.parametrize("content", [b"", b"hello world, not a capture", b"\xd4\xc3\xb2\xa1" + b"\0" * 10])
def test_not_a_capture_is_a_user_error(tmp_path, content):
    from conftest import run_ibwire

    p = tmp_path / "x.pcap"
    p.write_bytes(content)
    r = run_ibwire("stats", p)
    assert "Traceback" not in r.stderr
    if content.startswith(b"\xd4"):
        assert r.returncode == 0 and "header" in r.stdout + r.stderr
    else:
        assert r.returncode == 2 and "not a pcap" in r.stderr


@pytest.mark.parametrize("chunk", [64, 1000, 5000])
def test_chunk_boundaries_do_not_change_records(tmp_path, chunk):
    """Records straddling read chunks (and records larger than a chunk) decode as in one piece."""
    from ibwire.decode.batch import decode_batch
    from ibwire.files.walk import CaptureWalk

    ng = tmp_path / "x.pcapng"
    w = PcapngWriter(str(ng))
    w.add_interface(1)
    for fr in iter_frames(str(ROCE)):
        w.write(fr.data, fr.time, 0)
    w.close()
    ref = read_all(str(ROCE))
    for path in (ROCE, ng):
        walk = CaptureWalk(str(path), batch=7, chunk=chunk)
        got = np.concatenate([decode_batch(walk.buf, pos) for pos in walk.batches()])
        _same(ref, got)
        assert not walk.problems


def test_read_responses_missing_from_capture_are_not_psn_gaps(tmp_path):
    """A multi-packet READ uses one requester PSN per response packet; if the capture lacks the responses,
    the next request's PSN jump is explained by the READ, not reported as loss."""
    from ibwire.analyze.flows import analyse

    src = PUBLIC / "m3_nvme_host-echo_dump.pcap"
    rec = read_all(str(src))
    keep = ~np.isin(rec["opcode"], (0x0D, 0x0E, 0x0F, 0x10)) | ((rec["flags"] & R.F_BTH) == 0)
    assert (~keep).sum() >= 3
    p = tmp_path / "no-read-responses.pcap"
    with PcapWriter(str(p), 1) as w:
        for fr, k in zip(iter_frames(str(src)), keep):
            if k:
                w.write(fr.data, fr.time, flush=False)
    rows = [r for r in analyse(str(p))["conversations"] if r["transport"] == "RC"]
    assert rows and all(r["psn_gaps"] == 0 for r in rows)
    assert sum(r["messages"].get("read", 0) for r in rows) >= 1


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def test_simple_packet_blocks_read_as_tshark_reads_them(tmp_path):
    """pcapng Simple Packet Blocks (no interface, no timestamp; the original length first, the data cut
    to the interface's snap length) among Enhanced Packet Blocks: the compiled walk's header words give
    tshark's frame lengths and the same transport fields."""
    import subprocess

    snap = 201  # not a multiple of 4: the blocks' padding is not packet data
    roce = list(iter_frames(str(ROCE)))[:8]
    assert any(fr.wirelen > snap for fr in roce) and any(fr.wirelen <= snap for fr in roce)
    shb = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = _block(1, struct.pack("<HHI", 1, 0, snap))
    blocks = [shb, idb]
    for k, fr in enumerate(roce):
        if k % 2:
            ts = int(fr.time * 1e6)
            data = fr.data[:snap]
            blocks.append(_block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(data), fr.wirelen) + data))
        else:
            blocks.append(_block(3, struct.pack("<I", fr.wirelen) + fr.data[:snap]))
    path = tmp_path / "spb.pcapng"
    path.write_bytes(b"".join(blocks))
    rec = read_all(str(path))
    fields = ["frame.len", "frame.cap_len", "infiniband.bth.psn", "infiniband.bth.destqp"]
    out = subprocess.run(
        ["tshark", "-r", str(path), "-T", "fields", *[a for f in fields for a in ("-e", f)]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert len(rec) == len(out) == len(roce)
    for r, line in zip(rec, out):
        length, caplen, psn, qp = line.split("\t")
        assert (int(r["len"]), int(r["caplen"])) == (int(length), int(caplen))
        if psn:
            assert (int(r["psn"]), int(r["destqp"])) == (int(psn), int(qp, 16))
    theirs = [tuple(map(int, line.split("\t")[:2])) for line in out]
    assert [(f.wirelen, f.caplen) for f in iter_frames(str(path))] == theirs  # the careful reader
    exe = Path(sys.executable).parent / "ibwire"  # and a capture on a pipe
    piped = (
        subprocess.run(
            [str(exe), "decode", "-", "-T", "fields", "-e", "frame.len", "-e", "frame.cap_len"],
            input=path.read_bytes(),
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .splitlines()
    )
    assert [tuple(map(int, line.split("\t"))) for line in piped] == theirs


@pytest.mark.parametrize("extensions", [1, 3, 5])
def test_erf_extension_headers_are_followed_to_the_end_of_their_chain(tmp_path, extensions):
    """ERF records with 1 to 5 extension headers (8 bytes each, bit 7 of each type byte saying another
    follows) before the IB packet: the compiled records, the full decode and tshark find the same packet and
    the same ERF lengths; the compiled walk once stopped after three."""
    import subprocess

    from tshark_oracle import TSHARK

    from ibwire.decode import decode_frame

    frames = list(iter_frames(str(IB)))
    out = tmp_path / f"ext{extensions}.pcap"
    with PcapWriter(str(out), 197) as w:
        for fr in frames:
            head = bytearray(fr.data[:16])
            head[8] |= 0x80
            ext = b"".join(bytes([(0x80 if i < extensions - 1 else 0) | 4]) + bytes(7) for i in range(extensions))
            struct.pack_into(">H", head, 10, len(fr.data) + 8 * extensions)
            w.write(bytes(head) + ext + fr.data[16:], fr.time)
    rec, ref = read_all(str(out)), read_all(str(IB))
    for f in ("opcode", "psn", "slid", "dlid", "destqp", "icrc", "vcrc", "mad_attrid", "link", "caplen", "len"):
        assert (rec[f] == ref[f]).all(), f
    full = [decode_frame(fr).flat for fr in iter_frames(str(out))]
    assert [d.get("lrh.dlid") for d in full] == [int(x) for x in ref["dlid"]]
    assert [d.get("icrc.status") for d in full] == ["good"] * len(full)
    lens = subprocess.run(
        [TSHARK, "-r", str(out), "-T", "fields", "-e", "frame.len", "-e", "infiniband.lrh.dlid"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")[:-1]
    assert lens == [f"{n}\t{d}" for n, d in zip(rec["len"], rec["dlid"])]
