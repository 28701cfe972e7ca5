"""Bounded resources: a length in a file never buys more memory than the file holds or than tshark would
allocate for one record (262144 captured bytes, wiretap/wtap.h; pcapng blocks 16 MiB, wiretap/pcapng.c),
hostile files end with a clear warning and a truthful exit status, and the audit's cost grows with its
tenants about linearly.

Each command runs under a 1 GiB address-space limit and reports its own peak resident memory (VmHWM:
getrusage's ru_maxrss would carry the forking test runner's over the exec); the hostile files are sparse,
so the 4 GiB they claim costs the disk nothing."""

import json
import resource
import struct
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from gen_roce import generate  # noqa: E402
from hostile import block_4gib, erf_rlen, measure, pcapng_of, records, records_64mib  # noqa: E402
from tenants import build, build_roce  # noqa: E402

CAPS = ROOT / "captures"
CLEAN = CAPS / "multitenant-clean"
AUDIT = ("--policy", f"{CLEAN}.partitions.conf", "--tenants", f"{CLEAN}.tenants.toml")
LIMIT_AS = 1 << 30
PEAK_MB = 500


def limit():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


def run(*args, timeout=120):
    """`ibwire ARGS` under the address-space limit (bench/hostile.measure): (exit status, stdout, stderr,
    peak MB); never a traceback, an internal error or a MemoryError, never PEAK_MB."""
    status, out, err, peak, _ = measure(*args, preexec_fn=limit, timeout=timeout)
    assert peak >= 0, err
    for bad in ("Traceback", "internal error", "MemoryError"):
        assert bad not in err, err
    assert peak < PEAK_MB, f"ibwire {args[0]} peaked at {peak} MB"
    return status, out, err, peak


def _clean():
    raw = (CAPS / "multitenant-clean.pcap").read_bytes()
    return raw, records(raw)


def _all_commands(cap: Path, tmp_path: Path) -> dict:
    """decode, stats, convert and audit of one capture: {command: (status, stdout, stderr)}."""
    out = {}
    for name, args in (
        ("decode", ("decode", cap)),
        ("stats", ("stats", cap, "--format", "json")),
        ("convert", ("convert", cap, "-o", tmp_path / "out.pcap", "--link", "ib")),
        ("audit", ("audit", cap, *AUDIT, "--format", "json")),
    ):
        out[name] = run(*args)[:3]
    return out


def _frames(decoded: str) -> list:
    return [int(line.split()[0]) for line in decoded.splitlines() if line.strip()]


def test_pcapng_block_claiming_4_gib_is_damage_not_an_allocation(tmp_path):
    """A pcapng whose last block says it is 4 GiB long, in a (sparse) file that is that long: every
    reader stops there with one sentence; the audit passes only on incomplete evidence (exit 4)."""
    raw, recs = _clean()
    cap = tmp_path / "block4g.pcapng"
    blen = block_4gib(cap, raw, recs)
    body = pcapng_of(raw, recs)
    assert cap.stat().st_size == len(body) + blen and cap.stat().st_blocks * 512 < 1 << 20
    res = _all_commands(cap, tmp_path)
    status, out, err = res["decode"]
    assert status == 0 and _frames(out) == list(range(1, len(recs) + 1))
    assert f"damaged block length {blen}; the rest of the file is unreadable" in err
    assert res["stats"][0] == 0 and json.loads(res["stats"][1])["summary"]["packets"] == len(recs)
    status, _, err = res["convert"]
    assert status == 0 and f"damaged block length {blen}" in err
    assert len(records((tmp_path / "out.pcap").read_bytes())) == len(recs)
    status, out, err = res["audit"]
    report = json.loads(out)
    assert status == 4 and report["verdict"].startswith("PASS (evidence incomplete")
    assert report["evidence"]["skipped"] == 1 and report["evidence"]["lost_bytes"] == blen


