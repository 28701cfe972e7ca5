"""The datagram an ICMP or ICMPv6 error carries, as tshark 4.0 shows it: on one capture of crafted errors
(unreachable, time exceeded, parameter problem, source quench, redirect; ICMPv6 unreachable with every code,
packet too big, time exceeded, parameter problem) carrying UDP, RoCEv2, ICMP echoes and fragments, whole, cut
after 8 bytes of their transport header, cut inside it or inside the IP header, longer than 128 bytes or with
RFC 4884's length set; and timestamp requests and replies: frame by frame, every layer after the link's of
-T json and every line after the Frame section of -V are tshark's.  One tshark run per format.  Frames of what
is not shown yet (docs/tshark-output.md: IP options, ICMPv6's RFC 4884 length) are
tshark's up to where ibwire stops.  -T ek (the carried headers as objects of their own) and -T fields of
both headers are tshark's too, and so are the frames -Y selects on the carried headers' fields.  Every cut of
every frame decodes without an error.
"""

import json
import re

import pytest
from conftest import run_ibwire
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoRequest,
    ICMPv6PacketTooBig,
    ICMPv6ParamProblem,
    ICMPv6TimeExceeded,
    IPv6,
)
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap
from test_tshark_shapes import run_tshark

from dissectors.ib import BTH

T = 1700000000
MAC = "02:00:00:00:00:01"
DUMP = re.compile(r"^[0-9a-f]{4}  ")


