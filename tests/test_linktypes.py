"""Link types no public capture has: IPoIB (242), Linux cooked SLL/SLL2 of an IPoIB interface, ERF
type 25 IB link packets, raw IB (247) — built here, then read back by ibwire and, where it can, tshark."""

import json
import subprocess

import pytest
from scapy.all import ICMP, IP, raw
from scapy.layers.l2 import CookedLinux

from dissectors import ERF, IBLink, IPoIBLink
from ibwire.decode import decode_frame
from ibwire.files import iter_frames
from ibwire.files.writers import PcapWriter

try:
    from scapy.layers.l2 import CookedLinuxV2
except ImportError:
    CookedLinuxV2 = None

IPV4 = IP(src="10.0.0.1", dst="10.0.0.2") / ICMP()


def _write(path, linktype, frames):
    with PcapWriter(str(path), linktype) as w:
        for i, f in enumerate(frames):
            w.write(raw(f), 1700000000.0 + i)
    return path


def _tshark_ip(path):
    out = subprocess.run(
        ["tshark", "-r", path, "-T", "fields", "-e", "ip.src", "-e", "ip.dst", "-e", "icmp.type"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [tuple(l.split("\t")) for l in out.splitlines()]


def test_ipoib_link_type_242(tmp_path):
    """RFC 4391 §6 header then IPv4.  tshark 4.0 reads link type 242 as a 40-byte pseudo-GRH first
    (its `ipoib.grh.*` fields), so the ground truth is the frame built here."""
    path = _write(tmp_path / "x.pcap", 242, [IPoIBLink(type=0x0800) / IPV4])
    d = decode_frame(next(iter_frames(path)))
    assert not d.errors
    assert (d.flat["ipoib.type"], d.flat["ip.src"], d.flat["ip.dst"], d.flat["icmp.type"]) == (
        0x0800,
        "10.0.0.1",
        "10.0.0.2",
        8,
    )


@pytest.mark.parametrize(
    "linktype,frame",
    [
        (113, CookedLinux(pkttype=0, lladdrtype=32, lladdrlen=0, proto=0x0800) / IPV4),
    ]
    + (
        [(276, CookedLinuxV2(proto=0x0800, ifindex=3, lladdrtype=32, pkttype=0, lladdrlen=0) / IPV4)]
        if CookedLinuxV2
        else []
    ),
    ids=["sll-113", "sll2-276"][: 2 if CookedLinuxV2 else 1],
)
def test_ipoib_interface_captures_agree_with_tshark(tmp_path, linktype, frame):
    path = _write(tmp_path / "x.pcap", linktype, [frame])
    d = decode_frame(next(iter_frames(path)))
    assert not d.errors
    assert _tshark_ip(path) == [(d.flat["ip.src"], d.flat["ip.dst"], str(d.flat["icmp.type"]))]


def test_erf_type_25_link_packets(tmp_path):
    """tshark 4.0 shows only the ERF header of type 25 records; the values are the ones built here."""
    built = dict(op=1, fctbs=0x123, vl=3, fccl=0x456, lpcrc=0xBEEF)
    path = _write(tmp_path / "link.pcap", 197, [ERF(type=25, ts_sec=1) / IBLink(**built)])
    d = decode_frame(next(iter_frames(path)))
    assert {k: d.flat[f"infiniband_link.{k}"] for k in built} == built
    assert subprocess.run(["tshark", "-r", path], capture_output=True, text=True).returncode == 0


def test_jsonl_for_link_type_247(tmp_path):
    from conftest import run_ibwire
    from tshark_oracle import PUBLIC

    out = tmp_path / "ib.pcap"
    run_ibwire("convert", PUBLIC / "srinivas_infiniband.pcap", "-o", out, "--link", "ib", check=True)
    rows = [json.loads(l) for l in run_ibwire("decode", out, "--format", "jsonl").stdout.splitlines()]
    assert len(rows) == 43 and rows[0]["linktype"] == 247 and rows[0]["layers"]["vcrc"]["status"] == "good"


def test_erf_extension_headers_are_skipped(tmp_path):
    """ERF records may carry 8-byte extension headers (type byte bit 7, chained by their own bit 7)."""
    from dissectors import BTH, DETH, ICRC, LRH, VCRC
    from dissectors.encap import ERFExtension

    ib = LRH(slid=1, dlid=2) / BTH(opcode=0x64, destqp=5) / DETH(q_key=7, srcqp=9) / b"abcd" / ICRC() / VCRC()
    rec = ERF(type=21, ext_header=1, ts_sec=1) / ERFExtension(more=1, type=5) / ERFExtension(type=6) / ib
    path = _write(tmp_path / "ext.pcap", 197, [rec])
    d = decode_frame(next(iter_frames(path)))
    assert d.flat["erf.wlen"] == len(raw(ib)) and d.flat["deth.srcqp"] == 9
    assert d.flat["icrc.status"] == "good" and d.flat["vcrc.status"] == "good"
    theirs = subprocess.run(
        ["tshark", "-r", path, "-T", "fields", "-e", "infiniband.deth.srcqp"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert int(theirs, 16) == 9
