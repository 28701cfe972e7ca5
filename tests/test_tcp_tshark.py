"""TCP as tshark 4.0 shows it (issue 27): on every capture with TCP (the Soft-RoCE lab's perftest and rdma_cm
side channels, the public captures with TCP next to RoCE), frame by frame, the -T json tcp layer equals
tshark's key for key in its order and nesting (stream index, relative numbers, completeness, flags and their
expert items, window scaling, options, timestamps, SEQ/ACK analysis, payload); the -V lines are tshark's.  tshark's per-stream state is its single pass over the whole capture, as here.

Not yet (docs/tshark-output.md): what tshark's reassembly adds to a segment (`tcp.segment_data`); NOT_YET drops
it from tshark's side.
"""

import json
import re
from pathlib import Path

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap
from test_tshark_shapes import run_tshark
from tshark_oracle import PUBLIC

from ibwire.report.packets.tcp_doc import heading, title

ROOT = Path(__file__).resolve().parents[1]
LAB = [p for p in sorted((ROOT / "captures").glob("rxe-*.pcap")) if p.name != "rxe-rdma-cm.pcap"]  # (RDMA CM: no TCP)
CAPTURES = LAB + [
    PUBLIC / name
    for name in (
        "m3_rdma-write-read_ibdump_read2.pcap",  # SMB2 over TCP, the capture starting mid-stream
        "m3_rping_uccl_uccl-mini_p2p-test2_rdma-nccl2.pcap",  # ECN flags in the SYNs, a FIN from each side
        "oferby_proxy_roce.pcap",  # no TCP timestamps, window scale 7
    )
]
NOT_YET = {"tcp.segment_data"}
NOT_YET_LINES = re.compile(r"TCP segment data")


def _layers(text: str) -> list:
    return [dict(dict(dict(p)["_source"])["layers"]) for p in json.loads(text, object_pairs_hook=lambda p: p)]


def _shown(items: list) -> list:
    """A tcp layer without what ibwire does not show yet."""
    return [(k, _shown(v) if isinstance(v, list) else v) for k, v in items if k not in NOT_YET]


def _frames_with_tcp(path):
    theirs = _layers(run_tshark(path, "-n", "-T", "json"))
    ours = _layers(run_ibwire("decode", path, "-T", "json", check=True).stdout)
    assert len(ours) == len(theirs)
    return [(dict(t["frame"])["frame.number"], t["tcp"], o.get("tcp")) for t, o in zip(theirs, ours) if "tcp" in t]


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_json_tcp_layer_is_tsharks(path, tshark):
    """-T json: each frame's tcp layer is tshark's, item for item (values as tshark's text)."""
    frames = _frames_with_tcp(path)
    assert frames
    for number, theirs, ours in frames:
        assert ours == _shown(theirs), number


def crafted(path: Path) -> None:
    """Streams the lab does not show: over IPv6 with window scaling offered by one side only and the options
    padded with EOL, a zero window, both FINs, the ports reused with a new ISN; over IPv4 one seen from the
    middle (no SYN: scaling unknown, numbers relative to one before the first) and reset."""
    c, s = "fd00::1", "fd00::2"
    v6, v4 = lambda a, b: Ether() / IPv6(src=a, dst=b), lambda a, b: Ether() / IP(src=a, dst=b)
    frames = [
        v6(c, s)
        / TCP(
            sport=40000,
            dport=9999,
            flags="S",
            seq=1000,
            options=[("MSS", 1440), ("NOP", None), ("WScale", 7), ("SAckOK", b""), ("EOL", None)],
        ),
        v6(s, c) / TCP(sport=9999, dport=40000, flags="SA", seq=5000, ack=1001, options=[("MSS", 1440)]),
        v6(c, s) / TCP(sport=40000, dport=9999, flags="A", seq=1001, ack=5001),
        v6(c, s) / TCP(sport=40000, dport=9999, flags="PA", seq=1001, ack=5001) / Raw(b"abc"),
        v6(s, c) / TCP(sport=9999, dport=40000, flags="A", seq=5001, ack=1004, window=0),
        v6(c, s) / TCP(sport=40000, dport=9999, flags="FA", seq=1004, ack=5001),
        v6(s, c) / TCP(sport=9999, dport=40000, flags="FA", seq=5001, ack=1005),
        v6(c, s) / TCP(sport=40000, dport=9999, flags="A", seq=1005, ack=5002),
        v4("10.0.0.1", "10.0.0.2") / TCP(sport=1, dport=2, flags="PA", seq=77, ack=99) / Raw(b"hello"),
        v4("10.0.0.2", "10.0.0.1") / TCP(sport=2, dport=1, flags="A", seq=99, ack=82),
        v4("10.0.0.1", "10.0.0.2") / TCP(sport=1, dport=2, flags="R", seq=82),
        v6(c, s) / TCP(sport=40000, dport=9999, flags="S", seq=9000),
        *analysed(),
    ]
    for i, f in enumerate(frames[:12]):
        f.time = 1700000000 + i / 1000
    wrpcap(str(path), frames)


