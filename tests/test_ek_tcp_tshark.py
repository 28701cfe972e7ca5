"""TCP in -T ek as tshark 4.0 writes it (epan/print.c): frame by frame, the tcp layer's text is tshark's byte
for byte, on the lab's stream with a retransmission and a D-SACK, two public captures with TCP and the crafted
streams of test_tcp_tshark (handshakes, options, zero window, FINs, RST, ports reused, every analysis flag):
options under their own names (`tcp_options_nop`, protocols of their own), the same key again for each
option's kind and length, the flags true/false, null for the items without a value (`tcp_tcp_analysis`,
the expert items' own fields), expert items as `_ws_expert` objects, the flags' string in UTF-8.  The same
rules on crafted ICMP and ICMPv6 messages: the headers an error carries and the Data as objects of their
own (`"ip":{…}`), the expert item of a bad checksum, ICMPv6's options.

Not yet (docs/tshark-output.md): `tcp.segment_data`, which tshark's reassembly adds; it is taken out of
tshark's line before comparing.
"""

import json
import re

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr, IPv6
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap
from test_tcp_tshark import ROOT, crafted
from test_tshark_shapes import run_tshark
from tshark_oracle import PUBLIC

PATHS = [
    ROOT / "captures" / "rxe-ud-send.pcap",
    PUBLIC / "m3_rping_uccl_uccl-mini_p2p-test2_rdma-nccl2.pcap",
    PUBLIC / "oferby_proxy_roce.pcap",
]
NOT_YET = re.compile(r',"tcp_tcp_segment_data":"[^"]*"')


def _layer_texts(out: str, layer: str = "tcp") -> list:
    """Each document's `layer` as written: (frame number, the text of its object or None)."""
    docs = []
    for line in out.splitlines():
        if line.startswith('{"index"'):
            continue
        number = json.loads(line)["layers"]["frame"]["frame_frame_number"]
        at = line.find(f'"{layer}":{{')
        if at < 0:
            docs.append((number, None))
            continue
        _, end = json.JSONDecoder().raw_decode(line, at + len(layer) + 3)
        docs.append((number, line[at:end]))
    return docs


def _same_tcp(path) -> list:
    theirs = _layer_texts(run_tshark(path, "-n", "-T", "ek"))
    ours = _layer_texts(run_ibwire("decode", path, "-T", "ek", check=True).stdout)
    assert [n for n, _ in ours] == [n for n, _ in theirs]
    shown = [(n, NOT_YET.sub("", t)) for n, t in theirs if t is not None]
    assert [(n, t) for n, t in ours if t is not None] == shown
    return [t for _, t in shown]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_ek_tcp_layer_is_tsharks(path, tshark):
    assert _same_tcp(path)


def test_ek_tcp_layer_is_tsharks_on_crafted_streams(tmp_path, tshark):
    path = tmp_path / "tcp.pcap"
    crafted(path)
    texts = _same_tcp(path)
    assert len(texts) >= 30
    for kind in ('"tcp_options_nop":', '"tcp_tcp_flags_syn":true', '"tcp_tcp_analysis":null', '"_ws_expert":{'):
        assert any(kind in t for t in texts), kind


def test_ek_icmp_layers_are_tsharks(tmp_path, tshark):
    path = tmp_path / "icmp.pcap"
    v4 = Ether() / IP(src="10.0.0.1", dst="10.0.0.2")
    v6 = Ether() / IPv6(src="fe80::1", dst="fe80::2")
    wrpcap(
        str(path),
        [
            v4 / ICMP() / b"ping",
            v4 / ICMP(chksum=0x1234) / b"ping",
            v4 / ICMP(type=3, code=3) / IP(src="10.0.0.2", dst="10.0.0.1") / UDP(sport=1, dport=4791) / (b"x" * 8),
            v6 / ICMPv6ND_NS(tgt="fe80::2") / ICMPv6NDOptSrcLLAddr(lladdr="b8:ce:f6:00:00:01"),
            v6 / ICMPv6EchoRequest(cksum=0x1111, data=b"ping"),
        ],
    )
    theirs, ours = run_tshark(path, "-n", "-T", "ek"), run_ibwire("decode", path, "-T", "ek", check=True).stdout
    for layer, count in (("icmp", 3), ("icmpv6", 2)):
        assert _layer_texts(ours, layer) == _layer_texts(theirs, layer)
        assert len([t for _, t in _layer_texts(theirs, layer) if t]) == count
