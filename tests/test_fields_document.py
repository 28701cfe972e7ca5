"""`-T fields -e` of fields that ibwire's own records and flat fields do not hold but its tshark-shaped
document does (tshark 4.0's layout of the Ethernet, IP and UDP headers; the InfiniBand headers, which tshark
prints as their bytes), each row byte-identical to tshark's `-T fields` on the same capture."""

import subprocess
from pathlib import Path

import pytest
from conftest import PUBLIC, tshark_fields
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

CAPS = Path(__file__).resolve().parents[1] / "captures"
FIELDS = (
    "infiniband.bth",
    "infiniband.grh",
    "infiniband.aeth",
    "infiniband.reth",
    "infiniband.lrh",
    "infiniband.deth",
    "ip.dsfield",
    "ip.flags",
    "ip.flags.df",
    "ip.frag_offset",
    "eth.src.oui",
    "eth.dst.lg",
    "eth.dst.ig",
    "udp.stream",
    "frame.encap_type",
)


@pytest.mark.parametrize(
    "capture",
    [
        PUBLIC / "m3_mlx_rocev1_test.pcap",
        PUBLIC / "scapy_roce_uts_cnp_cx4lx.pcap",
        CAPS / "roce-v6-vlan.pcap",
        CAPS / "rxe-rc-read.pcap",
        CAPS / "congestion-ib.pcap",
    ],
    ids=lambda p: p.name,
)
def test_document_fields_print_as_tshark_prints_them(capture, public_dir):
    want = tshark_fields(capture, *FIELDS)
    args = [a for f in FIELDS for a in ("-e", f)]
    got = run_ibwire("decode", capture, "-T", "fields", *args, check=True).stdout
    rows = [(line.split("\t") + [""] * len(FIELDS))[: len(FIELDS)] for line in got.splitlines()]
    assert len(rows) == len(want)
    for n, (a, b) in enumerate(zip(rows, want), 1):
        assert a == b, f"frame {n}: {dict((f, (x, y)) for f, x, y in zip(FIELDS, a, b) if x != y)}"


PROTOCOLS = ("frame", "eth", "vlan", "ip", "ipv6", "udp", "infiniband", "erf", "macc", "arp")


@pytest.mark.parametrize(
    "capture",
    [
        PUBLIC / "m3_mlx_rocev1_test.pcap",
        PUBLIC / "srinivas_infiniband.pcap",
        CAPS / "roce-v6-vlan.pcap",
        CAPS / "pfc-storm.pcap",
        CAPS / "ud-ipoib.pcap",
    ],
    ids=lambda p: p.name,
)
def test_protocols_print_as_tshark_prints_them(capture, public_dir):
    """`-e eth`, `-e ip`, `-e infiniband` …: the protocol's title where the dissector words one (`Ethernet II,
    Src: …, Dst: …`, `Frame 1: … bytes on wire …`, `Address Resolution Protocol (request)`), else its filter
    name (`infiniband`), as tshark 4.0's `-n -T fields` (ibwire resolves no names); before, `1`."""
    cmd = ["tshark", "-n", "-r", str(capture), "-T", "fields", *(a for p in PROTOCOLS for a in ("-e", p))]
    want = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    got = run_ibwire("decode", capture, "-T", "fields", *(a for p in PROTOCOLS for a in ("-e", p)), check=True)
    assert got.stdout == want
