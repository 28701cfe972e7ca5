"""Slices, len() and bitwise `&` in display filters select exactly tshark 4.0's frames on every public and
shipped capture (the merged pcapng of tests/test_filter_tshark.py), and the uses tshark 4.0 refuses
(a slice of a number, `in` after a function, `_ws.col.*`, which 4.0 cannot filter on) are refused with
one sentence and exit status 2.

tshark 4.0's rules, as observed with it: a slice range that falls outside the value ends the slice and
keeps the bytes already taken (`frame[2000:2] != 00:00` holds on every frame), a bare slice holds when it
took any byte, bytes order shorter first, `x & m` alone holds when a bit is left set.
"""

import re
import subprocess

import numpy as np
import pytest
from conftest import run_ibwire
from test_filter_tshark import CAPTURES, EXT_HEADERS, TSHARK_MISREADS, full_decode, merged, tshark_frames  # noqa: F401
from tshark_oracle import TSHARK

from ibwire.decode.filter import compile_filter
from ibwire.decode.record_filter import batch_filter
from ibwire.decode.stream import Stream, select
from ibwire.files import iter_frames

# ibwire's filter, or (ibwire's, tshark's) where the names differ: ibwire's `payload` is the bytes after
# the IB headers, which tshark 4.0 hands to its `data` dissector (its infiniband.payload is only on IPoIB).
FILTERS = [
    # slices of the frame, of protocols and IB headers, of addresses and strings
    "frame[12:2] == 89:15",
    "frame[12:2] == 08:00",
    "frame[12] == 8",
    "frame[-4:] == 00:00:00:00",
    "frame[1-3]",
    "frame[:4] == ff:ff:ff:ff",
    "frame[0:2,4] == 08:c0:e2",
    "frame[300:100]",
    "frame[2000:2] != 00:00",
    "frame[-1000:]",
    "frame[12:2] > 07",
    "frame[0:1] < 09",
    "frame[-3--1] contains 00",
    "infiniband.bth[0:2]",
    "infiniband.bth[0] == 04",
    "infiniband.bth[0] == 0x64",
    "infiniband.bth[4:2] == 00:00",
    'infiniband.bth[1] matches "^@"',
    "infiniband.lrh[0] == 0x02",
    "infiniband.grh[0:1] == 60",
    "infiniband.reth[-4:] == 00:00:10:00",
    "infiniband.aeth[0] == 00",
    "infiniband.deth[0:4] == 80:01:00:00",
    "infiniband[0] == 0x0a",
    "infiniband[-4:] == infiniband.bth[0:4]",
    "ip[0] == 45",
    "udp[2:2] == 12:b7",
    "eth[12:2] == 86:dd",
    "eth.src[0:3] == 08:c0:eb",
    "eth.addr[5] == e6",
    "ip.src[0:2] == ac:11",
    "ip.addr[3] == 0x38",
    "ipv6.src[0:2] == 20:01",
    "infiniband.grh.sgid[0:2] == fe:80",
    'frame.protocols[0:3] == "eth"',
    "frame[0:6] == eth.dst",
    "eth.dst[0:1] == frame[0:1]",
    # len()
    "len(frame) > 1000",
    "len(frame) == 0x3e",
    "len(infiniband) > 280",
    "len(infiniband.mad) == 256",
    ("len(payload) > 100", "len(data.data) > 100"),
    ("len(payload) == 4096", "len(data.data) == 4096"),
    "len(ip.src) == 4",
    "len(eth.addr) == 6",
    "len(infiniband.bth) == 12",
    "len(frame.protocols) < 100",
    # bitwise &
    "infiniband.bth.opcode & 0xe0 == 0x60",
    "infiniband.bth.opcode & 0xe0",
    "infiniband.bth.opcode & 0x1f > 4",
    "infiniband.bth.opcode & 0xe0 != 0x00",
    "infiniband.lrh.sl & 1",
    "infiniband.bth.psn & 0x1 == 0x1",
    "!infiniband.bth.opcode & 0x60",
    "infiniband.bth.opcode & 0xe0 & 0x20",
    "infiniband.bth.p_key & 0x8000 == 0",
    "udp.srcport & 0xff00 == 0xc000",
    "len(frame) & 1",
    "infiniband.bth.opcode & infiniband.bth.psn",
    "ip.src & 255.255.0.0 == 172.17.0.0",
    "eth.src & 01:00:00:00:00:00",
    "frame[0] & 08",
    "infiniband.bth.opcode & 0xe0 == 0x60 || infiniband.bth.opcode & 0x1f == 0x11",
]


def test_every_new_filter_selects_tsharks_frames(merged):  # noqa: F811
    flat_of = full_decode(list(iter_frames(str(merged))))

    def detail(batch, i, t0, prev):
        return flat_of(int(batch.rec["frame"][i]))

    misread = set(tshark_frames(merged, TSHARK_MISREADS))
    # payloads tshark hands to another dissector than `data`: IB ones to a heuristic (rpcordma …, which may
    # leave a tail as `data`: an RPC reply whose call it did not see), TCP segments to its stream analysis (a
    # retransmitted segment carries no `data`)
    other = set(tshark_frames(merged, "infiniband && !data || rpcordma || tcp"))
    wrong = []
    for text in FILTERS:
        ours, text = text if isinstance(text, tuple) else (re.sub(r"infiniband\.", "", text), text)
        want = tshark_frames(merged, text)
        got = [
            n
            for batch, mask in select(Stream(str(merged)), compile_filter(ours), detail)
            for n in batch.rec["frame"][mask].tolist()
        ]
        if "data.data" in text:
            got, want = [n for n in got if n not in other], [n for n in want if n not in other]
        if any(f"infiniband.{h}" in text for h in EXT_HEADERS + ("bth)",)):
            got, want = [n for n in got if n not in misread], [n for n in want if n not in misread]
        if got != want:
            wrong.append((text, len(want), len(got), sorted(set(got) ^ set(want))[:6]))
    assert not wrong, wrong


