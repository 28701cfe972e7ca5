"""ICMP as tshark 4.0 shows it (issue 27): on every capture with ICMP echoes (Ethernet and IPoIB), frame by
frame, the -T json icmp layer equals tshark's key for key (identifier and sequence number both ways round, the
reply's request frame and response time, the timestamp in the data, the data nested inside) and the -V lines
of the ICMP section are tshark's, the hex dump of its nested Data included.  Crafted frames: a duplicate reply,
a bad checksum, data too short or too far in time for a timestamp, no data, a fragment, messages cut short by
the capture, errors and a redirect with the datagram they carry, a timestamp request (more errors:
test_icmp_errors_tshark.py); a router advertisement shows the lines tshark starts with.
"""

import json
import random
import re
import struct
from pathlib import Path

import pytest
from conftest import run_ibwire
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6MLDMultAddrRec,
    ICMPv6MLReport2,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptMTU,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
)
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap
from test_tshark_shapes import run_tshark
from tshark_oracle import PUBLIC

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = [ROOT / "captures" / n for n in ("multitenant-breach.pcap", "multitenant-clean.pcap", "ud-ipoib.pcap")]
CAPTURES += [PUBLIC / n for n in ("m3_nvme_nvme-discover.pcap", "srinivas_infiniband.pcap")]
V6 = [PUBLIC / n for n in ("oferby_proxy_roce.pcap", "srinivas_infiniband.pcap")]  # MLDv2 behind hop-by-hop; ND
V6_TITLE = "Internet Control Message Protocol v6"
T = 1700000000
DUMP = re.compile(r"^[0-9a-f]{4}  ")


def _layers(text: str) -> list:
    return [dict(dict(dict(p)["_source"])["layers"]) for p in json.loads(text, object_pairs_hook=lambda p: p)]


def _both(path) -> list:
    theirs = _layers(run_tshark(path, "-n", "-T", "json"))
    ours = _layers(run_ibwire("decode", path, "-T", "json", check=True).stdout)
    assert len(ours) == len(theirs)
    return list(zip(theirs, ours))


def _sections(text: str, title: str = "Internet Control Message Protocol") -> list:
    """Each frame's ICMP (ICMPv6) section of -V: its title, its lines and the nested Data's dump."""
    out = []
    for frame in re.split(r"\n(?=Frame \d+: )", text):
        lines, inside = [], False
        for line in frame.splitlines():
            if line and not line[0].isspace() and not DUMP.match(line):
                inside = line == title
            if inside:
                lines.append(line)
        while lines and not lines[-1]:
            lines.pop()
        out.append(lines)
    return out


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_json_icmp_layer_is_tsharks(path, tshark):
    """-T json: each frame's icmp layer is tshark's, item for item."""
    frames = [(dict(t["frame"])["frame.number"], t["icmp"], o.get("icmp")) for t, o in _both(path) if "icmp" in t]
    assert frames
    for number, theirs, ours in frames:
        assert ours == theirs, number


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_tree_icmp_lines_are_tsharks(path, tshark):
    """-V (with -Y icmp): the ICMP section's lines are tshark's, line for line with its indentation."""
    theirs = _sections(run_tshark(path, "-n", "-V", "-Y", "icmp"))
    ours = _sections(run_ibwire("decode", path, "-V", "-Y", "icmp", check=True).stdout)
    assert len(ours) == len(theirs) and any(theirs)
    for n, (t, o) in enumerate(zip(theirs, ours), 1):
        assert o == t, n


def crafted(path: Path) -> int:
    """The crafted frames; the number of those whose ICMP tshark shows in full (the first ones)."""
    a, b = "10.0.0.1", "10.0.0.2"
    e = lambda s, d: Ether() / IP(src=s, dst=d)
    inner = IP(src=b, dst="10.9.9.9") / UDP(sport=5, dport=6) / Raw(b"12345678")
    stamp = struct.pack(">II", T, 500) + b"x" * 20  # a big-endian timeval
    frames = [
        e(a, b) / ICMP(type=8, id=1, seq=1) / Raw(stamp),
        e(b, a) / ICMP(type=0, id=1, seq=1) / Raw(stamp),
        e(b, a) / ICMP(type=0, id=1, seq=1) / Raw(stamp),  # answered already: no link
        e(a, b) / ICMP(type=8, id=2, seq=7, chksum=0x1234) / Raw(b"abc"),  # bad checksum, 3 bytes
        e(a, b) / ICMP(type=8, id=3, seq=1) / Raw(struct.pack("<II", T + 90000, 5) + b"y" * 8),  # a day off
        e(a, b) / ICMP(type=8, id=6, seq=1) / Raw(struct.pack("<II", T, 2_000_000) + b"q" * 8),  # usec > 1e6
        e(a, b) / ICMP(type=8, id=4, seq=1),
        e(b, a) / ICMP(type=0, id=4, seq=1),
        Ether() / IP(src=a, dst=b, flags="MF") / ICMP(type=8, id=9, seq=9) / Raw(b"fragment"),
        *(_cut(e(a, b) / ICMP(type=8, id=8, seq=8) / Raw(stamp * 2), n) for n in (30, 12)),  # unverifiable
        e(a, b) / ICMP(type=17, id=3, seq=4, addr_mask="255.255.255.0"),
        e(b, a) / ICMP(type=18, id=3, seq=4, addr_mask="255.255.0.0"),
        e(a, b) / ICMP(type=3, code=3) / inner,
        e(a, b) / ICMP(type=3, code=4, nexthopmtu=1400) / inner,
        e(a, b) / ICMP(type=11, code=0) / inner,
        e(a, b) / ICMP(type=12, code=0, ptr=4) / inner,
        e(a, b) / ICMP(type=5, code=1, gw="10.0.0.254") / inner,
        e(a, b) / ICMP(type=13, id=5, seq=6, ts_ori=1000, ts_rx=2000, ts_tx=3000),
        e(a, b) / ICMP(type=9, code=16),
    ]
    for i, f in enumerate(frames):
        f.time = T + i / 100
    wrpcap(str(path), frames)
    return 19


