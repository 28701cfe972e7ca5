"""An IPv4 total length, IPv6 payload length or UDP length beyond the bytes the frame reports, as tshark 4.0
shows it (ibwire/report/packets/length_experts.py): the expert item under the length, the UDP length's
`(bogus, payload length n)`, in -V, -T json and -T ek, on crafted RoCEv2 and UDP frames (claimed lengths
past the frame, cut by a snap length, or right) and on the public capture whose 489 RoCEv2 frames claim 4 KB
datagrams in 243 bytes: their IP and UDP layers are tshark's, frame by frame; and a UDP datagram's summary
line says `[BAD UDP LENGTH …]` as tshark's Info column does."""

import json
import re
import subprocess

import pytest
from conftest import run_ibwire
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import PcapWriter
from test_tree_tshark import frames, sections
from test_tshark_shapes import run_tshark

from dissectors.ib import BTH

LAYERS = ("ip", "ipv6", "udp")
TITLES = ("Internet Protocol Version 4", "Internet Protocol Version 6", "User Datagram Protocol")
OWN = re.compile(r"  \[truncated: captured \d+ of \d+ bytes\]$")  # ibwire's own note
UCCL = "m3_rping_uccl_uccl-mini_p2p-test2_rdma-nccl2.pcap"


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    path = tmp_path_factory.mktemp("lengths") / "lengths.pcap"
    roce = BTH(opcode=4, destqp=0x11, psn=7) / Raw(b"\0" * 32 + b"\xde\xad\xbe\xef")
    body = Raw(bytes(range(60)))
    e = lambda: Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")  # noqa: E731
    v4, v6 = dict(src="10.0.0.1", dst="10.0.0.2"), dict(src="fe80::1", dst="fe80::2")
    packets = [
        e() / IP(**v4, len=1000) / UDP(sport=49152, dport=4791, len=980) / roce,
        e() / IP(**v4, len=1000) / UDP(sport=49152, dport=4791) / roce,
        e() / IP(**v4) / UDP(sport=49152, dport=4791, len=4000) / roce,
        e() / IPv6(**v6, plen=1000) / UDP(sport=49152, dport=4791, len=980) / roce,
        e() / IPv6(**v6, plen=1000) / UDP(sport=1234, dport=5000) / body,
        e() / IP(**v4) / UDP(sport=1234, dport=5000, len=200) / body,
        e() / IPv6(**v6) / UDP(sport=1234, dport=5000, len=69) / body,
        e() / IP(**v4) / UDP(sport=1234, dport=5000) / body,
    ]
    with PcapWriter(str(path), linktype=1) as w:
        for p in packets:
            w.write(p)
        data = bytes(e() / IP(**v4, len=1200) / UDP(sport=1234, dport=5000, len=1180) / Raw(b"x" * 1172))
        w.write_packet(data[:120], sec=1, usec=0, wirelen=len(data) - 100)  # claims 100 bytes past the wire
        w.write_packet(data[:120], sec=2, usec=0, wirelen=len(data))  # a snap length: whole on the wire
    return path


def _layers(doc: dict) -> dict:
    return {k: v for k, v in doc["_source"]["layers"].items() if k in LAYERS}


def _ek(text: str) -> list:
    return [{k: v for k, v in json.loads(x)["layers"].items() if k in LAYERS} for x in text.splitlines()[1::2]]


def _captures(crafted, public_dir):
    return [crafted, public_dir / UCCL]


def test_ip_and_udp_layers_are_tsharks(crafted, public_dir):
    for cap in _captures(crafted, public_dir):
        theirs = json.loads(run_tshark(cap, "-n", "-T", "json"))
        ours = json.loads(run_ibwire("decode", cap, "-T", "json", check=True).stdout)
        assert len(ours) == len(theirs)
        for n, (t, o) in enumerate(zip(theirs, ours), 1):
            assert _layers(o) == _layers(t), (cap.name, n)
        assert any("udp.length_tree" in x["_source"]["layers"].get("udp", {}) for x in ours)


def test_ek_ip_and_udp_objects_are_tsharks(crafted, public_dir):
    for cap in _captures(crafted, public_dir):
        theirs = _ek(run_tshark(cap, "-n", "-T", "ek"))
        ours = _ek(run_ibwire("decode", cap, "-T", "ek", check=True).stdout)
        assert ours == theirs, cap.name


def test_tree_ip_and_udp_sections_are_tsharks(crafted, public_dir):
    """-V: the IP, IPv6 and UDP sections line for line, indentation included."""
    for cap in _captures(crafted, public_dir):
        theirs = frames(run_tshark(cap, "-n", "-V"))
        ours = frames(run_ibwire("decode", cap, "-V", check=True).stdout)
        assert len(ours) == len(theirs)
        for n, (t, o) in enumerate(zip(theirs, ours), 1):
            for title in TITLES:
                assert sections(o).get(title) == sections(t).get(title), (cap.name, n, title)
        assert any("(bogus, payload length" in line for f in ours for line in f)


def test_udp_summary_lines_are_tsharks(crafted, tmp_path, tshark):
    """The summary line of a UDP datagram whose length exceeds its IP payload, or is below 8, holds tshark's
    Protocol and Info columns (`1234 → 5000 [BAD UDP LENGTH 200 > IP PAYLOAD LENGTH] Len=192`)."""
    short = tmp_path / "short.pcap"
    with PcapWriter(str(short), linktype=1) as w:
        w.write(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1234, dport=5000, len=4) / Raw(b"x" * 20))
    for cap in (crafted, short):
        argv = [tshark, "-n", "-r", str(cap), "-T", "fields", "-E", "separator=/t"]
        theirs = subprocess.run(argv + ["-e", "_ws.col.Protocol", "-e", "_ws.col.Info"], capture_output=True, text=True)
        ours = run_ibwire("decode", cap, check=True).stdout.splitlines()
        rows = [line.split("\t") for line in theirs.stdout.splitlines()]
        assert len(ours) == len(rows)
        udp = [(OWN.sub("", line), info) for line, (proto, info) in zip(ours, rows) if proto == "UDP"]
        assert udp and all(re.search(rf" UDP \d+  {re.escape(info)}$", line) for line, info in udp), udp
        assert any("[BAD UDP LENGTH" in info for _, info in udp)
