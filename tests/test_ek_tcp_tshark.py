"""TCP in -T ek as tshark 4.0 writes it (epan/print.c): frame by frame, the tcp layer's text is tshark's byte
for byte, on the lab's stream with a retransmission and a D-SACK, two public captures with TCP and the crafted
streams of test_tcp_tshark (handshakes, options, zero window, FINs, RST, ports reused, every analysis flag):
options under their own names (`tcp_options_nop`, protocols of their own), the same key again for each
option's kind and length, the flags true/false, null for the items without a value (`tcp_tcp_analysis`,
the expert items' own fields), expert items as `_ws_expert` objects, the flags' string in UTF-8.

Not yet (docs/tshark-output.md): `tcp.segment_data`, which tshark's reassembly adds; it is taken out of
tshark's line before comparing.
"""

import json
import re

import pytest
from conftest import run_ibwire
from test_tcp_tshark import ROOT, crafted
from test_tshark_shapes import run_tshark
from tshark_oracle import PUBLIC

PATHS = [
    ROOT / "captures" / "rxe-ud-send.pcap",
    PUBLIC / "m3_rping_uccl_uccl-mini_p2p-test2_rdma-nccl2.pcap",
    PUBLIC / "oferby_proxy_roce.pcap",
]
NOT_YET = re.compile(r',"tcp_tcp_segment_data":"[^"]*"')


def _tcp_texts(out: str) -> list:
    """Each document's tcp layer as written: (frame number, the text of its object or None)."""
    docs = []
    for line in out.splitlines():
        if line.startswith('{"index"'):
            continue
        number = json.loads(line)["layers"]["frame"]["frame_frame_number"]
        at = line.find('"tcp":{')
        if at < 0:
            docs.append((number, None))
            continue
        _, end = json.JSONDecoder().raw_decode(line, at + len('"tcp":'))
        docs.append((number, line[at:end]))
    return docs


def _same_tcp(path) -> list:
    theirs = _tcp_texts(run_tshark(path, "-n", "-T", "ek"))
    ours = _tcp_texts(run_ibwire("decode", path, "-T", "ek", check=True).stdout)
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
