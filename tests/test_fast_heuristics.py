"""Packets the fast path must recognise without the usual markers: RoCEv2 on a UDP port other than 4791
(a plausible BTH whose ICRC matches), look-alikes that fail the ICRC, and ERF type-25 IB link packets —
with the detail path (ibwire.decode) as the reference where it decides too."""

import struct
from pathlib import Path

from dissectors.crc import icrc_roce2
from dissectors.numbers import LINKTYPE_ERF
from ibwire.decode import decode_frame
from ibwire.decode import records as R
from ibwire.decode.scan import read_all
from ibwire.files import iter_frames
from ibwire.files.writers import PcapWriter, erf_record

PUBLIC = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "public"


def _moved_port(frame: bytes, port: int, fix_icrc: bool) -> bytes:
    d = bytearray(frame)
    ihl = (d[14] & 0x0F) * 4
    udp = 14 + ihl
    struct.pack_into("!HH", d, udp, port, port)
    if fix_icrc:
        struct.pack_into("<I", d, len(d) - 4, icrc_roce2(bytes(d[14:-4])))
    return bytes(d)


def test_roce_on_another_udp_port(tmp_path):
    frames = [f for f in iter_frames(str(PUBLIC / "m3_nvme_nvme-discover.pcap"))][4:14]
    p = tmp_path / "ports.pcap"
    with PcapWriter(str(p), 1) as w:
        for f in frames:
            w.write(_moved_port(f.data, 5000, True), f.time)
            w.write(_moved_port(f.data, 5000, False), f.time)
    rec = read_all(str(p))
    good, bad = rec[0::2], rec[1::2]
    assert (good["link"] == R.ROCE2V4).all() and ((good["flags"] & R.F_HEURISTIC) > 0).all()
    assert (good["icrc"] == R.GOOD).all()
    assert not (bad["flags"] & R.F_BTH).any()
    for r, f in zip(rec, iter_frames(str(p))):
        assert ("bth" in decode_frame(f).flat) == bool(r["flags"] & R.F_BTH), f.number


def test_erf_ib_link_packets_are_counted(tmp_path):
    p = tmp_path / "link.pcap"
    ib = [f for f in iter_frames(str(PUBLIC / "srinivas_infiniband.pcap"))][:3]
    with PcapWriter(str(p), LINKTYPE_ERF) as w:
        for f in ib:
            w.write(f.data, f.time)
        w.write(erf_record(1.0, bytes.fromhex("f00000000001fffe"), erf_type=25), 1.0)  # a flow-control packet
    rec = read_all(str(p))
    ref = read_all(str(PUBLIC / "srinivas_infiniband.pcap"))[:3]
    assert list(rec["link"]) == list(ref["link"]) + [R.IBLINK]
    assert (rec["icrc"][:3] == R.GOOD).all() and (rec["vcrc"][:3] == R.GOOD).all()
    from ibwire.analyze.stats import compute
    from ibwire.decode.scan import scan

    assert compute(scan(str(p)))["counters"]["ib_link_packets"] == 1
