"""ICRC/VCRC: every packet real hardware accepted verifies, and corrupting a covered bit is caught."""

import random

import pytest
from tshark_oracle import PUBLIC

from dissectors import crc
from ibwire.decode import decode_frame
from ibwire.files import Frame, iter_frames

# MANIFEST.md: CRC ground truth "ok" for these files (the others are "unknown").
CRC_OK = [
    "srinivas_infiniband.pcap",
    "m3_mlx_rocev1_test.pcap",
    "m3_02-2-write_ibdump_write.pcap",
    "m3_rdma-write-read_ibdump_read2.pcap",
    "m3_nvme_nvme-discover.pcap",
    "m3_nvme_host-echo_dump.pcap",
    "oferby_proxy_roce.pcap",
    "scapy_roce_uts_cnp_cx4lx.pcap",
]
ROCE_PACKETS = {"oferby_proxy_roce.pcap": 105}


def ib_frames(name):
    return [(f, d) for f in iter_frames(PUBLIC / name) for d in [decode_frame(f)] if "icrc.status" in d.flat]


@pytest.mark.parametrize("name", CRC_OK)
def test_hardware_accepted_packets_verify(name):
    frames = ib_frames(name)
    assert frames
    if name in ROCE_PACKETS:
        assert len(frames) == ROCE_PACKETS[name]
    bad = [
        (f.number, d.flat["icrc.status"], d.flat.get("vcrc.status"))
        for f, d in frames
        if d.flat["icrc.status"] != "good" or d.flat.get("vcrc.status", "good") != "good"
    ]
    assert not bad


def test_native_ib_with_grh_verifies():
    grh = [d for _, d in ib_frames("srinivas_infiniband.pcap") if "grh.sgid" in d.flat]
    assert len(grh) == 6 and all(d.flat["icrc.status"] == "good" and d.flat["vcrc.status"] == "good" for d in grh)


def test_scapy_reference_vector():
    """The CNP from scapy's roce.uts stores ICRC 0x82fd002a; computing it over the packet gives it."""
    ((f, d),) = ib_frames("scapy_roce_uts_cnp_cx4lx.pcap")
    assert d.flat["invariant.crc"] == 0x82FD002A and d.flat["icrc.status"] == "good"


def _variant_bits(d, frame):
    """Bit offsets the ICRC leaves out by design (IBA §7.8.1) plus headers outside its coverage."""
    pkt = d.packet
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6

    from dissectors import BTH, GRH, LRH

    skip = set()
    data_len = len(frame.data)

    def off(layer):
        # layers inside an LRH were handed the packet without its 2-byte VCRC
        inner = LRH in pkt and not isinstance(layer, LRH)
        return data_len - len(layer.original) - (2 if inner else 0)

    def mark(byte_from, byte_to, bit_mask=None):
        for b in range(byte_from, byte_to):
            for bit in range(8):
                if bit_mask is None or bit_mask[b - byte_from] & (0x80 >> bit):
                    skip.add(b * 8 + bit)

    if LRH in pkt:
        o = off(pkt[LRH])
        mark(0, o)
        mark(o, o + 8 if GRH in pkt else o + 1, None if GRH in pkt else [0xF0])
        mark(data_len - 2, data_len)  # the VCRC itself
    start = off(pkt[GRH]) if GRH in pkt else off(pkt[IP]) if IP in pkt else off(pkt[IPv6]) if IPv6 in pkt else 0
    if LRH not in pkt:
        mark(0, start)
    if GRH in pkt:
        mark(start, start + 8, [0x0F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0xFF])
    elif IP in pkt:
        mark(start + 1, start + 2)
        mark(start + 8, start + 9)
        mark(start + 10, start + 12)
    elif IPv6 in pkt:
        mark(start, start + 8, [0x0F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0xFF])
    if UDP in pkt:
        u = off(pkt[UDP])
        mark(u + 6, u + 8)
    b = off(pkt[BTH])
    mark(b + 4, b + 5)
    return skip


@pytest.mark.parametrize(
    "name",
    ["srinivas_infiniband.pcap", "m3_nvme_host-echo_dump.pcap", "m3_mlx_rocev1_test.pcap", "oferby_proxy_roce.pcap"],
)
def test_single_bit_flips(name):
    """Property over real packets: flipping any bit the ICRC covers makes it bad (or the framing
    unreadable, never good); flipping a variant bit leaves the ICRC good; on native IB the VCRC
    catches every flip."""
    rng = random.Random(7)
    frames = ib_frames(name)
    for frame, d in frames[:40]:
        variant = _variant_bits(d, frame)
        n_bits = len(frame.data) * 8
        for bit in rng.sample(range(n_bits), min(60, n_bits)):
            data = bytearray(frame.data)
            data[bit // 8] ^= 0x80 >> (bit % 8)
            flipped = decode_frame(Frame(frame.number, frame.time, len(data), len(data), frame.linktype, bytes(data)))
            icrc = flipped.flat.get("icrc.status")
            if "vcrc.status" in d.flat and bit >= 16 * 8:  # ERF header is outside the IB packet
                assert flipped.flat.get("vcrc.status") != "good" or icrc != "good", (frame.number, bit)
            if bit in variant:
                if icrc is not None and "vcrc.status" not in d.flat:
                    assert icrc == "good", (frame.number, bit)
            else:
                assert icrc != "good", (name, frame.number, bit)


def test_crc_functions_match_stored_values_directly():
    for f in iter_frames(PUBLIC / "srinivas_infiniband.pcap"):
        ib = f.data[16:]
        assert crc.icrc_ib(ib[:-6]).to_bytes(4, "little") == ib[-6:-2]
        assert crc.vcrc(ib[:-2]).to_bytes(2, "little") == ib[-2:]