def _cut(frame, icmp_bytes: int):
    """The frame captured up to `icmp_bytes` of its ICMP message."""
    out = Ether(bytes(frame)[: 14 + 20 + icmp_bytes])
    out.wirelen = len(frame)
    return out


def test_json_icmp_is_tsharks_on_crafted_frames(tmp_path, tshark):
    """Echoes, a fragment, errors, a redirect, a timestamp request: the layer is tshark's; a router
    advertisement: tshark's first items."""
    path = tmp_path / "icmp.pcap"
    full = crafted(path)
    for i, (theirs, ours) in enumerate(_both(path)):
        if i < full:
            assert ours.get("icmp") == theirs.get("icmp") and ours.get("data") == theirs.get("data"), i + 1
        else:
            assert len(ours["icmp"]) >= 4 and ours["icmp"] == theirs["icmp"][: len(ours["icmp"])], i + 1


def test_tree_icmp_lines_are_tsharks_on_crafted_frames(tmp_path, tshark):
    """-V of the crafted frames: the ICMP section is tshark's (where not yet whole: its first lines)."""
    path = tmp_path / "icmp.pcap"
    full = crafted(path)
    theirs = _sections(run_tshark(path, "-n", "-V"))
    ours = _sections(run_ibwire("decode", path, "-V", check=True).stdout)
    for i, (t, o) in enumerate(zip(theirs, ours)):
        if i < full:
            assert o == t, i + 1
        else:
            assert len(o) >= 5 and o == t[: len(o)], i + 1


def test_ek_icmp_is_tsharks_on_crafted_frames(tmp_path, tshark):
    """-T ek of the crafted ICMP and ICMPv6 messages: each message's layer is tshark's, its data as an object
    of its own (`"data": {"data_data_data": …}`), the timestamp in the data in UTC, ISO 8601, neighbour
    advertisement flags as booleans."""
    from test_icmp_errors_tshark import ek_layers

    for make, name in ((crafted, "icmp"), (crafted_v6, "icmpv6")):
        path = tmp_path / f"{name}.pcap"
        full = make(path)
        theirs = ek_layers(run_tshark(path, "-n", "-T", "ek"))
        ours = ek_layers(run_ibwire("decode", path, "-T", "ek", check=True).stdout)
        assert len(ours) == len(theirs)
        for i, (t, o) in enumerate(zip(theirs[:full], ours[:full])):
            assert o.get(name) == t.get(name) and o.get("data") == t.get("data"), i + 1


@pytest.mark.parametrize("path", V6, ids=lambda p: p.name)
def test_icmpv6_layer_and_lines_are_tsharks(path, tshark):
    """ICMPv6 (neighbour discovery with IPoIB link-layer addresses, echoes, MLDv2 reports): each frame's
    icmpv6 layer and -V section are tshark's."""
    frames = [(dict(t["frame"])["frame.number"], t["icmpv6"], o.get("icmpv6")) for t, o in _both(path) if "icmpv6" in t]
    assert frames
    for number, theirs, ours in frames:
        assert ours == theirs, number
    theirs = _sections(run_tshark(path, "-n", "-V"), V6_TITLE)
    ours = _sections(run_ibwire("decode", path, "-V", check=True).stdout, V6_TITLE)
    assert len(ours) == len(theirs)
    for n, (t, o) in enumerate(zip(theirs, ours), 1):
        assert o == t, n


