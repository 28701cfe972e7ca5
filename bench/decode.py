"""Benchmark: every `ibwire decode` output against tshark writing the same, on the same files in one run.

    .venv/bin/python bench/decode.py [--packets 1000000] [--mad-packets 100000] [--repeat 3] [--only json,-V]

Files: bench/out/roce-<N>.pcap (bench/gen_roce.py, RoCEv2 RC traffic) and bench/out/sm-sweep-<M>.pcap
(captures/sm-sweep.pcap, an SM's sweep of SMPs, repeated to M packets).  On each file, output to /dev/null:
summary lines (`tshark -r`), the complete jsonl and `-T json` (both against `tshark -T json`), `-T fields`
of FIELDS, `-V` and `-T ek`, each against tshark doing the same.  ibwire's time is the best of --repeat runs
after a first one (`first_run`) that starts with no kept programs (an empty IBWIRE_CACHE: it learns them and
keeps them for the others, ibwire.report.packets.learned_store), tshark's of one run (minutes on the large
file); ibwire's modules are byte-compiled first.  Also: the time to the first line on a pipe, and peak RSS.
Results go to bench/out/decode.json.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from analysis import run  # noqa: E402
from gen_roce import generate  # noqa: E402

FIELDS = [
    a
    for f in ("frame.number", "infiniband.lrh.dlid", "infiniband.bth.opcode", "infiniband.bth.destqp")
    + ("infiniband.bth.psn", "infiniband.mad.attributeid")
    for a in ("-e", f)
]
OUTPUTS = (  # (label, ibwire decode's arguments, tshark's)
    ("text", [], []),
    ("jsonl", ["-T", "jsonl"], ["-T", "json"]),
    ("json", ["-T", "json"], ["-T", "json"]),
    ("fields", ["-T", "fields", *FIELDS], ["-T", "fields", *FIELDS]),
    ("-V", ["-V"], ["-V"]),
    ("ek", ["-T", "ek"], ["-T", "ek"]),
)


def mad_heavy(path: Path, packets: int) -> None:
    """captures/sm-sweep.pcap repeated (times shifted on) to `packets` frames."""
    from ibwire.files import iter_frames
    from ibwire.files.writers import PcapWriter

    frames = list(iter_frames(str(ROOT / "captures" / "sm-sweep.pcap")))
    span = frames[-1].time - frames[0].time + 1e-3
    with PcapWriter(str(path), frames[0].linktype, nanos=True) as w:
        for i in range(packets):
            f = frames[i % len(frames)]
            w.write(f.data, f.time + (i // len(frames)) * span, f.wirelen, flush=False)


def first_line(cmd) -> float:
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    p.stdout.readline()
    took = time.perf_counter() - t
    p.kill()
    p.wait()
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--mad-packets", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", help="outputs to time, comma-separated (text,jsonl,json,fields,-V,ek)")
    args = ap.parse_args()
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    roce = out / f"roce-{args.packets}.pcap"
    if not roce.exists():
        generate(str(roce), args.packets)
    mad = out / f"sm-sweep-{args.mad_packets}.pcap"
    if not mad.exists():
        mad_heavy(mad, args.mad_packets)
    ibwire = shutil.which("ibwire", path=str(Path(sys.executable).parent)) or "ibwire"
    # byte-compiled first, as an installed package is (an editable install under PYTHONDONTWRITEBYTECODE
    # would otherwise compile ibwire's modules from source at every start)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "ibwire"), str(ROOT / "dissectors")],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    res = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    for name, cap, n in (("roce", roce, args.packets), ("mad", mad, args.mad_packets)):
        subprocess.run(["cat", str(cap)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        r = res[name] = {"capture": str(cap), "packets": n}
        tshark_runs = {}
        for label, ours, theirs in OUTPUTS:
            if args.only and label not in args.only.split(","):
                continue
            ours, theirs = [ibwire, "decode", str(cap), *ours], ["tshark", "-n", "-r", str(cap), *theirs]
            with tempfile.TemporaryDirectory(prefix="ibwire-bench-cache-") as cache:
                os.environ["IBWIRE_CACHE"] = cache  # (the output's programs learned by its first run, then kept)
                w_first, cpu_first, _, _ = run(ours)
                w_ours, cpu_ours, rss_ours, _ = min((run(ours) for _ in range(args.repeat)), key=lambda x: x[0])
            if tuple(theirs) not in tshark_runs:  # jsonl and -T json are both measured against tshark -T json
                tshark_runs[tuple(theirs)] = run(theirs)
            w_t, cpu_t, rss_t, _ = tshark_runs[tuple(theirs)]
            r[label] = {
                "ibwire_seconds": w_ours,
                "ibwire_cpu": cpu_ours,
                "ibwire_rss_mb": rss_ours,
                "tshark_seconds": w_t,
                "tshark_cpu": cpu_t,
                "tshark_rss_mb": rss_t,
                "vs_tshark": w_t / w_ours,
                "vs_tshark_cpu": cpu_t / cpu_ours,
                "first_run": {"ibwire_seconds": w_first, "ibwire_cpu": cpu_first, "vs_tshark": w_t / w_first},
            }
            print(
                f"{name:5s} {n:>9,} pkts  decode {label:9s} {w_ours:7.2f} s ({rss_ours:.0f} MB)   "
                f"tshark {' '.join(theirs[4:6]) or 'text':9s} {w_t:7.2f} s ({rss_t:.0f} MB)   "
                f"= {w_t / w_ours:5.1f}× tshark ({cpu_t / cpu_ours:.1f}× per CPU second; "
                f"first run {w_first:.2f} s, {w_t / w_first:.1f}×)",
                flush=True,
            )
        os.environ.pop("IBWIRE_CACHE", None)
        r["first_line_seconds"] = min(first_line([ibwire, "decode", str(cap)]) for _ in range(args.repeat))
        print(f"{name:5s} first line of `ibwire decode` after {r['first_line_seconds']:.2f} s", flush=True)
    res["load_after"] = os.getloadavg()[0]
    print(f"load average before/after: {res['load_before']:.1f} / {res['load_after']:.1f} on {os.cpu_count()} CPUs")
    (out / "decode.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
