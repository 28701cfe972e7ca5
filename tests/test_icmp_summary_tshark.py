"""The summary line of ICMP and ICMPv6 messages and of IP packets whose protocol tshark does not dissect, as
tshark 4.0's Protocol and Info columns: an error is `ICMP` / `ICMPv6` whatever it carries (RoCEv2 included)
with the type's name padded to 20 characters and the code's name (`Destination unreachable (Port
unreachable)`), without ibwire's flags for the carried datagram (cut short, bad ICRC); every ICMP type,
known or not, with tshark's names; an IP protocol number by tshark's name (`any private encryption scheme
(99)`), in the summary and in -V's `Protocol:` and `Next Header:` lines.
"""

import subprocess

from conftest import run_ibwire
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6Unknown, IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap
from test_icmp_errors_tshark import MAC, T, crafted

CODES = [(0, 0), (8, 0), (1, 0), (3, 15), (3, 16), (4, 0), (5, 3), (5, 9), (6, 0), (6, 1), (9, 0), (9, 16), (9, 5)]
CODES += [(10, 0), (11, 1), (11, 7), (12, 2), (12, 5), (13, 0), (14, 0), (15, 0), (16, 0), (17, 0), (18, 0)]
CODES += [(19, 0), (25, 0), (30, 0), (31, 0), (37, 0), (40, 2), (40, 9), (41, 0), (42, 0), (42, 1), (43, 4)]
CODES += [(43, 5), (44, 0), (200, 3), (253, 0)]
PROTOCOLS = (99, 253, 255)  # (tshark dissects the others: IGMP's, GRE's, SCTP's own columns)
NAMED = (2, 47, 89, 132, 143)  # -V names them too


def _columns(tshark, path) -> list:
    out = subprocess.run(
        [tshark, "-n", "-r", str(path), "-T", "fields", "-E", "separator=/t", "-e", "_ws.col.Protocol"]
        + ["-e", "_ws.col.Info"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split("\t") for line in out.split("\n")[:-1]]


def _check(path, tshark, skip=()):
    theirs = _columns(tshark, path)
    ours = run_ibwire("decode", path, check=True).stdout.split("\n")[:-1]
    assert len(ours) == len(theirs)
    for n, (line, (proto, info)) in enumerate(zip(ours, theirs), 1):
        if n not in skip:
            assert f" {proto} " in line and line.endswith(f"  {info}"), (n, line, proto, info)


def test_errors_summarised_as_tshark(tmp_path, tshark):
    """The crafted errors of test_icmp_errors_tshark (those shown whole)."""
    path = tmp_path / "errors.pcap"
    whole = crafted(path)
    _check(path, tshark, [n for n, full in enumerate(whole, 1) if not full])


def test_every_icmp_type_summarised_as_tshark(tmp_path, tshark):
    """Each ICMP type (named, reserved, unknown) with a known and an unknown code, ICMPv6 errors' codes."""
    e = lambda: Ether(src=MAC, dst=MAC) / IP(src="10.0.0.1", dst="10.0.0.2")
    frames = [e() / ICMP(type=t, code=c, id=0x1234, seq=5) / Raw(b"\0" * 8) for t, c in CODES]
    inner = bytes(IPv6(src="fe80::2", dst="fe80::9") / UDP())
    e6 = lambda: Ether(src=MAC, dst=MAC) / IPv6(src="fe80::1", dst="fe80::2")
    frames += [e6() / ICMPv6Unknown(type=t, code=c, msgbody=b"\0" * 4 + inner) for t, c in ((1, 9), (3, 2), (4, 9))]
    for i, f in enumerate(frames):
        f.time = T + i / 100
    wrpcap(str(tmp_path / "types.pcap"), frames)
    _check(tmp_path / "types.pcap", tshark)


def test_ip_protocols_named_as_tshark(tmp_path, tshark):
    """The summary of an IPv4 or IPv6 packet tshark does not dissect further, and -V's protocol line."""
    v4 = [Ether(src=MAC, dst=MAC) / IP(src="1.1.1.1", dst="2.2.2.2", proto=p) / Raw(b"abcd") for p in PROTOCOLS]
    v6 = [Ether(src=MAC, dst=MAC) / IPv6(src="::1", dst="::2", nh=p) / Raw(b"abcd") for p in PROTOCOLS]
    for i, f in enumerate(v4 + v6):
        f.time = T + i / 100
    wrpcap(str(tmp_path / "protocols.pcap"), v4 + v6)
    _check(tmp_path / "protocols.pcap", tshark)
    named = [Ether(src=MAC, dst=MAC) / IP(src="1.1.1.1", dst="2.2.2.2", proto=p) / Raw(b"abcd") for p in NAMED]
    named += [Ether(src=MAC, dst=MAC) / IPv6(src="::1", dst="::2", nh=p) / Raw(b"abcd") for p in NAMED]
    wrpcap(str(tmp_path / "named.pcap"), named + v4 + v6)
    lines = lambda text: [x for x in text.splitlines() if x.startswith(("    Protocol: ", "    Next Header: "))]
    theirs = subprocess.run([tshark, "-n", "-r", str(tmp_path / "named.pcap"), "-V"], capture_output=True, text=True)
    ours = run_ibwire("decode", tmp_path / "named.pcap", "-V", check=True).stdout
    assert lines(ours) == lines(theirs.stdout) and len(lines(ours)) == 2 * (len(NAMED) + len(PROTOCOLS))