def crafted_v6(path: Path) -> int:
    """ICMPv6 messages; the number of those whose layer tshark shows in full (the first ones)."""
    a, b = "fe80::1", "fe80::2"
    e = lambda s, d: Ether() / IPv6(src=s, dst=d)
    records = [
        ICMPv6MLDMultAddrRec(rtype=2, dst="ff02::fb", sources=["fe80::9", "fe80::a"]),
        ICMPv6MLDMultAddrRec(rtype=3, dst="ff02::1:3"),
    ]
    frames = [
        e(a, b) / ICMPv6EchoRequest(id=5, seq=9, data=b"hello world"),
        e(b, a) / ICMPv6EchoReply(id=5, seq=9, data=b"hello world"),
        e(b, a) / ICMPv6EchoReply(id=5, seq=9, data=b"hello world"),  # answered already
        e(a, b) / ICMPv6EchoRequest(id=6, seq=1, cksum=0x1234),
        e(a, "ff02::1:ff00:2") / ICMPv6ND_NS(tgt=b) / ICMPv6NDOptSrcLLAddr(lladdr="02:00:00:00:00:01"),
        e(b, a) / ICMPv6ND_NA(tgt=b, R=1, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr="02:00:00:00:00:02"),
        e(b, a) / ICMPv6ND_NA(tgt=b, R=0, S=0, O=0),
        e(a, "ff02::2") / ICMPv6ND_RS() / ICMPv6NDOptSrcLLAddr(lladdr="02:00:00:00:00:01"),
        e(a, "ff02::16") / ICMPv6MLReport2(records=records),
        e(a, b) / ICMPv6DestUnreach(code=4) / IPv6(src=b, dst="fe80::9") / UDP(sport=1, dport=2),
        e(a, b) / ICMPv6ND_NS(tgt=b) / ICMPv6NDOptMTU(mtu=1500),
    ]
    for i, f in enumerate(frames):
        f.time = T + i / 100
    wrpcap(str(path), frames)
    return 10


def test_icmpv6_is_tsharks_on_crafted_messages(tmp_path, tshark):
    """Crafted ICMPv6: the layer and its -V section are tshark's (options other than link-layer addresses
    not yet: tshark's first items and lines)."""
    path = tmp_path / "icmpv6.pcap"
    full = crafted_v6(path)
    for i, (theirs, ours) in enumerate(_both(path)):
        t, o = theirs["icmpv6"], ours["icmpv6"]
        assert (o == t) if i < full else (len(o) >= 5 and o == t[: len(o)]), i + 1
    theirs = _sections(run_tshark(path, "-n", "-V"), V6_TITLE)
    ours = _sections(run_ibwire("decode", path, "-V", check=True).stdout, V6_TITLE)
    for i, (t, o) in enumerate(zip(theirs, ours)):
        assert (o == t) if i < full else (len(o) >= 6 and o == t[: len(o)]), i + 1


def test_cut_and_damaged_messages_never_raise(tmp_path):
    """Every cut of the crafted ICMP and ICMPv6 messages, with random bytes and lengths behind, gives a layer."""
    from scapy.utils import rdpcap

    from ibwire.report.packets.icmp_doc import icmp_layer
    from ibwire.report.packets.icmpv6_doc import icmpv6_layer
    from ibwire.report.packets.tshark_doc import Session

    path = tmp_path / "icmp.pcap"
    crafted(path)
    rng, session = random.Random(27), Session()
    for n, frame in enumerate(rdpcap(str(path))):
        raw = bytes(frame)[34:]
        for cut in range(len(raw) + 1):
            noise = bytes(rng.getrandbits(8) for _ in range(rng.randrange(24)))
            for body in (raw[:cut], raw[:cut] + noise, bytes([raw[0]]) + noise):
                reported = rng.choice((len(body), len(body) + 9, max(len(body) - 3, 0)))
                assert isinstance(icmp_layer(body, reported, frozenset(), n, T * 10**9, session), list)
    crafted_v6(tmp_path / "v6.pcap")
    for n, frame in enumerate(rdpcap(str(tmp_path / "v6.pcap"))):
        raw = bytes(frame)[54:]
        for cut in range(len(raw) + 1):
            noise = bytes(rng.getrandbits(8) for _ in range(rng.randrange(40)))
            for body in (raw[:cut], raw[:cut] + noise, raw[:8] + noise):
                reported = rng.choice((len(body), len(body) + 9))
                assert isinstance(icmpv6_layer(body, reported, bytes(16), bytes(16), n, T * 10**9, session), list)


def test_frame_protocols_of_errors_are_tsharks(tmp_path, tshark):
    """frame.protocols of an ICMP or ICMPv6 error names the layers of the datagram it carries, as tshark's
    (`eth:ethertype:ip:icmp:ip:udp:data`); a redirect aside (tshark takes its IP header and 8 bytes only)."""
    checked = 0
    for make, name in ((crafted, "icmp"), (crafted_v6, "icmpv6")):
        path = tmp_path / f"{name}.pcap"
        make(path)
        for theirs, ours in _both(path):
            if dict(theirs.get(name, [])).get(f"{name}.type") in ("1", "3", "11", "12"):
                assert dict(ours["frame"])["frame.protocols"] == dict(theirs["frame"])["frame.protocols"]
                checked += 1
    assert checked == 5
