"""RoCEv2 on UDP ports other than 4791 is recognised only when the payload is a BTH whose ICRC checks:
ordinary UDP traffic is never claimed."""

from scapy.all import IP, UDP, Ether, raw

from dissectors import BTH, ICRC, RETH
from ibwire.decode import decode_frame
from ibwire.files import Frame


def frame(pkt):
    data = raw(pkt)
    return Frame(1, 0.0, len(data), len(data), 1, data)


def roce_on(port):
    pkt = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.1.0.1", dst="10.1.0.2")
        / UDP(sport=port, dport=port)
        / BTH(opcode=0x06, destqp=0x1234, psn=77, a=1)
        / RETH(va=0x1000, r_key=0xABCD, dmalen=64)
        / (b"\x11" * 64)
        / ICRC()
    )
    return pkt


def test_roce_on_another_port_is_decoded_when_its_icrc_checks():
    from scapy.packet import bind_layers, split_layers

    bind_layers(UDP, BTH, dport=5000)  # only to let scapy compute the ICRC while building
    try:
        data = raw(roce_on(5000))
    finally:
        split_layers(UDP, BTH, dport=5000)
    d = decode_frame(Frame(1, 0.0, len(data), len(data), 1, data))
    assert d.flat["udp.dstport"] == 5000
    assert d.flat["bth.opcode"] == 0x06 and d.flat["reth.dmalen"] == 64 and d.flat["icrc.status"] == "good"


def test_ordinary_udp_and_damaged_roce_are_not_claimed():
    dns = Ether() / IP(src="10.1.0.1", dst="10.1.0.2") / UDP(sport=5353, dport=53) / (b"\x06\x00" + b"\x00" * 40)
    assert "bth.opcode" not in decode_frame(frame(dns)).flat
    from scapy.packet import bind_layers, split_layers

    bind_layers(UDP, BTH, dport=5000)
    try:
        data = bytearray(raw(roce_on(5000)))
    finally:
        split_layers(UDP, BTH, dport=5000)
    data[-1] ^= 0xFF  # ICRC no longer checks
    d = decode_frame(Frame(1, 0.0, len(data), len(data), 1, bytes(data)))
    assert "bth.opcode" not in d.flat
