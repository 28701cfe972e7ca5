"""Benchmark: `ibwire stats` and `ibwire flows` against tshark and scapy on a 1,000,000-packet RoCEv2 capture.

    .venv/bin/python bench/analysis.py [--packets 1000000] [--tshark-packets 0] [--scapy-packets 5000]

Generates bench/out/roce-<N>.pcap once (bench/gen_roce.py, reused afterwards).  ibwire and tshark
(`-T fields` with the fields ibwire's records hold) run on the whole file (--tshark-packets N: only the
first N packets, `-c`); scapy (`rdpcap` with ibwire's dissectors bound, every field read) on the first
--scapy-packets, its rate extrapolated from that sample.  Every measurement is the fastest of three runs
(the build machine is shared).  Wall times, packets/second, the ratios and peak RSS are printed and
written to bench/out/results.json.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CAPS = HERE.parent / "captures"
sys.path.insert(0, str(HERE))
from gen_roce import generate  # noqa: E402

# `ibwire stats` uses one process per CPU on large pcap files (-j); `stats -j 1` is the single-process figure.
TSHARK_FIELDS = [
    "frame.number",
    "frame.time_epoch",
    "frame.cap_len",
    "frame.len",
    "eth.src",
    "eth.dst",
    "vlan.id",
    "ip.dsfield.ecn",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "udp.srcport",
    "udp.dstport",
    "infiniband.lrh.slid",
    "infiniband.lrh.dlid",
    "infiniband.lrh.sl",
    "infiniband.lrh.vl",
    "infiniband.grh.sgid",
    "infiniband.grh.dgid",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.immdt",
    "infiniband.ieth",
    "infiniband.mad.mgmtclass",
    "infiniband.mad.method",
    "infiniband.mad.status",
    "infiniband.mad.attributeid",
    "infiniband.mad.attributemodifier",
    "infiniband.mad.transactionid",
    "infiniband.invariant.crc",
    "infiniband.variant.crc",
]

# One packet of the generated traffic (QP 0x205's PSN 5010), looked for in the whole file by `decode -Y`
# and by `tshark -Y` with the same filter.
FIND_ONE = "bth.destqp == 0x000205 && bth.psn == 5010"

ENGINE_SNIPPET = """
import sys, time
from ibwire.decode.scan import scan
from ibwire.analyze.stats import compute_file
t = time.perf_counter()
compute_file(sys.argv[1], icrc=sys.argv[2] == "1")
print(time.perf_counter() - t)
"""

SCAPY_SNIPPET = """
import sys, time
import dissectors.layers  # noqa: F401  (loads the layers and binds them: UDP 4791 -> BTH ...)
from scapy.utils import rdpcap
t = time.perf_counter()
pkts = rdpcap(sys.argv[1], count=int(sys.argv[2]))
n = 0
for p in pkts:
    layer = p
    while layer:
        for f in layer.fields_desc:
            layer.getfieldval(f.name)
        layer = layer.payload
    n += 1
