"""Small crafted files must not buy large memory or time: each case runs the CLI under a 600 MB address
space and a CPU-time limit, as an attacker's capture would be opened."""

import json
import resource
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, run_ibwire
from test_mad_oracle import write_erf_pcap
from test_mad_rmpp import paths, table_response

from ibwire.files import open_capture

sys.path.insert(0, str(ROOT / "bench"))
from hostile import records  # noqa: E402

CAPS = ROOT / "captures"
EXE = shutil.which("ibwire", path=str(Path(sys.executable).parent)) or "ibwire"
MEMORY = 600 << 20


def limited(*args, timeout=120):
    """The CLI under the memory and CPU limits; never a traceback, never a MemoryError."""

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
        resource.setrlimit(resource.RLIMIT_CPU, (60, 60))

    r = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, preexec_fn=limits, timeout=timeout)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return r


def test_rmpp_segment_number_from_the_wire_is_bounded(tmp_path):
    """One 346-byte capture: a last RMPP segment numbered 2^32-1 (reassembly once reached 5.9 GB)."""
    seg = bytearray(table_response(paths(1))[0])
    struct.pack_into(">I", seg, 28, 0xFFFFFFFF)
    seg[26] = 0x7  # active, first and last
    cap = tmp_path / "rmpp.pcap"
    write_erf_pcap(cap, [bytes(seg)])
    assert cap.stat().st_size < 400
    r = limited("decode", cap)
    assert r.returncode == 0 and "transfer not reassembled" in r.stdout


def test_rmpp_reassembly_called_directly_is_bounded(tmp_path):
    """dissectors.mad.reassemble, the layer's own entry point, on the MADs of a crafted capture: segment 1
    and a last segment numbered 2^32-1 (and one at the bound) give an incomplete transfer, in bounded
    memory and time."""
    first, last = (bytearray(s) for s in table_response(paths(8))[:2])
    struct.pack_into(">I", last, 28, 0xFFFFFFFF)
    last[26] = 0x5  # active, last
    at_bound = bytearray(last)
    from dissectors.mad.rmpp import MAX_SEGMENTS

    struct.pack_into(">I", at_bound, 28, MAX_SEGMENTS)
    cap = tmp_path / "rmpp.pcap"
    write_erf_pcap(cap, [bytes(first), bytes(last), bytes(at_bound)])
    assert cap.stat().st_size < 1200
    program = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY}, {MEMORY}))\n"
        "resource.setrlimit(resource.RLIMIT_CPU, (20, 20))\n"
        "from dissectors.mad import reassemble\n"
        "from ibwire.files.convert import native_ib\n"
        "from ibwire.files import open_capture\n"
        "mads = [native_ib(f)[0][28:284] for f in open_capture(sys.argv[1])]\n"
        "print(reassemble(mads[1:2]))\n"
        "for segs in (mads[:2], mads):\n"
        "    t = reassemble(segs)\n"
        "    print(t.complete, len(t.missing), len(t.payload))\n"
    )
    r = subprocess.run([sys.executable, "-c", program, str(cap)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    from dissectors.mad.sa import SA_DATA

    assert r.stdout.split("\n")[:3] == ["None", "False 0 200", f"False {MAX_SEGMENTS - 2} {2 * SA_DATA}"]


def test_resync_never_allocates_from_the_snap_length(tmp_path):
    """A 546-byte pcap claiming a 4 GiB snap length, with a damaged record length: stats and decode read
    on past the damage to the same packets."""
    raw = (CAPS / "multitenant-breach.pcap").read_bytes()
    recs = records(raw)
    head = bytearray(raw[:24])
    struct.pack_into("<I", head, 16, 0xFFFFFFFF)
    second = bytearray(raw[recs[1][0] : recs[1][0] + 16])
    struct.pack_into("<I", second, 8, 0x7FFFFFFF)
    body = raw[24 : recs[1][0]] + bytes(second) + raw[recs[1][0] + 16 : recs[4][0]]
    cap = tmp_path / "snap.pcap"
    cap.write_bytes(bytes(head) + body)
    s = limited("stats", cap, "--format", "json")
    assert s.returncode == 0
    stats = json.loads(s.stdout)
    d = limited("decode", cap, "--format", "jsonl")
    assert d.returncode == 0 and "is impossible; skipped" in d.stderr
    assert stats["summary"]["packets"] == len(d.stdout.splitlines()) == 3  # frames 1, 3 and 4


def test_short_pcapng_blocks_are_reported_not_fatal(tmp_path):
    shb = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    short_idb = struct.pack("<II", 1, 12) + struct.pack("<I", 12)
    idb = struct.pack("<IIHHI", 1, 20, 247, 0, 0) + struct.pack("<I", 20)
    short_epb = struct.pack("<II", 6, 16) + b"\0\0\0\0" + struct.pack("<I", 16)
    empty_epb = struct.pack("<II", 6, 12) + struct.pack("<I", 12)
    cap = tmp_path / "short.pcapng"
    cap.write_bytes(shb + short_idb + idb + short_epb + empty_epb)
    for command in ("decode", "stats"):
        r = limited(command, cap)
        assert r.returncode == 0 and "too short to hold a packet; skipped" in r.stderr + r.stdout, r.stderr
    frames = list(open_capture(str(cap)))  # the detail reader (audit, evidence) alike
    assert frames == []
    a = limited("audit", cap, "--policy", CAPS / "multitenant-breach.partitions.conf")
    assert a.returncode == 2 and "no verdict" in a.stderr


def test_jobs_are_capped_by_cpus_and_work(tmp_path):
    import os

    from ibwire.files.split import processes

    cpus = len(os.sched_getaffinity(0))
    assert processes(100_000, 10**9) == cpus and processes(0, 10**9) == cpus
    assert processes(100_000, 1) == 1 and processes(2, 0) == 1  # no more than the work
    cap = CAPS / "loss-retransmit.pcap"
    one = run_ibwire("flows", cap, "--format", "json", "-j", "1", check=True).stdout
    many = limited("flows", cap, "--format", "json", "-j", "100000", timeout=60)
    assert many.returncode == 0 and many.stdout == one
    assert limited("stats", cap, "-j", "100000", timeout=60).returncode == 0
    neg = limited("stats", cap, "-j", "-3")
    assert neg.returncode == 2 and "-j -3" in neg.stderr
