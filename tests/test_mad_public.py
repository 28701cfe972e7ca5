"""Differential test on the public captures: every MAD (native IB ERF and RoCEv2 UD QP1) decoded by
dissectors.mad agrees with tshark on every field both show, and the summary reads like tshark's Info."""

import struct

import pytest
from test_mad_oracle import PUBLIC, compare, tshark_packets

from dissectors.mad import MAD, flat
from ibwire.files import iter_frames

FILES = ["srinivas_infiniband.pcap", "m3_02-2-write_ibdump_write.pcap", "m3_rdma-write-read_ibdump_read2.pcap"]


def mad_bytes(frame):
    """The 256-byte MAD of a UD SEND to/from QP0/QP1, or None (ERF native IB or Ethernet RoCEv2)."""
    d = frame.data
    if frame.linktype == 197:
        ib = d[16:]
        off = 8 + (40 if ib[1] & 3 == 3 else 0)
    elif frame.linktype == 1:
        eth = 14 + (4 if d[12:14] == b"\x81\x00" else 0)
        if d[eth - 2 : eth] != b"\x08\x00" or d[eth + 9] != 17:
            return None
        udp = eth + (d[eth] & 0x0F) * 4
        if struct.unpack_from(">H", d, udp + 2)[0] != 4791:
            return None
        ib, off = d, udp + 8
    else:
        return None
    if len(ib) < off + 20 + 256 or ib[off] != 0x64 or struct.unpack_from(">I", ib, off + 4)[0] & 0xFFFFFF > 1:
        return None
    return ib[off + 20 : off + 20 + 256]


@pytest.mark.parametrize("name", FILES)
def test_public_mads_match_tshark(name):
    path = PUBLIC / name
    oracle = tshark_packets(path)
    seen = compared = 0
    problems = []
    for frame in iter_frames(str(path)):
        mad = mad_bytes(frame)
        if mad is None:
            continue
        seen += 1
        pkt = MAD(mad)
        info, fields = oracle[frame.number - 1]
        n, bad = compare(flat(pkt), fields)
        compared += n
        problems += [f"frame {frame.number}: {b}" for b in bad]
        assert info.endswith(pkt.mysummary()), (frame.number, info, pkt.mysummary())
    assert seen >= 5
    assert compared >= 20 * seen, "too few fields compared: the flattening lost layers"
    assert not problems, "\n".join(problems)