def crafted(path) -> list:
    """The crafted frames; for each, whether ibwire shows it whole (else: tshark's up to where ibwire stops)."""
    a, b, far = "10.0.0.1", "10.0.0.2", "10.9.9.9"
    e = lambda: Ether(src=MAC, dst=MAC) / IP(src=a, dst=b)
    udp = bytes(IP(src=b, dst=far) / UDP(sport=5, dport=6) / Raw(b"12345678"))
    big = bytes(IP(src=b, dst=far) / UDP(sport=5, dport=6) / Raw(b"z" * 200))
    roce = bytes(
        IP(src=b, dst=far, flags="DF")
        / UDP(sport=49152, dport=4791)
        / BTH(opcode=4, destqp=0x11, psn=7)
        / Raw(b"\0" * 16 + b"\xde\xad\xbe\xef")
    )
    tcp = bytes(IP(src=b, dst=far) / TCP(sport=1234, dport=80, seq=1000, flags="S"))
    ping = bytes(IP(src=b, dst=far, ttl=1) / ICMP(type=8, id=7, seq=3) / Raw(b"abcdefgh" * 4))
    options = bytes(IP(src=b, dst=far, options=[IPOption(b"\x01\x01\x01\x00")]) / UDP(sport=5, dport=6))
    extension = big[:128] + bytes.fromhex("20000000 00080101 40a1b2c3")  # RFC 4884: 128 bytes, then objects

    def error(kind, code, body, **kw):
        return e() / ICMP(type=kind, code=code, **kw) / Raw(body)

    frames = [
        (error(3, 3, udp), True),
        (error(11, 0, udp[:28]), True),  # the IP header and 8 bytes, as routers send
        (error(11, 0, big[:28]), True),
        (error(3, 1, udp[:12]), True),  # cut inside the IP header
        (error(3, 1, udp[:20]), True),
        (error(3, 1, udp[:24]), True),  # cut inside the UDP header
        (error(3, 1, udp[:26]), True),
        (error(3, 3, roce), True),  # RoCEv2: its InfiniBand layer after the ICMP layer
        (error(11, 0, roce[:28]), True),
        (error(11, 0, ping), True),  # an echo inside: unverified, not matched
        (error(11, 0, ping[:28]), True),
        (error(4, 0, udp), True),
        (error(5, 0, big, gw="10.0.0.254"), True),  # a redirect: the IP header and 8 bytes
        (error(3, 3, big), True),
        (error(11, 0, extension, length=32), True),
        (error(3, 4, extension, length=32, nexthopmtu=1400), True),
        (error(12, 0, udp, ptr=8, length=9), True),
        (error(3, 3, bytes(IP(src=b, dst=far, flags="MF") / UDP(sport=5, dport=6) / Raw(b"q" * 8))), True),
        (error(3, 3, b""), True),
        (error(11, 0, tcp[:28]), True),
        (error(3, 3, tcp), True),  # tshark's error-packet TCP
        (error(3, 4, options, nexthopmtu=1400), False),  # IP options: not yet
        (e() / ICMP(type=13, id=5, seq=6, ts_ori=1000, ts_rx=2000, ts_tx=3000), True),
        (e() / ICMP(type=14, id=5, seq=6, ts_ori=80000000, ts_rx=0x80000001, ts_tx=3000), True),
        (e() / ICMP(type=13, id=5, seq=6, ts_ori=86399999, ts_rx=0x01000000, ts_tx=0) / Raw(b"xx"), True),
    ]
    a6, b6, far6 = "fe80::1", "fe80::2", "fe80::9"
    e6 = lambda: Ether(src=MAC, dst=MAC) / IPv6(src=a6, dst=b6)
    udp6 = bytes(IPv6(src=b6, dst=far6) / UDP(sport=1, dport=2) / Raw(b"hello"))
    roce6 = bytes(
        IPv6(src=b6, dst=far6) / UDP(sport=49152, dport=4791) / BTH(opcode=4, destqp=0x11, psn=7) / Raw(b"\0" * 20)
    )
    ping6 = bytes(IPv6(src=b6, dst=far6) / ICMPv6EchoRequest(id=1, seq=2, data=b"abc"))
    frames += [(e6() / ICMPv6DestUnreach(code=code) / Raw(udp6), True) for code in range(9)]
    frames += [
        (e6() / ICMPv6DestUnreach(code=1) / Raw(udp6[:44]), True),
        (e6() / ICMPv6DestUnreach(code=3) / Raw(udp6[:20]), True),  # cut inside the IPv6 header
        (e6() / ICMPv6PacketTooBig(mtu=1280) / Raw(udp6), True),
        (e6() / ICMPv6TimeExceeded(code=0) / Raw(ping6), True),
        (e6() / ICMPv6TimeExceeded(code=1) / Raw(roce6), True),
        (e6() / ICMPv6ParamProblem(code=2, ptr=40) / Raw(udp6), True),
        (e6() / ICMPv6DestUnreach(code=4, length=8) / Raw(udp6 + b"\0" * 3), False),  # RFC 4884: not yet
    ]
    for i, (f, _) in enumerate(frames):
        f.time = T + i / 100
    wrpcap(str(path), [f for f, _ in frames])
    return [whole for _, whole in frames]


