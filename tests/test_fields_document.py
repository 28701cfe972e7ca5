"""`-T fields -e` of fields that ibwire's own records and flat fields do not hold but its tshark-shaped
document does (tshark 4.0's layout of the Ethernet, IP and UDP headers; the InfiniBand headers, which tshark
prints as their bytes), each row byte-identical to tshark's `-T fields` on the same capture."""

from pathlib import Path

import pytest
from conftest import PUBLIC, run_ibwire, tshark_fields

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