def analysed() -> list:
    """A stream with every analysis flag but the ports reused: a segment not captured, one out of order, a
    retransmission (its RTO), the receiver's window filled, a spurious retransmission, duplicate ACKs, the
    SYN again; a zero window, its probe and the probe's ACK, a window update, a keep-alive and its ACK, an
    ACK of data not seen."""
    a, b = "10.0.0.3", "10.0.0.4"
    c = lambda **k: Ether() / IP(src=a, dst=b) / TCP(sport=40002, dport=9999, **k)
    s = lambda **k: Ether() / IP(src=b, dst=a) / TCP(sport=9999, dport=40002, **k)
    data = lambda seq, n=10: c(flags="PA", seq=seq, ack=901) / Raw(b"x" * n)
    frames = [c(flags="S", seq=100), s(flags="SA", seq=900, ack=101), c(flags="A", seq=101, ack=901)]
    frames += [data(101), data(121), data(111), data(101), s(flags="A", seq=901, ack=131, window=10), data(131)]
    frames += [s(flags="A", seq=901, ack=111), data(101), *(s(flags="A", seq=901, ack=141) for _ in range(3))]
    frames += [data(141)]
    frames += [s(flags="A", seq=901, ack=151, window=0), data(151, 1), s(flags="A", seq=901, ack=151, window=0)]
    frames += [s(flags="A", seq=901, ack=151, window=500), c(flags="A", seq=150, ack=901)]
    frames += [s(flags="A", seq=901, ack=151, window=500), s(flags="A", seq=901, ack=900), c(flags="S", seq=100)]
    gaps = {2: 0.01, 4: 0.0001, 5: 0.0001, 6: 0.5, len(frames) - 1: 1}  # s: the handshake's RTT sets the rest
    at = 1700000100.0
    for i, f in enumerate(frames):
        at += gaps.get(i, 0.001)
        f.time = at
    return frames


def test_json_tcp_layer_is_tsharks_on_crafted_streams(tmp_path, tshark):
    """The crafted streams (crafted()): each frame's tcp layer is tshark's."""
    path = tmp_path / "tcp.pcap"
    crafted(path)
    frames = _frames_with_tcp(path)
    assert len(frames) == 12 + len(analysed())
    for number, theirs, ours in frames:
        assert ours == _shown(theirs), number


def test_json_tcp_analysis_is_tsharks_on_a_lost_segment(tshark):
    """The capture with a retransmitted segment and a D-SACK: the ACK of the retransmission, bytes in flight
    across it and the SACK option's relative edges are tshark's."""
    frames = dict((n, o) for n, _, o in _frames_with_tcp(ROOT / "captures" / "rxe-ud-send.pcap"))
    sack = dict(dict(dict(frames["44"])["tcp.options_tree"])["tcp.options.sack_tree"])
    assert (sack["tcp.options.sack_le"], sack["tcp.options.sack_re"], sack["tcp.options.sack.dsack_le"]) == (
        "351",
        "459",
        "351",
    )
    assert dict(dict(frames["44"])["tcp.analysis"])["tcp.analysis.acks_frame"] == "43"


def _tcp_section(lines: list) -> list:
    """The lines of a -V frame's TCP layer, its title first."""
    out, inside = [], False
    for line in lines:
        if not line.startswith(" "):
            inside = line.startswith("Transmission Control Protocol") or line == "tcp"
        if inside and line.strip():
            out.append(line)
    return out


def _frames(text: str) -> list:
    return [f.splitlines() for f in re.split(r"\n(?=Frame \d+: )", text)]


def _expert_titles(items: list, out: list) -> list:
    for k, v in items:
        if isinstance(v, list):
            if k == "_ws.expert":
                out.append(title(k, v))
            _expert_titles(v, out)
    return out


def test_tree_titles_are_tsharks(tshark):
    """The layer's title (`Transmission Control Protocol, Src Port: …, Seq: …, Ack: …, Len: …`), the
    `[SEQ/ACK analysis]` and the expert items' titles are worded as tshark words them, frame by frame."""
    for path in CAPTURES:
        theirs = [_tcp_section(f) for f in _frames(run_tshark(path, "-n", "-V"))]
        docs = _layers(run_ibwire("decode", path, "-T", "json", check=True).stdout)
        for t, doc in zip(theirs, docs):
            if not t:
                continue
            ours = doc["tcp"]
            assert heading(ours) == t[0]
            analysis = [x.strip() for x in t if x.strip() == "[SEQ/ACK analysis]"]
            assert [title(k, v) for k, v in ours if k == "tcp.analysis"] == analysis
            experts = [x.strip() for x in t if x.strip().startswith("[Expert Info")]
            assert _expert_titles(ours, []) == experts


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_tree_tcp_lines_are_tsharks(path, tshark):
    """-V: the TCP layer's lines are tshark's, line for line with its indentation (the not-yet analysis
    flags aside)."""
    theirs = [_tcp_section(f) for f in _frames(run_tshark(path, "-n", "-V"))]
    ours = [_tcp_section(f) for f in _frames(run_ibwire("decode", path, "-V", check=True).stdout)]
    assert len(ours) == len(theirs)
    for n, (t, o) in enumerate(zip(theirs, ours), 1):
        skip, kept = None, []
        for x in t:  # a not-yet line and the lines it holds
            depth = len(x) - len(x.lstrip())
            if skip is not None and depth > skip:
                continue
            skip = depth if NOT_YET_LINES.search(x) else None
            if skip is None:
                kept.append(x)
        assert o == kept, n
