"""Benchmark: `ibwire capture --vf 2` against dumpcap alone, on the same burst through the same lab mirror.

    .venv/bin/python bench/capture.py [--packets 200000] [--rounds 2]      (as root: namespaces, veth, tc)

Builds a lab (`ibwire lab up`, private prefix and run directory), writes a burst of RoCEv2 packets from VF 2
to the remote host, and for each round sends it with tcpreplay at top speed from VF 2 twice: once captured by
`ibwire capture --vf 2` (arming, BPF, dumpcap, disarm), once by dumpcap alone on a tc mirror of VF 2's
representor armed here by hand, with the same BPF filter and buffer.  ibwire runs twice per round: into a
.pcapng (dumpcap writes the file) and into a .pcap (dumpcap's pcapng rewritten by ibwire as nanosecond pcap).
Prints the load average before and after, and per tool and round the packets sent, the VF's counters, the packets
in the file (capinfos), the drops and the captured packets per second of the burst (packets in the file /
tcpreplay's sending time); the best round and the median of each, and ibwire's rates relative to dumpcap's.
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from ibwire.capture.dumpcap import DEFAULT_BUFFER_MIB  # noqa: E402
from ibwire.capture.identity import Identity  # noqa: E402
from ibwire.lab import traffic  # noqa: E402

PREFIX = f"ibwb{os.getpid() % 100000}"
CLI = [sys.executable, "-c", "from ibwire.cli import main; main()"]
PF = ["ip", "netns", "exec", f"{PREFIX}-pf"]


def sh(*args, **kw):
    return subprocess.run(list(args), capture_output=True, text=True, **kw)


def rep_packets() -> int:
    return int(sh(*PF, "cat", "/sys/class/net/pf0vf2/statistics/rx_packets").stdout)


def replay(pcap: str) -> float:
    """Send the burst from VF 2; tcpreplay's own sending time in seconds."""
    r = sh("ip", "netns", "exec", f"{PREFIX}-vf2", "tcpreplay", "--topspeed", "-i", "eth0", pcap)
    m = re.search(r"sent in ([\d.]+) seconds", r.stdout)
    if r.returncode or not m:
        sys.exit(f"tcpreplay failed: {r.stderr or r.stdout}")
    return float(m.group(1))


def wait_for(p, prefix: str) -> str:
    text = ""
    for line in p.stderr:
        text += line
        if line.startswith(prefix):
            return text
    sys.exit("capture did not start:\n" + text)


def in_file(path: str) -> int:
    """Packets in the capture file, as Wireshark's capinfos counts them."""
    r = sh("capinfos", "-M", "-c", path)
    return int(r.stdout.split("Number of packets:")[1].split()[0])


def with_ibwire(env, pcap: str, out: str) -> dict:
    p = subprocess.Popen(PF + CLI + ["capture", "--vf", "2", "-w", out], env=env, stderr=subprocess.PIPE, text=True)
    wait_for(p, "ibwire: capturing ")
    before = rep_packets()
    secs = replay(pcap)
    counted = rep_packets() - before
    p.send_signal(signal.SIGINT)
    err = p.stderr.read()
    p.wait()
    m = re.search(r"captured ([\d,]+) .*backend drops: ([\d,]+)", err)
    if not m:
        sys.exit("ibwire capture failed:\n" + err)
    return {"captured": in_file(out), "drops": int(m.group(2).replace(",", "")), "counted": counted, "seconds": secs}


