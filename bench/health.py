"""Benchmark: `ibwire health` against tshark reading the same facts, on a RoCEv2 capture with PFC frames.

    .venv/bin/python bench/health.py [--packets 1000000] [--pfc-every 1000] [--rounds 3]

Generates bench/out/health-<N>.pcap once (bench/gen_roce.py's traffic, one PFC XOFF on priority 3 after
every --pfc-every packets).  ibwire runs `health -T json`; tshark prints the fields the same counts need
(`-T fields`: ECN, opcode, destination QP, UDP source port, DSCP, PCP, the PFC vector and pause times) and
Python counts them.  Both must agree on CE marks, CNPs, pause frames and distinct UDP source ports.  The two
run alternately, --rounds times (the machine is shared: each round's pair meets about the same load), after
the file is read once (a first round would otherwise meet a cold page cache and measure the disk); each
round gives the speed-up by wall time and by CPU time (user and system, which a loaded machine disturbs
less; the system time apart too), and the least of each is the bench's result; results go to
bench/out/health.json.  ibwire's modules are compiled to bytecode first, as an installation has them (a
module edited since its cache was written would otherwise be compiled again in every run).
"""

import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gen_roce import generate  # noqa: E402

from dissectors.dcbfacts import pfc_frame  # noqa: E402

FIELDS = [
    "ip.dsfield.ecn",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "udp.srcport",
    "ip.dsfield.dscp",
    "vlan.priority",
    "macc.cbfc.enbv",
    "macc.cbfc.pause_time.c3",
]


def with_pfc(src: Path, dst: Path, every: int) -> int:
    """Copy the pcap `src` to `dst` with a PFC XOFF (priority 3) after every `every` packets."""
    data = src.read_bytes()
    out, at, n, added = [data[:24]], 24, 0, 0
    pfc = pfc_frame(bytes.fromhex("020000009901"), {3: 0xFFFF})
    while at + 16 <= len(data):
        sec, usec, cap, wire = struct.unpack_from("<IIII", data, at)
        out.append(data[at : at + 16 + cap])
        at += 16 + cap
        n += 1
        if n % every == 0:
            out.append(struct.pack("<IIII", sec, usec, len(pfc), len(pfc)) + pfc)
            added += 1
    dst.write_bytes(b"".join(out))
    return added


def run(cmd):
    """Wall seconds, user and system CPU seconds and the output of one run of `cmd`."""
    t, u = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    v = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, v.ru_utime - u.ru_utime, v.ru_stime - u.ru_stime, out


def tshark_counts(text: str) -> dict:
    ce = cnps = pauses = 0
    ports = set()
    for line in text.splitlines():
        ecn, op, qp, sport, dscp, pcp, enbv = (line.split("\t") + [""] * 8)[:7]
        if enbv:
            pauses += 1
            continue
        if op:
            ce += ecn == "3" and op != "129"
            cnps += op == "129"
            if op != "129" and sport:
                ports.add(int(sport))
    return {"ce": ce, "cnps": cnps, "pauses": pauses, "srcports": len(ports)}


def ibwire_counts(doc: dict) -> dict:
    return {
        "ce": sum(c["ce_marked"] for c in doc["congestion"]),
        "cnps": sum(c["cnps"] for c in doc["congestion"]),
        "pauses": sum(e["frames"] for e in doc["pause"]),
        "srcports": doc["ecmp"]["distinct_srcports"],
    }


def fresh_bytecode():
    """Python's bytecode cache of ibwire's modules up to date, as an installation (pip compiles it) or a first
    run leaves it: under PYTHONDONTWRITEBYTECODE a module edited since its cache was written is compiled
    again in every run (analyze/health.py alone 8 ms of CPU)."""
    import compileall

    import dissectors
    import ibwire

    for pkg in (ibwire, dissectors):
        compileall.compile_dir(str(Path(pkg.__file__).parent), quiet=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--pfc-every", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    base, path = out / f"roce-{a.packets}.pcap", out / f"health-{a.packets}.pcap"
    if not base.exists():
        generate(str(base), a.packets)
    if not path.exists():
        with_pfc(base, path, a.pfc_every)
    fresh_bytecode()
    exe = str(Path(sys.executable).parent / "ibwire")
    ours_cmd = [exe, "health", str(path), "-T", "json"]
    theirs_cmd = ["tshark", "-r", str(path), "-T", "fields"] + [x for f in FIELDS for x in ("-e", f)]
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # both tools meet a warm cache
    rounds = []
    for _ in range(a.rounds):  # alternately, so that both tools meet the same load
        t_ib, user_ib, sys_ib, res = run(ours_cmd)
        ours = ibwire_counts(json.loads(res.stdout))
        t_ts, user_ts, sys_ts, res = run(theirs_cmd)
        theirs = tshark_counts(res.stdout)
        cpu_ib, cpu_ts = user_ib + sys_ib, user_ts + sys_ts
        rounds.append(
            {
                "ibwire_s": t_ib,
                "tshark_s": t_ts,
                "speedup": t_ts / t_ib,
                "ibwire_cpu_s": cpu_ib,
                "ibwire_system_s": sys_ib,  # (the part a loaded machine disturbs most: page faults, copies)
                "tshark_cpu_s": cpu_ts,
                "tshark_system_s": sys_ts,
                "speedup_per_cpu_s": cpu_ts / cpu_ib,
                "load_average": os.getloadavg()[0],
                "agree": ours == theirs,
            }
        )
        print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
    result = {
        "packets": a.packets,
        "rounds": rounds,
        "least_speedup": min(r["speedup"] for r in rounds),
        "least_speedup_per_cpu_s": min(r["speedup_per_cpu_s"] for r in rounds),
        "ibwire": ours,
        "tshark": theirs,
        "agree": all(r["agree"] for r in rounds),
    }
    print(json.dumps(result, indent=1))
    (out / "health.json").write_text(json.dumps(result, indent=1))
    sys.exit(0 if result["agree"] else 1)


if __name__ == "__main__":
    main()
