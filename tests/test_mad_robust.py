"""Bad input never raises: truncated MADs, random bytes, unknown classes and attributes stay raw bytes."""

import random

from scapy.packet import Raw
from test_mad_crafted import CASES

from dissectors.mad import MAD, flat, reassemble
from dissectors.mad.smp import SMPDirected


def test_truncated_mads_decode_as_far_as_possible():
    for mad in CASES.values():
        for cut in (0, 1, 5, 23, 24, 30, 63, 64, 100, 128, 200, 255):
            pkt = MAD(mad[:cut])
            flat(pkt)
            pkt.mysummary()
            if cut >= 24:
                assert pkt.attributeid == MAD(mad).attributeid
    short = MAD(CASES["NodeInfo"][:3])
    assert short.truncated == "method" and short.mgmtclass == 0x81


def test_random_bytes_never_raise():
    rnd = random.Random(7)
    for _ in range(300):
        data = bytes(rnd.getrandbits(8) for _ in range(rnd.choice([0, 10, 24, 60, 256])))
        pkt = MAD(data)
        flat(pkt)
        pkt.mysummary()
        reassemble([data])


def test_unknown_class_and_attribute_stay_raw():
    unknown_class = MAD(bytes(MAD(mgmtclass=0x55, attributeid=0x11)).ljust(256, b"\x07"))
    assert isinstance(unknown_class.payload, Raw) and len(unknown_class.payload.load) == 232
    assert unknown_class.mysummary() == "MAD class 0x55 method 0x01 (0x0011)"
    unknown_attr = MAD(bytes(MAD(mgmtclass=0x81, attributeid=0xFF01) / SMPDirected()))
    assert isinstance(unknown_attr[SMPDirected].payload, Raw)
    assert unknown_attr.mysummary() == "SubnGet(0xff01)"
