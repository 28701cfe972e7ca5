"""IPoIB (RFC 4391) is summarised by what it carries, as tshark does: ARP "Who has …? Tell …", UDP, ICMP and
ICMPv6 with their addresses (an echo reply naming its request's frame) and tshark's Protocol column, on native IB (ERF) in datagram (UD) and connected
(RC) mode and on link type 242; display filters on arp/ip fields select the same frames as tshark's."""

import re
import subprocess

import pytest
from conftest import ROOT
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from scapy.all import raw

from dissectors import IPoIB, IPoIBLink
from ibwire.decode import decode_frame
from ibwire.files import iter_frames
from ibwire.files.writers import PcapWriter

IPOIB = "arp || ip || ipv6"


def _tshark_columns(tshark, path, flt=IPOIB):
    out = subprocess.run(
        [
            tshark,
            "-r",
            path,
            "-Y",
            flt,
            "-T",
            "fields",
            "-E",
            "separator=/t",
            "-e",
            "frame.number",
            "-e",
            "_ws.col.Source",
            "-e",
            "_ws.col.Destination",
            "-e",
            "_ws.col.Protocol",
            "-e",
            "_ws.col.Info",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = {}
    for line in out.splitlines():
        n, src, dst, proto, info = line.split("\t")
        # tshark's column prefixes aside ("LID: 4", "GID: fe80::…")
        rows[int(n)] = (
            src.replace("LID: ", "LID ").removeprefix("GID: "),
            dst.replace("LID: ", "LID ").removeprefix("GID: "),
            proto,
            info,
        )
    return rows


def _ours(path, *args):
    r = run_ibwire("decode", path, *args)
    assert r.returncode == 0, r.stderr
    return {int(line.split()[0]): line for line in r.stdout.splitlines()}


@pytest.mark.parametrize("capture", ["public/srinivas_infiniband.pcap", "ud-ipoib.pcap", "multitenant-breach.pcap"])
def test_ipoib_on_native_ib_summarised_as_tshark(tshark, public_dir, capture):
    path = public_dir / capture.split("/", 1)[1] if capture.startswith("public/") else ROOT / "captures" / capture
    theirs = _tshark_columns(tshark, path)
    assert theirs, "the capture carries IPoIB"
    ours = _ours(path, "-Y", IPOIB)
    assert sorted(ours) == sorted(theirs)
    for n, (src, dst, proto, info) in theirs.items():
        line = ours[n]
        assert f"{src} → {dst}" in " ".join(line.split()) and f" {proto} " in line, (line, theirs[n])
        assert line.endswith(f"  {info}"), (line, info)


def test_ipoib_display_filters_select_as_tshark(tshark, public_dir):
    path = public_dir / "srinivas_infiniband.pcap"
    for flt in (
        "arp",
        "ip.src == 10.0.1.34",
        "ip.dst == 10.0.0.255 && udp.dstport == 49504",
        "icmpv6",
        "icmpv6.nd.ns.target_address == fe80::202:c903:0:1895",
        "arp.opcode == 2",
        "icmp.seq == 3",
    ):
        assert sorted(_ours(path, "-Y", flt)) == sorted(_tshark_columns(tshark, path, flt)), flt


def test_link_type_242_summarised_like_the_same_ipoib_on_native_ib(tshark, public_dir, tmp_path):
    """tshark 4.0 reads link type 242 as a pseudo-GRH first (malformed), so the oracle is its summary of the
    same IPoIB packets on native IB: their IPoIB header and payload rewritten as link type 242 frames."""
    src = public_dir / "srinivas_infiniband.pcap"
    theirs = _tshark_columns(tshark, src)
    path, kept = tmp_path / "ipoib242.pcap", []
    with PcapWriter(str(path), 242) as w:
        for fr in iter_frames(str(src)):
            if fr.number not in theirs:
                continue
            d = decode_frame(fr)
            layer = d.packet.getlayer(IPoIB)
            kind = d.flat["ipoib.type"]
            inner = (
                d.flat["ip.len"] if kind == 0x0800 else 40 + d.flat["ipv6.plen"] if kind == 0x86DD else 8 + 2 * (20 + 4)
            )
            w.write(raw(IPoIBLink(type=d.flat["ipoib.type"]) / raw(layer)[4 : 4 + inner]), fr.time)
            kept.append(fr.number)
    ours = list(_ours(path).values())
    assert len(ours) == len(kept) == len(theirs)
    for line, n in zip(ours, kept):
        src_col, dst_col, proto, info = theirs[n]
        info = re.sub(r"\(request in (\d+)\)", lambda m: f"(request in {kept.index(int(m.group(1))) + 1})", info)
        assert f" {proto} " in line and line.endswith(f"  {info}"), (line, theirs[n])
        if proto != "ARP":  # IP addresses; ARP has only the IB addresses 242 lacks
            assert f"{src_col} → {dst_col}" in " ".join(line.split()), line