def test_masks_and_frame_length_run_on_the_records():
    """`&` on a record's number, len(frame) and slices of the frame need no full decode: the records
    answer for every row of a clean capture."""
    path = next(c for c in CAPTURES if c.name == "m3_02-2-write_ibdump_write.pcap")
    for text in ("bth.opcode & 0xe0 == 0x60", "lrh.sl & 1", "len(frame) > 1000 && bth.psn & 1"):
        bf = batch_filter(compile_filter(text))
        assert bf is not None, text
        rec = next(iter(Stream(str(path)))).rec
        mask, sure = bf(rec, float(rec["time"][0]))
        assert sure.all(), text
    mask, _ = batch_filter(compile_filter("bth.opcode & 0xe0 == 0x60"))(rec, 0.0)
    assert np.flatnonzero(mask).tolist() == [n - 1 for n in tshark_frames(path, "infiniband.bth.opcode & 0xe0 == 0x60")]
    # slices of the frame run on the batch's bytes where the caller has them (decode -Y), not in stats
    text = "frame[12:2] == 08:00 && frame[-4:] && !(frame[0:2,4-5] == 08:c0:e2:ca)"
    assert batch_filter(compile_filter(text)) is None
    batch = next(iter(Stream(str(path))))
    mask, sure = batch_filter(compile_filter(text), with_bytes=True)(batch.rec, 0.0, None, batch.data)
    assert sure.all()
    assert (np.flatnonzero(mask) + 1).tolist() == tshark_frames(path, text)


def test_cli_prints_the_selected_frames():
    path = next(c for c in CAPTURES if c.name == "m3_02-2-write_ibdump_write.pcap")
    for text, theirs in (
        ("bth[0] == 04", "infiniband.bth[0] == 04"),
        ("frame[0:2,4-5] == 08:c0:e2:ca", "frame[0:2,4-5] == 08:c0:e2:ca"),
        (
            "len(payload) > 100 && bth.opcode & 0x1f == 0x0a",
            "len(data.data) > 100 && infiniband.bth.opcode & 0x1f == 0x0a",
        ),
    ):
        r = run_ibwire("decode", path, "-Y", text, "-T", "fields", "-e", "frame.number")
        assert r.returncode == 0, r.stderr
        assert [int(x) for x in r.stdout.split()] == tshark_frames(path, theirs), text


@pytest.mark.parametrize(
    "text,message",
    [
        ("bth.opcode[0] == 4", "cannot be sliced"),
        ("frame.time_relative[0]", "cannot be sliced"),
        ("frame[0:0]", "length 0 isn't positive"),
        ("frame[3-1]", "greater or equal"),
        ("frame[1:2:3]", "not a valid range"),
        ("frame[0:2", "unexpected end"),
        ("frame[0:2] == 0x0202", "not a byte string"),
        ("len(frame)", "compare it"),
        ("len(frame[0:4]) == 4", "only fields"),
        ('len("abc") == 3', "only fields"),
        ("len(frame) in {62}", "membership"),
        ("frame[0] in {08, 09}", "membership"),
        ("bth.opcode & 0x1ff", "too big"),
        ('bth.opcode & "x"', "arithmetic operand"),
        ("frame & 08", "cannot take '&'"),
        ('frame.protocols & "e"', "cannot take '&'"),
        ("bth.opcode & 0x1f contains 04", "cannot follow '&'"),
        ('_ws.col.Info contains "RDMA"', "tshark 4.0 cannot filter on columns"),
        ('_ws.col.Protocol == "RRoCE"', "tshark 4.0 cannot filter on columns"),
    ],
)
def test_wrong_uses_are_refused_like_tshark(text, message):
    path = next(c for c in CAPTURES if c.name == "m3_02-2-write_ibdump_write.pcap")
    r = run_ibwire("decode", path, "-Y", text)
    assert r.returncode == 2, r.stdout[:200]
    assert message in r.stderr and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    t = subprocess.run(
        [TSHARK, "-r", str(path), "-Y", re.sub(r"\b(bth)\.", r"infiniband.\1.", text)], capture_output=True, text=True
    )
    assert t.returncode != 0, t.stdout[:200]  # tshark refuses them too


def test_stats_takes_masks_and_refuses_slices():
    """`&` on record fields and len(frame) mean on `stats` what they mean to tshark; a slice, which needs the
    frame's bytes, is refused there with one sentence that sends the user to `decode -Y`."""
    import json

    path = next(c for c in CAPTURES if c.name == "loss-retransmit.pcap")
    text = "bth.opcode & 0x1f == 0x11 || len(frame) > 1000 && bth.psn & 1"
    r = run_ibwire("stats", path, "-Y", text, "-f", "json")
    assert r.returncode == 0, r.stderr
    want = tshark_frames(path, text.replace("bth.", "infiniband.bth."))
    assert json.loads(r.stdout)["summary"]["packets"] == len(want)
    r = run_ibwire("stats", path, "-Y", "bth[0] == 0x11")
    assert r.returncode == 2 and "a slice or len() of bth needs the full decoder" in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
