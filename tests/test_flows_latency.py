"""ACK and READ latency in `ibwire flows` (one definition, the sequencer's) against the same definition
computed here from tshark's fields alone:
* ACK latency: from a request's first transmission (READ requests aside) to the first ACK, or READ
  response Last/Only, from the responder that covers its PSN (IBA Vol 1 §9.7.5.1: an ACK acknowledges every
  request up to its PSN), resent and late requests included;
* READ latency: from a READ request's first transmission to the first response with its PSN.
The captures are real rxe traffic (with losses and resends) and public ibdump captures, each with one RC
connection per pair of addresses, so this script can pair the two directions by address alone."""

import json
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from conftest import run_ibwire

CAPS = Path(__file__).resolve().parents[1] / "captures"
PUBLIC = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "public"
FILES = [
    CAPS / "rxe-rc-write-loss2.pcap",
    CAPS / "rxe-rc-write.pcap",
    CAPS / "rxe-rc-read.pcap",
    CAPS / "rxe-rc-send.pcap",
    PUBLIC / "m3_rdma-write-read_ibdump_read2.pcap",
    PUBLIC / "m3_02-2-write_ibdump_write.pcap",
]
FIELDS = ["frame.time_epoch", "ip.src", "ip.dst", "infiniband.bth.opcode", "infiniband.bth.psn"]
FIELDS += ["infiniband.aeth.syndrome", "infiniband.grh.sgid", "infiniband.grh.dgid"]
# RC opcodes (IBA Vol 1 Table 38): READ request 0x0C; READ responses First/Middle/Last/Only 0x0D-0x10;
# Acknowledge 0x11, Atomic Acknowledge 0x12; everything else below 0x20 but those is a request.
READ_REQ, READ_FIRST_ONLY, READ_LAST_ONLY, ACKS = 0x0C, {0x0D, 0x10}, {0x0F, 0x10}, {0x11, 0x12}
RESPONSES = {0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12}


def _serial_ge(a: int, b: int) -> bool:
    """a >= b in 24-bit serial PSN arithmetic (IBA Vol 1 §9.7.1)."""
    return ((a - b) & 0xFFFFFF) < (1 << 23)


def _packets(path):
    args = ["tshark", "-r", str(path), "-d", "udp.port==69,infiniband", "-T", "fields", "-E", "occurrence=f"]
    for f in FIELDS:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=300).stdout
    for line in out.splitlines():
        t, src, dst, op, psn, syn, sgid, dgid = line.split("\t")
        if op and int(op, 0) < 0x20:  # RC
            yield float(t), (src or sgid, dst or dgid), int(op, 0), int(psn), int(syn, 0) if syn else None


def tshark_latencies(path):
    """(ACK, READ) latency samples in µs per unordered address pair, from tshark's fields."""
    by_dir = defaultdict(list)
    for t, ends, op, psn, syn in _packets(path):
        by_dir[ends].append((t, op, psn, syn))
    out = {}
    for (a, b), sent in by_dir.items():
        answers = by_dir.get((b, a), [])
        reqs = [(t, op, psn) for t, op, psn, _ in sent if op not in RESPONSES]
        first = {}
        for t, op, psn in reqs:
            first.setdefault(psn, (t, op))
        acks = [(t, psn) for t, op, psn, syn in answers if (op in ACKS and syn >> 5 == 0) or op in READ_LAST_ONLY]
        acked, reads = [], []
        for psn, (t0, op) in first.items():
            if op == READ_REQ:
                resp = [t for t, o, p, _ in answers if o in READ_FIRST_ONLY and p == psn and t >= t0]
                reads += [(resp[0] - t0) * 1e6] if resp else []
            else:
                hit = [t for t, p in acks if t >= t0 and _serial_ge(p, psn)]
                acked += [(hit[0] - t0) * 1e6] if hit else []
        key = tuple(sorted((a, b)))
        prev = out.get(key, ([], []))
        out[key] = (prev[0] + acked, prev[1] + reads)
    return out


def _summary(v):
    if not v:
        return None
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"n": len(v), "p50": p50, "p90": p90, "p99": p99, "max": max(v)}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_latency_is_the_one_definition(path):
    if not path.exists():
        pytest.skip(f"{path} is one of the public captures in ../shared/captures/public (see its MANIFEST.md)")
    rows = json.loads(run_ibwire("flows", path, "-T", "json", check=True).stdout)["conversations"]
    rc = [r for r in rows if r["transport"] == "RC"]
    expected = tshark_latencies(path)
    assert rc and len(rc) == len(expected)  # one RC connection per pair of addresses
    compared = 0
    for r in rc:
        ends = tuple(sorted(e.split(" ")[-1] for e in (r["a"], r["b"])))
        ack, read = expected[ends]
        for key, want in (("ack_latency_us", _summary(ack)), ("read_latency_us", _summary(read))):
            got = r[key]
            assert (got is None) == (want is None), key
            if want:
                assert got["n"] == want["n"], key
                for q in ("p50", "p90", "p99", "max"):
                    assert got[q] == pytest.approx(want[q], abs=0.002), (key, q)
                compared += 1
    assert compared
