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
