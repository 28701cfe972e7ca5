"""Every container variant tshark writes reads the same: pcapng, nanosecond pcap, big-endian pcap."""
import subprocess

import pytest

from ibwire.decode import decode_frame
from ibwire.readers import iter_frames
from tshark_oracle import PUBLIC

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
        assert x == y


def test_big_endian_pcap(tmp_path):
    import struct
    raw = SRC.read_bytes()
    out = bytearray(b"\xa1\xb2\xc3\xd4" + struct.pack(">HHiIII", *struct.unpack_from("<HHiIII", raw, 4)))
    off = 24
    while off < len(raw):
        hdr = struct.unpack_from("<IIII", raw, off)
        out += struct.pack(">IIII", *hdr) + raw[off + 16:off + 16 + hdr[2]]
        off += 16 + hdr[2]
    path = tmp_path / "be.pcap"
    path.write_bytes(bytes(out))
    assert [f.data for f in iter_frames(path)] == [f.data for f in iter_frames(SRC)]
