"""The audit judges what is InfiniBand or RoCE and names the rest: a node's ordinary traffic (TCP of a job's
bootstrap, ARP, IPv6 neighbour discovery, LLDP, other UDP) is counted as out of scope by protocol, as tshark names
the protocols, and leaves a complete verdict; only an RDMA-looking frame that cannot be read makes the
evidence incomplete."""

import json
import subprocess
from collections import Counter
from pathlib import Path

from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6ND_NS, IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from scapy.utils import rdpcap, wrpcap

CAPS = Path(__file__).resolve().parents[1] / "captures"
CLEAN = [
    "--policy",
    CAPS / "roce-multitenant-clean.partitions.conf",
    "--tenants",
    CAPS / "roce-multitenant-clean.tenants.toml",
    "--format",
    "json",
]


def _host_traffic():
    mac = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    frames = [
        Ether(**mac)
        / IP(src="10.0.0.1", dst="10.0.0.2")
        / TCP(sport=40000 + i, dport=29500, flags="PA")
        / Raw(b"nccl-bootstrap" * 8)
        for i in range(12)
    ]
    frames += [
        Ether(**mac) / ARP(pdst="10.0.0.2"),
        Ether(**mac) / IPv6() / ICMPv6ND_NS(tgt="fe80::1"),
        Ether(src=mac["src"], dst="01:80:c2:00:00:0e", type=0x88CC) / Raw(b"\x02\x07\x04" + bytes(20)),
        Ether(**mac) / IP() / UDP(sport=40001, dport=40002) / Raw(b"q" * 30),
    ]
    return frames


def _mixed(tmp_path, extra):
    roce = list(rdpcap(str(CAPS / "roce-multitenant-clean.pcap")))
    for i, p in enumerate(extra):
        p.time = roce[-1].time + (i + 1) / 1000
    out = tmp_path / "node.pcap"
    wrpcap(str(out), roce + extra)
    return out, len(roce)


def test_host_traffic_is_out_of_scope_and_the_verdict_stays_complete(tmp_path):
    extra = _host_traffic()
    pcap, n_roce = _mixed(tmp_path, extra)
    r = run_ibwire("audit", pcap, *CLEAN)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    ev = doc["evidence"]
    assert doc["verdict"] == "PASS" and ev["complete"] and ev["undecodable"] == ev["damaged"] == 0
    assert ev["packets"] == n_roce and ev["other"] == len(extra)
    protocols = subprocess.run(
        ["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.protocols", "-Y", "not infiniband"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tshark = Counter(p.replace(":data", "").split(":")[-1] for p in protocols)
    assert ev["out_of_scope"] == dict(tshark)
    text = run_ibwire("audit", pcap, *CLEAN[:4])
    assert f"{len(extra)} frames out of scope" in text.stdout and "tcp 12" in text.stdout


def test_a_broken_rdma_frame_still_makes_the_evidence_incomplete(tmp_path):
    broken = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=49152, dport=4791) / Raw(b"\x04\x00")
    pcap, _ = _mixed(tmp_path, _host_traffic() + [broken])
    r = run_ibwire("audit", pcap, *CLEAN)
    ev = json.loads(r.stdout)["evidence"]
    assert r.returncode == 4 and ev["damaged"] == 1 and not ev["complete"]
