"""Benchmark: `ibwire stats --storage` (per-command NVMe-oF and per-call NFS over RDMA latency) against
tshark computing the same latencies, on a million packets.

    .venv/bin/python bench/storage.py [--packets 1000000] [--rounds 3]

Three captures, each a sample repeated until it holds --packets packets, each copy 20 s after the
previous, written once to bench/out/:

- discover: ../shared/captures/public/m3_nvme_nvme-discover.pcap (RDMA-CM setup, fabrics and admin
  commands, RDMA READ/WRITE transfers); tshark: `-e nvme.cmd_latency -e nvme.fabrics.cmd_latency`;
- host-echo: m3_nvme_host-echo_dump.pcap with `-d nvme-rdma` (no RDMA-CM setup; 4,160-byte capsules in
  SEND First/Middle/Last).  tshark 4.0 has no decode-as for NVMe-oF on InfiniBand, so it finds no latency
  there: its time is what reading the capture with the same fields costs it, not the same work;
- nfs: captures/nfs-rdma.pcap (RDMA-CM setup for port 20049, NFSv3 GETATTR, READ into write chunks, WRITE
  from read chunks, NFSv4 COMPOUND); tshark: `-e rpc.time -e rpc.repframe`, which it fills only where it
  finds a reply's call: on RoCE it keeps RPC conversations per direction and finds none (docs/storage.md),
  so again its time is what decoding every call and reply costs it.

ibwire runs as the table (every command followed, the first 20 rows shown) and as --format json (every
command written).  Each program runs --rounds times, alternately; the fastest round counts (the machine
is shared).  Printed and written to bench/out/storage.json: wall and CPU seconds, packets/second, peak RSS,
the ratios to tshark, and the load average before and after."""

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PUBLIC = HERE.parent.parent / "shared" / "captures" / "public"
CAPTURES = HERE.parent / "captures"
CASES = {
    "discover": (PUBLIC / "m3_nvme_nvme-discover.pcap", []),
    "host-echo": (PUBLIC / "m3_nvme_host-echo_dump.pcap", ["-d", "nvme-rdma"]),
    "nfs": (CAPTURES / "nfs-rdma.pcap", []),
}
# what tshark computes of the same: each command's or call's latency
FIELDS = {
    "discover": ["nvme.cmd_latency", "nvme.fabrics.cmd_latency"],
    "host-echo": ["nvme.cmd_latency", "nvme.fabrics.cmd_latency"],
    "nfs": ["rpc.time", "rpc.repframe"],
}


def repeated(src: Path, times: int, out: Path) -> int:
    """src (a little-endian pcap, microsecond or nanosecond) `times` times over; the number of packets."""
    data = src.read_bytes()
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"), f"{src} is not a little-endian pcap"
    recs, off = [], 24
    while off + 16 <= len(data):
        ts, us, caplen, wirelen = struct.unpack_from("<IIII", data, off)
        recs.append((ts, us, data[off + 16 : off + 16 + caplen], wirelen))
        off += 16 + caplen
    with open(out, "wb") as f:
        f.write(data[:24])
        for k in range(times):
            for ts, us, body, wirelen in recs:
                f.write(struct.pack("<IIII", ts + 20 * k, us, len(body), wirelen) + body)
    return len(recs) * times


def packets_in(src: Path) -> int:
    data, n, off = src.read_bytes(), 0, 24
    while off + 16 <= len(data):
        off += 16 + struct.unpack_from("<I", data, off + 8)[0]
        n += 1
    return n


def run(cmd) -> dict:
    """Wall and CPU seconds and peak RSS (MB) of one run of `cmd`, its output thrown away."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, use = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    assert os.waitstatus_to_exitcode(status) == 0, f"{cmd} failed"
    return {"wall": wall, "cpu": use.ru_utime + use.ru_stime, "rss_mb": use.ru_maxrss / 1024}


def best(runs: list) -> dict:
    """The fastest round's wall, the least CPU, the largest peak RSS."""
    return {
        "wall": min(r["wall"] for r in runs),
        "cpu": min(r["cpu"] for r in runs),
        "rss_mb": max(r["rss_mb"] for r in runs),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    ibwire = shutil.which("ibwire", path=str(Path(sys.executable).parent)) or "ibwire"
    tshark = shutil.which("tshark")
    res = {"load_before": os.getloadavg(), "cases": {}}
    for case, (src, declare) in CASES.items():
        name = src.name
        times = math.ceil(a.packets / packets_in(src))
        cap = out / f"{case}-x{times}.pcap"
        n = repeated(src, times, cap)
        cmds = {
            "ibwire table": [ibwire, "stats", "--storage", *declare, str(cap)],
            "ibwire json": [ibwire, "stats", "--storage", "--format", "json", *declare, str(cap)],
        }
        if tshark:
            fields = [a for f in FIELDS[case] for a in ("-e", f)]
            cmds["tshark"] = [tshark, "-r", str(cap), "-T", "fields", *fields]
        runs = {who: [] for who in cmds}
        for _ in range(a.rounds):
            for who, cmd in cmds.items():
                runs[who].append(run(cmd))
        got = res["cases"][case] = {"packets": n, **{who: best(r) for who, r in runs.items()}}
        print(f"{case}: {n:,} packets ({name} x {times}{' ' + ' '.join(declare) if declare else ''})")
        for who in cmds:
            b = got[who]
            line = f"  {who:12} {b['wall']:6.2f} s wall {b['cpu']:6.2f} s CPU {n / b['wall']:11,.0f} packets/s"
            line += f"  peak RSS {b['rss_mb']:4.0f} MB"
            if who != "tshark" and "tshark" in got:
                b["ratio_wall"] = got["tshark"]["wall"] / b["wall"]
                b["ratio_cpu"] = got["tshark"]["cpu"] / b["cpu"]
                line += f"  {b['ratio_wall']:5.1f}x tshark wall, {b['ratio_cpu']:5.1f}x CPU"
            print(line)
    res["load_after"] = os.getloadavg()
    print(
        "load average before: {:.2f} {:.2f} {:.2f}, after: {:.2f} {:.2f} {:.2f}".format(
            *res["load_before"], *res["load_after"]
        )
    )
    (out / "storage.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
