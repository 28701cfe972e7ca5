"""Benchmark: each `ibwire decode` output against tshark writing the same, on one file.

    .venv/bin/python bench/outputs.py [FILE] [--repeat 3]

FILE defaults to the largest public capture.  Pairs: summary text (`decode` / `tshark -r`), jsonl and -T json
(`tshark -T json`), -T fields of common BTH fields (`tshark -T fields`), -V (`tshark -V`); output to
/dev/null, the best of --repeat runs each; prints seconds and tshark/ibwire ratios.
"""

import argparse
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT.parent / "shared" / "captures" / "public"
FIELDS = [
    a
    for f in ("frame.number", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn")
    for a in ("-e", f)
]
PAIRS = [
    ("text", [], []),
    ("jsonl", ["--format", "jsonl"], ["-T", "json"]),
    ("-T json", ["-T", "json"], ["-T", "json"]),
    ("-T fields", ["-T", "fields", *FIELDS], ["-T", "fields", *FIELDS]),
    ("-V", ["-V"], ["-V"]),
]


def best(cmd: list, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=str(max(PUBLIC.glob("*.pcap"), key=lambda p: p.stat().st_size)))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    ibwire, tshark = str(ROOT / ".venv" / "bin" / "ibwire"), shutil.which("tshark")
    print(f"{args.file}\n{'output':<10} {'ibwire s':>9} {'tshark s':>9} {'ratio':>6}")
    for name, ours, theirs in PAIRS:
        a = best([ibwire, "decode", args.file, *ours], args.repeat)
        b = best([tshark, "-n", "-r", args.file, *theirs], args.repeat)
        print(f"{name:<10} {a:9.3f} {b:9.3f} {b / a:6.2f}")


if __name__ == "__main__":
    main()