print(n, time.perf_counter() - t)
"""


REPEAT = 3


def best(cmd, stdout=subprocess.DEVNULL, ok=(0,)):
    """The fastest of REPEAT runs (the machine is shared: the minimum is the least disturbed one)."""
    return min((run(cmd, stdout, ok) for _ in range(REPEAT)), key=lambda r: r[0])


def run(cmd, stdout=subprocess.DEVNULL, ok=(0,)):
    """Wall time, CPU time (user+system), peak RSS (MB) and stdout of a child process."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE if stdout is None else stdout, stderr=subprocess.PIPE)
    out = p.stdout.read() if stdout is None else b""
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) not in ok:
        raise SystemExit(f"{cmd[0]} failed: {p.stderr.read().decode()[-2000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--tshark-packets", type=int, default=0, help="0: the whole capture")
    ap.add_argument("--scapy-packets", type=int, default=5_000)
    ap.add_argument("--capture", help="use this capture instead of generating one")
    args = ap.parse_args()
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    cap = Path(args.capture) if args.capture else out / f"roce-{args.packets}.pcap"
    if not cap.exists():
        t = time.perf_counter()
        generate(str(cap), args.packets)
        print(f"generated {cap} ({cap.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s")
    ibwire = shutil.which("ibwire", path=str(Path(sys.executable).parent)) or "ibwire"
    subprocess.run(["cat", str(cap)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    res = {"capture": str(cap), "packets": args.packets, "bytes": cap.stat().st_size, "cpus": os.cpu_count()}
    load_before = os.getloadavg()
    wall, cpu, _, _ = run([ibwire, "--help"])
    res["cli_startup_seconds"] = wall
    print(f"ibwire start-up (ibwire --help): {wall:.2f} s")
    bench_ibwire(res, ibwire, cap, out, args.packets)
    bench_engine(res, cap, args.packets)
    bench_tshark(res, cap, args.packets, args.tshark_packets)
    bench_scapy(res, cap, min(args.scapy_packets, args.packets))
    compare(res)
    res["load_average"] = [load_before, os.getloadavg()]
    print(f"load average before/after: {load_before[0]:.1f} / {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    (out / "results.json").write_text(json.dumps(res, indent=2))
    print(f"results in {out / 'results.json'}")


def bench_ibwire(res: dict, ibwire: str, cap: Path, out: Path, packets: int) -> None:
    """The ibwire commands on the whole capture, each the best of REPEAT runs, into `res` by name."""
    for name, cmd in (
        ("stats", [ibwire, "stats", str(cap), "--format", "json"]),
        ("stats -j 1", [ibwire, "stats", str(cap), "--format", "json", "-j", "1"]),
        ("stats --no-icrc", [ibwire, "stats", str(cap), "--format", "json", "--no-icrc"]),
        ("flows", [ibwire, "flows", str(cap), "--format", "json"]),
        ("export", [ibwire, "export", str(cap), "-o", str(out / "bench-export.parquet")]),
        ("decode -Y", [ibwire, "decode", str(cap), "-Y", FIND_ONE]),
        (
            "audit",
            [
                ibwire,
                "audit",
                str(cap),
                "--format",
                "json",
                "--policy",
                str(CAPS / "roce-multitenant-clean.partitions.conf"),
                "--tenants",
                str(CAPS / "roce-multitenant-clean.tenants.toml"),
            ],
        ),
    ):
        wall, cpu, rss, _ = best(cmd, ok=(0, 1))  # the audit exits 1 when it has findings
        res[name] = {
            "seconds": wall,
            "cpu_seconds": cpu,
            "pps": packets / wall,
            "pps_cpu": packets / cpu,
            "peak_rss_mb": rss,
        }
        print(
            f"ibwire {name:16s} {wall:7.2f} s ({cpu:.2f} s CPU)  {packets / wall:>10,.0f} pkt/s  peak RSS {rss:.0f} MB"
        )


def bench_engine(res: dict, cap: Path, packets: int) -> None:
    """The stats engine in this interpreter (ENGINE_SNIPPET), with and without ICRC checks."""
    for icrc in ("1", "0"):
        name = "engine" + ("" if icrc == "1" else " --no-icrc")
        _, _, rss, text = best([sys.executable, "-c", ENGINE_SNIPPET, str(cap), icrc], stdout=None)
        secs = float(text)
        res[name] = {"seconds": secs, "pps": packets / secs, "peak_rss_mb": rss}
        print(
            f"stats engine in-process{'' if icrc == '1' else ' --no-icrc'}: {secs:.2f} s  "
            f"{packets / secs:>10,.0f} pkt/s (without CLI start-up)"
        )


def bench_tshark(res: dict, cap: Path, packets: int, tshark_packets: int) -> None:
    """tshark -T fields with TSHARK_FIELDS on the first `tshark_packets` (0: all), and tshark -Y with
    the filter `decode -Y` ran (whole file), against which decode -Y's speed is stated."""
    n = min(tshark_packets or packets, packets)
    cmd = ["tshark", "-r", str(cap), "-T", "fields"] + (["-c", str(n)] if n < packets else [])
    for f in TSHARK_FIELDS:
        cmd += ["-e", f]
    wall, cpu, rss, _ = best(cmd)
    res["tshark"] = {
        "packets_measured": n,
        "seconds": wall,
        "cpu_seconds": cpu,
        "pps": n / wall,
        "pps_cpu": n / cpu,
        "peak_rss_mb": rss,
        "fields": len(TSHARK_FIELDS),
    }
    print(
        f"tshark -T fields ({len(TSHARK_FIELDS)} fields, {n:,} packets) {wall:.2f} s ({cpu:.2f} s CPU)"
        f"  {n / wall:>10,.0f} pkt/s  peak RSS {rss:.0f} MB"
    )

    wall, cpu, rss, found = run(
        ["tshark", "-r", str(cap), "-Y", " && ".join("infiniband." + part.strip() for part in FIND_ONE.split("&&"))],
        stdout=None,
    )
    res["tshark -Y"] = {"seconds": wall, "cpu_seconds": cpu, "peak_rss_mb": rss, "lines": len(found.splitlines())}
    print(f"tshark -Y (the same filter as decode -Y, whole file) {wall:.2f} s  peak RSS {rss:.0f} MB")
    res["decode -Y"]["vs_tshark_y"] = wall / res["decode -Y"]["seconds"]
    print(f"ibwire decode -Y        = {res['decode -Y']['vs_tshark_y']:5.1f}× faster than tshark -Y")


def bench_scapy(res: dict, cap: Path, m: int) -> None:
    """scapy's rdpcap and dissection of the first `m` packets (SCAPY_SNIPPET), the fastest of REPEAT."""
    got, secs = min(
        (run([sys.executable, "-c", SCAPY_SNIPPET, str(cap), str(m)], stdout=None)[3].split() for _ in range(REPEAT)),
        key=lambda x: float(x[1]),
    )
    res["scapy"] = {
        "packets_measured": int(got),
        "seconds": float(secs),
        "pps": int(got) / float(secs),
        "pps_cpu": int(got) / float(secs),
    }
    print(
        f"scapy rdpcap + dissection (first {m:,} packets) {float(secs):.2f} s  {int(got) / float(secs):>10,.0f} pkt/s"
    )


def compare(res: dict) -> None:
    """Each ibwire figure as a multiple of tshark's and scapy's packets per second (and per CPU second)."""
    for name in ("engine", "engine --no-icrc"):
        res[name]["vs_tshark"] = res[name]["pps"] / res["tshark"]["pps"]
        res[name]["vs_scapy"] = res[name]["pps"] / res["scapy"]["pps"]
        print(f"{name:23s} = {res[name]['vs_tshark']:5.1f}× tshark, {res[name]['vs_scapy']:6.0f}× scapy")
    for name in ("stats", "stats -j 1", "stats --no-icrc", "flows", "export", "audit"):
        r = res[name]
        r["vs_tshark"] = r["pps"] / res["tshark"]["pps"]
        r["vs_scapy"] = r["pps"] / res["scapy"]["pps"]
        r["vs_tshark_cpu"] = r["pps_cpu"] / res["tshark"]["pps_cpu"]
        print(
            f"ibwire {name:16s} = {r['vs_tshark']:5.1f}× tshark ({r['vs_tshark_cpu']:.1f}× per CPU second), "
            f"{r['vs_scapy']:6.0f}× scapy"
        )


if __name__ == "__main__":
    main()