def tcp_frames(path) -> None:
    """A TCP conversation (SYN, SYN+ACK with window scaling, ACK) around errors carrying its segments (the
    stream index, completeness, scaling factor and times as they stand), a new conversation's segment with
    options, whole, with its options cut off, and cut before 20 bytes, and a SYN carried before its
    conversation begins (the handshake's iRTT)."""
    a, b, far = "10.0.0.1", "10.0.0.2", "10.9.9.9"
    e = lambda: Ether(src=MAC, dst=MAC) / IP(src=a, dst=b)
    own = lambda src, dst, **kw: Ether(src=MAC, dst=MAC) / IP(src=src, dst=dst) / TCP(**kw)
    scale = [("MSS", 1460), ("WScale", 7)]
    inner = bytes(IP(src=b, dst=far) / TCP(sport=1234, dport=80, seq=1001, ack=5001, flags="PA", window=100) / "hi")
    stamps = [("NOP", None), ("NOP", None), ("Timestamp", (1, 2))]
    other = bytes(IP(src=b, dst="10.8.8.8") / TCP(sport=999, dport=22, seq=7, ack=9, flags="A", options=stamps))
    syn = bytes(IP(src=b, dst=far) / TCP(sport=4000, dport=443, seq=50, flags="S"))
    frames = [
        own(b, far, sport=1234, dport=80, seq=1000, flags="S", options=scale),
        own(far, b, sport=80, dport=1234, seq=5000, ack=1001, flags="SA", options=scale),
        e() / ICMP(type=3, code=3) / Raw(inner),
        e() / ICMP(type=11, code=0) / Raw(inner[:28]),
        e() / ICMP(type=3, code=1) / Raw(other),
        e() / ICMP(type=3, code=1) / Raw(other[:40]),
        e() / ICMP(type=3, code=1) / Raw(other[:34]),
        own(b, far, sport=1234, dport=80, seq=1001, ack=5001, flags="A"),
        e() / ICMP(type=3, code=3) / Raw(bytes(IP(src=b, dst=far) / TCP(sport=1234, dport=80, seq=1001, flags="F"))),
        e() / ICMP(type=3, code=3) / Raw(syn),
        own(far, b, sport=443, dport=4000, seq=9, ack=51, flags="SA"),
        own(b, far, sport=4000, dport=443, seq=51, ack=10, flags="A"),
    ]
    for i, f in enumerate(frames):
        f.time = T + i / 100
    wrpcap(str(path), frames)


def test_carried_tcp_is_tsharks(tmp_path, tshark):
    """A carried TCP header in -V, -T json, -T ek and -T fields, frame by frame, is tshark's, and -Y selects
    on its fields as tshark does."""
    path = tmp_path / "tcp.pcap"
    tcp_frames(path)
    assert _trees(run_ibwire("decode", path, "-V", check=True).stdout) == _trees(run_tshark(path, "-n", "-V"))
    assert _layers(run_ibwire("decode", path, "-T", "json", check=True).stdout) == _layers(
        run_tshark(path, "-n", "-T", "json")
    )
    assert ek_layers(run_ibwire("decode", path, "-T", "ek", check=True).stdout) == ek_layers(
        run_tshark(path, "-n", "-T", "ek")
    )
    args = [
        a for f in ("frame.number", "tcp.stream", "tcp.seq", "tcp.ack", "tcp.window_size", "tcp.len") for a in ("-e", f)
    ]
    assert run_ibwire("decode", path, "-T", "fields", *args, check=True).stdout == run_tshark(
        path, "-n", "-T", "fields", *args
    )
    for flt in ("tcp && icmp", "tcp.stream == 2 || tcp.completeness == 3", "tcp.ack == 5001 || tcp.options"):
        ours = run_ibwire("decode", path, "-Y", flt, "-T", "fields", "-e", "frame.number", check=True).stdout
        assert ours == run_tshark(path, "-n", "-Y", flt, "-T", "fields", "-e", "frame.number"), flt


def _layers(text: str) -> list:
    """Each frame's layers after the link's (-T json), as (name, items) pairs."""
    packets = json.loads(text, object_pairs_hook=lambda p: p)
    return [[(k, v) for k, v in dict(dict(p)["_source"])["layers"] if k not in ("frame", "eth")] for p in packets]


def _trees(text: str) -> list:
    """Each frame's -V lines after the Frame section (ibwire's own fields left out)."""
    out = []
    for frame in re.split(r"\n(?=Frame \d+: )", text.strip("\n")):
        lines, keep = [], False
        for line in frame.splitlines():
            if line and not line[0].isspace() and not DUMP.match(line):
                keep = not line.startswith(("Frame ", "ibwire"))
            if keep:
                lines.append(line)
        while lines and not lines[-1]:
            lines.pop()
        out.append(lines)
    return out


def _prefix(ours: list, theirs: list) -> bool:
    """ours is theirs up to where ours stops (its last item may stop inside tshark's)."""
    if not ours or len(ours) > len(theirs):
        return not ours
    *head, (key, last) = ours
    got = theirs[len(head)]
    return head == theirs[: len(head)] and key == got[0] and (last == got[1] or _prefix(last, got[1]))