def test_pcap_records_claiming_64_mib_each_are_refused(tmp_path):
    """The clean capture followed by 40 records of 64 MiB each (a 2.7 GB sparse file; reading them once
    took 6 GB): each reader reads the real frames and refuses the first giant record (its successors are
    no plausible records either) with one sentence naming tshark's limit."""
    raw, recs = _clean()
    cap = tmp_path / "records64m.pcap"
    records_64mib(cap, raw)
    assert cap.stat().st_size > 40 * (64 << 20)
    res = _all_commands(cap, tmp_path)
    refused = (
        f"frame {len(recs) + 1}: record length {64 << 20} is impossible (over 262144); the rest of the "
        "file is unreadable"
    )
    status, out, err = res["decode"]
    assert status == 0 and _frames(out) == list(range(1, len(recs) + 1)) and refused in err
    assert res["stats"][0] == 0 and refused in res["stats"][1]
    assert res["convert"][0] == 0 and refused in res["convert"][2]
    status, out, _ = res["audit"]
    report = json.loads(out)
    assert status == 4 and report["verdict"].startswith(
        f"PASS (evidence incomplete: 1 of {len(recs) + 1} frames unreadable"
    )
    assert report["evidence"]["lost_bytes"] == cap.stat().st_size - recs[-1][0] - recs[-1][1]


def test_over_long_record_that_frames_the_file_is_skipped_and_counted(tmp_path):
    """A 300,000-byte record (over 262144) between real ones: skipped whole, counted as one unreadable
    frame; the frames after it are read and keep their numbers."""
    raw, recs = _clean()
    at = recs[100][0]
    big = struct.pack("<IIII", 1_700_000_000, 1, 300_000, 300_000) + bytes(300_000)
    cap = tmp_path / "overlong.pcap"
    cap.write_bytes(raw[:at] + big + raw[at:])
    res = _all_commands(cap, tmp_path)
    status, out, err = res["decode"]
    assert status == 0 and _frames(out) == [*range(1, 101), *range(102, len(recs) + 2)]
    assert "frame 101: record of 300000 bytes is over the 262144-byte limit; skipped" in err
    assert json.loads(res["stats"][1])["summary"]["packets"] == len(recs)
    assert len(records((tmp_path / "out.pcap").read_bytes())) == len(recs)
    status, out, _ = res["audit"]
    report = json.loads(out)
    assert status == 4 and report["evidence"]["skipped"] == 1 and report["packets"] == len(recs)
    assert (
        report["verdict"] == f"PASS (evidence incomplete: 1 of {len(recs) + 1} frames unreadable; "
        f"{len(big)} bytes of the captures unread)"
    )


def test_pcapng_packet_over_the_limit_in_a_whole_block_is_skipped(tmp_path):
    """An Enhanced Packet Block of 1 MiB (under the block limit) whose packet is over 262144 bytes: that
    packet is skipped and counted, the blocks after it are read."""
    raw, recs = _clean()
    body = pcapng_of(raw, recs[:50])
    n = 1 << 20
    epb = struct.pack("<IIIIIII", 6, 32 + n, 0, 0, 0, n, n) + bytes(n) + struct.pack("<I", 32 + n)
    cap = tmp_path / "bigpacket.pcapng"
    cap.write_bytes(body + epb + pcapng_of(raw, recs[50:], head=False))
    status, out, err, _ = run("decode", cap)
    assert status == 0 and _frames(out) == [*range(1, 51), *range(52, len(recs) + 2)]
    assert "1 packets over the 262144-byte limit; skipped" in err
    status, out, _, _ = run("audit", cap, *AUDIT, "--format", "json")
    report = json.loads(out)
    assert status == 4 and report["evidence"]["skipped"] == 1 and report["packets"] == len(recs)


def test_erf_records_claiming_huge_lengths_stay_within_the_record(tmp_path):
    """ERF headers (pcap link type 197) whose rlen and wlen say 65535 on records of a few hundred bytes:
    every command reads the bytes that are there, in bounded memory, and converts them to the same IB
    packets as the intact file."""
    raw, recs = _clean()
    cap = tmp_path / "erf-rlen.pcap"
    erf_rlen(cap, raw, recs)
    res = _all_commands(cap, tmp_path)
    assert res["decode"][0] == 0 and _frames(res["decode"][1]) == list(range(1, len(recs) + 1))
    assert res["stats"][0] == 0 and res["convert"][0] == 0
    assert res["audit"][0] in (0, 1, 4) and json.loads(res["audit"][1])["packets"] == len(recs)
    intact = tmp_path / "intact.pcap"
    run("convert", CAPS / "multitenant-clean.pcap", "-o", intact, "--link", "ib")
    strip = [(o + 8, n - 8) for o, n in records(intact.read_bytes())]  # packet bytes, times aside
    got = (tmp_path / "out.pcap").read_bytes()
    want = intact.read_bytes()
    assert [got[o + 8 : o + n] for o, n in strip] == [want[o + 8 : o + n] for o, n in strip]


