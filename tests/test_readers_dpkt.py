"""ibwire's capture reader against dpkt's, an independent reader: the same number of frames, the same
timestamps to the nanosecond (microsecond files scaled) and the same original lengths, in every public
capture and every sample.  In ERF captures ibwire (as tshark) takes each frame's time from the ERF record,
finer than the pcap header's: the header's time is that time cut or rounded to the header's precision
(tshark shows the ERF time too)."""

from pathlib import Path

import dpkt
import pytest
from tshark_oracle import PUBLIC

from ibwire.decode.stream import Stream

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = sorted(PUBLIC.glob("*.pcap")) + sorted((ROOT / "captures").glob("*.pcap"))
NANO_MAGIC = 0xA1B23C4D
ERF = 197


def dpkt_frames(path) -> list:
    """(ns since the epoch, original length, captured length) of every record, read with dpkt's pcap
    headers (its Reader yields no original lengths)."""
    with open(path, "rb") as f:
        head = dpkt.pcap.LEFileHdr(f.read(24))
        scale = 1 if head.magic == NANO_MAGIC else 1000
        out = [scale, head.linktype]
        while True:
            raw = f.read(16)
            if len(raw) < 16:
                return out
            h = dpkt.pcap.LEPktHdr(raw)
            f.seek(h.caplen, 1)
            out.append((h.tv_sec * 10**9 + h.tv_usec * scale, h.len, h.caplen))


def ibwire_frames(path) -> list:
    out = []
    for batch in Stream(str(path), True):
        out += zip(batch.rec["time_ns"].tolist(), batch.pos.wirelen.tolist(), batch.pos.caplen.tolist())
    return out


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_reader_agrees_with_dpkt(path):
    scale, linktype, *theirs = dpkt_frames(path)
    with open(path, "rb") as f:  # dpkt's own Reader agrees on the count
        assert len(list(dpkt.pcap.Reader(f))) == len(theirs)
    ours = ibwire_frames(path)
    if linktype == ERF:  # the header's time: the ERF time cut or rounded to it
        assert all(abs(o[0] - t[0]) <= scale for o, t in zip(ours, theirs)), path.name
        ours, theirs = [o[1:] for o in ours], [t[1:] for t in theirs]
    assert ours == theirs
