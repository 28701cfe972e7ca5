"""Every container variant tshark writes reads the same: pcapng, nanosecond pcap, big-endian pcap."""

import random
import subprocess

import pytest
from tshark_oracle import PUBLIC

from ibwire.decode import decode_frame
from ibwire.files import iter_frames
from ibwire.files.capfile import Capture
from ibwire.files.writers import PcapngWriter

SRC = PUBLIC / "m3_nvme_host-echo_dump.pcap"


@pytest.mark.parametrize("fmt", ["pcapng", "nsecpcap", "modpcap"])
def test_editcap_variants_read_identically(tmp_path, fmt):
    out = tmp_path / f"x.{fmt}"
    subprocess.run(["editcap", "-F", fmt, SRC, out], check=True, capture_output=True)
    a = [decode_frame(f).flat for f in iter_frames(SRC)]
    b = [decode_frame(f).flat for f in iter_frames(out)]
    assert len(a) == len(b) == 69
    for x, y in zip(a, b):
        assert abs(x.pop("frame.time_epoch") - y.pop("frame.time_epoch")) < 1e-6
        # pcapng names each packet's interface (tshark's frame.interface_id); a pcap file has none
        assert "frame.interface_id" not in x and y.pop("frame.interface_id", 0) == 0
        assert x == y


def test_big_endian_pcap(tmp_path):
    import struct

    raw = SRC.read_bytes()
    out = bytearray(b"\xa1\xb2\xc3\xd4" + struct.pack(">HHiIII", *struct.unpack_from("<HHiIII", raw, 4)))
    off = 24
    while off < len(raw):
        hdr = struct.unpack_from("<IIII", raw, off)
        out += struct.pack(">IIII", *hdr) + raw[off + 16 : off + 16 + hdr[2]]
        off += 16 + hdr[2]
    path = tmp_path / "be.pcap"
    path.write_bytes(bytes(out))
    assert [f.data for f in iter_frames(path)] == [f.data for f in iter_frames(SRC)]


def _variants(tmp_path):
    """pcap, pcapng, Kuznetsov pcap, a pcap cut mid-record, a pcapng naming an undescribed interface."""
    yield SRC
    for fmt in ("pcapng", "modpcap"):
        out = tmp_path / f"x.{fmt}"
        subprocess.run(["editcap", "-F", fmt, SRC, out], check=True, capture_output=True)
        yield out
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(SRC.read_bytes()[:-30])
    yield cut
    odd = tmp_path / "odd.pcapng"
    w = PcapngWriter(str(odd))
    w.add_interface(1)
    for i, f in enumerate(iter_frames(SRC)):
        w.write(f.data, f.time, 3 if i % 7 == 3 else 0, flush=False)
    w.close()
    yield odd


def test_skipping_frames_reads_the_rest_identically(tmp_path):
    """Reading only some frames (as decode -Y does) gives those frames exactly as a full pass does, the
    first frame always, and the same damage reports."""
    rng = random.Random(3)
    for path in _variants(tmp_path):
        full = Capture(str(path))
        frames = list(full)
        for _ in range(5):
            want = sorted(rng.sample([f.number for f in frames], rng.randrange(len(frames) + 1)))
            part = Capture(str(path))
            got = list(part.frames(iter(want)))
            assert got == [f for f in frames if f.number == 1 or f.number in set(want)], path.name
            assert part.problems == full.problems, path.name


def test_one_erf_record_is_read_as_a_batch_of_them_is():
    """decode_frame reads an ERF record's header length and time without numpy (erf_view_one): the same as
    erf_view, on records cut at every length, with and without extension headers."""
    import numpy as np

    from ibwire.files.formats import erf_view, erf_view_one

    rnd = random.Random(197)
    for _ in range(20000):
        data = bytearray(rnd.randbytes(rnd.choice([0, 5, 15, 16, 17, 23, 24, 25, 31, 32, 40, 64, 100])))
        if len(data) > 8:
            data[8] = rnd.choice([21, 25, 2, 5, 0x80 | 21, 0x80 | 2, 0x80 | 5, rnd.randrange(256)])
        for off in range(16, len(data), 8):
            data[off] |= 0x80 if rnd.random() < 0.6 else 0
        data = bytes(data)
        whole = tuple(int(a[0]) for a in erf_view(np.frombuffer(data, np.uint8), [0], [len(data)]))
        assert erf_view_one(data) == whole, data.hex()