def with_dumpcap(bpf: str, pcap: str, out: str) -> dict:
    """dumpcap alone on a hand-armed mirror of pf0vf2's ingress (as ibwire arms it) to a veth pair."""
    sh(*PF, "ip", "link", "add", "benchmon0", "type", "veth", "peer", "name", "benchmon1")
    for d in ("benchmon0", "benchmon1"):
        sh(*PF, "sysctl", "-qw", f"net.ipv6.conf.{d}.disable_ipv6=1")
        sh(*PF, "ip", "link", "set", d, "up")
    sh(*PF, "tc", "qdisc", "add", "dev", "pf0vf2", "clsact")
    sh(
        *PF,
        "tc",
        "filter",
        "add",
        "dev",
        "pf0vf2",
        "ingress",
        "protocol",
        "all",
        "u32",
        "match",
        "u32",
        "0",
        "0",
        "action",
        "mirred",
        "egress",
        "mirror",
        "dev",
        "benchmon0",
    )
    try:
        p = subprocess.Popen(
            PF + ["dumpcap", "-i", "benchmon1", "-B", str(DEFAULT_BUFFER_MIB), "-f", bpf, "-n", "-w", out],
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(p, "File: ")
        before = rep_packets()
        secs = replay(pcap)
        counted = rep_packets() - before
        time.sleep(0.5)  # as ibwire does before its SIGINT: the last ring block reaches the file
        p.send_signal(signal.SIGINT)
        err = p.stderr.read()
        p.wait()
    finally:
        sh(*PF, "tc", "qdisc", "del", "dev", "pf0vf2", "clsact")
        sh(*PF, "ip", "link", "del", "benchmon0")
    m = re.search(r"Packets received/dropped on interface .*?: (\d+)/(\d+)", err)
    return {"captured": in_file(out), "drops": int(m.group(2)), "counted": counted, "seconds": secs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)", flush=True)
    tools = {"ibwire": ".pcapng", "ibwire-pcap": ".pcap", "dumpcap": ".pcapng"}
    with tempfile.TemporaryDirectory(prefix="ibwire-capbench-") as tmp:
        env = dict(os.environ, IBWIRE_RUN_DIR=tmp)
        r = subprocess.run(CLI + ["lab", "up", "--prefix", PREFIX], env=env, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"lab up failed: {r.stderr}")
        try:
            lab = json.loads(Path(tmp, f"lab-{PREFIX}.json").read_text())
            pcap = traffic.write_burst(lab, "vf2", "remote", a.packets, os.path.join(tmp, "burst.pcap"))
            vf2 = lab["vfs"][2]
            bpf = Identity(macs=[vf2["mac"]], ips=vf2["ips"]).bpf()  # the filter ibwire compiles for VF 2
            results = {t: [] for t in tools}
            for rnd in range(a.rounds):
                for tool, ext in tools.items():
                    out = os.path.join(tmp, tool + ext)
                    res = with_dumpcap(bpf, pcap, out) if tool == "dumpcap" else with_ibwire(env, pcap, out)
                    res["rate"] = res["captured"] / res["seconds"]
                    results[tool].append(res)
                    os.unlink(out)
                    print(
                        f"round {rnd + 1} {tool + ' ' + ext:<20} sent {a.packets:,}  VF counters {res['counted']:,}  "
                        f"in the file {res['captured']:,}  drops {res['drops']:,}  {res['rate']:,.0f} packets/s",
                        flush=True,
                    )
        finally:
            subprocess.run(CLI + ["lab", "down", "--prefix", PREFIX, "--force"], env=env, capture_output=True)
    best = {t: max(rs, key=lambda x: x["rate"]) for t, rs in results.items()}
    print(
        f"\nbest of {a.rounds}: "
        + "; ".join(f"{t} {b['rate']:,.0f} packets/s, {b['drops']} drops" for t, b in best.items())
    )
    print(
        f"ibwire/dumpcap = {best['ibwire']['rate'] / best['dumpcap']['rate']:.3f} (.pcapng), "
        f"{best['ibwire-pcap']['rate'] / best['dumpcap']['rate']:.3f} (.pcap)"
    )
    med = {t: statistics.median(x["rate"] for x in rs) for t, rs in results.items()}
    print(f"median of {a.rounds}: " + "; ".join(f"{t} {m:,.0f} packets/s" for t, m in med.items()))
    print(
        f"ibwire/dumpcap, medians = {med['ibwire'] / med['dumpcap']:.3f} (.pcapng), "
        f"{med['ibwire-pcap'] / med['dumpcap']:.3f} (.pcap)"
    )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
