"""`ibwire stats --interval S` against tshark -z io,stat on the same file and interval: frames and bytes per
interval, and per interval the NAKs, RNR NAKs, CNPs and CE-marked packets tshark's display filters count."""

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import PUBLIC, run_ibwire

CAPS = Path(__file__).resolve().parents[1] / "captures"
COLUMNS = {
    "naks": "infiniband.aeth.syndrome & 0x60 == 0x60",
    "rnr_naks": "infiniband.aeth.syndrome & 0x60 == 0x20",
    "cnps": "infiniband.bth.opcode == 0x81",
    "ecn_ce": "ip.dsfield.ecn == 3",
}


def _tshark_io(tshark, path, interval, filters):
    r = subprocess.run(
        [
            tshark,
            "-q",
            "-r",
            str(path),
            "-z",
            ",".join(["io,stat", str(interval)] + ([""] + filters if filters else [])),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    rows = []
    for line in r.stdout.splitlines():
        m = re.match(r"\|\s*([\d.]+)\s*<>\s*([\d.]+|Dur)\s*\|(.*)\|\s*$", line)
        if m:
            cells = [int(c) for c in re.findall(r"\d+", m.group(3))]
            rows.append(cells)
    return rows


@pytest.mark.parametrize(
    "path,interval,events",
    [
        (CAPS / "loss-retransmit.pcap", 0.00005, True),
        (CAPS / "congestion.pcap", 0.00002, True),
        (CAPS / "roce-multitenant-breach.pcap", 0.001, True),
        (PUBLIC / "m3_rdma-write-read_ibdump_read2.pcap", 0.01, False),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else str(v),
)
def test_stats_interval_equals_tshark_io_stat(tshark, path, interval, events):
    r = run_ibwire("stats", path, "--interval", interval, "--format", "json")
    assert r.returncode == 0, r.stderr
    ours = json.loads(r.stdout)["intervals"]
    theirs = _tshark_io(tshark, path, interval, list(COLUMNS.values()) if events else [])
    assert len(ours) == len(theirs) > 1
    for k, (mine, cells) in enumerate(zip(ours, theirs)):
        assert (mine["packets"], mine["bytes"]) == (cells[0], cells[1]), f"interval {k}"
        assert mine["start_s"] == pytest.approx(k * interval)
        if events:
            assert [mine[c] for c in COLUMNS] == cells[2::2], f"interval {k}"
    assert sum(r["packets"] for r in ours) > 0


def test_stats_interval_table_and_errors(tmp_path):
    r = run_ibwire("stats", CAPS / "loss-retransmit.pcap", "--interval", "0.0001")
    assert r.returncode == 0 and "intervals" in r.stdout and "bits/s" in r.stdout
    r = run_ibwire("stats", CAPS / "loss-retransmit.pcap", "--interval", "-1")
    assert r.returncode == 2 and "positive" in r.stderr and r.stderr.count("\n") == 1


def test_stats_interval_survives_a_wild_timestamp(tmp_path):
    """Scenario: the last packet of a capture carries a timestamp 30 years late (a damaged or spliced file):
    the table keeps the real intervals and says that one packet was left out."""
    import struct

    data = bytearray((CAPS / "loss-retransmit.pcap").read_bytes())
    little = data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
    fmt = "<IIII" if little else ">IIII"
    off, last = 24, None
    while off + 16 <= len(data):
        last = off
        off += 16 + struct.unpack_from(fmt, data, off)[2]
    sec, frac, incl, orig = struct.unpack_from(fmt, data, last)
    struct.pack_into(fmt, data, last, sec + 30 * 365 * 86400, frac, incl, orig)
    (tmp_path / "wild.pcap").write_bytes(bytes(data))
    r = run_ibwire("stats", tmp_path / "wild.pcap", "--interval", "0.00005", "--format", "json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert sum(x["packets"] for x in res["intervals"]) == 128 and len(res["intervals"]) == 11
    assert any("1 packets are more than" in p for p in res["problems"])
