"""Benchmark: `ibwire stats --storage` (per-command NVMe-oF latency) against tshark computing the same
latencies (`-T fields -e nvme.cmd_latency -e nvme.fabrics.cmd_latency`).

    .venv/bin/python bench/storage.py [--repeat 3000]

The capture is the public NVMe-oF discovery capture (../shared/captures/public/m3_nvme_nvme-discover.pcap:
RDMA-CM setup, fabrics and admin commands, RDMA READ/WRITE transfers) repeated --repeat times, each copy
20 s after the previous, written once to bench/out/nvme-<N>.pcap.  Each measurement is the fastest of three
runs (the machine is shared); wall times, packets/second, the ratio and peak RSS go to
bench/out/storage.json."""

import argparse
import json
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PUBLIC = HERE.parent.parent / "shared" / "captures" / "public" / "m3_nvme_nvme-discover.pcap"


def repeated(src: Path, times: int, out: Path) -> int:
    """src (a microsecond little-endian pcap) `times` times over; the number of packets."""
    data = src.read_bytes()
    assert data[:4] == b"\xd4\xc3\xb2\xa1", f"{src} is not a little-endian microsecond pcap"
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


def best(cmd):
    """(wall seconds, peak RSS MB) of the fastest of three runs of `cmd`."""
    walls = []
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - t)
    return min(walls), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3000)
    a = ap.parse_args()
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    cap = out / f"nvme-x{a.repeat}.pcap"
    n = repeated(PUBLIC, a.repeat, cap)
    ibwire = shutil.which("ibwire", path=str(Path(sys.executable).parent)) or "ibwire"
    res = {"packets": n}
    res["ibwire"] = best([ibwire, "stats", "--storage", "--format", "json", str(cap)])
    tshark = shutil.which("tshark")
    if tshark:
        res["tshark"] = best(
            [tshark, "-r", str(cap), "-T", "fields", "-e", "nvme.cmd_latency", "-e", "nvme.fabrics.cmd_latency"]
        )
        res["ratio"] = res["tshark"][0] / res["ibwire"][0]
    for who in ("ibwire", "tshark"):
        if who in res:
            wall, rss = res[who]
            print(f"{who:7} {wall:7.2f} s  {n / wall:12,.0f} packets/s  peak RSS ≤ {rss:.0f} MB")
    if "ratio" in res:
        print(f"ibwire is {res['ratio']:.1f}x tshark")
    (out / "storage.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