@pytest.mark.parametrize("cut", ["record header", "packet headers"])
def test_truncated_last_record_is_reported_and_the_audit_says_so(tmp_path, cut):
    """The file ends inside the last record's header or inside the packet's own headers: the frames before
    it are read, the warning names the cut, and the audit passes only on incomplete evidence (exit 4)."""
    raw, recs = _clean()
    off, n = recs[-1]
    keep, says = (
        (10, "trailing bytes after the last record")
        if cut == "record header"
        else (16 + 20, f"frame {len(recs)}: record cut short at end of file")
    )
    cap = tmp_path / "cut.pcap"
    cap.write_bytes(raw[: off + keep])
    status, out, err, _ = run("decode", cap)
    frames = _frames(out)
    assert status == 0 and frames[: len(recs) - 1] == list(range(1, len(recs)))
    assert says in err
    status, out, err, _ = run("audit", cap, *AUDIT, "--format", "json")
    report = json.loads(out)
    assert status == 4 and report["verdict"].startswith("PASS (evidence incomplete")
    assert "PASS (evidence incomplete" in err


def test_large_captures_stay_under_500_mb(tmp_path):
    """decode, convert and audit on 200,000 RoCEv2 packets (bench/gen_roce.py; bench/hostile.py measures
    1,000,000) stay far below 500 MB."""
    cap = tmp_path / "roce.pcap"
    generate(str(cap), 200_000)
    peaks = {}
    for name, args in (
        ("decode", ("decode", cap, "-T", "fields", "-e", "bth.psn")),
        ("convert", ("convert", cap, "-o", tmp_path / "out.pcap", "--link", "eth")),
        (
            "audit",
            (
                "audit",
                cap,
                "--policy",
                CAPS / "roce-multitenant-clean.partitions.conf",
                "--tenants",
                CAPS / "roce-multitenant-clean.tenants.toml",
                "--format",
                "json",
            ),
        ),
    ):
        status, out, _, peaks[name] = run(*args, timeout=300)
        assert status in (0, 1), name
    assert len(records((tmp_path / "out.pcap").read_bytes())) == 200_000
    assert max(peaks.values()) < 300, peaks


def test_audit_of_2500_tenants_is_fast_and_complete(tmp_path):
    """2,500 tenants, 10,025 packets, 70 findings (25 crossings into the next tenant's partition, drifted
    P_Key tables): the text audit takes well under 10 s (it took 90 s), lists every crossing and says the
    grid is too large; JSON keeps every pair."""
    paths = build(tmp_path, 2500)
    args = (
        "audit",
        paths["capture"],
        "--policy",
        paths["policy"],
        "--tenants",
        paths["tenants"],
        "--state",
        paths["state"],
    )
    t = time.perf_counter()
    status, out, _, peak = run(*args)
    wall = time.perf_counter() - t
    assert status == 1 and out.startswith("FAIL  10,025 packets, 70 findings")
    assert wall < 10 and peak < 300, (wall, peak)
    assert "2500 tenants are too many for a 2500 × 2500 grid" in out
    assert "traffic within a tenant with no finding about it is summed (2500 tenants, 10000 packets" in out
    crossings = [f"t{t} -> t{(t + 1) % 2500}: 1 packets / 58 bytes attempt" for t in range(99, 2500, 100)]
    assert all(c in out for c in crossings)
    status, out, _, _ = run(*args, "--format", "json")
    report = json.loads(out)
    assert status == 1 and len(report["tenants"]) == 2500 and len(report["findings"]) == 70
    cells = {(c["from"], c["to"]): c["packets"] for c in report["matrix"]}
    assert len(cells) == 2525 and all(cells[f"t{t}", f"t{t}"] == 4 for t in range(2500))


def test_roce_audit_of_2500_tenants_is_fast(tmp_path):
    """The same on RoCEv2, tenants by MAC and IP (took 104 s and 2.2 GB): each crossing into the next
    tenant is found and listed, well under 10 s."""
    paths = build_roce(tmp_path, 2500)
    t = time.perf_counter()
    status, out, _, peak = run("audit", paths["capture"], "--policy", paths["policy"], "--tenants", paths["tenants"])
    wall = time.perf_counter() - t
    assert status == 0 and out.startswith("PASS  5,025 packets, 25 findings, worst: attempt")
    assert wall < 10 and peak < 300, (wall, peak)
    assert all(f"  t{t} -> t{(t + 1) % 2500}: 1 packets / 90 bytes attempt" in out for t in range(99, 2500, 100))