def test_json_of_errors_is_tsharks(tmp_path, tshark):
    """-T json: the IP, ICMP and carried layers (and what follows them) of each frame are tshark's."""
    path = tmp_path / "errors.pcap"
    whole = crafted(path)
    theirs = _layers(run_tshark(path, "-n", "-T", "json"))
    ours = _layers(run_ibwire("decode", path, "-T", "json", check=True).stdout)
    assert len(ours) == len(theirs) == len(whole)
    for n, (t, o, full) in enumerate(zip(theirs, ours, whole), 1):
        assert o == t if full else (len(o) >= 2 and o[0] == t[0] and _prefix(o[1][1], t[1][1])), n


def test_tree_of_errors_is_tsharks(tmp_path, tshark):
    """-V: every line after the Frame section is tshark's, the carried datagram's indented under the ICMP
    section, a UDP payload's Data and InfiniBand after it."""
    path = tmp_path / "errors.pcap"
    whole = crafted(path)
    theirs = _trees(run_tshark(path, "-n", "-V"))
    ours = _trees(run_ibwire("decode", path, "-V", check=True).stdout)
    assert len(ours) == len(theirs) == len(whole)
    for n, (t, o, full) in enumerate(zip(theirs, ours, whole), 1):
        assert o == t if full else (len(o) >= 20 and o == t[: len(o)]), n


def test_cut_errors_decode(tmp_path):
    """Every crafted frame cut every third byte of its ICMP message decodes in -V and -T json without an error."""
    from scapy.utils import rdpcap

    path = tmp_path / "errors.pcap"
    crafted(path)
    cuts = []
    for frame in rdpcap(str(path)):
        raw = bytes(frame)
        for cut in range(35, len(raw), 3):
            cuts.append(Ether(raw[:cut]))
            cuts[-1].wirelen, cuts[-1].time = len(raw), frame.time
    wrpcap(str(tmp_path / "cuts.pcap"), cuts)
    for fmt in (["-V"], ["-T", "json"]):
        done = run_ibwire("decode", tmp_path / "cuts.pcap", *fmt)
        assert done.returncode == 0 and not done.stderr, done.stderr[-2000:]
        assert done.stdout.count("\nFrame " if fmt == ["-V"] else '"frame.number"') == len(cuts) - (fmt == ["-V"])


FIELDS = (
    "frame.number ip.src ip.dst ip.len ip.ttl ip.proto ip.addr ip.flags ip.checksum ipv6.src ipv6.plen ipv6.addr "
    "udp.srcport udp.dstport udp.length udp.stream icmp.type icmp.code icmp.checksum.status icmp.mtu icmp.pointer "
    "icmp.length icmp.length.original_datagram icmp.originate_timestamp icmp.receive_timestamp "
    "icmp.transmit_timestamp data.len"
).split()


def test_fields_of_errors_are_tsharks(tmp_path, tshark):
    """-T fields: the outer and the carried headers' ip.*, ipv6.*, udp.* (udp.stream counted with the capture's
    conversations), the icmp.* of both messages, RFC 4884's length and the timestamps are tshark's."""
    path = tmp_path / "errors.pcap"
    whole = crafted(path)
    args = [a for f in FIELDS for a in ("-e", f)]
    theirs = run_tshark(path, "-n", "-T", "fields", *args).splitlines()
    ours = run_ibwire("decode", path, "-T", "fields", *args, check=True).stdout.splitlines()
    assert len(ours) == len(theirs) == len(whole)
    assert [o for o, full in zip(ours, whole) if full] == [t for t, full in zip(theirs, whole) if full]


def ek_layers(text: str) -> list:
    """Each document's layers of -T ek, but the frame's and the link's."""
    docs = [json.loads(line)["layers"] for line in text.splitlines() if line.startswith('{"timestamp"')]
    return [{k: v for k, v in d.items() if k not in ("frame", "eth")} for d in docs]


