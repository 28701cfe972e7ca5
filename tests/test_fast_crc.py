"""The fast path's compiled CRCs: the CRC-32 is zlib's bit for bit, hardware-accepted packets verify,
and a flipped bit in a covered byte of any packet is caught."""

import random
import zlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_crc import CRC_OK
from tshark_oracle import PUBLIC

from ibwire.decode import _native
from ibwire.decode import records as R
from ibwire.decode.scan import read_all
from ibwire.files import iter_frames
from ibwire.files.writers import PcapWriter


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1), st.integers(0, 15))
def test_compiled_crc32_is_zlibs(data, value, skip):
    """Every length (the folded 64/16-byte blocks and the tail), start alignment and running value."""
    assert _native.crc32(memoryview(data)[skip:], value) == zlib.crc32(data[skip:], value)


def test_compiled_crc32_is_zlibs_at_every_length_and_alignment():
    """Each length through the three paths' boundaries (64 and 256 bytes) and every remainder mod 16,
    at each of 16 start alignments."""
    data = random.Random(3).randbytes(600 + 16)
    view = memoryview(data)
    for skip in range(16):
        for n in range(600):
            want = zlib.crc32(data[skip : skip + n], 0x12345678)
            assert _native.crc32(view[skip : skip + n], 0x12345678) == want, (skip, n)


def _crc_rows(rec):
    return rec[rec["icrc"] != R.ABSENT]


def test_fast_path_verifies_hardware_accepted_packets():
    for name in CRC_OK:
        rec = _crc_rows(read_all(str(PUBLIC / name)))
        assert len(rec), name
        assert (rec["icrc"] == R.GOOD).all(), name
        native = rec[np.isin(rec["link"], (R.IB, R.IBGRH))]
        assert (native["vcrc"] == R.GOOD).all(), name


def test_fast_path_catches_a_flipped_bit_in_every_packet(tmp_path):
    """One random bit flipped in each packet's payload area (after the BTH, before the ICRC): every
    packet's ICRC (RoCE) or ICRC and VCRC (native IB) is then reported bad, none good."""
    rng = random.Random(7)
    for name in ("oferby_proxy_roce.pcap", "srinivas_infiniband.pcap", "m3_mlx_rocev1_test.pcap"):
        before = read_all(str(PUBLIC / name))
        frames = list(iter_frames(PUBLIC / name))
        out = tmp_path / name
        flipped = set()
        with PcapWriter(str(out), frames[0].linktype) as w:
            for f, r in zip(frames, before):
                data = bytearray(f.data)
                if r["icrc"] == R.GOOD and r["paylen"] > 0:
                    end = len(data) - (6 if r["link"] in (R.IB, R.IBGRH) else 4)
                    at = end - 1 - rng.randrange(int(r["paylen"]))
                    data[at] ^= 1 << rng.randrange(8)
                    flipped.add(f.number)
                w.write(bytes(data), f.time, f.wirelen)
        assert flipped, name
        after = read_all(str(out))
        hit = np.isin(after["frame"], list(flipped))
        assert (after["icrc"][hit] == R.BAD).all(), name
        native = hit & np.isin(after["link"], (R.IB, R.IBGRH))
        assert (after["vcrc"][native] == R.BAD).all(), name
        assert (after["icrc"][~hit] == before["icrc"][~hit]).all(), name