def test_ek_of_errors_is_tsharks(tmp_path, tshark):
    """-T ek: the carried headers are objects of their own inside the icmp layer, keyed by their protocol
    (`"ip": {"ip_ip_version": …}`), an expert item inside them too; the rest is tshark's.  (An IPv6 header
    cut short: tshark writes its `_ws.malformed` as an empty object, ibwire as -T json's text.)"""
    path = tmp_path / "errors.pcap"
    whole = crafted(path)
    theirs = ek_layers(run_tshark(path, "-n", "-T", "ek"))
    ours = ek_layers(run_ibwire("decode", path, "-T", "ek", check=True).stdout)
    assert len(ours) == len(theirs) == len(whole)
    for n, (t, o, full) in enumerate(zip(theirs, ours, whole), 1):
        if full and "_ws_malformed" not in json.dumps(t):
            assert o == t, n


FILTERS = (
    "icmp && udp.dstport == 4791",
    "udp",
    "tcp",
    "icmp",
    "ip.src == 10.0.0.2 && ip.dst == 10.0.0.1",
    "ip.addr == 10.9.9.9",
    "ip.proto == 17 && ip.flags.df == 1",
    "ipv6.dst == fe80::9 || ipv6.nxt == 17",
    "udp.port == 5 || udp.length == 16",
    "icmp.type == 8 || icmpv6.type == 128",
    "tcp.seq == 1000 && tcp.port == 80",
    "ip.src != 10.0.0.1",
    "ip.src ~= 10.0.0.1",
    "ip.src === 10.0.0.1",
    "udp.port not in {5}",
    "all ip.src == 10.0.0.1",
    "any ip.src != 10.0.0.1",
    "all ip.ttl > 1",
    "all ip.ttl in {64, 1..1}",
    "all udp.port in {4..6} || all udp.port in {5, 6}",
    "all len(ip.src) == 4 && any ip.ttl >= 64",
    "ip.src != ip.dst",
    "ip.ttl > ip.ttl",
    "all ip.ttl == ip.ttl || any ip.src == ip.dst",
)


@pytest.fixture(scope="module")
def errors_and_roce(tmp_path_factory):
    """The crafted frames and two plain RoCEv2 frames (which the records answer); the frames not shown whole."""
    from scapy.utils import rdpcap

    path = tmp_path_factory.mktemp("filters") / "errors.pcap"
    whole = crafted(path)
    roce = Ether(src=MAC, dst=MAC) / IP(src="10.0.0.2", dst="10.9.9.9") / UDP(sport=5, dport=4791)
    roce /= BTH(opcode=4, destqp=0x11, psn=7) / Raw(b"\0" * 20)
    frames = list(rdpcap(str(path))) + [roce, roce]
    frames[-1].time = frames[-2].time = T + 1
    wrpcap(str(path), frames)
    return path, {str(n) for n, full in enumerate(whole, 1) if not full}


@pytest.mark.parametrize("flt", FILTERS)
def test_filters_see_carried_headers_as_tshark(errors_and_roce, flt, tshark):
    """-Y: the carried IP, IPv6, UDP, TCP and ICMP headers' fields are further occurrences, as in tshark 4.0
    (`icmp && udp.dstport == 4791` selects a port unreachable carrying RoCEv2; `!=`, `~=`, `===`, `all`,
    `any` and two fields compared over every occurrence); plain RoCEv2 frames are selected beside them.
    Frames ibwire does not show whole yet are left out of the comparison."""
    path, skip = errors_and_roce
    theirs = run_tshark(path, "-n", "-Y", flt, "-T", "fields", "-e", "frame.number").split()
    ours = run_ibwire("decode", path, "-Y", flt, "-T", "fields", "-e", "frame.number", check=True).stdout.split()
    assert [n for n in ours if n not in skip] == [n for n in theirs if n not in skip]
